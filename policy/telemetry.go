package policy

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"time"

	"github.com/admitter/admitter/wire"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// instrumentationName names the tracer and meter of this package.
const instrumentationName = "github.com/admitter/admitter/policy"

// Span attribute keys of admitter's own, on every decision's span (package admission uses the
// same keys for jobs).
const (
	AttrSource    = attribute.Key("admitter.source")
	AttrTenant    = attribute.Key("admitter.tenant")
	AttrPlan      = attribute.Key("admitter.plan")
	AttrWeight    = attribute.Key("admitter.weight")
	AttrDecision  = attribute.Key("admitter.decision")
	AttrWaitMs    = attribute.Key("admitter.wait_ms") // for shadow_delayed: the wait the plan would have given
	AttrLimit     = attribute.Key("admitter.limit")
	AttrRemaining = attribute.Key("admitter.remaining")
	AttrError     = attribute.Key("admitter.error")
)

// ErrorKind classifies a failed limiter call for the redis errors metric: timeout, connection
// or other.
func ErrorKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded):
		return "timeout"
	case errors.As(err, &ne) || errors.Is(err, net.ErrClosed):
		return "connection"
	}
	return "other"
}

// telemetry records the synchronous decisions: one "limiter decide" span each, and the
// decisions, decision duration, redis errors and fail mode metrics under the names the queue
// uses (wire.Metric*), with a source label.
type telemetry struct {
	tracer      trace.Tracer
	decisions   metric.Int64Counter
	latency     metric.Float64Histogram
	limiterErrs metric.Int64Counter
	failEvents  metric.Int64Counter
	failMode    metric.MeasurementOption
	tenantLabel bool
	// sets caches the attribute set of each (source, plan, outcome[, tenant]): building one sorts
	// and allocates. A struct key is looked up without allocating.
	mu   sync.RWMutex
	sets map[setKey]metric.MeasurementOption
}

type setKey struct {
	source                wire.Source
	plan, outcome, tenant string
}

func newTelemetry(c Config) (*telemetry, error) {
	tp, mp := c.TracerProvider, c.MeterProvider
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	m := mp.Meter(instrumentationName)
	t := &telemetry{tracer: tp.Tracer(instrumentationName), tenantLabel: c.TenantMetrics, sets: map[setKey]metric.MeasurementOption{},
		failMode: metric.WithAttributeSet(attribute.NewSet(attribute.String("mode", string(c.FailMode))))}
	var errs [4]error
	t.decisions, errs[0] = m.Int64Counter(wire.MetricDecisions.Name, metric.WithDescription(wire.MetricDecisions.Help))
	t.latency, errs[1] = m.Float64Histogram(wire.MetricDecisionTime.Name, metric.WithUnit("s"), metric.WithDescription(wire.MetricDecisionTime.Help),
		metric.WithExplicitBucketBoundaries(wire.DecisionDurationBuckets...))
	t.limiterErrs, errs[2] = m.Int64Counter(wire.MetricRedisErrors.Name, metric.WithDescription(wire.MetricRedisErrors.Help))
	t.failEvents, errs[3] = m.Int64Counter(wire.MetricFailEvents.Name, metric.WithDescription(wire.MetricFailEvents.Help))
	return t, errors.Join(errs[:]...)
}

// start starts a decision's span, a child of whatever span ctx carries (the caller's, or one
// extracted from the request's trace context).
func (t *telemetry) start(ctx context.Context) (context.Context, trace.Span) {
	return t.tracer.Start(ctx, "limiter decide", trace.WithSpanKind(trace.SpanKindClient))
}

// record ends a decision's span with what it decided and counts it.
func (t *telemetry) record(ctx context.Context, span trace.Span, a *Answer) {
	decision := a.Decision()
	plan := ""
	if a.Plan != nil {
		plan = a.Plan.Name
	}
	if span.IsRecording() { // attributes cost allocations: only for spans that are kept
		span.SetAttributes(AttrSource.String(string(a.Source)), AttrTenant.String(a.Tenant), AttrPlan.String(plan),
			AttrWeight.Int64(a.Weight), AttrDecision.String(decision), AttrWaitMs.Float64(float64(max(a.Wait, a.ShadowWait))/float64(time.Millisecond)),
			AttrLimit.String(a.Limit), AttrRemaining.Int64(a.Remaining))
		if a.Code != "" {
			span.SetAttributes(AttrError.String(string(a.Code)))
		}
	}
	if a.Err != nil {
		span.RecordError(a.Err)
		span.SetStatus(codes.Error, "limiter failed")
		t.limiterErrs.Add(ctx, 1, metric.WithAttributes(attribute.String("kind", ErrorKind(a.Err))))
		t.failEvents.Add(ctx, 1, t.failMode)
	}
	if a.Local {
		t.failEvents.Add(ctx, 1, t.failMode)
	}
	span.End()
	if a.Took > 0 {
		t.latency.Record(ctx, a.Took.Seconds())
	}
	key := setKey{source: a.Source, plan: plan, outcome: decision}
	if t.tenantLabel && a.Plan != nil { // a name without a plan is not a tenant: no series for it
		key.tenant = a.Tenant
	}
	t.mu.RLock()
	set, ok := t.sets[key]
	t.mu.RUnlock()
	if !ok {
		attrs := []attribute.KeyValue{attribute.String("source", string(a.Source)), attribute.String("plan", plan), attribute.String("outcome", decision)}
		if t.tenantLabel {
			attrs = append(attrs, attribute.String("tenant", key.tenant))
		}
		set = metric.WithAttributeSet(attribute.NewSet(attrs...))
		t.mu.Lock()
		t.sets[key] = set
		t.mu.Unlock()
	}
	t.decisions.Add(ctx, 1, set)
}
