package tests

// Envoy's rate limit service on the built binary (ADMITTER_RLS_ADDR), asked with a gRPC client
// as Envoy asks it, beside the HTTP decision API on the same plans and the same Redis.

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/wire"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// rlsPlans: three plans, each given to one tenant asked over HTTP (h…) and one asked over RLS
// (r…), refilling slowly enough that every answer is exact: a bucket, a bucket chained with a
// window, a bucket chained with a daily quota. No default plan.
const rlsPlans = `
plans:
  slow:
    limits:
      - {name: burst, capacity: 4, rate: 1/m}
  chained:
    limits:
      - {name: burst, capacity: 10, rate: 1/m}
      - {name: hourly, kind: window, limit: 5, window: 1h}
  quota:
    limits:
      - {name: burst, capacity: 10, rate: 1/m}
      - {name: daily, kind: quota, limit: 3, period: day}
tenants: {h1: slow, r1: slow, h2: chained, r2: chained, h3: quota, r3: quota}
`

// rlsClient dials the admitter's rate limit service.
func rlsClient(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// shouldRateLimit asks for one descriptor naming tenant, weighing hits.
func shouldRateLimit(t *testing.T, c rlsv3.RateLimitServiceClient, domain, tenant string, hits uint32) (*rlsv3.RateLimitResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: hits, Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: tenant}}},
	}})
}

// rlsHeaders are a response's headers to add, by name.
func rlsHeaders(resp *rlsv3.RateLimitResponse) map[string]string {
	h := map[string]string{}
	for _, hv := range resp.GetResponseHeadersToAdd() {
		h[hv.GetKey()] = hv.GetValue()
	}
	return h
}

// sfParam reads the integer parameter p of a RateLimit or RateLimit-Policy value.
func sfParam(t *testing.T, v, p string) int64 {
	t.Helper()
	m := regexp.MustCompile(`;` + p + `=([0-9]+)`).FindStringSubmatch(v)
	if m == nil {
		t.Fatalf("no %s in %q", p, v)
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

// unitSeconds is an RLS unit in seconds (a month as 30 days); 0 for UNKNOWN.
var unitSeconds = map[rlsv3.RateLimitResponse_RateLimit_Unit]int64{
	rlsv3.RateLimitResponse_RateLimit_SECOND: 1, rlsv3.RateLimitResponse_RateLimit_MINUTE: 60,
	rlsv3.RateLimitResponse_RateLimit_HOUR: 3600, rlsv3.RateLimitResponse_RateLimit_DAY: 86400,
	rlsv3.RateLimitResponse_RateLimit_WEEK: 7 * 86400, rlsv3.RateLimitResponse_RateLimit_MONTH: 30 * 86400,
}

// TestRLSMatchesHTTP: the same weights asked of the same plans over the HTTP API and over the
// rate limit service get the same answers — allowed or not, the binding limit, the tokens left,
// the wait when denied, and for a bucket its policy and the time until it is full — and both
// count in admitter_decisions_total by source. A window's and a quota's time until full is given
// by RLS only (the HTTP API's RateLimit t is 0 for them).
func TestRLSMatchesHTTP(t *testing.T) {
	w := newWorld(t, rlsPlans)
	api, rlsAddr, metrics := freeAddr(t), freeAddr(t), freeAddr(t)
	p := w.start("ADMITTER_API_ADDR="+api, "ADMITTER_RLS_ADDR="+rlsAddr, "ADMITTER_HTTP_ADDR="+metrics)
	if !strings.Contains(p.logs.String(), "serving Envoy's rate limit service") {
		t.Errorf("no log line for the rate limit service:\n%s", p.logs.String())
	}
	conn := rlsClient(t, rlsAddr)
	client := rlsv3.NewRateLimitServiceClient(conn)

	day := bucket.Limit{Kind: bucket.KindQuota, Period: bucket.Day}
	for _, plan := range []struct {
		http, rls string
		weights   []uint32
	}{
		{"h1", "r1", []uint32{1, 2, 1, 1, 2}},
		{"h2", "r2", []uint32{2, 2, 2, 1}},
		{"h3", "r3", []uint32{1, 1, 1, 1}},
	} {
		for i, wt := range plan.weights {
			step := fmt.Sprintf("%s/%s call %d (weight %d)", plan.http, plan.rls, i, wt)
			h := post(t, "http://"+api+"/v1/decide", fmt.Sprintf(`{"tenant": %q, "weight": %d}`, plan.http, wt))
			before := time.Now()
			resp, err := shouldRateLimit(t, client, "admitter", plan.rls, wt)
			if err != nil {
				t.Fatalf("%s: %v", step, err)
			}
			d := strict[wire.Decision](t, h.body)
			st, rh := resp.GetStatuses()[0], rlsHeaders(resp)
			lim := st.GetCurrentLimit()
			t.Logf("%s: http %d %+v %s %s | rls %v %v", step, h.status, d, h.header.Get("RateLimit-Policy"), h.header.Get("RateLimit"), resp.GetStatuses(), rh)
			if ok := st.GetCode() == rlsv3.RateLimitResponse_OK; ok != d.Allowed || ok != (resp.GetOverallCode() == rlsv3.RateLimitResponse_OK) ||
				(h.status == 200) != d.Allowed || (h.status == 429) == d.Allowed {
				t.Fatalf("%s: http %d allowed %v, rls %v", step, h.status, d.Allowed, st.GetCode())
			}
			if lim.GetName() != d.Limit || int64(st.GetLimitRemaining()) != d.Remaining ||
				rh[wire.HeaderRateLimitRemaining] != strconv.FormatInt(d.Remaining, 10) || rh[wire.HeaderRateLimitLimit] != strconv.FormatUint(uint64(lim.GetRequestsPerUnit()), 10) {
				t.Errorf("%s: http limit %q remaining %d, rls %v headers %v", step, d.Limit, d.Remaining, st, rh)
			}
			reset := st.GetDurationUntilReset().AsDuration()
			if !d.Allowed {
				// The same wait, give or take the time between the two calls.
				if diff := time.Duration(d.WaitMs)*time.Millisecond - reset; diff < -time.Second || diff > time.Second {
					t.Errorf("%s: http waits %d ms, rls %v", step, d.WaitMs, reset)
				}
				ra, _ := strconv.ParseInt(h.header.Get("Retry-After"), 10, 64)
				if got, _ := strconv.ParseInt(rh[wire.HeaderRetryAfter], 10, 64); got < ra-1 || got > ra+1 || got != wire.Seconds(reset) {
					t.Errorf("%s: Retry-After http %d, rls %s (%v)", step, ra, rh[wire.HeaderRetryAfter], reset)
				}
				continue
			}
			if rh[wire.HeaderRetryAfter] != "" {
				t.Errorf("%s: allowed with Retry-After %s", step, rh[wire.HeaderRetryAfter])
			}
			switch d.Limit {
			case "burst": // the bucket's policy and the time until it is full, as HTTP says them
				pol := h.header.Get("RateLimit-Policy")
				mult := int64(max(lim.GetUnitMultiplier().GetValue(), 1))
				if int64(lim.GetRequestsPerUnit()) != sfParam(t, pol, "q") || unitSeconds[lim.GetUnit()]*mult != sfParam(t, pol, "w") {
					t.Errorf("%s: RateLimit-Policy %s, rls limit %v", step, pol, lim)
				}
				if rlsT := strconv.FormatInt(sfParam(t, h.header.Get("RateLimit"), "t"), 10); rh[wire.HeaderRateLimitReset] != rlsT {
					t.Errorf("%s: RateLimit t=%s over HTTP, RateLimit-Reset %s over RLS (%v)", step, rlsT, rh[wire.HeaderRateLimitReset], reset)
				}
			case "hourly":
				if reset != time.Hour || lim.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR || lim.GetRequestsPerUnit() != 5 {
					t.Errorf("%s: window: %v", step, st)
				}
			case "daily":
				_, end := day.PeriodBounds(before)
				if reset > end.Sub(before) || reset < end.Sub(before)-5*time.Second || lim.GetUnit() != rlsv3.RateLimitResponse_RateLimit_DAY {
					t.Errorf("%s: quota: %v, want the day's end in %v", step, st, end.Sub(before))
				}
			default:
				t.Errorf("%s: binding limit %q", step, d.Limit)
			}
		}
	}

	// Refused for what they are: HTTP 404 and 422, RLS OVER_LIMIT without a limit or a wait.
	for _, tc := range []struct {
		tenant string
		hits   uint32
		status int
	}{{"nobody", 1, 404}, {"r1", 5, 422}} {
		h := post(t, "http://"+api+"/v1/decide", fmt.Sprintf(`{"tenant": %q, "weight": %d}`, tc.tenant, tc.hits))
		resp, err := shouldRateLimit(t, client, "admitter", tc.tenant, tc.hits)
		if err != nil || h.status != tc.status || resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT ||
			resp.GetStatuses()[0].GetCurrentLimit() != nil || resp.GetStatuses()[0].GetDurationUntilReset() != nil || len(resp.GetResponseHeadersToAdd()) != 0 {
			t.Errorf("%s weight %d: http %d, rls %v %v", tc.tenant, tc.hits, h.status, resp, err)
		}
	}
	// Another domain: InvalidArgument naming both.
	_, err := shouldRateLimit(t, client, "envoy", "r1", 1)
	if s, _ := status.FromError(err); s.Code() != codes.InvalidArgument || !strings.Contains(s.Message(), `"envoy"`) || !strings.Contains(s.Message(), `"admitter"`) {
		t.Errorf("another domain: %v", err)
	}
	// Envoy's active health check of a gRPC cluster.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, svc := range []string{"", "envoy.service.ratelimit.v3.RateLimitService"} {
		hc, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || hc.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health of %q: %v %v", svc, hc, err)
		}
	}

	_, body := httpGet(t, "http://"+metrics+"/metrics")
	for _, c := range []struct {
		labels []string
		want   float64
	}{
		{[]string{`source="rls"`, `outcome="admitted"`}, 9},
		{[]string{`source="rls"`, `outcome="throttled"`}, 4},
		{[]string{`source="rls"`, `outcome="rejected"`}, 2},
		{[]string{`source="http"`, `outcome="admitted"`}, 9},
		{[]string{`source="http"`, `outcome="throttled"`}, 4},
	} {
		if got := metricValue(body, "admitter_decisions_total", c.labels...); got != c.want {
			t.Errorf("admitter_decisions_total%v = %g, want %g", c.labels, got, c.want)
		}
	}
	if code := p.signal(syscall.SIGTERM, 20*time.Second); code != 0 {
		t.Errorf("exit status %d after SIGTERM:\n%s", code, p.logs.String())
	}
}

// TestRLSConfig: a wrong ADMITTER_RLS_* variable stops the admitter at start with one line
// naming it; check-config prints the three.
func TestRLSConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		over []string
		want []string
	}{
		{"address without port", []string{"ADMITTER_RLS_ADDR=localhost"}, []string{"ADMITTER_RLS_ADDR", `"localhost"`, "host:port", "off"}},
		{"address bad port", []string{"ADMITTER_RLS_ADDR=127.0.0.1:grpc"}, []string{"ADMITTER_RLS_ADDR", `"grpc"`}},
		{"address of the API", []string{"ADMITTER_RLS_ADDR=127.0.0.1:9080"}, []string{"ADMITTER_RLS_ADDR", "ADMITTER_API_ADDR", "differ"}},
		{"address of the metrics", []string{"ADMITTER_RLS_ADDR=127.0.0.1:9090"}, []string{"ADMITTER_RLS_ADDR", "ADMITTER_HTTP_ADDR", "differ"}},
		{"domain with a space", []string{"ADMITTER_RLS_DOMAIN=my domain"}, []string{"ADMITTER_RLS_DOMAIN", `"my domain"`, "whitespace"}},
		{"key with a tab", []string{"ADMITTER_RLS_DESCRIPTOR_KEY=x\ttenant"}, []string{"ADMITTER_RLS_DESCRIPTOR_KEY", "whitespace"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runBinary(t, configEnv(t, tc.over...))
			lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
			if code != 2 || stdout != "" || len(lines) != 1 {
				t.Fatalf("exit %d, stdout %q, stderr %q: want 2 and one line", code, stdout, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(lines[0], w) {
					t.Errorf("%q does not say %q", lines[0], w)
				}
			}
		})
	}
	code, stdout, _ := runBinary(t, configEnv(t, "ADMITTER_RLS_ADDR=127.0.0.1:8081", "ADMITTER_RLS_DOMAIN=edge"), "check-config")
	for _, want := range []string{"ADMITTER_RLS_ADDR=127.0.0.1:8081\n", "ADMITTER_RLS_DOMAIN=edge\n", "ADMITTER_RLS_DESCRIPTOR_KEY=tenant\n"} {
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("check-config (exit %d) does not print %q:\n%s", code, want, stdout)
		}
	}
}
