package admission

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// Jobs past their bound on waiting (policy: expiry.go) are dead-lettered as expired, and so
// settled like any dead letter. A job at the head of its queue, or among the jobs a step settles
// in order, leaves with them. One whose own bound (Admit-Max-Wait) passed while it waited behind
// the job that waits is dead-lettered out of its place (skip): its dead letter is published and
// awaited with the step's others, then it leaves the queue's buffer and is deleted from the input
// at once, so that neither this replica nor the next holder of its partition reads it again
// (the dead stream's duplicate window would drop a dead letter repeated within it, not after).
// A deletion that fails, or an input that denies deletes, leaves it in queue.skipped: reads pass
// over it, and it is removed with the settled jobs once the cursor reaches it. The jobs around
// it keep their order, and it spent no limit (it was never asked about).

// maxSkipped bounds queue.skipped: beyond it, a job whose bound passed behind the job that
// waits waits until it is at the head (then it is dead-lettered in order).
const maxSkipped = 1024

// skipExpired removes the jobs at input sequences seqs (ascending), settled out of their place
// (dead-lettered expired, see above, or forwarded ahead of their place: priority.go), from q:
// from its buffer and index, and from the input.
func (s *Service) skipExpired(ctx context.Context, q *queue, seqs []uint64) {
	s.queues.unbuffer(q, seqs)
	if s.noDeletes.Load() {
		q.skip(seqs...)
		return
	}
	stream := s.in.stream(q.part)
	in, err := s.streams.get(ctx, stream)
	if err != nil {
		q.skip(seqs...)
		return
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var mu sync.Mutex
	var failed []uint64
	var errs []error
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, seq := range seqs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := in.DeleteMsg(dctx, seq); err != nil && !gone(err) {
				mu.Lock()
				failed, errs = append(failed, seq), append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(failed) == 0 {
		return
	}
	slices.Sort(failed)
	q.skip(failed...)
	err = errors.Join(errs...)
	switch {
	case deleteDenied(err):
		s.noDeletes.Store(true)
		s.log.Warn("the input stream denies deletes: forwarded jobs are purged by subject instead (slower when tenants' jobs are interleaved)", "stream", stream)
	case ctx.Err() == nil:
		s.tel.settleError("delete")
		s.log.Warn("removing expired jobs from the input failed: they are removed with the jobs ahead of them",
			"tenant", q.tenant, "stream", stream, "jobs", len(failed), "err", errs[0])
	}
}

// skip adds seqs (ascending, each above the cursor) to q's skipped jobs.
func (q *queue) skip(seqs ...uint64) {
	for _, seq := range seqs {
		if i, found := slices.BinarySearch(q.skipped, seq); !found {
			q.skipped = slices.Insert(q.skipped, i, seq)
		}
	}
}

// passSkipped settles q's skipped jobs below input sequence at: they join the settled jobs to
// be removed from the input (in order: at is the next settled job's).
func (q *queue) passSkipped(at uint64) {
	n := 0
	for n < len(q.skipped) && q.skipped[n] < at {
		q.unremoved.add(q.skipped[n])
		n++
	}
	if n > 0 {
		q.skipped = append(q.skipped[:0], q.skipped[n:]...)
	}
}

// dropSkipped takes q's skipped jobs out of jobs, just read: those at the head are settled (the
// queue moves past them: passed), the others passed over.
func (s *Service) dropSkipped(q *queue, jobs []job) (rest []job, passed bool) {
	if len(q.skipped) == 0 {
		return jobs, false
	}
	rest = jobs[:0]
	var last uint64
	for i := range jobs {
		j := jobs[i]
		if _, found := slices.BinarySearch(q.skipped, j.at); !found || j.src || j.lane {
			rest = append(rest, j)
			continue
		}
		j.span.End()
		if len(rest) == 0 { // at the head: settled
			q.passSkipped(j.at + 1)
			q.storedID = max(q.storedID, j.id)
			last, passed = j.at, true
		}
	}
	if passed {
		s.queues.settled(q, last)
	}
	return rest, passed
}
