package policy

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/wire"
)

// Synchronous decisions: a request that waits for its answer (an HTTP API call, a NATS
// request) rather than a queued job. Two verbs over the same state as the queue, named for
// their mode as x/time/rate's are:
//
//   - Allow books nothing: a denial says how long until the weight would fit, and the caller
//     retries by itself (a booking nobody claims would waste the tenant's capacity).
//   - Reserve books the earliest slot for a key when the weight does not fit now, as a queued
//     job would; the same key asked again at or after its slot is allowed without a second
//     charge, and asked again before it is told the rest of the wait.
//
// Both look up the plan, check the weight, apply the fail mode and map errors to codes exactly
// as Decide does for jobs, under the same deadline (Config.Timeout), and record the same
// telemetry (Config.MeterProvider, Config.TracerProvider) with the caller's source.

// keyPrefix starts the job id of a reservation's key, apart from any other job id.
const keyPrefix = "k:"

// An Answer is a synchronous decision: allowed now, denied with the time to wait, or refused
// with a code.
type Answer struct {
	// Source, Tenant, Weight and Key: what was asked, by whom.
	Source wire.Source
	Tenant string
	Weight int64
	Key    string
	// Plan is the tenant's plan; nil when it has none.
	Plan *bucket.Plan
	// Allowed: the request may run now (decided, or Degraded).
	Allowed bool
	// Degraded: allowed without a decision (the limiter failed, fail mode open).
	Degraded bool
	// Local: decided on this replica's copy of the tenant's state while the limiter is
	// unreachable (fail mode local): allowed or denied by the plan as Redis would.
	Local bool
	// Reserved: denied, but a slot is booked for Key, Wait from now.
	Reserved bool
	// Paused: denied because the tenant is paused (see Policy.SetPauses); Wait is the rest of
	// the pause, Limit is ReasonPaused, and nothing was asked of the limiter.
	Paused bool
	// Shadow: the plan is in shadow mode (trialled, not enforced): the request is allowed, and
	// ShadowWait is how long the plan would have made it wait (zero: not at all). Outcome,
	// Remaining and Limit are the plan's decision on its shadow state.
	Shadow     bool
	ShadowWait time.Duration
	// Outcome is the limiter's, when it decided (Code empty and not Degraded).
	Outcome bucket.Outcome
	// Wait: zero when allowed; when denied, the time until the weight fits (Allow, however far:
	// a monthly quota's reset may be weeks away) or until the slot booked (Reserve); for
	// CodeLimiterUnavailable, the fail-closed backoff: when to ask again.
	Wait time.Duration
	// Remaining, Limit and LimitIndex are the limiter's (bucket.Result) when it decided.
	Remaining  int64
	Limit      string
	LimitIndex int
	// Code and Detail say why the request was refused (empty when it was decided or degraded).
	Code   wire.Code
	Detail string
	// Err is the limiter's error when Degraded or CodeLimiterUnavailable.
	Err error
	// Took is how long the limiter call took; zero when there was none.
	Took time.Duration
	// At is when the answer was made (Config.Now): the RateLimit headers of a quota are
	// measured from it.
	At time.Time
}

// Refused reports whether the request was refused rather than decided.
func (a *Answer) Refused() bool { return a.Code != "" }

// DegradedAs is the value of the answer's wire.HeaderDegraded: wire.DegradedFailOpen (allowed
// without a decision), wire.DegradedLocal (decided on the replica's copy), or "" (decided).
func (a *Answer) DegradedAs() string {
	switch {
	case a.Degraded:
		return wire.DegradedFailOpen
	case a.Local:
		return wire.DegradedLocal
	}
	return ""
}

// Decision names the answer for the decisions metric and the admitter.decision span
// attribute (wire.Decision*).
func (a *Answer) Decision() string {
	switch {
	case a.Code == wire.CodeLimiterUnavailable:
		return wire.DecisionUnavailable
	case a.Code != "":
		return wire.DecisionRejected
	case a.Degraded:
		return wire.DecisionDegraded
	case a.Paused:
		return wire.DecisionPaused
	case a.Shadow && a.ShadowWait > 0:
		return wire.DecisionShadowDelayed
	case a.Allowed:
		return wire.DecisionAdmitted
	case a.Reserved:
		return wire.DecisionDelayed
	}
	return wire.DecisionThrottled
}

// Status is the answer's HTTP status, also the code of a NATS micro error: 200 allowed, 429
// denied, or the refusal's (wire.HTTPStatus).
func (a *Answer) Status() int {
	switch {
	case a.Code != "":
		return wire.HTTPStatus(a.Code)
	case a.Allowed:
		return http.StatusOK
	}
	return http.StatusTooManyRequests
}

// Body is the answer's JSON body: a wire.Decision, or a wire.ErrorBody when refused.
func (a *Answer) Body() any {
	if a.Code != "" {
		return a.errorBody()
	}
	return a.decision()
}

// AppendBody appends the answer's JSON body (Body) to b.
func (a *Answer) AppendBody(b []byte) []byte {
	if a.Code != "" {
		return a.errorBody().AppendJSON(b)
	}
	return a.decision().AppendJSON(b)
}

func (a *Answer) errorBody() wire.ErrorBody {
	e := wire.ErrorBody{Error: a.Code, Detail: a.Detail}
	if a.Code == wire.CodeLimiterUnavailable {
		e.WaitMs = wire.Millis(a.Wait)
	}
	return e
}

func (a *Answer) decision() wire.Decision {
	d := wire.Decision{Allowed: a.Allowed, Tenant: a.Tenant, Limit: a.Limit, Remaining: a.Remaining,
		WaitMs: wire.Millis(a.Wait), Reserved: a.Reserved, Degraded: a.Degraded || a.Local}
	if a.Plan != nil {
		d.Plan = a.Plan.Name
	}
	if a.Shadow {
		d.Shadow = wire.ShadowValue(a.ShadowWait)
	}
	return d
}

// Headers calls set with each response header of the answer: Retry-After when denied or the
// limiter is unavailable, and RateLimit-Policy and RateLimit for the binding limit when the
// limiter decided. Degraded answers carry neither (the limiter said nothing), nor do other
// refusals. Which header says the answer is degraded depends on the face.
//
// Retry-After is the whole wait in seconds, rounded up and not capped: RFC 9110 bounds
// delay-seconds by nothing, and the RateLimit draft asks only that its t not be earlier than
// the end of the window, which it is not (t is that same wait when denied). RateLimit-Policy
// gives the binding limit's capacity over its span (bucket.Limit.Span: a bucket's refill from
// empty, a window's length, a quota's period); RateLimit's t, when allowed, bounds the time
// until the limit is whole again (bucket.Limit.FullIn: a quota's reset).
func (a *Answer) Headers(set func(name, value string)) {
	denied := !a.Allowed && (a.Code == "" || a.Code == wire.CodeLimiterUnavailable)
	if denied {
		set(wire.HeaderRetryAfter, strconv.FormatInt(wire.Seconds(a.Wait), 10))
	}
	if a.Shadow {
		set(wire.HeaderShadow, wire.ShadowValue(a.ShadowWait))
		return // the plan is not enforced: no RateLimit headers a client would act on
	}
	if a.Code != "" || a.Degraded || a.Plan == nil || a.LimitIndex < 0 || a.LimitIndex >= len(a.Plan.Limits) {
		return
	}
	l := a.Plan.Limits[a.LimitIndex]
	name := wire.RateLimitName(a.Limit, a.LimitIndex)
	at := a.At
	if at.IsZero() {
		at = time.Now()
	}
	set(wire.HeaderRateLimitPolicy, wire.RateLimitPolicy(name, l.Capacity, l.Span(at)))
	window := a.Wait
	if a.Allowed {
		window = l.FullIn(at, a.Remaining)
	}
	set(wire.HeaderRateLimit, wire.RateLimit(name, a.Remaining, window))
}

// Allow decides whether tenant may spend weight now, booking nothing: denied, the answer's Wait
// is the time until the weight would fit (however far), and nothing is taken. A paused tenant
// is denied (Paused) until its pause ends, as its queued jobs are held.
// src labels the telemetry.
func (p *Policy) Allow(ctx context.Context, src wire.Source, tenant string, weight int64) Answer {
	return p.decideSync(ctx, Answer{Source: src, Tenant: tenant, Weight: weight}, false)
}

// Reserve decides whether tenant may spend weight now for key (1 to wire.MaxKeyBytes bytes):
// when it does not fit, the earliest slot is booked for key (the weight is taken then) and the
// answer, Reserved, says how long until it. Asked again with the same key at or after the slot
// (within the limiter's grace), or within a minute of being allowed, the answer is allowed
// without a second charge. A slot further than the limiter's horizon is not booked: the answer
// is denied, not Reserved, with the time to that slot as its Wait.
func (p *Policy) Reserve(ctx context.Context, src wire.Source, tenant string, weight int64, key string) Answer {
	return p.decideSync(ctx, Answer{Source: src, Tenant: tenant, Weight: weight, Key: key}, true)
}

// Ask is Allow, or Reserve when the request asks for a reservation.
func (p *Policy) Ask(ctx context.Context, src wire.Source, r wire.DecideRequest) Answer {
	if r.Reserve {
		return p.Reserve(ctx, src, r.Tenant, r.Weight, r.Key)
	}
	return p.Allow(ctx, src, r.Tenant, r.Weight)
}

// decideSync decides a, whose Source, Tenant, Weight and (to reserve) Key are set.
func (p *Policy) decideSync(ctx context.Context, a Answer, reserve bool) Answer {
	ctx, span := p.tel.start(ctx)
	defer p.tel.record(ctx, span, &a)
	a.LimitIndex, a.At = -1, p.now()
	plan, err := p.plans.Load().Lookup(a.Tenant)
	if err == nil {
		a.Plan = plan
	}
	switch {
	case a.Tenant == "":
		return a.refuse(wire.CodeInvalidTenant, "the tenant is empty")
	case err != nil:
		return a.refuse(wire.CodeUnknownTenant, fmt.Sprintf("tenant %q has no plan and the plans set no default_plan", a.Tenant))
	case a.Weight < 1 || a.Weight > wire.MaxWeight:
		return a.refuse(wire.CodeInvalidWeight, fmt.Sprintf("weight %d is not an integer from 1 to %d", a.Weight, int64(wire.MaxWeight)))
	case a.Weight > plan.MaxWeight():
		return a.refuse(wire.CodeWeightOverCapacity, fmt.Sprintf("weight %d exceeds %d, the smallest capacity of plan %s: it could never be allowed", a.Weight, plan.MaxWeight(), plan.Name))
	}
	req := bucket.Request{Tenant: a.Tenant, Plan: plan, Weight: a.Weight}
	if reserve {
		if a.Key == "" || len(a.Key) > wire.MaxKeyBytes {
			return a.refuse(wire.CodeInvalidRequest, fmt.Sprintf("a reservation's key must have 1 to %d bytes, got %d", wire.MaxKeyBytes, len(a.Key)))
		}
		req.JobID = keyPrefix + a.Key
	}
	if until, paused := p.PausedUntil(a.Tenant); paused { // refused until the pause ends: nothing to ask
		a.Paused, a.Limit, a.Wait = true, ReasonPaused, time.Until(until)
		return a
	}
	cctx, cancel := context.WithTimeout(ctx, p.timeout)
	begin := time.Now()
	res, err := p.limiter.Decide(cctx, req)
	a.Took = time.Since(begin)
	cancel()
	if err != nil {
		if code, ok := wire.CodeOf(err); ok {
			return a.refuse(code, fmt.Sprintf("tenant %q cannot be used: %v", a.Tenant, err))
		}
		a.Err = err
		p.failed(err)
		if p.failMode == FailOpen {
			a.Allowed, a.Degraded = true, true
			return a
		}
		// closed, or local with a limiter that failed even so
		a.Wait = p.nextHold()
		return a.refuse(wire.CodeLimiterUnavailable, "the limiter is unavailable and the fail mode is closed: ask again after the wait")
	}
	p.ok(res.Local)
	a.Local = res.Local
	a.Allowed, a.Outcome, a.Wait = res.Allowed, res.Outcome, res.Wait
	a.Remaining, a.Limit, a.LimitIndex = res.Remaining, res.Limit, res.LimitIndex
	a.Reserved = res.Outcome == bucket.Delayed || res.Outcome == bucket.Early
	if plan.Shadow { // decided on the shadow state; allowed whatever it says
		a.Shadow, a.ShadowWait = true, a.Wait
		if a.Allowed {
			a.ShadowWait = 0
		}
		a.Allowed, a.Reserved, a.Wait = true, false, 0
	}
	return a
}

// refuse sets the answer's code and detail and returns it.
func (a *Answer) refuse(code wire.Code, detail string) Answer {
	a.Allowed, a.Code, a.Detail = false, code, detail
	return *a
}
