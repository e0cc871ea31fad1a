package policy

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/wire"
)

const expiryPlans = `
plans:
  p: {max_wait: 1h, limits: [{name: burst, capacity: 3, rate: 1/h}]}
  q: {limits: [{name: monthly, kind: quota, limit: 2, period: month}]}
  c: {max_wait: 1h, limits: [{name: running, kind: concurrency, limit: 1, lease: 10h}]}
  s: {mode: shadow, max_wait: 1h, limits: [{capacity: 1, rate: 1/h}]}
tenants: {acme: p, bob: q, cat: c, dan: s}
`

// TestStepExpiresJobsPastTheirBound: a job whose bound (its plan's max_wait, its own
// Admit-Max-Wait: the smaller) has passed is dead-lettered expired, wherever it is in the batch,
// before the limiter is asked: it spends nothing, and the others are decided as if it were not
// there. An Admit-Max-Wait that does not read is dead too (invalid-max-wait).
func TestStepExpiresJobsPastTheirBound(t *testing.T) {
	p, _ := newPolicy(t, bucket.NewMemory(bucket.Options{}, nil), FailOpen, expiryPlans)
	now := time.Now()
	js := []Job{
		{ID: 1, Weight: 1, Stored: now.Add(-61 * time.Minute)},                        // the plan's hour has passed
		{ID: 2, Weight: 1, Stored: now.Add(-time.Minute)},                             // within it
		{ID: 3, Weight: 1, Stored: now.Add(-2 * time.Second), MaxWait: time.Second},   // its own second has passed
		{ID: 4, Weight: 1, Stored: now.Add(-2 * time.Second), MaxWait: 2 * time.Hour}, // the plan's hour is the smaller
		{ID: 5, Weight: 1, Stored: now, MaxWaitErr: errors.New(`header Admit-Max-Wait is "soon"`)},
		{ID: 6, Weight: 1, Stored: now.Add(-2 * time.Hour), MaxWait: time.Hour}, // both bounds passed
		{ID: 7, Weight: 1}, // no store time: no bound
	}
	d := p.Step(context.Background(), "acme", js, Queue{Owner: 1, WaitedFor: "bucket burst"})
	if got := actions(d); got != "dead admitted dead admitted dead dead admitted" {
		t.Fatalf("verdicts %q", got)
	}
	for _, i := range []int{0, 2, 5} {
		v := d.Verdicts[i]
		if v.Code != wire.CodeExpired || v.WaitedFor != "bucket burst" || !strings.Contains(v.Detail, "it waited for bucket burst") ||
			!strings.Contains(v.Detail, "from its arrival at "+stamp(js[i].Stored)) || !v.Deadline.Before(now) {
			t.Errorf("job %d: %+v", i+1, v)
		}
	}
	if v := d.Verdicts[0]; !strings.Contains(v.Detail, "beyond its bound of 1h (plan p's max_wait)") {
		t.Errorf("job 1: %s", v.Detail)
	}
	if v := d.Verdicts[2]; !strings.Contains(v.Detail, "beyond its bound of 1s (its Admit-Max-Wait)") {
		t.Errorf("job 3: %s", v.Detail)
	}
	if v := d.Verdicts[4]; v.Code != wire.CodeInvalidMaxWait || !strings.Contains(v.Detail, `"soon"`) {
		t.Errorf("job 5: %+v", v)
	}
	if v := d.Verdicts[1]; !v.Deadline.Equal(js[1].Stored.Add(time.Hour)) {
		t.Errorf("job 2's deadline %v, want its store plus the plan's hour", v.Deadline)
	}
	if v := d.Verdicts[3]; !v.Deadline.Equal(js[3].Stored.Add(time.Hour)) {
		t.Errorf("job 4's deadline %v, want its store plus the plan's hour (the smaller)", v.Deadline)
	}
	if !d.Verdicts[6].Deadline.IsZero() {
		t.Errorf("job 7 has a deadline without a store time: %v", d.Verdicts[6].Deadline)
	}
	// The three admitted spent the burst of 3, the expired nothing: the next job waits.
	d = p.Step(context.Background(), "acme", []Job{{ID: 8, Weight: 1, Stored: time.Now()}}, Queue{Owner: 1})
	if v := d.Verdicts[0]; v.Fate != wire.FateDelayed || d.Remaining != 0 {
		t.Errorf("after three admitted: %+v, remaining %d", v, d.Remaining)
	}
	// Unknown what it waited for (this replica never told it): said so.
	d = p.Step(context.Background(), "acme", []Job{{ID: 9, Weight: 1, Stored: time.Now().Add(-2 * time.Hour)}}, Queue{Owner: 1})
	if v := d.Verdicts[0]; v.Code != wire.CodeExpired || v.WaitedFor != "unknown" {
		t.Errorf("expired without a reason known: %+v", v)
	}
}

// TestStepExpiresAtOnceOnAKnownWait: a job told to wait for a quota (an exact wait) longer than
// what is left of its bound is dead at once, not when the bound runs out; so is a job behind it
// as heavy, while a lighter one is asked about again at once. A wait that may end sooner (a
// concurrency limit's lease) is waited out until the bound.
func TestStepExpiresAtOnceOnAKnownWait(t *testing.T) {
	p, _ := newPolicy(t, bucket.NewMemory(bucket.Options{}, nil), FailOpen, expiryPlans)
	ctx := context.Background()
	now := time.Now()
	d := p.Step(ctx, "bob", []Job{{ID: 1, Weight: 1}, {ID: 2, Weight: 1}}, owner) // the month's quota spent
	if got := actions(d); got != "admitted admitted" {
		t.Fatalf("spending the quota: %q", got)
	}
	js := []Job{
		{ID: 3, Weight: 2, Stored: now, MaxWait: time.Hour},
		{ID: 4, Weight: 2, Stored: now, MaxWait: 2 * time.Hour},
		{ID: 5, Weight: 1, Stored: now, MaxWait: time.Hour},
		{ID: 6, Weight: 2},
	}
	d = p.Step(ctx, "bob", js, owner)
	if got := actions(d); got != "dead dead delayed delayed" {
		t.Fatalf("verdicts %q", got)
	}
	for _, i := range []int{0, 1} {
		v := d.Verdicts[i]
		if v.Code != wire.CodeExpired || v.WaitedFor != "quota monthly" || !strings.Contains(v.Detail, "more for quota monthly") ||
			!strings.Contains(v.Detail, "dead-lettered at once") {
			t.Errorf("job %d: %+v", i+3, v)
		}
	}
	if v := d.Verdicts[2]; v.Wait != 0 {
		t.Errorf("the lighter job behind: wait %v, want 0 (asked about again at once)", v.Wait)
	}
	if v := d.Verdicts[3]; v.Wait < 24*time.Hour && time.Now().UTC().Day() < 27 {
		t.Errorf("the unbounded job behind: wait %v, want the month's end", v.Wait)
	}
	// Within its bound, the same wait is a wait.
	d = p.Step(ctx, "bob", []Job{{ID: 7, Weight: 1, Stored: now, MaxWait: 24 * 62 * time.Hour}}, owner)
	if v := d.Verdicts[0]; v.Fate != wire.FateDelayed || !v.Deadline.Equal(now.Add(24*62*time.Hour)) {
		t.Errorf("a bound of two months: %+v", v)
	}

	// A concurrency limit's wait is the lease's end at most: it waits, with its deadline.
	d = p.Step(ctx, "cat", []Job{{ID: 1, Weight: 1}}, owner)
	d = p.Step(ctx, "cat", []Job{{ID: 2, Weight: 1, Stored: now}}, owner)
	if v := d.Verdicts[0]; v.Fate != wire.FateDelayed || v.Wait < time.Hour || !v.Deadline.Equal(now.Add(time.Hour)) {
		t.Errorf("behind a lease of 10h, bound 1h: %+v (reason %s)", v, d.Reason)
	}
	if got := d.WaitedFor(d.Verdicts[0]); got != "concurrency running" {
		t.Errorf("WaitedFor %q", got)
	}
}

// TestStepExpiresPausedJobs: a paused tenant's jobs wait with their deadline, and expire at it,
// having waited for the pause.
func TestStepExpiresPausedJobs(t *testing.T) {
	p, _ := newPolicy(t, bucket.NewMemory(bucket.Options{}, nil), FailOpen, expiryPlans)
	p.SetPauses(map[string]time.Time{"acme": time.Now().Add(10 * time.Hour)})
	now := time.Now()
	d := p.Step(context.Background(), "acme", []Job{{ID: 1, Weight: 1, Stored: now.Add(-2 * time.Hour)}, {ID: 2, Weight: 1, Stored: now}}, owner)
	if got := actions(d); got != "dead paused" {
		t.Fatalf("verdicts %q", got)
	}
	if v := d.Verdicts[0]; v.Code != wire.CodeExpired || v.WaitedFor != ReasonPaused {
		t.Errorf("expired while paused: %+v", v)
	}
	if v := d.Verdicts[1]; !v.Deadline.Equal(now.Add(time.Hour)) || d.WaitedFor(v) != ReasonPaused {
		t.Errorf("paused within its bound: %+v", v)
	}
	if r := WaitedForReason("quota monthly"); r != "quota" {
		t.Errorf("WaitedForReason = %q", r)
	}
	if r := WaitedForReason(""); r != "unknown" {
		t.Errorf("WaitedForReason(\"\") = %q", r)
	}
}

// TestStepAsksAJobAdmittedBeforeMaybeBeforeItExpires: a job past its bound that an earlier holder of its
// queue may have forwarded (Again) is asked about: admitted when it fits, not dead-lettered.
func TestStepAsksAJobAdmittedBeforeMaybeBeforeItExpires(t *testing.T) {
	p, _ := newPolicy(t, bucket.NewMemory(bucket.Options{}, nil), FailOpen, expiryPlans)
	old := time.Now().Add(-2 * time.Hour)
	d := p.Step(context.Background(), "acme", []Job{{ID: 1, Weight: 1, Stored: old, Again: true}, {ID: 2, Weight: 1, Stored: old}}, owner)
	if got := actions(d); got != "admitted dead" {
		t.Errorf("verdicts %q, want the unasked job admitted, the other expired", got)
	}
}

// TestShadowPlanExpiresNothing: a plan in shadow mode holds nothing back: no job expires.
func TestShadowPlanExpiresNothing(t *testing.T) {
	p, _ := newPolicy(t, bucket.NewMemory(bucket.Options{}, nil), FailOpen, expiryPlans)
	old := time.Now().Add(-2 * time.Hour)
	d := p.Step(context.Background(), "dan", []Job{{ID: 1, Weight: 1, Stored: old}, {ID: 2, Weight: 1, Stored: old, MaxWait: time.Second}}, Queue{})
	if got := actions(d); got != "admitted shadow_delayed" {
		t.Errorf("verdicts %q, want both forwarded", got)
	}
}
