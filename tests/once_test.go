package tests

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/admitter/admitter/wire"
	"github.com/admitter/admitter/worker"
	"github.com/nats-io/nats.go/jetstream"
)

// TestAKilledForwardIsNotRepeatedPastTheDuplicateWindow: a replica is killed right after its
// forwards were stored downstream, before it removed them from the input or told the limiter
// they were stored; it is started again past the output's duplicate window. Every job is stored
// once downstream: the limiter remembers what it admitted until the owner says it was stored,
// and the new tenure looks a forward it is unsure of up in the output before repeating it.
// Before, the new holder decided them afresh and forwarded them again: the output, past its
// duplicate window, stored them twice (issue 39 item 3: 4 of 120 in a user's drill).
func TestAKilledForwardIsNotRepeatedPastTheDuplicateWindow(t *testing.T) {
	t.Parallel()
	w, deny, env := lossyWorld(t, `
plans:
  steady:
    limits: [{capacity: 100, rate: 100/s}]
default_plan: steady
`)
	env = append(env, "ADMITTER_DUPLICATE_WINDOW=10s")
	p := w.start(env...)
	// Removals are refused, so that whatever was forwarded stays in the input for the next
	// holder to read, as it does when a replica dies between a forward and its removal.
	deny("$JS.API.STREAM.PURGE.>", "$JS.API.STREAM.MSG.DELETE.>")
	const n = 20
	for i := range n {
		w.publish("jobs.submit.acme.email", fmt.Sprintf("acme-%d", i))
	}
	w.read("ADMITTED", n, 30*time.Second)
	p.kill() // within a second of the forwards: no removal was tried yet, nothing was said stored
	if left := w.streamMsgs("JOBS"); left != n {
		t.Fatalf("the input holds %d jobs after the kill, want all %d (the test needs them read again)", left, n)
	}
	deny()
	time.Sleep(11 * time.Second) // past the output's duplicate window: a repeat would be stored
	w.start(env...)
	waitFor(t, 30*time.Second, "the input to be empty", func() bool { return w.streamMsgs("JOBS") == 0 })
	seen := map[string]int{}
	for _, j := range w.readAll("ADMITTED") {
		seen[j.payload]++
	}
	twice := 0
	for i := range n {
		switch c := seen[fmt.Sprintf("acme-%d", i)]; {
		case c == 0:
			t.Errorf("acme-%d lost", i)
		case c > 1:
			twice++
		}
	}
	if twice > 0 {
		t.Fatalf("%d of %d jobs stored more than once downstream, want each once", twice, n)
	}
}

// TestAReForwardHoldsNoSlot: a pool of 2 slots with a 30 s lease; a tenant's two jobs are
// forwarded, run by a worker (the worker library) and done, and the replica is killed before it
// removed them from the input; started again a few seconds later (past the limiter's redeem
// window of before, within the output's duplicate window), it reads them again. Then two new
// jobs come: they go at once, the pool empty, and every job runs once. Before, the jobs read
// again were decided afresh and forwarded again: the output dropped them as duplicates, but
// each took a slot that no done message would free, so the new jobs waited for those leases'
// end, 30 s (issue 39 item 1: "4 of 4 in flight" with the worker idle).
func TestAReForwardHoldsNoSlot(t *testing.T) {
	t.Parallel()
	w, deny, env := lossyWorld(t, `
pools:
  workers: {concurrency: 2, lease: 30s}
plans:
  p: {pool: workers, limits: [{capacity: 100, rate: 100/s}]}
default_plan: p
`)
	env = append(env, "ADMITTER_DUPLICATE_WINDOW=10s")
	p := w.start(env...)
	runs := countRuns(t, w)
	deny("$JS.API.STREAM.PURGE.>", "$JS.API.STREAM.MSG.DELETE.>")
	w.publish("jobs.submit.acme.export", "old-1")
	w.publish("jobs.submit.acme.export", "old-2")
	waitFor(t, 20*time.Second, "the two jobs to run", func() bool { return runs.total() == 2 })
	time.Sleep(300 * time.Millisecond) // their done messages handled
	p.kill()
	deny()
	time.Sleep(4 * time.Second) // past the killed replica's hold on the tenant (3 s)
	w.start(env...)
	w.publish("jobs.submit.acme.export", "new-1")
	w.publish("jobs.submit.acme.export", "new-2")
	waitFor(t, 15*time.Second, "the new jobs to run (a slot held by a re-forward would hold them 30 s)", func() bool { return runs.total() >= 4 })
	runs.once(t, "old-1", "old-2", "new-1", "new-2")
}

// TestAJobReadAgainTakesItsSlotBeforeTheJobsBehindIt: a tenant with a concurrency limit of 1
// (a 2 s lease) and a bound on waiting of 12 s; its job is admitted, NATS holds its forward (the
// admitter may not publish to the output) and the replica is killed: the job's lease ends
// unforwarded. Ten jobs come behind it, and a replica is started again: the job, read again
// (redeemed, not found downstream), takes its slot again and goes first, then the ten, each
// run once, none dead-lettered. Before, the step that redeemed it admitted the next job in the
// same call, which took the one slot its start needed: it waited for that slot, the next job
// waited behind it unforwarded until its lease ended, and the step after did the same with the
// job after: the slot held by nobody, the jobs behind waiting until they expired (the takeover
// drill: a pool of 4 all in flight for 5.8 s while its worker ran nothing).
func TestAJobReadAgainTakesItsSlotBeforeTheJobsBehindIt(t *testing.T) {
	t.Parallel()
	w, deny, env := lossyWorld(t, `
plans:
  one: {max_wait: 12s, limits: [{capacity: 100, rate: 100/s}, {name: running, kind: concurrency, limit: 1, lease: 2s}]}
default_plan: one
`)
	p := w.start(env...)
	runs := countRuns(t, w)
	deny("jobs.admitted.>")
	w.publish("jobs.submit.acme.x", "first")
	time.Sleep(time.Second) // admitted, its forward held by NATS
	p.kill()
	deny()
	const behind = 10
	payloads := []string{"first"}
	for i := range behind {
		payloads = append(payloads, fmt.Sprintf("next-%d", i))
		w.publish("jobs.submit.acme.x", payloads[i+1])
	}
	time.Sleep(4 * time.Second) // past its lease (2 s) and the killed replica's hold on the tenant (3 s)
	w.start(env...)
	waitFor(t, 30*time.Second, "every job to run or be dead-lettered", func() bool {
		return uint64(runs.total())+w.streamMsgs("DEAD") >= uint64(len(payloads))
	})
	if dead := w.readAll("DEAD"); len(dead) > 0 {
		t.Errorf("%d of %d jobs dead-lettered (%s: %s), want none: the slot was held by a job nobody ran",
			len(dead), len(payloads), dead[0].payload, dead[0].header.Get(wire.HeaderError))
	}
	runs.once(t, payloads...)
}

// runs counts the runs of each job (by payload) at a worker built on the worker library.
type runs struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *runs) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := 0
	for _, n := range r.n {
		t += n
	}
	return t
}

// once fails unless each of payloads ran exactly once, and nothing else ran.
func (r *runs) once(t *testing.T, payloads ...string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range payloads {
		if r.n[p] != 1 {
			t.Errorf("job %s ran %d times, want once", p, r.n[p])
		}
	}
	if len(r.n) != len(payloads) {
		t.Errorf("%d distinct jobs ran, want %d: %v", len(r.n), len(payloads), r.n)
	}
}

// countRuns runs a worker on the output (every tenant), each job 100 ms, counting runs.
func countRuns(t *testing.T, w *world) *runs {
	t.Helper()
	r := &runs{n: map[string]int{}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := w.js.CreateOrUpdateConsumer(ctx, "ADMITTED", jetstream.ConsumerConfig{Durable: "workers",
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	wk, err := worker.New(worker.Config{Consumer: cons, Conn: w.nc, Concurrency: 8, Logger: slog.New(slog.DiscardHandler),
		Handler: func(ctx context.Context, j *worker.Job) error {
			r.mu.Lock()
			r.n[string(j.Data)]++
			r.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := wk.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = wk.Stop(ctx)
	})
	return r
}

// TestAForwardHeldByNATSKeepsItsSlot: a pool of one slot with a 2 s lease; tenant a's job is
// admitted, and NATS holds its forward for 6 s (the admitter may not publish to the output: as
// while a stream elects a leader after a node loss); tenant b's job comes meanwhile. Once the
// output takes them, the worker never runs both at once: a's lease is kept while its forward
// waits, so b waits for a's slot. Before, a's lease ended while NATS held its forward, b took the
// slot, and both forwards, stored together, ran beside each other: 2 running in a pool of 1
// (issue 39 item 7, the soak's 8 of 6 after a NATS node kill).
func TestAForwardHeldByNATSKeepsItsSlot(t *testing.T) {
	t.Parallel()
	w, deny, env := lossyWorld(t, `
pools:
  one: {concurrency: 1, lease: 2s}
plans:
  p: {pool: one, limits: [{capacity: 100, rate: 100/s}]}
default_plan: p
`)
	w.start(env...)
	var mu sync.Mutex
	running, most, ran := 0, 0, 0
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := w.js.CreateOrUpdateConsumer(ctx, "ADMITTED", jetstream.ConsumerConfig{Durable: "workers",
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	wk, err := worker.New(worker.Config{Consumer: cons, Conn: w.nc, Concurrency: 4, Logger: slog.New(slog.DiscardHandler),
		Handler: func(ctx context.Context, j *worker.Job) error {
			mu.Lock()
			running++
			most = max(most, running)
			mu.Unlock()
			select { // long enough for the two forwards, retried apart, to overlap when both run
			case <-ctx.Done():
			case <-time.After(8 * time.Second):
			}
			mu.Lock()
			running--
			ran++
			mu.Unlock()
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := wk.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = wk.Stop(ctx)
	})
	deny("jobs.admitted.>")
	w.publish("jobs.submit.a.x", "a")
	time.Sleep(500 * time.Millisecond) // a admitted, its forward held
	w.publish("jobs.submit.b.x", "b")
	time.Sleep(5500 * time.Millisecond) // past a's lease, twice
	deny()
	waitFor(t, 40*time.Second, "both jobs to run", func() bool { mu.Lock(); defer mu.Unlock(); return ran == 2 })
	if most > 1 {
		t.Fatalf("%d jobs ran at once in a pool of 1: a forward held by NATS lost its slot", most)
	}
}
