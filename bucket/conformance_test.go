package bucket

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestConformance runs the limiter's contract against every backend.
func TestConformance(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			for _, tc := range conformanceCases {
				t.Run(tc.name, func(t *testing.T) {
					c := newClock()
					l := b.make(t, c, tc.opts)
					tc.run(t, &harness{t: t, l: l, c: c, tenant: uniqueTenant(tc.name)})
				})
			}
		})
	}
}

type harness struct {
	t      *testing.T
	l      limiter
	c      *clock
	tenant string
}

// decide asks for a decision and fails the test on error.
func (h *harness) decide(p *Plan, w int64, id string) Result {
	h.t.Helper()
	r, err := h.l.Decide(context.Background(), Request{Tenant: h.tenant, Plan: p, Weight: w, JobID: id})
	if err != nil {
		h.t.Fatalf("decide(w=%d, id=%q): %v", w, id, err)
	}
	return r
}

// expect checks a decision's outcome, wait and remaining tokens.
func (h *harness) expect(p *Plan, w int64, id string, o Outcome, wait time.Duration, remaining int64) Result {
	h.t.Helper()
	r := h.decide(p, w, id)
	if r.Outcome != o || r.Wait != wait || r.Remaining != remaining || r.Allowed != o.Allowed() {
		h.t.Fatalf("decide(w=%d, id=%q) at +%v = %+v, want outcome %v wait %v remaining %d",
			w, id, h.c.Now().Sub(newClock().Now()), r, o, wait, remaining)
	}
	return r
}

// tokens returns every limit's whole tokens now.
func (h *harness) tokens(p *Plan) []int64 {
	h.t.Helper()
	s, err := h.l.Inspect(context.Background(), h.tenant, p)
	if err != nil {
		h.t.Fatal(err)
	}
	out := make([]int64, len(s.Limits))
	for i, l := range s.Limits {
		out[i] = l.Tokens
	}
	return out
}

func (h *harness) expectTokens(p *Plan, want ...int64) {
	h.t.Helper()
	if got := h.tokens(p); fmt.Sprint(got) != fmt.Sprint(want) {
		h.t.Fatalf("tokens = %v, want %v", got, want)
	}
}

// expectReservations checks the outstanding booked slots and the latest one, as an offset from
// the clock's start.
func (h *harness) expectReservations(p *Plan, n int, latest time.Duration) {
	h.t.Helper()
	s, err := h.l.Inspect(context.Background(), h.tenant, p)
	if err != nil {
		h.t.Fatal(err)
	}
	var got time.Duration
	if !s.LatestSlot.IsZero() {
		got = s.LatestSlot.Sub(newClock().Now())
	}
	if s.Reservations != n || got != latest {
		h.t.Fatalf("reservations = %d, latest slot +%v; want %d, +%v", s.Reservations, got, n, latest)
	}
}

const ms = time.Millisecond

var conformanceCases = []struct {
	name string
	opts Options
	run  func(t *testing.T, h *harness)
}{
	{"burst then refill", Options{}, func(t *testing.T, h *harness) {
		p := mustPlan(t, "free", lim("", 5, 500*ms)) // 5 burst, 2/s
		for i := int64(4); i >= 0; i-- {
			h.expect(p, 1, "", Admitted, 0, i)
		}
		r := h.expect(p, 1, "", Throttled, 500*ms, 0)
		if r.Limit != "0" || r.LimitIndex != 0 {
			t.Fatalf("binding limit = %q/%d, want unnamed index 0", r.Limit, r.LimitIndex)
		}
		h.c.Advance(499 * ms)
		h.expect(p, 1, "", Throttled, 1*ms, 0)
		h.c.Advance(1 * ms)
		h.expect(p, 1, "", Admitted, 0, 0)
		h.c.Advance(2 * time.Second)
		h.expectTokens(p, 4)
		h.c.Advance(time.Hour)
		h.expectTokens(p, 5) // never more than the capacity
	}},
	{"weights", Options{}, func(t *testing.T, h *harness) {
		p := mustPlan(t, "w", lim("", 10, time.Second))
		h.expect(p, 4, "", Admitted, 0, 6)
		h.expect(p, 4, "", Admitted, 0, 2)
		h.expect(p, 4, "", Throttled, 2*time.Second, 2)
		h.expect(p, 2, "", Admitted, 0, 0)
		h.c.Advance(3 * time.Second)
		h.expect(p, 3, "", Admitted, 0, 0)
	}},
	{"chained limits take all or nothing", Options{}, func(t *testing.T, h *harness) {
		p := mustPlan(t, "gold", lim("burst", 3, 100*ms), lim("daily", 10, time.Hour))
		h.expect(p, 3, "", Admitted, 0, 0)
		h.expectTokens(p, 0, 7)
		r := h.expect(p, 2, "", Throttled, 200*ms, 0)
		if r.Limit != "burst" || r.LimitIndex != 0 {
			t.Fatalf("binding limit = %q/%d, want burst/0", r.Limit, r.LimitIndex)
		}
		h.expectTokens(p, 0, 7) // the denied job took nothing from daily
		h.c.Advance(300 * ms)
		h.expect(p, 3, "", Admitted, 0, 0)
		h.expectTokens(p, 0, 4)
		h.c.Advance(time.Second)
		h.expect(p, 3, "", Admitted, 0, 0)
		h.c.Advance(time.Second)
		r = h.expect(p, 2, "", Throttled, time.Minute, 1) // daily needs an hour: capped at the horizon
		if r.Limit != "daily" || r.LimitIndex != 1 {
			t.Fatalf("binding limit = %q/%d, want daily/1", r.Limit, r.LimitIndex)
		}
		h.expectTokens(p, 3, 1)
	}},
	{"reservations are ordered and spaced at the rate", Options{}, func(t *testing.T, h *harness) {
		p := mustPlan(t, "p", lim("", 2, 100*ms)) // 10/s
		h.expect(p, 1, "a", Admitted, 0, 1)
		h.expect(p, 1, "b", Admitted, 0, 0)
		for i := 1; i <= 5; i++ {
			h.expect(p, 1, fmt.Sprintf("j%d", i), Delayed, time.Duration(i)*100*ms, 0)
		}
		h.expectTokens(p, -5)
		h.expectReservations(p, 5, 500*ms)
		// j1 comes back at its slot: admitted, not charged again.
		h.c.Advance(100 * ms)
		h.expect(p, 1, "j1", AdmittedAtSlot, 0, 0)
		h.expectTokens(p, -4)
		h.expectReservations(p, 4, 500*ms)
		// j3 comes back early: its slot stands.
		h.expect(p, 1, "j3", Early, 200*ms, 0)
		// a newcomer queues behind everything already booked.
		h.expect(p, 1, "j6", Delayed, 500*ms, 0)
		// late but within the grace: still free.
		h.c.Advance(time.Second)
		for i := 2; i <= 6; i++ {
			h.expect(p, 1, fmt.Sprintf("j%d", i), AdmittedAtSlot, 0, 2)
		}
		h.expectReservations(p, 0, 0)
		h.expect(p, 1, "j7", Admitted, 0, 1)
	}},
	{"weighted reservations", Options{}, func(t *testing.T, h *harness) {
		p := mustPlan(t, "p", lim("", 4, 250*ms)) // 4/s
		h.expect(p, 4, "a", Admitted, 0, 0)
		h.expect(p, 2, "b", Delayed, 500*ms, 0)
		h.expect(p, 1, "c", Delayed, 750*ms, 0)
		h.expect(p, 4, "d", Delayed, 1750*ms, 0)
	}},
	{"horizon", Options{Horizon: time.Second}, func(t *testing.T, h *harness) {
		p := mustPlan(t, "p", lim("", 1, time.Second))
		h.expect(p, 1, "a", Admitted, 0, 0)
		h.expect(p, 1, "b", Delayed, time.Second, 0) // exactly at the horizon: booked
		h.expect(p, 1, "c", Throttled, time.Second, 0)
		h.expect(p, 1, "d", Throttled, time.Second, 0)
		h.expectTokens(p, -1) // c and d booked nothing
		h.c.Advance(time.Second)
		h.expect(p, 1, "b", AdmittedAtSlot, 0, 0)
		h.expect(p, 1, "c", Delayed, time.Second, 0)
	}},
	{"a repeated id after admission is not charged again", Options{MarkerTTL: 10 * time.Second}, func(t *testing.T, h *harness) {
		p := mustPlan(t, "p", lim("", 3, time.Second))
		h.expect(p, 2, "job-1", Admitted, 0, 1)
		h.expect(p, 2, "job-1", Duplicate, 0, 1)
		h.c.Advance(5 * time.Second)
		h.expect(p, 2, "job-1", Duplicate, 0, 3)
		h.c.Advance(5 * time.Second) // the marker has expired: a new job
		h.expect(p, 2, "job-1", Admitted, 0, 1)
		// a slot-admitted job is remembered too
		h.expect(p, 2, "job-2", Delayed, time.Second, 0)
		h.c.Advance(time.Second)
		h.expect(p, 2, "job-2", AdmittedAtSlot, 0, 0)
		h.expect(p, 2, "job-2", Duplicate, 0, 0)
	}},
	{"a slot past its grace is forgotten", Options{SlotGrace: time.Second}, func(t *testing.T, h *harness) {
		p := mustPlan(t, "p", lim("", 1, time.Second))
		h.expect(p, 1, "a", Admitted, 0, 0)
		h.expect(p, 1, "b", Delayed, time.Second, 0)
		h.c.Advance(2 * time.Second)
		h.expect(p, 1, "b", Admitted, 0, 0) // charged anew
	}},
	{"idle tenants expire", Options{MarkerTTL: time.Second, SlotGrace: time.Second}, func(t *testing.T, h *harness) {
		p := mustPlan(t, "p", lim("a", 2, 100*ms), lim("b", 10, time.Second))
		h.expect(p, 2, "x", Admitted, 0, 0)
		h.expect(p, 1, "y", Delayed, 100*ms, 0)
		h.c.Advance(11 * time.Second)
		h.expectTokens(p, 2, 10)
		if m, ok := h.l.(*Memory); ok {
			if tenants, jobs := m.Len(); tenants != 0 || jobs != 0 {
				t.Fatalf("after idling: %d tenants and %d jobs left, want none", tenants, jobs)
			}
		}
	}},
	{"invalid requests", Options{}, func(t *testing.T, h *harness) {
		p := mustPlan(t, "p", lim("big", 10, time.Second), lim("small", 3, time.Second))
		for _, tc := range []struct {
			tenant string
			w      int64
			want   error
		}{
			{h.tenant, 4, ErrWeightOverCapacity},
			{h.tenant, 0, ErrInvalidWeight},
			{h.tenant, -1, ErrInvalidWeight},
			{"", 1, ErrInvalidTenant},
			{"a{b", 1, ErrInvalidTenant},
			{"a}b", 1, ErrInvalidTenant},
		} {
			_, err := h.l.Decide(context.Background(), Request{Tenant: tc.tenant, Plan: p, Weight: tc.w})
			if !errors.Is(err, tc.want) {
				t.Errorf("tenant %q weight %d: err = %v, want %v", tc.tenant, tc.w, err, tc.want)
			}
		}
		h.expect(p, 3, "", Admitted, 0, 0)
	}},
}

// TestConcurrentNeverOverAdmits hammers one tenant from many goroutines on the real clock and
// checks the admitted weight never exceeds capacity + rate × elapsed.
func TestConcurrentNeverOverAdmits(t *testing.T) {
	for _, b := range []struct {
		name string
		l    limiter
	}{
		{"memory", NewMemory(Options{}, nil)},
		{"redis", NewRedis(redisClient(t), "", Options{})},
	} {
		t.Run(b.name, func(t *testing.T) {
			const capacity, every = 20, 5 * ms // 200/s
			p := mustPlan(t, "p", lim("", capacity, every))
			tenant := uniqueTenant("hammer")
			var admitted, calls atomic.Int64
			start := time.Now()
			var wg sync.WaitGroup
			for g := 0; g < 64; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					// bounded by time, not by a count: the bound below holds however long it runs.
					for i := 0; time.Since(start) < 300*ms; i++ {
						r, err := b.l.Decide(context.Background(), Request{Tenant: tenant, Plan: p, Weight: 1 + int64(i%2)})
						if err != nil {
							t.Error(err)
							return
						}
						calls.Add(1)
						if r.Allowed {
							admitted.Add(1 + int64(i%2))
						}
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			bound := capacity + int64(elapsed/every) + 1
			if admitted.Load() > bound {
				t.Fatalf("admitted %d tokens in %v, bound is %d", admitted.Load(), elapsed, bound)
			}
			if admitted.Load() < capacity {
				t.Fatalf("admitted only %d tokens: the burst alone allows %d", admitted.Load(), capacity)
			}
			t.Logf("%d calls, admitted %d tokens in %v (bound %d)", calls.Load(), admitted.Load(), elapsed, bound)
		})
	}
}
