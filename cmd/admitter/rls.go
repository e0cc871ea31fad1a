package main

import (
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/admitter/admitter/policy"
	"github.com/admitter/admitter/rls"
	"github.com/admitter/admitter/wire"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// rlsMaxStreams bounds the calls one Envoy connection has in flight at once (Envoy multiplexes
// its calls over a few HTTP/2 connections); beyond it, calls wait for a stream.
const rlsMaxStreams = 1024

// startRLS serves Envoy's rate limit service (envoy.service.ratelimit.v3.RateLimitService) on
// c.RLSAddr, over gRPC without TLS, with the standard health service (grpc.health.v1) saying
// SERVING for it and for the server until stop. A call is at most wire.MaxRequestBytes, as a
// body of the HTTP API, and each of its decisions is bounded by ADMITTER_REDIS_TIMEOUT and by
// Envoy's own timeout on the call. stop says NOT_SERVING, stops taking calls and waits up to 2 s
// for those in flight before ending them; stopping twice is safe.
func startRLS(c *config, pol *policy.Policy, log *slog.Logger) (stop func(), err error) {
	svc, err := rls.New(pol, rls.Config{Domain: c.RLSDomain, DescriptorKey: c.RLSDescriptorKey})
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", c.RLSAddr)
	if err != nil {
		return nil, fmt.Errorf("%w: ADMITTER_RLS_ADDR: %w", errConfig, err)
	}
	srv := grpc.NewServer(
		grpc.MaxRecvMsgSize(wire.MaxRequestBytes),
		grpc.MaxConcurrentStreams(rlsMaxStreams),
		grpc.ConnectionTimeout(5*time.Second),
	)
	svc.Register(srv)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(l); err != nil {
			log.Error("rate limit service", "variable", "ADMITTER_RLS_ADDR", "err", err)
		}
	}()
	log.Info("serving Envoy's rate limit service: envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
		"addr", l.Addr().String(), "domain", c.RLSDomain, "descriptor_key", c.RLSDescriptorKey)
	var once sync.Once
	return func() {
		once.Do(func() {
			hs.Shutdown()
			stopped := make(chan struct{})
			go func() { srv.GracefulStop(); close(stopped) }()
			select {
			case <-stopped:
			case <-time.After(2 * time.Second):
				log.Warn("rate limit service stop: calls still in flight after 2s, ending them")
				srv.Stop()
				<-stopped
			}
			<-done
		})
	}, nil
}
