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

// Limiter decides batches of a tenant's queued jobs (Admit, CloseLane) and single requests
// (Decide), and reads a tenant's state (Inspect); *bucket.Redis and *bucket.Memory implement
// it.
type Limiter interface {
	Admit(ctx context.Context, b bucket.Batch) (bucket.BatchResult, error)
	CloseLane(ctx context.Context, tenant string, plan *bucket.Plan, through int64) (open bool, err error)
	Decide(ctx context.Context, req bucket.Request) (bucket.Result, error)
	Inspect(ctx context.Context, tenant string, plan *bucket.Plan) (bucket.Snapshot, error)
}

var (
	_ Limiter = (*bucket.Redis)(nil)
	_ Limiter = (*bucket.Memory)(nil)
)

// FailMode says what happens to a job when the limiter fails (Redis down or slow).
type FailMode string

const (
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
	// FailMode applies when the limiter fails (default FailOpen).
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
		c.FailMode = FailOpen
	}
	if c.FailMode != FailOpen && c.FailMode != FailClosed {
		return nil, fmt.Errorf("policy: fail mode must be open or closed, got %q", c.FailMode)
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
// on). A paused tenant's jobs wait in its lane, in order, until the pause ends, and are
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

// Action is what to do with one job.
type Action uint8

const (
	// Forward: publish it to the output now.
	Forward Action = iota
	// ToLane (ingest): move it to its tenant's lane, where it is decided again in order.
	ToLane
	// Wait (lane): keep it where it is; its tenant's lane asks again after the verdict's Wait.
	Wait
	// Dead: dead-letter it with the verdict's Code and Detail.
	Dead
	// Held: the limiter failed and the fail mode is closed: keep it and ask again after Wait.
	Held
)

var actionNames = [...]string{"forward", "to-lane", "wait", "dead", "held"}

func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return fmt.Sprintf("action(%d)", a)
}

// A Job is one job to decide.
type Job struct {
	// ID identifies the job: its input stream sequence.
	ID int64
	// Weight is the job's weight as read from its headers.
	Weight int64
	// WeightErr is why the weight could not be read; such a job is dead (invalid-weight).
	WeightErr error
}

// A Verdict is the decision for one job.
type Verdict struct {
	Action Action
	// Degraded: Forward without a decision (the limiter failed, fail mode open).
	Degraded bool
	// Redeemed: the job was admitted (or moved to the lane) by a call less than the limiter's
	// redeem window ago; nothing was charged now.
	Redeemed bool
	// Paused: ToLane or Wait because the tenant is paused; Wait is the rest of the pause.
	Paused bool
	// Shadow: Forward under a plan in shadow mode (trialled, not enforced); Wait is how long
	// the plan would have delayed the job (zero: not at all).
	Shadow bool
	// Wait: for Wait and Held, when to ask again; for ToLane, when the job's weight would fit
	// (a hint for its lane).
	Wait time.Duration
	// Code and Detail say why a Dead job is dead.
	Code   wire.Code
	Detail string
}

// Decision is the verdicts for a batch of one tenant's jobs, with what explains them.
type Decision struct {
	// Plan is the tenant's plan; nil when it has none.
	Plan *bucket.Plan
	// Verdicts holds one verdict per job, in order.
	Verdicts []Verdict
	// Limit is the limit that bound the decision (see bucket.BatchResult); Remaining the tokens
	// left; LaneOpen whether the tenant's lane is open afterwards.
	Limit     string
	Remaining int64
	LaneOpen  bool
	// Reason is the kind of the limit that bound the decision ("bucket", "window", "quota",
	// "concurrency"), or ReasonFence: why jobs wait. LeasesExpired counts the leases the call found ended
	// unreleased (see bucket.KindConcurrency).
	Reason        string
	LeasesExpired int64
	// Err is the limiter's error when it failed (verdicts Degraded or Held), or nil.
	Err error
	// Took is how long the limiter call took; zero when there was none.
	Took time.Duration
}

// ReasonFence is the reason of jobs held back by a fence (see bucket.Memory.Fence): forwards of
// the tenant decided before are not yet confirmed stored downstream.
const ReasonFence = "fence"

// FencePoll bounds the wait of a lane's head held back by a fence: the fence is lowered as soon
// as the forwards before it are stored, usually long before it would end.
const FencePoll = 25 * time.Millisecond

// Decide decides jobs of tenant, in order, as mode's side of its queue. Jobs that can never be
// admitted (no plan, an unreadable or too large weight, an unusable tenant name) are Dead; the
// others are decided together in one limiter call bounded by the timeout.
func (p *Policy) Decide(ctx context.Context, tenant string, mode bucket.Mode, jobs []Job) Decision {
	d := Decision{Verdicts: make([]Verdict, len(jobs))}
	plan, err := p.plans.Load().Lookup(tenant)
	if err != nil {
		for i := range d.Verdicts {
			d.Verdicts[i] = dead(wire.CodeUnknownTenant, fmt.Sprintf("tenant %q has no plan and the plans set no default_plan", tenant))
		}
		return d
	}
	d.Plan = plan
	batch := bucket.Batch{Tenant: tenant, Plan: plan, Mode: mode, Jobs: make([]bucket.Job, 0, len(jobs))}
	index := make([]int, 0, len(jobs)) // batch position → job position
	for i, j := range jobs {
		switch {
		case j.WeightErr != nil:
			d.Verdicts[i] = dead(wire.CodeInvalidWeight, j.WeightErr.Error())
		case j.Weight > plan.MaxWeight():
			d.Verdicts[i] = dead(wire.CodeWeightOverCapacity, fmt.Sprintf("weight %d exceeds %d, the smallest capacity or limit of plan %s: it could never be admitted", j.Weight, plan.MaxWeight(), plan.Name))
		default:
			batch.Jobs = append(batch.Jobs, bucket.Job{ID: j.ID, Weight: j.Weight})
			index = append(index, i)
		}
	}
	if len(batch.Jobs) == 0 {
		return d
	}
	until, paused := p.PausedUntil(tenant)
	if paused && mode == bucket.Lane {
		for _, i := range index { // the head waits for the end of the pause: nothing to ask
			d.Verdicts[i] = Verdict{Action: Wait, Paused: true, Wait: time.Until(until)}
		}
		return d
	}
	if paused {
		batch.Mode = bucket.Hold // to the lane, opening it, so that they keep their order after
	}
	cctx, cancel := context.WithTimeout(ctx, p.timeout)
	begin := time.Now()
	res, err := p.limiter.Admit(cctx, batch)
	d.Took = time.Since(begin)
	cancel()
	if err != nil {
		if code, ok := wire.CodeOf(err); ok {
			for _, i := range index {
				d.Verdicts[i] = dead(code, fmt.Sprintf("tenant %q cannot be used: %v", tenant, err))
			}
			return d
		}
		d.Err = err
		p.failed(err)
		v := Verdict{Action: Forward, Degraded: true}
		if p.failMode == FailClosed {
			v = Verdict{Action: Held, Wait: p.nextHold()}
		}
		for _, i := range index {
			d.Verdicts[i] = v
		}
		return d
	}
	p.ok()
	d.Limit, d.Remaining, d.LaneOpen, d.LeasesExpired = res.Limit, res.Remaining, res.LaneOpen, res.LeasesExpired
	if res.Fenced {
		// Earlier forwards of the tenant are not yet stored: they are usually confirmed long
		// before the fence's end, so the lane asks again soon.
		d.Reason, res.Wait = ReasonFence, min(res.Wait, FencePoll)
	} else {
		d.Reason = d.Plan.Limits[res.LimitIndex].Kind.String()
	}
	for k, o := range res.Outcomes {
		v := &d.Verdicts[index[k]]
		switch o {
		case bucket.JobAdmitted, bucket.JobRedeemed:
			*v = Verdict{Action: Forward, Redeemed: o == bucket.JobRedeemed}
			if res.ShadowWaits != nil {
				v.Shadow, v.Wait = true, res.ShadowWaits[k]
			}
		case bucket.JobToLane, bucket.JobToLaneBefore:
			*v = Verdict{Action: ToLane, Redeemed: o == bucket.JobToLaneBefore, Wait: res.Wait}
			if paused {
				v.Paused, v.Wait = true, time.Until(until)
			}
		default:
			*v = Verdict{Action: Wait, Wait: res.Wait}
		}
	}
	return d
}

// CloseLane closes tenant's lane, seen empty through input sequence through (see
// bucket.Redis.CloseLane); it reports whether the lane is still open. A tenant without a plan
// has no lane to close.
func (p *Policy) CloseLane(ctx context.Context, tenant string, through int64) (open bool, err error) {
	plan, err := p.plans.Load().Lookup(tenant)
	if err != nil {
		return false, nil
	}
	cctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	open, err = p.limiter.CloseLane(cctx, tenant, plan, through)
	if err != nil {
		if _, coded := wire.CodeOf(err); !coded {
			p.failed(err)
		}
		return true, err
	}
	p.ok()
	return open, nil
}

func dead(code wire.Code, detail string) Verdict {
	return Verdict{Action: Dead, Code: code, Detail: detail}
}

// failed records a failed limiter call, logging only the change of state.
func (p *Policy) failed(err error) {
	if p.down.CompareAndSwap(false, true) {
		p.since.Store(time.Now().UnixNano())
		p.log.Error("limiter unavailable", "fail_mode", string(p.failMode), "err", err)
	}
}

// ok records a successful limiter call, logging a recovery.
func (p *Policy) ok() {
	if p.down.Load() && p.down.CompareAndSwap(true, false) {
		p.held.mu.Lock()
		p.held.b.Reset()
		p.held.mu.Unlock()
		p.log.Info("limiter available again", "outage", time.Since(time.Unix(0, p.since.Load())).String())
		p.recovered.mu.Lock()
		if p.recovered.ch != nil {
			close(p.recovered.ch)
			p.recovered.ch = nil
		}
		p.recovered.mu.Unlock()
	}
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

// Ping checks that the limiter answers, when it can be checked without deciding
// (*bucket.Redis); an in-process limiter always answers.
func (p *Policy) Ping(ctx context.Context) error {
	if pinger, ok := p.limiter.(interface{ Ping(context.Context) error }); ok {
		return pinger.Ping(ctx)
	}
	return nil
}

// LimiterDown reports whether the last limiter call failed.
func (p *Policy) LimiterDown() bool { return p.down.Load() }

// nextHold is the next fail-closed wait.
func (p *Policy) nextHold() time.Duration {
	p.held.mu.Lock()
	defer p.held.mu.Unlock()
	return p.held.b.NextBackOff()
}
