package main

import (
	"context"
	"log/slog"
	"net/http"
	"regexp"
	"runtime/debug"
	"strings"
	"time"

	"github.com/admitter/admitter/api"
	"github.com/admitter/admitter/policy"
	"github.com/nats-io/nats.go"
)

// startAPI serves the HTTP decision API on c.APIAddr. Every handler is bounded: headers and body
// by the server's and the handler's read deadlines, the decision by ADMITTER_REDIS_TIMEOUT.
func startAPI(c *config, pol *policy.Policy, log *slog.Logger) (stop func(), err error) {
	srv := &http.Server{
		Handler:           api.NewHandler(pol),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       api.BodyTimeout + 5*time.Second,
		WriteTimeout:      api.BodyTimeout + api.WriteTimeout + 5*time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	stop, bound, err := serveOn("ADMITTER_API_ADDR", c.APIAddr, srv, log)
	if err != nil {
		return nil, err
	}
	log.Info("serving the decision API: POST /v1/decide, GET /v1/tenants/{tenant}", "addr", bound)
	return stop, nil
}

// startDecideService starts the NATS micro service "admitter" with its decide endpoint on
// c.APISubject; stop stops it and waits (bounded) for the decisions in flight.
func startDecideService(c *config, nc *nats.Conn, pol *policy.Policy, log *slog.Logger) (stop func(), err error) {
	svc, err := api.StartService(nc, pol, api.ServiceConfig{Subject: c.APISubject, Version: version(), Logger: log})
	if err != nil {
		return nil, err
	}
	log.Info("serving decisions over NATS: micro service admitter, endpoint decide", "subject", c.APISubject)
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := svc.Stop(ctx); err != nil {
			log.Warn("nats decision service stop", "err", err)
		}
	}, nil
}

// version is the module's version as built (v1.2.3 for a tagged build) without the leading v,
// or 0.0.0 for any other build: micro refuses what is not a semantic version.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v := strings.TrimPrefix(bi.Main.Version, "v"); release.MatchString(v) {
			return v
		}
	}
	return "0.0.0"
}

var release = regexp.MustCompile(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$`)
