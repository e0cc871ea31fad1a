package admission

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/subjects"
	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
)

// Service consumes, decides and acts. Create it with New, prepare streams and consumer with
// Setup, then Run it. Any number of services (replicas) may share one consumer and one limiter.
type Service struct {
	cfg     Config
	out     subjects.Mapping
	dead    subjects.Mapping
	log     *slog.Logger
	cons    jetstream.Consumer
	limiter struct {
		down  atomic.Bool
		since atomic.Int64 // unix ns when the limiter was lost
	}
	closed struct { // the fail-closed backoff, shared: it measures the outage, not one job
		mu sync.Mutex
		b  *backoff.ExponentialBackOff
	}
	tel *telemetry
	// acks carries forwards published asynchronously to the goroutines that wait for their
	// PubAcks and then ack the inputs: workers never wait for the output stream.
	acks    chan pendingForward
	parking *parking
	stopped chan struct{}
	running atomic.Bool
	gauges  metric.Registration
}

// New validates the configuration and returns a service.
func New(cfg Config) (*Service, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	out, dead, err := Mappings(cfg.In, cfg.Out, cfg.Dead)
	if err != nil {
		return nil, err
	}
	tel, err := newTelemetry(cfg)
	if err != nil {
		return nil, fmt.Errorf("admission: metrics: %w", err)
	}
	s := &Service{cfg: cfg, out: out, dead: dead, log: cfg.Logger, tel: tel, stopped: make(chan struct{}),
		acks: make(chan pendingForward, 4*cfg.Workers), parking: newParking(cfg.ParkMax, cfg.AckWait)}
	s.closed.b = backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(250*time.Millisecond),
		backoff.WithMaxInterval(5*time.Second),
		backoff.WithRandomizationFactor(0.5),
		backoff.WithMultiplier(2),
		backoff.WithMaxElapsedTime(0),
	)
	return s, nil
}

// Mappings checks the three subject templates together and returns the input→output and
// input→dead mappings: output and dead must carry the input's wildcards, and no two may
// overlap (forwarded jobs would be consumed again, or land in the wrong stream).
func Mappings(in, out, dead subjects.Template) (toOut, toDead subjects.Mapping, err error) {
	if toOut, err = subjects.NewMapping(in, out); err != nil {
		return toOut, toDead, fmt.Errorf("%w: output subject: %w", ErrConfig, err)
	}
	if toDead, err = subjects.NewMapping(in, dead); err != nil {
		return toOut, toDead, fmt.Errorf("%w: dead subject: %w", ErrConfig, err)
	}
	for _, p := range [][2]subjects.Template{{in, out}, {in, dead}, {out, dead}} {
		if subjects.Overlap(p[0].Filter(), p[1].Filter()) {
			return toOut, toDead, fmt.Errorf("%w: subjects %q and %q overlap: forwarded or dead-lettered jobs would be consumed again or mixed up; use disjoint subjects",
				ErrConfig, p[0].String(), p[1].String())
		}
	}
	return toOut, toDead, nil
}

// Setup creates the streams when absent, checks them when present, and creates or updates the
// durable consumer. A set-up that would lose jobs is an error wrapping ErrSetup.
func (s *Service) Setup(ctx context.Context) error {
	c := s.cfg
	if err := s.ensureStream(ctx, jetstream.StreamConfig{
		Name: c.StreamIn, Subjects: []string{c.In.Filter()}, Retention: jetstream.WorkQueuePolicy,
		Storage: jetstream.FileStorage, Description: "admitter: jobs waiting for admission",
	}, c.In.Filter()); err != nil {
		return err
	}
	if err := s.ensureStream(ctx, jetstream.StreamConfig{
		Name: c.StreamOut, Subjects: []string{c.Out.Filter()}, Retention: jetstream.LimitsPolicy,
		Storage: jetstream.FileStorage, MaxAge: max(DefaultOutMaxAge, c.DuplicateWindow), Duplicates: c.DuplicateWindow,
		Description: "admitter: admitted jobs, paced per tenant",
	}, c.Out.Filter()); err != nil {
		return err
	}
	if err := s.ensureStream(ctx, jetstream.StreamConfig{
		Name: c.StreamDead, Subjects: []string{c.Dead.Filter()}, Retention: jetstream.LimitsPolicy,
		Storage: jetstream.FileStorage, MaxAge: max(DefaultDeadMaxAge, c.DuplicateWindow), Duplicates: c.DuplicateWindow,
		Description: "admitter: rejected jobs with Admit-Error",
	}, c.Dead.Filter()); err != nil {
		return err
	}
	cons, err := c.JetStream.CreateOrUpdateConsumer(ctx, c.StreamIn, jetstream.ConsumerConfig{
		Durable:       c.Consumer,
		Description:   "admitter: shared by all replicas",
		FilterSubject: c.In.Filter(),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.AckWait,
		MaxDeliver:    -1, // a delay is not a failure: never drop a job for being delivered often
		MaxAckPending: c.MaxAckPending,
	})
	if err != nil {
		return fmt.Errorf("%w: consumer %s on stream %s: %w", ErrSetup, c.Consumer, c.StreamIn, err)
	}
	s.cons = cons
	if s.gauges == nil {
		if err := s.registerGauges(); err != nil {
			return fmt.Errorf("admission: metrics: %w", err)
		}
	}
	return nil
}

// registerGauges reports the consumer's backlog on every collection.
func (s *Service) registerGauges() error {
	m := s.cfg.MeterProvider.Meter(instrumentationName)
	pending, err1 := m.Int64ObservableGauge("admitter.consumer.pending", metric.WithDescription("Jobs stored but not yet delivered to the consumer."))
	ackPending, err2 := m.Int64ObservableGauge("admitter.consumer.ack_pending", metric.WithDescription("Jobs delivered and not yet acknowledged, delayed ones included (bounded by MaxAckPending)."))
	redelivered, err3 := m.Int64ObservableGauge("admitter.consumer.redelivered", metric.WithDescription("Jobs delivered more than once and not yet acknowledged."))
	parked, err4 := m.Int64ObservableGauge("admitter.jobs.parked", metric.WithDescription("Delayed jobs kept in this process until their slot."))
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return err
	}
	reg, err := m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		o.ObserveInt64(parked, int64(s.parking.len()))
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		info, err := s.cons.Info(ctx)
		if err != nil {
			return fmt.Errorf("consumer info: %w", err)
		}
		o.ObserveInt64(pending, int64(info.NumPending))
		o.ObserveInt64(ackPending, int64(info.NumAckPending))
		o.ObserveInt64(redelivered, int64(info.NumRedelivered))
		return nil
	}, pending, ackPending, redelivered, parked)
	s.gauges = reg
	return err
}

// Pinger is implemented by limiters that can be checked without deciding (*bucket.Redis).
type Pinger interface {
	Ping(ctx context.Context) error
}

// Ready reports whether the service can admit jobs now: consuming, NATS connected, and the
// limiter reachable — or the fail mode forwards without it. The error says what is missing.
func (s *Service) Ready(ctx context.Context) error {
	select {
	case <-s.stopped:
		return errors.New("stopped")
	default:
	}
	if !s.running.Load() || s.cons == nil {
		return errors.New("not consuming yet")
	}
	if st := s.cfg.JetStream.Conn().Status(); st != nats.CONNECTED {
		return fmt.Errorf("nats %s", st)
	}
	if p, ok := s.cfg.Limiter.(Pinger); ok {
		ctx, cancel := context.WithTimeout(ctx, s.cfg.DecisionTimeout)
		defer cancel()
		if err := p.Ping(ctx); err != nil && s.cfg.FailMode == FailClosed {
			return fmt.Errorf("limiter unreachable and the fail mode is closed: %w", err)
		}
	}
	return nil
}

// ensureStream creates the stream when absent; when present it must capture filter.
func (s *Service) ensureStream(ctx context.Context, want jetstream.StreamConfig, filter string) error {
	st, err := s.cfg.JetStream.Stream(ctx, want.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err := s.cfg.JetStream.CreateStream(ctx, want); err != nil {
			return fmt.Errorf("%w: create stream %s over %q: %w", ErrSetup, want.Name, filter, err)
		}
		s.log.Info("created stream", "stream", want.Name, "subjects", want.Subjects, "retention", want.Retention.String())
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: look up stream %s: %w", ErrSetup, want.Name, err)
	}
	have := st.CachedInfo().Config
	for _, subj := range have.Subjects {
		if subjects.Covers(subj, filter) {
			return nil
		}
	}
	return fmt.Errorf("%w: stream %s exists with subjects %q, which do not capture %q: jobs would be lost; add %q to the stream's subjects or change the subject template",
		ErrSetup, want.Name, have.Subjects, filter, filter)
}

// Run consumes until ctx ends, then stops pulling and settles the jobs in flight within
// ShutdownTimeout. It returns nil after a clean stop. Run may be called once.
func (s *Service) Run(ctx context.Context) error {
	if s.cons == nil {
		return fmt.Errorf("%w: Run before Setup", ErrConfig)
	}
	if !s.running.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: Run called twice", ErrConfig)
	}
	defer close(s.stopped)
	defer func() {
		if s.gauges != nil { // the consumer is not asked about once the service has stopped
			_ = s.gauges.Unregister()
		}
	}()
	// Jobs in flight finish on their own context, so a stop signal does not abort them midway;
	// it is cancelled only if settling takes longer than ShutdownTimeout.
	work, abort := context.WithCancel(context.WithoutCancel(ctx))
	defer abort()
	jobs := make(chan jetstream.Msg)
	abandon := make(chan struct{})
	var workers, ackers sync.WaitGroup
	for range s.cfg.Workers {
		workers.Go(func() {
			for {
				select {
				case m, ok := <-jobs:
					if !ok {
						return
					}
					s.handle(work, m)
				case m := <-s.parking.due:
					s.handle(work, m)
				}
			}
		})
	}
	for range ackerCount {
		ackers.Go(func() {
			timer := time.NewTimer(pubAckTimeout) // one per acker, not one per forward
			defer timer.Stop()
			for p := range s.acks {
				timer.Reset(pubAckTimeout) // Go ≥ 1.23: no stale tick survives a Reset
				s.settle(work, p, awaitPubAck(work, p.future, timer))
			}
		})
	}
	// Workers stop first, then the ackers settle what the workers published.
	defer func() {
		close(s.acks)
		ackers.Wait()
	}()
	cc, err := s.cons.Consume(func(m jetstream.Msg) {
		select {
		case jobs <- m:
		case <-abandon: // shutting down past the bound: hand it back at once
			_ = m.Nak()
		}
	},
		jetstream.PullMaxMessages(s.cfg.PullBuffer),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			s.log.Warn("consume", "err", err)
		}))
	if err != nil {
		s.parking.close()
		close(jobs)
		workers.Wait()
		return fmt.Errorf("admission: consume %s/%s: %w", s.cfg.StreamIn, s.cfg.Consumer, err)
	}
	s.log.Info("admitting", "stream", s.cfg.StreamIn, "consumer", s.cfg.Consumer, "in", s.cfg.In.String(),
		"out", s.cfg.Out.String(), "dead", s.cfg.Dead.String(), "workers", s.cfg.Workers, "fail_mode", string(s.cfg.FailMode))
	<-ctx.Done()

	s.log.Info("stopping: settling jobs in flight", "bound", s.cfg.ShutdownTimeout.String())
	bound := time.NewTimer(s.cfg.ShutdownTimeout)
	defer bound.Stop()
	cc.Drain() // stop pulling; what is buffered still reaches the callback
	select {
	case <-cc.Closed():
	case <-bound.C:
		close(abandon)
		abort()
		<-cc.Closed()
	}
	s.parking.close() // parked jobs go back to JetStream with the rest of their wait
	close(jobs)
	done := make(chan struct{})
	go func() { workers.Wait(); close(done) }()
	select {
	case <-done:
		s.log.Info("stopped")
		return nil
	case <-bound.C:
		abort()
	}
	<-done // every step of a job is bounded by the aborted context or its own timeout
	s.log.Warn("stopped after the shutdown bound; unsettled jobs are redelivered after the ack wait")
	return nil
}

// job is one delivery being handled.
type job struct {
	msg    jetstream.Msg
	meta   *jetstream.MsgMetadata
	tenant string
	plan   *bucket.Plan
	span   trace.Span
	// concluded is set once the decision is recorded: a forward the stream refuses is
	// dead-lettered after it was counted as admitted, and is counted once.
	concluded bool
}

// handle decides one job and does exactly one of forward, delay or dead-letter. Its span
// continues the producer's trace (read from the input headers), so every delivery of a job,
// delays included, shows in the producer's trace.
func (s *Service) handle(ctx context.Context, m jetstream.Msg) {
	s.tel.inFlight.Add(ctx, 1)
	defer s.tel.inFlight.Add(ctx, -1)
	meta, err := m.Metadata()
	if err != nil {
		s.log.Error("message without JetStream metadata: redelivering", "subject", m.Subject(), "err", err)
		_ = m.NakWithDelay(time.Second)
		return
	}
	ctx = s.tel.propagator.Extract(ctx, headerCarrier(m.Headers()))
	ctx, span := s.tel.tracer.Start(ctx, s.tel.processName, trace.WithSpanKind(trace.SpanKindConsumer))
	defer span.End()
	if span.IsRecording() { // attributes cost allocations: only for spans that are kept
		span.SetAttributes(messagingAttrs(semconv.MessagingOperationTypeProcess, m.Subject(),
			meta.Stream+":"+strconv.FormatUint(meta.Sequence.Stream, 10))...)
		span.SetAttributes(
			semconv.MessagingDestinationTemplateKey.String(s.cfg.In.String()),
			semconv.MessagingConsumerGroupNameKey.String(s.cfg.Consumer),
			AttrSequence.Int64(int64(meta.Sequence.Stream)),
			AttrAttempt.Int64(int64(meta.NumDelivered)),
		)
	}
	j := job{msg: m, meta: meta, span: span}
	tenant, outSubject, err := s.out.Map(m.Subject())
	if err != nil {
		// The consumer filters on the input template, so this means a broken set-up: keep the job.
		s.log.Error("subject does not match the input template: redelivering in a minute", "subject", m.Subject(), "err", err)
		_ = m.NakWithDelay(time.Minute)
		return
	}
	j.tenant = tenant
	span.SetAttributes(AttrTenant.String(tenant))
	j.plan, err = s.cfg.Plans.Lookup(tenant)
	if err != nil {
		s.deadLetter(ctx, &j, CodeUnknownTenant, fmt.Sprintf("tenant %q has no plan and the plans file sets no default_plan", tenant))
		return
	}
	span.SetAttributes(AttrPlan.String(j.plan.Name))
	weight, err := ParseWeight(m.Headers())
	if err != nil {
		s.deadLetter(ctx, &j, CodeInvalidWeight, err.Error())
		return
	}
	span.SetAttributes(AttrWeight.Int64(weight))
	res, err := s.decide(ctx, &j, weight)
	switch {
	case errors.Is(err, bucket.ErrWeightOverCapacity):
		s.deadLetter(ctx, &j, CodeWeightOverCapacity, fmt.Sprintf("weight %d exceeds %d, the smallest capacity of plan %s: it could never be admitted", weight, j.plan.MaxWeight(), j.plan.Name))
	case errors.Is(err, bucket.ErrInvalidTenant):
		s.deadLetter(ctx, &j, CodeInvalidTenant, fmt.Sprintf("tenant %q cannot be used: tenant names must not contain '{' or '}'", tenant))
	case errors.Is(err, bucket.ErrInvalidWeight):
		s.deadLetter(ctx, &j, CodeInvalidWeight, err.Error())
	case err != nil:
		s.limiterFailed(err)
		s.tel.failEvents.Add(ctx, 1, metric.WithAttributes(attribute.String("mode", string(s.cfg.FailMode))))
		if s.cfg.FailMode == FailOpen {
			s.conclude(ctx, &j, DecisionDegraded, 0)
			s.forward(ctx, &j, outSubject, true)
		} else {
			wait := s.closedDelay()
			s.conclude(ctx, &j, DecisionHeld, wait)
			s.delay(span, m, wait)
		}
	default:
		s.limiterOK()
		if res.Allowed {
			s.conclude(ctx, &j, DecisionAdmitted, 0)
			s.forward(ctx, &j, outSubject, false)
		} else {
			wait := max(res.Wait, time.Microsecond)
			s.conclude(ctx, &j, DecisionDelayed, wait)
			s.delay(span, m, wait)
		}
	}
}

// delay holds the job back for wait: parked in process when it can be, NAK'd with the wait
// otherwise.
func (s *Service) delay(span trace.Span, m jetstream.Msg, wait time.Duration) {
	if s.parking.park(m, wait) {
		span.SetAttributes(AttrParked.Bool(true))
		return
	}
	_ = m.NakWithDelay(wait)
}

// decide asks the limiter, bounded by DecisionTimeout, in a child span.
func (s *Service) decide(ctx context.Context, j *job, weight int64) (bucket.Result, error) {
	ctx, span := s.tel.tracer.Start(ctx, "limiter decide", trace.WithSpanKind(trace.SpanKindClient))
	defer span.End()
	if _, ok := s.cfg.Limiter.(*bucket.Redis); ok {
		span.SetAttributes(semconv.DBSystemNameRedis)
	}
	dctx, cancel := context.WithTimeout(ctx, s.cfg.DecisionTimeout)
	defer cancel()
	begin := time.Now()
	res, err := s.cfg.Limiter.Decide(dctx, bucket.Request{
		Tenant: j.tenant, Plan: j.plan, Weight: weight,
		JobID: j.meta.Stream + ":" + strconv.FormatUint(j.meta.Sequence.Stream, 10),
	})
	s.tel.latency.Record(ctx, time.Since(begin).Seconds())
	if err != nil {
		span.RecordError(err)
		if !errors.Is(err, bucket.ErrWeightOverCapacity) && !errors.Is(err, bucket.ErrInvalidTenant) && !errors.Is(err, bucket.ErrInvalidWeight) {
			span.SetStatus(codes.Error, "limiter failed")
			s.tel.limiterErrs.Add(ctx, 1, metric.WithAttributes(attribute.String("kind", errorKind(err))))
		}
		return res, err
	}
	if span.IsRecording() {
		span.SetAttributes(decisionAttrs(res)...)
		j.span.SetAttributes(AttrLimit.String(res.Limit), AttrOutcome.String(res.Outcome.String()))
	}
	return res, nil
}

// conclude records the decision on the job's span and in the metrics.
func (s *Service) conclude(ctx context.Context, j *job, decision string, wait time.Duration) {
	if j.concluded {
		return
	}
	j.concluded = true
	j.span.SetAttributes(AttrDecision.String(decision), AttrWaitMs.Float64(float64(wait)/float64(time.Millisecond)))
	s.tel.record(ctx, j, decision, wait)
}

// ackerCount is how many goroutines wait for PubAcks; they take futures in publish order, which
// is the order the acks come back in, so a few suffice.
const ackerCount = 4

// pubAckTimeout bounds the wait for one forward's PubAck before it is retried synchronously.
const pubAckTimeout = 5 * time.Second

// pendingForward is a forward published asynchronously and not yet acknowledged by JetStream.
type pendingForward struct {
	job    job
	out    *nats.Msg
	future jetstream.PubAckFuture
	span   trace.Span
}

// forward publishes the admitted job without waiting; settle acks the input on the PubAck.
func (s *Service) forward(ctx context.Context, j *job, subject string, degraded bool) {
	m := j.msg
	out := &nats.Msg{
		Subject: subject,
		Data:    m.Data(),
		Header: admittedHeader(m.Headers(), msgID("a", j.meta.Stream, j.meta.Sequence.Stream), j.tenant, j.plan.Name,
			j.meta.NumDelivered, s.cfg.Now().Sub(j.meta.Timestamp), degraded),
	}
	_, span := s.sendSpan(ctx, out, s.cfg.StreamOut)
	f, err := s.cfg.JetStream.PublishMsgAsync(out, jetstream.WithExpectStream(s.cfg.StreamOut))
	if err != nil {
		// Not even sent (too many in flight, disconnected): take the synchronous path.
		s.settle(ctx, pendingForward{job: *j, out: out, span: span}, err)
		return
	}
	s.acks <- pendingForward{job: *j, out: out, future: f, span: span}
}

// awaitPubAck waits for a forward's PubAck until timer fires or ctx ends.
func awaitPubAck(ctx context.Context, f jetstream.PubAckFuture, timer *time.Timer) error {
	select {
	case <-f.Ok():
		return nil
	case err := <-f.Err():
		return err
	case <-timer.C:
		return errors.New("no PubAck within " + pubAckTimeout.String())
	case <-ctx.Done():
		return ctx.Err()
	}
}

// settle acks the input of a forward that was acknowledged by JetStream (err nil). A forward
// without a PubAck in time, or never sent, is published again synchronously (its Nats-Msg-Id
// makes a repeat harmless); one the stream refuses for good is dead-lettered.
func (s *Service) settle(ctx context.Context, p pendingForward, err error) {
	defer p.span.End()
	var api *jetstream.APIError
	if err != nil && !errors.As(err, &api) && ctx.Err() == nil {
		err = s.publish(ctx, p.out, s.cfg.StreamOut)
	}
	m := p.job.msg
	switch {
	case err == nil:
		_ = m.Ack()
	case errors.As(err, &api):
		p.span.RecordError(err)
		s.deadLetter(ctx, &p.job, CodeForwardRejected, fmt.Sprintf("stream %s refused the admitted job: %v", s.cfg.StreamOut, api))
	default:
		p.span.RecordError(err)
		p.span.SetStatus(codes.Error, "publish failed")
		s.log.Warn("forward failed: redelivering the job", "subject", p.out.Subject, "err", err)
		_ = m.NakWithDelay(time.Second)
	}
}

// deadLetter publishes the job to the dead subject with the reason, then terminates the input.
func (s *Service) deadLetter(ctx context.Context, j *job, code, detail string) {
	m := j.msg
	_, subject, err := s.dead.Map(m.Subject())
	if err != nil {
		s.log.Error("cannot map to the dead subject: redelivering in a minute", "subject", m.Subject(), "err", err)
		_ = m.NakWithDelay(time.Minute)
		return
	}
	s.conclude(ctx, j, DecisionDead, 0)
	j.span.SetAttributes(AttrError.String(code))
	out := &nats.Msg{Subject: subject, Data: m.Data(),
		Header: deadHeader(m.Headers(), msgID("d", j.meta.Stream, j.meta.Sequence.Stream), code, detail)}
	if err := s.send(ctx, out, s.cfg.StreamDead); err != nil {
		delay := time.Second
		if errors.As(err, new(*jetstream.APIError)) {
			delay = time.Minute // refused for good: keep the job, retry rarely, say so loudly
		}
		s.log.Error("dead-letter failed: redelivering the job", "subject", subject, "code", code, "err", err, "retry_in", delay.String())
		_ = m.NakWithDelay(delay)
		return
	}
	s.log.Info("dead-lettered", "subject", m.Subject(), "tenant", j.tenant, "code", code, "detail", detail)
	_ = m.TermWithReason(code)
}

// sendSpan starts the producer span of a publish and writes its context into the message's
// headers, so the consumer of the output continues the trace. The caller ends the span.
func (s *Service) sendSpan(ctx context.Context, m *nats.Msg, stream string) (context.Context, trace.Span) {
	name := s.tel.sendOutName
	if stream != s.cfg.StreamOut {
		name = "send " + stream
	}
	ctx, span := s.tel.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindProducer))
	if span.IsRecording() {
		span.SetAttributes(messagingAttrs(semconv.MessagingOperationTypeSend, m.Subject, m.Header.Get(nats.MsgIdHdr))...)
	}
	s.tel.propagator.Inject(ctx, headerCarrier(m.Header))
	return ctx, span
}

// send publishes synchronously in a producer span.
func (s *Service) send(ctx context.Context, m *nats.Msg, stream string) error {
	ctx, span := s.sendSpan(ctx, m, stream)
	defer span.End()
	err := s.publish(ctx, m, stream)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "publish failed")
	}
	return err
}

// publish sends to JetStream and waits for the PubAck, retrying transient failures briefly. A
// duplicate PubAck (the forward already happened) is success. A JetStream API error (the stream
// refused the message) is not retried: it is returned as a *jetstream.APIError.
func (s *Service) publish(ctx context.Context, m *nats.Msg, stream string) error {
	b := backoff.WithContext(backoff.WithMaxRetries(backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(50*time.Millisecond),
		backoff.WithMaxInterval(time.Second),
	), 4), ctx)
	return backoff.Retry(func() error {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := s.cfg.JetStream.PublishMsg(pctx, m, jetstream.WithExpectStream(stream))
		if errors.As(err, new(*jetstream.APIError)) {
			return backoff.Permanent(err)
		}
		return err
	}, b)
}

// limiterFailed records a failed decision, logging only the change of state.
func (s *Service) limiterFailed(err error) {
	if s.limiter.down.CompareAndSwap(false, true) {
		s.limiter.since.Store(s.cfg.Now().UnixNano())
		s.log.Error("limiter unavailable", "fail_mode", string(s.cfg.FailMode), "err", err)
	}
}

// limiterOK records a successful decision, logging a recovery.
func (s *Service) limiterOK() {
	if s.limiter.down.Load() && s.limiter.down.CompareAndSwap(true, false) {
		s.closed.mu.Lock()
		s.closed.b.Reset()
		s.closed.mu.Unlock()
		s.log.Info("limiter available again", "outage", s.cfg.Now().Sub(time.Unix(0, s.limiter.since.Load())).String())
	}
}

// closedDelay is the next fail-closed redelivery delay.
func (s *Service) closedDelay() time.Duration {
	s.closed.mu.Lock()
	defer s.closed.mu.Unlock()
	return s.closed.b.NextBackOff()
}
