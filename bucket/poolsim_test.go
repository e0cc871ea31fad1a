package bucket

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestPoolSharesWithWakes drives a pool as the admitter does, on a settable clock: 8 slots,
// jobs of 100 ms, two tenants with a backlog (shares 3 and 1) that ask for their next 100 jobs
// when woken (a release names them, or their own job ended) or when their wait is over. Over 20 s
// they get the slots 3:1 (±10 %), and the slots are never idle while a tenant has jobs.
func TestPoolSharesWithWakes(t *testing.T) {
	c := newClock()
	m := NewMemory(Options{}, c.Now)
	pool, _ := NewPool(Pool{Name: "w", Concurrency: 8, Lease: 30 * time.Second})
	plan := func(name string, share int64) *Plan {
		p := mustPlan(t, name, lim("own", 1_000_000, time.Microsecond))
		p.Pool, p.Share = pool, share
		return p
	}
	plans := map[string]*Plan{"h3": plan("h3", 3), "h1": plan("h1", 1)}
	next := map[string]int64{"h3": 1, "h1": 1_000_000}
	type running struct {
		tenant string
		id     int64
		end    time.Time
	}
	var busy []running
	due := map[string]time.Time{"h3": c.Now(), "h1": c.Now()}
	got := map[string]int{}
	ctx := context.Background()
	idle := 0
	ask := func(tenant string) {
		jobs := make([]Job, 100)
		for i := range jobs {
			jobs[i] = Job{ID: next[tenant] + int64(i), Weight: 1}
		}
		r, err := m.Admit(ctx, Batch{Tenant: tenant, Plan: plans[tenant], Owner: 1, Jobs: jobs})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, o := range r.Outcomes {
			if o.Admitted() {
				n++
			}
		}
		for i := range n {
			busy = append(busy, running{tenant, next[tenant] + int64(i), c.Now().Add(100 * time.Millisecond)})
		}
		next[tenant] += int64(n)
		got[tenant] += n
		due[tenant] = c.Now().Add(r.Wait)
		for _, w := range r.Wakes {
			due[w] = c.Now()
		}
	}
	for range 20_000 {
		c.Advance(time.Millisecond)
		now := c.Now()
		left := busy[:0]
		for _, r := range busy {
			if r.end.After(now) {
				left = append(left, r)
				continue
			}
			res, err := m.Release(ctx, LeaseRequest{Tenant: r.tenant, Plan: plans[r.tenant], Lease: r.id, Cost: NoCost})
			if err != nil || !res.Held {
				t.Fatalf("release %d: %+v %v", r.id, res, err)
			}
			due[r.tenant] = now
			for _, w := range res.Wakes {
				due[w] = now
			}
		}
		busy = left
		for range 4 { // a tenant woken by another's ask asks at once
			for _, tenant := range []string{"h1", "h3"} {
				if !due[tenant].After(now) {
					ask(tenant)
				}
			}
		}
		if len(busy) < 8 {
			idle++
		}
	}
	if ratio := float64(got["h3"]) / float64(got["h1"]); ratio < 2.7 || ratio > 3.3 {
		t.Errorf("granted %v: ratio %.2f, want 3 (±10%%)", got, ratio)
	}
	if idle > 0 {
		t.Errorf("a slot was idle in %d of 20,000 ms while both tenants had jobs", idle)
	}
}

// TestPoolManyTenantsByShares drives a pool of 16 slots as the admitter does (see
// TestPoolSharesWithWakes) with 100 tenants of shares 1, 2 and 4, each with a backlog, asking
// for their next 10 jobs when woken or when their wait is over; jobs take 20 ms. The slots are
// never idle, and after the first second each tenant's grants over its share are equal (Jain's
// index ≥ 0.99). Before reservations counted every waiter's jobs ahead (and ties by name), the
// pool stalled after its first 16 grants: the 65th waiter on was refused for the waiters it did
// not look at.
func TestPoolManyTenantsByShares(t *testing.T) {
	c := newClock()
	start := c.Now()
	m := NewMemory(Options{}, c.Now)
	pool, _ := NewPool(Pool{Name: "w", Concurrency: 16, Lease: 30 * time.Second})
	plans := map[string]*Plan{}
	next := map[string]int64{}
	due := map[string]time.Time{}
	var names []string
	for i := range 100 {
		n := fmt.Sprintf("t%03d", i)
		p := mustPlan(t, n, lim("own", 1_000_000, time.Microsecond))
		p.Pool, p.Share = pool, []int64{1, 2, 4}[i%3]
		plans[n], next[n], due[n] = p, int64(i+1)*1_000_000, c.Now()
		names = append(names, n)
	}
	type running struct {
		tenant string
		id     int64
		end    time.Time
	}
	var busy []running
	got, late := map[string]int{}, map[string]int{}
	ctx := context.Background()
	ask := func(tenant string) {
		jobs := make([]Job, 10)
		for i := range jobs {
			jobs[i] = Job{ID: next[tenant] + int64(i), Weight: 1}
		}
		r, err := m.Admit(ctx, Batch{Tenant: tenant, Plan: plans[tenant], Owner: 1, Jobs: jobs})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, o := range r.Outcomes {
			if o.Admitted() {
				n++
			}
		}
		for i := range n {
			busy = append(busy, running{tenant, next[tenant] + int64(i), c.Now().Add(20 * time.Millisecond)})
		}
		next[tenant] += int64(n)
		got[tenant] += n
		if c.Now().After(start.Add(time.Second)) {
			late[tenant] += n
		}
		due[tenant] = c.Now().Add(r.Wait)
		for _, w := range r.Wakes {
			due[w] = c.Now()
		}
	}
	idle := 0
	for ms := range 5000 {
		c.Advance(time.Millisecond)
		now := c.Now()
		left := busy[:0]
		for _, r := range busy {
			if r.end.After(now) {
				left = append(left, r)
				continue
			}
			res, err := m.Release(ctx, LeaseRequest{Tenant: r.tenant, Plan: plans[r.tenant], Lease: r.id, Cost: NoCost})
			if err != nil || !res.Held {
				t.Fatalf("release %d: %+v %v", r.id, res, err)
			}
			due[r.tenant] = now
			for _, w := range res.Wakes {
				due[w] = now
			}
		}
		busy = left
		for range 4 {
			for _, tenant := range names {
				if !due[tenant].After(now) {
					ask(tenant)
				}
			}
		}
		if len(busy) < 16 {
			idle++
			if idle < 5 {
				t.Errorf("idle at %d ms: %d busy", ms, len(busy))
			}
		}
	}
	var sum, squares float64
	for _, n := range names {
		x := float64(late[n]) / float64(plans[n].Share)
		sum, squares = sum+x, squares+x*x
	}
	if jain := sum * sum / (float64(len(names)) * squares); jain < 0.99 {
		t.Errorf("Jain's index of grants/share %.4f, want ≥ 0.99 (t000 %d, t001 %d, t002 %d)", jain, late["t000"], late["t001"], late["t002"])
	}
}
