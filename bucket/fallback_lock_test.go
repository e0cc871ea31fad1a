package bucket

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/admitter/admitter/internal/testenv"
)

// stallingRouter decides everything on its own replica, and holds the first question about a
// pool after armed until released: a routed or pooled decision caught midway.
type stallingRouter struct {
	mu       sync.Mutex
	armed    bool
	reached  chan struct{}
	released chan struct{}
}

func (r *stallingRouter) Since(key string) time.Time {
	r.mu.Lock()
	stall := r.armed && strings.HasPrefix(key, "pool:")
	r.armed = r.armed && !stall
	r.mu.Unlock()
	if stall {
		close(r.reached)
		<-r.released
	}
	return time.Unix(1, 0)
}

func (r *stallingRouter) Ask(context.Context, string, []byte) ([]byte, error) {
	panic("stallingRouter decides everything on its own replica")
}

func (r *stallingRouter) Back()     {}
func (r *stallingRouter) Tell(bool) {}

func (r *stallingRouter) Relay(context.Context, []byte) ([]byte, error) {
	return nil, errors.New("test: no other replica")
}

// goroutines is every goroutine's stack, for a test that found some stuck.
func goroutines() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}

// TestAMergeNeverWaitsForADecisionThatWaitsForIt: Redis away, a done message of a pooled plan
// is decided on the copy, and caught between its tenant's part and its pool's part while Redis
// comes back and the merge begins. The done message returns, and the merge ends.
//
// Issue 38, item 1: before, the decision held the mode's read lock while asking for the pool's
// part, which takes the read lock again; the merge's write lock waited for the first, and Go's
// RWMutex made the second wait for the writer: neither ever returned (the replica stopped
// deciding for good).
func TestAMergeNeverWaitsForADecisionThatWaitsForIt(t *testing.T) {
	c := newClock()
	opts := Options{}
	red, srv := fallbackRedis(t, c.Now, opts)
	f := NewFallback(red, opts, time.Second, FallbackHooks{})
	f.Watch()
	rt := &stallingRouter{reached: make(chan struct{}), released: make(chan struct{})}
	pool, err := NewPool(Pool{Name: uniqueTenant("pool"), Concurrency: 2, Lease: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p := mustPlan(t, "pooled", lim("own", 1000, time.Millisecond))
	p.Pool = pool
	tn := uniqueTenant("t")
	plans, err := NewPlans([]*Plan{p}, map[string]string{tn: "pooled"}, "")
	if err != nil {
		t.Fatal(err)
	}
	f.Route(rt, func() *Plans { return plans })
	ctx := context.Background()
	if r, err := f.Admit(ctx, Batch{Tenant: tn, Plan: p, Owner: 1, Jobs: []Job{{ID: 1, Weight: 1}}}); err != nil || r.Outcomes[0] != JobAdmitted {
		t.Fatalf("job 1 on Redis: %+v %v", r, err)
	}
	srv.Kill()
	if r, err := f.Admit(ctx, Batch{Tenant: tn, Plan: p, Owner: 1, Jobs: []Job{{ID: 2, Weight: 1}}}); err != nil || !r.Local {
		t.Fatalf("job 2 with Redis away: %+v %v, want decided on the copy", r, err)
	}
	rt.mu.Lock()
	rt.armed = true
	rt.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		_, err := f.Release(ctx, LeaseRequest{Tenant: tn, Plan: p, Lease: 1, Cost: NoCost, Weight: 1})
		done <- err
	}()
	select {
	case <-rt.reached:
	case err := <-done:
		t.Fatalf("the done message returned (%v) without asking for its pool", err)
	case <-time.After(5 * time.Second):
		t.Fatalf("the done message never asked for its pool:\n%s", goroutines())
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	// Let the merge begin: it is under way once a goroutine waits in it, or over once the
	// limiter decides on Redis again (bounded either way).
	deadline := time.Now().Add(10 * time.Second)
	for f.Local() && !strings.Contains(goroutines(), "(*Fallback).merge") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	close(rt.released)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the done message: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("the done message did not return within 5s: a deadlock\n%s", goroutines())
	}
	testenv.WaitFor(t, 10*time.Second, "the merge to end", func() bool { return !f.Local() })
	f.Close() // only now: with a deadlock, the prober never ends and Close would wait for it
}
