package policy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/bucket/buckettest"
	"github.com/admitter/admitter/internal/testenv"
	"github.com/admitter/admitter/plans"
	"github.com/admitter/admitter/wire"
)

const plansYAML = `
plans:
  p: {limits: [{name: burst, capacity: 3, rate: 10/s}]}
tenants: {acme: p}
`

func newPolicy(t *testing.T, l Limiter, mode FailMode, yaml string) (*Policy, *bytes.Buffer) {
	t.Helper()
	ps, err := plans.Parse("plans.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	p, err := New(Config{Limiter: l, Plans: ps, FailMode: mode, Timeout: 100 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return p, &logs
}

func jobs(weights ...int64) []Job {
	out := make([]Job, len(weights))
	for i, w := range weights {
		out[i] = Job{ID: int64(i + 1), Weight: w}
	}
	return out
}

// owner is the queue's owner in these tests.
var owner = Queue{Owner: 1}

func actions(d Decision) string {
	var b strings.Builder
	for _, v := range d.Verdicts {
		b.WriteString(v.Fate.String())
		b.WriteByte(' ')
	}
	return strings.TrimSpace(b.String())
}

// TestDecideVerdicts: one verdict per job, in order; what can never pass is dead with the code
// that says why, and the rest is decided together.
func TestDecideVerdicts(t *testing.T) {
	p, _ := newPolicy(t, bucket.NewMemory(bucket.Options{}, nil), FailOpen, plansYAML)
	ctx := context.Background()
	js := jobs(1, 4, 1, 1, 1)
	js[2].WeightErr = errors.New(`header Admit-Weight is "x"`)
	d := p.Step(ctx, "acme", js, owner)
	if got := actions(d); got != "admitted dead dead admitted admitted" {
		t.Fatalf("verdicts %q", got)
	}
	if v := d.Verdicts[1]; v.Code != wire.CodeWeightOverCapacity || !strings.Contains(v.Detail, "weight 4 exceeds 3") {
		t.Errorf("over capacity: %+v", v)
	}
	if v := d.Verdicts[2]; v.Code != wire.CodeInvalidWeight || !strings.Contains(v.Detail, `"x"`) {
		t.Errorf("invalid weight: %+v", v)
	}
	if d.Plan == nil || d.Plan.Name != "p" || d.Took <= 0 || d.Err != nil {
		t.Errorf("decision %+v", d)
	}
	// The bucket is empty now: the next job waits in the queue until it fits.
	d = p.Step(ctx, "acme", []Job{{ID: 9, Weight: 1}}, owner)
	if v := d.Verdicts[0]; v.Fate != wire.FateDelayed || v.Wait <= 0 || v.Wait > 100*time.Millisecond || d.Limit != "burst" || d.Reason != "bucket" {
		t.Errorf("after the burst: %+v, %+v", v, d)
	}
	// Another replica's step, while this one holds the queue, admits nothing: a handover.
	d = p.Step(ctx, "acme", []Job{{ID: 9, Weight: 1}}, Queue{Owner: 2})
	if v := d.Verdicts[0]; v.Fate != wire.FateDelayed || v.Wait <= 0 || d.Reason != ReasonHandover {
		t.Errorf("another owner: %+v, %+v", v, d)
	}
}

// TestDecideUnknownAndInvalidTenants: no plan, or a name that cannot key buckets, is dead with
// its own code, without a limiter call.
func TestDecideUnknownAndInvalidTenants(t *testing.T) {
	p, _ := newPolicy(t, bucket.NewMemory(bucket.Options{}, nil), FailOpen, plansYAML)
	d := p.Step(context.Background(), "nobody", jobs(1, 1), owner)
	for _, v := range d.Verdicts {
		if v.Fate != wire.FateDead || v.Code != wire.CodeUnknownTenant || !strings.Contains(v.Detail, `"nobody"`) {
			t.Errorf("unknown tenant: %+v", v)
		}
	}
	if d.Took != 0 {
		t.Errorf("a limiter call was made for a tenant without a plan")
	}
	p, _ = newPolicy(t, bucket.NewMemory(bucket.Options{}, nil), FailOpen, plansYAML+"default_plan: p\n")
	d = p.Step(context.Background(), "a{b", jobs(1), owner)
	if v := d.Verdicts[0]; v.Fate != wire.FateDead || v.Code != wire.CodeInvalidTenant {
		t.Errorf("invalid tenant: %+v", v)
	}
}

// TestFailModes: with Redis gone, open forwards everything marked degraded, closed holds
// everything with a backoff that grows; each logs the outage once and the recovery once.
func TestFailModes(t *testing.T) {
	for _, mode := range []FailMode{FailOpen, FailClosed} {
		t.Run(string(mode), func(t *testing.T) {
			srv := testenv.StartPersistentRedis(t) // a fresh Redis without a file starts with empty buckets
			r, err := bucket.DialRedis(srv.URL(), "", bucket.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			p, logs := newPolicy(t, r, mode, plansYAML)
			ctx := context.Background()
			if err := r.Prepare(ctx); err != nil { // as the service does at start
				t.Fatal(err)
			}
			if d := p.Step(ctx, "acme", jobs(1), owner); d.Err != nil || d.Verdicts[0].Fate != wire.FateAdmitted {
				t.Fatalf("with redis: %+v", d)
			}
			srv.Kill()
			var waits []time.Duration
			for range 4 {
				d := p.Step(ctx, "acme", jobs(1, 1), owner)
				if d.Err == nil {
					t.Fatal("no error with redis down")
				}
				for _, v := range d.Verdicts {
					switch {
					case mode == FailOpen && v.Fate != wire.FateDegraded:
						t.Fatalf("fail open: %+v", v)
					case mode == FailClosed && (v.Fate != wire.FateHeld || v.Wait <= 0):
						t.Fatalf("fail closed: %+v", v)
					}
				}
				waits = append(waits, d.Verdicts[0].Wait)
			}
			if !p.LimiterDown() {
				t.Error("LimiterDown false during the outage")
			}
			if mode == FailClosed && !(waits[3] > waits[0]) {
				t.Errorf("held waits %v do not grow", waits)
			}
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			testenv.WaitFor(t, 10*time.Second, "a decision after redis is back", func() bool {
				return p.Step(ctx, "acme", jobs(1), owner).Err == nil
			})
			if n := strings.Count(logs.String(), "limiter unavailable"); n != 1 {
				t.Errorf("'limiter unavailable' logged %d times, want once:\n%s", n, logs)
			}
			if n := strings.Count(logs.String(), "limiter available again"); n != 1 {
				t.Errorf("'limiter available again' logged %d times, want once:\n%s", n, logs)
			}
		})
	}
}

// TestSetPlans: a new set of plans applies to the next decision.
func TestSetPlans(t *testing.T) {
	p, _ := newPolicy(t, bucket.NewMemory(bucket.Options{}, nil), FailOpen, plansYAML)
	if d := p.Step(context.Background(), "newcomer", jobs(1), owner); d.Verdicts[0].Fate != wire.FateDead {
		t.Fatalf("newcomer before: %+v", d.Verdicts[0])
	}
	ps, err := plans.Parse("plans.yaml", []byte(plansYAML+"default_plan: p\n"))
	if err != nil {
		t.Fatal(err)
	}
	p.SetPlans(ps)
	if d := p.Step(context.Background(), "newcomer", jobs(1), owner); d.Verdicts[0].Fate != wire.FateAdmitted {
		t.Fatalf("newcomer after: %+v", d.Verdicts[0])
	}
}

func TestNewRejects(t *testing.T) {
	ps, _ := plans.Parse("plans.yaml", []byte(plansYAML))
	for _, c := range []Config{{Plans: ps}, {Limiter: bucket.NewMemory(bucket.Options{}, nil)},
		{Limiter: bucket.NewMemory(bucket.Options{}, nil), Plans: ps, FailMode: "sideways"}} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) accepted", c)
		}
	}
}

// TestShadowMode: under a plan in shadow mode every job is forwarded and every request allowed,
// each with the wait the plan would have given it; the decision is shadow_delayed when it would
// have waited.
func TestShadowMode(t *testing.T) {
	const yaml = `
plans:
  trial: {mode: shadow, limits: [{name: burst, capacity: 2, rate: 10/s}]}
tenants: {acme: trial, bob: trial}
`
	clock := time.Unix(1_800_000_000, 0)
	p, _ := newPolicy(t, bucket.NewMemory(bucket.Options{}, func() time.Time { return clock }), FailOpen, yaml)
	ctx := context.Background()
	d := p.Step(ctx, "acme", jobs(1, 1, 1, 1), owner)
	var got []string
	for _, v := range d.Verdicts {
		got = append(got, fmt.Sprintf("%v shadow=%v wait=%v", v.Fate, v.Shadow, v.Wait))
	}
	want := []string{"admitted shadow=true wait=0s", "admitted shadow=true wait=0s", "shadow_delayed shadow=true wait=100ms", "shadow_delayed shadow=true wait=200ms"}
	if !slices.Equal(got, want) {
		t.Errorf("verdicts %q, want %q", got, want)
	}

	for i, want := range []struct {
		wait     time.Duration
		decision string
		header   string
	}{{0, wire.DecisionAdmitted, "admitted"}, {0, wire.DecisionAdmitted, "admitted"}, {100 * time.Millisecond, wire.DecisionShadowDelayed, "delayed 100"}} {
		a := p.Allow(ctx, wire.SourceHTTP, "bob", 1)
		hdr := map[string]string{}
		a.Headers(func(k, v string) { hdr[k] = v })
		if !a.Allowed || !a.Shadow || a.ShadowWait != want.wait || a.Decision() != want.decision || a.Status() != 200 ||
			hdr[wire.HeaderShadow] != want.header || hdr[wire.HeaderRetryAfter] != "" || hdr[wire.HeaderRateLimit] != "" {
			t.Errorf("request %d: %+v, headers %v; want allowed, shadow wait %v, %s, header %q", i, a, hdr, want.wait, want.decision, want.header)
		}
		if body := string(a.AppendBody(nil)); !strings.Contains(body, `"shadow":"`+want.header+`"`) {
			t.Errorf("request %d: body %s lacks the shadow field", i, body)
		}
	}
}

// TestRecovered: the channel is closed when the limiter answers again after failing, not
// before, and a new one waits for the next outage's end.
func TestRecovered(t *testing.T) {
	l := &buckettest.Flaky{Memory: bucket.NewMemory(bucket.Options{}, nil)}
	p, _ := newPolicy(t, l, FailClosed, plansYAML)
	ctx := context.Background()
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	ch := p.Recovered()
	p.Step(ctx, "acme", jobs(1), owner)
	l.Down.Store(true)
	p.Step(ctx, "acme", jobs(1), owner)
	if closed(ch) {
		t.Fatal("closed before the limiter failed and answered again")
	}
	l.Down.Store(false)
	p.Step(ctx, "acme", jobs(1), owner)
	if !closed(ch) {
		t.Fatal("not closed when the limiter answered again")
	}
	if next := p.Recovered(); closed(next) {
		t.Fatal("the next channel is closed before the next outage")
	}
}

// TestPausedStepSaysWhatItOwes: a paused tenant's jobs wait without a decision, but what its
// queue owes the limiter is said all the same: the forwards stored late are charged, and the
// jobs stored before are answered stored after the pause. Before, the step returned without a
// limiter call, the queue took its claim as said and dropped it: the late weight went
// uncharged and a stored job was decided again.
func TestPausedStepSaysWhatItOwes(t *testing.T) {
	clock := time.Unix(1_700_000_000, 0)
	p, _ := newPolicy(t, bucket.NewMemory(bucket.Options{}, func() time.Time { return clock }), FailOpen, plansYAML)
	ctx := context.Background()
	p.SetPauses(map[string]time.Time{"acme": time.Now().Add(time.Hour)})
	claim := Queue{Owner: 1, LateWeight: 3, Late: time.Second, Stored: 5, Keep: time.Hour}
	d := p.Step(ctx, "acme", []Job{{ID: 5, Weight: 1}, {ID: 6, Weight: 1}}, claim)
	if got := actions(d); got != "paused paused" || d.Err != nil || !d.Said {
		t.Fatalf("paused: verdicts %q, err %v, said %v; want both paused, the claim said", got, d.Err, d.Said)
	}
	if d = p.Step(ctx, "acme", jobs(1), owner); d.Said || d.Took != 0 {
		t.Errorf("paused, owing nothing: said %v, took %v; want no call", d.Said, d.Took)
	}
	if d = p.Step(ctx, "nobody", jobs(1), claim); d.Said {
		t.Errorf("a tenant without a plan: said %v, want false (no call can carry the claim: the queue keeps it)", d.Said)
	}
	p.SetPauses(nil)
	d = p.Step(ctx, "acme", []Job{{ID: 5, Weight: 1}, {ID: 6, Weight: 1}}, owner)
	if got := actions(d); got != "stored delayed" {
		t.Errorf("after the pause: verdicts %q, want stored (5 was stored) and delayed (the 3 stored late took the burst of 3)", got)
	}
}

// giveBackFails is a limiter whose pooled decisions could not give their unused grants back.
type giveBackFails struct{ *bucket.Memory }

func (g giveBackFails) Admit(ctx context.Context, b bucket.Batch) (bucket.BatchResult, error) {
	res, err := g.Memory.Admit(ctx, b)
	res.GiveBackErr = errors.New("bucket: pool w: 1 unused grants of tenant \"acme\" not given back: connection lost")
	return res, err
}

// TestGiveBackErrorReachesTheQueue: a decision whose pool grants could not be given back stands
// (no limiter error: its verdicts are the limiter's) and carries the error for the queue to count
// and log.
func TestGiveBackErrorReachesTheQueue(t *testing.T) {
	p, _ := newPolicy(t, giveBackFails{bucket.NewMemory(bucket.Options{}, nil)}, FailOpen, plansYAML)
	d := p.Step(context.Background(), "acme", jobs(1), owner)
	if got := actions(d); got != "admitted" || d.Err != nil || !d.Said {
		t.Errorf("verdicts %q, err %v, said %v: want admitted, no error, said", got, d.Err, d.Said)
	}
	if d.GiveBackErr == nil || !strings.Contains(d.GiveBackErr.Error(), "not given back") {
		t.Errorf("give-back error %v, want the limiter's", d.GiveBackErr)
	}
}
