package bucket

import (
	"fmt"
	"hash/fnv"
	"time"

	"github.com/admitter/admitter/lua"
)

// A Job is one queued job of a batch.
type Job struct {
	// ID identifies the job for idempotency: its input stream sequence (1 to 2^53-1).
	ID int64
	// Weight is what it costs every limit (≥ 1, ≤ Plan.MaxWeight()).
	Weight int64
	// Again: it may have been admitted before (a replica that took the queue over reads it
	// again): a batch of a plan with a pool or leases first looks such jobs up in the tenant's
	// state, and asks the pool only for those not admitted before (see Batch.Peek), and nothing
	// after those admitted before (BatchResult.AfterRedeemed).
	Again bool `json:"again,omitempty"`
}

// JobOutcome is what Admit decided for one job of a batch.
type JobOutcome uint8

const (
	// JobAdmitted: admitted now and charged.
	JobAdmitted JobOutcome = iota
	// JobRedeemed: admitted before, by a call whose job its owner has not said stored since
	// (Batch.Stored), less than Options.Redeem ago: charged nothing now. Its forward may be
	// downstream already (the call's answer was lost, or the replica that made it stopped
	// before its removal): look it up before forwarding it again, and a forward made only now
	// is late (Batch.LateWeight). BatchResult.AdmittedAgo says when it was admitted.
	JobRedeemed
	// JobNotYet: it does not fit yet; it or a job ahead of it fits after Wait.
	JobNotYet
	// JobStored: its forward was seen stored downstream before (Batch.Stored): remove it from
	// the queue, do not forward it again.
	JobStored
)

var jobOutcomeNames = [...]string{"admitted", "redeemed", "not-yet", "stored"}

func (o JobOutcome) String() string {
	if int(o) < len(jobOutcomeNames) {
		return jobOutcomeNames[o]
	}
	return fmt.Sprintf("outcome(%d)", o)
}

// Admitted reports whether the job may be forwarded now.
func (o JobOutcome) Admitted() bool { return o <= JobRedeemed }

// A Batch asks Admit about the head of one tenant's queue: its jobs in the input, in order.
// One replica at a time decides a tenant's queue, its Owner: it holds the queue for
// Options.Hold from each call, and while it does another owner's call admits nothing
// (BatchResult.Handover), so that forwards one replica decided and has not yet seen stored
// cannot land beside forwards another decides meanwhile.
type Batch struct {
	// Tenant names the bucket set; non-empty, without '{' or '}'.
	Tenant string
	// Plan is the tenant's plan.
	Plan *Plan
	// Jobs in queue order; at most MaxBatch (none: only Stored and the late charge).
	Jobs []Job
	// Owner names the replica asking (OwnerID of its name; non-zero).
	Owner int64
	// Stored is the highest input sequence of the tenant whose forward the owner saw stored
	// downstream (0: nothing to say): jobs at or below the highest ever given, in its span of
	// ids (JobSpan), are JobStored. Keep
	// is how long the state must remember it (the removal of those jobs from the input is not
	// confirmed yet); zero: as long as the state lasts anyway.
	Stored int64
	Keep   time.Duration
	// LateWeight is the weight of the owner's forwards stored Late or more after their decision
	// (Options.Late): they reached downstream beside what the limits gave meanwhile, so the
	// limits take it again (a bucket min(weight, late / interval) tokens, a window or quota the
	// weight) before anything else is decided. A job redeemed Options.Late or more after its
	// admission (the answer of the call that admitted it was lost) is charged the same way.
	LateWeight int64
	Late       time.Duration
	// Release gives the owner's hold on the queue up after the call (it no longer owns the
	// tenant: another replica may take the queue at once).
	Release bool
	// Peek decides and changes nothing: each job is answered stored, redeemed or not yet (wait
	// zero), as it stands; nothing is said or charged. See Job.Again.
	Peek bool
}

// MaxBatch bounds the jobs of one Admit call.
const MaxBatch = 512

// JobSpan: a job's id is its stream's sequence plus a multiple of JobSpan naming the stream
// (see admission: a tenant's jobs move to another stream when the input's partitions change);
// Batch.Stored covers the ids of its own span only.
const JobSpan = lua.JobSpan

// stored reports whether job is at or below the stored mark, in its span (see Batch.Stored).
func stored(job, mark int64) bool { return job <= mark && job/JobSpan == mark/JobSpan }

// maxJobID bounds job ids: exact in the scripts' Lua numbers.
const maxJobID = 1<<53 - 1

// OwnerID is the number naming a replica in Batch.Owner: a 52-bit hash of its name, never 0.
func OwnerID(replica string) int64 {
	h := fnv.New64a()
	h.Write([]byte(replica))
	return int64(h.Sum64()>>12) | 1
}

// BatchResult is Admit's answer.
type BatchResult struct {
	// Outcomes holds one outcome per job of the batch, in order.
	Outcomes []JobOutcome
	// Wait is, for the first job not admitted, how long until its weight fits every limit (or,
	// Handover, until the other owner's hold ends); zero when every job was admitted.
	// Microsecond resolution.
	Wait time.Duration
	// Limit names the limit that sets Wait; when every job was admitted, the limit holding the
	// fewest tokens. Its name, or its index when unnamed; empty for a Handover.
	Limit string
	// LimitIndex is Limit's index in the plan; -1 for a Handover; -2 when Downstream (or the
	// pool's downstream: see PoolBound).
	LimitIndex int
	// Downstream: the downstream asked for no more of the tenant's jobs (a done message's
	// Admit-Retry-After; with Admit-Retry-Scope: pool, of the pool's, and PoolBound is set too):
	// nothing was admitted but jobs redeemed; Wait is until the hold ends, Limit is
	// LimitDownstream.
	Downstream bool
	// Handover: another owner holds the tenant's queue (see Batch): nothing was admitted; Wait
	// is until its hold ends (it usually ends sooner: the holder's next call, or its last).
	Handover bool
	// Remaining is the whole weight the plan lets through now: the minimum over its limits.
	Remaining int64
	// LeasesExpired counts the tenant's leases (see KindConcurrency) that this call found ended
	// without being released, and dropped.
	LeasesExpired int64
	// PoolBound: the first job not admitted waits for the plan's pool, not for its limits
	// (Limit "pool NAME", LimitIndex -1); Wait is until what it needs may be free (it is woken
	// sooner when a release frees it). Pool is the pool as the call found it (nil: no pool).
	PoolBound bool
	Pool      *PoolState
	// Wakes names the tenants whose queues may go now, each once: the one whose turn refused
	// the pool's grant, and the waiters the call's giving back of unused pool grants made room
	// for.
	Wakes []string
	// GiveBackErr is why the pool's grants that the tenant's limits did not use could not be
	// given back (nil: given back, or none to give). The decision stands; their slots stay
	// taken until their leases end (the pool runs below its capacity meanwhile): the caller
	// should count and log it.
	GiveBackErr error
	// AdmittedAgo holds, for each job redeemed, how long before this call it was admitted (on
	// the limiter's clock), zero for the others; nil when no job was redeemed.
	AdmittedAgo []time.Duration
	// ShadowWaits is set when the plan is in shadow mode (Plan.Shadow): one wait per job, how
	// long the plan would have delayed it (zero: it fitted at once). Every job not stored is
	// then admitted, and the plan is charged on the tenant's shadow state, apart from the state
	// enforced plans use: each job takes the slot it would have waited for, so the waits are
	// those of the queue the plan would have made. A wait of Options.Horizon or more is given
	// as Options.Horizon. Remaining and Limit are the shadow state's. No owner holds the queue.
	ShadowWaits []time.Duration
	// Local: decided on this replica's copy of the tenant's state while Redis was unreachable
	// (see Fallback).
	Local bool
	// AfterRedeemed: the batch led with jobs that may have been admitted before (Job.Again),
	// some were (JobRedeemed), and its plan takes slots (Plan.Leases): the jobs after those were
	// not decided (JobNotYet, Wait zero). A redeemed job's lease may have ended, and if its
	// forward is not downstream, its slots are taken again (a start) before it is forwarded:
	// jobs admitted behind it in the same call would have taken them, and it would wait for
	// them, and they behind it, unforwarded, their slots held by nobody. Ask about them again
	// once the redeemed jobs are settled or started.
	AfterRedeemed bool
}

// check validates a batch before any state is touched.
func (b *Batch) check() error {
	if b.Plan == nil {
		return fmt.Errorf("bucket: tenant %q: no plan given", b.Tenant)
	}
	if err := checkTenant(b.Tenant); err != nil {
		return err
	}
	if b.Owner == 0 && !b.Plan.Shadow {
		return fmt.Errorf("bucket: tenant %q: a batch without an owner (see OwnerID)", b.Tenant)
	}
	if b.Stored < 0 || b.Stored > maxJobID || b.LateWeight < 0 || b.Late < 0 || b.Keep < 0 {
		return fmt.Errorf("bucket: tenant %q: stored %d, late weight %d, late %v, keep %v: want none negative", b.Tenant, b.Stored, b.LateWeight, b.Late, b.Keep)
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
		if j.Weight > b.Plan.MaxWeight() {
			return fmt.Errorf("%w: weight %d exceeds capacity %d of plan %s", ErrWeightOverCapacity, j.Weight, b.Plan.MaxWeight(), b.Plan.Name)
		}
	}
	return nil
}

// redeemedAgo is the outcome of a job redeemed at once after its admission, in the integers both
// backends compute (lua/admit.lua: 4 + how long ago, µs).
const redeemedAgo = 4

// bindDownstream is the binding limit of a batch held by the downstream (admit.lua's -2).
const bindDownstream = -2

// LimitDownstream is BatchResult.Limit when the downstream holds the tenant's forwards.
const LimitDownstream = "downstream"

// batchResult builds a BatchResult from the integers both backends compute.
func (p *Plan) batchResult(wait, limit, remaining, expired int64, outcomes, shadow []int64) (BatchResult, error) {
	if limit < bindDownstream || limit >= int64(len(p.Limits)) {
		return BatchResult{}, fmt.Errorf("bucket: unexpected binding limit %d", limit)
	}
	res := BatchResult{
		Outcomes:   make([]JobOutcome, len(outcomes)),
		Wait:       time.Duration(wait) * time.Microsecond,
		LimitIndex: int(limit),
		Remaining:  remaining,
		Handover:   limit == -1,
		Downstream: limit == bindDownstream,

		LeasesExpired: expired,
	}
	switch {
	case limit >= 0:
		res.Limit = p.labels[limit]
	case limit == bindDownstream:
		res.Limit = LimitDownstream
	}
	for i, o := range outcomes {
		switch {
		case o >= redeemedAgo: // redeemed, admitted o - redeemedAgo µs ago (lua/admit.lua)
			if res.AdmittedAgo == nil {
				res.AdmittedAgo = make([]time.Duration, len(outcomes))
			}
			res.Outcomes[i], res.AdmittedAgo[i] = JobRedeemed, time.Duration(o-redeemedAgo)*time.Microsecond
		case o < 0:
			return BatchResult{}, fmt.Errorf("bucket: unexpected job outcome %d", o)
		default:
			res.Outcomes[i] = JobOutcome(o)
		}
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
