package buckettest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/admitter/admitter/bucket"
)

// harness is one case's backend, clock and tenant.
type harness struct {
	t      *testing.T
	l      Limiter
	c      *clock
	tenant string
}

// decide asks for a decision and fails the test on error.
func (h *harness) decide(p *bucket.Plan, w int64, id string) bucket.Result {
	h.t.Helper()
	r, err := h.l.Decide(context.Background(), bucket.Request{Tenant: h.tenant, Plan: p, Weight: w, JobID: id})
	if err != nil {
		h.t.Fatalf("decide(w=%d, id=%q): %v", w, id, err)
	}
	return r
}

// expect checks a decision's outcome, wait and remaining tokens.
func (h *harness) expect(p *bucket.Plan, w int64, id string, o bucket.Outcome, wait time.Duration, remaining int64) bucket.Result {
	h.t.Helper()
	r := h.decide(p, w, id)
	if r.Outcome != o || r.Wait != wait || r.Remaining != remaining || r.Allowed != o.Allowed() {
		h.t.Fatalf("decide(w=%d, id=%q) at +%v = %+v, want outcome %v wait %v remaining %d",
			w, id, h.c.Now().Sub(Start), r, o, wait, remaining)
	}
	return r
}

// tokens returns every limit's whole tokens now.
func (h *harness) tokens(p *bucket.Plan) []int64 {
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

func (h *harness) expectTokens(p *bucket.Plan, want ...int64) {
	h.t.Helper()
	if got := h.tokens(p); fmt.Sprint(got) != fmt.Sprint(want) {
		h.t.Fatalf("tokens = %v, want %v", got, want)
	}
}

// expectReservations checks the outstanding booked slots and the latest one, as an offset from
// the clock's start.
func (h *harness) expectReservations(p *bucket.Plan, n int, latest time.Duration) {
	h.t.Helper()
	s, err := h.l.Inspect(context.Background(), h.tenant, p)
	if err != nil {
		h.t.Fatal(err)
	}
	var got time.Duration
	if !s.LatestSlot.IsZero() {
		got = s.LatestSlot.Sub(Start)
	}
	if s.Reservations != n || got != latest {
		h.t.Fatalf("reservations = %d, latest slot +%v; want %d, +%v", s.Reservations, got, n, latest)
	}
}

// jobs builds a batch's jobs from ids, each of weight 1 unless given as id:weight.
func jobs(spec ...string) []bucket.Job {
	var out []bucket.Job
	for _, s := range spec {
		var j bucket.Job
		if _, err := fmt.Sscanf(s, "%d:%d", &j.ID, &j.Weight); err != nil {
			fmt.Sscanf(s, "%d", &j.ID)
			j.Weight = 1
		}
		out = append(out, j)
	}
	return out
}

// admit asks Admit about jobs as the queue's owner 1 and checks the outcomes (by their letters:
// A admitted, R redeemed, N not yet, S stored before) and the wait.
func (h *harness) admit(p *bucket.Plan, js []bucket.Job, want string, wait time.Duration) bucket.BatchResult {
	h.t.Helper()
	return h.step(bucket.Batch{Plan: p, Owner: 1, Jobs: js}, want, wait)
}

// step is admit with every field of the batch the case's (its tenant the case's).
func (h *harness) step(b bucket.Batch, want string, wait time.Duration) bucket.BatchResult {
	h.t.Helper()
	b.Tenant = h.tenant
	r, err := h.l.Admit(context.Background(), b)
	if err != nil {
		h.t.Fatalf("admit %+v: %v", b, err)
	}
	var got strings.Builder
	for _, o := range r.Outcomes {
		got.WriteByte("ARNS"[o])
	}
	if got.String() != want || r.Wait != wait {
		h.t.Fatalf("admit %+v at +%v = %s wait %v (%+v), want %s wait %v",
			b, h.c.Now().Sub(Start), got.String(), r.Wait, r, want, wait)
	}
	return r
}

// expectLimit checks one limit's state as Inspect reports it.
func (h *harness) expectLimit(p *bucket.Plan, i int, tokens, used int64, next time.Duration) {
	h.t.Helper()
	s, err := h.l.Inspect(context.Background(), h.tenant, p)
	if err != nil {
		h.t.Fatal(err)
	}
	l := s.Limits[i]
	if l.Tokens != tokens || l.Used != used || l.NextIn != next {
		h.t.Fatalf("limit %s at +%v: tokens %d used %d next in %v, want %d, %d, %v (%+v)",
			l.Limit, h.c.Now().Sub(Start), l.Tokens, l.Used, l.NextIn, tokens, used, next, l)
	}
}

// expectShadow checks the shadow waits of an Admit under a plan in shadow mode.
func (h *harness) expectShadow(r bucket.BatchResult, want ...time.Duration) {
	h.t.Helper()
	if fmt.Sprint(r.ShadowWaits) != fmt.Sprint(want) {
		h.t.Fatalf("shadow waits at +%v = %v, want %v", h.c.Now().Sub(Start), r.ShadowWaits, want)
	}
}
