package bucket

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"
)

// TestWindowErrorBound holds an approximate window (a limit above ExactWindowMax, counted in
// sub-windows of Grain) to its documented bound, on random traffic: it never admits more than its
// limit in any interval of its length, and every wait it gives is at least the wait an exact
// window would give over the same admitted history, and less than one Grain longer. It also
// holds the window's stored entries to WindowSlices + 1.
func TestWindowErrorBound(t *testing.T) {
	const limit, window = 500, 10 * time.Second
	p := mustPlan(t, "wide", win("w", limit, window))
	grain := p.Limits[0].Grain().Microseconds()
	if grain != 156250 {
		t.Fatalf("grain %dµs, want 156250µs", grain)
	}
	W := window.Microseconds()
	for _, b := range backends()[:2] {
		t.Run(b.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, 4))
			c := newClock()
			l := b.make(t, c, Options{})
			tenant := uniqueTenant("bound")
			type take struct{ at, w int64 }
			var taken []take
			// exactFit is the earliest time ≥ s at which w fits an exact window over taken.
			exactFit := func(s, w int64) int64 {
				for {
					u, first := int64(0), int64(-1)
					for _, k := range taken {
						if k.at+W > s {
							u += k.w
							if first < 0 {
								first = k.at + W
							}
						}
					}
					if u+w <= limit {
						return s
					}
					s = first
				}
			}
			waits, longer := 0, int64(0)
			for id := int64(1); id <= 3000; id++ {
				if rng.IntN(5) == 0 {
					c.Advance(time.Duration(rng.Int64N(int64(400 * ms))))
				}
				now := c.Now().UnixMicro()
				w := 1 + rng.Int64N(5)
				r, err := l.Admit(context.Background(), Batch{Tenant: tenant, Plan: p, Owner: 1, Jobs: []Job{{ID: id, Weight: w}}})
				if err != nil {
					t.Fatal(err)
				}
				if r.Outcomes[0] == JobAdmitted {
					taken = append(taken, take{now, w})
					sum := int64(0)
					for _, k := range taken {
						if k.at > now-W {
							sum += k.w
						}
					}
					if sum > limit {
						t.Fatalf("at +%v: %d admitted in the last %v, limit %d", c.Now().Sub(newClock().Now()), sum, window, limit)
					}
					continue
				}
				got := now + r.Wait.Microseconds()
				exact := exactFit(now, w)
				if got < exact || got >= exact+grain {
					t.Fatalf("at +%v weight %d: wait %v, exact %v: want [exact, exact+%dµs)", c.Now().Sub(newClock().Now()), w, r.Wait, time.Duration(exact-now)*time.Microsecond, grain)
				}
				waits++
				longer = max(longer, got-exact)
				if rng.IntN(2) == 0 {
					c.Advance(r.Wait) // come back when told: admitted then
				}
			}
			if m, ok := l.(*Memory); ok {
				sh, st, _ := m.lock(tenant)
				n := len(st.limits[0].log)
				sh.mu.Unlock()
				if n > WindowSlices+1 {
					t.Fatalf("%d entries stored, want at most %d", n, WindowSlices+1)
				}
			}
			if waits < 100 || len(taken) < 1000 {
				t.Fatalf("%d waits and %d takes: the traffic did not test the bound", waits, len(taken))
			}
			t.Logf("%d takes, %d waits, longest excess over exact %v (bound %v)", len(taken), waits, time.Duration(longer)*time.Microsecond, p.Limits[0].Grain())
		})
	}
}
