package admission

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
)

// instrumentationName names the tracer and meter of this package.
const instrumentationName = "github.com/admitter/admitter/admission"

// Decision values: the admitter.decision span attribute and the outcome label of
// admitter.decisions.
const (
	DecisionAdmitted = "admitted" // the limiter let it through: forwarded
	DecisionDelayed  = "delayed"  // the limiter said wait: NAK'd with the wait
	DecisionDead     = "dead"     // dead-lettered
	DecisionDegraded = "degraded" // the limiter failed, fail mode open: forwarded unchecked
	DecisionHeld     = "held"     // the limiter failed, fail mode closed: NAK'd with a backoff
)

// Span attribute keys of admitter's own (the messaging ones follow OpenTelemetry's semantic
// conventions).
const (
	AttrTenant   = attribute.Key("admitter.tenant")
	AttrPlan     = attribute.Key("admitter.plan")
	AttrWeight   = attribute.Key("admitter.weight")
	AttrDecision = attribute.Key("admitter.decision")
	AttrWaitMs   = attribute.Key("admitter.wait_ms")
	AttrLimit    = attribute.Key("admitter.limit")
	AttrAttempt  = attribute.Key("admitter.attempt")
	AttrOutcome  = attribute.Key("admitter.outcome")
	AttrError    = attribute.Key("admitter.error")
	AttrSequence = attribute.Key("messaging.nats.stream.sequence")
	// AttrParked marks a delayed job kept in process until its slot rather than NAK'd.
	AttrParked = attribute.Key("admitter.parked")
)

// Bucket boundaries of the histograms, in seconds.
var (
	// waitBuckets span 1ms to 1h.
	waitBuckets = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}
	// latencyBuckets resolve below a millisecond: a decision is one Redis round trip.
	latencyBuckets = []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}
)

// telemetry holds the service's tracer, propagator and instruments.
type telemetry struct {
	tracer      trace.Tracer
	propagator  propagation.TextMapPropagator
	processName string // span names, built once: "process JOBS", "send ADMITTED"
	sendOutName string
	decisions   metric.Int64Counter
	waits       metric.Float64Histogram
	latency     metric.Float64Histogram
	limiterErrs metric.Int64Counter
	failEvents  metric.Int64Counter
	inFlight    metric.Int64UpDownCounter
	tenantLabel bool
	// sets caches the attribute set of each (plan, outcome[, tenant]): building one sorts and
	// allocates, once per job otherwise. A struct key is looked up without allocating.
	mu   sync.RWMutex
	sets map[setKey]metric.MeasurementOption
}

type setKey struct{ plan, outcome, tenant string }

func newTelemetry(c Config) (*telemetry, error) {
	m := c.MeterProvider.Meter(instrumentationName)
	t := &telemetry{tracer: c.TracerProvider.Tracer(instrumentationName), propagator: c.Propagator, tenantLabel: c.TenantMetrics,
		processName: "process " + c.StreamIn, sendOutName: "send " + c.StreamOut, sets: make(map[setKey]metric.MeasurementOption)}
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	t.decisions, err = m.Int64Counter("admitter.decisions", metric.WithDescription("Decisions by plan and outcome (admitted, delayed, dead, degraded, held)."))
	add(err)
	t.waits, err = m.Float64Histogram("admitter.wait", metric.WithUnit("s"), metric.WithDescription("Wait given to delayed jobs."), metric.WithExplicitBucketBoundaries(waitBuckets...))
	add(err)
	t.latency, err = m.Float64Histogram("admitter.decision.duration", metric.WithUnit("s"), metric.WithDescription("Time one limiter decision took."), metric.WithExplicitBucketBoundaries(latencyBuckets...))
	add(err)
	t.limiterErrs, err = m.Int64Counter("admitter.redis.errors", metric.WithDescription("Failed limiter calls by kind (timeout, connection, other)."))
	add(err)
	t.failEvents, err = m.Int64Counter("admitter.fail_mode.events", metric.WithDescription("Jobs handled without a decision, by fail mode (open: forwarded, closed: held back)."))
	add(err)
	t.inFlight, err = m.Int64UpDownCounter("admitter.jobs.in_flight", metric.WithDescription("Jobs being handled now."))
	add(err)
	return t, errors.Join(errs...)
}

// headerCarrier lets OpenTelemetry propagators read and write NATS headers.
type headerCarrier nats.Header

func (h headerCarrier) Get(key string) string { return nats.Header(h).Get(key) }
func (h headerCarrier) Set(key, value string) { nats.Header(h).Set(key, value) }
func (h headerCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}

// errorKind classifies a failed limiter call for admitter.redis.errors.
func errorKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded):
		return "timeout"
	case errors.As(err, &ne) || errors.Is(err, net.ErrClosed):
		return "connection"
	}
	return "other"
}

// record counts one finished decision.
func (t *telemetry) record(ctx context.Context, j *job, decision string, wait time.Duration) {
	plan := ""
	if j.plan != nil {
		plan = j.plan.Name
	}
	key := setKey{plan: plan, outcome: decision}
	if t.tenantLabel {
		key.tenant = j.tenant
	}
	t.mu.RLock()
	set, ok := t.sets[key]
	t.mu.RUnlock()
	if !ok {
		attrs := []attribute.KeyValue{attribute.String("outcome", decision), attribute.String("plan", plan)}
		if t.tenantLabel {
			attrs = append(attrs, attribute.String("tenant", j.tenant))
		}
		set = metric.WithAttributeSet(attribute.NewSet(attrs...))
		t.mu.Lock()
		t.sets[key] = set
		t.mu.Unlock()
	}
	t.decisions.Add(ctx, 1, set)
	if decision == DecisionDelayed {
		t.waits.Record(ctx, wait.Seconds(), set)
	}
}

// decisionAttrs are the span attributes of a limiter result.
func decisionAttrs(res bucket.Result) []attribute.KeyValue {
	return []attribute.KeyValue{
		AttrOutcome.String(res.Outcome.String()),
		AttrLimit.String(res.Limit),
		AttrWaitMs.Float64(float64(res.Wait) / float64(time.Millisecond)),
		attribute.Int64("admitter.remaining", res.Remaining),
	}
}

// messagingAttrs are the semantic-convention attributes of a delivery or a publish.
func messagingAttrs(op attribute.KeyValue, subject, msgID string) []attribute.KeyValue {
	return []attribute.KeyValue{
		semconv.MessagingSystemKey.String("nats"),
		op,
		semconv.MessagingDestinationNameKey.String(subject),
		semconv.MessagingMessageIDKey.String(msgID),
	}
}
