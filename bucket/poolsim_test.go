package bucket

import (
	"context"
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
		if r.Wake != "" {
			due[r.Wake] = c.Now()
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
			if res.Wake != "" {
				due[res.Wake] = now
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
