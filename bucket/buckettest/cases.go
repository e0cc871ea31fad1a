package buckettest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/admitter/admitter/bucket"
)

// decideCases exercise Decide with bucket limits.
var decideCases = []testCase{
	{name: "burst then refill", needs: decide(), opts: bucket.Options{}, run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "free", lim("", 5, 500*ms)) // 5 burst, 2/s
		for i := int64(4); i >= 0; i-- {
			h.expect(p, 1, "", bucket.Admitted, 0, i)
		}
		r := h.expect(p, 1, "", bucket.Throttled, 500*ms, 0)
		if r.Limit != "0" || r.LimitIndex != 0 {
			t.Fatalf("binding limit = %q/%d, want unnamed index 0", r.Limit, r.LimitIndex)
		}
		h.c.Advance(499 * ms)
		h.expect(p, 1, "", bucket.Throttled, 1*ms, 0)
		h.c.Advance(1 * ms)
		h.expect(p, 1, "", bucket.Admitted, 0, 0)
		h.c.Advance(2 * time.Second)
		h.expectTokens(p, 4)
		h.c.Advance(time.Hour)
		h.expectTokens(p, 5) // never more than the capacity
	}},
	{name: "weights", needs: decide(), opts: bucket.Options{}, run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "w", lim("", 10, time.Second))
		h.expect(p, 4, "", bucket.Admitted, 0, 6)
		h.expect(p, 4, "", bucket.Admitted, 0, 2)
		h.expect(p, 4, "", bucket.Throttled, 2*time.Second, 2)
		h.expect(p, 2, "", bucket.Admitted, 0, 0)
		h.c.Advance(3 * time.Second)
		h.expect(p, 3, "", bucket.Admitted, 0, 0)
	}},
	{name: "chained limits take all or nothing", needs: decide(), opts: bucket.Options{}, run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "gold", lim("burst", 3, 100*ms), lim("daily", 10, time.Hour))
		h.expect(p, 3, "", bucket.Admitted, 0, 0)
		h.expectTokens(p, 0, 7)
		r := h.expect(p, 2, "", bucket.Throttled, 200*ms, 0)
		if r.Limit != "burst" || r.LimitIndex != 0 {
			t.Fatalf("binding limit = %q/%d, want burst/0", r.Limit, r.LimitIndex)
		}
		h.expectTokens(p, 0, 7) // the denied job took nothing from daily
		h.c.Advance(300 * ms)
		h.expect(p, 3, "", bucket.Admitted, 0, 0)
		h.expectTokens(p, 0, 4)
		h.c.Advance(time.Second)
		h.expect(p, 3, "", bucket.Admitted, 0, 0)
		h.c.Advance(time.Second)
		r = h.expect(p, 2, "", bucket.Throttled, time.Hour-2300*ms, 1) // daily needs an hour: the whole wait, beyond the horizon
		if r.Limit != "daily" || r.LimitIndex != 1 {
			t.Fatalf("binding limit = %q/%d, want daily/1", r.Limit, r.LimitIndex)
		}
		h.expectTokens(p, 3, 1)
	}},
	{name: "reservations are ordered and spaced at the rate", needs: reserve(), opts: bucket.Options{}, run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "p", lim("", 2, 100*ms)) // 10/s
		h.expect(p, 1, "a", bucket.Admitted, 0, 1)
		h.expect(p, 1, "b", bucket.Admitted, 0, 0)
		for i := 1; i <= 5; i++ {
			h.expect(p, 1, fmt.Sprintf("j%d", i), bucket.Delayed, time.Duration(i)*100*ms, 0)
		}
		h.expectTokens(p, -5)
		h.expectReservations(p, 5, 500*ms)
		// j1 comes back at its slot: admitted, not charged again.
		h.c.Advance(100 * ms)
		h.expect(p, 1, "j1", bucket.AdmittedAtSlot, 0, 0)
		h.expectTokens(p, -4)
		h.expectReservations(p, 4, 500*ms)
		// j3 comes back early: its slot stands.
		h.expect(p, 1, "j3", bucket.Early, 200*ms, 0)
		// a newcomer queues behind everything already booked.
		h.expect(p, 1, "j6", bucket.Delayed, 500*ms, 0)
		// late but within the grace: still free.
		h.c.Advance(time.Second)
		for i := 2; i <= 6; i++ {
			h.expect(p, 1, fmt.Sprintf("j%d", i), bucket.AdmittedAtSlot, 0, 2)
		}
		h.expectReservations(p, 0, 0)
		h.expect(p, 1, "j7", bucket.Admitted, 0, 1)
	}},
	{name: "more booked slots than the state keeps entries for", needs: reserve(), opts: bucket.Options{SlotGrace: 100 * ms}, run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "p", lim("", 1, 10*ms)) // 100/s
		h.expect(p, 1, "a", bucket.Admitted, 0, 0)
		for i := 1; i <= 40; i++ {
			h.expect(p, 1, fmt.Sprintf("j%d", i), bucket.Delayed, time.Duration(i)*10*ms, 0)
		}
		// 40 slots, 10ms apart, in 16 entries: the oldest 25 merged into j25's, which counts
		// them until j25's slot + grace. The count and the latest slot stay exact.
		h.expectReservations(p, 40, 400*ms)
		h.c.Advance(10 * ms)
		h.expect(p, 1, "j1", bucket.AdmittedAtSlot, 0, 0)
		h.expectReservations(p, 39, 400*ms)
		// Past j26's slot + grace, j27 to j40 are left, as if nothing had been merged.
		h.c.Advance(350 * ms)
		h.expectReservations(p, 14, 400*ms)
		h.c.Advance(140 * ms)
		h.expectReservations(p, 0, 0)
	}},
	{name: "weighted reservations", needs: reserve(), opts: bucket.Options{}, run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "p", lim("", 4, 250*ms)) // 4/s
		h.expect(p, 4, "a", bucket.Admitted, 0, 0)
		h.expect(p, 2, "b", bucket.Delayed, 500*ms, 0)
		h.expect(p, 1, "c", bucket.Delayed, 750*ms, 0)
		h.expect(p, 4, "d", bucket.Delayed, 1750*ms, 0)
	}},
	{name: "horizon", needs: reserve(), opts: bucket.Options{Horizon: time.Second}, run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "p", lim("", 1, time.Second))
		h.expect(p, 1, "a", bucket.Admitted, 0, 0)
		h.expect(p, 1, "b", bucket.Delayed, time.Second, 0)     // exactly at the horizon: booked
		h.expect(p, 1, "c", bucket.Throttled, 2*time.Second, 0) // beyond: told the time to its slot
		h.expect(p, 1, "d", bucket.Throttled, 2*time.Second, 0)
		h.expectTokens(p, -1) // c and d booked nothing
		h.c.Advance(time.Second)
		h.expect(p, 1, "b", bucket.AdmittedAtSlot, 0, 0)
		h.expect(p, 1, "c", bucket.Delayed, time.Second, 0)
	}},
	{name: "a repeated id after admission is not charged again", needs: reserve(), opts: bucket.Options{MarkerTTL: 10 * time.Second}, run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "p", lim("", 3, time.Second))
		h.expect(p, 2, "job-1", bucket.Admitted, 0, 1)
		h.expect(p, 2, "job-1", bucket.Duplicate, 0, 1)
		h.c.Advance(5 * time.Second)
		h.expect(p, 2, "job-1", bucket.Duplicate, 0, 3)
		h.c.Advance(5 * time.Second) // the marker has expired: a new job
		h.expect(p, 2, "job-1", bucket.Admitted, 0, 1)
		// a slot-admitted job is remembered too
		h.expect(p, 2, "job-2", bucket.Delayed, time.Second, 0)
		h.c.Advance(time.Second)
		h.expect(p, 2, "job-2", bucket.AdmittedAtSlot, 0, 0)
		h.expect(p, 2, "job-2", bucket.Duplicate, 0, 0)
	}},
	{name: "a slot past its grace is forgotten", needs: reserve(), opts: bucket.Options{SlotGrace: time.Second}, run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "p", lim("", 1, time.Second))
		h.expect(p, 1, "a", bucket.Admitted, 0, 0)
		h.expect(p, 1, "b", bucket.Delayed, time.Second, 0)
		h.c.Advance(2 * time.Second)
		h.expect(p, 1, "b", bucket.Admitted, 0, 0) // charged anew
	}},
	{name: "idle tenants expire", needs: reserve(), opts: bucket.Options{MarkerTTL: time.Second, SlotGrace: time.Second}, run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "p", lim("a", 2, 100*ms), lim("b", 10, time.Second))
		h.expect(p, 2, "x", bucket.Admitted, 0, 0)
		h.expect(p, 1, "y", bucket.Delayed, 100*ms, 0)
		h.c.Advance(11 * time.Second)
		h.expectTokens(p, 2, 10)
		if m, ok := h.l.(interface{ Len() (tenants, jobs int) }); ok {
			if tenants, jobs := m.Len(); tenants != 0 || jobs != 0 {
				t.Fatalf("after idling: %d tenants and %d jobs left, want none", tenants, jobs)
			}
		}
	}},
	{name: "a plan in shadow mode decides on the shadow state", needs: reserve(), opts: bucket.Options{}, run: func(t *testing.T, h *harness) {
		enforced := mustPlan(t, "p", lim("a", 1, 100*ms))
		trial := mustPlan(t, "p", lim("a", 1, 100*ms))
		trial.Shadow = true
		h.expect(trial, 1, "x", bucket.Admitted, 0, 0)
		h.expect(trial, 1, "y", bucket.Delayed, 100*ms, 0)
		h.expectReservations(trial, 1, 100*ms)
		h.expectTokens(trial, -1)
		// The enforced state, and its job keys, know nothing of it.
		h.expectTokens(enforced, 1)
		h.expectReservations(enforced, 0, 0)
		h.expect(enforced, 1, "y", bucket.Admitted, 0, 0)
	}},
	{name: "invalid requests", needs: decide(), opts: bucket.Options{}, run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "p", lim("big", 10, time.Second), lim("small", 3, time.Second))
		for _, tc := range []struct {
			tenant string
			w      int64
			want   error
		}{
			{h.tenant, 4, bucket.ErrWeightOverCapacity},
			{h.tenant, 0, bucket.ErrInvalidWeight},
			{h.tenant, -1, bucket.ErrInvalidWeight},
			{"", 1, bucket.ErrInvalidTenant},
			{"a{b", 1, bucket.ErrInvalidTenant},
			{"a}b", 1, bucket.ErrInvalidTenant},
		} {
			_, err := h.l.Decide(context.Background(), bucket.Request{Tenant: tc.tenant, Plan: p, Weight: tc.w})
			if !errors.Is(err, tc.want) {
				t.Errorf("tenant %q weight %d: err = %v, want %v", tc.tenant, tc.w, err, tc.want)
			}
		}
		h.expect(p, 3, "", bucket.Admitted, 0, 0)
	}},
}

// admitCases exercise Admit with bucket limits: the head of a tenant's queue, its owner, jobs
// seen stored, late charges.
var admitCases = []testCase{
	{name: "the head is admitted in order while it fits", needs: queues(), opts: bucket.Options{}, run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "p", lim("", 3, 100*ms)) // 3 burst, 10/s
		h.admit(p, jobs("1", "2", "3", "4", "5"), "AAANN", 100*ms)
		h.c.Advance(100 * ms)
		h.admit(p, jobs("4", "5", "6"), "ANN", 100*ms)
		h.c.Advance(100 * ms)
		h.admit(p, jobs("5", "6"), "AN", 100*ms)
		h.c.Advance(100 * ms)
		h.admit(p, jobs("6"), "A", 0)
	}},
	{name: "weights keep their place in the queue", needs: queues(), opts: bucket.Options{}, run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "p", lim("", 4, 250*ms)) // 4/s
		h.admit(p, jobs("1:3", "2:3", "3:1"), "ANN", 500*ms)
		// One token left: the light job behind the heavy one still waits for it.
		h.admit(p, jobs("2:3", "3:1"), "NN", 500*ms)
		h.c.Advance(500 * ms)
		h.admit(p, jobs("2:3", "3:1"), "AN", 250*ms)
		h.c.Advance(250 * ms)
		h.admit(p, jobs("3:1"), "A", 0)
		h.expectTokens(p, 0)
	}},
	{name: "chained limits take all or nothing", needs: queues(), opts: bucket.Options{}, run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "gold", lim("burst", 3, 100*ms), lim("daily", 4, time.Hour))
		r := h.admit(p, jobs("1:2", "2:2", "3:1"), "ANN", 100*ms)
		if r.Limit != "burst" {
			t.Fatalf("binding limit %q, want burst", r.Limit)
		}
		h.expectTokens(p, 1, 2)
		h.c.Advance(100 * ms)
		r = h.admit(p, jobs("2:2", "3:1"), "AN", time.Hour-100*ms)
		if r.Limit != "daily" || r.LimitIndex != 1 {
			t.Fatalf("binding limit %q/%d, want daily/1", r.Limit, r.LimitIndex)
		}
		h.expectTokens(p, 0, 0) // burst refilled to 2, took 2; daily 2-2; job 3 took nothing
	}},
	{name: "an admission is redeemed until its owner says it was stored, charged nothing", needs: queues(), opts: bucket.Options{Redeem: time.Minute}, run: func(t *testing.T, h *harness) {
		// A call admits jobs 1 to 3 (its answer may be lost: the server was paused, the client
		// timed out, the replica died before removing them from the input). Asked again, by
		// anyone and however late within Redeem, they are redeemed: charged nothing, with when
		// they were admitted, so that whoever asks looks their forwards up before repeating them.
		p := mustPlan(t, "p", lim("rate", 4, 250*ms), win("w", 100, time.Hour))
		h.admit(p, jobs("1", "2", "3"), "AAA", 0)
		h.expectTokens(p, 1, 97)
		h.c.Advance(40 * time.Second) // the bucket is full again
		r := h.step(bucket.Batch{Plan: p, Owner: 2, Jobs: jobs("1", "2", "3", "4")}, "RRRA", 0)
		h.expectTokens(p, 3, 96)
		if len(r.AdmittedAgo) != 4 || r.AdmittedAgo[0] != 40*time.Second || r.AdmittedAgo[2] != 40*time.Second || r.AdmittedAgo[3] != 0 {
			t.Fatalf("admitted ago %v, want 40s for the three redeemed, 0 for the one admitted now", r.AdmittedAgo)
		}
		// The owner says jobs through 2 were stored: they are stored from then on, to anyone,
		// and job 3 (its forward not said stored) is still redeemed, until Redeem passes.
		h.step(bucket.Batch{Plan: p, Owner: 2, Stored: 2, Jobs: jobs("1", "2", "3")}, "SSR", 0)
		h.c.Advance(20*time.Second + time.Microsecond)
		h.step(bucket.Batch{Plan: p, Owner: 2, Jobs: jobs("3", "4")}, "AR", 0) // 3 decided afresh: a minute after its admission
		h.expectTokens(p, 3, 95)
	}},
	{name: "an admission made ahead of lower ids is remembered until the settled mark passes it", needs: queues(), opts: bucket.Options{Redeem: time.Minute}, run: func(t *testing.T, h *harness) {
		// A priority (admission/priority.go): job 10 is admitted before jobs 3 to 5. The owner's
		// settled mark covers only the jobs it settled in order: 5 once 3 to 5 went. Job 10 is
		// still remembered, redeemed to whoever reads it again, until the mark passes it; the
		// marks are kept in the order made, so the one made first, above the mark, keeps those
		// after it too.
		p := mustPlan(t, "p", lim("rate", 10, 100*ms))
		h.admit(p, jobs("10"), "A", 0)
		h.admit(p, jobs("3", "4", "5"), "AAA", 0)
		h.step(bucket.Batch{Plan: p, Owner: 1, Stored: 5}, "", 0) // 3 to 5 settled in order
		// Owner 1 stopped: past its hold, a new holder reads them again.
		h.c.Advance(10 * time.Second)
		h.step(bucket.Batch{Plan: p, Owner: 2, Jobs: jobs("3", "5", "10", "11")}, "SSRA", 0)
		h.step(bucket.Batch{Plan: p, Owner: 2, Stored: 11, Jobs: jobs("10", "11")}, "SS", 0)
	}},
	{name: "one owner at a time: another admits nothing while the holder's hold stands", needs: queues(), opts: bucket.Options{Hold: 2 * time.Second}, run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "p", lim("", 10, 100*ms))
		h.admit(p, jobs("1", "2"), "AA", 0) // owner 1 holds the queue for 2 s
		r := h.step(bucket.Batch{Plan: p, Owner: 2, Jobs: jobs("3", "4")}, "NN", 2*time.Second)
		if !r.Handover || r.LimitIndex != -1 || r.Limit != "" {
			t.Fatalf("another owner's call: %+v, want a handover", r)
		}
		if snap, err := h.l.Inspect(context.Background(), h.tenant, p); err != nil || !snap.HeldUntil.Equal(h.c.Now().Add(2*time.Second)) {
			t.Fatalf("inspect: held until %v (%v), want %v", snap.HeldUntil, err, h.c.Now().Add(2*time.Second))
		}
		h.c.Advance(time.Second)
		h.admit(p, jobs("3"), "A", 0) // the holder's call extends its hold: 2 s from now
		h.c.Advance(1500 * ms)
		h.step(bucket.Batch{Plan: p, Owner: 2, Jobs: jobs("4")}, "N", 500*ms)
		h.c.Advance(500 * ms) // the holder called no more (it died, or its membership changed)
		h.step(bucket.Batch{Plan: p, Owner: 2, Jobs: jobs("4", "5")}, "AA", 0)
		h.step(bucket.Batch{Plan: p, Owner: 1, Jobs: jobs("6")}, "N", 2*time.Second)
		// Jobs stored before are answered so to anyone: they are removed, not decided.
		h.step(bucket.Batch{Plan: p, Owner: 2, Stored: 4}, "", 0)
		h.step(bucket.Batch{Plan: p, Owner: 1, Jobs: jobs("3", "4", "6")}, "SSN", 2*time.Second)
		// A plan in shadow mode takes no owner and is held by none.
		trial := mustPlan(t, "p", lim("", 10, 100*ms))
		trial.Shadow = true
		h.step(bucket.Batch{Plan: trial, Owner: 1, Jobs: jobs("6")}, "A", 0)
	}},
	{name: "jobs seen stored are never forwarded again, for as long as Keep", needs: queues(), opts: bucket.Options{Redeem: time.Second, Hold: time.Second}, run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "p", lim("", 10, time.Millisecond))
		h.admit(p, jobs("1", "2", "3"), "AAA", 0)
		// Their forwards were stored; removing them from the input failed: the owner says so.
		h.step(bucket.Batch{Plan: p, Owner: 1, Stored: 3, Keep: time.Hour}, "", 0)
		// Long after every other part of the state would have ended, another replica reads them
		// again from the input: stored, not decided, not forwarded a second time.
		h.c.Advance(30 * time.Minute)
		h.step(bucket.Batch{Plan: p, Owner: 2, Jobs: jobs("1", "2", "3", "4")}, "SSSA", 0)
		h.expectTokens(p, 9)
		// A lower Stored never lowers it.
		h.step(bucket.Batch{Plan: p, Owner: 2, Stored: 1, Jobs: jobs("3")}, "S", 0)
	}},
	{name: "a stored mark covers the jobs of its own span of ids only", needs: queues(), opts: bucket.Options{Redeem: time.Second, Hold: time.Second}, run: func(t *testing.T, h *harness) {
		// The tenant's jobs moved to another stream (the input's partitions changed): ids of
		// that stream's span; its stored mark says nothing of another stream's jobs.
		p := mustPlan(t, "p", lim("", 10, time.Millisecond))
		span8 := fmt.Sprint(8*bucket.JobSpan + 7)
		h.step(bucket.Batch{Plan: p, Owner: 1, Stored: 8*bucket.JobSpan + 7, Keep: time.Hour}, "", 0)
		h.step(bucket.Batch{Plan: p, Owner: 1, Jobs: jobs("3", span8, fmt.Sprint(16*bucket.JobSpan+2))}, "ASA", 0)
		// A mark of an older span does not lower it.
		h.step(bucket.Batch{Plan: p, Owner: 1, Stored: 9, Jobs: jobs(span8)}, "S", 0)
	}},
	{name: "forwards stored late are charged before the next decision", needs: queues(bucket.KindWindow), opts: bucket.Options{}, run: func(t *testing.T, h *harness) {
		// Four jobs admitted at once reach downstream 500 ms late, stored beside what the
		// limits gave meanwhile: the next call takes that back first. The bucket (4 at 4/s)
		// refilled 2 tokens in the 500 ms: min(weight 4, 500 ms / 250 ms) = 2 taken again; the
		// window counts the 4 again, from now.
		p := mustPlan(t, "p", lim("rate", 4, 250*ms), win("w", 100, time.Hour))
		h.admit(p, jobs("1", "2", "3", "4"), "AAAA", 0)
		h.c.Advance(500 * ms)
		h.expectTokens(p, 2, 96)
		h.step(bucket.Batch{Plan: p, Owner: 1, LateWeight: 4, Late: 500 * ms, Jobs: jobs("5")}, "N", 250*ms)
		h.expectTokens(p, 0, 92)
		// A late weight from another owner, while the holder holds, is not taken: its charge
		// is the holder's to make.
		h.step(bucket.Batch{Plan: p, Owner: 2, LateWeight: 4, Late: time.Second, Jobs: jobs("5")}, "N", 3*time.Second)
		h.expectTokens(p, 0, 92)
	}},
	{name: "shadow admits everything and reports the queue the plan would have made", needs: queues(), opts: bucket.Options{Horizon: 250 * ms}, run: func(t *testing.T, h *harness) {
		enforced := mustPlan(t, "p", lim("", 2, 100*ms))
		trial := mustPlan(t, "p", lim("", 2, 100*ms))
		trial.Shadow = true
		r := h.admit(trial, jobs("1", "2", "3", "4", "5", "6"), "AAAAAA", 0)
		// 2 fit now; then one every 100 ms, as the queue would have let them go; past the
		// horizon (250 ms) nothing is taken and the wait is given as the horizon.
		h.expectShadow(r, 0, 0, 100*ms, 200*ms, 250*ms, 250*ms)
		h.expectTokens(trial, -2)   // the shadow state: 2 used, 2 booked ahead
		h.expectTokens(enforced, 2) // the state enforced plans use: untouched
		// Asked again within the redeem window: answered as before, charged nothing.
		// Job 7's slot (300 ms) is now within the horizon: taken.
		h.c.Advance(50 * ms)
		r = h.admit(trial, jobs("3", "7"), "RA", 0)
		h.expectShadow(r, 50*ms, 250*ms)
		h.expectTokens(trial, -3)
		// Once the plan is enforced, the tenant starts from the enforced state.
		h.admit(enforced, jobs("8", "9", "10"), "AAN", 100*ms)
	}},
	{name: "a plan that changes the rate keeps the tokens used", needs: queues(), opts: bucket.Options{}, run: func(t *testing.T, h *harness) {
		slow := mustPlan(t, "slow", lim("", 2, time.Minute)) // 2 burst, one a minute
		h.admit(slow, jobs("1", "2", "3"), "AAN", time.Minute)
		h.expectTokens(slow, 0)
		// The same limit at 100 tokens a second: 2 tokens used, 98 left; the head goes at once.
		fast := mustPlan(t, "fast", lim("", 100, 10*ms))
		h.expectTokens(fast, 98)
		h.admit(fast, jobs("3"), "A", 0)
		// And back: the 3 used carry over to the slow plan as 3 minutes owed.
		h.expectTokens(slow, -1)
	}},
	{name: "state follows a limit by name across plan edits", needs: queues(), opts: bucket.Options{}, run: func(t *testing.T, h *harness) {
		a := mustPlan(t, "a", lim("burst", 5, time.Second), lim("hourly", 100, time.Minute))
		h.admit(a, jobs("1:5"), "A", 0)
		h.expectTokens(a, 0, 95)
		// Reordered, with a new limit and without hourly: burst keeps its state, daily is full.
		b := mustPlan(t, "b", lim("daily", 50, time.Hour), lim("burst", 5, time.Second))
		h.expectTokens(b, 50, 0)
		h.admit(b, jobs("2"), "N", time.Second)
	}},
	{name: "idle tenants expire", needs: queues(), opts: bucket.Options{Redeem: time.Second, Hold: time.Second}, run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "p", lim("", 2, 100*ms))
		h.admit(p, jobs("1", "2", "3"), "AAN", 100*ms)
		h.step(bucket.Batch{Plan: p, Owner: 1, Stored: 2, Keep: 3 * time.Second}, "", 0)
		h.c.Advance(5 * time.Second)
		h.expectTokens(p, 2)
		if m, ok := h.l.(interface{ Len() (tenants, jobs int) }); ok {
			if tenants, _ := m.Len(); tenants != 0 {
				t.Fatalf("after idling: %d tenants left, want none", tenants)
			}
		}
	}},
	{name: "invalid batches", needs: queues(), opts: bucket.Options{}, run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "p", lim("big", 10, time.Second), lim("small", 3, time.Second))
		for _, tc := range []struct {
			tenant string
			jobs   []bucket.Job
			want   error
		}{
			{h.tenant, []bucket.Job{{ID: 1, Weight: 4}}, bucket.ErrWeightOverCapacity},
			{h.tenant, []bucket.Job{{ID: 1, Weight: 0}}, bucket.ErrInvalidWeight},
			{"a{b", []bucket.Job{{ID: 1, Weight: 1}}, bucket.ErrInvalidTenant},
		} {
			_, err := h.l.Admit(context.Background(), bucket.Batch{Tenant: tc.tenant, Plan: p, Owner: 1, Jobs: tc.jobs})
			if !errors.Is(err, tc.want) {
				t.Errorf("tenant %q jobs %v: err = %v, want %v", tc.tenant, tc.jobs, err, tc.want)
			}
		}
		for _, id := range []int64{0, -1, 1 << 53} {
			if _, err := h.l.Admit(context.Background(), bucket.Batch{Tenant: h.tenant, Plan: p, Owner: 1, Jobs: []bucket.Job{{ID: id, Weight: 1}}}); err == nil {
				t.Errorf("job id %d accepted", id)
			}
		}
		if _, err := h.l.Admit(context.Background(), bucket.Batch{Tenant: h.tenant, Plan: p, Owner: 1, Jobs: make([]bucket.Job, bucket.MaxBatch+1)}); err == nil {
			t.Error("a batch over bucket.MaxBatch accepted")
		}
		for _, b := range []bucket.Batch{
			{Jobs: jobs("1")},              // no owner
			{Owner: 1, Stored: -1},         // a negative stored
			{Owner: 1, LateWeight: -1},     // a negative late weight
			{Owner: 1, Late: -time.Second}, // a negative lateness
			{Owner: 1, Keep: -time.Second}, // a negative keep
		} {
			b.Tenant, b.Plan = h.tenant, p
			if _, err := h.l.Admit(context.Background(), b); err == nil {
				t.Errorf("batch %+v accepted", b)
			}
		}
		h.admit(p, jobs("1:3"), "A", 0)
	}},
}

// forgetCases exercise a backend that forgot: Options.Born.
var forgetCases = []testCase{
	{name: "a limiter that forgot starts empty and refills", needs: forget(queues()), opts: bucket.Options{Born: Start.Add(-500 * ms)}, run: func(t *testing.T, h *harness) {
		// Forgotten half a second ago: burst holds 2 tokens, slow none.
		p := mustPlan(t, "p", lim("burst", 4, 250*ms), lim("slow", 100, time.Hour)) // slow: one an hour
		h.expectTokens(p, 2, 0)
		r := h.admit(p, jobs("1"), "N", time.Hour-500*ms)
		if r.Limit != "slow" {
			t.Fatalf("binding limit %q, want slow", r.Limit)
		}
		// State written after the restart is kept as it is: what decided since counts.
		h.c.Advance(2 * time.Hour)
		h.admit(p, jobs("1"), "A", 0)
		h.expectTokens(p, 3, 1)
	}},
}

// kindCases exercise windows and quotas, alone and chained with buckets.
var kindCases = []testCase{
	{name: "window: at most the limit in any interval of its length", needs: decide(bucket.KindWindow), opts: bucket.Options{}, run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "w", win("w", 3, time.Second))
		h.expect(p, 1, "", bucket.Admitted, 0, 2)
		h.c.Advance(400 * ms)
		h.expect(p, 1, "", bucket.Admitted, 0, 1)
		h.c.Advance(300 * ms)
		h.expect(p, 1, "", bucket.Admitted, 0, 0)
		h.c.Advance(100 * ms) // +0.8s: the first take leaves at +1s
		h.expect(p, 1, "", bucket.Throttled, 200*ms, 0)
		h.expectLimit(p, 0, 0, 3, 200*ms)
		h.c.Advance(200 * ms)
		h.expect(p, 1, "", bucket.Admitted, 0, 0)
		h.expect(p, 1, "", bucket.Throttled, 400*ms, 0) // the second leaves at +1.4s
		r := h.expect(p, 2, "", bucket.Throttled, 700*ms, 0)
		if r.Limit != "w" {
			t.Fatalf("binding limit %q, want w", r.Limit)
		}
		h.c.Advance(time.Hour)
		h.expectLimit(p, 0, 3, 0, 0)
	}},
	{name: "window: a booked slot counts in every interval it falls in", needs: reserve(bucket.KindWindow), opts: bucket.Options{}, run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "w", win("", 2, time.Second))
		h.expect(p, 1, "a", bucket.Admitted, 0, 1)
		h.expect(p, 1, "b", bucket.Admitted, 0, 0)
		h.expect(p, 1, "c", bucket.Delayed, time.Second, 0)
		h.expect(p, 1, "d", bucket.Delayed, time.Second, 0)
		h.expect(p, 1, "e", bucket.Delayed, 2*time.Second, 0)
		h.expectTokens(p, -3)
		h.expectReservations(p, 3, 2*time.Second)
		h.c.Advance(time.Second)
		h.expect(p, 1, "c", bucket.AdmittedAtSlot, 0, 0)
		h.expect(p, 1, "f", bucket.Delayed, time.Second, 0) // beside e: they fit one interval
	}},
	{name: "window: weights and the weight over its limit", needs: decide(bucket.KindWindow), opts: bucket.Options{}, run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "w", lim("burst", 100, ms), win("hourly", 10, time.Hour))
		if p.MaxWeight() != 10 {
			t.Fatalf("MaxWeight %d, want the window's limit 10", p.MaxWeight())
		}
		h.expect(p, 6, "", bucket.Admitted, 0, 4)
		h.c.Advance(10 * time.Minute)
		h.expect(p, 4, "", bucket.Admitted, 0, 0)
		h.c.Advance(10 * time.Minute)
		h.expect(p, 5, "", bucket.Throttled, 40*time.Minute, 0) // 40 minutes, beyond the horizon
		h.c.Advance(40 * time.Minute)
		h.expect(p, 5, "", bucket.Admitted, 0, 1)
		if _, err := h.l.Decide(context.Background(), bucket.Request{Tenant: h.tenant, Plan: p, Weight: 11}); !errors.Is(err, bucket.ErrWeightOverCapacity) {
			t.Fatalf("weight 11 on a window of 10: %v, want weight-over-capacity", err)
		}
	}},
	{name: "quota: resets at the start of each calendar period", needs: decide(bucket.KindQuota), opts: bucket.Options{}, run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "q", quota("minutely", 5, bucket.Minute, nil))
		h.c.Advance(30 * time.Second) // 12:00:30
		for i := int64(4); i >= 0; i-- {
			h.expect(p, 1, "", bucket.Admitted, 0, i)
		}
		h.expect(p, 1, "", bucket.Throttled, 30*time.Second, 0)
		h.expectLimit(p, 0, 0, 5, 30*time.Second)
		h.c.Advance(29 * time.Second)
		h.expect(p, 1, "", bucket.Throttled, time.Second, 0)
		h.c.Advance(time.Second) // 12:01:00: a new period
		h.expectLimit(p, 0, 5, 0, time.Minute)
		h.expect(p, 5, "", bucket.Admitted, 0, 0)
	}},
	{name: "quota: a booked slot lands in the next period", needs: reserve(bucket.KindQuota), opts: bucket.Options{Horizon: 5 * time.Minute}, run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "q", quota("", 2, bucket.Minute, nil))
		h.c.Advance(30 * time.Second)
		h.expect(p, 1, "a", bucket.Admitted, 0, 1)
		h.expect(p, 1, "b", bucket.Admitted, 0, 0)
		h.expect(p, 1, "c", bucket.Delayed, 30*time.Second, 0)
		h.expect(p, 2, "d", bucket.Delayed, 90*time.Second, 0)  // the next minute holds c: d needs the one after
		h.expect(p, 1, "e", bucket.Delayed, 150*time.Second, 0) // behind d, whose minute is full
		h.expectLimit(p, 0, -4, 2, 30*time.Second)
		h.c.Advance(30 * time.Second)
		h.expectLimit(p, 0, -2, 1, time.Minute) // this minute: c; booked ahead: d and e
		h.expect(p, 1, "c", bucket.AdmittedAtSlot, 0, 0)
	}},
	{name: "quota: calendars of every period and time zone", needs: queues(bucket.KindQuota), opts: bucket.Options{}, run: func(t *testing.T, h *harness) {
		ny, err := time.LoadLocation("America/New_York")
		if err != nil {
			t.Fatal(err)
		}
		// 2026-11-21 12:00 UTC is a Saturday, 07:00 in New York (EST, UTC-5).
		next := int64(1)
		for _, c := range []struct {
			l    bucket.Limit
			wait time.Duration
		}{
			{quota("m", 1, bucket.Minute, nil), time.Minute},
			{quota("h", 1, bucket.Hour, nil), time.Hour},
			{quota("d", 1, bucket.Day, nil), 12 * time.Hour},
			{quota("d-ny", 1, bucket.Day, ny), 17 * time.Hour},
			{quota("w", 1, bucket.Week, nil), 36 * time.Hour}, // to Monday 00:00
			{quota("w-ny", 1, bucket.Week, ny), 41 * time.Hour},
			{quota("mo", 1, bucket.Month, nil), (9*24 + 12) * time.Hour}, // to December 1st
			{quota("mo-ny", 1, bucket.Month, ny), (9*24 + 17) * time.Hour},
		} {
			p := mustPlan(t, c.l.Name, c.l)
			h.admit(p, []bucket.Job{{ID: next, Weight: 1}, {ID: next + 1, Weight: 1}}, "AN", c.wait)
			next += 2
			h.expectLimit(p, 0, 0, 1, c.wait)
		}
	}},
	{name: "chained kinds take all or nothing", needs: queues(bucket.KindWindow, bucket.KindQuota), opts: bucket.Options{}, run: func(t *testing.T, h *harness) {
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
			p := mustPlan(t, "chain-"+c.binding, lim(n+"b", c.b, time.Minute), win(n+"w", c.w, time.Hour), quota(n+"q", c.q, bucket.Day, nil))
			r := h.admit(p, []bucket.Job{{ID: next, Weight: 1}, {ID: next + 1, Weight: 1}}, "AN", c.wait)
			next += 2
			if r.Limit != n+c.binding {
				t.Fatalf("binding limit %q, want %s", r.Limit, n+c.binding)
			}
			h.expectTokens(p, c.b-1, c.w-1, c.q-1)
			h.expect(p, 1, "", bucket.Throttled, c.wait, 0)
			h.expectTokens(p, c.b-1, c.w-1, c.q-1)
		}
		p := mustPlan(t, "all", lim("all-b", 5, time.Minute), win("all-w", 5, time.Hour), quota("all-q", 5, bucket.Day, nil))
		h.admit(p, []bucket.Job{{ID: next, Weight: 3}}, "A", 0)
		h.expectTokens(p, 2, 2, 2)
	}},
	{name: "a limit's state follows its name and kind", needs: decide(bucket.KindWindow, bucket.KindQuota), opts: bucket.Options{}, run: func(t *testing.T, h *harness) {
		a := mustPlan(t, "a", win("x", 2, time.Hour), quota("y", 5, bucket.Day, nil))
		h.expect(a, 2, "", bucket.Admitted, 0, 0)
		h.expectTokens(a, 0, 3)
		// x becomes a bucket (afresh), y is kept, z is new.
		b := mustPlan(t, "b", quota("y", 5, bucket.Day, nil), lim("x", 2, time.Second), win("z", 1, time.Second))
		h.expectTokens(b, 3, 2, 1)
	}},
	{name: "a limiter that never knew the tenant starts full, every kind", needs: queues(bucket.KindWindow, bucket.KindQuota), opts: bucket.Options{}, run: func(t *testing.T, h *harness) {
		// No memory lost (Born zero): a new deployment, a tenant never seen. Its burst, its
		// window and its monthly quota are whole from the first job.
		p := mustPlan(t, "p", lim("b", 4, time.Minute), win("w", 3, time.Hour), quota("q", 100000, bucket.Month, nil))
		h.expectTokens(p, 4, 3, 100000)
		h.admit(p, jobs("1", "2", "3", "4"), "AAAN", time.Hour)
		h.expectTokens(p, 1, 0, 99997)
	}},
	{name: "a limiter that forgot takes a window for full, one window long", needs: forget(queues(bucket.KindWindow)), opts: bucket.Options{Born: Start.Add(-10 * time.Minute)}, run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "p", win("w", 10, time.Hour), lim("b", 10, time.Minute))
		h.expectLimit(p, 0, 0, 10, 50*time.Minute)
		h.expectTokens(p, 0, 10)
		h.admit(p, jobs("1"), "N", 50*time.Minute)
		h.c.Advance(50 * time.Minute)
		h.admit(p, jobs("1"), "A", 0)
	}},
	{name: "a limiter that forgot counts the share of a quota's period elapsed, never the rest", needs: forget(queues(bucket.KindQuota)), opts: bucket.Options{Born: Start.Add(-10 * time.Minute)}, run: func(t *testing.T, h *harness) {
		// Forgotten at 2026-11-21 11:50 UTC: 29,510 of November's 43,200 minutes had passed,
		// so 1000 × 29510 / 43200 = 683.1: 683 counted as used until December, 317 left.
		p := mustPlan(t, "p", quota("q", 1000, bucket.Month, nil), lim("b", 1000, time.Millisecond))
		h.expectLimit(p, 0, 317, 683, 9*24*time.Hour+12*time.Hour)
		var js []bucket.Job
		for i := 1; i <= 318; i++ {
			js = append(js, bucket.Job{ID: int64(i), Weight: 1})
		}
		r := h.l
		res, err := r.Admit(context.Background(), bucket.Batch{Tenant: h.tenant, Plan: p, Owner: 1, Jobs: js})
		if err != nil {
			t.Fatal(err)
		}
		admitted := 0
		for _, o := range res.Outcomes {
			if o.Admitted() {
				admitted++
			}
		}
		if admitted != 317 || res.Wait != 9*24*time.Hour+12*time.Hour || res.Limit != "q" {
			t.Fatalf("after forgetting: %d admitted, wait %v on %q; want 317, then the quota's reset in 9d12h", admitted, res.Wait, res.Limit)
		}
		// A daily quota forgotten at 11:50: 49 % of the day had passed.
		d := mustPlan(t, "d", quota("day", 100, bucket.Day, nil))
		h.expectLimit(d, 0, 51, 49, 12*time.Hour)
	}},
	{name: "window: a large limit is counted in sub-windows, never early", needs: queues(bucket.KindWindow), opts: bucket.Options{}, run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "big", win("", 1000, 64*time.Second)) // sub-windows of 1s
		if g := p.Limits[0].Grain(); g != time.Second {
			t.Fatalf("grain %v, want 1s", g)
		}
		h.c.Advance(500 * ms)
		h.admit(p, jobs("1:1000"), "A", 0)
		// Exact, the take would leave at +64.5s; counted at the end of its second, at +65s.
		h.admit(p, jobs("2"), "N", 64500*ms)
		h.c.Advance(64 * time.Second)
		h.admit(p, jobs("2"), "N", 500*ms)
		h.c.Advance(500 * ms)
		h.admit(p, jobs("2:1000"), "A", 0)
	}},
	{name: "window: 25 jobs on 10 per 3s come out as 10, 10, 5", needs: queues(bucket.KindWindow), opts: bucket.Options{}, run: func(t *testing.T, h *harness) {
		p := mustPlan(t, "w", win("", 10, 3*time.Second))
		var js []bucket.Job
		for i := 1; i <= 25; i++ {
			js = append(js, bucket.Job{ID: int64(i), Weight: 1})
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
		h.admit(p, js, want(10), 3*time.Second)
		js = js[10:]
		h.c.Advance(3 * time.Second)
		h.admit(p, js, want(10), 3*time.Second)
		js = js[10:]
		h.c.Advance(3 * time.Second)
		h.admit(p, js, want(5), 0)
	}},
}
