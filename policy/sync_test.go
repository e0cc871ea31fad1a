package policy

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/internal/testenv"
	"github.com/admitter/admitter/plans"
	"github.com/admitter/admitter/wire"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// clock is a settable clock for the in-process limiter: time moves only when the test says so.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time          { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// memoryAt is an in-process limiter on a clock the test drives.
func memoryAt() (*bucket.Memory, *clock) {
	c := &clock{t: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)}
	return bucket.NewMemory(bucket.Options{}, c.now), c
}

// headers collects an answer's headers.
func headers(a Answer) map[string]string {
	h := map[string]string{}
	a.Headers(func(k, v string) { h[k] = v })
	return h
}

// TestAllowBooksNothing: Allow spends the burst, then denies with the time until one token is
// back, charging and booking nothing; the answer carries 429, Retry-After and the RateLimit
// headers of the binding limit.
func TestAllowBooksNothing(t *testing.T) {
	lim, clk := memoryAt()
	p, _ := newPolicy(t, lim, FailOpen, plansYAML) // acme: burst 3 at 10/s
	ctx := context.Background()
	for i := range 3 {
		a := p.Allow(ctx, wire.SourceHTTP, "acme", 1)
		if !a.Allowed || a.Outcome != bucket.Admitted || a.Remaining != int64(2-i) || a.Limit != "burst" || a.Status() != 200 || a.Decision() != wire.DecisionAdmitted {
			t.Fatalf("call %d: %+v", i, a)
		}
		h := headers(a)
		if h[wire.HeaderRateLimitPolicy] != `"burst";q=3;w=1` || h[wire.HeaderRateLimit] != `"burst";r=`+string(rune('2'-i))+`;t=1` || h[wire.HeaderRetryAfter] != "" {
			t.Fatalf("call %d headers %v", i, h)
		}
	}
	for range 5 { // denied again and again: nothing is taken
		a := p.Allow(ctx, wire.SourceHTTP, "acme", 1)
		if a.Allowed || a.Reserved || a.Outcome != bucket.Throttled || a.Wait <= 0 || a.Wait > 100*time.Millisecond ||
			a.Status() != 429 || a.Decision() != wire.DecisionThrottled {
			t.Fatalf("after the burst: %+v", a)
		}
		if h := headers(a); h[wire.HeaderRetryAfter] != "1" || h[wire.HeaderRateLimit] != `"burst";r=0;t=1` {
			t.Fatalf("denied headers %v", h)
		}
		if b := a.Body().(wire.Decision); b.Allowed || b.Plan != "p" || b.Tenant != "acme" || b.WaitMs != 100 || b.Limit != "burst" {
			t.Fatalf("denied body %+v", b)
		}
	}
	st, err := p.Inspect(ctx, "acme")
	if err != nil || st.Reservations != 0 || st.Limits[0].Tokens != 0 {
		t.Fatalf("inspect after denials: %+v, %v", st, err)
	}
	clk.advance(100 * time.Millisecond) // one token back, not more: the denials took nothing
	if a := p.Allow(ctx, wire.SourceHTTP, "acme", 1); !a.Allowed {
		t.Fatalf("one token later: %+v", a)
	}
	if a := p.Allow(ctx, wire.SourceHTTP, "acme", 1); a.Allowed {
		t.Fatalf("a second request on one token: %+v", a)
	}
	// A weight that needs more than the bucket holds waits for all of it.
	clk.advance(100 * time.Millisecond)
	if a := p.Allow(ctx, wire.SourceHTTP, "acme", 3); a.Allowed || a.Wait != 200*time.Millisecond {
		t.Fatalf("weight 3 on one token: %+v", a)
	}
}

// TestReserveBooksAndClaims: Reserve books the slot for its key; asked early it is told the
// rest of the wait, at or after the slot it is allowed without a second charge, and again
// after that it is a duplicate, free too.
func TestReserveBooksAndClaims(t *testing.T) {
	lim, clk := memoryAt()
	p, _ := newPolicy(t, lim, FailOpen, plansYAML)
	ctx := context.Background()
	for range 3 {
		p.Allow(ctx, wire.SourceHTTP, "acme", 1)
	}
	a := p.Reserve(ctx, wire.SourceNATS, "acme", 1, "order-1")
	if a.Allowed || !a.Reserved || a.Outcome != bucket.Delayed || a.Wait != 100*time.Millisecond || a.Status() != 429 || a.Decision() != wire.DecisionDelayed {
		t.Fatalf("reserve on an empty bucket: %+v", a)
	}
	if b := a.Body().(wire.Decision); !b.Reserved || b.WaitMs != 100 {
		t.Fatalf("reserved body %+v", b)
	}
	// The slot is taken: a plain request now waits behind it.
	if a := p.Allow(ctx, wire.SourceHTTP, "acme", 1); a.Allowed || a.Wait != 200*time.Millisecond {
		t.Fatalf("allow behind a reservation: %+v", a)
	}
	st, _ := p.Inspect(ctx, "acme")
	if st.Reservations != 1 || st.LatestSlot == nil || st.WaitMs != 200 || st.Limit != "burst" {
		t.Fatalf("inspect with a reservation: %+v", st)
	}
	clk.advance(40 * time.Millisecond)
	if a := p.Reserve(ctx, wire.SourceNATS, "acme", 1, "order-1"); a.Allowed || !a.Reserved || a.Outcome != bucket.Early || a.Wait != 60*time.Millisecond {
		t.Fatalf("early: %+v", a)
	}
	clk.advance(60 * time.Millisecond)
	if a := p.Reserve(ctx, wire.SourceNATS, "acme", 1, "order-1"); !a.Allowed || a.Outcome != bucket.AdmittedAtSlot {
		t.Fatalf("at the slot: %+v", a)
	}
	if a := p.Reserve(ctx, wire.SourceNATS, "acme", 1, "order-1"); !a.Allowed || a.Outcome != bucket.Duplicate {
		t.Fatalf("again: %+v", a)
	}
	// Nothing was charged twice: the token that refilled since the slot is there.
	clk.advance(100 * time.Millisecond)
	if a := p.Allow(ctx, wire.SourceHTTP, "acme", 1); !a.Allowed || a.Remaining != 0 {
		t.Fatalf("after the claims: %+v", a)
	}
	// A reservation that fits now is allowed at once, and free when repeated.
	clk.advance(time.Second)
	if a := p.Reserve(ctx, wire.SourceHTTP, "acme", 2, "order-2"); !a.Allowed || a.Outcome != bucket.Admitted || a.Remaining != 1 {
		t.Fatalf("reserve that fits: %+v", a)
	}
	if a := p.Reserve(ctx, wire.SourceHTTP, "acme", 2, "order-2"); !a.Allowed || a.Outcome != bucket.Duplicate || a.Remaining != 1 {
		t.Fatalf("repeat of an allowed reservation: %+v", a)
	}
}

// TestSyncRefusals: what can never be decided is refused with its code, the matching status and
// no RateLimit header, without a limiter call.
func TestSyncRefusals(t *testing.T) {
	lim, _ := memoryAt()
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		yaml   string
		ask    func(p *Policy) Answer
		code   wire.Code
		status int
		detail string
	}{
		{"unknown tenant", plansYAML, func(p *Policy) Answer { return p.Allow(ctx, wire.SourceHTTP, "nobody", 1) },
			wire.CodeUnknownTenant, 404, `tenant "nobody" has no plan`},
		{"empty tenant", plansYAML + "default_plan: p\n", func(p *Policy) Answer { return p.Allow(ctx, wire.SourceHTTP, "", 1) },
			wire.CodeInvalidTenant, 400, "empty"},
		{"tenant with a brace", plansYAML + "default_plan: p\n", func(p *Policy) Answer { return p.Allow(ctx, wire.SourceHTTP, "a{b", 1) },
			wire.CodeInvalidTenant, 400, `"a{b"`},
		{"weight zero", plansYAML, func(p *Policy) Answer { return p.Allow(ctx, wire.SourceHTTP, "acme", 0) },
			wire.CodeInvalidWeight, 400, "weight 0 is not an integer from 1 to 1099511627776"},
		{"weight over 2^40", plansYAML, func(p *Policy) Answer { return p.Allow(ctx, wire.SourceHTTP, "acme", 1<<40+1) },
			wire.CodeInvalidWeight, 400, "1099511627777"},
		{"weight over capacity", plansYAML, func(p *Policy) Answer { return p.Allow(ctx, wire.SourceHTTP, "acme", 4) },
			wire.CodeWeightOverCapacity, 422, "weight 4 exceeds 3, the smallest capacity of plan p"},
		{"reserve without key", plansYAML, func(p *Policy) Answer { return p.Reserve(ctx, wire.SourceHTTP, "acme", 1, "") },
			wire.CodeInvalidRequest, 400, "1 to 256 bytes, got 0"},
		{"reserve with a long key", plansYAML, func(p *Policy) Answer {
			return p.Reserve(ctx, wire.SourceHTTP, "acme", 1, strings.Repeat("k", 257))
		}, wire.CodeInvalidRequest, 400, "got 257"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := newPolicy(t, lim, FailClosed, tc.yaml)
			a := tc.ask(p)
			if a.Allowed || a.Code != tc.code || a.Status() != tc.status || !strings.Contains(a.Detail, tc.detail) ||
				a.Decision() != wire.DecisionRejected || !a.Refused() {
				t.Fatalf("answer %+v (status %d), want %s %d %q", a, a.Status(), tc.code, tc.status, tc.detail)
			}
			if b, ok := a.Body().(wire.ErrorBody); !ok || b.Error != tc.code || b.Detail != a.Detail || b.WaitMs != 0 {
				t.Errorf("body %+v", a.Body())
			}
			if h := headers(a); len(h) != 0 {
				t.Errorf("headers %v on a refusal", h)
			}
		})
	}
}

// TestSyncFailModes: with Redis gone, fail open allows marked degraded (200, no RateLimit
// headers), fail closed refuses with limiter-unavailable (503, Retry-After, wait_ms); what is
// refused for itself is still refused, not degraded.
func TestSyncFailModes(t *testing.T) {
	for _, mode := range []FailMode{FailOpen, FailClosed} {
		t.Run(string(mode), func(t *testing.T) {
			srv := testenv.StartPersistentRedis(t)
			r, err := bucket.DialRedis(srv.URL(), "", bucket.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			p, logs := newPolicy(t, r, mode, plansYAML)
			ctx := context.Background()
			if a := p.Allow(ctx, wire.SourceHTTP, "acme", 1); !a.Allowed || a.Degraded || a.Took <= 0 {
				t.Fatalf("with redis: %+v", a)
			}
			srv.Kill()
			for _, a := range []Answer{p.Allow(ctx, wire.SourceHTTP, "acme", 1), p.Reserve(ctx, wire.SourceNATS, "acme", 1, "k")} {
				if a.Err == nil {
					t.Fatalf("no error with redis down: %+v", a)
				}
				h := headers(a)
				switch mode {
				case FailOpen:
					if !a.Allowed || !a.Degraded || a.Code != "" || a.Status() != 200 || a.Decision() != wire.DecisionDegraded || len(h) != 0 {
						t.Fatalf("fail open: %+v %v", a, h)
					}
					if b := a.Body().(wire.Decision); !b.Degraded || !b.Allowed || b.Plan != "p" {
						t.Fatalf("fail open body %+v", b)
					}
				case FailClosed:
					if a.Allowed || a.Code != wire.CodeLimiterUnavailable || a.Status() != 503 || a.Wait <= 0 || a.Decision() != wire.DecisionUnavailable ||
						h[wire.HeaderRetryAfter] == "" || h[wire.HeaderRateLimit] != "" || strings.Contains(a.Detail, "127.0.0.1") {
						t.Fatalf("fail closed: %+v %v", a, h)
					}
					if b := a.Body().(wire.ErrorBody); b.WaitMs != wire.Millis(a.Wait) || b.WaitMs <= 0 {
						t.Fatalf("fail closed body %+v", b)
					}
				}
			}
			if a := p.Allow(ctx, wire.SourceHTTP, "nobody", 1); a.Code != wire.CodeUnknownTenant || a.Degraded {
				t.Fatalf("unknown tenant with redis down: %+v", a)
			}
			if a := p.Allow(ctx, wire.SourceHTTP, "acme", 4); a.Code != wire.CodeWeightOverCapacity || a.Degraded {
				t.Fatalf("over capacity with redis down: %+v", a)
			}
			if !p.LimiterDown() || strings.Count(logs.String(), "limiter unavailable") != 1 {
				t.Errorf("outage not recorded once: down %v, logs:\n%s", p.LimiterDown(), logs)
			}
		})
	}
}

// TestSyncDeadline: a stalled Redis answers nothing; every decision still returns within the
// policy's timeout, by the fail mode.
func TestSyncDeadline(t *testing.T) {
	srv := testenv.StartPersistentRedis(t) // a fresh Redis without a file starts with empty buckets
	r, err := bucket.DialRedis(srv.URL(), "", bucket.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	p, _ := newPolicy(t, r, FailClosed, plansYAML) // timeout 100ms
	ctx := context.Background()
	if a := p.Allow(ctx, wire.SourceHTTP, "acme", 1); !a.Allowed {
		t.Fatalf("with redis: %+v", a)
	}
	srv.Pause()
	defer srv.Resume()
	begin := time.Now()
	a := p.Allow(ctx, wire.SourceHTTP, "acme", 1)
	if took := time.Since(begin); a.Code != wire.CodeLimiterUnavailable || took > 2*time.Second {
		t.Fatalf("stalled redis: %+v after %v", a, took)
	}
	if ErrorKind(a.Err) != "timeout" {
		t.Errorf("error kind %q of %v, want timeout", ErrorKind(a.Err), a.Err)
	}
}

// TestSyncSharesQueueBuckets: requests and queued jobs of a tenant draw on the same buckets.
func TestSyncSharesQueueBuckets(t *testing.T) {
	lim, _ := memoryAt()
	p, _ := newPolicy(t, lim, FailOpen, plansYAML)
	ctx := context.Background()
	for range 3 {
		if a := p.Allow(ctx, wire.SourceHTTP, "acme", 1); !a.Allowed {
			t.Fatalf("allow: %+v", a)
		}
	}
	if d := p.Step(ctx, "acme", jobs(1), owner); d.Verdicts[0].Fate != wire.FateDelayed {
		t.Fatalf("a job after the requests spent the burst: %+v", d.Verdicts[0])
	}
}

// TestSyncTelemetry: every synchronous decision is one "limiter decide" span and one count in
// the decisions metric, labelled by source, plan and outcome.
func TestSyncTelemetry(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewSpanRecorder()
	plans, err := plans.Parse("plans.yaml", []byte(plansYAML))
	if err != nil {
		t.Fatal(err)
	}
	lim, _ := memoryAt()
	p, err := New(Config{Limiter: lim, Plans: plans, Logger: slog.New(slog.DiscardHandler),
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 4 {
		p.Allow(ctx, wire.SourceHTTP, "acme", 1)
	}
	p.Reserve(ctx, wire.SourceNATS, "acme", 1, "k")
	p.Allow(ctx, wire.SourceNATS, "nobody", 1)

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch m.Name {
			case wire.MetricDecisions.Name:
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					src, _ := dp.Attributes.Value("source")
					plan, _ := dp.Attributes.Value("plan")
					out, _ := dp.Attributes.Value("outcome")
					got[src.AsString()+" "+plan.AsString()+" "+out.AsString()] += dp.Value
				}
			case wire.MetricDecisionTime.Name:
				if n := m.Data.(metricdata.Histogram[float64]).DataPoints[0].Count; n != 5 {
					t.Errorf("%d limiter calls timed, want 5 (the unknown tenant needs none)", n)
				}
			}
		}
	}
	want := map[string]int64{"http p admitted": 3, "http p throttled": 1, "nats p delayed": 1, "nats  rejected": 1}
	if len(got) != len(want) {
		t.Errorf("decisions %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("decisions %q = %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
	ended := spans.Ended()
	if len(ended) != 6 {
		t.Fatalf("%d spans, want 6", len(ended))
	}
	last := map[attribute.Key]attribute.Value{}
	for _, kv := range ended[4].Attributes() {
		last[kv.Key] = kv.Value
	}
	if ended[4].Name() != "limiter decide" || last[AttrSource].AsString() != "nats" || last[AttrDecision].AsString() != wire.DecisionDelayed ||
		last[AttrTenant].AsString() != "acme" || last[AttrPlan].AsString() != "p" || last[AttrLimit].AsString() != "burst" || last[AttrWaitMs].AsFloat64() != 100 {
		t.Errorf("reserve span %s %v", ended[4].Name(), last)
	}
}

// TestInspectRefusals: a tenant without a plan or with an unusable name is refused with its code.
func TestInspectRefusals(t *testing.T) {
	lim, _ := memoryAt()
	p, _ := newPolicy(t, lim, FailOpen, plansYAML)
	if _, err := p.Inspect(context.Background(), "nobody"); err == nil {
		t.Fatal("inspect of an unknown tenant succeeded")
	} else if code, _ := wire.CodeOf(err); code != wire.CodeUnknownTenant {
		t.Errorf("code %q of %v", code, err)
	}
	p, _ = newPolicy(t, lim, FailOpen, plansYAML+"default_plan: p\n")
	if _, err := p.Inspect(context.Background(), "a}b"); err == nil {
		t.Fatal("inspect of an invalid tenant succeeded")
	} else if code, _ := wire.CodeOf(err); code != wire.CodeInvalidTenant {
		t.Errorf("code %q of %v", code, err)
	}
	st, err := p.Inspect(context.Background(), "fresh")
	if err != nil || st.Plan != "p" || st.WaitMs != 0 || st.Limit != "" || len(st.Limits) != 1 || st.Limits[0].Tokens != 3 {
		t.Errorf("inspect of a fresh tenant: %+v, %v", st, err)
	}
}

// TestHeadersOfEveryKind: RateLimit-Policy carries the binding limit's own span (a window's
// length, a quota's period), RateLimit's t the time to the quota's reset, and Retry-After the
// whole wait, however far: a spent monthly quota says nine and a half days, not a minute.
func TestHeadersOfEveryKind(t *testing.T) {
	lim, clk := memoryAt() // Saturday 2026-11-21 12:00 UTC
	ps, err := plans.Parse("plans.yaml", []byte(`
plans:
  w:
    limits: [{name: hourly, kind: window, limit: 2, window: 1h}]
  d:
    limits: [{name: daily, kind: quota, limit: 2, period: day}]
  m:
    limits: [{name: monthly, kind: quota, limit: 2, period: month}]
tenants: {win: w, day: d, month: m}
`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Config{Limiter: lim, Plans: ps, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range []struct {
		tenant, policy, allowed, denied, retry string
		waitMs                                 int64
	}{
		{"win", `"hourly";q=2;w=3600`, `"hourly";r=0;t=3600`, `"hourly";r=0;t=3600`, "3600", 3600_000},
		{"day", `"daily";q=2;w=86400`, `"daily";r=0;t=43200`, `"daily";r=0;t=43200`, "43200", 43200_000},
		{"month", `"monthly";q=2;w=2592000`, `"monthly";r=0;t=820800`, `"monthly";r=0;t=820800`, "820800", 820800_000},
	} {
		p.Allow(ctx, wire.SourceHTTP, c.tenant, 1)
		a := p.Allow(ctx, wire.SourceHTTP, c.tenant, 1)
		if h := headers(a); !a.Allowed || h[wire.HeaderRateLimitPolicy] != c.policy || h[wire.HeaderRateLimit] != c.allowed {
			t.Errorf("%s allowed: %+v headers %v, want policy %s and %s", c.tenant, a, h, c.policy, c.allowed)
		}
		a = p.Allow(ctx, wire.SourceHTTP, c.tenant, 1)
		h := headers(a)
		if a.Allowed || h[wire.HeaderRetryAfter] != c.retry || h[wire.HeaderRateLimit] != c.denied || h[wire.HeaderRateLimitPolicy] != c.policy {
			t.Errorf("%s denied: %+v headers %v, want Retry-After %s, %s", c.tenant, a, h, c.retry, c.denied)
		}
		if b := a.Body().(wire.Decision); b.WaitMs != c.waitMs {
			t.Errorf("%s denied: wait_ms %d, want %d", c.tenant, b.WaitMs, c.waitMs)
		}
	}
}

// TestSyncPaused: a paused tenant is refused by Allow and Reserve for the rest of the pause:
// 429, Retry-After the rest of the pause, limit "paused", nothing charged or booked; once the
// pause ends it is decided again from the state it had.
func TestSyncPaused(t *testing.T) {
	lim, _ := memoryAt()
	p, _ := newPolicy(t, lim, FailOpen, plansYAML) // acme: burst 3 at 10/s
	ctx := context.Background()
	until := time.Now().Add(90 * time.Second)
	p.SetPauses(map[string]time.Time{"acme": until})
	for _, a := range []Answer{p.Allow(ctx, wire.SourceHTTP, "acme", 1), p.Reserve(ctx, wire.SourceNATS, "acme", 1, "k1")} {
		if a.Allowed || a.Reserved || !a.Paused || a.Refused() || a.Status() != 429 || a.Decision() != wire.DecisionPaused ||
			a.Wait < 89*time.Second || a.Wait > 90*time.Second || a.Limit != ReasonPaused || a.Remaining != 0 {
			t.Fatalf("paused: %+v (status %d, decision %s)", a, a.Status(), a.Decision())
		}
		if h := headers(a); h[wire.HeaderRetryAfter] != "90" || h[wire.HeaderRateLimit] != "" {
			t.Errorf("paused headers %v", h)
		}
		if b := a.Body().(wire.Decision); b.Allowed || b.Limit != "paused" || b.WaitMs < 89_000 || b.Plan != "p" {
			t.Errorf("paused body %+v", b)
		}
	}
	// What is wrong with the request itself is still said first.
	if a := p.Allow(ctx, wire.SourceHTTP, "acme", 4); a.Code != wire.CodeWeightOverCapacity {
		t.Errorf("weight over capacity while paused: %+v", a)
	}
	st, err := p.Inspect(ctx, "acme")
	if err != nil || st.Reservations != 0 || st.Limits[0].Tokens != 3 {
		t.Fatalf("a pause took something: %+v, %v", st, err)
	}
	p.SetPauses(nil)
	if a := p.Allow(ctx, wire.SourceHTTP, "acme", 1); !a.Allowed || a.Paused || a.Remaining != 2 {
		t.Fatalf("after the pause: %+v", a)
	}
}
