package admission

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/policy"
	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
)

// instrumentationName names the tracer and meter of this package.
const instrumentationName = "github.com/admitter/admitter/admission"

// Span attribute keys of admitter's own (the messaging ones follow OpenTelemetry's semantic
// conventions); those of every decision are policy's.
const (
	AttrTenant   = policy.AttrTenant
	AttrPlan     = policy.AttrPlan
	AttrWeight   = policy.AttrWeight
	AttrDecision = policy.AttrDecision
	AttrWaitMs   = policy.AttrWaitMs
	AttrLimit    = policy.AttrLimit
	AttrAttempt  = attribute.Key("admitter.attempt")
	AttrError    = policy.AttrError
	// AttrReason is the kind of the limit a waiting job waits for: bucket, window, quota or
	// concurrency; handover (policy.ReasonHandover): another replica holds its tenant's queue;
	// redeemed (policy.ReasonRedeemed): jobs admitted before, ahead of it, are settled first;
	// or pool (policy.ReasonPool): its plan's pool.
	AttrReason = attribute.Key("admitter.reason")
	// AttrPool is the pool of the job's plan (bucket.Pool).
	AttrPool = attribute.Key("admitter.pool")
	// AttrDegraded is a decision's wire.HeaderDegraded: local when made on the replica's copy
	// of the tenant's state while the limiter was unreachable.
	AttrDegraded = attribute.Key("admitter.degraded")
	AttrSequence = attribute.Key("messaging.nats.stream.sequence")
)

// Bucket boundaries of the histograms, in seconds.
var (
	// waitBuckets span 1ms to 1h.
	waitBuckets = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}
)

// telemetry holds the service's tracer, propagator and instruments.
type telemetry struct {
	tracer       trace.Tracer
	propagator   propagation.TextMapPropagator
	processIn    string // span names, built once: "process JOBS", "process WAITING"
	processWait  string
	sendNames    map[string]string // stream → "send <stream>"
	decisions    metric.Int64Counter
	waits        metric.Float64Histogram
	latency      metric.Float64Histogram
	limiterErrs  metric.Int64Counter
	failEvents   metric.Int64Counter
	leaseMsgs    metric.Int64Counter
	expired      metric.Int64Counter
	expiredJobs  metric.Int64Counter
	settleErrs   metric.Int64Counter
	lateForwards metric.Int64Counter
	giveBacks    metric.Int64Counter
	inFlight     metric.Int64UpDownCounter
	outcomes     metric.Int64Counter
	jobTime      metric.Float64Histogram
	tenantLabel  bool
	failMode     attribute.Set
	log          *slog.Logger
	// pools is every pool as this replica's last call found it (admitter_pool_* gauges), and
	// history a state a second of each (the console's chart).
	poolMu  sync.Mutex
	pools   map[string]bucket.PoolState
	history map[string]*poolSamples
	// sets caches the attribute set of each (plan, outcome[, tenant]): building one sorts and
	// allocates, once per job otherwise. A struct key is looked up without allocating.
	mu   sync.RWMutex
	sets map[setKey]metric.MeasurementOption
}

type setKey struct{ plan, outcome, tenant, reason string }

func newTelemetry(c Config) (*telemetry, error) {
	m := c.MeterProvider.Meter(instrumentationName)
	t := &telemetry{tracer: c.TracerProvider.Tracer(instrumentationName), propagator: c.Propagator, tenantLabel: c.TenantMetrics,
		processIn: "process " + c.StreamIn, processWait: "process " + c.StreamWait,
		sendNames: map[string]string{c.StreamOut: "send " + c.StreamOut, c.StreamDead: "send " + c.StreamDead, c.StreamWait: "send " + c.StreamWait},
		failMode:  attribute.NewSet(attribute.String("mode", string(c.Policy.FailMode()))), log: c.Logger,
		sets: make(map[setKey]metric.MeasurementOption)}
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	// The metrics the synchronous decisions record too (package policy) share their
	// descriptions and buckets, from wire.
	t.decisions, err = m.Int64Counter(wire.MetricDecisions.Name, metric.WithDescription(wire.MetricDecisions.Help))
	add(err)
	t.waits, err = m.Float64Histogram(wire.MetricWait.Name, metric.WithUnit("s"), metric.WithDescription("Time a delayed job was told its weight would fit, when first told to wait in its tenant's queue."), metric.WithExplicitBucketBoundaries(waitBuckets...))
	add(err)
	t.latency, err = m.Float64Histogram(wire.MetricDecisionTime.Name, metric.WithUnit("s"), metric.WithDescription(wire.MetricDecisionTime.Help), metric.WithExplicitBucketBoundaries(wire.DecisionDurationBuckets...))
	add(err)
	t.limiterErrs, err = m.Int64Counter(wire.MetricRedisErrors.Name, metric.WithDescription(wire.MetricRedisErrors.Help))
	add(err)
	t.failEvents, err = m.Int64Counter(wire.MetricFailEvents.Name, metric.WithDescription(wire.MetricFailEvents.Help))
	add(err)
	t.leaseMsgs, err = m.Int64Counter(wire.MetricLeaseMessages.Name, metric.WithDescription("Messages that end or extend a forwarded job's lease, by path (done, renew, ack, term) and result (released, renewed, not-held, no-lease, invalid, error)."))
	add(err)
	t.expired, err = m.Int64Counter(wire.MetricLeasesExpired.Name, metric.WithDescription("Leases of forwarded jobs that ended without being released (their slot freed by the lease's end)."))
	add(err)
	t.expiredJobs, err = m.Int64Counter(wire.MetricJobsExpired.Name, metric.WithDescription("Jobs dead-lettered expired (their bound on waiting, the plan's max_wait or their Admit-Max-Wait, passed or would pass before they fit), by plan and reason: the first word of what they waited for (a limit's kind, pool, breaker, downstream, handover, paused, held or unknown)."))
	add(err)
	t.settleErrs, err = m.Int64Counter(wire.MetricSettleErrors.Name, metric.WithDescription("Removals of settled jobs from the input (op purge) that failed: the server refused or did not answer; the limiter is told they were stored, and the removal is tried again."))
	add(err)
	t.lateForwards, err = m.Int64Counter(wire.MetricLateForwards.Name, metric.WithDescription("Forwards stored downstream 100 ms or more after their decision (a slow or failing-over output): their weight is charged to the tenant again before its next job is decided (pacing stays within C + r·t)."))
	add(err)
	t.giveBacks, err = m.Int64Counter(wire.MetricPoolGiveBacks.Name, metric.WithDescription("Pool grants a decision did not use that could not be given back (label pool): their slots stay taken until their leases end, the pool below its capacity meanwhile."))
	add(err)
	t.inFlight, err = m.Int64UpDownCounter(wire.MetricInFlight.Name, metric.WithDescription("Jobs being decided and published now."))
	add(err)
	t.outcomes, err = m.Int64Counter(wire.MetricJobOutcomes.Name, metric.WithDescription("Jobs done downstream, by pool (empty: the plan has none) and outcome (ok, failed, overloaded), as their done messages said (Admit-Outcome; a termination is failed, an ack ok)."))
	add(err)
	t.jobTime, err = m.Float64Histogram(wire.MetricJobTime.Name, metric.WithUnit("s"), metric.WithDescription("Time of a job downstream, from its forward (the take of its lease) to its done message, by pool."), metric.WithExplicitBucketBoundaries(wire.JobTimeBuckets...))
	add(err)
	return t, errors.Join(errs...)
}

// startProcess starts a job's consumer span, continuing the trace its headers carry (the
// producer's, or for a job read from an earlier version's lane, the span that moved it there).
func (t *telemetry) startProcess(ctx context.Context, name string, h nats.Header, subject, stream string, seq, attempts uint64, c Config) (context.Context, trace.Span) {
	ctx = t.propagator.Extract(ctx, wire.HeaderCarrier(h))
	ctx, span := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindConsumer))
	if span.IsRecording() { // attributes cost allocations: only for spans that are kept
		span.SetAttributes(messagingAttrs(semconv.MessagingOperationTypeProcess, subject, spanSeq(stream, seq))...)
		span.SetAttributes(
			semconv.MessagingDestinationTemplateKey.String(c.In.String()),
			semconv.MessagingConsumerGroupNameKey.String(c.Consumer),
			AttrSequence.Int64(int64(seq)),
			AttrAttempt.Int64(int64(attempts)),
		)
	}
	return ctx, span
}

// startDecide starts the "limiter decide" span of a step's call over jobs: a child of the first
// job's span, linked to the others'. decided ends it.
func (t *telemetry) startDecide(ctx context.Context, jobs []job) trace.Span {
	parent := ctx
	if len(jobs) > 0 {
		parent = jobs[0].ctx
	}
	var opts []trace.SpanStartOption
	if len(jobs) > 1 && trace.SpanFromContext(parent).IsRecording() {
		links := make([]trace.Link, 0, len(jobs)-1)
		for _, j := range jobs[1:] {
			links = append(links, trace.Link{SpanContext: j.span.SpanContext()})
		}
		opts = append(opts, trace.WithLinks(links...))
	}
	_, span := t.tracer.Start(parent, "limiter decide", append(opts, trace.WithSpanKind(trace.SpanKindClient))...)
	return span
}

// decided records what the limiter's call over jobs cost and what it decided (d), on the step's
// span (ended here), every job's span and the metrics.
func (t *telemetry) decided(ctx context.Context, span trace.Span, d policy.Decision, jobs []job, tenant string, pjobs []policy.Job) {
	defer span.End()
	if d.Took > 0 {
		t.latency.Record(ctx, d.Took.Seconds())
	}
	t.leasesExpired(ctx, d.LeasesExpired)
	if d.Pool != nil {
		t.poolSeen(*d.Pool)
	}
	if d.Err != nil {
		span.RecordError(d.Err)
		span.SetStatus(codes.Error, "limiter failed")
		t.limiterErrs.Add(ctx, 1, metric.WithAttributes(attribute.String("kind", policy.ErrorKind(d.Err))))
		undecided := 0 // forwarded without a decision or held (not dead, not paused)
		for _, v := range d.Verdicts {
			if v.Fate == wire.FateDegraded || v.Fate == wire.FateHeld {
				undecided++
			}
		}
		t.failEvents.Add(ctx, int64(undecided), metric.WithAttributeSet(t.failMode))
	}
	if d.Local {
		t.failEvents.Add(ctx, int64(len(jobs)), metric.WithAttributeSet(t.failMode))
		span.SetAttributes(AttrDegraded.String(wire.DegradedLocal))
	}
	if span.IsRecording() {
		span.SetAttributes(AttrTenant.String(tenant), AttrLimit.String(d.Limit),
			AttrReason.String(d.Reason), attribute.Int64("admitter.remaining", d.Remaining), attribute.Int("admitter.batch", len(jobs)))
	}
	for i := range jobs {
		if s := jobs[i].span; s.IsRecording() {
			v := d.Verdicts[i]
			s.SetAttributes(AttrTenant.String(tenant), AttrWeight.Int64(pjobs[i].Weight), AttrLimit.String(d.Limit),
				AttrDecision.String(v.Fate.String()), AttrWaitMs.Float64(float64(v.Wait)/float64(time.Millisecond)))
			if v.Fate.Waits() {
				s.SetAttributes(AttrReason.String(d.Reason))
			}
			if d.Plan != nil {
				s.SetAttributes(AttrPlan.String(d.Plan.Name))
			}
			if d.Pool != nil {
				s.SetAttributes(AttrPool.String(d.Pool.Name))
			}
			if v.Fate == wire.FateDead {
				s.SetAttributes(AttrError.String(string(v.Code)))
			}
		}
	}
}

// injectSend starts the producer span of a job's publish and writes its context into the
// message's headers, so the consumer of the output continues the trace. The span ends when
// the job is concluded.
func (t *telemetry) injectSend(j *job, m *nats.Msg, stream string) {
	ctx, span := t.tracer.Start(j.ctx, t.sendNames[stream], trace.WithSpanKind(trace.SpanKindProducer))
	if span.IsRecording() {
		span.SetAttributes(messagingAttrs(semconv.MessagingOperationTypeSend, m.Subject, m.Header.Get(nats.MsgIdHdr))...)
	}
	t.propagator.Inject(ctx, wire.HeaderCarrier(m.Header))
	span.End()
}

// conclude records a job's decision, verdict v under plan (reason: why it waits), on its span and
// in the metrics: its fate, counted once per job (a job that waited is counted delayed when first
// told to wait, then admitted when it goes).
func (t *telemetry) conclude(j *job, plan, reason string, v policy.Verdict) {
	fate := v.Fate
	decision := fate.String()
	j.span.SetAttributes(AttrDecision.String(decision))
	key := setKey{plan: plan, outcome: decision}
	if t.tenantLabel {
		key.tenant = j.tenant
	}
	if fate == wire.FateDelayed {
		key.reason = reason
	}
	t.mu.RLock()
	set, ok := t.sets[key]
	t.mu.RUnlock()
	if !ok {
		attrs := []attribute.KeyValue{attribute.String("source", string(wire.SourceQueue)), attribute.String("outcome", decision), attribute.String("plan", plan)}
		if t.tenantLabel {
			attrs = append(attrs, attribute.String("tenant", j.tenant))
		}
		if key.reason != "" {
			attrs = append(attrs, attribute.String("reason", key.reason))
		}
		set = metric.WithAttributeSet(attribute.NewSet(attrs...))
		t.mu.Lock()
		t.sets[key] = set
		t.mu.Unlock()
	}
	ctx := context.Background()
	t.decisions.Add(ctx, 1, set)
	if fate == wire.FateDelayed || fate == wire.FateShadowDelayed {
		t.waits.Record(ctx, v.Wait.Seconds(), set)
	}
}

// jobExpired counts a job of plan dead-lettered expired, waiting for waitedFor.
func (t *telemetry) jobExpired(j *job, plan, waitedFor string) {
	attrs := []attribute.KeyValue{attribute.String("plan", plan), attribute.String("reason", policy.WaitedForReason(waitedFor))}
	if t.tenantLabel {
		attrs = append(attrs, attribute.String("tenant", j.tenant))
	}
	t.expiredJobs.Add(context.Background(), 1, metric.WithAttributes(attrs...))
}

// giveBackFailed counts a decision whose unused pool grants could not be given back.
func (t *telemetry) giveBackFailed(ctx context.Context, pool string) {
	t.giveBacks.Add(ctx, 1, metric.WithAttributes(attribute.String("pool", pool)))
}

// settleError counts a removal of settled jobs that failed.
func (t *telemetry) settleError(op string) {
	t.settleErrs.Add(context.Background(), 1, metric.WithAttributes(attribute.String("op", op)))
}

// spanSeq is the messaging message id of a job: stream and sequence.
func spanSeq(stream string, seq uint64) string { return stream + ":" + strconv.FormatUint(seq, 10) }

// leasesExpired counts leases found ended unreleased.
func (t *telemetry) leasesExpired(ctx context.Context, n int64) {
	if n > 0 {
		t.expired.Add(ctx, n)
	}
}

// leaseMessage counts a message that ended or extended a lease.
func (t *telemetry) leaseMessage(ctx context.Context, path, result string) {
	t.leaseMsgs.Add(ctx, 1, leaseAttrs(path, result))
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

// poolSeen records a pool's state as a call found it, and logs a change of its breaker: the
// first this replica sees of each (calls made at once may report in any order: a state older
// than the latest change seen, by BreakerSince, changes nothing). It reports whether st closed
// the breaker.
func (t *telemetry) poolSeen(st bucket.PoolState) (closed bool) {
	t.poolMu.Lock()
	if t.pools == nil {
		t.pools = map[string]bucket.PoolState{}
		t.history = map[string]*poolSamples{}
	}
	prev, seen := t.pools[st.Name]
	newer := !seen || st.BreakerSince > prev.BreakerSince
	if st.BreakerSince >= prev.BreakerSince { // an older state's breaker is not shown again
		t.pools[st.Name] = st
	}
	h := t.history[st.Name]
	if h == nil {
		h = &poolSamples{}
		t.history[st.Name] = h
	}
	h.add(time.Now(), st)
	t.poolMu.Unlock()
	if !newer || (!seen && st.Breaker == bucket.BreakerClosed) || t.log == nil {
		return newer && seen && st.Breaker == bucket.BreakerClosed
	}
	attrs := []any{"pool", st.Name, "breaker", bucket.BreakerName(st.Breaker)}
	switch st.Breaker {
	case bucket.BreakerOpen:
		t.log.Warn("pool breaker open: most of its recent jobs failed or were overloaded; nothing is forwarded until the cool-down ends",
			append(attrs, "until", time.UnixMicro(st.BreakerUntil).UTC().Format(time.RFC3339))...)
	case bucket.BreakerHalfOpen:
		t.log.Info("pool breaker half-open: probe jobs go", attrs...)
	default:
		t.log.Info("pool breaker closed: its probe jobs came back ok", attrs...)
	}
	return seen && st.Breaker == bucket.BreakerClosed
}

// poolStates returns the pools as last seen (a copy).
func (t *telemetry) poolStates() map[string]bucket.PoolState {
	t.poolMu.Lock()
	defer t.poolMu.Unlock()
	out := make(map[string]bucket.PoolState, len(t.pools))
	for k, v := range t.pools {
		out[k] = v
	}
	return out
}

// jobDone counts a job done downstream under plan (its pool's label) with outcome o, after ran.
func (t *telemetry) jobDone(ctx context.Context, plan *bucket.Plan, tenant string, o bucket.DownstreamOutcome, ran time.Duration) {
	pool := ""
	if plan != nil && plan.Pool != nil {
		pool = plan.Pool.Name
	}
	attrs := []attribute.KeyValue{attribute.String("pool", pool)}
	if t.tenantLabel {
		attrs = append(attrs, attribute.String("tenant", tenant))
	}
	t.jobTime.Record(ctx, ran.Seconds(), metric.WithAttributes(attrs...))
	t.outcomes.Add(ctx, 1, metric.WithAttributes(append(attrs, attribute.String("outcome", o.String()))...))
}

// poolHistoryLen is how many seconds of each pool the history keeps.
const poolHistoryLen = 300

// poolSamples is a ring of a pool's states, one a second at most.
type poolSamples struct {
	at     [poolHistoryLen]time.Time
	states [poolHistoryLen]bucket.PoolState
	n, end int // how many are kept; where the next goes
}

// add keeps st seen at now, unless a state was kept less than a second ago (then st replaces
// it: the latest of each second).
func (h *poolSamples) add(now time.Time, st bucket.PoolState) {
	if h.n > 0 {
		last := (h.end + poolHistoryLen - 1) % poolHistoryLen
		if now.Sub(h.at[last]) < time.Second {
			h.states[last] = st
			return
		}
	}
	h.at[h.end], h.states[h.end] = now, st
	h.end = (h.end + 1) % poolHistoryLen
	h.n = min(h.n+1, poolHistoryLen)
}

// poolHistory is a copy of pool's history, oldest first.
func (t *telemetry) poolHistory(pool string) ([]time.Time, []bucket.PoolState) {
	t.poolMu.Lock()
	defer t.poolMu.Unlock()
	h := t.history[pool]
	if h == nil {
		return nil, nil
	}
	at, states := make([]time.Time, 0, h.n), make([]bucket.PoolState, 0, h.n)
	for i := range h.n {
		k := (h.end - h.n + i + poolHistoryLen) % poolHistoryLen
		at, states = append(at, h.at[k]), append(states, h.states[k])
	}
	return at, states
}
