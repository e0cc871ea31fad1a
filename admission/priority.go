package admission

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/admitter/admitter/wire"
)

// Priorities within a tenant (wire.HeaderPriority: 1 first, 5 last, 3 when absent). A step asks
// the limiter about the jobs it read highest priority first, FIFO within a priority (askOrder):
// the limiter admits in the order asked, so a priority-1 job takes the tenant's next slot, and
// nothing else changes of what the plan allows or of the tenant's turn among the others (the
// step's budget goes to the jobs asked first: pick). A plan's priority_aging lifts every waiting
// job one level per period waited (effective): one level is worth a period of waiting. Jobs of
// priority 4 and 5 wait behind the default-priority jobs read with them; a run of more of them
// than a read at the head of the queue goes in its place (the default class is not indexed).
//
// A tenant's queue is still its jobs in the input in the order they were stored, read densely
// from its cursor (the lowest sequence not settled). The jobs not of the default priority are
// also indexed as the feed hands them over (it reads every job of the partition once, headers
// included: FIELD-NOTES, "Priorities and keyed limits"): a step adds to the jobs it read in
// order the indexed jobs beyond them that rank ahead of the default (readIndexed: by sequence,
// pipelined). A job that settles while a job of its tenant stored before it waits, or that was
// not read in order, settles out of its place (planned.out): its message is stored, then it is
// deleted from the input (as an expired job's is, expiry.go), and the cursor stays at the job
// that waits. The queue's settled mark, which the limiter takes as "every job at or below it is
// settled" (policy.Queue.Stored), covers the jobs settled in order only; the limiter remembers
// the admissions of those settled out of place until the mark passes them (or an hour), and
// the input no longer holds them for a next holder to read again.
//
// Bounds. The index holds at most maxIndexed jobs over all the queues of a replica (16 bytes
// each): a job the feed hands over beyond it is not indexed, and is ranked only among the jobs
// read with it (it keeps its place otherwise). A queue behind reads the index for at most a
// read's count of jobs per step. While maxSkipped jobs settled out of place could not be
// deleted (deletes failing or denied), a queue ranks nothing: FIFO, until they are removed.
// A new holder of a partition rebuilds the index from the partition's first job (its feed
// starts there); a queue adopted without a feed (an input without one) has none: its jobs are
// ranked among those read together.

// maxIndexed bounds the jobs indexed by priority over every queue of a replica.
const maxIndexed = 1 << 20

// indexed is a job in a queue's priority index: its input sequence and when it was stored (Unix
// ns, for its age).
type indexed struct {
	seq    uint64
	stored int64
}

// priorities is a queue's index of its jobs whose priority is not the default, by priority,
// each list ascending by sequence (the feed hands jobs over in order). Guarded by queues.mu.
type priorities struct {
	by [wire.LowestPriority + 1][]indexed
	n  int
}

// add indexes the job at seq of priority p.
func (x *priorities) add(p int, seq uint64, stored time.Time) {
	x.by[p] = append(x.by[p], indexed{seq: seq, stored: stored.UnixNano()})
	x.n++
}

// below drops the jobs below seq (settled in order); it returns how many.
func (x *priorities) below(seq uint64) int {
	dropped := 0
	for p := range x.by {
		l := x.by[p]
		k, _ := slices.BinarySearchFunc(l, seq, func(e indexed, s uint64) int { return cmp.Compare(e.seq, s) })
		if k > 0 {
			x.by[p] = slices.Delete(l, 0, k)
			dropped += k
		}
	}
	x.n -= dropped
	return dropped
}

// remove drops the jobs at seqs (settled out of their place, or gone); it returns how many.
func (x *priorities) remove(seqs ...uint64) int {
	dropped := 0
	for _, seq := range seqs {
		for p := range x.by {
			l := x.by[p]
			if k, found := slices.BinarySearchFunc(l, seq, func(e indexed, s uint64) int { return cmp.Compare(e.seq, s) }); found {
				x.by[p] = slices.Delete(l, k, k+1)
				dropped++
				break
			}
		}
	}
	x.n -= dropped
	return dropped
}

// ahead returns up to n of the indexed jobs after sequence after that rank ahead of a job of the
// default priority stored now (effective priority below it under aging at now), best first.
func (x *priorities) ahead(after uint64, n int, aging time.Duration, now time.Time) []indexed {
	type cand struct {
		indexed
		p int
	}
	var out []cand
	for p, l := range x.by {
		k, _ := slices.BinarySearchFunc(l, after+1, func(e indexed, s uint64) int { return cmp.Compare(e.seq, s) })
		for taken := 0; k < len(l) && taken < n; k++ {
			e := l[k]
			ep := effective(p, time.Unix(0, e.stored), aging, now)
			if ep >= wire.DefaultPriority {
				break // those after it were stored later: they are lifted no more
			}
			out = append(out, cand{e, ep})
			taken++
		}
	}
	slices.SortFunc(out, func(a, b cand) int { return cmp.Or(cmp.Compare(a.p, b.p), cmp.Compare(a.seq, b.seq)) })
	res := make([]indexed, 0, min(n, len(out)))
	for _, c := range out[:min(n, len(out))] {
		res = append(res, c.indexed)
	}
	slices.SortFunc(res, func(a, b indexed) int { return cmp.Compare(a.seq, b.seq) })
	return res
}

// effective is the priority of a job of priority p stored at stored, at now, under aging (a
// plan's priority_aging; 0: none): one level higher (smaller) per period waited, at most the
// highest.
func effective(p int, stored time.Time, aging time.Duration, now time.Time) int {
	if aging > 0 && !stored.IsZero() && now.After(stored) {
		p -= int(min(now.Sub(stored)/aging, wire.LowestPriority))
	}
	return max(p, wire.HighestPriority)
}

// indexLocked indexes f, a job the feed hands to q, if its priority is not the default and the
// replica's index has room.
func (qs *queues) indexLocked(q *queue, f fed) {
	if !hasHeader(f.header, wire.HeaderPriority) || qs.indexed >= maxIndexed {
		return
	}
	if p, err := wire.ParsePriority(f.header); err == nil && p != wire.DefaultPriority {
		q.prio.add(p, f.seq, f.stored)
		qs.indexed++
	}
}

// unindex drops the jobs at seqs from q's index.
func (qs *queues) unindex(q *queue, seqs ...uint64) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	qs.indexed -= q.prio.remove(seqs...)
}

// ahead returns up to n of q's indexed jobs after sequence after that rank ahead of the default
// priority (see priorities.ahead), with those of them the queue has buffered.
func (qs *queues) ahead(q *queue, after uint64, n int, aging time.Duration, now time.Time) ([]indexed, map[uint64]fed) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	want := q.prio.ahead(after, n, aging, now)
	have := map[uint64]fed{}
	for _, e := range want {
		if k, found := slices.BinarySearchFunc(q.buf, e.seq, func(f fed, s uint64) int { return cmp.Compare(f.seq, s) }); found {
			have[e.seq] = q.buf[k]
		}
	}
	return want, have
}

// readIndexed reads the jobs of q's index after sequence after that rank ahead of the default
// priority, up to n (see priorities.ahead): from its buffer, or from the input by sequence, the
// reads pipelined. A job no longer in the input (settled out of its place by an earlier holder)
// leaves the index. A read that fails leaves its job for a later step.
func (s *Service) readIndexed(ctx context.Context, q *queue, after uint64, n int, aging time.Duration, now time.Time) []fed {
	want, have := s.queues.ahead(q, after, n, aging, now)
	if len(want) == 0 {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out := make([]fed, len(want))
	found := make([]bool, len(want))
	var gone []uint64
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	stream := s.in.stream(q.part)
	for i, e := range want {
		if f, ok := have[e.seq]; ok {
			out[i], found[i] = f, true
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			msgs, _, err := s.reader.read(rctx, stream, q.filter, e.seq, 1, 1<<20)
			var f fed
			if err == nil && len(msgs) > 0 {
				f, err = fedOf(msgs[0])
			}
			mu.Lock()
			defer mu.Unlock()
			switch subject, _, ok := s.in.published(q.part, f.subject); {
			case err != nil:
			case len(msgs) == 0 || f.seq != e.seq:
				gone = append(gone, e.seq) // not in the input any more
			case ok:
				f.subject = subject
				out[i], found[i] = f, true
			}
		})
	}
	wg.Wait()
	if len(gone) > 0 {
		s.queues.unindex(q, gone...)
	}
	read := out[:0]
	for i := range out {
		if found[i] {
			read = append(read, out[i])
		}
	}
	return read
}

// askOrder is the order in which a step asks the limiter about jobs (indexes into jobs): by
// effective priority (see effective), then as stored (by sequence).
func askOrder(jobs []job, aging time.Duration, now time.Time) []int {
	order := make([]int, len(jobs))
	prio := make([]int, len(jobs))
	for i := range jobs {
		order[i], prio[i] = i, effective(jobs[i].priority, jobs[i].stored, aging, now)
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Or(cmp.Compare(prio[a], prio[b]), cmp.Compare(jobs[a].at, jobs[b].at)) })
	return order
}

// pick is what a step asks about of jobs (those read in order from the cursor first, dense of
// them, then those read from the index), asked in order (see rank): the first and those after
// it whose weights (1 for a weight that does not read) add up to at most budget (a head heavier
// than the turn goes alone, and its queue pays the difference back in the rounds after: see
// queues.take). It returns them as read (by sequence), their order, and how many of them were
// read in order from the cursor with none left out before them (inOrder: the jobs that may
// settle in their place). The jobs left out are read again by a later step (their spans end
// here).
func pick(jobs []job, dense int, order []int, budget int64) (picked []job, asked []int, inOrder int) {
	keep := make([]bool, len(jobs))
	var sum int64
	for k, i := range order {
		w := jobs[i].weight
		if jobs[i].wErr != nil || w < 1 {
			w = 1
		}
		if sum += w; sum > budget && k > 0 {
			break
		}
		keep[i] = true
	}
	at := make([]int, len(jobs)) // index read → index picked
	inOrder = -1
	for i := range jobs {
		if !keep[i] {
			jobs[i].span.End()
			if inOrder < 0 && i < dense {
				inOrder = len(picked)
			}
			continue
		}
		at[i] = len(picked)
		picked = append(picked, jobs[i])
	}
	if inOrder < 0 {
		inOrder = min(dense, len(picked))
	}
	for _, i := range order {
		if keep[i] {
			asked = append(asked, at[i])
		}
	}
	return picked, asked, inOrder
}

// ask is what a step asks the limiter about of jobs, read in order from q's cursor, and in which
// order (see pick): with them, the jobs of its index that rank ahead of the default priority,
// and all by priority; in order, unranked, when they are of an older stream (read and settled
// by its own cursor) or while the queue's list of jobs settled out of place but not removed is
// full. cut: some were left out for the budget.
func (s *Service) ask(ctx context.Context, q *queue, jobs []job, budget int64) (asked []job, cut bool) {
	dense, now := len(jobs), s.cfg.Now()
	order := make([]int, len(jobs))
	for i := range order {
		order[i] = i
	}
	if !jobs[0].src && !jobs[0].lane && len(q.skipped) < maxSkipped {
		var aging time.Duration
		if pl, err := s.cfg.Policy.Plans().Lookup(q.tenant); err == nil {
			aging = pl.PriorityAging
		}
		n := int(min(budget, int64(s.cfg.Batch)))
		jobs = append(jobs, s.fedJobs(ctx, q, s.readIndexed(ctx, q, jobs[dense-1].at, n, aging, now))...)
		order = askOrder(jobs, aging, now)
	}
	picked, at, inOrder := pick(jobs, dense, order, budget)
	asked = make([]job, len(at))
	for k, i := range at {
		asked[k] = picked[i]
		asked[k].ordered = i < inOrder
	}
	return asked, len(asked) < len(jobs)
}
