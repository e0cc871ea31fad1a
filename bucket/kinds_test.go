package bucket

import (
	"context"
	"errors"
	"testing"
	"time"
)

// expectLimit checks one limit's state as Inspect reports it.
func (h *harness) expectLimit(p *Plan, i int, tokens, used int64, next time.Duration) {
	h.t.Helper()
	s, err := h.l.Inspect(t0ctx, h.tenant, p)
	if err != nil {
		h.t.Fatal(err)
	}
	l := s.Limits[i]
	if l.Tokens != tokens || l.Used != used || l.NextIn != next {
		h.t.Fatalf("limit %s at +%v: tokens %d used %d next in %v, want %d, %d, %v (%+v)",
			l.Limit, h.c.Now().Sub(newClock().Now()), l.Tokens, l.Used, l.NextIn, tokens, used, next, l)
	}
}

func init() {
	type tc = struct {
		name string
		opts Options
		run  func(t *testing.T, h *harness)
	}
	conformanceCases = append(conformanceCases,
		tc{"window: at most the limit in any interval of its length", Options{}, func(t *testing.T, h *harness) {
			p := mustPlan(t, "w", win("w", 3, time.Second))
			h.expect(p, 1, "", Admitted, 0, 2)
			h.c.Advance(400 * ms)
			h.expect(p, 1, "", Admitted, 0, 1)
			h.c.Advance(300 * ms)
			h.expect(p, 1, "", Admitted, 0, 0)
			h.c.Advance(100 * ms) // +0.8s: the first take leaves at +1s
			h.expect(p, 1, "", Throttled, 200*ms, 0)
			h.expectLimit(p, 0, 0, 3, 200*ms)
			h.c.Advance(200 * ms)
			h.expect(p, 1, "", Admitted, 0, 0)
			h.expect(p, 1, "", Throttled, 400*ms, 0) // the second leaves at +1.4s
			r := h.expect(p, 2, "", Throttled, 700*ms, 0)
			if r.Limit != "w" {
				t.Fatalf("binding limit %q, want w", r.Limit)
			}
			h.c.Advance(time.Hour)
			h.expectLimit(p, 0, 3, 0, 0)
		}},
		tc{"window: a booked slot counts in every interval it falls in", Options{}, func(t *testing.T, h *harness) {
			p := mustPlan(t, "w", win("", 2, time.Second))
			h.expect(p, 1, "a", Admitted, 0, 1)
			h.expect(p, 1, "b", Admitted, 0, 0)
			h.expect(p, 1, "c", Delayed, time.Second, 0)
			h.expect(p, 1, "d", Delayed, time.Second, 0)
			h.expect(p, 1, "e", Delayed, 2*time.Second, 0)
			h.expectTokens(p, -3)
			h.expectReservations(p, 3, 2*time.Second)
			h.c.Advance(time.Second)
			h.expect(p, 1, "c", AdmittedAtSlot, 0, 0)
			h.expect(p, 1, "f", Delayed, time.Second, 0) // beside e: they fit one interval
		}},
		tc{"window: weights and the weight over its limit", Options{}, func(t *testing.T, h *harness) {
			p := mustPlan(t, "w", lim("burst", 100, ms), win("hourly", 10, time.Hour))
			if p.MaxWeight() != 10 {
				t.Fatalf("MaxWeight %d, want the window's limit 10", p.MaxWeight())
			}
			h.expect(p, 6, "", Admitted, 0, 4)
			h.c.Advance(10 * time.Minute)
			h.expect(p, 4, "", Admitted, 0, 0)
			h.c.Advance(10 * time.Minute)
			h.expect(p, 5, "", Throttled, time.Minute, 0) // 40 minutes: capped at the horizon
			h.c.Advance(40 * time.Minute)
			h.expect(p, 5, "", Admitted, 0, 1)
			if _, err := h.l.Decide(t0ctx, Request{Tenant: h.tenant, Plan: p, Weight: 11}); !isOverCapacity(err) {
				t.Fatalf("weight 11 on a window of 10: %v, want weight-over-capacity", err)
			}
		}},
		tc{"quota: resets at the start of each calendar period", Options{}, func(t *testing.T, h *harness) {
			p := mustPlan(t, "q", quota("minutely", 5, Minute, nil))
			h.c.Advance(30 * time.Second) // 12:00:30
			for i := int64(4); i >= 0; i-- {
				h.expect(p, 1, "", Admitted, 0, i)
			}
			h.expect(p, 1, "", Throttled, 30*time.Second, 0)
			h.expectLimit(p, 0, 0, 5, 30*time.Second)
			h.c.Advance(29 * time.Second)
			h.expect(p, 1, "", Throttled, time.Second, 0)
			h.c.Advance(time.Second) // 12:01:00: a new period
			h.expectLimit(p, 0, 5, 0, time.Minute)
			h.expect(p, 5, "", Admitted, 0, 0)
		}},
		tc{"quota: a booked slot lands in the next period", Options{Horizon: 5 * time.Minute}, func(t *testing.T, h *harness) {
			p := mustPlan(t, "q", quota("", 2, Minute, nil))
			h.c.Advance(30 * time.Second)
			h.expect(p, 1, "a", Admitted, 0, 1)
			h.expect(p, 1, "b", Admitted, 0, 0)
			h.expect(p, 1, "c", Delayed, 30*time.Second, 0)
			h.expect(p, 2, "d", Delayed, 90*time.Second, 0)  // the next minute holds c: d needs the one after
			h.expect(p, 1, "e", Delayed, 150*time.Second, 0) // behind d, whose minute is full
			h.expectLimit(p, 0, -4, 2, 30*time.Second)
			h.c.Advance(30 * time.Second)
			h.expectLimit(p, 0, -2, 1, time.Minute) // this minute: c; booked ahead: d and e
			h.expect(p, 1, "c", AdmittedAtSlot, 0, 0)
		}},
		tc{"quota: calendars of every period and time zone", Options{}, func(t *testing.T, h *harness) {
			ny, err := time.LoadLocation("America/New_York")
			if err != nil {
				t.Fatal(err)
			}
			// 2026-11-21 12:00 UTC is a Saturday, 07:00 in New York (EST, UTC-5).
			next := int64(1)
			for _, c := range []struct {
				l    Limit
				wait time.Duration
			}{
				{quota("m", 1, Minute, nil), time.Minute},
				{quota("h", 1, Hour, nil), time.Hour},
				{quota("d", 1, Day, nil), 12 * time.Hour},
				{quota("d-ny", 1, Day, ny), 17 * time.Hour},
				{quota("w", 1, Week, nil), 36 * time.Hour}, // to Monday 00:00
				{quota("w-ny", 1, Week, ny), 41 * time.Hour},
				{quota("mo", 1, Month, nil), (9*24 + 12) * time.Hour}, // to December 1st
				{quota("mo-ny", 1, Month, ny), (9*24 + 17) * time.Hour},
			} {
				p := mustPlan(t, c.l.Name, c.l)
				h.admit(p, Lane, []Job{{ID: next, Weight: 1}, {ID: next + 1, Weight: 1}}, "AN", c.wait, false)
				next += 2
				h.expectLimit(p, 0, 0, 1, c.wait)
			}
		}},
		tc{"chained kinds take all or nothing", Options{}, func(t *testing.T, h *harness) {
			// Each kind refuses in turn; the other two are charged nothing for the refused job.
			next := int64(1)
			for _, c := range []struct {
				b, w, q int64 // capacities; the one of 1 refuses the second job
				wait    time.Duration
				binding string
			}{
				{1, 10, 10, time.Minute, "b"},
				{10, 1, 10, time.Hour, "w"},
				{10, 10, 1, 12 * time.Hour, "q"},
			} {
				n := c.binding + "-"
				p := mustPlan(t, "chain-"+c.binding, lim(n+"b", c.b, time.Minute), win(n+"w", c.w, time.Hour), quota(n+"q", c.q, Day, nil))
				r := h.admit(p, Lane, []Job{{ID: next, Weight: 1}, {ID: next + 1, Weight: 1}}, "AN", c.wait, false)
				next += 2
				if r.Limit != n+c.binding {
					t.Fatalf("binding limit %q, want %s", r.Limit, n+c.binding)
				}
				h.expectTokens(p, c.b-1, c.w-1, c.q-1)
				h.expect(p, 1, "", Throttled, min(c.wait, time.Minute), 0)
				h.expectTokens(p, c.b-1, c.w-1, c.q-1)
			}
			p := mustPlan(t, "all", lim("all-b", 5, time.Minute), win("all-w", 5, time.Hour), quota("all-q", 5, Day, nil))
			h.admit(p, Lane, []Job{{ID: next, Weight: 3}}, "A", 0, false)
			h.expectTokens(p, 2, 2, 2)
		}},
		tc{"a limit's state follows its name and kind", Options{}, func(t *testing.T, h *harness) {
			a := mustPlan(t, "a", win("x", 2, time.Hour), quota("y", 5, Day, nil))
			h.expect(a, 2, "", Admitted, 0, 0)
			h.expectTokens(a, 0, 3)
			// x becomes a bucket (afresh), y is kept, z is new.
			b := mustPlan(t, "b", quota("y", 5, Day, nil), lim("x", 2, time.Second), win("z", 1, time.Second))
			h.expectTokens(b, 3, 2, 1)
		}},
		tc{"a limiter that forgot takes windows and quotas for used up", Options{}, func(t *testing.T, h *harness) {
			p := mustPlan(t, "p", win("w", 10, time.Hour), quota("q", 10, Day, nil), lim("b", 10, time.Minute))
			forget(h.l, h.c.Now().Add(-10*time.Minute))
			h.expectLimit(p, 0, -0, 10, 50*time.Minute)
			h.expectLimit(p, 1, 0, 10, 12*time.Hour)
			h.expectTokens(p, 0, 0, 10)
			h.admit(p, Lane, jobs("1"), "N", 12*time.Hour, false)
			h.c.Advance(12 * time.Hour)
			h.admit(p, Lane, jobs("1"), "A", 0, false)
		}},
	)
	admitCases = append(admitCases,
		tc{"window: a large limit is counted in sub-windows, never early", Options{}, func(t *testing.T, h *harness) {
			p := mustPlan(t, "big", win("", 1000, 64*time.Second)) // sub-windows of 1s
			if g := p.Limits[0].Grain(); g != time.Second {
				t.Fatalf("grain %v, want 1s", g)
			}
			h.c.Advance(500 * ms)
			h.admit(p, Lane, jobs("1:1000"), "A", 0, false)
			// Exact, the take would leave at +64.5s; counted at the end of its second, at +65s.
			h.admit(p, Lane, jobs("2"), "N", 64500*ms, false)
			h.c.Advance(64 * time.Second)
			h.admit(p, Lane, jobs("2"), "N", 500*ms, false)
			h.c.Advance(500 * ms)
			h.admit(p, Lane, jobs("2:1000"), "A", 0, false)
		}},
		tc{"window: 25 jobs on 10 per 3s come out as 10, 10, 5", Options{}, func(t *testing.T, h *harness) {
			p := mustPlan(t, "w", win("", 10, 3*time.Second))
			var js []Job
			for i := 1; i <= 25; i++ {
				js = append(js, Job{ID: int64(i), Weight: 1})
			}
			want := func(a int) string {
				s := ""
				for i := 0; i < len(js); i++ {
					if i < a {
						s += "A"
					} else {
						s += "N"
					}
				}
				return s
			}
			h.admit(p, Lane, js, want(10), 3*time.Second, false)
			js = js[10:]
			h.c.Advance(3 * time.Second)
			h.admit(p, Lane, js, want(10), 3*time.Second, false)
			js = js[10:]
			h.c.Advance(3 * time.Second)
			h.admit(p, Lane, js, want(5), 0, false)
		}},
	)
}

func isOverCapacity(err error) bool { return errors.Is(err, ErrWeightOverCapacity) }

var t0ctx = context.Background()
