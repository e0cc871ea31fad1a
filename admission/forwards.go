package admission

import (
	"time"

	"github.com/admitter/admitter/wire"
)

// A forward decided and not yet stored downstream is the one thing that can break pacing
// (README, invariant 1): NATS may store it seconds after its decision (a node that stopped
// answering, a stream electing a leader, the client reconnecting), beside whatever the tenant's
// limits gave meanwhile; and it can be forwarded twice if its job is read again before the
// input forgets it. Its whole life is owned by its tenant's queue, one step at a time:
//
//   - decided by the queue's owner (the limiter holds the tenant's queue for it: another
//     replica admits none of the tenant's jobs meanwhile, see bucket.Batch);
//   - published with a Msg-Id of its input (a repeat is dropped by the output's duplicate
//     window), and awaited: the step ends only when every forward is stored or refused for good;
//   - stored late (Options.Late or more after its decision): its weight is owed, and the
//     queue's next limiter call charges it before deciding anything (owed.late);
//   - stored: its job is removed from the input with the step's other settled jobs (one purge);
//     if the removal fails, the queue's next call tells the limiter it was stored (owed.stored),
//     so that whoever reads it again does not forward it again, and the removal is retried.
//
// owed is what a queue's next limiter call must say: it is cleared when a call said it.
type owed struct {
	// stored is the highest job id of the tenant whose forward was stored and whose removal
	// from the input is not confirmed (0: none).
	stored int64
	// lateWeight and late: the weight of forwards stored late and the most late of them.
	lateWeight int64
	late       time.Duration
}

// empty reports whether nothing is owed.
func (o owed) empty() bool { return o.stored == 0 && o.lateWeight == 0 }

// storedKeep is how long the limiter keeps a queue's owed stored sequence (see bucket.Batch):
// past the output's duplicate window a repeated forward would be stored again, and the
// removal is retried every step until then.
const storedKeep = time.Hour

// settle records what the step's published messages became: forwards of paced jobs (not
// fail-open, not shadow) stored late or more after the decision are owed to the limiter. It
// returns how many were late.
func (o *owed) settle(jobs []job, outs []*outMsg, owner []int, late time.Duration) (n int) {
	for k, m := range outs {
		j := &jobs[owner[k]]
		if m.err != nil || m.took < late || !m.forward || j.verdict.Fate != wire.FateAdmitted || j.verdict.Shadow {
			continue
		}
		o.lateWeight += max(j.weight, 1)
		o.late = max(o.late, m.took)
		n++
	}
	return n
}
