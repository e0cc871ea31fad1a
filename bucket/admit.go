package bucket

import (
	"fmt"
	"time"
)

// Mode says which side of a tenant's queue asks Admit.
type Mode uint8

const (
	// Ingest decides jobs as they arrive. While the tenant's lane is open (jobs of its wait in
	// it), every job is sent to the lane behind them, so a tenant's jobs keep their order. When
	// the lane is closed, jobs that fit now are admitted; the first that does not is sent to the
	// lane and opens it, and so is every job after it in the batch.
	Ingest Mode = iota
	// Lane decides the head of the tenant's lane: admitted in order while they fit; the first
	// that does not fits after Wait, and every later one waits for it.
	Lane
	// modeClose is CloseLane's, internal.
	modeClose
	// Hold is Ingest while the tenant is paused: every job is sent to the lane (which opens),
	// none is admitted or charged.
	Hold
)

func (m Mode) String() string {
	switch m {
	case Lane:
		return "lane"
	case Hold:
		return "hold"
	}
	return "ingest"
}

// A Job is one queued job of a batch.
type Job struct {
	// ID identifies the job for idempotency: its input stream sequence (1 to 2^53-1).
	ID int64
	// Weight is what it costs every limit (≥ 1, ≤ Plan.MaxWeight()).
	Weight int64
}

// JobOutcome is what Admit decided for one job of a batch.
type JobOutcome uint8

const (
	// JobAdmitted: admitted now and charged.
	JobAdmitted JobOutcome = iota
	// JobRedeemed: admitted by a call less than Options.Redeem ago; charged nothing now.
	JobRedeemed
	// JobToLane (Ingest): send it to the tenant's lane; it is decided there, in order.
	JobToLane
	// JobToLaneBefore (Ingest): sent to the lane by a call less than Options.Redeem ago.
	JobToLaneBefore
	// JobNotYet (Lane): it does not fit yet; it or a job ahead of it fits after Wait.
	JobNotYet
)

var jobOutcomeNames = [...]string{"admitted", "redeemed", "to-lane", "to-lane-before", "not-yet"}

func (o JobOutcome) String() string {
	if int(o) < len(jobOutcomeNames) {
		return jobOutcomeNames[o]
	}
	return fmt.Sprintf("outcome(%d)", o)
}

// Admitted reports whether the job may be forwarded now.
func (o JobOutcome) Admitted() bool { return o <= JobRedeemed }

// A Batch asks Admit about some of one tenant's queued jobs, in their order.
type Batch struct {
	// Tenant names the bucket set; non-empty, without '{' or '}'.
	Tenant string
	// Plan is the tenant's plan.
	Plan *Plan
	// Mode says which side asks.
	Mode Mode
	// Jobs in queue order; at most MaxBatch.
	Jobs []Job
}

// MaxBatch bounds the jobs of one Admit call.
const MaxBatch = 512

// maxJobID bounds job ids: exact in the scripts' Lua numbers.
const maxJobID = 1<<53 - 1

// BatchResult is Admit's answer.
type BatchResult struct {
	// Outcomes holds one outcome per job of the batch, in order.
	Outcomes []JobOutcome
	// Wait is, for the first job not admitted that this call decided (not one answered as
	// before), how long until its weight fits every limit (for a job sent to the lane: a hint for
	// the lane); zero when there is none. Microsecond resolution.
	Wait time.Duration
	// Limit names the limit that sets Wait; when every job was admitted, the limit holding the
	// fewest tokens. Its name, or its index when unnamed.
	Limit string
	// LimitIndex is Limit's index in the plan; -1 when Fenced.
	LimitIndex int
	// Fenced: jobs were not admitted because a fence of the tenant stands (see Memory.Fence):
	// forwards decided before are not yet confirmed stored. Wait is then until the last fence
	// ends (it is usually lowered sooner), and Limit is empty.
	Fenced bool
	// Remaining is the whole weight the plan lets through now: the minimum over its limits.
	Remaining int64
	// LaneOpen reports whether the tenant's lane is open after the call.
	LaneOpen bool
	// LeasesExpired counts the tenant's leases (see KindConcurrency) that this call found ended
	// without being released, and dropped.
	LeasesExpired int64
	// ShadowWaits is set when the plan is in shadow mode (Plan.Shadow): one wait per job, how
	// long the plan would have delayed it (zero: it fitted at once, or it was not decided: sent
	// to the lane). Every job Ingest or Lane decides is then admitted, and the plan is charged
	// on the tenant's shadow state, apart from the state enforced plans use: each job takes
	// the slot it would have waited for, so the waits are those of the queue the plan would
	// have made. A wait of Options.Horizon or more is given as Options.Horizon. Remaining and
	// Limit are the shadow state's.
	ShadowWaits []time.Duration
}

// modeShadow is added to Ingest and Lane for a plan in shadow mode (lua/admit.lua modes 4, 5).
const modeShadow = 4

// scriptMode is the mode the scripts run for mode under plan p.
func scriptMode(p *Plan, mode Mode) int64 {
	if p.Shadow && (mode == Ingest || mode == Lane) {
		return int64(mode) + modeShadow
	}
	return int64(mode)
}

// check validates a batch before any state is touched.
func (b *Batch) check() error {
	if b.Plan == nil {
		return fmt.Errorf("bucket: tenant %q: no plan given", b.Tenant)
	}
	if err := checkTenant(b.Tenant); err != nil {
		return err
	}
	if b.Mode != Ingest && b.Mode != Lane && b.Mode != Hold {
		return fmt.Errorf("bucket: batch mode %d, want Ingest, Lane or Hold", b.Mode)
	}
	if len(b.Jobs) > MaxBatch {
		return fmt.Errorf("bucket: batch of %d jobs, at most %d", len(b.Jobs), MaxBatch)
	}
	for _, j := range b.Jobs {
		if j.ID < 1 || j.ID > maxJobID {
			return fmt.Errorf("bucket: job id %d, want 1 to 2^53-1", j.ID)
		}
		if j.Weight < 1 {
			return fmt.Errorf("%w: weight %d, want an integer ≥ 1", ErrInvalidWeight, j.Weight)
		}
		if j.Weight > b.Plan.minCapacity {
			return fmt.Errorf("%w: weight %d exceeds capacity %d of plan %s", ErrWeightOverCapacity, j.Weight, b.Plan.minCapacity, b.Plan.Name)
		}
	}
	return nil
}

// batchResult builds a BatchResult from the integers both backends compute.
func (p *Plan) batchResult(wait, limit, remaining, open, expired int64, outcomes, shadow []int64) (BatchResult, error) {
	if limit < -1 || limit >= int64(len(p.Limits)) {
		return BatchResult{}, fmt.Errorf("bucket: unexpected binding limit %d", limit)
	}
	res := BatchResult{
		Outcomes:   make([]JobOutcome, len(outcomes)),
		Wait:       time.Duration(wait) * time.Microsecond,
		LimitIndex: int(limit),
		Remaining:  remaining,
		LaneOpen:   open == 1,
		Fenced:     limit == -1,

		LeasesExpired: expired,
	}
	if limit >= 0 {
		res.Limit = p.labels[limit]
	}
	for i, o := range outcomes {
		if o < 0 || o > int64(JobNotYet) {
			return BatchResult{}, fmt.Errorf("bucket: unexpected job outcome %d", o)
		}
		res.Outcomes[i] = JobOutcome(o)
	}
	if shadow != nil {
		res.ShadowWaits = make([]time.Duration, len(shadow))
		for i, w := range shadow {
			if w < 0 {
				return BatchResult{}, fmt.Errorf("bucket: unexpected shadow wait %d", w)
			}
			res.ShadowWaits[i] = time.Duration(w) * time.Microsecond
		}
	}
	return res, nil
}
