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

func actions(d Decision) string {
	var b strings.Builder
	for _, v := range d.Verdicts {
		b.WriteString(v.Action.String())
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
	d := p.Decide(ctx, "acme", bucket.Ingest, js)
	if got := actions(d); got != "forward dead dead forward forward" {
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
	// The bucket is empty now: the next job goes to the lane with the wait until it fits.
	d = p.Decide(ctx, "acme", bucket.Ingest, []Job{{ID: 9, Weight: 1}})
	if v := d.Verdicts[0]; v.Action != ToLane || v.Wait <= 0 || v.Wait > 100*time.Millisecond || !d.LaneOpen || d.Limit != "burst" {
		t.Errorf("after the burst: %+v, %+v", v, d)
	}
	// In the lane, the head waits for its weight.
	d = p.Decide(ctx, "acme", bucket.Lane, []Job{{ID: 9, Weight: 1}})
	if v := d.Verdicts[0]; v.Action != Wait || v.Wait <= 0 {
		t.Errorf("lane head: %+v", v)
	}
}

// TestDecideUnknownAndInvalidTenants: no plan, or a name that cannot key buckets, is dead with
// its own code, without a limiter call.
func TestDecideUnknownAndInvalidTenants(t *testing.T) {
	p, _ := newPolicy(t, bucket.NewMemory(bucket.Options{}, nil), FailOpen, plansYAML)
	d := p.Decide(context.Background(), "nobody", bucket.Ingest, jobs(1, 1))
	for _, v := range d.Verdicts {
		if v.Action != Dead || v.Code != wire.CodeUnknownTenant || !strings.Contains(v.Detail, `"nobody"`) {
			t.Errorf("unknown tenant: %+v", v)
		}
	}
	if d.Took != 0 {
		t.Errorf("a limiter call was made for a tenant without a plan")
	}
	p, _ = newPolicy(t, bucket.NewMemory(bucket.Options{}, nil), FailOpen, plansYAML+"default_plan: p\n")
	d = p.Decide(context.Background(), "a{b", bucket.Ingest, jobs(1))
	if v := d.Verdicts[0]; v.Action != Dead || v.Code != wire.CodeInvalidTenant {
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
			if d := p.Decide(ctx, "acme", bucket.Ingest, jobs(1)); d.Err != nil || d.Verdicts[0].Action != Forward {
				t.Fatalf("with redis: %+v", d)
			}
			srv.Kill()
			var waits []time.Duration
			for range 4 {
				d := p.Decide(ctx, "acme", bucket.Ingest, jobs(1, 1))
				if d.Err == nil {
					t.Fatal("no error with redis down")
				}
				for _, v := range d.Verdicts {
					switch {
					case mode == FailOpen && (v.Action != Forward || !v.Degraded):
						t.Fatalf("fail open: %+v", v)
					case mode == FailClosed && (v.Action != Held || v.Wait <= 0):
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
				return p.Decide(ctx, "acme", bucket.Ingest, jobs(1)).Err == nil
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
	if d := p.Decide(context.Background(), "newcomer", bucket.Ingest, jobs(1)); d.Verdicts[0].Action != Dead {
		t.Fatalf("newcomer before: %+v", d.Verdicts[0])
	}
	ps, err := plans.Parse("plans.yaml", []byte(plansYAML+"default_plan: p\n"))
	if err != nil {
		t.Fatal(err)
	}
	p.SetPlans(ps)
	if d := p.Decide(context.Background(), "newcomer", bucket.Ingest, jobs(1)); d.Verdicts[0].Action != Forward {
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
	d := p.Decide(ctx, "acme", bucket.Ingest, jobs(1, 1, 1, 1))
	var got []string
	for _, v := range d.Verdicts {
		got = append(got, fmt.Sprintf("%v shadow=%v wait=%v", v.Action, v.Shadow, v.Wait))
	}
	want := []string{"forward shadow=true wait=0s", "forward shadow=true wait=0s", "forward shadow=true wait=100ms", "forward shadow=true wait=200ms"}
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
	p.Decide(ctx, "acme", bucket.Ingest, jobs(1))
	l.Down.Store(true)
	p.Decide(ctx, "acme", bucket.Ingest, jobs(1))
	if closed(ch) {
		t.Fatal("closed before the limiter failed and answered again")
	}
	l.Down.Store(false)
	p.Decide(ctx, "acme", bucket.Ingest, jobs(1))
	if !closed(ch) {
		t.Fatal("not closed when the limiter answered again")
	}
	if next := p.Recovered(); closed(next) {
		t.Fatal("the next channel is closed before the next outage")
	}
}
