// Package policy is admitter's decision step, free of any transport: it turns some of a
// tenant's jobs into verdicts (Decide), and a synchronous request into an answer (Allow,
// Reserve), under the plans, the limiter and the fail mode. The queue side (package admission)
// turns each verdict into exactly one state change; the HTTP API and the NATS service (package
// api) and the Go middleware (package httplimit) turn each answer into a response. None of them
// looks up plans, checks weights, applies the fail mode or maps errors to codes itself.
//
// A Policy is safe for concurrent use. It does not read a message or a request, publish,
// acknowledge or respond.
package policy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/wire"
	"github.com/cenkalti/backoff/v4"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Limiter is the backend the policy asks: every verb of bucket.Limiter, which *bucket.Redis and
// *bucket.Memory implement.
type Limiter = bucket.Limiter

// FailMode says what happens to a job when the limiter fails (Redis down or slow).
type FailMode string

const (
	// FailLocal (the default) keeps every plan while Redis is away: the limiter (a
	// bucket.Fallback) decides on this replica's copy of the tenants' state, and answers say so
	// (Verdict.Local, Answer.Local; forwards carry Admit-Degraded: local). A limiter that still
	// fails holds the job as FailClosed does.
	FailLocal FailMode = "local"
	// FailOpen forwards the job without a decision, marked Admit-Degraded: fail-open.
	FailOpen FailMode = "open"
	// FailClosed holds the job and asks again after an exponential backoff with jitter (250ms
	// doubling to 5s), shared by every job: it measures the outage, not one job.
	FailClosed FailMode = "closed"
)

// DefaultTimeout bounds one limiter call when Config.Timeout is zero.
const DefaultTimeout = 250 * time.Millisecond

// Config is what a Policy needs.
type Config struct {
	// Limiter decides (required).
	Limiter Limiter
	// Plans maps tenants to plans (required); replace them later with SetPlans.
	Plans *bucket.Plans
	// FailMode applies when the limiter fails (default FailLocal).
	FailMode FailMode
	// Timeout bounds one limiter call (default DefaultTimeout).
	Timeout time.Duration
	// Logger receives the limiter's changes of state, once each (default slog.Default()).
	Logger *slog.Logger
	// TracerProvider and MeterProvider record the synchronous decisions (Allow, Reserve): a
	// "limiter decide" span each, and the decisions metric with their source (default: none).
	// The queue's jobs are recorded by package admission.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	// TenantMetrics adds a tenant label to the synchronous decisions' metric.
	TenantMetrics bool
	// Now is the clock answers are stamped with (Answer.At; default time.Now): the limiter's,
	// where a test drives it.
	Now func() time.Time
}

// Policy decides. Create it with New.
type Policy struct {
	limiter  Limiter
	plans    atomic.Pointer[bucket.Plans]
	pauses   atomic.Pointer[map[string]time.Time] // tenant → until
	failMode FailMode
	timeout  time.Duration
	now      func() time.Time
	log      *slog.Logger
	tel      *telemetry
	down     atomic.Bool
	since    atomic.Int64 // unix ns when the limiter was lost
	held     struct {     // the fail-closed backoff
		mu sync.Mutex
		b  *backoff.ExponentialBackOff
	}
	recovered struct { // see Recovered
		mu sync.Mutex
		ch chan struct{}
	}
}

// New validates the configuration and returns a Policy.
func New(c Config) (*Policy, error) {
	switch {
	case c.Limiter == nil:
		return nil, errors.New("policy: no limiter")
	case c.Plans == nil:
		return nil, errors.New("policy: no plans")
	}
	if c.FailMode == "" {
		c.FailMode = FailLocal
	}
	if c.FailMode != FailLocal && c.FailMode != FailOpen && c.FailMode != FailClosed {
		return nil, fmt.Errorf("policy: fail mode must be local, open or closed, got %q", c.FailMode)
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	tel, err := newTelemetry(c)
	if err != nil {
		return nil, fmt.Errorf("policy: telemetry: %w", err)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	p := &Policy{limiter: c.Limiter, failMode: c.FailMode, timeout: c.Timeout, log: c.Logger, tel: tel, now: c.Now}
	p.plans.Store(c.Plans)
	p.held.b = backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(250*time.Millisecond),
		backoff.WithMaxInterval(5*time.Second),
		backoff.WithRandomizationFactor(0.5),
		backoff.WithMultiplier(2),
		backoff.WithMaxElapsedTime(0),
	)
	return p, nil
}

// FailMode is the policy's fail mode.
func (p *Policy) FailMode() FailMode { return p.failMode }

// Plans returns the plans in force.
func (p *Policy) Plans() *bucket.Plans { return p.plans.Load() }

// SetPlans replaces the plans: every decision from now on uses them.
func (p *Policy) SetPlans(plans *bucket.Plans) { p.plans.Store(plans) }

// SetPauses replaces the paused tenants (tenant → until when; the map is the policy's from now
// on). A paused tenant's jobs wait in its queue, in order, until the pause ends, and are
// charged nothing meanwhile.
func (p *Policy) SetPauses(pauses map[string]time.Time) { p.pauses.Store(&pauses) }

// Pauses returns the pauses in force as last set (tenant → until; some may have ended: see
// PausedUntil). The map is shared: the caller must not change it.
func (p *Policy) Pauses() map[string]time.Time {
	if m := p.pauses.Load(); m != nil {
		return *m
	}
	return nil
}

// PausedUntil reports until when tenant's jobs are held, if they are now.
func (p *Policy) PausedUntil(tenant string) (time.Time, bool) {
	m := p.pauses.Load()
	if m == nil {
		return time.Time{}, false
	}
	until, ok := (*m)[tenant]
	if !ok || !until.After(time.Now()) {
		return time.Time{}, false
	}
	return until, true
}

// A Job is one job to decide.
type Job struct {
	// ID identifies the job: its input stream sequence.
	ID int64
	// Weight is the job's weight as read from its headers.
	Weight int64
	// WeightErr is why the weight could not be read; such a job is dead (invalid-weight).
	WeightErr error
	// Stored is when the input stored the job: its bound on waiting counts from then (zero:
	// unknown, no bound applies). MaxWait is its own bound (Admit-Max-Wait; 0: none, its plan's
	// max_wait alone), MaxWaitErr why it could not be read: such a job is dead
	// (invalid-max-wait). See expiry.go.
	Stored     time.Time
	MaxWait    time.Duration
	MaxWaitErr error
	// PriorityErr is why its Admit-Priority could not be read: such a job is dead
	// (invalid-priority). Its priority itself is the queue's business (the order it asks in).
	PriorityErr error
	// Again: the job may have been admitted before, and forwarded (by an earlier holder of its
	// queue that stopped before removing it, or by a call whose answer was lost), and the limiter
	// has not said otherwise. Its bound having passed, it is asked about rather than expired: a
	// forward of it is then found (redeemed, stored) rather than joined by a dead letter. A plan
	// with a pool looks it up in the tenant's state before asking the pool (bucket.Job.Again).
	Again bool
}

// A Verdict is the decision for one job.
type Verdict struct {
	// Fate is what becomes of it.
	Fate wire.Fate
	// Wait: for a job that waits (Fate.Waits), when to ask again (a paused one: the rest of the
	// pause); for a job forwarded under a plan in shadow mode, how long the plan would have
	// delayed it.
	Wait time.Duration
	// Redeemed: the job was admitted before, AdmittedAgo ago, and its owner has not said its
	// forward was stored since (bucket.JobRedeemed): nothing was charged now. Its forward may be
	// downstream already: the queue looks it up before forwarding it again.
	Redeemed    bool
	AdmittedAgo time.Duration
	// Shadow: forwarded under a plan in shadow mode (trialled, not enforced).
	Shadow bool
	// Local: decided on this replica's copy of the tenant's state while the limiter is
	// unreachable (fail mode local).
	Local bool
	// Code and Detail say why a dead job is dead.
	Code   wire.Code
	Detail string
	// Deadline is when the job's bound on waiting ends (zero: it has none): a queue whose job
	// waits asks again by then, when it is dead-lettered (wire.CodeExpired) unless admitted.
	Deadline time.Time
	// WaitedFor, on an expired job: what it waited for (see Decision.WaitedFor).
	WaitedFor string
}

// Decision is the verdicts for the head of one tenant's queue, with what explains them.
type Decision struct {
	// Plan is the tenant's plan; nil when it has none.
	Plan *bucket.Plan
	// Verdicts holds one verdict per job, in order.
	Verdicts []Verdict
	// Limit is the limit that bound the decision (see bucket.BatchResult); Remaining the tokens
	// left.
	Limit     string
	Remaining int64
	// Reason is the kind of the limit that bound the decision ("bucket", "window", "quota",
	// "concurrency"), or ReasonHandover: why jobs wait. LeasesExpired counts the leases the call
	// found ended unreleased (see bucket.KindConcurrency).
	Reason        string
	LeasesExpired int64
	// Pool is the plan's pool as the call found it (nil: no pool); Wakes the tenants whose
	// queues may go now (the call gave pool capacity back, or another's turn refused it).
	Pool  *bucket.PoolState
	Wakes []string
	// GiveBackErr is why the pool grants the decision did not use could not be given back (see
	// bucket.BatchResult.GiveBackErr): the verdicts stand, the slots stay taken until their
	// leases end. Count and log it.
	GiveBackErr error
	// Err is the limiter's error when it failed (verdicts degraded or held; a paused tenant's
	// jobs stay paused), or nil.
	Err error
	// Said: a limiter call carried the queue's claim (Queue) and answered, so the queue owes
	// nothing of it any more. False when no call answered: it failed, or none was made (the
	// tenant has no plan or cannot be used; or the step had nothing to ask). The queue then keeps
	// its claim for its next step.
	Said bool
	// Local: decided on this replica's copy of the tenant's state (fail mode local).
	Local bool
	// Took is how long the limiter call took; zero when there was none.
	Took time.Duration
}

// ReasonHandover is the reason of jobs that wait because another replica holds their tenant's
// queue (bucket.BatchResult.Handover): a replica that stopped or stalled, or whose view of the
// replicas has not changed yet; its hold ends within bucket.Options.Hold.
const ReasonHandover = "handover"

// ReasonRedeemed is the reason of jobs that wait behind jobs admitted before, not decided in the
// same call (bucket.BatchResult.AfterRedeemed): the next step asks about them, once those are
// settled or their slots taken again.
const ReasonRedeemed = "redeemed"

// ReasonPool is the reason of jobs that wait for their plan's pool (bucket.Pool): its capacity
// is in use, or what is free is the turn of tenants that waited with an earlier start.
const ReasonPool = "pool"

// ReasonDownstream is the reason of jobs that wait because the downstream asked for no more of
// their tenant's (or their pool's) jobs for a while: a done message's Admit-Retry-After (see
// bucket.Report).
const ReasonDownstream = "downstream"

// ReasonBreaker is the reason of jobs that wait because their pool's breaker is open, or
// half-open with its probe jobs out (bucket.Breaker).
const ReasonBreaker = "breaker"

// ReasonPaused is the reason of jobs that wait, and the limit of requests denied, because their
// tenant is paused (SetPauses).
const ReasonPaused = "paused"

// Queue is what the replica that owns a tenant's queue says with each step (see bucket.Batch).
type Queue struct {
	// Owner names the replica (bucket.OwnerID).
	Owner int64
	// Stored is the queue's settled mark: the highest id of the jobs it settled in order (their
	// forwards or dead letters stored). Said with every call, it ends what the limiter remembers
	// of their admissions (bucket.Batch.Stored). Keep, while their removal from the input is not
	// confirmed: how long the limiter must remember it.
	Stored int64
	Keep   time.Duration
	// LateWeight and Late: the owner's forwards stored Late or more after their decision.
	LateWeight int64
	Late       time.Duration
	// Release gives the owner's hold on the queue up (it stops owning the tenant).
	Release bool
	// WaitedFor is what the queue's waiting jobs were last told they wait for
	// (Decision.WaitedFor of its last step that left a job waiting; empty: none did on this
	// replica): what a job whose bound passed meanwhile waited for.
	WaitedFor string
}

// Step decides jobs at the head of tenant's queue, in order, for the queue's owner (see Queue).
// Jobs that can never be admitted (no plan, an unreadable or too large weight, an unreadable
// Admit-Max-Wait or Admit-Priority, an unusable tenant name) are dead, and so are those whose bound on waiting has
// passed (expiry.go); a paused tenant's wait for the pause's end; the others are decided
// together in one limiter call bounded by the timeout, and the first that waits is dead at once
// if its wait is known to end after its bound. Jobs after the first that waits are not decided:
// they wait behind it. A step without jobs to decide (none given, or its tenant paused) carries
// what the owner has to say alone; Decision.Said tells whether it was said.
func (p *Policy) Step(ctx context.Context, tenant string, jobs []Job, q Queue) Decision {
	d := Decision{Verdicts: make([]Verdict, len(jobs))}
	plan, err := p.plans.Load().Lookup(tenant)
	if err != nil {
		for i := range d.Verdicts {
			d.Verdicts[i] = dead(wire.CodeUnknownTenant, fmt.Sprintf("tenant %q has no plan and the plans set no default_plan", tenant))
		}
		return d
	}
	d.Plan = plan
	batch := bucket.Batch{Tenant: tenant, Plan: plan, Owner: q.Owner, Stored: q.Stored, Keep: q.Keep,
		LateWeight: q.LateWeight, Late: q.Late, Release: q.Release, Jobs: make([]bucket.Job, 0, len(jobs))}
	index := make([]int, 0, len(jobs)) // batch position → job position
	now := p.now()
	until, paused := p.PausedUntil(tenant)
	waitedFor := q.WaitedFor
	if waitedFor == "" && paused {
		waitedFor = ReasonPaused
	}
	for i, j := range jobs {
		b, of := bound(plan, j)
		var deadline time.Time
		if b > 0 {
			deadline = j.Stored.Add(b)
		}
		switch {
		case j.WeightErr != nil:
			d.Verdicts[i] = dead(wire.CodeInvalidWeight, j.WeightErr.Error())
		case j.MaxWaitErr != nil:
			d.Verdicts[i] = dead(wire.CodeInvalidMaxWait, j.MaxWaitErr.Error())
		case j.PriorityErr != nil:
			d.Verdicts[i] = dead(wire.CodeInvalidPriority, j.PriorityErr.Error())
		case j.Weight > plan.MaxWeight():
			d.Verdicts[i] = dead(wire.CodeWeightOverCapacity, fmt.Sprintf("weight %d exceeds %d, the smallest capacity or limit of plan %s: it could never be admitted", j.Weight, plan.MaxWeight(), plan.Name))
		case b > 0 && !now.Before(deadline) && !j.Again:
			d.Verdicts[i] = expired(j, deadline, b, of, waitedFor, now) // not asked about: it spends nothing
		default:
			d.Verdicts[i].Deadline = deadline
			batch.Jobs = append(batch.Jobs, bucket.Job{ID: j.ID, Weight: j.Weight, Again: j.Again})
			index = append(index, i)
		}
	}
	if paused && len(batch.Jobs) > 0 {
		for _, i := range index { // they wait for the end of the pause, undecided
			d.Verdicts[i] = Verdict{Fate: wire.FatePaused, Wait: time.Until(until), Deadline: d.Verdicts[i].Deadline}
		}
		return p.sayAlone(ctx, d, batch)
	}
	if len(batch.Jobs) == 0 && batch.Stored == 0 && batch.LateWeight == 0 && !batch.Release {
		return d
	}
	res, err := p.admit(ctx, &d, batch)
	if err != nil {
		if code, ok := wire.CodeOf(err); ok {
			for _, i := range index {
				d.Verdicts[i] = dead(code, fmt.Sprintf("tenant %q cannot be used: %v", tenant, err))
			}
			return d
		}
		d.Err = err
		p.failed(err)
		v := Verdict{Fate: wire.FateDegraded}
		if p.failMode != FailOpen {
			v = Verdict{Fate: wire.FateHeld, Wait: p.nextHold()}
		}
		for _, i := range index {
			v.Deadline = d.Verdicts[i].Deadline
			d.Verdicts[i] = v
		}
		return d
	}
	p.ok(res.Local)
	d.Said, d.Local = true, res.Local
	d.Limit, d.Remaining, d.LeasesExpired = res.Limit, res.Remaining, res.LeasesExpired
	d.Pool, d.Wakes, d.GiveBackErr = res.Pool, res.Wakes, res.GiveBackErr
	switch {
	case res.Handover:
		d.Reason = ReasonHandover
	case res.AfterRedeemed:
		d.Reason = ReasonRedeemed
	case res.Downstream:
		d.Reason = ReasonDownstream
	case res.PoolBound && res.Pool != nil && res.Pool.Breaker != bucket.BreakerClosed:
		d.Reason = ReasonBreaker
	case res.PoolBound:
		d.Reason = ReasonPool
	default:
		d.Reason = d.Plan.Limits[res.LimitIndex].Kind.String()
	}
	for k, o := range res.Outcomes {
		v := &d.Verdicts[index[k]]
		deadline := v.Deadline
		switch o {
		case bucket.JobAdmitted, bucket.JobRedeemed:
			*v = Verdict{Fate: wire.FateAdmitted, Redeemed: o == bucket.JobRedeemed}
			if v.Redeemed && res.AdmittedAgo != nil {
				v.AdmittedAgo = res.AdmittedAgo[k]
			}
			if res.ShadowWaits != nil {
				v.Shadow, v.Wait = true, res.ShadowWaits[k]
				if v.Wait > 0 {
					v.Fate = wire.FateShadowDelayed
				}
			}
		case bucket.JobStored:
			*v = Verdict{Fate: wire.FateStored}
		default:
			*v = Verdict{Fate: wire.FateDelayed, Wait: res.Wait}
		}
		v.Local, v.Deadline = res.Local, deadline
	}
	p.expireAtOnce(&d, jobs, index, now)
	return d
}

// expireAtOnce dead-letters the first job d leaves waiting when its wait is exact and ends after
// its bound (see expiry.go), and the jobs waiting behind it that weigh at least as much (their
// wait is at least as long) and whose bound ends first too. A lighter job behind it is asked
// about again at once (its verdict's Wait is 0): with the job ahead gone it may fit sooner.
func (p *Policy) expireAtOnce(d *Decision, jobs []Job, index []int, now time.Time) {
	if !exactWait(d.Reason) {
		return
	}
	head := -1
	for _, i := range index {
		v := &d.Verdicts[i]
		if v.Fate != wire.FateDelayed {
			continue
		}
		if head < 0 {
			if v.Deadline.IsZero() || !now.Add(v.Wait).After(v.Deadline) {
				return // it waits, within its bound: the jobs behind it wait behind it
			}
			head = i
		} else if jobs[i].Weight < jobs[head].Weight {
			v.Wait = 0
			continue
		} else if v.Deadline.IsZero() || !now.Add(v.Wait).After(v.Deadline) {
			continue
		}
		b, of := bound(d.Plan, jobs[i])
		*v = expiresAtOnce(jobs[i], v.Deadline, b, of, d.WaitedFor(*v), v.Wait, now)
	}
}

// admit makes the step's limiter call, bounded by the timeout, and records how long it took.
func (p *Policy) admit(ctx context.Context, d *Decision, batch bucket.Batch) (bucket.BatchResult, error) {
	cctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	begin := time.Now()
	res, err := p.limiter.Admit(cctx, batch)
	d.Took = time.Since(begin)
	return res, err
}

// sayAlone says what the owner of a queue whose jobs are not decided (its tenant is paused)
// owes the limiter, in a call without jobs, when it owes anything: forwards stored late are
// charged, jobs stored are remembered, a hold is given up. The jobs' verdicts stand whatever
// the call answers.
func (p *Policy) sayAlone(ctx context.Context, d Decision, batch bucket.Batch) Decision {
	if batch.Stored == 0 && batch.LateWeight == 0 && !batch.Release {
		return d // nothing to say: no call
	}
	batch.Jobs = nil
	res, err := p.admit(ctx, &d, batch)
	if err != nil {
		if _, ok := wire.CodeOf(err); !ok { // a tenant that cannot be used is not an outage
			d.Err = err
			p.failed(err)
		}
		return d
	}
	p.ok(res.Local)
	d.Said, d.LeasesExpired = true, res.LeasesExpired
	return d
}

func dead(code wire.Code, detail string) Verdict {
	return Verdict{Fate: wire.FateDead, Code: code, Detail: detail}
}

// failed records a failed limiter call, logging only the change of state.
func (p *Policy) failed(err error) {
	if p.down.CompareAndSwap(false, true) {
		p.since.Store(time.Now().UnixNano())
		p.log.Error("limiter unavailable", "fail_mode", string(p.failMode), "err", err)
	}
}

// Lost records that the limiter (a bucket.Fallback, fail mode local) could not reach Redis and
// decides on this replica's copy of the tenants' state from now on: logged once, with the cause.
func (p *Policy) Lost(err error) {
	if p.down.CompareAndSwap(false, true) {
		p.since.Store(time.Now().UnixNano())
		p.log.Error("limiter unavailable: every plan is kept on this replica's copy of the tenants' state until Redis answers",
			"fail_mode", string(p.failMode), "err", err)
	}
}

// Back records that the limiter answers again and was charged with what the copy decided
// meanwhile (o): logged once, with what was decided.
func (p *Policy) Back(o bucket.Outage) {
	if p.down.CompareAndSwap(true, false) {
		p.log.Info("limiter available again", "outage", o.Lasted.Round(time.Millisecond).String(), "decided_on_the_copy",
			fmt.Sprintf("%d tenants, %d pools: %d jobs admitted, %d told to wait; %d requests allowed, %d refused; %d lease messages", o.Tenants, o.Pools, o.Admitted, o.Waited, o.Allowed, o.Refused, o.Leases))
		p.recover()
	}
}

// Outage is when the limiter was lost, if it is now (the last call failed, or it decides on
// its copy).
func (p *Policy) Outage() (since time.Time, down bool) {
	if !p.down.Load() {
		return time.Time{}, false
	}
	return time.Unix(0, p.since.Load()), true
}

// ok records a successful limiter call, logging a recovery; a decision made on the limiter's
// copy (local) is not one: Back says when Redis answers.
func (p *Policy) ok(local bool) {
	if !local && p.down.Load() && p.down.CompareAndSwap(true, false) {
		p.log.Info("limiter available again", "outage", time.Since(time.Unix(0, p.since.Load())).String())
		p.recover()
	}
}

// recover resets the fail-closed backoff and tells whoever waits on Recovered.
func (p *Policy) recover() {
	p.held.mu.Lock()
	p.held.b.Reset()
	p.held.mu.Unlock()
	p.recovered.mu.Lock()
	if p.recovered.ch != nil {
		close(p.recovered.ch)
		p.recovered.ch = nil
	}
	p.recovered.mu.Unlock()
}

// Recovered returns a channel closed the next time the limiter answers after it failed (when
// "limiter available again" is logged): what waits out a backoff because of the outage may ask
// again then. With a Redis Cluster one of whose servers is down, the limiter fails and recovers
// as calls reach that server or the others: a caller that acts on every recovery should bound
// how often it does.
func (p *Policy) Recovered() <-chan struct{} {
	p.recovered.mu.Lock()
	defer p.recovered.mu.Unlock()
	if p.recovered.ch == nil {
		p.recovered.ch = make(chan struct{})
	}
	return p.recovered.ch
}

// Late is how late after its decision a forward may be stored before its tenant is charged for
// it (the limiter's bucket.Options.Late): Queue.LateWeight counts the forwards later than this.
func (p *Policy) Late() time.Duration { return p.limiter.Late() }

// Ping checks that the limiter answers.
func (p *Policy) Ping(ctx context.Context) error { return p.limiter.Ping(ctx) }

// LimiterDown reports whether the last limiter call failed.
func (p *Policy) LimiterDown() bool { return p.down.Load() }

// nextHold is the next fail-closed wait.
func (p *Policy) nextHold() time.Duration {
	p.held.mu.Lock()
	defer p.held.mu.Unlock()
	return p.held.b.NextBackOff()
}
