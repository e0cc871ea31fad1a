package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"

	"github.com/admitter/admitter/policy"
	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.opentelemetry.io/otel/propagation"
)

// MaxInFlight bounds the NATS decisions being made at once by one service. A micro endpoint
// delivers its requests one at a time, and a decision waits for Redis: the service hands each
// to a goroutine of its own, up to this many, then stops reading until one finishes (requests
// wait in the subscription's pending buffer meanwhile).
const MaxInFlight = 1024

// ServiceConfig says where the NATS service listens.
type ServiceConfig struct {
	// Subject of the decide endpoint (default wire.DefaultDecideSubject). Replicas share it
	// through the micro queue group "q": each request is answered by one of them.
	Subject string
	// Version is the service's semantic version, shown by `nats micro info` (default "0.0.0").
	Version string
	// Logger receives what cannot be answered (default slog.Default()).
	Logger *slog.Logger
}

// Service is the NATS micro service "admitter" with one endpoint, decide: a wire.DecideRequest
// in, a wire.Decision out (a denial is a normal reply with "allowed": false), or a refusal: the
// micro error headers (Nats-Service-Error-Code: the HTTP status, Nats-Service-Error: the detail)
// with a wire.ErrorBody. Replies carry the HTTP answer's headers too (Retry-After,
// RateLimit-Policy, RateLimit, Admit-Degraded). Discover it with `nats micro ls` or a request
// to $SRV.INFO.admitter.
//
// Start it with StartService and stop it with Stop; it does not own the connection.
type Service struct {
	nc   *nats.Conn
	pol  *policy.Policy
	log  *slog.Logger
	prop propagation.TextMapPropagator
	svc  micro.Service
	sem  chan struct{}
	mu   sync.Mutex
	stop bool           // Stop began: requests still delivered by the draining subscription are answered inline
	wg   sync.WaitGroup // decisions in flight on their own goroutines
}

// StartService registers the service on nc and starts answering.
func StartService(nc *nats.Conn, pol *policy.Policy, c ServiceConfig) (*Service, error) {
	if c.Subject == "" {
		c.Subject = wire.DefaultDecideSubject
	}
	if c.Version == "" {
		c.Version = "0.0.0"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	s := &Service{nc: nc, pol: pol, log: c.Logger, sem: make(chan struct{}, MaxInFlight),
		prop: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})}
	svc, err := micro.AddService(nc, micro.Config{
		Name:        wire.ServiceName,
		Version:     c.Version,
		Description: "admitter: synchronous rate-limit decisions under the plans the queue uses",
	})
	if err != nil {
		return nil, fmt.Errorf("api: nats service: %w", err)
	}
	if err := svc.AddEndpoint(wire.EndpointDecide, micro.HandlerFunc(s.handle), micro.WithEndpointSubject(c.Subject),
		micro.WithEndpointMetadata(map[string]string{"format": "application/json", "request": "wire.DecideRequest"})); err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("api: nats service endpoint %s on %q: %w", wire.EndpointDecide, c.Subject, err)
	}
	s.svc = svc
	return s, nil
}

// Micro is the underlying micro service (Info, Stats).
func (s *Service) Micro() micro.Service { return s.svc }

// Stop stops taking requests and waits, until ctx ends, for the decisions in flight to be
// answered. Stopping twice is safe.
func (s *Service) Stop(ctx context.Context) error {
	err := s.svc.Stop()
	s.mu.Lock()
	s.stop = true
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("api: nats service: decisions still in flight: %w", ctx.Err())
	}
	if err != nil {
		return fmt.Errorf("api: nats service stop: %w", err)
	}
	return nil
}

// handle runs on the endpoint's subscription, one request at a time: it hands the decision to
// a goroutine of its own (bounded by MaxInFlight) and returns. The answer is published to the
// reply subject directly rather than through req.Respond: micro reads what Respond records
// once handle returns, which another goroutine must not write. The micro stats therefore count
// requests, not errors.
func (s *Service) handle(req micro.Request) {
	data, reply, hdr := req.Data(), req.Reply(), nats.Header(req.Headers())
	s.mu.Lock()
	if s.stop {
		s.mu.Unlock()
		s.decide(data, reply, hdr)
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	s.sem <- struct{}{}
	go func() {
		defer func() { <-s.sem; s.wg.Done() }()
		s.decide(data, reply, hdr)
	}()
}

// decide answers one request.
func (s *Service) decide(data []byte, reply string, hdr nats.Header) {
	if reply == "" {
		return // a publish, not a request: nobody to answer
	}
	out := &nats.Msg{Subject: reply, Header: nats.Header{}}
	req, err := wire.ParseDecideRequest(data)
	if err != nil {
		var re *wire.RequestError
		errors.As(err, &re) // ParseDecideRequest returns nothing else
		microError(out, wire.HTTPStatus(re.Code()), re.Detail)
		out.Data = wire.ErrorBody{Error: re.Code(), Detail: re.Detail}.AppendJSON(nil)
	} else {
		ctx := s.prop.Extract(context.Background(), wire.HeaderCarrier(hdr))
		a := s.pol.Ask(ctx, wire.SourceNATS, req)
		a.Headers(out.Header.Set)
		if v := a.DegradedAs(); v != "" {
			out.Header.Set(wire.HeaderDegraded, v)
		}
		if a.Refused() {
			microError(out, a.Status(), a.Detail)
		}
		out.Data = a.AppendBody(nil)
	}
	if err := s.nc.PublishMsg(out); err != nil {
		s.log.Warn("nats decision: reply not sent", "reply", reply, "err", err)
	}
}

// microError makes out a micro error reply: the HTTP status as its code, the detail as its
// description.
func microError(out *nats.Msg, status int, detail string) {
	out.Header.Set(micro.ErrorCodeHeader, strconv.Itoa(status))
	out.Header.Set(micro.ErrorHeader, detail)
}
