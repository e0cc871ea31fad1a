package bucket

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/admitter/admitter/internal/testenv"
)

// TestAdmitConformance runs Admit's contract against every backend.
func TestAdmitConformance(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			for _, tc := range admitCases {
				t.Run(tc.name, func(t *testing.T) {
					c := newClock()
					l := b.make(t, c, tc.opts)
					tc.run(t, &harness{t: t, l: l, c: c, tenant: uniqueTenant(tc.name)})
				})
			}
		})
	}
}

// jobs builds a batch's jobs from ids, each of weight 1 unless given as id:weight.
func jobs(spec ...string) []Job {
	var out []Job
	for _, s := range spec {
		var j Job
		if _, err := fmt.Sscanf(s, "%d:%d", &j.ID, &j.Weight); err != nil {
			fmt.Sscanf(s, "%d", &j.ID)
			j.Weight = 1
		}
		out = append(out, j)
	}
	return out
}

// admit asks Admit and checks the outcomes (by their letters: A admitted, R redeemed, L to the
// lane, B to the lane before, N not yet), the wait and whether the lane is open.
func (h *harness) admit(p *Plan, mode Mode, js []Job, want string, wait time.Duration, open bool) BatchResult {
	h.t.Helper()
	r, err := h.l.Admit(context.Background(), Batch{Tenant: h.tenant, Plan: p, Mode: mode, Jobs: js})
	if err != nil {
		h.t.Fatalf("admit %v %v: %v", mode, js, err)
	}
	var got strings.Builder
	for _, o := range r.Outcomes {
		got.WriteByte("ARLBN"[o])
	}
	if got.String() != want || r.Wait != wait || r.LaneOpen != open {
		h.t.Fatalf("admit %v %v at +%v = %s wait %v open %v (%+v), want %s wait %v open %v",
			mode, js, h.c.Now().Sub(newClock().Now()), got.String(), r.Wait, r.LaneOpen, r, want, wait, open)
	}
	return r
}

func (h *harness) closeLane(p *Plan, through int64, wantOpen bool) {
	h.t.Helper()
	open, err := h.l.CloseLane(context.Background(), h.tenant, p, through)
	if err != nil {
		h.t.Fatal(err)
	}
	if open != wantOpen {
		h.t.Fatalf("close lane through %d: open %v, want %v", through, open, wantOpen)
	}
}

var admitCases = []struct {
	name string
	opts Options
	run  func(t *testing.T, h *harness)
}{
	{"ingest admits what fits, the lane takes the rest in order", Options{}, func(t *testing.T, h *harness) {
		p := mustPlan(t, "p", lim("", 3, 100*ms)) // 3 burst, 10/s
		h.admit(p, Ingest, jobs("1", "2", "3", "4", "5"), "AAALL", 100*ms, true)
		// The lane is open: a newcomer joins it even when a token is free.
		h.c.Advance(100 * ms)
		h.admit(p, Ingest, jobs("6"), "L", 0, true)
		h.admit(p, Lane, jobs("4", "5", "6"), "ANN", 100*ms, true)
		h.c.Advance(100 * ms)
		h.admit(p, Lane, jobs("5", "6"), "AN", 100*ms, true)
		h.c.Advance(100 * ms)
		h.admit(p, Lane, jobs("6"), "A", 0, true)
		h.closeLane(p, 6, false)
		h.c.Advance(time.Second)
		h.admit(p, Ingest, jobs("7", "8"), "AA", 0, false)
	}},
	{"weights keep their place in the lane", Options{}, func(t *testing.T, h *harness) {
		p := mustPlan(t, "p", lim("", 4, 250*ms)) // 4/s
		h.admit(p, Ingest, jobs("1:3", "2:3", "3:1"), "ALL", 500*ms, true)
		// One token left: the light job behind the heavy one still waits for it.
		h.admit(p, Lane, jobs("2:3", "3:1"), "NN", 500*ms, true)
		h.c.Advance(500 * ms)
		h.admit(p, Lane, jobs("2:3", "3:1"), "AN", 250*ms, true)
		h.c.Advance(250 * ms)
		h.admit(p, Lane, jobs("3:1"), "A", 0, true)
		h.expectTokens(p, 0)
	}},
	{"chained limits take all or nothing", Options{}, func(t *testing.T, h *harness) {
		p := mustPlan(t, "gold", lim("burst", 3, 100*ms), lim("daily", 4, time.Hour))
		r := h.admit(p, Ingest, jobs("1:2", "2:2", "3:1"), "ALL", 100*ms, true)
		if r.Limit != "burst" {
			t.Fatalf("binding limit %q, want burst", r.Limit)
		}
		h.expectTokens(p, 1, 2)
		h.c.Advance(100 * ms)
		r = h.admit(p, Lane, jobs("2:2", "3:1"), "AN", time.Hour-100*ms, true)
		if r.Limit != "daily" || r.LimitIndex != 1 {
			t.Fatalf("binding limit %q/%d, want daily/1", r.Limit, r.LimitIndex)
		}
		h.expectTokens(p, 0, 0) // burst refilled to 2, took 2; daily 2-2; job 3 took nothing
	}},
	{"a retried call is answered as before, a late one is charged again", Options{Redeem: time.Second}, func(t *testing.T, h *harness) {
		p := mustPlan(t, "p", lim("", 2, 100*ms))
		h.admit(p, Ingest, jobs("1", "2", "3"), "AAL", 100*ms, true)
		h.admit(p, Ingest, jobs("1", "2", "3"), "RRB", 0, true) // nothing charged twice, nothing new decided
		h.expectTokens(p, 0)
		// After the redeem window the same jobs are new: a replica that admitted them and died
		// before forwarding them costs the tenant their weight again, never a burst.
		h.c.Advance(1100 * ms)
		h.admit(p, Lane, jobs("1", "2", "3"), "AAN", 100*ms, true)
		h.expectTokens(p, 0)
	}},
	{"the lane closes only once every job moved to it has been seen", Options{LaneSettle: 5 * time.Second}, func(t *testing.T, h *harness) {
		p := mustPlan(t, "p", lim("", 1, time.Second))
		h.admit(p, Ingest, jobs("10", "11"), "AL", time.Second, true)
		h.closeLane(p, 10, true) // job 11 was moved: its arrival in the lane is awaited
		h.closeLane(p, 11, false)
		h.admit(p, Ingest, jobs("12"), "L", time.Second, true)
		h.c.Advance(6 * time.Second) // job 12 never showed up: after LaneSettle the lane closes anyway
		h.closeLane(p, 11, false)
		h.admit(p, Ingest, jobs("13"), "A", 0, false)
	}},
	{"hold sends everything to the lane and charges nothing", Options{}, func(t *testing.T, h *harness) {
		p := mustPlan(t, "p", lim("", 3, 100*ms))
		h.admit(p, Hold, jobs("1", "2"), "LL", 0, true)
		h.expectTokens(p, 3)
		// Once the hold is over, ingest still queues behind the lane, which drains at the pace.
		h.admit(p, Ingest, jobs("3"), "L", 0, true)
		h.admit(p, Lane, jobs("1", "2", "3"), "AAA", 0, true)
		h.closeLane(p, 3, false)
		h.admit(p, Ingest, jobs("4"), "L", 100*ms, true)
	}},
	{"state follows a limit by name across plan edits", Options{}, func(t *testing.T, h *harness) {
		a := mustPlan(t, "a", lim("burst", 5, time.Second), lim("hourly", 100, time.Minute))
		h.admit(a, Ingest, jobs("1:5"), "A", 0, false)
		h.expectTokens(a, 0, 95)
		// Reordered, with a new limit and without hourly: burst keeps its state, daily is full.
		b := mustPlan(t, "b", lim("daily", 50, time.Hour), lim("burst", 5, time.Second))
		h.expectTokens(b, 50, 0)
		h.admit(b, Ingest, jobs("2"), "L", time.Second, true)
	}},
	{"a plan that changes the rate keeps the tokens used", Options{}, func(t *testing.T, h *harness) {
		slow := mustPlan(t, "slow", lim("", 2, time.Minute)) // 2 burst, one a minute
		h.admit(slow, Ingest, jobs("1", "2", "3"), "AAL", time.Minute, true)
		h.expectTokens(slow, 0)
		// The same limit at 100 tokens a second: 2 tokens used, 98 left; the head goes at once.
		fast := mustPlan(t, "fast", lim("", 100, 10*ms))
		h.expectTokens(fast, 98)
		h.admit(fast, Lane, jobs("3"), "A", 0, true)
		// And back: the 3 used carry over to the slow plan as 3 minutes owed.
		h.expectTokens(slow, -1)
	}},
	{"idle tenants expire", Options{Redeem: time.Second, LaneSettle: time.Second}, func(t *testing.T, h *harness) {
		p := mustPlan(t, "p", lim("", 2, 100*ms))
		h.admit(p, Ingest, jobs("1", "2", "3"), "AAL", 100*ms, true)
		h.c.Advance(5 * time.Second)
		h.closeLane(p, 0, false)
		h.c.Advance(5 * time.Second)
		h.expectTokens(p, 2)
		if m, ok := h.l.(*Memory); ok {
			if tenants, _ := m.Len(); tenants != 0 {
				t.Fatalf("after idling: %d tenants left, want none", tenants)
			}
		}
	}},
	{"invalid batches", Options{}, func(t *testing.T, h *harness) {
		p := mustPlan(t, "p", lim("big", 10, time.Second), lim("small", 3, time.Second))
		for _, tc := range []struct {
			tenant string
			jobs   []Job
			want   error
		}{
			{h.tenant, []Job{{ID: 1, Weight: 4}}, ErrWeightOverCapacity},
			{h.tenant, []Job{{ID: 1, Weight: 0}}, ErrInvalidWeight},
			{"a{b", []Job{{ID: 1, Weight: 1}}, ErrInvalidTenant},
		} {
			_, err := h.l.Admit(context.Background(), Batch{Tenant: tc.tenant, Plan: p, Jobs: tc.jobs})
			if !errors.Is(err, tc.want) {
				t.Errorf("tenant %q jobs %v: err = %v, want %v", tc.tenant, tc.jobs, err, tc.want)
			}
		}
		for _, id := range []int64{0, -1, 1 << 53} {
			if _, err := h.l.Admit(context.Background(), Batch{Tenant: h.tenant, Plan: p, Jobs: []Job{{ID: id, Weight: 1}}}); err == nil {
				t.Errorf("job id %d accepted", id)
			}
		}
		if _, err := h.l.Admit(context.Background(), Batch{Tenant: h.tenant, Plan: p, Jobs: make([]Job, MaxBatch+1)}); err == nil {
			t.Error("a batch over MaxBatch accepted")
		}
		if _, err := h.l.Admit(context.Background(), Batch{Tenant: h.tenant, Plan: p, Mode: modeClose, Jobs: []Job{{ID: 1, Weight: 1}}}); err == nil {
			t.Error("an internal mode accepted")
		}
		h.admit(p, Ingest, jobs("1:3"), "A", 0, false)
	}},
}

// forget makes a backend behave as one whose memory began at t (a restarted process, a Redis
// restarted without its data).
func forget(l limiter, t time.Time) {
	switch b := l.(type) {
	case *Memory:
		b.Forgot(t)
	case *Redis:
		b.born.at.Store(t.UnixMicro())
	}
}

func init() {
	admitCases = append(admitCases, struct {
		name string
		opts Options
		run  func(t *testing.T, h *harness)
	}{"a limiter that forgot starts empty and refills", Options{}, func(t *testing.T, h *harness) {
		p := mustPlan(t, "p", lim("burst", 4, 250*ms), lim("slow", 100, time.Hour)) // slow: one an hour
		forget(h.l, h.c.Now().Add(-500*ms))                                         // half a second ago: burst holds 2 tokens, slow none
		h.expectTokens(p, 2, 0)
		r := h.admit(p, Ingest, jobs("1"), "L", time.Hour-500*ms, true)
		if r.Limit != "slow" {
			t.Fatalf("binding limit %q, want slow", r.Limit)
		}
		// State written after the restart is kept as it is: what decided since counts.
		h.c.Advance(2 * time.Hour)
		h.admit(p, Lane, jobs("1"), "A", 0, true)
		h.expectTokens(p, 3, 1)
	}})
}

// TestRedisRestartStartsEmpty: a real redis-server without an append-only file is restarted
// (SIGKILL): the limiter notices and takes the forgotten buckets for empty since the restart,
// so the tenant gets its rate, not a second full capacity.
func TestRedisRestartStartsEmpty(t *testing.T) {
	srv := testenv.StartRedis(t)
	r, err := DialRedis(srv.URL(), "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var seen []bool
	r.OnForget(func(_ time.Time, first bool) { seen = append(seen, first) })
	p := mustPlan(t, "p", lim("", 20, time.Second)) // 20 burst, 1/s: 20 s to refill
	ctx := context.Background()
	count := func() int {
		b := Batch{Tenant: "acme", Plan: p, Mode: Lane}
		for i := range 20 {
			b.Jobs = append(b.Jobs, Job{ID: int64(i + 1), Weight: 1})
		}
		res, err := r.Admit(ctx, b)
		for tries := 0; err != nil && tries < 50; tries++ { // the call on the connection the restart broke fails
			time.Sleep(20 * time.Millisecond)
			res, err = r.Admit(ctx, b)
		}
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, o := range res.Outcomes {
			if o == JobAdmitted {
				n++
			}
		}
		return n
	}
	// A server up for less than the refill time: buckets without state are not full yet.
	time.Sleep(1100 * time.Millisecond)
	if n := count(); n < 1 || n > 3 {
		t.Fatalf("just after the server started: %d admitted, want its refill since (1-3)", n)
	}
	srv.Kill()
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	n := count()
	t.Logf("after a restart of redis: %d admitted of 20 asked; forget events %v", n, seen)
	if n > 3 {
		t.Fatalf("after a restart of redis, %d of 20 admitted at once: the forgotten bucket was taken for full", n)
	}
	if len(seen) != 2 || !seen[0] || seen[1] {
		t.Errorf("forget events %v, want the first check, then the restart", seen)
	}
}
