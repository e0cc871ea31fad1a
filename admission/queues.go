package admission

import (
	"container/heap"
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/admitter/admitter/policy"
	"github.com/nats-io/nats.go/jetstream"
)

// A tenant's queue is its jobs in the input stream, in the order they were stored: a job waits
// where it arrived, and nothing of it is copied or held in memory while it waits. The queue of a
// tenant is read by the replica that owns the tenant (members.go) from a cursor, by batched
// Direct Get on the tenant's subjects; what it forwards is removed with one purge by subject and
// sequence per step, so the first job left is the queue's durable head.
//
// The replica knows which tenants have jobs from two sources: a headers-only feed of the input
// (an ordered consumer: it learns of a job as soon as it is stored, at a few µs of the server's
// time per job), and, behind it, the input's subject state polled every DiscoveryInterval (a
// backstop, and what finds the jobs stored before the replica started). Neither holds any job.
//
// Queues take steps (step.go). A queue is in one place at a time: idle (not here at all),
// scheduled (in the due heap, for a time: its head does not fit yet), ready (in the ring: it may
// go now), or running (one worker steps it). Workers serve the ring in turn, each turn granting
// a queue Quantum weight more (deficit round robin on weight): when more tenants may go than the
// workers can serve, each gets the same weight per round whatever its backlog. A head heavier
// than a turn goes alone, and its queue sits out the rounds it owes. A queue that leaves the ring
// (its head must wait, or it is empty) loses what it had not spent: nothing is banked while a
// tenant does not use its turn, so none comes back with a burst (the wind-up of fair queuing).
type queues struct {
	s      *Service
	mu     sync.Mutex
	cond   *sync.Cond
	byName map[string]*queue
	due    dueHeap
	ring   []*queue // ready, in turn
	closed bool
	wake   chan struct{} // the timer loop's wake-up (capacity 1)
	// waiting is how many jobs wait per tenant (every tenant's, whoever owns it), as the last
	// poll of the input's subjects counted them; legacy the tenants with jobs in the lanes
	// stream of an earlier version.
	waiting map[string]uint64
	legacy  map[string]bool
	polled  time.Time
}

// queue is one tenant's queue on this replica. Its scheduling fields are guarded by queues.mu;
// the rest belongs to the step running it (one at a time).
type queue struct {
	tenant      string
	filter      string // the tenant's input subjects
	laneSubject string // its lane in the legacy lanes stream

	// scheduling, under queues.mu
	where   place
	at      time.Time // scheduled: when it is due
	index   int       // scheduled: its place in the due heap
	deficit int64     // ready or running: the weight it may still admit this round
	hinted  bool      // running: a job arrived meanwhile (it must not go idle)
	gone    bool      // no longer this replica's: dropped when its step ends

	// the step's
	cursor         uint64 // the next input sequence to read
	legacy         bool   // read the legacy lane first
	legacyAt       uint64 // the next legacy lanes-stream sequence to read
	unpurged       uint64 // settled input jobs not removed yet: through this sequence (0: none)
	legacyUnpurged uint64 // likewise in the legacy lane
	storedSeq      uint64 // the highest input sequence settled (forwarded, dead, or stored before)
	owe            owed
	errs           int
	waited         uint64 // the highest input sequence told to wait (each counted once)
	head           uint64 // the head last asked about, and how many steps asked
	asks           uint64
}

type place uint8

const (
	idle place = iota
	scheduled
	ready
	running
)

func newQueues(s *Service) *queues {
	qs := &queues{s: s, byName: map[string]*queue{}, wake: make(chan struct{}, 1), waiting: map[string]uint64{}, legacy: map[string]bool{}}
	qs.cond = sync.NewCond(&qs.mu)
	return qs
}

// newQueue is tenant's queue, read from its first job.
func (qs *queues) newQueue(tenant string) (*queue, error) {
	c := qs.s.cfg
	filter, err := c.In.TenantFilter(tenant)
	if err != nil {
		return nil, err
	}
	lane, _ := c.Wait.Subject(tenant)
	return &queue{tenant: tenant, filter: filter, laneSubject: lane, index: -1, legacy: qs.legacy[tenant]}, nil
}

// claim is what the queue's next limiter call says for owner (see policy.Queue).
func (q *queue) claim(owner int64) policy.Queue {
	pq := policy.Queue{Owner: owner, LateWeight: q.owe.lateWeight, Late: q.owe.late}
	if q.owe.stored > 0 {
		pq.Stored, pq.Keep = int64(q.owe.stored), storedKeep
	}
	return pq
}

// said clears what a limiter call said.
func (q *queue) said() { q.owe = owed{} }

// tries counts the steps that asked about the job at seq while it was the queue's head (1 the
// first time): its Admit-Attempts.
func (q *queue) tries(seq uint64) uint64 {
	if q.head != seq {
		q.head, q.asks = seq, 0
	}
	q.asks++
	return q.asks
}

// advance moves the queue past a settled job: read at sequence at (of the legacy lane, or of
// the input), input sequence seq.
func (q *queue) advance(legacy bool, at, seq uint64) {
	q.storedSeq = max(q.storedSeq, seq)
	if legacy {
		q.legacyAt, q.legacyUnpurged = at+1, at
		return
	}
	q.cursor, q.unpurged = at+1, at
}

// hint says that tenant has jobs: its queue, if this replica owns it and it is idle, becomes
// ready; running, it will not go idle after its step.
func (qs *queues) hint(tenant string) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	q := qs.byName[tenant]
	if q == nil {
		if qs.closed || !qs.s.members.owns(tenant) {
			return
		}
		var err error
		if q, err = qs.newQueue(tenant); err != nil {
			qs.s.log.Error("a tenant's queue", "tenant", tenant, "err", err)
			return
		}
		qs.byName[tenant] = q
		qs.readyLocked(q)
		return
	}
	if q.where == running {
		q.hinted = true
	}
}

// wakeTenant makes tenant's queue ask again now if it waits for a time (a lease of the tenant
// ended).
func (qs *queues) wakeTenant(tenant string) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if q := qs.byName[tenant]; q != nil && q.where == scheduled {
		qs.scheduleLocked(q, 0)
	}
}

// wakeAll makes every queue that waits for a time ask again now (the plans changed, the
// limiter answers again).
func (qs *queues) wakeAll() {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	for _, q := range qs.byName {
		if q.where == scheduled {
			qs.scheduleLocked(q, 0)
		}
	}
}

// readyLocked puts q at the end of the ring.
func (qs *queues) readyLocked(q *queue) {
	if q.where == scheduled {
		heap.Remove(&qs.due, q.index)
	}
	q.where = ready
	qs.ring = append(qs.ring, q)
	qs.cond.Signal()
}

// scheduleLocked makes q due after d (sooner if it already is due sooner); due now, it is ready.
func (qs *queues) scheduleLocked(q *queue, d time.Duration) {
	if d <= 0 {
		if q.where != ready {
			qs.readyLocked(q)
		}
		return
	}
	at := time.Now().Add(d)
	switch q.where {
	case scheduled:
		if at.Before(q.at) {
			q.at = at
			heap.Fix(&qs.due, q.index)
		}
	case idle, running:
		q.where, q.at = scheduled, at
		heap.Push(&qs.due, q)
	}
	select {
	case qs.wake <- struct{}{}:
	default:
	}
}

// timers makes scheduled queues ready when they are due, until ctx ends.
func (qs *queues) timers(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		qs.mu.Lock()
		wait := time.Hour
		now := time.Now()
		for len(qs.due) > 0 {
			if d := qs.due[0].at.Sub(now); d > 0 {
				wait = d
				break
			}
			q := heap.Pop(&qs.due).(*queue)
			q.where = idle
			qs.readyLocked(q)
		}
		qs.mu.Unlock()
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-qs.wake:
		case <-timer.C:
		}
	}
}

// take hands a worker the next ready queue, with its budget for the turn; ok is false once
// closed.
func (qs *queues) take() (q *queue, budget int64, ok bool) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	for len(qs.ring) == 0 {
		if qs.closed {
			return nil, 0, false
		}
		qs.cond.Wait()
	}
	quantum := int64(qs.s.cfg.Quantum)
	for skipped := 0; ; {
		q = qs.ring[0]
		qs.ring[0] = nil
		qs.ring = qs.ring[1:]
		if q.deficit += quantum; q.deficit > 0 {
			break
		}
		// It still owes for a head heavier than its turn (see within): it sits this round out.
		qs.ring = append(qs.ring, q)
		if skipped++; skipped >= len(qs.ring) {
			// A whole round of debtors: the rounds until the first of them may go pass at once.
			rounds := int64(math.MaxInt64)
			for _, d := range qs.ring {
				rounds = min(rounds, -d.deficit/quantum)
			}
			for _, d := range qs.ring {
				d.deficit += rounds * quantum
			}
			skipped = 0
		}
	}
	q.where, q.hinted = running, false
	return q, q.deficit, true
}

// done ends q's step: it goes back in the ring (it may go on), waits for its time, or sleeps.
func (qs *queues) done(q *queue, r stepResult) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	q.deficit -= r.spent
	q.where = idle
	switch {
	case q.gone || r.gone:
		delete(qs.byName, q.tenant)
		q.gone = true
	case r.more || (r.idle && q.hinted):
		if !r.more {
			q.deficit = min(q.deficit, 0)
		}
		qs.readyLocked(q)
	case r.idle:
		delete(qs.byName, q.tenant)
	default:
		q.deficit = min(q.deficit, 0) // it leaves the ring: what it did not spend is not banked, what it owes is
		qs.scheduleLocked(q, r.next)
	}
}

// work steps ready queues until the queues close; the steps run on ctx, so that one under way
// when they close finishes.
func (qs *queues) work(ctx context.Context) {
	for {
		q, budget, ok := qs.take()
		if !ok {
			return
		}
		qs.done(q, qs.s.step(ctx, q, budget))
	}
}

// close makes the workers return once the steps under way end.
func (qs *queues) close() {
	qs.mu.Lock()
	qs.closed = true
	qs.ring = nil
	qs.cond.Broadcast()
	qs.mu.Unlock()
}

// rebalance drops the queues this replica no longer owns and takes those it now owns that
// have jobs (as the last poll saw them), after the membership changed.
func (qs *queues) rebalance() {
	qs.mu.Lock()
	var moved []*queue
	for tenant, q := range qs.byName {
		if qs.s.members.owns(tenant) {
			continue
		}
		q.gone = true
		if q.where != running {
			if q.where == scheduled {
				heap.Remove(&qs.due, q.index)
			}
			q.where = idle
			delete(qs.byName, tenant)
			moved = append(moved, q)
		}
	}
	tenants := make([]string, 0, len(qs.waiting))
	for tenant := range qs.waiting {
		tenants = append(tenants, tenant)
	}
	qs.mu.Unlock()
	for _, tenant := range tenants {
		qs.hint(tenant)
	}
	qs.s.handOver(moved)
}

// all returns every queue this replica runs.
func (qs *queues) all() []*queue {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	out := make([]*queue, 0, len(qs.byName))
	for _, q := range qs.byName {
		out = append(out, q)
	}
	return out
}

// count is the number of queues this replica runs.
func (qs *queues) count() int {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	return len(qs.byName)
}

// waitingNow returns how many jobs wait per tenant, as last polled (a copy), and when.
func (qs *queues) waitingNow() (map[string]uint64, time.Time) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	out := make(map[string]uint64, len(qs.waiting))
	for k, v := range qs.waiting {
		out[k] = v
	}
	return out, qs.polled
}

// poll lists the tenants with jobs in the input (and in the legacy lanes stream while it has
// any): it counts them for operators and hints their queues.
func (qs *queues) poll(ctx context.Context) error {
	c := qs.s.cfg
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	in, err := qs.s.streams.get(pctx, c.StreamIn)
	if err != nil {
		return err
	}
	info, err := in.Info(pctx, jetstream.WithSubjectFilter(c.In.Filter()))
	if err != nil {
		return fmt.Errorf("list the tenants with jobs on stream %s: %w", c.StreamIn, err)
	}
	waiting := make(map[string]uint64, len(info.State.Subjects))
	for subj, n := range info.State.Subjects {
		if tenant, ok := c.In.Match(subj); ok && n > 0 {
			waiting[tenant] += n
		}
	}
	legacy := map[string]bool{}
	if qs.s.legacyLanes.Load() {
		if ws, err := qs.s.streams.get(pctx, c.StreamWait); err == nil {
			if winfo, err := ws.Info(pctx, jetstream.WithSubjectFilter(c.Wait.Filter())); err == nil {
				for subj, n := range winfo.State.Subjects {
					if tenant, ok := c.Wait.Match(subj); ok && n > 0 {
						legacy[tenant] = true
						waiting[tenant] += n
					}
				}
				if len(legacy) == 0 {
					qs.s.legacyLanes.Store(false)
					qs.s.log.Info("the lanes stream of an earlier admitter is empty: every job it held was forwarded; it can be deleted (nats stream rm " + c.StreamWait + ")")
				}
			}
		}
	}
	qs.mu.Lock()
	qs.waiting, qs.legacy, qs.polled = waiting, legacy, time.Now()
	qs.mu.Unlock()
	for tenant := range waiting {
		qs.hint(tenant)
	}
	return nil
}

// discover polls every DiscoveryInterval until ctx ends.
func (qs *queues) discover(ctx context.Context) {
	t := time.NewTicker(qs.s.cfg.DiscoveryInterval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := qs.poll(ctx); err != nil {
			if !failing && ctx.Err() == nil {
				qs.s.log.Warn("listing the tenants with jobs failed: retrying", "err", err)
			}
			failing = true
			continue
		}
		failing = false
	}
}

// dueHeap is a min-heap of scheduled queues by due time.
type dueHeap []*queue

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *dueHeap) Push(x any) {
	q := x.(*queue)
	q.index = len(*h)
	*h = append(*h, q)
}
func (h *dueHeap) Pop() any {
	old := *h
	q := old[len(old)-1]
	old[len(old)-1] = nil
	q.index = -1
	*h = old[:len(old)-1]
	return q
}
