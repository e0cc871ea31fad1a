package admission

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/admitter/admitter/activity"
	"github.com/admitter/admitter/policy"
	"github.com/admitter/admitter/subjects"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// Defaults of the zero Config fields.
const (
	DefaultAckWait = 30 * time.Second
	// DefaultMaxAckPending bounds the jobs being decided and forwarded at once. Waiting jobs do
	// not count: they are in their tenants' lanes, acknowledged on the input.
	DefaultMaxAckPending   = 10_000
	DefaultWorkers         = 128
	DefaultLaneWorkers     = 32
	DefaultLaneBatch       = 64
	DefaultInFlightBytes   = 32 << 20
	DefaultShutdownTimeout = 10 * time.Second
	DefaultDuplicateWindow = 2 * time.Minute
	DefaultOutMaxAge       = 24 * time.Hour
	DefaultDeadMaxAge      = 14 * 24 * time.Hour
)

// Config is everything the service needs. Fields marked required have no default.
type Config struct {
	// JetStream is the connection's JetStream context (required).
	JetStream jetstream.JetStream
	// Policy decides (required).
	Policy *policy.Policy
	// In, Out, Dead and Wait are the subject templates (required). Out and Dead carry In's
	// wildcards; Wait is the lanes' subject, {tenant} and literals only.
	In, Out, Dead, Wait subjects.Template
	// StreamIn, StreamOut, StreamDead and StreamWait name the streams (defaults JOBS, ADMITTED,
	// DEAD, WAITING).
	StreamIn, StreamOut, StreamDead, StreamWait string
	// Consumer names the ingest consumer shared by all replicas (default "admitter"), and with
	// it the replicas' bucket (<Consumer>_replicas).
	Consumer string
	// AckWait is the ingest consumer's ack wait (default 30s): the time a job may take to be
	// decided and forwarded or moved before JetStream gives it to another replica.
	AckWait time.Duration
	// MaxAckPending is the ingest consumer's window (default 10,000): jobs being decided,
	// forwarded or moved, never jobs waiting for their plan.
	MaxAckPending int
	// Workers is how many tenants' batches are decided at once (default 128). A worker mostly
	// waits for the limiter and the PubAcks.
	Workers int
	// PullBuffer is how many jobs are pulled ahead of the workers (default 8 × Workers), at most
	// half of InFlightBytes in payload per pull. A deep buffer lets the jobs of tenants within
	// their plans get past a flood of another tenant's while it is moved to its lane.
	PullBuffer int
	// InFlightBytes bounds the payload bytes held at once by ingest, and by lanes (default 32
	// MiB each): pulling stops while it is reached.
	InFlightBytes int
	// LaneWorkers is how many lanes take a step at once (default 32); LaneBatch how many jobs a
	// step reads and decides at most (default 64).
	LaneWorkers, LaneBatch int
	// Heartbeat is how often the replica announces itself (default 1s); one not heard from for
	// three heartbeats is taken for dead and its lanes are taken over.
	Heartbeat time.Duration
	// Replica names this replica among the others (default: a random id).
	Replica string
	// ShutdownTimeout bounds how long Run settles jobs in flight after its context ends
	// (default 10s).
	ShutdownTimeout time.Duration
	// DuplicateWindow is the dedupe window of the streams the service creates (default 2m, at
	// least AckWait + DuplicateMargin).
	DuplicateWindow time.Duration
	// Replicas is how many servers of a NATS cluster hold each stream and bucket the service
	// creates (default 1).
	Replicas int
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
	// TenantMetrics adds a tenant label to the decision and wait metrics. Off by default: one
	// series per tenant can be a lot.
	TenantMetrics bool
	// Done and Renew are where workers end and extend the leases of forwarded jobs whose plan
	// has a concurrency limit (see leases.go): subjects with {tenant}; the zero Template turns the
	// path off.
	Done, Renew subjects.Template
	// LeaseAcks releases a forwarded job's lease when a consumer of the output stream acks it
	// (sampled acks: the consumer's SampleFrequency "100%") or terminates it.
	LeaseAcks bool
	// LeaseWorkers bounds the lease messages handled at once (default 8); LeaseBuffer the ones
	// waiting for a worker (default 4096; past it they are dropped, and the leases end by
	// themselves).
	LeaseWorkers, LeaseBuffer int
	// Activity receives every job's decision as it is applied, and every lane's head told to
	// wait on (default: none); *activity.Index implements it. It must not block.
	Activity Recorder
}

// Recorder is told what the queue decided (see Config.Activity).
type Recorder interface {
	Record(activity.Event)
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
	def(&c.StreamWait, "WAITING")
	def(&c.Consumer, "admitter")
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
		c.PullBuffer = 8 * c.Workers
	}
	if c.InFlightBytes <= 0 {
		c.InFlightBytes = DefaultInFlightBytes
	}
	if c.LaneWorkers <= 0 {
		c.LaneWorkers = DefaultLaneWorkers
	}
	if c.LaneBatch <= 0 {
		c.LaneBatch = DefaultLaneBatch
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.DuplicateWindow <= 0 {
		c.DuplicateWindow = DefaultDuplicateWindow
	}
	if c.Replicas <= 0 {
		c.Replicas = 1
	}
	if c.LeaseWorkers <= 0 {
		c.LeaseWorkers = 8
	}
	if c.LeaseBuffer <= 0 {
		c.LeaseBuffer = 4096
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
	case c.Policy == nil:
		return fmt.Errorf("%w: no policy", ErrConfig)
	case c.In.String() == "" || c.Out.String() == "" || c.Dead.String() == "" || c.Wait.String() == "":
		return fmt.Errorf("%w: the in, out, dead and wait subject templates are required", ErrConfig)
	case c.MaxAckPending < -1:
		return fmt.Errorf("%w: max ack pending must be -1 (unlimited) or ≥ 1, got %d", ErrConfig, c.MaxAckPending)
	case c.AckWait < time.Second:
		return fmt.Errorf("%w: ack wait must be at least 1s, got %v", ErrConfig, c.AckWait)
	case c.LaneBatch > 512:
		return fmt.Errorf("%w: lane batch must be at most 512, got %d", ErrConfig, c.LaneBatch)
	case !bucketName.MatchString(c.Consumer):
		return fmt.Errorf("%w: consumer name %q must be letters, digits, '-' or '_'", ErrConfig, c.Consumer)
	}
	return nil
}
