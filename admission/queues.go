package admission

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/admitter/admitter/policy"
	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A tenant's queue is its jobs in the input stream, in the order they were stored: a job waits
// where it arrived, and nothing of it is copied while it waits. The queue of a tenant is run by
// the replica that holds the tenant's partition of the input (owners.go).
//
// A replica follows each partition it holds with one ordered consumer (the feed: the server
// streams each job once, in order, at a few µs per job). A queue learns its jobs in one of two
// ways:
//
//   - following: the feed hands it every job of its tenant as it arrives, and it keeps them (buf)
//     until they are settled: reading costs nothing more. A queue whose buffer is full (a head
//     that waits, or all buffers together at InFlightBytes) stops following;
//   - behind: the feed skips it, and it reads its jobs from the input by subject, from its cursor
//     (batched Direct Get): a tenant with a backlog costs the others nothing. When a read finds
//     the tenant's end, the queue follows again (rejoining: the feed's jobs that arrive during
//     that read are kept, so none is missed between the read and the feed).
//
// Settled jobs are removed from the input in two ways (step.go): each partition is compacted
// below the lowest sequence its holder still needs (its floor: one cheap purge for all its
// tenants, input.go); a tenant's settled jobs that a waiting tenant keeps above that point are
// purged by subject once they are purgeAge old. The partitions' subject state, listed every
// DiscoveryInterval, counts the jobs waiting, and finds the tenants with jobs in older streams
// (source), or, with no feed (a work-queue input of an earlier version, a feed that broke), every
// tenant with jobs.
//
// Queues take steps (step.go). A queue is in one place at a time: idle (not here at all),
// scheduled (in the due heap, for a time: its head does not fit yet), ready (in the ring: it may
// go now), or running (one worker steps it). Workers serve the ring in turn, each turn granting
// a queue Quantum weight more (deficit round robin on weight): when more tenants may go than the
// workers can serve, each gets the same weight per round whatever its backlog. A head heavier
// than a turn goes alone, and its queue sits out the rounds it owes. Every forward spends its
// weight, paced or not, and a dead letter 1. A queue that leaves the ring (its head must wait, or
// it is empty), or stays in it after a step that did not use its whole turn, loses what it had
// not spent (a step cut at its budget keeps the rest, less than its next job's weight): nothing
// is banked while a tenant does not use its turn, so none comes back with a burst (the wind-up
// of fair queuing).
type queues struct {
	s      *Service
	mu     sync.Mutex
	cond   *sync.Cond
	byName map[string]*queue
	due    dueHeap
	ring   []*queue // ready, in turn
	// fresh are the queues woken from idle by a job just stored (readyFreshLocked); freshTurn:
	// the next turn is theirs if any waits.
	fresh     []*queue
	freshTurn bool
	closed    bool
	wake      chan struct{} // the timer loop's wake-up (capacity 1)
	// waiting is how many jobs wait per tenant of the partitions held, as the last poll of
	// their subjects counted them (older streams included); old the older streams' sources per
	// tenant (see source).
	waiting map[string]uint64
	old     map[string][]source
	polled  time.Time

	// parts are the partitions this replica holds (input.go); bufBytes the payload bytes of
	// every buffer.
	parts map[int]*part
	// last is each partition's latest part, stopped or not (startPart waits until it has
	// stopped: the limiter hears what the old queues owe before a new one asks).
	last     map[int]*part
	bufBytes int
	indexed  int           // the jobs indexed by priority over every queue (see priorities; at most maxIndexed)
	pollNow  chan struct{} // asks the discovery loop for a poll now (capacity 1)
}

// source is a stream other than its partition's where a tenant has older jobs: the lanes
// stream of an earlier version (lane), or an input stream of another partitioning (an earlier
// Config.Partitions, or the configured stream while there are partitions: producers without the
// mapping). A queue forwards its sources' jobs first, oldest source first, reading them by
// subject from cursor; unpurged is the last one settled and not yet removed.
type source struct {
	stream   string
	filter   string
	n, p     int // the stream's partitioning and partition (its jobs' ids: wire.JobID); lanes: 1, 0
	lane     bool
	cursor   uint64
	unpurged uint64
	// published is the subject a job stored on stored was published on (inputs only).
	published func(stored string) (subject, tenant string, ok bool)
}

// fed is a job the feed handed to a following queue.
type fed struct {
	seq     uint64
	subject string
	header  nats.Header
	data    []byte
	stored  time.Time
	size    int
	// live: the feed delivered it with at most livePending jobs of its partition behind it (it
	// had caught up: the job is an arrival, not a backlog's).
	live bool
}

// mode is how a queue learns its jobs (see queues).
type mode uint8

const (
	following mode = iota
	behind
	rejoining
)

// queue is one tenant's queue on this replica. Its scheduling fields are guarded by queues.mu;
// the rest belongs to the step running it (one at a time).
type queue struct {
	tenant string
	part   int    // its partition
	filter string // the tenant's subjects in its partition's stream

	// scheduling, under queues.mu
	where    place
	at       time.Time // scheduled: when it is due
	index    int       // scheduled: its place in the due heap
	deficit  int64     // ready or running: the weight it may still admit this round
	hinted   bool      // running: a job arrived meanwhile (it must not go idle)
	headless bool      // scheduled with no head waiting, for its settled jobs' removal only: a job that arrives makes it go
	woken    bool      // running: woken meanwhile (what it waits for may be free: it asks again at once)
	waitsFor string    // scheduled: why its head waits, as its last step's decision said (stepResult.waitsFor)
	poolWoke bool      // running: woken for its pool meanwhile (it asks again at once if its head waits for the pool)
	expires  time.Time // running: the earliest bound on waiting (Admit-Max-Wait) of the jobs fed meanwhile (see expiresBy)
	oldest   time.Time // when the input stored the job its last deciding step left waiting (zero: none), under plan
	plan     string
	gone     bool     // no longer this replica's: dropped when its step ends
	more     []source // running: older streams found meanwhile, for its next step (takeSources)

	// the feed's, under queues.mu
	mode     mode
	buf      []fed // following or rejoining: the tenant's jobs not yet settled, in order; behind: a prefix left to serve
	bufBytes int
	prio     priorities // the jobs not of the default priority, not yet settled (priority.go)
	// unkept is the highest input sequence the feed handed the queue while it did not keep what
	// it was handed (behind, or its buffer full): a read must reach it before the queue follows
	// again (see endRead).
	unkept uint64

	// the step's (cursor is also read by floor, under queues.mu)
	cursor    uint64    // the next input sequence to read: every job of the tenant below it is settled
	old       []source  // older streams with jobs of the tenant, read first (see source)
	unremoved unremoved // settled input jobs not removed yet
	storedID  int64     // the highest job id settled (forwarded, dead, or stored before)
	owe       owed
	errs      int
	waited    int64 // the highest job id told to wait (each counted once)
	// redeemed are the ids of jobs the limiter answered admitted before (policy.Verdict.Redeemed)
	// that are not settled yet: asked about again, never expired unasked (policy.Job.Again).
	redeemed  map[int64]bool
	head      int64 // the job the last step left waiting, and how many steps asked about it
	asks      uint64
	waitedFor string // what the last step's waiting jobs were told they wait for (policy.Queue.WaitedFor)
	// skipped are the input sequences, ascending, of jobs dead-lettered out of their place (their
	// bound passed behind the job that waits) that could not be removed from the input at once:
	// reads pass over them, and they are removed with the settled jobs once the cursor reaches
	// them (see skipExpired).
	skipped []uint64

	// readySince is when the queue was made ready, under queues.mu (zero: neither ready nor
	// running): a queue ready for long without a step that ended is stalled (see stalled). doing
	// is where its running step stands, since doingAt (unix ns), read without the step's help.
	readySince time.Time
	doing      atomic.Uint32
	doingAt    atomic.Int64
}

// phase is where a running step stands.
type phase uint32

const (
	taken phase = iota + 1
	reading
	deciding
	publishing
	removing
)

func (ph phase) String() string {
	switch ph {
	case taken:
		return "starting"
	case reading:
		return "reading the input"
	case deciding:
		return "asking the limiter"
	case publishing:
		return "storing its forwards and dead letters"
	case removing:
		return "removing settled jobs from the input"
	}
	return "stepping"
}

// enter records that q's step is at ph from now on.
func (q *queue) enter(ph phase) {
	q.doingAt.Store(time.Now().UnixNano())
	q.doing.Store(uint32(ph))
}

// describeRunning says which steps run at now and where each stands, the longest first (at most
// ten named).
func (qs *queues) describeRunning(now time.Time) string {
	qs.mu.Lock()
	type run struct {
		tenant string
		ph     phase
		for_   time.Duration
	}
	var runs []run
	for _, q := range qs.byName {
		if q.where == running {
			runs = append(runs, run{q.tenant, phase(q.doing.Load()), now.Sub(time.Unix(0, q.doingAt.Load()))})
		}
	}
	qs.mu.Unlock()
	slices.SortFunc(runs, func(a, b run) int { return cmp.Compare(b.for_, a.for_) })
	var parts []string
	for i, r := range runs {
		if i == 10 {
			parts = append(parts, fmt.Sprintf("and %d more", len(runs)-i))
			break
		}
		parts = append(parts, fmt.Sprintf("%s (%s for %s)", r.tenant, r.ph, r.for_.Round(time.Millisecond)))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// stalled says which queues have been ready (or running) for longer than bound at now
// without a step that ended: a step stuck, or workers that take none; nil when none has.
func (qs *queues) stalled(now time.Time, bound time.Duration) error {
	qs.mu.Lock()
	var late []string
	var since time.Time
	for _, q := range qs.byName {
		if !q.readySince.IsZero() && now.Sub(q.readySince) > bound {
			late = append(late, q.tenant)
			if since.IsZero() || q.readySince.Before(since) {
				since = q.readySince
			}
		}
	}
	qs.mu.Unlock()
	if len(late) == 0 {
		return nil
	}
	slices.Sort(late)
	if len(late) > 10 {
		late = append(late[:10], fmt.Sprintf("and %d more", len(late)-10))
	}
	return fmt.Errorf("no decision since %s for the queues of %s, ready since then; steps running: %s",
		since.UTC().Format(time.RFC3339), strings.Join(late, ", "), qs.describeRunning(now))
}

type place uint8

const (
	idle place = iota
	scheduled
	ready
	running
)

func newQueues(s *Service) *queues {
	qs := &queues{s: s, byName: map[string]*queue{}, wake: make(chan struct{}, 1), waiting: map[string]uint64{}, old: map[string][]source{},
		parts: map[int]*part{}, last: map[int]*part{}, pollNow: make(chan struct{}, 1)}
	qs.cond = sync.NewCond(&qs.mu)
	return qs
}

// newQueueLocked is tenant's queue, behind: it reads its jobs from its partition's stream from
// its first, after those of its older streams.
func (qs *queues) newQueueLocked(tenant string) (*queue, error) {
	p := qs.s.in.partOf(tenant)
	filter, err := qs.s.in.ps.TenantFilter(p, tenant)
	if err != nil {
		return nil, err
	}
	return &queue{tenant: tenant, part: p, filter: filter, index: -1, old: slices.Clone(qs.old[tenant]), mode: behind}, nil
}

// feed hands a job partition pt's feed delivered to its tenant's queue, while this replica
// holds the partition: a following queue keeps it (or, full, falls behind); a tenant without a
// queue gets one that follows from this job (the feed started at the partition's first job),
// unless it has jobs in older streams, read first.
func (qs *queues) feed(pt *part, tenant string, f fed) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if f.seq < pt.pos {
		return // delivered again after the feed was reset
	}
	if qs.closed || qs.parts[pt.index] != pt {
		return // not handed to a queue: pos (the floor's bound) stays below it
	}
	pt.pos = f.seq + 1
	q := qs.byName[tenant]
	if q != nil {
		qs.expiresByLocked(q, f)
	}
	if q == nil {
		var err error
		if q, err = qs.newQueueLocked(tenant); err != nil {
			qs.s.log.Error("a tenant's queue", "tenant", tenant, "err", err)
			return
		}
		if len(q.old) == 0 {
			q.mode, q.cursor = following, f.seq
		}
		qs.byName[tenant] = q
	}
	qs.indexLocked(q, f)
	if q.mode == behind {
		q.unkept = max(q.unkept, f.seq)
		switch {
		case (q.where == idle || q.where == scheduled && q.headless) && fresh(f):
			qs.readyFreshLocked(q) // an arrival: behind because the buffers are full
		case q.where == idle, q.where == scheduled && q.headless:
			qs.readyLocked(q)
		case q.where == running:
			q.hinted = true // its read may have ended before this job: it must not go idle
		}
		return
	}
	if len(q.buf) >= 2*qs.s.cfg.Batch || qs.bufBytes+f.size > qs.s.cfg.InFlightBytes {
		q.mode, q.unkept = behind, max(q.unkept, f.seq) // its jobs from here on are read from the input
		switch {
		case (q.where == idle || q.where == scheduled && q.headless) && len(q.buf) == 0 && fresh(f):
			qs.readyFreshLocked(q) // a new tenant's queue, or one emptied, while the buffers are full
		case q.where == idle, q.where == scheduled && q.headless:
			qs.readyLocked(q) // before, it waited for the next listing (up to a second)
		case q.where == running:
			q.hinted = true
		}
		return
	}
	wasEmpty := len(q.buf) == 0
	q.buf = append(q.buf, f)
	q.bufBytes += f.size
	qs.bufBytes += f.size
	switch q.where {
	case running:
		q.hinted = true
	case idle:
		if wasEmpty && fresh(f) {
			qs.readyFreshLocked(q)
		} else {
			qs.readyLocked(q)
		}
	case ready:
		if wasEmpty && fresh(f) && q.deficit >= 0 && !slices.Contains(qs.fresh, q) {
			// Back in the ring after a step that left nothing buffered: with an arrival it is a
			// sparse tenant's queue, not a backlog's turn.
			qs.ring = slices.DeleteFunc(qs.ring, func(r *queue) bool { return r == q })
			qs.fresh = append(qs.fresh, q)
		}
	case scheduled:
		if wasEmpty && fresh(f) { // it waited for a removal, not for a head: it goes now
			qs.readyFreshLocked(q)
		} else if wasEmpty {
			qs.readyLocked(q)
		}
	}
}

// expiresByLocked makes q, which waits for a time, ask again by the deadline of f, a job just
// fed, when f carries its own bound on waiting (Admit-Max-Wait) and it ends sooner: a job behind
// the head expires on time (policy: expiry.go). A plan's max_wait needs no such wake: a job that
// arrives later ends its plan's bound later than those ahead of it, whose bounds the queue's
// last step knew.
func (qs *queues) expiresByLocked(q *queue, f fed) {
	if q.where != scheduled && q.where != running || f.stored.IsZero() || !hasHeader(f.header, wire.HeaderMaxWait) {
		return
	}
	d, err := wire.ParseMaxWait(f.header)
	if err != nil || d == 0 {
		return
	}
	deadline := f.stored.Add(d)
	switch {
	case q.where == running:
		if q.expires.IsZero() || deadline.Before(q.expires) {
			q.expires = deadline
		}
	case deadline.Before(q.at) && !q.headless:
		qs.scheduleLocked(q, max(time.Until(deadline), time.Millisecond))
	}
}

// hasHeader reports whether h has name, written in any case.
func hasHeader(h nats.Header, name string) bool {
	for k := range h {
		if len(k) == len(name) && strings.EqualFold(k, name) {
			return true
		}
	}
	return false
}

// buffered returns up to n of q's buffered jobs, oldest first (they stay buffered until
// settled), and its mode.
func (qs *queues) buffered(q *queue, n int) ([]fed, mode) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	return q.buf[:min(n, len(q.buf)):min(n, len(q.buf))], q.mode
}

// endSource drops q's first older stream: it has no more jobs of the tenant.
func (qs *queues) endSource(q *queue) {
	qs.mu.Lock()
	q.old = q.old[1:]
	qs.mu.Unlock()
}

// startRead marks a queue behind as rejoining before it reads the input: the feed's jobs for it
// are kept meanwhile. It reports whether the queue has anything to read (a following queue with
// nothing buffered has not).
func (qs *queues) startRead(q *queue) bool {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	switch pt := qs.parts[q.part]; {
	case q.mode == following:
		return false
	case pt != nil && pt.feedOn && len(q.old) == 0:
		q.mode = rejoining
	}
	return true
}

// endRead ends a read of the input from q's cursor that returned read: if it found the
// tenant's end (end), reached every job the feed handed q without its keeping it (unkept), and
// nothing broke the rejoining meanwhile, the queue follows again, and its buffer is what it read
// followed by the feed's newer jobs; otherwise it stays behind, with what it read as its buffer,
// and the read jobs are its head (returned). short says where a read said to end before a job
// the feed did not keep ends (from zero: it did not): a Direct Get of a replicated input may be answered by
// a follower that has not applied the latest stores, and the queue, following, would never see
// that job; the floor would pass it once a later job is settled (issue 39, item 6).
func (qs *queues) endRead(q *queue, read []fed, end bool) (head []fed, follows bool, short shortRead) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	// The last sequence the read covered: the job at the cursor itself when nothing was read
	// (one stored, and handed over by the feed, while the read ran is kept).
	var last uint64
	if q.cursor > 0 {
		last = q.cursor - 1
	}
	if len(read) > 0 {
		last = read[len(read)-1].seq
	}
	if end && last < q.unkept {
		end, short = false, shortRead{from: last + 1, unkept: q.unkept}
	}
	if q.mode == rejoining && end {
		keep := q.buf[:0:0]
		for _, f := range q.buf {
			if f.seq > last {
				keep = append(keep, f)
			}
		}
		qs.bufBytes -= q.bufBytes
		q.buf, q.bufBytes = append(read, keep...), 0
		for _, f := range q.buf {
			q.bufBytes += f.size
		}
		qs.bufBytes += q.bufBytes
		q.mode, q.unkept = following, 0
		return nil, true, shortRead{}
	}
	if q.mode == rejoining {
		q.mode = behind
	}
	// Behind: what the feed kept meanwhile is read again later; what was read is kept (while
	// the buffers have room), so that a head that waits is not read again at each step.
	qs.bufBytes -= q.bufBytes
	q.buf, q.bufBytes = nil, 0
	size := 0
	for _, f := range read {
		size += f.size
	}
	if qs.bufBytes+size <= qs.s.cfg.InFlightBytes {
		q.buf, q.bufBytes = read, size
		qs.bufBytes += size
	}
	return read, false, short
}

// shortRead is a read that said the tenant has no job from from on, though the feed handed the
// queue one there (unkept, the highest) without its keeping it (see endRead).
type shortRead struct{ from, unkept uint64 }

// unkeptGone forgets the jobs the feed handed q without its keeping them, as r saw them: the
// stream's leader has none of the tenant's from r.from on (they were dead-lettered out of their
// place, or removed). The queue's next read that finds the tenant's end follows again, unless
// the feed handed it a job meanwhile.
func (qs *queues) unkeptGone(q *queue, r shortRead) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if q.unkept == r.unkept {
		q.unkept = 0
	}
}

// settled moves q past its settled jobs, through input sequence seq: its cursor, and its
// buffer (the settled jobs leave it).
func (qs *queues) settled(q *queue, seq uint64) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	q.cursor = max(q.cursor, seq+1)
	qs.indexed -= q.prio.below(q.cursor)
	k := 0
	for k < len(q.buf) && q.buf[k].seq <= seq {
		q.bufBytes -= q.buf[k].size
		qs.bufBytes -= q.buf[k].size
		k++
	}
	if k > 0 {
		clear(q.buf[:k])
		q.buf = q.buf[k:]
	}
}

// unbuffer drops the jobs at input sequences seqs (ascending) from q's buffer and index: they
// were settled out of their place (skipExpired). A queue behind drops its whole buffer (what
// it read last): its next step reads from its cursor again, and so reaches the jobs after them.
func (qs *queues) unbuffer(q *queue, seqs []uint64) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	qs.indexed -= q.prio.remove(seqs...)
	if q.mode != following {
		qs.bufBytes -= q.bufBytes
		q.buf, q.bufBytes = nil, 0
		return
	}
	keep := q.buf[:0]
	for _, f := range q.buf {
		if _, found := slices.BinarySearch(seqs, f.seq); found {
			q.bufBytes -= f.size
			qs.bufBytes -= f.size
			continue
		}
		keep = append(keep, f)
	}
	clear(q.buf[len(keep):])
	q.buf = keep
}

// fallBehindLocked makes q read its jobs from the input from its cursor, its buffer dropped.
func (qs *queues) fallBehindLocked(q *queue) {
	qs.bufBytes -= q.bufBytes
	q.buf, q.bufBytes, q.mode = nil, 0, behind
}

// dropLocked forgets a queue that leaves this replica (see forgetLocked).
func (qs *queues) dropLocked(q *queue) {
	qs.forgetLocked(q)
	delete(qs.byName, q.tenant)
}

// forgetLocked drops what q holds of the replica's bounds: its buffer's bytes, its index.
func (qs *queues) forgetLocked(q *queue) {
	qs.bufBytes -= q.bufBytes
	q.buf, q.bufBytes = nil, 0
	qs.indexed -= q.prio.n
	q.prio = priorities{}
}

// floorLocked is the lowest sequence of partition pt this replica may still need: no job of
// its tenants below it is unsettled. 0 (nothing may be removed) before its feed runs and while
// a queue behind has not read its first job.
func (qs *queues) floorLocked(pt *part) uint64 {
	if !pt.feedOn || pt.pos == 0 {
		return 0
	}
	f := pt.pos
	for _, q := range qs.byName {
		switch {
		case q.part != pt.index:
		case q.mode != following || len(q.old) > 0:
			f = min(f, q.cursor)
		case len(q.buf) > 0:
			f = min(f, q.buf[0].seq)
		}
	}
	return f
}

// horizon is partition p's horizon (see part; the highest sequence when not held).
func (qs *queues) horizon(p int) uint64 {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if pt := qs.parts[p]; pt != nil {
		return pt.horizon
	}
	return math.MaxUint64
}

// firstSeq is partition p's first sequence as last seen (0: not held).
func (qs *queues) firstSeq(p int) uint64 {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if pt := qs.parts[p]; pt != nil {
		return pt.first
	}
	return 0
}

// partsNow is the partitions held now, in no order.
func (qs *queues) partsNow() []*part {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	parts := make([]*part, 0, len(qs.parts))
	for _, pt := range qs.parts {
		parts = append(parts, pt)
	}
	return parts
}

// feedOn reports whether partition p's feed runs.
func (qs *queues) feedOn(p int) bool {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	pt := qs.parts[p]
	return pt != nil && pt.feedOn
}

// claim is what the queue's next limiter call says for owner (see policy.Queue).
func (q *queue) claim(owner int64) policy.Queue {
	pq := policy.Queue{Owner: owner, Stored: q.owe.stored, LateWeight: q.owe.lateWeight, Late: q.owe.late, WaitedFor: q.waitedFor}
	if q.owe.keep {
		pq.Keep = storedKeep
	}
	return pq
}

// said clears what a limiter call said.
func (q *queue) said() { q.owe = owed{} }

// tries is the Admit-Attempts of the job id in the step about to ask about it: the decisions it
// took, this one included: 1, and 1 more for each step that left it waiting at the head (the
// job the last step left waiting remembers its count; every other is asked for the first time).
func (q *queue) tries(id int64) uint64 {
	if q.head == id {
		return q.asks + 1
	}
	return 1
}

// waits remembers the job the step leaves waiting at the head, and how many steps asked about it.
func (q *queue) waits(id int64, asks uint64) { q.head, q.asks = id, asks }

// adoptLocked gives tenant a queue behind, reading from its first job (its older streams' first),
// if this replica holds its partition and it has none.
func (qs *queues) adoptLocked(tenant string) {
	if qs.byName[tenant] != nil || qs.closed || qs.parts[qs.s.in.partOf(tenant)] == nil {
		return
	}
	q, err := qs.newQueueLocked(tenant)
	if err != nil {
		qs.s.log.Error("a tenant's queue", "tenant", tenant, "err", err)
		return
	}
	qs.byName[tenant] = q
	qs.readyLocked(q)
}

// wakeTenant makes tenant's queue ask again now if it waits for a time: a lease of the tenant
// ended, or (forPool) capacity its pool freed is its turn. A wake for the pool wakes only a
// queue whose head waits for the pool: one whose own limit binds (a concurrency limit for the
// rest of a lease) could not use it, and would ask the limiter again for the same answer. A
// queue whose step runs asks again as soon as the step ends (for a wake of the pool, if the
// step leaves its head waiting for the pool), whatever wait the step's answer gave: that
// answer may predate what the wake announces.
func (qs *queues) wakeTenant(tenant string, forPool bool) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	q := qs.byName[tenant]
	switch {
	case q == nil:
	case !forPool:
		qs.wakeLocked(q)
	case q.where == running:
		q.poolWoke = true
	case q.where == scheduled && waitsOnPool(q.waitsFor):
		qs.scheduleLocked(q, 0)
	}
}

// waitsOnPool reports whether a queue waiting for reason waits for its pool's capacity or its
// breaker: what a release of the pool can change.
func waitsOnPool(reason string) bool {
	return reason == policy.ReasonPool || reason == policy.ReasonBreaker
}

// wakeAll makes every queue that waits for a time ask again now (the plans changed, the
// limiter answers again).
func (qs *queues) wakeAll() {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	for _, q := range qs.byName {
		qs.wakeLocked(q)
	}
}

func (qs *queues) wakeLocked(q *queue) {
	switch q.where {
	case scheduled:
		qs.scheduleLocked(q, 0)
	case running:
		q.woken = true
	}
}

// readyLocked puts q at the end of the ring.
func (qs *queues) readyLocked(q *queue) {
	if q.where == scheduled {
		heap.Remove(&qs.due, q.index)
	}
	if q.readySince.IsZero() {
		q.readySince = time.Now()
	}
	q.where = ready
	qs.ring = append(qs.ring, q)
	qs.cond.Signal()
}

// livePending is how many jobs may follow a job in its partition, when the feed delivers it, for
// the job to be an arrival (fed.live): the server's count, no clock compared.
const livePending = 1024

// fresh reports whether f wakes its queue into the fresh ring: an arrival.
func fresh(f fed) bool { return f.live }

// readyFreshLocked makes idle q ready in the fresh ring: a tenant whose queue was empty and just
// received an arriving job (a sparse tenant; see fed.live) goes before the round of tenants with backlogs
// (the new-flows list of FQ-CoDel): one turn, then back in the ring if it has more. Turns
// alternate between the two rings, so neither starves the other. A queue that owes weight from
// an earlier turn goes in the ring.
func (qs *queues) readyFreshLocked(q *queue) {
	if q.deficit < 0 {
		qs.readyLocked(q)
		return
	}
	if q.where == scheduled {
		heap.Remove(&qs.due, q.index)
	}
	if q.readySince.IsZero() {
		q.readySince = time.Now()
	}
	q.where = ready
	qs.fresh = append(qs.fresh, q)
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
	for len(qs.ring) == 0 && len(qs.fresh) == 0 {
		if qs.closed {
			return nil, 0, false
		}
		qs.cond.Wait()
	}
	return qs.takeLocked()
}

// tryTake is take when a queue is ready, else ok is false at once.
func (qs *queues) tryTake() (q *queue, budget int64, ok bool) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if len(qs.ring) == 0 && len(qs.fresh) == 0 {
		return nil, 0, false
	}
	return qs.takeLocked()
}

// takeLocked takes the next ready queue of a ring that has one.
func (qs *queues) takeLocked() (q *queue, budget int64, ok bool) {
	quantum := int64(qs.s.cfg.Quantum)
	if len(qs.fresh) > 0 && (len(qs.ring) == 0 || qs.freshTurn) {
		qs.freshTurn = false
		q = qs.fresh[0]
		qs.fresh[0] = nil
		qs.fresh = qs.fresh[1:]
		q.deficit += quantum
		q.where, q.hinted, q.woken, q.poolWoke = running, false, false, false
		q.enter(taken)
		return q, q.deficit, true
	}
	qs.freshTurn = true
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
	q.where, q.hinted, q.woken, q.poolWoke, q.expires = running, false, false, false, time.Time{}
	q.enter(taken)
	return q, q.deficit, true
}

// done ends q's step: it goes back in the ring (it may go on), waits for its time, or sleeps.
func (qs *queues) done(q *queue, r stepResult) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	q.deficit -= r.spent
	q.where, q.headless, q.waitsFor, q.readySince = idle, r.headless, r.waitsFor, time.Time{}
	switch {
	case r.decided:
		q.oldest, q.plan = r.oldest, r.plan
	case r.idle:
		q.oldest = time.Time{}
	}
	if (q.gone || r.gone) && qs.byName[q.tenant] == q && !qs.closed && qs.parts[q.part] != nil {
		// The partition went to another replica during the step and came back: the queue is
		// this replica's again. The feed may have skipped the tenant's jobs meanwhile: it reads
		// them from its cursor (behind) rather than follow from the feed's next.
		q.gone, r.gone = false, false
		qs.fallBehindLocked(q)
		r.more = true
		if !qs.s.owners.holds(q.part) {
			// Held here, its lease not renewed in time: the renewal under way says whether it
			// stays (it asks again shortly) or goes (stopPart drops it).
			r = stepResult{next: 100 * time.Millisecond}
		}
	}
	switch {
	case (q.gone || r.gone) && qs.closed && qs.byName[q.tenant] == q && qs.parts[q.part] != nil:
		// The service stops with the partition held: the queue stays, idle, so that the floor
		// of the last compaction still counts its jobs, and it is handed over with the others.
	case q.gone || r.gone:
		if qs.byName[q.tenant] == q {
			qs.dropLocked(q)
		} else {
			qs.forgetLocked(q)
		}
		q.gone = true
	case r.more || ((r.idle || r.headless) && (q.hinted || len(q.buf) > 0 || len(q.more) > 0)):
		if !r.more || !r.cut {
			// It did not use its whole turn: the rest is not banked. Only a step cut at its
			// budget keeps what is left (less than its next job's weight), as deficit round
			// robin does while a queue has a backlog.
			q.deficit = min(q.deficit, 0)
		}
		qs.readyLocked(q)
	case r.idle:
		qs.dropLocked(q)
	default:
		q.deficit = min(q.deficit, 0) // it leaves the ring: what it did not spend is not banked, what it owes is
		if q.woken || (q.poolWoke && waitsOnPool(r.waitsFor)) {
			qs.readyLocked(q) // woken during the step: it asks again now
		} else {
			next := r.next
			if !q.expires.IsZero() && !r.headless { // a job fed during the step expires sooner
				next = min(next, max(time.Until(q.expires), time.Millisecond))
			}
			qs.scheduleLocked(q, next)
		}
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
	qs.ring, qs.fresh = nil, nil
	qs.cond.Broadcast()
	qs.mu.Unlock()
}

// count is the number of queues this replica runs.
func (qs *queues) count() int {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	return len(qs.byName)
}

// oldestWaiting calls f with the age of the oldest job left waiting by each queue's last step
// that decided, with its tenant and plan (see stepResult.oldest).
func (qs *queues) oldestWaiting(now time.Time, f func(tenant, plan string, age time.Duration)) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	for _, q := range qs.byName {
		if !q.oldest.IsZero() {
			f(q.tenant, q.plan, max(now.Sub(q.oldest), 0))
		}
	}
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

// poll lists the tenants with jobs in the partitions this replica holds and in the older
// streams (the lanes stream of an earlier version, input streams of another partitioning): it
// counts them for operators, learns each partition's first sequence and whether its feed keeps
// up, and gives a queue to the tenants with jobs that no feed hands over: those with jobs in
// an older stream, and every one of a partition without a working feed.
func (qs *queues) poll(ctx context.Context) error {
	s := qs.s
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	qs.mu.Lock()
	parts := make([]*part, 0, len(qs.parts))
	held := make(map[int]bool, len(qs.parts))
	for _, pt := range qs.parts {
		parts = append(parts, pt)
		held[pt.index] = true
	}
	qs.mu.Unlock()
	waiting := map[string]uint64{}
	type listing struct {
		pt          *part
		first, last uint64
	}
	listings := make([]listing, 0, len(parts))
	for _, pt := range parts {
		st, err := s.streams.get(pctx, pt.stream)
		if err != nil {
			return err
		}
		info, err := st.Info(pctx, jetstream.WithSubjectFilter(s.in.ps.Filter(pt.index)))
		if err != nil {
			return fmt.Errorf("list the tenants with jobs on stream %s: %w", pt.stream, err)
		}
		for subj, n := range info.State.Subjects {
			if _, tenant, ok := s.in.published(pt.index, subj); ok && n > 0 {
				waiting[tenant] += n
			}
		}
		l := listing{pt, info.State.FirstSeq, info.State.LastSeq}
		qs.mu.Lock()
		pos, feedOn := pt.pos, pt.feedOn
		qs.mu.Unlock()
		if feedOn && l.last >= pos && !pt.health.deliveredSince(time.Now().Add(-s.cfg.DiscoveryInterval)) {
			// Jobs after the feed's position, and no delivery lately: are any left to deliver?
			// (A queue reading by subject meanwhile may have removed them.) The leader says: a
			// follower behind would say none are.
			if _, found, err := s.reader.firstFrom(pctx, pt.stream, s.in.ps.Filter(pt.index), pos); err == nil && !found {
				l.last = 0 // nothing left for the feed: it is not behind
			}
		}
		listings = append(listings, l)
	}
	old, err := qs.pollOld(pctx, held, waiting)
	if err != nil {
		return err
	}
	now := time.Now()
	qs.mu.Lock()
	defer qs.mu.Unlock()
	// A partition taken during this listing was listed whole by its start (refreshOld), and not
	// by this one: its tenants' sources stand.
	for tenant, srcs := range qs.old {
		if p := s.in.partOf(tenant); !held[p] && qs.parts[p] != nil {
			old[tenant] = srcs
		}
	}
	qs.waiting, qs.old, qs.polled = waiting, old, now
	noFeed := map[int]bool{}
	for _, l := range listings {
		l.pt.first = max(l.pt.first, l.first)
		if l.pt.feedOn {
			l.pt.health.listed(now, l.last, l.pt.pos)
		}
		noFeed[l.pt.index] = !l.pt.feedOn || l.pt.health.lagging(now)
	}
	for tenant := range waiting {
		q := qs.byName[tenant]
		switch {
		case q == nil && (noFeed[s.in.partOf(tenant)] || len(old[tenant]) > 0):
			qs.adoptLocked(tenant)
		case q != nil:
			qs.addSourcesLocked(q, old[tenant])
		}
	}
	return nil
}

// refreshOld lists the older streams (see pollOld) and gives their sources to the queues.
func (qs *queues) refreshOld(ctx context.Context) error {
	qs.mu.Lock()
	held := make(map[int]bool, len(qs.parts))
	for p := range qs.parts {
		held[p] = true
	}
	qs.mu.Unlock()
	old, err := qs.pollOld(ctx, held, map[string]uint64{})
	if err != nil {
		return err
	}
	qs.mu.Lock()
	defer qs.mu.Unlock()
	for tenant, srcs := range old {
		qs.old[tenant] = srcs
		if q := qs.byName[tenant]; q != nil {
			qs.addSourcesLocked(q, srcs)
		}
	}
	return nil
}

// addSourcesLocked gives q the older streams of srcs it does not read yet (one may appear at any
// time: a producer publishing without the mapping); a queue that follows its feed reads them
// first: it falls behind, so that order is kept. A queue whose step runs gets them when its
// next step starts (takeSources): the step reads and moves its older streams without the lock.
func (qs *queues) addSourcesLocked(q *queue, srcs []source) {
	if q.where == running {
		q.more = append(q.more, srcs...)
		return
	}
	qs.mergeSourcesLocked(q, srcs)
}

// takeSources gives q, whose step starts, the older streams found while a step of it ran.
func (qs *queues) takeSources(q *queue) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	qs.mergeSourcesLocked(q, nil)
}

// mergeSourcesLocked adds srcs, and those found while a step ran, to q's older streams (see
// addSourcesLocked); no step of q runs, or it is q's own, before it reads them.
func (qs *queues) mergeSourcesLocked(q *queue, srcs []source) {
	srcs, q.more = append(q.more, srcs...), nil
	added := false
	for _, src := range srcs {
		if !slices.ContainsFunc(q.old, func(o source) bool { return o.stream == src.stream }) {
			q.old = append(q.old, src)
			added = true
		}
	}
	if added && q.mode != behind {
		qs.fallBehindLocked(q)
	}
}

// pollOld lists the older streams: the tenants with jobs there whose partition is held (this
// replica's partitions when the listing started: every stream is listed for the same ones, or
// a tenant of a partition taken meanwhile would be given only the streams listed after, and read
// them first), and their sources, counted in waiting. The lanes stream is listed while it has
// jobs.
func (qs *queues) pollOld(ctx context.Context, held map[int]bool, waiting map[string]uint64) (map[string][]source, error) {
	s := qs.s
	c := s.cfg
	out := map[string][]source{}
	mine := func(tenant string) bool { return held[s.in.partOf(tenant)] }
	if s.legacyLanes.Load() {
		if ws, err := s.streams.get(ctx, c.StreamWait); err == nil {
			if winfo, err := ws.Info(ctx, jetstream.WithSubjectFilter(c.Wait.Filter())); err == nil {
				for subj, n := range winfo.State.Subjects {
					if tenant, ok := c.Wait.Match(subj); ok && n > 0 && mine(tenant) {
						out[tenant] = append(out[tenant], source{stream: c.StreamWait, filter: subj, n: 1, lane: true})
						waiting[tenant] += n
					}
				}
				if winfo.State.Msgs == 0 {
					s.legacyLanes.Store(false)
					s.log.Info("the lanes stream of an earlier admitter is empty: every job it held was forwarded; it can be deleted (nats stream rm " + c.StreamWait + ")")
				}
			}
		}
	}
	olds, err := s.oldStreamsNow(ctx)
	if err != nil {
		return nil, err
	}
	for _, o := range olds {
		st, err := s.streams.get(ctx, o.name)
		if err != nil {
			return nil, err
		}
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(">"))
		if err != nil {
			return nil, fmt.Errorf("list the tenants with jobs on stream %s: %w", o.name, err)
		}
		s.unmappedListed(o, info.State.LastSeq, time.Now())
		for subj, n := range info.State.Subjects {
			_, tenant, ok := o.published(subj)
			if !ok || n == 0 || !mine(tenant) {
				continue
			}
			if srcs := out[tenant]; len(srcs) == 0 || srcs[len(srcs)-1].stream != o.name {
				filter, err := o.tenantFilter(tenant)
				if err != nil {
					continue
				}
				out[tenant] = append(out[tenant], source{stream: o.name, filter: filter, n: o.ps.N, p: o.p, published: o.published})
			}
			waiting[tenant] += n
		}
	}
	return out, nil
}

// discover polls every DiscoveryInterval, and at once when an adoption is due, until ctx ends.
func (qs *queues) discover(ctx context.Context) {
	t := time.NewTicker(qs.s.cfg.DiscoveryInterval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-qs.pollNow:
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
