package admission

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/admitter/admitter/activity"
	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/policy"
	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
)

// ingest takes jobs from the input stream and decides them as they come: what may go now is
// forwarded, what must wait is moved to its tenant's lane, what can never go is dead-lettered.
// Then the input is acknowledged: a job never waits in the ingest consumer's window.
//
// A tenant's jobs are decided one batch at a time, in the order they were delivered: while a
// batch of a tenant is being decided and published, its newer jobs gather into the next batch
// (one limiter call for all of them). Tenants do not wait for each other.
type ingest struct {
	s      *Service
	bytes  *budget
	mu     sync.Mutex
	cond   *sync.Cond
	byName map[string]*tenantJobs
	ready  []*tenantJobs // tenants with jobs in hand and no batch in flight, oldest first
	closed bool
}

type tenantJobs struct {
	tenant string
	msgs   []jetstream.Msg
	busy   bool // a batch is being decided
	queued bool // in ready
}

func newIngest(s *Service) *ingest {
	in := &ingest{s: s, bytes: newBudget(s.cfg.InFlightBytes), byName: map[string]*tenantJobs{}}
	in.cond = sync.NewCond(&in.mu)
	return in
}

// add takes one delivered job (the Consume callback). It blocks while the payload bytes in hand
// are at their bound, so that pulling stops.
func (in *ingest) add(m jetstream.Msg) {
	tenant, ok := in.s.cfg.In.Match(m.Subject())
	if !ok {
		// The consumer filters on the input template, so this is a broken set-up: keep the job.
		in.s.log.Error("subject does not match the input template: redelivering in a minute", "subject", m.Subject(), "template", in.s.cfg.In.String())
		in.s.settled(m, "nak", m.NakWithDelay(time.Minute))
		return
	}
	if !in.bytes.acquire(len(m.Data())) {
		in.s.settled(m, "nak", m.Nak()) // shutting down
		return
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		in.bytes.release(len(m.Data()))
		in.s.settled(m, "nak", m.Nak())
		return
	}
	t := in.byName[tenant]
	if t == nil {
		t = &tenantJobs{tenant: tenant}
		in.byName[tenant] = t
	}
	t.msgs = append(t.msgs, m)
	if !t.busy && !t.queued {
		t.queued = true
		in.ready = append(in.ready, t)
		in.cond.Signal()
	}
}

// next hands a worker the next tenant's batch; ok is false once closed and drained.
func (in *ingest) next() (t *tenantJobs, batch []jetstream.Msg, ok bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for len(in.ready) == 0 {
		if in.closed {
			return nil, nil, false
		}
		in.cond.Wait()
	}
	t = in.ready[0]
	in.ready[0] = nil
	in.ready = in.ready[1:]
	t.queued, t.busy = false, true
	n := min(len(t.msgs), bucket.MaxBatch)
	batch = t.msgs[:n:n]
	t.msgs = t.msgs[n:]
	return t, batch, true
}

// done ends a tenant's batch: its newer jobs, if any, become the next one.
func (in *ingest) done(t *tenantJobs) {
	in.mu.Lock()
	defer in.mu.Unlock()
	t.busy = false
	switch {
	case len(t.msgs) > 0:
		t.queued = true
		in.ready = append(in.ready, t)
		in.cond.Signal()
	default:
		delete(in.byName, t.tenant)
	}
}

// close makes workers return once the jobs in hand are decided, and add refuse new ones.
func (in *ingest) close() {
	in.mu.Lock()
	in.closed = true
	in.cond.Broadcast()
	in.mu.Unlock()
	in.bytes.close()
}

// run is one worker: it decides batches until the ingest is closed and drained.
func (in *ingest) run(ctx context.Context) {
	for {
		in.s.pause(ctx)
		t, batch, ok := in.next()
		if !ok {
			return
		}
		in.decide(ctx, t.tenant, batch)
		in.done(t)
	}
}

// decide decides one batch of a tenant's jobs and settles every one of them: acknowledged once
// forwarded, moved or dead-lettered; held ones are asked about again after the policy's wait.
func (in *ingest) decide(ctx context.Context, tenant string, msgs []jetstream.Msg) {
	s := in.s
	s.tel.inFlight.Add(ctx, int64(len(msgs)))
	defer s.tel.inFlight.Add(ctx, -int64(len(msgs)))
	for len(msgs) > 0 {
		jobs := make([]job, 0, len(msgs))
		for _, m := range msgs {
			j, err := s.inputJob(ctx, tenant, m)
			if err != nil {
				s.log.Error("message without JetStream metadata: redelivering", "subject", m.Subject(), "err", err)
				s.settled(m, "nak", m.NakWithDelay(time.Second))
				in.bytes.release(len(m.Data()))
				continue
			}
			jobs = append(jobs, j)
		}
		s.decideAndApply(ctx, tenant, bucket.Ingest, jobs)
		msgs = msgs[:0]
		var wait time.Duration
		for _, j := range jobs {
			if j.verdict.Action == policy.Held {
				msgs = append(msgs, j.in)
				wait = j.verdict.Wait
				s.settled(j.in, "in-progress", j.in.InProgress())
				continue
			}
			in.bytes.release(len(j.in.Data()))
		}
		if len(msgs) == 0 {
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			for _, m := range msgs {
				s.settled(m, "nak", m.Nak())
				in.bytes.release(len(m.Data()))
			}
			return
		case <-t.C:
		}
	}
}

// job is one job being decided, from the input (in) or from its tenant's lane (lane).
type job struct {
	in      jetstream.Msg // ingest: the delivered input
	lane    *nats.Msg     // lane: the copy read from the lane
	tenant  string
	subject string // the input's subject
	seq     uint64 // the input's stream sequence
	stored  time.Time
	tries   uint64 // deliveries of the input
	header  nats.Header
	data    []byte
	weight  int64
	wErr    error
	ctx     context.Context // the job's trace
	span    trace.Span
	verdict policy.Verdict
	plan    string
	lease   time.Duration // its plan's lease length (bucket.Plan.Lease): forwarded with its lease when > 0
	reason  string        // the kind of the limit it waits for
	limit   string        // the limit that bound the decision
}

// inputJob reads a delivered input.
func (s *Service) inputJob(ctx context.Context, tenant string, m jetstream.Msg) (job, error) {
	meta, err := m.Metadata()
	if err != nil {
		return job{}, err
	}
	j := job{in: m, tenant: tenant, subject: m.Subject(), seq: meta.Sequence.Stream, stored: meta.Timestamp,
		tries: meta.NumDelivered, header: m.Headers(), data: m.Data()}
	j.weight, j.wErr = wire.ParseWeight(j.header)
	j.ctx, j.span = s.tel.startProcess(ctx, s.tel.processIn, j.header, m.Subject(), j.seq, meta.NumDelivered, s.cfg)
	return j, nil
}

// decideAndApply decides jobs of one tenant as mode's side and applies each verdict: forward,
// move to the lane, dead-letter; Wait and Held jobs are left to the caller. In a lane, jobs
// leave in order: nothing behind the first job left is applied. It returns how many jobs at the
// front were settled (forwarded, moved or dead-lettered) before the first one left.
func (s *Service) decideAndApply(ctx context.Context, tenant string, mode bucket.Mode, jobs []job) int {
	pjobs := make([]policy.Job, len(jobs))
	for i, j := range jobs {
		pjobs[i] = policy.Job{ID: int64(j.seq), Weight: j.weight, WeightErr: j.wErr}
	}
	d := s.tel.decide(ctx, s.cfg.Policy, jobs, tenant, mode, pjobs)
	plan := ""
	if d.Plan != nil {
		plan = d.Plan.Name
	}
	outs := make([]*outMsg, 0, len(jobs))
	owner := make([]int, 0, len(jobs))
	settled := len(jobs)
	forwards, paced := false, false
	for i := range jobs {
		j := &jobs[i]
		j.verdict, j.plan, j.limit = d.Verdicts[i], plan, d.Limit
		j.reason, j.lease = d.Reason, 0
		if d.Plan != nil {
			j.lease = d.Plan.Lease()
		}
		if mode == bucket.Lane && settled < len(jobs) {
			j.verdict = policy.Verdict{Action: policy.Wait, Wait: j.verdict.Wait}
			continue
		}
		var m *nats.Msg
		switch j.verdict.Action {
		case policy.Forward:
			m, forwards = s.forwardMsg(j), true
			paced = paced || !(j.verdict.Degraded || j.verdict.Shadow)
		case policy.ToLane:
			m = s.laneMsg(j)
		case policy.Dead:
			m = s.deadMsg(j, j.verdict.Code, j.verdict.Detail)
		default:
			settled = min(settled, i)
			continue
		}
		outs = append(outs, &outMsg{msg: m, stream: streamOf(s, j.verdict.Action)})
		owner = append(owner, i)
	}
	var batch *unstored
	if forwards {
		batch = s.storing(ctx, tenant, paced)
	}
	s.pub.publishAll(ctx, outs)
	// What can never be stored is dead-lettered instead; a dead letter that cannot carry the
	// payload is sent without it.
	for round := 0; round < 2 && ctx.Err() == nil; round++ {
		var again []*outMsg
		var where []int // index in outs
		for k, o := range outs {
			if o.err == nil || !s.pub.permanent(o.err) {
				continue
			}
			j := &jobs[owner[k]]
			var dm *nats.Msg
			switch {
			case o.stream != s.cfg.StreamDead:
				code, detail := wire.CodeForwardRejected, fmt.Sprintf("stream %s refused it: %v", o.stream, o.err)
				if errors.Is(o.err, errTooLarge) || tooLargeAPI(o.err) {
					code, detail = wire.CodeTooLarge, fmt.Sprintf("it can never be stored on stream %s: %v", o.stream, o.err)
				}
				j.verdict = policy.Verdict{Action: policy.Dead, Code: code, Detail: detail}
				dm = s.deadMsg(j, code, detail)
			case len(o.msg.Data) > 0:
				dm = s.deadMsg(j, j.verdict.Code, j.verdict.Detail+fmt.Sprintf("; the payload (%d bytes) is left out: the dead letter could not carry it (%v); it was sequence %d of stream %s",
					len(j.data), o.err, j.seq, s.cfg.StreamIn))
				dm.Data = nil
			default:
				continue // even without its payload: see conclude
			}
			again, where = append(again, &outMsg{msg: dm, stream: s.cfg.StreamDead}), append(where, k)
		}
		if len(again) == 0 {
			break
		}
		s.pub.publishAll(ctx, again)
		for i, k := range where {
			outs[k] = again[i]
		}
	}
	if batch != nil {
		fence := batch.stored()
		batch.release(fence, s.chargeLate(ctx, tenant, jobs, owner, outs, fence))
	}
	for k, o := range outs {
		j := &jobs[owner[k]]
		s.conclude(j, o.err)
	}
	for i := settled; i < len(jobs); i++ {
		s.conclude(&jobs[i], nil)
	}
	if mode == bucket.Lane && settled < len(jobs) && s.cfg.Activity != nil {
		if h := &jobs[settled]; h.verdict.Action == policy.Wait { // the head waits on
			k := activity.Waiting
			if h.verdict.Paused {
				k = activity.Paused
			}
			s.cfg.Activity.Record(activity.Event{At: s.cfg.Now(), Tenant: tenant, Plan: plan, Kind: k, Weight: h.weight,
				Wait: h.verdict.Wait, Limit: d.Limit, FromLane: true})
		}
	}
	return settled
}

// streamOf is the stream a verdict's message goes to.
func streamOf(s *Service, a policy.Action) string {
	switch a {
	case policy.ToLane:
		return s.cfg.StreamWait
	case policy.Dead:
		return s.cfg.StreamDead
	}
	return s.cfg.StreamOut
}

// conclude settles a job whose verdict was applied (err: what became of its message) and
// records the decision.
func (s *Service) conclude(j *job, err error) {
	defer j.span.End()
	if j.lane != nil && (j.verdict.Action == policy.Wait || j.verdict.Action == policy.Held) {
		return // still in its lane: not a new decision
	}
	if err != nil {
		j.span.RecordError(err)
		if s.pub.permanent(err) {
			// Not even a dead letter without the payload can be stored (headers over the
			// server's limits): nothing the admitter can do; it says so and asks again rarely.
			s.log.Error("a job can be neither forwarded nor dead-lettered: it is left where it is; remove it by hand",
				"subject", j.subject, "tenant", j.tenant, "sequence", j.seq, "err", err)
			if j.in != nil {
				s.settled(j.in, "nak", j.in.NakWithDelay(time.Minute))
			}
			return
		}
		// Not stored and not refused for good: the context ended (shutdown). The input is
		// redelivered; a lane job stays in its lane.
		if j.in != nil {
			s.settled(j.in, "nak", j.in.Nak())
		}
		return
	}
	v := j.verdict
	decision := wire.DecisionAdmitted
	switch {
	case v.Action == policy.Forward && v.Degraded:
		decision = wire.DecisionDegraded
	case v.Action == policy.Forward && v.Shadow && v.Wait > 0:
		decision = wire.DecisionShadowDelayed
	case v.Paused:
		decision = wire.DecisionPaused
	case v.Action == policy.ToLane || v.Action == policy.Wait:
		decision = wire.DecisionDelayed
	case v.Action == policy.Dead:
		decision = wire.DecisionDead
		s.log.Info("dead-lettered", "subject", j.subject, "tenant", j.tenant, "code", string(v.Code), "detail", v.Detail)
	case v.Action == policy.Held:
		decision = wire.DecisionHeld
	}
	s.tel.conclude(j, decision)
	s.record(j, decision)
	if j.in == nil {
		return
	}
	switch v.Action {
	case policy.Forward, policy.ToLane:
		s.settled(j.in, "ack", j.in.Ack())
	case policy.Dead:
		s.settled(j.in, "term", j.in.TermWithReason(string(v.Code)))
	}
}

// record tells Config.Activity what became of a settled job.
func (s *Service) record(j *job, decision string) {
	if s.cfg.Activity == nil {
		return
	}
	e := activity.Event{At: s.cfg.Now(), Tenant: j.tenant, Plan: j.plan, Weight: j.weight, Limit: j.limit,
		FromLane: j.lane != nil, Wait: j.verdict.Wait, Code: j.verdict.Code}
	switch decision {
	case wire.DecisionAdmitted:
		e.Kind, e.Wait = activity.Admitted, 0
		if j.lane != nil && !j.stored.IsZero() {
			e.Wait = max(e.At.Sub(j.stored), 0) // how long it waited
		}
	case wire.DecisionDegraded:
		e.Kind, e.Wait = activity.Degraded, 0
	case wire.DecisionPaused:
		e.Kind = activity.Paused
	case wire.DecisionDelayed:
		e.Kind = activity.Delayed
	case wire.DecisionDead:
		e.Kind = activity.Dead
	case wire.DecisionHeld:
		e.Kind = activity.Held
	default:
		return
	}
	s.cfg.Activity.Record(e)
}

// forwardMsg is the admitted job as published to the output.
func (s *Service) forwardMsg(j *job) *nats.Msg {
	_, out, err := s.out.Map(j.subject)
	if err != nil { // cannot happen: the input matched the template
		out = j.subject
	}
	h := s.baseHeader(j, 9)
	forwardHeader(h, wire.MsgID(wire.KindForward, s.cfg.StreamIn, j.seq), j.tenant, j.plan, j.tries, s.cfg.Now().Sub(j.stored), j.verdict)
	leaseHeader(h, j.seq, j.lease, j.verdict)
	m := &nats.Msg{Subject: out, Data: j.data, Header: h}
	s.tel.injectSend(j, m, s.cfg.StreamOut)
	return m
}

// deadMsg is the job as dead-lettered with code and detail.
func (s *Service) deadMsg(j *job, code wire.Code, detail string) *nats.Msg {
	_, dead, err := s.dead.Map(j.subject)
	if err != nil { // not an input subject (a foreign message in a lane): the tenant's dead subject
		fill := make([]string, s.cfg.Dead.Wildcards())
		for i := range fill {
			fill[i] = "lane"
		}
		dead, _ = s.cfg.Dead.Subject(j.tenant, fill...)
	}
	h := deadHeader(s.baseHeader(j, 3), wire.MsgID(wire.KindDead, s.cfg.StreamIn, j.seq), code, detail)
	m := &nats.Msg{Subject: dead, Data: j.data, Header: h}
	s.tel.injectSend(j, m, s.cfg.StreamDead)
	return m
}

// laneMsg is the job as moved to its tenant's lane.
func (s *Service) laneMsg(j *job) *nats.Msg {
	subject, err := s.cfg.Wait.Subject(j.tenant)
	if err != nil {
		subject = j.subject
	}
	h := laneHeader(s.baseHeader(j, 5), wire.MsgID(wire.KindLane, s.cfg.StreamIn, j.seq), j.subject, j.seq, j.stored, j.tries)
	s.cfg.Propagator.Inject(j.ctx, wire.HeaderCarrier(h))
	return &nats.Msg{Subject: subject, Data: j.data, Header: h}
}

// baseHeader is the job's own headers as carried into what the admitter publishes.
func (s *Service) baseHeader(j *job, extra int) nats.Header {
	if j.lane != nil {
		return fromLane(j.header, extra)
	}
	return carried(j.header, extra)
}

// budget bounds the payload bytes in hand. One message larger than the bound is let through
// alone.
type budget struct {
	mu     sync.Mutex
	cond   *sync.Cond
	max    int
	used   int
	closed bool
}

func newBudget(max int) *budget {
	b := &budget{max: max}
	b.cond = sync.NewCond(&b.mu)
	return b
}

// acquire waits until n bytes fit (or nothing else is held); false once closed.
func (b *budget) acquire(n int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for !b.closed && b.used > 0 && b.used+n > b.max {
		b.cond.Wait()
	}
	if b.closed {
		return false
	}
	b.used += n
	return true
}

func (b *budget) release(n int) {
	b.mu.Lock()
	b.used -= n
	b.cond.Broadcast()
	b.mu.Unlock()
}

func (b *budget) close() {
	b.mu.Lock()
	b.closed = true
	b.cond.Broadcast()
	b.mu.Unlock()
}

// settled counts and logs an acknowledgement of input m that failed (op: ack, nak, term,
// in-progress): the server refused it or did not answer, and the job comes back after the ack
// wait, where it is recognised (its decision redeemed, its forward deduplicated).
func (s *Service) settled(m jetstream.Msg, op string, err error) {
	if err == nil {
		return
	}
	s.tel.settleErrs.Add(context.Background(), 1, metric.WithAttributes(attribute.String("op", op)))
	s.log.Warn("acknowledging an input job failed: it comes back after the ack wait", "op", op, "subject", m.Subject(), "err", err)
}

// AsyncError takes an error the NATS connection reports on its own (its ErrorHandler): an
// acknowledgement the server refused (a permissions violation on $JS.ACK.>) arrives only so,
// since an ack is not answered. It is counted and logged as settled counts a failed one.
func (s *Service) AsyncError(err error) {
	if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"$JS.ACK.`) {
		s.tel.settleErrs.Add(context.Background(), 1, metric.WithAttributes(attribute.String("op", "ack")))
		s.log.Warn("acknowledging an input job failed: it comes back after the ack wait", "op", "ack", "err", err)
		return
	}
	s.log.Warn("nats", "err", err)
}

// spanSeq is the messaging message id of a job: stream and sequence.
func spanSeq(stream string, seq uint64) string { return stream + ":" + strconv.FormatUint(seq, 10) }

var _ = semconv.MessagingOperationTypeProcess
