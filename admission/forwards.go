package admission

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/policy"
	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go"
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
//   - stored: its job is removed from the input with the step's other settled jobs (one purge),
//     and the queue's next call tells the limiter it was stored (owed.stored: the limiter
//     forgets its admission, and answers "stored" to whoever reads it again); if the removal
//     fails, that call asks the limiter to remember it for storedKeep (owed.keep), and the
//     removal is retried.
//
// A job read again before the limiter heard it was stored (a retried call, a replica that took
// the queue over) is redeemed: its forward is looked up before it is made again (once.go).
//
// owed is what a queue's next limiter call must say: it is cleared when a call said it.
type owed struct {
	// stored is the highest id of the jobs the queue settled in order whose forwards the
	// limiter has not been told were stored (0: none); keep: their removal from the input
	// failed (a call is owed for it alone).
	stored int64
	keep   bool
	// lateWeight and late: the weight of forwards stored late and the most late of them.
	lateWeight int64
	late       time.Duration
}

// empty reports whether nothing is owed that needs a call of its own: the stored mark alone
// rides on the queue's next call, whenever that is.
func (o owed) empty() bool { return !o.keep && o.lateWeight == 0 }

// storedKeep is how long the limiter keeps a queue's owed stored sequence (see bucket.Batch):
// past the output's duplicate window a repeated forward would be stored again, and the
// removal is retried every step until then.
const storedKeep = time.Hour

// settle records what the step's forwards became: those of paced jobs (not fail-open, not shadow)
// stored late or more after their decision (a redeemed job's, after its admission) are owed to
// the limiter. It returns how many were late.
func (o *owed) settle(fwds []*forward, late time.Duration) (n int) {
	for _, f := range fwds {
		v := f.planned.verdict
		took := f.took + v.AdmittedAgo // a redeemed job's forward made only now: late by as much
		if !f.forwards() || took < late || v.Fate != wire.FateAdmitted || v.Shadow {
			continue
		}
		o.lateWeight += max(f.job.weight, 1)
		o.late = max(o.late, took)
		n++
	}
	return n
}

// holdLeases renews the leases of the step's forwards every quarter of a lease until done is
// called (once publishAll returned): a forward that NATS holds (a leader election, a node lost,
// the output full) keeps its slots until it is stored, so that the worker, which counts its
// lease from the store, and the limiter agree on when it ends. Without it a lease ended while
// its forward waited, its slot went to the next job, and the forward, stored late, ran beside
// it (issue 39 item 7: 3 running of a limit of 2, 8 of a pool of 6). A renewal of a job done
// meanwhile holds nothing. Steps whose forwards hold no lease start nothing.
func (s *Service) holdLeases(ctx context.Context, q *queue, fwds []*forward) (done func()) {
	var leased []*job
	every := time.Duration(0)
	for _, f := range fwds {
		if f.lease > 0 {
			leased = append(leased, f.job)
			if every == 0 || f.lease/4 < every {
				every = f.lease / 4
			}
		}
	}
	if len(leased) == 0 {
		return func() {}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(max(every, 10*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			for _, j := range leased {
				if _, _, err := s.cfg.Policy.Lease(ctx, policy.LeaseRenew, q.tenant, j.id, max(j.weight, 1), bucket.NoCost, bucket.Report{}); err != nil && ctx.Err() == nil {
					s.log.Warn("a forward waiting to be stored: its lease could not be renewed", "tenant", q.tenant, "sequence", j.seq, "err", err)
				}
			}
		}
	})
	return func() { close(stop); wg.Wait() }
}

// forwards are the messages of the jobs p sends (their forwards and dead letters), in order.
func (s *Service) forwards(q *queue, jobs []job, d *decision, p stepPlan) []*forward {
	fwds := make([]*forward, 0, len(jobs))
	for i := range jobs {
		pl := p.each[i]
		if !pl.act.sends() {
			continue
		}
		j := &jobs[i]
		f := &forward{job: j, planned: pl}
		if pl.act == actForward {
			f.msg, f.stream = s.forwardMsg(j, d, pl.verdict), s.cfg.StreamOut
			if d.lease > 0 && pl.verdict.Fate == wire.FateAdmitted && !pl.verdict.Shadow { // see leaseHeader
				f.lease = d.lease
			}
		} else {
			f.msg, f.stream = s.deadMsg(j, pl.verdict, pl.verdict.Code, pl.verdict.Detail), s.cfg.StreamDead
		}
		fwds = append(fwds, f)
	}
	return fwds
}

// send publishes the step's messages, holding their leases while NATS holds them, and
// dead-letters instead the forwards that can never be stored.
func (s *Service) send(ctx context.Context, q *queue, fwds []*forward) {
	s.tel.inFlight.Add(ctx, int64(len(fwds)))
	held := s.holdLeases(ctx, q, fwds)
	s.pub.publishAll(ctx, fwds)
	held()
	s.deadLetterRefused(ctx, fwds)
	s.tel.inFlight.Add(ctx, -int64(len(fwds)))
}

// deadLetterRefused dead-letters instead what can never be stored; a dead letter that cannot
// carry the payload is sent without it.
func (s *Service) deadLetterRefused(ctx context.Context, fwds []*forward) {
	for round := 0; round < 2 && ctx.Err() == nil; round++ {
		var again []*forward
		for _, f := range fwds {
			if f.err == nil || !s.pub.permanent(f.err) {
				continue
			}
			j, v := f.job, f.planned.verdict
			var dm *nats.Msg
			switch {
			case f.stream != s.cfg.StreamDead:
				code, detail := wire.CodeForwardRejected, fmt.Sprintf("stream %s refused it: %v", f.stream, f.err)
				if errors.Is(f.err, errTooLarge) || tooLargeAPI(f.err) {
					code, detail = wire.CodeTooLarge, fmt.Sprintf("it can never be stored on stream %s: %v", f.stream, f.err)
				}
				v = policy.Verdict{Fate: wire.FateDead, Code: code, Detail: detail}
				dm = s.deadMsg(j, v, code, detail)
			case len(f.msg.Data) > 0:
				dm = s.deadMsg(j, v, v.Code, v.Detail+fmt.Sprintf("; the payload (%d bytes) is left out: the dead letter could not carry it (%v); it was sequence %d of stream %s",
					len(j.data), f.err, j.seq, j.stream))
				dm.Data = nil
			default:
				continue // even without its payload: see conclude
			}
			act := f.planned.act
			if act == actForward {
				act = actDead
			}
			f.planned, f.msg, f.stream, f.lease, f.err = planned{act: act, verdict: v, out: f.planned.out}, dm, s.cfg.StreamDead, 0, nil
			again = append(again, f)
		}
		if len(again) == 0 {
			return
		}
		s.pub.publishAll(ctx, again)
	}
}

// outSubject is the subject a job published on subject is forwarded on.
func (s *Service) outSubject(subject string) string {
	if _, out, err := s.out.Map(subject); err == nil {
		return out
	}
	return subject // cannot happen for a job of the input: it matched the template
}
