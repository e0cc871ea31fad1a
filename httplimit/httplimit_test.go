package httplimit

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/internal/testenv"
	"github.com/admitter/admitter/plans"
	"github.com/admitter/admitter/policy"
	"github.com/admitter/admitter/wire"
)

const plansYAML = `
plans:
  free: {limits: [{capacity: 5, rate: 2/s}]}
  gold: {limits: [{name: burst, capacity: 3, rate: 1/s}]}
tenants: {acme: free, initech: gold}
`

// server is a handler counting the requests that reach it, behind the middleware, on a real
// listener.
type server struct {
	*httptest.Server
	reached atomic.Int64
}

func newServer(t *testing.T, pol *policy.Policy, c Config) *server {
	t.Helper()
	c.Policy = pol
	if c.Tenant == nil {
		c.Tenant = Header("X-Tenant")
	}
	m, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	s := &server{}
	s.Server = httptest.NewServer(m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.reached.Add(1)
		w.Header().Set("X-Handler", "yes")
		_, _ = io.WriteString(w, "ok\n")
	})))
	t.Cleanup(s.Close)
	return s
}

type reply struct {
	status int
	header http.Header
	body   string
}

func (s *server) get(t *testing.T, hdr ...string) reply {
	t.Helper()
	req, _ := http.NewRequest("GET", s.URL+"/things", nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := s.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, string(b)}
}

// redisPolicy is a policy over a real redis-server that the test can kill.
func redisPolicy(t *testing.T, mode policy.FailMode) (*policy.Policy, *testenv.RedisServer) {
	t.Helper()
	srv := testenv.StartPersistentRedis(t) // a fresh Redis without a file starts with empty buckets
	r, err := bucket.DialRedis(srv.URL(), "", bucket.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	plans, err := plans.Parse("plans.yaml", []byte(plansYAML))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.New(policy.Config{Limiter: r, Plans: plans, FailMode: mode, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return pol, srv
}

// TestMiddlewareAgainstRedis: the burst goes through to the handler with the RateLimit
// headers, the rest is answered 429 by the middleware with Retry-After and the API's body;
// refusals have the API's statuses and codes.
func TestMiddlewareAgainstRedis(t *testing.T) {
	pol, _ := redisPolicy(t, policy.FailOpen)
	s := newServer(t, pol, Config{Weight: AdmitWeight})
	for i := range 5 {
		r := s.get(t, "X-Tenant", "acme")
		if r.status != 200 || r.body != "ok\n" || r.header.Get("X-Handler") != "yes" || r.header.Get("RateLimit-Policy") != `"0";q=5;w=3` ||
			!strings.HasPrefix(r.header.Get("RateLimit"), `"0";r=`) || r.header.Get(wire.HeaderRateLimitDegraded) != "" {
			t.Fatalf("request %d: %d %v %q", i, r.status, r.header, r.body)
		}
	}
	r := s.get(t, "X-Tenant", "acme")
	var d wire.Decision
	if err := json.Unmarshal([]byte(r.body), &d); err != nil || r.status != 429 || d.Allowed || d.WaitMs <= 0 || d.Plan != "free" ||
		r.header.Get("Retry-After") != "1" || r.header.Get("RateLimit") != `"0";r=0;t=1` || r.header.Get("X-Handler") != "" {
		t.Fatalf("after the burst: %d %v %q", r.status, r.header, r.body)
	}
	if n := s.reached.Load(); n != 5 {
		t.Fatalf("the handler saw %d requests, want 5", n)
	}
	for _, tc := range []struct {
		hdr    []string
		status int
		code   wire.Code
		detail string
	}{
		{nil, 400, wire.CodeInvalidRequest, "header X-Tenant is missing"},
		{[]string{"X-Tenant", "a", "X-Tenant", "b"}, 400, wire.CodeInvalidRequest, "appears 2 times"},
		{[]string{"X-Tenant", "nobody"}, 404, wire.CodeUnknownTenant, `tenant "nobody" has no plan`},
		{[]string{"X-Tenant", "initech", "Admit-Weight", "4"}, 422, wire.CodeWeightOverCapacity, "weight 4 exceeds 3"},
		{[]string{"X-Tenant", "initech", "Admit-Weight", "zero"}, 400, wire.CodeInvalidWeight, `"zero"`},
	} {
		r := s.get(t, tc.hdr...)
		var e wire.ErrorBody
		if err := json.Unmarshal([]byte(r.body), &e); err != nil || r.status != tc.status || e.Error != tc.code || !strings.Contains(e.Detail, tc.detail) {
			t.Errorf("%v: %d %q, want %d %s %q", tc.hdr, r.status, r.body, tc.status, tc.code, tc.detail)
		}
	}
	if n := s.reached.Load(); n != 5 {
		t.Errorf("the handler saw %d requests, want still 5", n)
	}
}

// TestMiddlewareFailModes: with Redis killed, fail open lets requests through marked
// X-RateLimit-Degraded: true, fail closed answers 503 limiter-unavailable with Retry-After.
func TestMiddlewareFailModes(t *testing.T) {
	for _, mode := range []policy.FailMode{policy.FailOpen, policy.FailClosed} {
		t.Run(string(mode), func(t *testing.T) {
			pol, redis := redisPolicy(t, mode)
			s := newServer(t, pol, Config{})
			if r := s.get(t, "X-Tenant", "acme"); r.status != 200 {
				t.Fatalf("with redis: %d %q", r.status, r.body)
			}
			redis.Kill()
			r := s.get(t, "X-Tenant", "acme")
			switch mode {
			case policy.FailOpen:
				if r.status != 200 || r.body != "ok\n" || r.header.Get(wire.HeaderRateLimitDegraded) != "true" || r.header.Get("RateLimit") != "" || s.reached.Load() != 2 {
					t.Fatalf("fail open: %d %v %q", r.status, r.header, r.body)
				}
			case policy.FailClosed:
				var e wire.ErrorBody
				if err := json.Unmarshal([]byte(r.body), &e); err != nil || r.status != 503 || e.Error != wire.CodeLimiterUnavailable ||
					r.header.Get("Retry-After") == "" || r.header.Get(wire.HeaderRateLimitDegraded) != "" || s.reached.Load() != 1 {
					t.Fatalf("fail closed: %d %v %q", r.status, r.header, r.body)
				}
			}
		})
	}
}

func TestNewRejects(t *testing.T) {
	if _, err := New(Config{Tenant: Header("X-Tenant")}); err == nil || !strings.Contains(err.Error(), "policy") {
		t.Errorf("no policy: %v", err)
	}
	pol, err := policy.New(policy.Config{Limiter: bucket.NewMemory(bucket.Options{}, nil), Plans: mustPlans(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{Policy: pol}); err == nil || !strings.Contains(err.Error(), "resolver") {
		t.Errorf("no resolver: %v", err)
	}
}

func mustPlans(t *testing.T) *bucket.Plans {
	t.Helper()
	p, err := plans.Parse("plans.yaml", []byte(plansYAML))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

type principalKey struct{}

func TestResolvers(t *testing.T) {
	req := func(remote string, hdr ...string) *http.Request {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = remote
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Add(hdr[i], hdr[i+1])
		}
		return r
	}
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	for _, tc := range []struct {
		name    string
		resolve Resolver
		r       *http.Request
		want    string // "" means an error whose text contains wantErr
		wantErr string
	}{
		{"header", Header("x-tenant"), req("1.2.3.4:5", "X-Tenant", "acme"), "acme", ""},
		{"header missing", Header("X-Tenant"), req("1.2.3.4:5"), "", "missing"},
		{"header empty", Header("X-Tenant"), req("1.2.3.4:5", "X-Tenant", ""), "", "missing"},
		{"header twice", Header("X-Tenant"), req("1.2.3.4:5", "X-Tenant", "a", "X-Tenant", "b"), "", "2 times"},
		{"peer", ClientIP(), req("203.0.113.9:4000"), "203.0.113.9", ""},
		{"peer v6", ClientIP(), req("[2001:db8::1]:4000"), "2001:db8::1", ""},
		{"peer v4-mapped", ClientIP(), req("[::ffff:203.0.113.9]:4000"), "203.0.113.9", ""},
		{"untrusted peer ignores the header", ClientIP(proxies...), req("203.0.113.9:1", "X-Forwarded-For", "198.51.100.1"), "203.0.113.9", ""},
		{"trusted proxy", ClientIP(proxies...), req("10.1.2.3:1", "X-Forwarded-For", "198.51.100.1"), "198.51.100.1", ""},
		{"forged left entries", ClientIP(proxies...), req("10.1.2.3:1", "X-Forwarded-For", "6.6.6.6, 198.51.100.1, 10.9.9.9"), "198.51.100.1", ""},
		{"two headers", ClientIP(proxies...), req("[::1]:1", "X-Forwarded-For", "6.6.6.6", "X-Forwarded-For", "198.51.100.2, 10.0.0.1"), "198.51.100.2", ""},
		{"only proxies", ClientIP(proxies...), req("10.1.2.3:1", "X-Forwarded-For", "10.0.0.7"), "10.0.0.7", ""},
		{"no header behind a proxy", ClientIP(proxies...), req("10.1.2.3:1"), "10.1.2.3", ""},
		{"garbage entry", ClientIP(proxies...), req("10.1.2.3:1", "X-Forwarded-For", "not-an-ip"), "", `"not-an-ip"`},
		{"bad peer", ClientIP(), req("somewhere"), "", `"somewhere"`},
		{"principal", Principal(func(ctx context.Context) (string, bool) { v, ok := ctx.Value(principalKey{}).(string); return v, ok }),
			req("1.2.3.4:5").WithContext(context.WithValue(context.Background(), principalKey{}, "alice")), "alice", ""},
		{"no principal", Principal(func(ctx context.Context) (string, bool) { v, ok := ctx.Value(principalKey{}).(string); return v, ok }),
			req("1.2.3.4:5"), "", "no authenticated principal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.resolve(tc.r)
			switch {
			case tc.want != "" && (err != nil || got != tc.want):
				t.Errorf("got %q, %v; want %q", got, err, tc.want)
			case tc.want == "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("got %q, %v; want an error saying %q", got, err, tc.wantErr)
			}
		})
	}
}
