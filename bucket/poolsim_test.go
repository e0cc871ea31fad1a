package bucket

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// poolSim drives a pool as the admitter does, on a settable clock, one millisecond a step: each
// tenant has a backlog and asks for its next batch jobs when woken (a release or another's ask
// names it, or its own job ended) or when its wait is over; a job runs for took, then its lease
// is released. It counts each tenant's grants from after (got), and the steps in which a slot
// was idle.
type poolSim struct {
	t       *testing.T
	c       *clock
	m       *Memory
	names   []string
	plans   map[string]*Plan
	batch   int
	took    time.Duration
	after   time.Time
	next    map[string]int64
	due     map[string]time.Time
	busy    []simJob
	got     map[string]int
	idle    int
	slots   int
	stepped int
}

type simJob struct {
	tenant string
	id     int64
	end    time.Time
}

// newPoolSim makes a simulation of a pool of slots and tenants with the shares given, counting
// grants after the first countAfter.
func newPoolSim(t *testing.T, slots int64, shares map[string]int64, batch int, took, countAfter time.Duration) *poolSim {
	c := newClock()
	s := &poolSim{t: t, c: c, m: NewMemory(Options{}, c.Now), plans: map[string]*Plan{}, batch: batch, took: took,
		after: c.Now().Add(countAfter), next: map[string]int64{}, due: map[string]time.Time{}, got: map[string]int{}, slots: int(slots)}
	pool, err := NewPool(Pool{Name: "w", Concurrency: slots, Lease: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	i := int64(0)
	for name, share := range shares {
		p := mustPlan(t, name, lim("own", 1_000_000, time.Microsecond))
		p.Pool, p.Share = pool, share
		i++
		s.plans[name], s.next[name], s.due[name] = p, i*1_000_000_000, c.Now()
		s.names = append(s.names, name)
	}
	return s
}

func (s *poolSim) ask(ctx context.Context, tenant string) {
	now := s.c.Now()
	jobs := make([]Job, s.batch)
	for i := range jobs {
		jobs[i] = Job{ID: s.next[tenant] + int64(i), Weight: 1}
	}
	r, err := s.m.Admit(ctx, Batch{Tenant: tenant, Plan: s.plans[tenant], Owner: 1, Jobs: jobs})
	if err != nil {
		s.t.Fatal(err)
	}
	n := 0
	for _, o := range r.Outcomes {
		if o.Admitted() {
			s.busy = append(s.busy, simJob{tenant, s.next[tenant] + int64(n), now.Add(s.took)})
			n++
		}
	}
	s.next[tenant] += int64(n)
	if now.After(s.after) {
		s.got[tenant] += n
	}
	s.due[tenant] = now.Add(r.Wait)
	for _, w := range r.Wakes {
		s.due[w] = now
	}
}

// run steps the simulation for d.
func (s *poolSim) run(d time.Duration) {
	ctx := context.Background()
	for range int(d / time.Millisecond) {
		s.c.Advance(time.Millisecond)
		now := s.c.Now()
		left := s.busy[:0]
		for _, j := range s.busy {
			if j.end.After(now) {
				left = append(left, j)
				continue
			}
			res, err := s.m.Release(ctx, LeaseRequest{Tenant: j.tenant, Plan: s.plans[j.tenant], Lease: j.id, Cost: NoCost})
			if err != nil || !res.Held {
				s.t.Fatalf("release %d: %+v %v", j.id, res, err)
			}
			s.due[j.tenant] = now
			for _, w := range res.Wakes {
				s.due[w] = now
			}
		}
		s.busy = left
		for range 4 { // a tenant woken by another's ask asks at once
			for _, tenant := range s.names {
				if !s.due[tenant].After(now) {
					s.ask(ctx, tenant)
				}
			}
		}
		s.stepped++
		if len(s.busy) < s.slots {
			s.idle++
		}
	}
}

// TestPoolSharesWithWakes: 8 slots, jobs of 100 ms, two tenants with a backlog (shares 3 and 1)
// asking for their next 100 jobs. Over 20 s they get the slots 3:1 (±10 %), and the slots are
// never idle while a tenant has jobs.
func TestPoolSharesWithWakes(t *testing.T) {
	s := newPoolSim(t, 8, map[string]int64{"h3": 3, "h1": 1}, 100, 100*time.Millisecond, 0)
	s.run(20 * time.Second)
	if ratio := float64(s.got["h3"]) / float64(s.got["h1"]); ratio < 2.7 || ratio > 3.3 {
		t.Errorf("granted %v: ratio %.2f, want 3 (±10%%)", s.got, ratio)
	}
	if s.idle > 0 {
		t.Errorf("a slot was idle in %d of %d ms while both tenants had jobs", s.idle, s.stepped)
	}
}

// TestPoolManyTenantsByShares: 16 slots, jobs of 20 ms, 100 tenants of shares 1, 2 and 4 asking
// for their next 10 jobs. The slots are never idle, and after the first second each tenant's
// grants over its share are equal (Jain's index ≥ 0.99). Before reservations counted every
// waiter's jobs ahead (and ties by name), the pool stalled after its first 16 grants: the 65th
// waiter on was refused for the waiters it did not look at.
func TestPoolManyTenantsByShares(t *testing.T) {
	shares := map[string]int64{}
	for i := range 100 {
		shares[fmt.Sprintf("t%03d", i)] = []int64{1, 2, 4}[i%3]
	}
	s := newPoolSim(t, 16, shares, 10, 20*time.Millisecond, time.Second)
	s.run(5 * time.Second)
	if s.idle > 0 {
		t.Errorf("a slot was idle in %d of %d ms while every tenant had jobs", s.idle, s.stepped)
	}
	var sum, squares float64
	for name, share := range shares {
		x := float64(s.got[name]) / float64(share)
		sum, squares = sum+x, squares+x*x
	}
	if jain := sum * sum / (float64(len(shares)) * squares); jain < 0.99 {
		t.Errorf("Jain's index of grants/share %.4f, want ≥ 0.99 (t000 %d, t001 %d, t002 %d)", jain, s.got["t000"], s.got["t001"], s.got["t002"])
	}
}
