package admission

import (
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/admitter/admitter/policy"
	"github.com/admitter/admitter/subjects"
)

// ring is a scheduler of ready queues alone (no servers): quantum per turn.
func ring(quantum int, tenants ...string) (*queues, map[string]*queue) {
	qs := newQueues(&Service{cfg: Config{Quantum: quantum}})
	byName := map[string]*queue{}
	for _, t := range tenants {
		q := &queue{tenant: t, index: -1}
		qs.byName[t], byName[t] = q, q
		qs.readyLocked(q)
	}
	return qs, byName
}

// turns takes n turns: each queue spends spend(tenant, budget) and stays ready.
func turns(qs *queues, n int, spend func(string, int64) int64) []string {
	var got []string
	for range n {
		q, budget, ok := qs.take()
		if !ok {
			break
		}
		got = append(got, q.tenant)
		qs.done(q, stepResult{more: true, spent: spend(q.tenant, budget)})
	}
	return got
}

// TestHeavyHeadPaysItsTurnsBack: a head heavier than a turn goes at once (nothing else could
// ever let it go), and its queue then sits out the rounds it owes while others are ready.
func TestHeavyHeadPaysItsTurnsBack(t *testing.T) {
	qs, _ := ring(10, "heavy", "a", "b")
	first := true
	got := turns(qs, 12, func(tenant string, budget int64) int64 {
		if tenant == "heavy" && first {
			first = false
			return 35 // a head of weight 35 on a turn of 10: it owes 25
		}
		return budget
	})
	// It sits out two rounds (-15, -5) and goes on the third with 5.
	want := []string{"heavy", "a", "b", "a", "b", "a", "b", "heavy", "a", "b", "heavy", "a"}
	if !slices.Equal(got, want) {
		t.Fatalf("turns %v, want %v", got, want)
	}
}

// TestDebtorsAloneGoWithoutSpinning: when every ready queue owes, the rounds until the first
// may go pass at once, in one take.
func TestDebtorsAloneGoWithoutSpinning(t *testing.T) {
	qs, q := ring(10, "x", "y")
	q["x"].deficit, q["y"].deficit = -1_000_000_000_000, -5_000_000_000_000
	tq, budget, ok := qs.take()
	if !ok || tq.tenant != "x" || budget <= 0 || budget > 10 {
		t.Fatalf("took %v with budget %d, want x with a budget in (0, 10]", tq.tenant, budget)
	}
	if want := int64(-5_000_000_000_000 + 1_000_000_000_000); q["y"].deficit > want || q["y"].deficit < want-10 {
		t.Errorf("y owes %d after x's turn, want about %d", -q["y"].deficit, -want)
	}
}

// TestUnspentTurnIsNotBanked: a queue that leaves the ring keeps what it owes and loses what it
// did not spend.
func TestUnspentTurnIsNotBanked(t *testing.T) {
	qs, q := ring(10, "a")
	tq, _, _ := qs.take()
	qs.done(tq, stepResult{next: 1e9, spent: 3}) // its head waits: it leaves the ring
	if q["a"].deficit != 0 {
		t.Errorf("deficit %d after leaving the ring with 7 unspent, want 0", q["a"].deficit)
	}
	qs.wakeTenant("a", false)
	tq, _, _ = qs.take()
	qs.done(tq, stepResult{next: 1e9, spent: 30})
	if q["a"].deficit != -20 {
		t.Errorf("deficit %d after spending 30 of 10 and leaving, want -20 (owed)", q["a"].deficit)
	}
}

// TestUnspentTurnIsNotBankedInTheRing: a queue that stays in the ring after a step that did not
// use its whole turn (its tenant had fewer jobs at hand, or the read stopped at its batch) loses
// what it did not spend, as a queue that leaves the ring does: its next turn is one quantum, not
// the sum of those it let pass. Before, it kept the rest of every turn, and a quiet tenant came
// back with a burst of turns.
func TestUnspentTurnIsNotBankedInTheRing(t *testing.T) {
	qs, _ := ring(10, "a", "b")
	for range 6 {
		q, budget, _ := qs.take()
		if budget > 10 {
			t.Fatalf("queue %s has a budget of %d, want at most a quantum (10)", q.tenant, budget)
		}
		qs.done(q, stepResult{more: true, spent: 3})
	}
	// Cut at its budget (8 of 10 spent, the next job weighs 3): the 2 left are its next turn's.
	q, _, _ := qs.take()
	qs.done(q, stepResult{more: true, cut: true, spent: 8})
	other, _, _ := qs.take()
	qs.done(other, stepResult{more: true, spent: 10})
	if again, budget, _ := qs.take(); again != q || budget != 12 {
		t.Errorf("after a step cut at its budget: %s with %d, want %s with 12 (10 + the 2 left)", again.tenant, budget, q.tenant)
	}
}

// TestWakeDuringAStepIsKept: a wake that comes while the queue's step runs (a release freed the
// pool slot that is its turn, and the step's answer was a wait computed before) makes the queue
// ask again at once when the step ends, not after the wait.
func TestWakeDuringAStepIsKept(t *testing.T) {
	qs, _ := ring(10, "a", "b")
	tq, _, _ := qs.take()
	qs.wakeTenant(tq.tenant, true) // running: the step's answer does not know of this wake
	qs.done(tq, stepResult{next: time.Hour, spent: 1, waitsFor: policy.ReasonPool})
	other, _, _ := qs.take()
	qs.done(other, stepResult{next: time.Hour, spent: 1})
	qs.mu.Lock()
	where := tq.where
	qs.mu.Unlock()
	if where != ready {
		t.Fatalf("queue %s woken during its step is %v after it, want ready (it asks again at once)", tq.tenant, where)
	}
	again, _, _ := qs.take()
	if again != tq {
		t.Fatalf("took %s, want %s", again.tenant, tq.tenant)
	}
	qs.done(again, stepResult{next: time.Hour, spent: 1, waitsFor: policy.ReasonPool}) // no wake this time: it waits
	qs.mu.Lock()
	where = again.where
	qs.mu.Unlock()
	if where != scheduled {
		t.Errorf("queue %s not woken is %v after its step, want scheduled", again.tenant, where)
	}
}

// where is where q is in qs.
func where(qs *queues, q *queue) place {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	return q.where
}

// TestPoolWakeWakesOnlyAQueueWaitingForThePool: a wake for the pool (capacity it freed is the
// tenant's turn) makes a queue ask again only if its head waits for the pool; a queue whose own
// limit binds (its concurrency limit, for the rest of a lease) could not use it and keeps
// waiting, unless a wake of its own comes (a lease of its own ended). During a step, a wake for
// the pool counts if the step leaves the head waiting for the pool. Before, every wake woke
// every queue: one waiting 30 s on its own limit asked again at each release in its pool.
func TestPoolWakeWakesOnlyAQueueWaitingForThePool(t *testing.T) {
	qs, q := ring(10, "own", "pool")
	for range 2 {
		tq, _, _ := qs.take()
		why := "concurrency"
		if tq.tenant == "pool" {
			why = policy.ReasonPool
		}
		qs.done(tq, stepResult{next: 30 * time.Second, waitsFor: why})
	}
	qs.wakeTenant("own", true)
	qs.wakeTenant("pool", true)
	if w := where(qs, q["own"]); w != scheduled {
		t.Errorf("waiting on its own limit, woken for the pool: %v, want scheduled", w)
	}
	if w := where(qs, q["pool"]); w != ready {
		t.Errorf("waiting for the pool, woken for the pool: %v, want ready", w)
	}
	qs.wakeTenant("own", false)
	if w := where(qs, q["own"]); w != ready {
		t.Errorf("waiting on its own limit, woken for its own: %v, want ready", w)
	}
	// Both step again; a wake for the pool comes during each step.
	for range 2 {
		tq, _, _ := qs.take()
		qs.wakeTenant(tq.tenant, true)
		why := "concurrency"
		if tq.tenant == "pool" {
			why = policy.ReasonPool
		}
		qs.done(tq, stepResult{next: 30 * time.Second, waitsFor: why})
	}
	if w := where(qs, q["own"]); w != scheduled {
		t.Errorf("woken for the pool during a step that left it waiting on its own limit: %v, want scheduled", w)
	}
	if w := where(qs, q["pool"]); w != ready {
		t.Errorf("woken for the pool during a step that left it waiting for the pool: %v, want ready", w)
	}
}

// feedRig is a scheduler with a feed and no servers: one replica ("a") that holds the one
// partition, buffers of 2×batch jobs per queue and bytes in all.
func feedRig(t *testing.T, batch, bytes int) *queues {
	t.Helper()
	in := subjects.MustParse("jobs.submit.{tenant}.>")
	ps, err := subjects.NewPartitions(in, "admitter.JOBS", 1)
	if err != nil {
		t.Fatal(err)
	}
	s := &Service{cfg: Config{Batch: batch, Quantum: 10, InFlightBytes: bytes, In: in, Wait: subjects.MustParse("jobs.waiting.{tenant}"), StreamIn: "JOBS"},
		in: input{ps: ps, in: "JOBS"}, owners: newOwners("a", 1, time.Second, slog.New(slog.DiscardHandler)), log: slog.New(slog.DiscardHandler)}
	qs := newQueues(s)
	s.queues = qs
	pt := newPart(s, 0)
	pt.feedOn, pt.horizon = true, 0
	qs.parts[0] = pt
	return qs
}

// feed hands f to tenant's queue as the feed of its partition would.
func feed(qs *queues, tenant string, f fed) {
	qs.mu.Lock()
	pt := qs.parts[qs.s.in.partOf(tenant)]
	qs.mu.Unlock()
	qs.feed(pt, tenant, f)
}

// floor is partition 0's floor.
func floor(qs *queues) uint64 {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	return qs.floorLocked(qs.parts[0])
}

func fedJob(seq uint64) fed { return fed{seq: seq, subject: "jobs.submit.t.x", size: 10} }

func seqs(fs []fed) []uint64 {
	var out []uint64
	for _, f := range fs {
		out = append(out, f.seq)
	}
	return out
}

// TestFeedFollowsThenFallsBehind: a tenant's queue keeps what the feed hands it, in order; once
// its buffer is full it stops keeping (its jobs are read from the input from its cursor), and
// the floor never passes a job not yet settled.
func TestFeedFollowsThenFallsBehind(t *testing.T) {
	qs := feedRig(t, 2, 1000) // 4 jobs per buffer
	for seq := uint64(10); seq < 16; seq++ {
		feed(qs, "t", fedJob(seq))
	}
	q := qs.byName["t"]
	got, m := qs.buffered(q, 10)
	if m != behind || !slices.Equal(seqs(got), []uint64{10, 11, 12, 13}) {
		t.Fatalf("buffered %v in mode %d, want 10..13 behind (the buffer holds 4)", seqs(got), m)
	}
	if f := floor(qs); f != 10 {
		t.Errorf("floor %d, want 10: job 10 is not settled", f)
	}
	qs.settled(q, 13)
	if got, _ := qs.buffered(q, 10); len(got) != 0 || q.cursor != 14 {
		t.Fatalf("after settling through 13: buffered %v, cursor %d; want none, 14 (14 and 15 are read from the input)", seqs(got), q.cursor)
	}
	if f := floor(qs); f != 14 {
		t.Errorf("floor %d, want 14: jobs 14 and 15 wait in the input", f)
	}
	if qs.bufBytes != 0 {
		t.Errorf("%d bytes buffered in all, want 0", qs.bufBytes)
	}
}

// TestRejoiningKeepsWhatArrivesDuringTheRead: a queue behind reads the input; jobs the feed
// hands over meanwhile are kept if the read reaches the tenant's end (and those the read also
// returned are not kept twice), and dropped if it does not.
func TestRejoiningKeepsWhatArrivesDuringTheRead(t *testing.T) {
	qs := feedRig(t, 10, 1000)
	qs.mu.Lock()
	qs.adoptLocked("t") // taken over: behind, from its first job
	qs.mu.Unlock()
	q := qs.byName["t"]
	if !qs.startRead(q) || q.mode != rejoining {
		t.Fatalf("startRead: mode %d, want rejoining", q.mode)
	}
	feed(qs, "t", fedJob(7)) // arrives while the read is under way; the read returns it too
	feed(qs, "t", fedJob(9))
	_, follows := qs.endRead(q, []fed{fedJob(5), fedJob(7)}, true)
	got, m := qs.buffered(q, 10)
	if !follows || m != following || !slices.Equal(seqs(got), []uint64{5, 7, 9}) {
		t.Fatalf("after a read to the end: follows %v, mode %d, buffered %v; want following with 5 7 9", follows, m, seqs(got))
	}

	qs.settled(q, 9)
	q.mode = behind
	qs.startRead(q)
	feed(qs, "t", fedJob(30))
	head, follows := qs.endRead(q, []fed{fedJob(20)}, false) // more in the input: still behind
	if follows || !slices.Equal(seqs(head), []uint64{20}) {
		t.Fatalf("after a read that did not reach the end: follows %v, head %v; want behind with 20", follows, seqs(head))
	}
	if got, _ := qs.buffered(q, 10); !slices.Equal(seqs(got), []uint64{20}) {
		t.Errorf("buffered %v, want 20 alone (30 is read again from the input)", seqs(got))
	}
}

// TestJobArrivingWhileOnlyARemovalWaitsGoesAtOnce: a queue whose step found no job waits only
// for its settled jobs' removal (minutes, at most 5 s): a job the feed hands it during that
// step, or while it waits so, makes it go at once, following or behind; and a queue behind
// whose read ended before a job arrived does not go idle and lose it. Before, the job waited
// for the removal (the bench's overload scenario stalled for seconds, 1 run in 4), and the
// queue behind was dropped.
func TestJobArrivingWhileOnlyARemovalWaitsGoesAtOnce(t *testing.T) {
	qs := feedRig(t, 10, 1000)
	where := func(q *queue) place {
		qs.mu.Lock()
		defer qs.mu.Unlock()
		return q.where
	}
	feed(qs, "t", fedJob(10))
	q, _, _ := qs.take()
	qs.settled(q, 10)
	feed(qs, "t", fedJob(11)) // during the step that found nothing more
	qs.done(q, stepResult{next: 5 * time.Second, headless: true})
	if w := where(q); w != ready {
		t.Fatalf("following, a job arrived during a step that waits for a removal: %v, want ready", w)
	}

	qs.mu.Lock()
	qs.adoptLocked("u") // behind
	qs.mu.Unlock()
	for range 2 { // t (scheduled away), then u
		if b, _, _ := qs.take(); b.tenant == "u" {
			feed(qs, "u", fedJob(20)) // after its read ended empty
			qs.done(b, stepResult{idle: true})
			break
		} else {
			qs.done(b, stepResult{next: time.Hour})
		}
	}
	b := qs.byName["u"]
	if b == nil || where(b) != ready {
		t.Fatalf("behind, a job arrived after its read ended: queue %v, want ready", b)
	}
	b, _, _ = qs.take()
	qs.done(b, stepResult{next: 5 * time.Second, headless: true})
	if w := where(b); w != scheduled {
		t.Fatalf("behind, waiting for a removal: %v, want scheduled", w)
	}
	feed(qs, "u", fedJob(21))
	if w := where(b); w != ready {
		t.Errorf("behind, a job arrived while it waited for a removal: %v, want ready", w)
	}
}

// TestAdoptionHoldsTheFloor: a queue given to a tenant with jobs no feed hands over (a
// partition without a working feed) holds its partition's floor at its cursor until it has read
// its first job.
func TestAdoptionHoldsTheFloor(t *testing.T) {
	qs := feedRig(t, 10, 1000)
	feed(qs, "t", fedJob(100))
	if f := floor(qs); f != 100 {
		t.Fatalf("floor %d, want 100", f)
	}
	qs.mu.Lock()
	qs.adoptLocked("u")
	qs.mu.Unlock()
	if f := floor(qs); f != 0 {
		t.Errorf("floor %d with an adopted queue that has read nothing, want 0", f)
	}
}

// TestOlderStreamsGoFirst: a tenant with jobs in an older stream (the partitions changed, or a
// producer published without the mapping) gets a queue that reads them first: behind, holding
// its partition's floor; a queue following its feed that learns of such jobs falls behind.
func TestOlderStreamsGoFirst(t *testing.T) {
	qs := feedRig(t, 10, 1000)
	src := source{stream: "JOBS_8_3", filter: "admitter.JOBS.8.3.jobs.submit.v.>", n: 8}
	qs.mu.Lock()
	qs.old["v"] = []source{src}
	qs.mu.Unlock()
	feed(qs, "v", fedJob(50))
	if q := qs.byName["v"]; q.mode != behind || len(q.old) != 1 || q.cursor != 0 {
		t.Fatalf("a tenant with older jobs, first seen by the feed: mode %d, sources %d, cursor %d; want behind, 1, 0", q.mode, len(q.old), q.cursor)
	}
	if f := floor(qs); f != 0 {
		t.Errorf("floor %d while the queue has read nothing, want 0", f)
	}
	feed(qs, "w", fedJob(51))
	qs.mu.Lock()
	qs.addSourcesLocked(qs.byName["w"], []source{src})
	qs.mu.Unlock()
	if q := qs.byName["w"]; q.mode != behind || len(q.old) != 1 {
		t.Errorf("a following queue given an older stream: mode %d, sources %d; want behind, 1", q.mode, len(q.old))
	}
}

// TestSourcesFoundDuringAStepWaitForIt: an older stream found while a step of the queue runs
// is not added under the step (it reads and moves its older streams without the lock: a data
// race, and a cursor the step moved lost to a copy, when the listing appended to them); the
// queue's next step adds it, and falls behind to read it first.
func TestSourcesFoundDuringAStepWaitForIt(t *testing.T) {
	qs := feedRig(t, 10, 1000)
	src := source{stream: "JOBS_8_3", filter: "admitter.JOBS.8.3.jobs.submit.w.>", n: 8}
	feed(qs, "w", fedJob(51))
	q, _, ok := qs.tryTake()
	if !ok || q.tenant != "w" || q.mode != following {
		t.Fatalf("took %v (%v), want w's queue, following", q, ok)
	}
	qs.mu.Lock()
	qs.addSourcesLocked(q, []source{src})
	qs.mu.Unlock()
	if len(q.old) != 0 || q.mode != following {
		t.Fatalf("a running queue given an older stream: sources %d, mode %d; want 0 until its next step, following", len(q.old), q.mode)
	}
	qs.done(q, stepResult{more: true})
	qs.takeSources(q)
	if len(q.old) != 1 || q.old[0].stream != src.stream || q.mode != behind || len(q.more) != 0 {
		t.Errorf("its next step: sources %v, mode %d, pending %d; want JOBS_8_3, behind, none", q.old, q.mode, len(q.more))
	}
}

// TestASparseTenantGoesBeforeTheBacklogsRound: while 50 tenants' backlogs (jobs stored long ago,
// as after a start or an outage) wait for their turns, a tenant whose queue was empty receives a
// job that just arrived: it is stepped within two turns, not after the round of 50. Before, it joined
// the end of the round (the bench's backlog at start: its p99 2.4-3.5 s). The backlogs' turns go
// on in their order, every other turn at least.
func TestASparseTenantGoesBeforeTheBacklogsRound(t *testing.T) {
	t.Run("buffered", func(t *testing.T) { testSparseTenant(t, 1<<20) })
	// The backlogs fill the buffers: the new tenant's queue is behind from its first job (the
	// bench's case: before, it joined the end of the round even with the fresh ring).
	t.Run("buffers full", func(t *testing.T) { testSparseTenant(t, 200) })
}

func testSparseTenant(t *testing.T, bytes int) {
	qs := feedRig(t, 10, bytes)
	old := time.Now().Add(-time.Hour)
	for k := range 50 {
		f := fedJob(uint64(k + 1))
		f.stored = old
		feed(qs, fmt.Sprintf("b%02d", k), f)
	}
	fresh := fedJob(100)
	fresh.stored, fresh.live = time.Now(), true
	feed(qs, "new", fresh)
	var order []string
	for range 4 {
		q, _, ok := qs.tryTake()
		if !ok {
			t.Fatal("no queue ready")
		}
		order = append(order, q.tenant)
	}
	if !slices.Contains(order[:2], "new") {
		t.Fatalf("turns %v: the sparse tenant is not within the first two", order)
	}
	if got := slices.DeleteFunc(slices.Clone(order), func(s string) bool { return s == "new" }); !slices.Equal(got, []string{"b00", "b01", "b02"}) {
		t.Fatalf("the backlogs' turns %v, want b00, b01, b02 in order", got)
	}
}

// TestAJobNotHandedOverIsNotBelowTheFloor: a job the feed delivers after the queues closed (the
// service stops: its partitions are compacted once more before they go) is handed to no queue,
// so the floor stays below it. Before, the feed's position moved past it, and the compaction at
// the stop removed jobs nobody had forwarded (TestOwnershipFlapsLoseNothing lost 182 of 3,000).
func TestAJobNotHandedOverIsNotBelowTheFloor(t *testing.T) {
	qs := feedRig(t, 10, 1<<20)
	feed(qs, "t", fedJob(10))
	qs.settled(qs.byName["t"], 10)
	qs.close()
	feed(qs, "u", fedJob(11))
	if f := floor(qs); f > 11 {
		t.Fatalf("floor %d after the queues closed: job 11, handed to no queue, would be removed", f)
	}
}

// The findings of a review of the partition work, each a test that failed before its fix.

// TestAnEmptyReadKeepsTheJobAtTheCursor: a queue rejoining its feed reads nothing from its
// cursor while the tenant's next job, at exactly the cursor, is stored and handed over: the
// queue follows with that job buffered. Before, the read's end kept only jobs after the cursor:
// the job was dropped, the floor passed it, and the compaction removed it.
func TestAnEmptyReadKeepsTheJobAtTheCursor(t *testing.T) {
	qs := feedRig(t, 10, 1<<20)
	feed(qs, "t", fedJob(10))
	q, _, _ := qs.take()
	qs.settled(q, 10) // cursor 11
	qs.mu.Lock()
	qs.fallBehindLocked(q)
	qs.mu.Unlock()
	qs.startRead(q)
	feed(qs, "t", fedJob(11)) // stored and handed over while the read ran
	_, follows := qs.endRead(q, nil, true)
	if got, _ := qs.buffered(q, 10); !follows || len(got) != 1 || got[0].seq != 11 {
		t.Fatalf("follows %v with %v buffered, want job 11; floor %d", follows, seqs(got), floor(qs))
	}
}

// TestAQueueGoneAtTheStopStaysCounted: a step that ends after the queues closed, its partition
// held but its lease late, leaves the queue in place: the last compaction's floor still counts
// its unsettled job. Before, the queue was dropped, and the compaction at the stop removed it.
func TestAQueueGoneAtTheStopStaysCounted(t *testing.T) {
	qs := feedRig(t, 10, 1<<20)
	feed(qs, "t", fedJob(10))
	q, _, _ := qs.take()
	qs.close()
	qs.done(q, stepResult{gone: true})
	if f := floor(qs); f > 10 {
		t.Fatalf("floor %d passes the unsettled job 10", f)
	}
}

// TestTheBufferFullWakesAQueueWaitingForARemoval: a queue scheduled only for a removal (nothing
// at its head) is woken by its tenant's next job even when the buffers are full. Before, it
// slept until the removal, up to 5 s.
func TestTheBufferFullWakesAQueueWaitingForARemoval(t *testing.T) {
	qs := feedRig(t, 10, 25)
	feed(qs, "t", fedJob(10))
	q, _, _ := qs.take()
	qs.settled(q, 10)
	qs.done(q, stepResult{next: 5 * time.Second, headless: true})
	feed(qs, "u", fedJob(11))
	feed(qs, "u", fedJob(12))
	feed(qs, "t", fedJob(13))
	if w := where(qs, q); w != ready {
		t.Fatalf("the queue is %v, want ready", w)
	}
}

// TestAnArrivalWakesAQueueWaitingForARemovalFirst: a tenant whose last job was forwarded (its
// queue waits only to remove it) and whose next job arrives while backlogs wait goes before their
// round too. Before, its queue joined the end of the ring: the bench's new tenant had its first
// job through at once and its second only when the backlog was drained.
func TestAnArrivalWakesAQueueWaitingForARemovalFirst(t *testing.T) {
	qs := feedRig(t, 10, 1<<20)
	first := fedJob(1)
	first.live = true
	feed(qs, "new", first)
	q, _, _ := qs.take()
	qs.settled(q, 1)
	qs.done(q, stepResult{next: 5 * time.Second, headless: true})
	for k := range 50 {
		feed(qs, fmt.Sprintf("b%02d", k), fedJob(uint64(k+2)))
	}
	next := fedJob(100)
	next.live = true
	feed(qs, "new", next)
	var order []string
	for range 3 {
		q, _, ok := qs.tryTake()
		if !ok {
			t.Fatal("no queue ready")
		}
		order = append(order, q.tenant)
	}
	if !slices.Contains(order[:2], "new") {
		t.Fatalf("turns %v: the arrival's tenant is not within the first two", order)
	}
}

// TestAnArrivalTakesAQueueBackInTheRingToTheFreshRing: a tenant whose step forwarded everything
// it had and went back in the ring (its step said there may be more), behind 50 backlogs, gets an
// arrival: its queue moves to the fresh ring. Before, it waited for the round (the bench's new
// tenant: its second job forwarded 1.3 s after it arrived, when the backlog was drained).
func TestAnArrivalTakesAQueueBackInTheRingToTheFreshRing(t *testing.T) {
	qs := feedRig(t, 10, 1<<20)
	first := fedJob(1)
	first.live = true
	feed(qs, "new", first)
	q, _, _ := qs.take()
	qs.settled(q, 1)
	for k := range 50 {
		feed(qs, fmt.Sprintf("b%02d", k), fedJob(uint64(k+2)))
	}
	qs.done(q, stepResult{more: true})
	next := fedJob(100)
	next.live = true
	feed(qs, "new", next)
	var order []string
	for range 3 {
		q, _, ok := qs.tryTake()
		if !ok {
			t.Fatal("no queue ready")
		}
		order = append(order, q.tenant)
	}
	if !slices.Contains(order[:2], "new") {
		t.Fatalf("turns %v: the arrival's tenant is not within the first two", order)
	}
}
