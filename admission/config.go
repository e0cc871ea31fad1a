package admission

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/subjects"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// Limiter decides whether a job may run now; *bucket.Redis and *bucket.Memory implement it.
type Limiter interface {
	Decide(ctx context.Context, req bucket.Request) (bucket.Result, error)
}

var (
	_ Limiter = (*bucket.Redis)(nil)
	_ Limiter = (*bucket.Memory)(nil)
)

// FailMode says what to do with a job when the limiter fails (Redis down or slow).
type FailMode string

const (
	// FailOpen forwards the job without a decision, marked Admit-Degraded: fail-open.
	FailOpen FailMode = "open"
	// FailClosed delays the job with an exponential backoff with jitter until the limiter
	// answers again.
	FailClosed FailMode = "closed"
)

// Defaults of the zero Config fields.
const (
	DefaultDecisionTimeout = 250 * time.Millisecond
	DefaultAckWait         = 30 * time.Second
	// DefaultMaxAckPending is generous on purpose: a job delayed with NakWithDelay keeps its
	// ack-pending slot until it is redelivered, so one throttled tenant can fill the window, and
	// once it is full the consumer hands out nothing new to anyone.
	DefaultMaxAckPending   = 50_000
	DefaultWorkers         = 128
	DefaultShutdownTimeout = 10 * time.Second
	DefaultDuplicateWindow = 2 * time.Minute
	DefaultOutMaxAge       = 24 * time.Hour
	DefaultDeadMaxAge      = 14 * 24 * time.Hour
)

// Config is everything the service needs. Fields marked required have no default.
type Config struct {
	// JetStream is the connection's JetStream context (required).
	JetStream jetstream.JetStream
	// Limiter decides (required).
	Limiter Limiter
	// Plans maps tenants to plans (required).
	Plans *bucket.Plans
	// In, Out and Dead are the subject templates (required); Out and Dead carry In's wildcards.
	In, Out, Dead subjects.Template
	// StreamIn, StreamOut and StreamDead name the streams (defaults JOBS, ADMITTED, DEAD).
	StreamIn, StreamOut, StreamDead string
	// Consumer is the durable consumer shared by all replicas (default "admitter").
	Consumer string
	// FailMode applies when the limiter fails (default FailOpen).
	FailMode FailMode
	// DecisionTimeout bounds one decision (default 250ms).
	DecisionTimeout time.Duration
	// AckWait is the consumer's ack wait (default 30s).
	AckWait time.Duration
	// MaxAckPending is the consumer's window of unacknowledged jobs, delayed ones included
	// (default 50,000).
	MaxAckPending int
	// Workers is how many jobs are processed at once (default 128). A worker mostly waits for the
	// limiter's answer, so more workers mean more decisions in flight: measured end to end on 2
	// cores, 32 workers 23k jobs/s, 128 31k, 256 34k.
	Workers int
	// PullBuffer is how many jobs are pulled ahead of the workers (default Workers). Pulled jobs
	// already count against AckWait, so keep it small.
	PullBuffer int
	// ShutdownTimeout bounds how long Run settles in-flight jobs after its context ends
	// (default 10s).
	ShutdownTimeout time.Duration
	// DuplicateWindow is the output stream's dedupe window when the service creates it
	// (default 2m).
	DuplicateWindow time.Duration
	// Logger receives state changes and dead letters (default slog.Default()).
	Logger *slog.Logger
	// Now reads the clock for Admit-Delay-Ms (default time.Now).
	Now func() time.Time
	// TracerProvider traces every decision (default: none). The service never reads the global
	// provider.
	TracerProvider trace.TracerProvider
	// MeterProvider receives the service's metrics (default: none).
	MeterProvider metric.MeterProvider
	// Propagator reads trace context from input headers and writes it into forwarded ones
	// (default: W3C trace context and baggage).
	Propagator propagation.TextMapPropagator
	// ParkMax is the longest wait for which a delayed job is kept in process until its slot
	// instead of being NAK'd with the wait (see parking); 0 NAKs every delay. Set it at least to
	// the limiter's horizon to park every delay.
	ParkMax time.Duration
	// TenantMetrics adds a tenant label to the decision and wait metrics. Off by default: one
	// series per tenant can be a lot.
	TenantMetrics bool
}

// withDefaults returns the config with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.StreamIn, "JOBS")
	def(&c.StreamOut, "ADMITTED")
	def(&c.StreamDead, "DEAD")
	def(&c.Consumer, "admitter")
	if c.FailMode == "" {
		c.FailMode = FailOpen
	}
	if c.DecisionTimeout <= 0 {
		c.DecisionTimeout = DefaultDecisionTimeout
	}
	if c.AckWait <= 0 {
		c.AckWait = DefaultAckWait
	}
	if c.MaxAckPending == 0 {
		c.MaxAckPending = DefaultMaxAckPending
	}
	if c.Workers <= 0 {
		c.Workers = DefaultWorkers
	}
	if c.PullBuffer <= 0 {
		c.PullBuffer = c.Workers
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.DuplicateWindow <= 0 {
		c.DuplicateWindow = DefaultDuplicateWindow
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.TracerProvider == nil {
		c.TracerProvider = tracenoop.NewTracerProvider()
	}
	if c.MeterProvider == nil {
		c.MeterProvider = metricnoop.NewMeterProvider()
	}
	if c.Propagator == nil {
		c.Propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	}
	return c
}

// validate checks what defaults cannot fix.
func (c Config) validate() error {
	switch {
	case c.JetStream == nil:
		return fmt.Errorf("%w: no JetStream context", ErrConfig)
	case c.Limiter == nil:
		return fmt.Errorf("%w: no limiter", ErrConfig)
	case c.Plans == nil:
		return fmt.Errorf("%w: no plans", ErrConfig)
	case c.In.String() == "" || c.Out.String() == "" || c.Dead.String() == "":
		return fmt.Errorf("%w: the in, out and dead subject templates are required", ErrConfig)
	case c.FailMode != FailOpen && c.FailMode != FailClosed:
		return fmt.Errorf("%w: fail mode must be open or closed, got %q", ErrConfig, c.FailMode)
	case c.MaxAckPending < -1:
		return fmt.Errorf("%w: max ack pending must be -1 (unlimited) or ≥ 1, got %d", ErrConfig, c.MaxAckPending)
	case c.AckWait < time.Second:
		return fmt.Errorf("%w: ack wait must be at least 1s, got %v", ErrConfig, c.AckWait)
	case c.ParkMax < 0:
		return fmt.Errorf("%w: park max must be ≥ 0, got %v", ErrConfig, c.ParkMax)
	case c.AckWait < 4*c.DecisionTimeout:
		return fmt.Errorf("%w: ack wait %v leaves too little room for a decision timeout of %v (want ack wait ≥ 4× the timeout)", ErrConfig, c.AckWait, c.DecisionTimeout)
	}
	return nil
}
