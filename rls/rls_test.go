package rls

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/internal/testenv"
	"github.com/admitter/admitter/plans"
	"github.com/admitter/admitter/policy"
	"github.com/admitter/admitter/wire"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// testPlans: a slow bucket whose answers are exact (tiny), a bucket chained with a window
// (chained), a bucket chained with a monthly quota (monthly), a plan in shadow mode (trial). No
// default plan: unknown tenants are refused.
const testPlans = `
plans:
  tiny:
    limits:
      - {name: burst, capacity: 3, rate: 1/m}
  chained:
    limits:
      - {name: burst, capacity: 10, rate: 10/s}
      - {name: hourly, kind: window, limit: 6, window: 1h}
  monthly:
    limits:
      - {name: burst, capacity: 10, rate: 1/s}
      - {name: monthly, kind: quota, limit: 3, period: month}
  trial:
    mode: shadow
    limits:
      - {capacity: 1, rate: 1/m}
tenants: {zoe: tiny, bob: chained, carol: monthly, dan: trial}
`

// rig is one test's Redis, policy, gRPC server on 127.0.0.1 and client.
type rig struct {
	client  rlsv3.RateLimitServiceClient
	redis   *testenv.RedisServer
	metrics *sdkmetric.ManualReader
	spans   *tracetest.SpanRecorder
	pol     *policy.Policy
}

// setup starts a redis-server (with an append-only file, so that buckets start full), a policy
// over it in fail mode mode, and the service on a gRPC server of its own.
func setup(t *testing.T, mode policy.FailMode, c Config) *rig {
	t.Helper()
	r := &rig{redis: testenv.StartPersistentRedis(t), metrics: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	limiter, err := bucket.DialRedis(r.redis.URL(), "", bucket.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(limiter.Close)
	ps, err := plans.Parse("plans.yaml", []byte(testPlans))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.New(policy.Config{Limiter: limiter, Plans: ps, FailMode: mode, Timeout: 200 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler), MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.metrics)),
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.spans))})
	if err != nil {
		t.Fatal(err)
	}
	r.pol = pol
	svc, err := New(pol, c)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	svc.Register(srv)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	r.client = rlsv3.NewRateLimitServiceClient(conn)
	return r
}

// desc is a descriptor of the given key, value pairs.
func desc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// call asks ShouldRateLimit for domain "admitter".
func (r *rig) call(t *testing.T, hits uint32, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := r.ask(context.Background(), &rlsv3.RateLimitRequest{Domain: DefaultDomain, HitsAddend: hits, Descriptors: ds})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	if len(resp.GetStatuses()) != len(ds) {
		t.Fatalf("%d statuses for %d descriptors: %v", len(resp.GetStatuses()), len(ds), resp)
	}
	return resp
}

func (r *rig) ask(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return r.client.ShouldRateLimit(ctx, req)
}

// headers are the response's headers to add, by name; a repeated name fails the test.
func headers(t *testing.T, resp *rlsv3.RateLimitResponse) map[string]string {
	t.Helper()
	h := map[string]string{}
	for _, hv := range resp.GetResponseHeadersToAdd() {
		if _, dup := h[hv.GetKey()]; dup {
			t.Errorf("header %s twice in %v", hv.GetKey(), resp.GetResponseHeadersToAdd())
		}
		h[hv.GetKey()] = hv.GetValue()
	}
	if len(resp.GetRequestHeadersToAdd()) != 0 {
		t.Errorf("request headers to add: %v", resp.GetRequestHeadersToAdd())
	}
	return h
}

// limit is the RateLimit a descriptor status should carry.
func limit(name string, perUnit uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit, multiplier uint32) *rlsv3.RateLimitResponse_RateLimit {
	l := &rlsv3.RateLimitResponse_RateLimit{Name: name, RequestsPerUnit: perUnit, Unit: unit}
	if multiplier != 1 {
		l.UnitMultiplier = wrapperspb.UInt32(multiplier)
	}
	return l
}

func sameLimit(a, b *rlsv3.RateLimitResponse_RateLimit) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.GetName() == b.GetName() && a.GetRequestsPerUnit() == b.GetRequestsPerUnit() && a.GetUnit() == b.GetUnit() &&
		(a.GetUnitMultiplier() == nil) == (b.GetUnitMultiplier() == nil) && a.GetUnitMultiplier().GetValue() == b.GetUnitMultiplier().GetValue()
}

// TestRLSBurst: a tenant's burst is OK descriptor by descriptor with its binding limit, the
// tokens left and the time until the bucket is full again; then OVER_LIMIT with the wait, and
// the headers envoyproxy/ratelimit sets (RateLimit-Limit, -Remaining, -Reset) with Retry-After.
// Every decision counts with source rls, and its span is a child of the caller's traceparent.
func TestRLSBurst(t *testing.T) {
	r := setup(t, policy.FailOpen, Config{})
	burst := limit("burst", 3, rlsv3.RateLimitResponse_RateLimit_MINUTE, 3) // 3 tokens, refilled from empty in 3 minutes
	for i := range 3 {
		resp := r.call(t, 0, desc("tenant", "zoe"))
		st := resp.GetStatuses()[0]
		left := uint32(2 - i)
		if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || st.GetCode() != rlsv3.RateLimitResponse_OK || !sameLimit(st.GetCurrentLimit(), burst) ||
			st.GetLimitRemaining() != left || st.GetDurationUntilReset().AsDuration() != time.Duration(3-left)*time.Minute {
			t.Fatalf("call %d: %v", i, resp)
		}
		h := headers(t, resp)
		if len(h) != 3 || h["RateLimit-Limit"] != "3" || h["RateLimit-Remaining"] != strconv.Itoa(int(left)) ||
			h["RateLimit-Reset"] != strconv.Itoa(int(3-left)*60) {
			t.Fatalf("call %d: headers %v", i, h)
		}
	}
	traceID := "4bf92f3577b34da6a3ce929d0e0e4736"
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	resp, err := r.ask(ctx, &rlsv3.RateLimitRequest{Domain: DefaultDomain, Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("tenant", "zoe")}})
	if err != nil {
		t.Fatal(err)
	}
	st := resp.GetStatuses()[0]
	wait := st.GetDurationUntilReset().AsDuration()
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || st.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT ||
		!sameLimit(st.GetCurrentLimit(), burst) || st.GetLimitRemaining() != 0 || wait <= 50*time.Second || wait > time.Minute {
		t.Fatalf("over the limit: %v", resp)
	}
	if h := headers(t, resp); len(h) != 4 || h["RateLimit-Limit"] != "3" || h["RateLimit-Remaining"] != "0" ||
		h["RateLimit-Reset"] != strconv.FormatInt(wire.Seconds(wait), 10) || h["Retry-After"] != h["RateLimit-Reset"] {
		t.Fatalf("over the limit: headers %v", h)
	}

	ended := r.spans.Ended()
	if len(ended) != 4 || ended[3].Name() != "limiter decide" || ended[3].Parent().TraceID().String() != traceID {
		t.Errorf("%d spans, the last one's parent %v, want 4 and trace %s", len(ended), ended[len(ended)-1].Parent(), traceID)
	}
	got := decisions(t, r.metrics)
	if len(got) != 2 || got["rls tiny admitted"] != 3 || got["rls tiny throttled"] != 1 {
		t.Errorf("decisions %v, want 3 admitted and 1 throttled with source rls", got)
	}
}

// decisions sums the decisions metric by "source plan outcome".
func decisions(t *testing.T, reader *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != wire.MetricDecisions.Name {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				src, _ := dp.Attributes.Value("source")
				plan, _ := dp.Attributes.Value("plan")
				out, _ := dp.Attributes.Value("outcome")
				got[src.AsString()+" "+plan.AsString()+" "+out.AsString()] += dp.Value
			}
		}
	}
	return got
}

// TestRLSChainedLimits: a bucket chained with a window, weighed by hits_addend: the binding
// limit is the one with the least left (the window), a weight the window cannot take now is
// OVER_LIMIT for the window with the whole wait (until its first take leaves, an hour), and a descriptor's own
// hits_addend replaces the request's.
func TestRLSChainedLimits(t *testing.T) {
	r := setup(t, policy.FailOpen, Config{})
	hourly := limit("hourly", 6, rlsv3.RateLimitResponse_RateLimit_HOUR, 1)
	resp := r.call(t, 4, desc("tenant", "bob"))
	if st := resp.GetStatuses()[0]; st.GetCode() != rlsv3.RateLimitResponse_OK || !sameLimit(st.GetCurrentLimit(), hourly) ||
		st.GetLimitRemaining() != 2 || st.GetDurationUntilReset().AsDuration() != time.Hour {
		t.Fatalf("weight 4: %v", resp)
	}
	resp = r.call(t, 3, desc("tenant", "bob"))
	if st := resp.GetStatuses()[0]; resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || !sameLimit(st.GetCurrentLimit(), hourly) ||
		st.GetLimitRemaining() != 2 || st.GetDurationUntilReset().AsDuration() > time.Hour || st.GetDurationUntilReset().AsDuration() < time.Hour-5*time.Second {
		t.Fatalf("weight 3 over the window's 2 left: %v, want the first take's leaving in an hour", resp)
	}
	if h := headers(t, resp); h["Retry-After"] != "3600" || h["RateLimit-Remaining"] != "2" || h["RateLimit-Limit"] != "6" {
		t.Fatalf("weight 3: headers %v", h)
	}
	// The descriptor's hits_addend (2) replaces the request's (9, over every capacity).
	d := desc("tenant", "bob")
	d.HitsAddend = wrapperspb.UInt64(2)
	resp = r.call(t, 9, d)
	if st := resp.GetStatuses()[0]; st.GetCode() != rlsv3.RateLimitResponse_OK || !sameLimit(st.GetCurrentLimit(), hourly) || st.GetLimitRemaining() != 0 {
		t.Fatalf("descriptor weight 2: %v", resp)
	}
	// 0 means 1, per descriptor as per request.
	d.HitsAddend = wrapperspb.UInt64(0)
	resp = r.call(t, 9, d)
	if st := resp.GetStatuses()[0]; st.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT || !sameLimit(st.GetCurrentLimit(), hourly) {
		t.Fatalf("descriptor weight 0 (1) on a full window: %v", resp)
	}
}

// TestRLSQuota: a calendar quota chained with a bucket: OK answers say how long until the
// month ends (when the quota is forgotten), and so does the answer over it: the whole wait.
func TestRLSQuota(t *testing.T) {
	r := setup(t, policy.FailOpen, Config{})
	monthly := limit("monthly", 3, rlsv3.RateLimitResponse_RateLimit_MONTH, 1)
	q := bucket.Limit{Kind: bucket.KindQuota, Period: bucket.Month}
	for i := range 3 {
		before := time.Now()
		resp := r.call(t, 1, desc("tenant", "carol"))
		st := resp.GetStatuses()[0]
		_, end := q.PeriodBounds(before)
		reset := st.GetDurationUntilReset().AsDuration()
		if st.GetCode() != rlsv3.RateLimitResponse_OK || !sameLimit(st.GetCurrentLimit(), monthly) || st.GetLimitRemaining() != uint32(2-i) ||
			reset > end.Sub(before) || reset < end.Sub(before)-5*time.Second {
			t.Fatalf("call %d: %v, want the month's end in %v", i, resp, end.Sub(before))
		}
		if h := headers(t, resp); h["RateLimit-Limit"] != "3" || h["RateLimit-Reset"] != strconv.FormatInt(int64((reset+time.Second-1)/time.Second), 10) {
			t.Fatalf("call %d: headers %v", i, h)
		}
	}
	before := time.Now()
	resp := r.call(t, 1, desc("tenant", "carol"))
	_, end := q.PeriodBounds(before)
	if st := resp.GetStatuses()[0]; st.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT || !sameLimit(st.GetCurrentLimit(), monthly) ||
		st.GetLimitRemaining() != 0 || st.GetDurationUntilReset().AsDuration() > end.Sub(before) || st.GetDurationUntilReset().AsDuration() < end.Sub(before)-5*time.Second {
		t.Fatalf("over the quota: %v, want the month's end in %v", resp, end.Sub(before))
	}
}

// TestRLSDescriptors: each descriptor is decided for its own tenant, in order; one without the
// key is OK with no limit (as envoyproxy/ratelimit answers a descriptor no rule matches); one
// refused for what it is (unknown tenant, weight over capacity or over 2^40, a tenant that
// cannot key buckets) is OVER_LIMIT with no limit and no wait; negative hits change nothing; any
// OVER_LIMIT makes the whole answer OVER_LIMIT.
func TestRLSDescriptors(t *testing.T) {
	r := setup(t, policy.FailOpen, Config{})
	resp := r.call(t, 0, desc("route", "a", "tenant", "zoe"), desc("path", "/x"), desc("tenant", "bob"), desc("tenant", "zoe"))
	ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	want := []struct {
		code rlsv3.RateLimitResponse_Code
		name string
		left uint32
	}{{ok, "burst", 2}, {ok, "", 0}, {ok, "hourly", 5}, {ok, "burst", 1}}
	for i, w := range want {
		st := resp.GetStatuses()[i]
		if st.GetCode() != w.code || st.GetCurrentLimit().GetName() != w.name || st.GetLimitRemaining() != w.left {
			t.Errorf("descriptor %d: %v, want %v %q %d left", i, st, w.code, w.name, w.left)
		}
	}
	if st := resp.GetStatuses()[1]; st.GetCurrentLimit() != nil || st.GetDurationUntilReset() != nil {
		t.Errorf("descriptor without the key: %v", st)
	}
	// The headers are those of the descriptor with the fewest left.
	if h := headers(t, resp); resp.GetOverallCode() != ok || h["RateLimit-Remaining"] != "1" || h["RateLimit-Limit"] != "3" || h["Retry-After"] != "" {
		t.Fatalf("overall %v, headers %v", resp.GetOverallCode(), h)
	}

	refund := desc("tenant", "zoe")
	refund.IsNegativeHits = true
	resp = r.call(t, 0, desc("tenant", "nobody"), desc("tenant", "zoe", "tenant", "bob"), refund, desc("tenant", "bob"))
	if resp.GetOverallCode() != over {
		t.Fatalf("overall %v, want OVER_LIMIT: %v", resp.GetOverallCode(), resp)
	}
	for i, w := range []struct {
		code rlsv3.RateLimitResponse_Code
		name string
		left uint32
	}{{over, "", 0}, {ok, "burst", 0}, {ok, "", 0}, {ok, "hourly", 4}} {
		st := resp.GetStatuses()[i]
		if st.GetCode() != w.code || st.GetCurrentLimit().GetName() != w.name || st.GetLimitRemaining() != w.left {
			t.Errorf("descriptor %d: %v, want %v %q %d left", i, st, w.code, w.name, w.left)
		}
	}
	if st := resp.GetStatuses()[0]; st.GetDurationUntilReset() != nil {
		t.Errorf("unknown tenant with a reset: %v", st)
	}
	if h := headers(t, resp); h["Retry-After"] != "" || h["RateLimit-Remaining"] != "0" {
		t.Errorf("refused and exhausted: headers %v (a refusal has no wait to retry after)", h)
	}

	huge := desc("tenant", "zoe")
	huge.HitsAddend = wrapperspb.UInt64(wire.MaxWeight + 1)
	resp = r.call(t, 4, desc("tenant", "zoe"), desc("tenant", "a{b"), desc("tenant", ""), huge)
	for i, st := range resp.GetStatuses() {
		if st.GetCode() != over || st.GetCurrentLimit() != nil || st.GetDurationUntilReset() != nil {
			t.Errorf("refusal %d: %v", i, st)
		}
	}
	if h := headers(t, resp); len(h) != 0 {
		t.Errorf("refusals only: headers %v", h)
	}
	got := decisions(t, r.metrics)
	if got["rls tiny rejected"] != 2 || got["rls  rejected"] != 3 || got["rls tiny admitted"] != 3 || got["rls chained admitted"] != 2 {
		t.Errorf("decisions %v", got)
	}
}

// TestRLSRefusedCalls: a call for another domain, without descriptors or with too many is an
// InvalidArgument error naming what is wrong; the domain and key are configurable.
func TestRLSRefusedCalls(t *testing.T) {
	r := setup(t, policy.FailOpen, Config{Domain: "edge", DescriptorKey: "x-tenant"})
	for _, tc := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want []string
	}{
		{"another domain", &rlsv3.RateLimitRequest{Domain: "admitter", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("x-tenant", "zoe")}}, []string{`"admitter"`, `"edge"`}},
		{"no domain", &rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("x-tenant", "zoe")}}, []string{`""`, `"edge"`}},
		{"no descriptors", &rlsv3.RateLimitRequest{Domain: "edge"}, []string{"no descriptors"}},
		{"too many descriptors", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: many(MaxDescriptors+1, desc("x-tenant", "zoe"))}, []string{strconv.Itoa(MaxDescriptors + 1), strconv.Itoa(MaxDescriptors)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := r.ask(context.Background(), tc.req)
			s, _ := status.FromError(err)
			if resp != nil || s.Code() != codes.InvalidArgument {
				t.Fatalf("%v %v, want InvalidArgument", resp, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(s.Message(), w) {
					t.Errorf("%q does not say %s", s.Message(), w)
				}
			}
		})
	}
	resp, err := r.ask(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("tenant", "zoe"), desc("x-tenant", "zoe")}})
	if err != nil || resp.GetStatuses()[0].GetCurrentLimit() != nil || resp.GetStatuses()[1].GetCurrentLimit().GetName() != "burst" {
		t.Fatalf("descriptor key x-tenant: %v %v", resp, err)
	}
}

// many is n times d.
func many(n int, d *ratelimitv3.RateLimitDescriptor) []*ratelimitv3.RateLimitDescriptor {
	ds := make([]*ratelimitv3.RateLimitDescriptor, n)
	for i := range ds {
		ds[i] = d
	}
	return ds
}

// TestRLSFailModes: with Redis gone, fail open answers OK marked Admit-Degraded without a limit;
// fail closed answers OVER_LIMIT with the backoff as the wait and Retry-After. A tenant refused
// for itself is still refused.
func TestRLSFailModes(t *testing.T) {
	for _, mode := range []policy.FailMode{policy.FailOpen, policy.FailClosed} {
		t.Run(string(mode), func(t *testing.T) {
			r := setup(t, mode, Config{})
			if resp := r.call(t, 0, desc("tenant", "zoe")); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
				t.Fatalf("with redis: %v", resp)
			}
			r.redis.Kill()
			resp := r.call(t, 0, desc("tenant", "zoe"), desc("tenant", "nobody"))
			st, h := resp.GetStatuses()[0], headers(t, resp)
			if st.GetCurrentLimit() != nil || resp.GetStatuses()[1].GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("without redis: %v", resp)
			}
			switch mode {
			case policy.FailOpen:
				if st.GetCode() != rlsv3.RateLimitResponse_OK || st.GetDurationUntilReset() != nil || len(h) != 1 || h[wire.HeaderDegraded] != wire.DegradedFailOpen {
					t.Fatalf("fail open: %v, headers %v", resp, h)
				}
			case policy.FailClosed:
				wait := st.GetDurationUntilReset().AsDuration()
				if st.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT || wait <= 0 || len(h) != 1 || h["Retry-After"] != strconv.FormatInt(wire.Seconds(wait), 10) {
					t.Fatalf("fail closed: %v, headers %v", resp, h)
				}
			}
		})
	}
}

// TestRLSShadow: a plan in shadow mode is not enforced: OK, with no limit, and Admit-Shadow
// saying what the plan would have done.
func TestRLSShadow(t *testing.T) {
	r := setup(t, policy.FailOpen, Config{})
	for i, want := range []string{"admitted", "delayed "} {
		resp := r.call(t, 0, desc("tenant", "dan"))
		st, h := resp.GetStatuses()[0], headers(t, resp)
		if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || st.GetCurrentLimit() != nil || len(h) != 1 || !strings.HasPrefix(h[wire.HeaderShadow], want) {
			t.Fatalf("call %d: %v, headers %v", i, resp, h)
		}
	}
}

// TestRLSNew: a service needs a policy.
func TestRLSNew(t *testing.T) {
	if _, err := New(nil, Config{}); err == nil || !errors.Is(err, ErrNoPolicy) {
		t.Fatalf("New without a policy: %v", err)
	}
}

// TestRLSPaused: a paused tenant is over the limit until its pause ends, with that wait as
// duration_until_reset and Retry-After; nothing is charged.
func TestRLSPaused(t *testing.T) {
	r := setup(t, policy.FailOpen, Config{})
	r.pol.SetPauses(map[string]time.Time{"zoe": time.Now().Add(10 * time.Minute)})
	resp := r.call(t, 0, desc("tenant", "zoe"))
	st, h := resp.GetStatuses()[0], headers(t, resp)
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || st.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT ||
		st.GetDurationUntilReset().AsDuration() < 599*time.Second || h["Retry-After"] != "600" {
		t.Fatalf("paused: %v, headers %v", resp, h)
	}
	r.pol.SetPauses(nil)
	if resp := r.call(t, 0, desc("tenant", "zoe")); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || resp.GetStatuses()[0].GetLimitRemaining() != 2 {
		t.Fatalf("after the pause: %v", resp)
	}
}
