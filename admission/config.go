package admission

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/admitter/admitter/activity"
	"github.com/admitter/admitter/bucket"
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
	DefaultWorkers           = 32
	DefaultBatch             = 100
	DefaultQuantum           = 100
	DefaultDiscoveryInterval = time.Second
	DefaultInFlightBytes     = 32 << 20
	DefaultShutdownTimeout   = 10 * time.Second
	DefaultStallAfter        = 30 * time.Second
	DefaultDuplicateWindow   = 2 * time.Minute
	DefaultOutMaxAge         = 24 * time.Hour
	DefaultDeadMaxAge        = 14 * 24 * time.Hour
)

// Config is everything the service needs. Fields marked required have no default.
type Config struct {
	// JetStream is the connection's JetStream context (required).
	JetStream jetstream.JetStream
	// Policy decides (required).
	Policy *policy.Policy
	// In, Out and Dead are the subject templates (required); Out and Dead carry In's wildcards.
	// Wait is the tenants' lanes of an earlier version ({tenant} and literals only): jobs left
	// there are forwarded first, in order (required: the default is jobs.waiting.{tenant}).
	In, Out, Dead, Wait subjects.Template
	// StreamIn, StreamOut, StreamDead and StreamWait name the streams (defaults JOBS, ADMITTED,
	// DEAD, WAITING; WAITING is only read, when an earlier version left it).
	StreamIn, StreamOut, StreamDead, StreamWait string
	// Consumer names the replicas' buckets (default "admitter": <Consumer>_owners and
	// <Consumer>_limiter); an input consumer of an earlier version by that name is deleted.
	Consumer string
	// Partitions is how many streams the input is spread over (default 1: StreamIn alone), by
	// the NATS server's account mapping (subjects.Partitions.Mapping; an embedded server is given
	// it by the caller): each is read by one replica, which runs its tenants' queues. Changing it
	// leaves the jobs of the earlier streams where they are: forwarded first, in order.
	Partitions int
	// Workers is how many tenants' queues take a step at once (default 32). A step mostly waits
	// for a read, the limiter and the PubAcks.
	Workers int
	// Batch is how many jobs a step reads and decides at most (default 100, at most 512).
	Batch int
	// Quantum is the weight a queue may admit per turn when more queues may go than the
	// workers serve (default 100): the round robin's quantum (see queues.go).
	Quantum int
	// DiscoveryInterval is how often the input's subjects are listed (default 1s): to count the
	// jobs waiting, and, on a work-queue input without a feed, to find the tenants with jobs.
	// A replica that takes tenants over lists them at once.
	DiscoveryInterval time.Duration
	// InFlightBytes bounds the payload bytes held at once (default 32 MiB): a step reads at most
	// InFlightBytes / Workers (at least 1 MiB).
	InFlightBytes int
	// Heartbeat is how often the replica announces itself and renews the leases of the
	// partitions it reads (default 1s); a lease not renewed for three heartbeats ends, and
	// another replica takes its partition over.
	Heartbeat time.Duration
	// Replica names this replica among the others (default: a random id).
	Replica string
	// ShutdownTimeout bounds how long Run settles the steps under way after its context ends
	// (default 10s).
	ShutdownTimeout time.Duration
	// StallAfter is how long a tenant's queue with jobs may go without a step that ends (a
	// decision) before the replica is not ready (default 30s): a step stuck, or no worker free
	// to take it.
	StallAfter time.Duration
	// DuplicateWindow is the dedupe window of the streams the service publishes to (default
	// 2m): a forward repeated within it (its replica died after publishing it and before
	// removing its job) is stored once.
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
	// Activity receives every job's decision as it is applied, and every head of a queue told
	// to wait on (default: none); *activity.Index implements it. It must not block.
	Activity Recorder
	// Fallback, when set, is the limiter of fail mode local (a *bucket.Fallback): while Redis is
	// away, the service routes to each tenant's queue owner the requests and lease messages
	// other replicas receive for it, and a pool's slots to one replica (bucket.Router), over
	// NATS on _ADMITTER.<Consumer>.fallback.<replica>.
	Fallback Fallback
}

// Fallback is the side of a bucket.Fallback the service routes for (see Config.Fallback).
type Fallback interface {
	Route(r bucket.Router, plans func() *bucket.Plans)
	Serve(ctx context.Context, req []byte) []byte
	Probe()
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
	if c.Workers <= 0 {
		c.Workers = DefaultWorkers
	}
	if c.Batch <= 0 {
		c.Batch = DefaultBatch
	}
	if c.Quantum <= 0 {
		c.Quantum = DefaultQuantum
	}
	if c.DiscoveryInterval <= 0 {
		c.DiscoveryInterval = DefaultDiscoveryInterval
	}
	if c.InFlightBytes <= 0 {
		c.InFlightBytes = DefaultInFlightBytes
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.StallAfter <= 0 {
		c.StallAfter = DefaultStallAfter
	}
	if c.DuplicateWindow <= 0 {
		c.DuplicateWindow = DefaultDuplicateWindow
	}
	if c.Replicas <= 0 {
		c.Replicas = 1
	}
	if c.Partitions <= 0 {
		c.Partitions = 1
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
	case c.Batch > bucket.MaxBatch:
		return fmt.Errorf("%w: batch must be at most %d, got %d", ErrConfig, bucket.MaxBatch, c.Batch)
	case !bucketName.MatchString(c.Consumer):
		return fmt.Errorf("%w: consumer name %q must be letters, digits, '-' or '_'", ErrConfig, c.Consumer)
	}
	return nil
}
