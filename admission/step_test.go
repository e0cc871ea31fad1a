package admission

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/plans"
	"github.com/admitter/admitter/policy"
	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go"
)

// unreachable is a limiter whose every decision fails as a lost connection does.
type unreachable struct{ *bucket.Memory }

func (unreachable) Admit(context.Context, bucket.Batch) (bucket.BatchResult, error) {
	return bucket.BatchResult{}, errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")
}

// TestEveryForwardSpendsItsTurn: a forward under a plan in shadow mode, and one sent without a
// decision (fail mode open), spends its weight of its queue's turn as an enforced one does.
// With a backlog of jobs of weight 2 and turns of 5, a step takes 2 jobs (4) and keeps the 1
// left for the next turn, which takes 3 (6): never more. Before, they spent nothing: the step
// was cut at its budget with the whole turn kept, and the budget grew by a turn at every step
// (5, 10, 15, ...), a full batch every turn whatever the quantum.
func TestEveryForwardSpendsItsTurn(t *testing.T) {
	const quantum, n = 5, 60
	for _, c := range []struct {
		name, plans string
		asks        func(*bucket.Memory) policy.Limiter
		mode        policy.FailMode
	}{
		{name: "shadow", plans: "plans: {p: {mode: shadow, limits: [{capacity: 2, rate: 1/s}]}}\ndefault_plan: p\n"},
		{name: "fail-open", plans: "plans: {p: {limits: [{capacity: 1000, rate: 1000/s}]}}\ndefault_plan: p\n",
			asks: func(m *bucket.Memory) policy.Limiter { return unreachable{m} }, mode: policy.FailOpen},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := Config{Quantum: quantum, Batch: 100}
			r := startRig(t, c.plans, cfg)
			r.publish(1, "jobs.submit.acme.x")
			r.forwarded(1) // running
			r.stop()
			r.publish(n, "jobs.submit.acme.x", wire.HeaderWeight, "2") // a backlog before the queue's first step
			if c.asks != nil {
				r.asks, r.failMode = c.asks(r.limiter), c.mode
			}
			r.run(c.plans, cfg)
			r.forwarded(1 + n)
			steps, most := 0, int64(0)
			for _, s := range r.spans.GetSpans() {
				if s.Name != "limiter decide" {
					continue
				}
				steps++
				for _, kv := range s.Attributes {
					if kv.Key == "admitter.batch" {
						most = max(most, kv.Value.AsInt64())
					}
				}
			}
			if steps == 0 || most > 3 {
				t.Errorf("%d steps decided up to %d jobs of weight 2 on turns of %d, want at most 3", steps, most, quantum)
			}
		})
	}
}

// TestClaimNotSaidIsKept: a queue whose tenant has no plan (the plans dropped it) cannot say
// what it owes the limiter: no limiter call is made. Its queue keeps the claim, to say it once
// the tenant has a plan again, rather than go idle and drop it. Before, a step without an
// error counted as said: the late weight and the stored sequence were dropped.
func TestClaimNotSaidIsKept(t *testing.T) {
	ps, err := plans.Parse("plans.yaml", []byte("plans: {p: {limits: [{capacity: 5, rate: 5/s}]}}\ntenants: {acme: p}\n"))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.New(policy.Config{Limiter: bucket.NewMemory(bucket.Options{}, nil), Plans: ps, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	s := &Service{cfg: Config{Policy: pol}, owner: 1}
	owes := owed{stored: 7, lateWeight: 3, late: time.Second}
	q := &queue{tenant: "gone", owe: owes}
	res := s.settleIdle(context.Background(), q)
	if q.owe != owes {
		t.Errorf("after a step that could not say it: owes %+v, want %+v still owed", q.owe, owes)
	}
	if res.idle || res.next <= 0 {
		t.Errorf("step %+v: want the queue to wait (not idle: idle drops it and its claim)", res)
	}
}

// counting is a limiter that counts the decisions asked per tenant.
type counting struct {
	*bucket.Memory
	mu    sync.Mutex
	asked map[string]int
}

func (c *counting) Admit(ctx context.Context, b bucket.Batch) (bucket.BatchResult, error) {
	c.mu.Lock()
	c.asked[b.Tenant]++
	c.mu.Unlock()
	return c.Memory.Admit(ctx, b)
}

func (c *counting) of(tenant string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.asked[tenant]
}

// TestPoolWakeLeavesAQueueWaitingOnItsOwnLimit: a queue whose head waits for its own limit
// (here its concurrency limit, for the 30 s of a lease) is not woken by the wakes of its pool:
// the capacity they announce is not what it waits for. A wake for its own capacity (a lease of
// its own released) still makes it ask again. Before, every release in the pool made it ask
// the limiter again, to be told to wait the same 30 s (the console showed the same wait every
// 7–60 ms).
func TestPoolWakeLeavesAQueueWaitingOnItsOwnLimit(t *testing.T) {
	const plans = "plans: {c: {limits: [{name: running, kind: concurrency, limit: 1, lease: 30s}]}}\ndefault_plan: c\n"
	r := newRig(t)
	lim := &counting{Memory: r.limiter, asked: map[string]int{}}
	r.asks = lim
	r.run(plans, Config{DuplicateWindow: 10 * time.Second}) // job 1 is removed within 2.5 s: then the queues wait for the lease alone
	r.publish(2, "jobs.submit.acme.x")
	r.publish(2, "jobs.submit.other.x")
	r.forwarded(2)
	qs := r.svc.queues
	waiting := func(tenant string) bool { // scheduled for its lease's end
		qs.mu.Lock()
		defer qs.mu.Unlock()
		q := qs.byName[tenant]
		return q != nil && q.where == scheduled && time.Until(q.at) > 10*time.Second
	}
	for _, tenant := range []string{"acme", "other"} {
		waitFor(t, 10*time.Second, tenant+"'s job 2 waiting for the lease of its job 1", func() bool { return waiting(tenant) })
	}
	wake := func(tenant string, hdr nats.Header) {
		if err := r.nc.PublishMsg(&nats.Msg{Subject: r.svc.leases.wake, Data: []byte(tenant), Header: hdr}); err != nil {
			t.Fatal(err)
		}
	}
	// Five wakes of the pool for acme, then one of its own for other: the wakes are handled in
	// order, so once other has asked again, acme's wakes were handled.
	acme, other := lim.of("acme"), lim.of("other")
	for range 5 {
		wake("acme", nats.Header{wakeFor: []string{wakeForPool}}) // another tenant's release freed pool capacity
	}
	wake("other", nil)
	waitFor(t, 10*time.Second, "other to ask again and wait", func() bool { return lim.of("other") > other && waiting("other") })
	waitFor(t, 10*time.Second, "acme to wait", func() bool { return waiting("acme") })
	if asked := lim.of("acme") - acme; asked != 0 {
		t.Errorf("acme asked the limiter %d times after 5 wakes of the pool, want 0: its own limit binds", asked)
	}
	acme = lim.of("acme")
	wake("acme", nil) // a lease of its own ended
	waitFor(t, 10*time.Second, "acme to ask again and wait", func() bool { return lim.of("acme") > acme && waiting("acme") })
	if asked := lim.of("acme") - acme; asked != 1 {
		t.Errorf("acme asked the limiter %d times after a wake of its own, want 1", asked)
	}
}

// TestAdmitAttemptsCountsTheDecisions: Admit-Attempts is the decisions a job took: 1 for a job
// admitted at its first decision, and 1 more each time a step left it waiting at the head of
// its queue.
func TestAdmitAttemptsCountsTheDecisions(t *testing.T) {
	const plans = "plans: {p: {limits: [{capacity: 2, rate: 60/m}]}}\ndefault_plan: p\n" // a token a second
	r := startRig(t, plans, Config{})
	r.publish(3, "jobs.submit.acme.x")
	var got []string
	for _, m := range r.forwarded(3) {
		got = append(got, m.Headers().Get(wire.HeaderAttempts))
	}
	if want := []string{"1", "1", "2"}; !slices.Equal(got, want) {
		t.Errorf("Admit-Attempts %v, want %v: the third waited once at the head for its token", got, want)
	}
}
