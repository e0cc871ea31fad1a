package bucket

import (
	"fmt"
	"time"
)

// Outcome says how a decision was reached.
type Outcome uint8

const (
	// Admitted: the job fit every limit now and its weight was taken.
	Admitted Outcome = iota
	// AdmittedAtSlot: the job came back at or after the slot it had booked; it was charged when
	// it booked, so nothing is taken now.
	AdmittedAtSlot
	// Duplicate: the job was already admitted (a lost ack, a retried call); nothing is taken.
	Duplicate
	// Delayed: the job does not fit now; a slot was booked for it Wait from now.
	Delayed
	// Throttled: the job does not fit now and nothing was booked, because its earliest slot lies
	// beyond the horizon or the request has no JobID that could claim a slot. Wait is the time
	// to the earliest slot, however far (a monthly quota's reset may be weeks away). Nothing was
	// taken; ask again after Wait.
	Throttled
	// Early: the job came back before its booked slot; the slot still stands, Wait away.
	Early
)

var outcomeNames = [...]string{"admitted", "admitted-at-slot", "duplicate", "delayed", "throttled", "early"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("outcome(%d)", o)
}

// Allowed reports whether the outcome lets the job run now.
func (o Outcome) Allowed() bool { return o <= Duplicate }

// A Request asks whether a tenant's job may run now.
type Request struct {
	// Tenant names the bucket set; it must be non-empty and contain neither '{' nor '}'.
	Tenant string
	// Plan is the tenant's plan.
	Plan *Plan
	// Weight is what the job costs every limit: tokens of a bucket, weight counted by a window
	// or a quota (≥ 1, ≤ Plan.MaxWeight()).
	Weight int64
	// JobID makes the decision idempotent: a job that was already admitted, or that holds a
	// booked slot, is recognised by it. Empty means no idempotency (every call is a new job).
	JobID string
}

// Result is the outcome of one decision.
type Result struct {
	// Allowed reports whether the job may run now (Outcome.Allowed()).
	Allowed bool
	// Outcome says how the decision was reached.
	Outcome Outcome
	// Remaining is the whole weight the plan lets through now after the decision: the minimum
	// over its limits of a bucket's tokens and a window's or quota's limit minus what it counts;
	// 0 when a limit is in debt to booked slots.
	Remaining int64
	// Wait is how long the job must wait before asking again: zero when Allowed, the time to the
	// booked slot when Delayed or Early, as described for Throttled. Microsecond resolution.
	Wait time.Duration
	// Limit names the limit that bound the decision: for a delay, the limit whose earliest fit
	// sets the slot (a bucket's refill, a window's take leaving, a quota's reset); otherwise the
	// limit with the least left. Its name, or its index when unnamed.
	Limit string
	// LimitIndex is the index of Limit in the plan.
	LimitIndex int
	// LeasesExpired counts the tenant's leases (see KindConcurrency) that this call found ended
	// without being released, and dropped: each is counted once, by the call that drops it.
	LeasesExpired int64
	// Local: decided on this replica's copy of the tenant's state while Redis was unreachable
	// (see Fallback).
	Local bool
}

// Options tune both backends. The zero value uses the defaults.
type Options struct {
	// Horizon is the furthest ahead a slot is booked (default 1 minute). A job whose earliest
	// slot lies further books nothing and is told the time to it (Throttled).
	Horizon time.Duration
	// SlotGrace is how long a booked slot is honoured after it passes (default 1 minute). A job
	// returning later than that is treated as new and charged again.
	SlotGrace time.Duration
	// MarkerTTL is how long a request admitted by Decide with a JobID is remembered so that
	// asking again is free (default 1 minute).
	MarkerTTL time.Duration
	// Redeem bounds how long a queued job admitted by Admit is remembered while its owner has
	// not said its forward was stored (default 1 hour; Batch.Stored ends it sooner, in the
	// owner's next call): asked about again meanwhile (a retried call, a replica that took the
	// queue over from one that stopped before removing it), it is redeemed, charged nothing
	// (JobRedeemed). Asked later, it is decided afresh.
	Redeem time.Duration
	// Late is how late a forward may reach downstream after its admission before its tenant is
	// charged again for it (default 100 ms): Batch.LateWeight.
	// The usual store round trip under load stays well below it; what is stored less late
	// than this is not charged, so downstream may see up to r × Late beside C + r·t.
	Late time.Duration
	// Hold is how long an owner holds a tenant's queue after each of its calls (default 3
	// seconds; see Batch): a replica that stalls or dies holds it that long at most.
	Hold time.Duration
	// Born, for the in-process backend, is when what it would have known began to be lost: a
	// limit it holds no state for is taken to have been empty then and to have refilled since,
	// so that a restarted process does not admit a full capacity at once (see Memory.Forgot).
	// Zero takes such limits for full. The Redis backend learns this from the servers themselves
	// (see born.go).
	Born time.Time
}

// DefaultRedeem is Options.Redeem's default: as long as a job whose removal failed is
// remembered as stored (see Batch.Keep's use in package admission).
const DefaultRedeem = time.Hour

// DefaultLate is Options.Late's default.
const DefaultLate = 100 * time.Millisecond

// withDefaults fills the zero fields.
func (o Options) withDefaults() Options {
	if o.Horizon <= 0 {
		o.Horizon = time.Minute
	}
	if o.SlotGrace <= 0 {
		o.SlotGrace = time.Minute
	}
	if o.MarkerTTL <= 0 {
		o.MarkerTTL = time.Minute
	}
	if o.Redeem <= 0 {
		o.Redeem = DefaultRedeem
	}
	if o.Late <= 0 {
		o.Late = DefaultLate
	}
	if o.Hold <= 0 {
		o.Hold = 3 * time.Second
	}
	return o
}

// check validates a request before any state is touched.
func (r *Request) check() error {
	if r.Plan == nil {
		return fmt.Errorf("bucket: tenant %q: no plan given", r.Tenant)
	}
	if err := checkTenant(r.Tenant); err != nil {
		return err
	}
	if r.Weight < 1 {
		return fmt.Errorf("%w: weight %d, want an integer ≥ 1", ErrInvalidWeight, r.Weight)
	}
	if r.Weight > r.Plan.minCapacity {
		return fmt.Errorf("%w: weight %d exceeds capacity %d of plan %s", ErrWeightOverCapacity, r.Weight, r.Plan.minCapacity, r.Plan.Name)
	}
	return nil
}

func checkTenant(t string) error {
	if t == "" {
		return fmt.Errorf("%w: empty tenant", ErrInvalidTenant)
	}
	for i := 0; i < len(t); i++ {
		if t[i] == '{' || t[i] == '}' {
			return fmt.Errorf("%w: %q contains %q", ErrInvalidTenant, t, t[i])
		}
	}
	return nil
}

// result builds a Result from the integers both backends compute.
func (p *Plan) result(status, remaining, waitMicros, limit, expired int64) (Result, error) {
	if status < 0 || status > int64(Early) || limit < 0 || limit >= int64(len(p.Limits)) {
		return Result{}, fmt.Errorf("bucket: unexpected decision status %d limit %d", status, limit)
	}
	o := Outcome(status)
	return Result{
		Allowed:    o.Allowed(),
		Outcome:    o,
		Remaining:  remaining,
		Wait:       time.Duration(waitMicros) * time.Microsecond,
		Limit:      p.labels[limit],
		LimitIndex: int(limit),

		LeasesExpired: expired,
	}, nil
}
