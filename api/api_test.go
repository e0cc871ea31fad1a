package api

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/internal/testenv"
	"github.com/admitter/admitter/plans"
	"github.com/admitter/admitter/policy"
	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

const plansYAML = `
plans:
  free: {limits: [{capacity: 5, rate: 2/s}]}
  tiny: {limits: [{name: burst, capacity: 2, rate: 2/m}]}
tenants: {acme: free, zoe: tiny}
`

func newPolicy(t testing.TB, yaml string) *policy.Policy {
	t.Helper()
	plans, err := plans.Parse("plans.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.New(policy.Config{Limiter: bucket.NewMemory(bucket.Options{}, nil), Plans: plans, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// call sends a request to the handler and returns the response with its body read.
func call(t *testing.T, srv *httptest.Server, method, path, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func decode[T any](t *testing.T, body string) T {
	t.Helper()
	var v T
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	return v
}

// TestHTTPDecide: the burst is allowed (200), then denied (429) with Retry-After; both carry
// the RateLimit headers and the decision's JSON.
func TestHTTPDecide(t *testing.T) {
	srv := httptest.NewServer(NewHandler(newPolicy(t, plansYAML)))
	defer srv.Close()
	resp, body := call(t, srv, "POST", "/v1/decide", `{"tenant": "zoe", "weight": 2}`)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("Retry-After") != "" ||
		resp.Header.Get("RateLimit-Policy") != `"burst";q=2;w=60` || resp.Header.Get("RateLimit") != `"burst";r=0;t=60` {
		t.Fatalf("allowed: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	if d := decode[wire.Decision](t, body); d != (wire.Decision{Allowed: true, Tenant: "zoe", Plan: "tiny", Limit: "burst"}) {
		t.Fatalf("allowed body %+v", d)
	}
	resp, body = call(t, srv, "POST", "/v1/decide", `{"tenant": "zoe"}`)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "30" || resp.Header.Get("RateLimit") != `"burst";r=0;t=30` {
		t.Fatalf("denied: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	if d := decode[wire.Decision](t, body); d.Allowed || d.WaitMs <= 29_000 || d.WaitMs > 30_000 || d.Limit != "burst" || d.Reserved {
		t.Fatalf("denied body %+v", d)
	}
	// A reservation books the slot, and says so.
	resp, body = call(t, srv, "POST", "/v1/decide", `{"tenant": "zoe", "key": "k1", "reserve": true}`)
	if d := decode[wire.Decision](t, body); resp.StatusCode != 429 || !d.Reserved || resp.Header.Get("Retry-After") != "30" {
		t.Fatalf("reserved: %d %v %+v", resp.StatusCode, resp.Header, d)
	}
	resp, body = call(t, srv, "GET", "/v1/tenants/zoe", "")
	if st := decode[wire.TenantState](t, body); resp.StatusCode != 200 || st.Plan != "tiny" || st.Reservations != 1 || st.Limit != "burst" || st.WaitMs < 59_000 {
		t.Fatalf("tenant: %d %+v", resp.StatusCode, st)
	}
}

// TestHTTPErrors: every refusal has its status, its code and a detail, as JSON.
func TestHTTPErrors(t *testing.T) {
	srv := httptest.NewServer(NewHandler(newPolicy(t, plansYAML)))
	defer srv.Close()
	big := `{"tenant": "acme", "key": "` + strings.Repeat("x", wire.MaxRequestBytes) + `", "reserve": true}`
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		code                     wire.Code
		detail                   string
	}{
		{"malformed JSON", "POST", "/v1/decide", `{"tenant": `, 400, wire.CodeInvalidRequest, "malformed JSON"},
		{"missing tenant", "POST", "/v1/decide", `{"weight": 1}`, 400, wire.CodeInvalidRequest, "tenant is missing"},
		{"weight zero", "POST", "/v1/decide", `{"tenant": "acme", "weight": 0}`, 400, wire.CodeInvalidWeight, "weight is 0"},
		{"invalid tenant", "POST", "/v1/decide", `{"tenant": "a{b"}`, 404, wire.CodeUnknownTenant, `"a{b"`}, // no default plan: unknown first
		{"unknown tenant", "POST", "/v1/decide", `{"tenant": "nobody"}`, 404, wire.CodeUnknownTenant, `tenant "nobody" has no plan`},
		{"over capacity", "POST", "/v1/decide", `{"tenant": "acme", "weight": 6}`, 422, wire.CodeWeightOverCapacity, "weight 6 exceeds 5"},
		{"too large", "POST", "/v1/decide", big, 413, wire.CodeRequestTooLarge, "65536"},
		{"wrong method", "GET", "/v1/decide", "", 405, wire.CodeMethodNotAllowed, "POST only"},
		{"tenant wrong method", "DELETE", "/v1/tenants/acme", "", 405, wire.CodeMethodNotAllowed, "GET only"},
		{"no such endpoint", "GET", "/v2/decide", "", 404, wire.CodeNotFound, "/v2/decide"},
		{"unknown tenant state", "GET", "/v1/tenants/nobody", "", 404, wire.CodeUnknownTenant, `"nobody"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := call(t, srv, tc.method, tc.path, tc.body)
			e := decode[wire.ErrorBody](t, body)
			if resp.StatusCode != tc.status || e.Error != tc.code || !strings.Contains(e.Detail, tc.detail) || resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("%d %+v, want %d %s %q", resp.StatusCode, e, tc.status, tc.code, tc.detail)
			}
			if resp.Header.Get("RateLimit") != "" || resp.Header.Get("Retry-After") != "" {
				t.Errorf("refusal with rate-limit headers %v", resp.Header)
			}
			if tc.status == 405 && resp.Header.Get("Allow") == "" {
				t.Error("405 without Allow")
			}
		})
	}
	// A body over the limit without a Content-Length (chunked) is cut at the limit.
	pr, pw := io.Pipe()
	go func() {
		_, _ = io.WriteString(pw, big)
		_ = pw.Close()
	}()
	req, _ := http.NewRequest("POST", srv.URL+"/v1/decide", pr)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if e := decode[wire.ErrorBody](t, string(b)); resp.StatusCode != 413 || e.Error != wire.CodeRequestTooLarge {
		t.Fatalf("chunked body over the limit: %d %+v", resp.StatusCode, e)
	}
}

// TestNATSService: the service is discoverable, answers a decision and a denial as normal
// replies, and refuses with the micro error headers carrying the HTTP status.
func TestNATSService(t *testing.T) {
	srv := testenv.StartNATS(t)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	svc, err := StartService(nc, newPolicy(t, plansYAML), ServiceConfig{Subject: "test.decide", Version: "1.2.3"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := svc.Stop(ctx); err != nil {
			t.Error(err)
		}
		if err := svc.Stop(ctx); err != nil { // twice is safe
			t.Error(err)
		}
	}()
	subj, err := micro.ControlSubject(micro.InfoVerb, wire.ServiceName, "")
	if err != nil {
		t.Fatal(err)
	}
	m, err := nc.Request(subj, nil, 2*time.Second)
	if err != nil {
		t.Fatalf("%s: %v", subj, err)
	}
	var info micro.Info
	if err := json.Unmarshal(m.Data, &info); err != nil {
		t.Fatal(err)
	}
	if info.Name != "admitter" || info.Version != "1.2.3" || len(info.Endpoints) != 1 || info.Endpoints[0].Name != "decide" || info.Endpoints[0].Subject != "test.decide" {
		t.Fatalf("info %+v", info)
	}
	ask := func(body string) *nats.Msg {
		t.Helper()
		m, err := nc.Request("test.decide", []byte(body), 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	m = ask(`{"tenant": "zoe", "weight": 2}`)
	if d := decode[wire.Decision](t, string(m.Data)); !d.Allowed || m.Header.Get(micro.ErrorCodeHeader) != "" || m.Header.Get("RateLimit") != `"burst";r=0;t=60` {
		t.Fatalf("allowed: %v %s", m.Header, m.Data)
	}
	m = ask(`{"tenant": "zoe"}`)
	if d := decode[wire.Decision](t, string(m.Data)); d.Allowed || d.WaitMs <= 0 || m.Header.Get(micro.ErrorCodeHeader) != "" || m.Header.Get("Retry-After") != "30" {
		t.Fatalf("denied: %v %s", m.Header, m.Data)
	}
	for body, want := range map[string]string{`nope`: "400", `{"tenant": "nobody"}`: "404", `{"tenant": "acme", "weight": 9}`: "422",
		`{"tenant": "` + strings.Repeat("a", wire.MaxRequestBytes) + `"}`: "413"} {
		m = ask(body)
		e := decode[wire.ErrorBody](t, string(m.Data))
		if m.Header.Get(micro.ErrorCodeHeader) != want || m.Header.Get(micro.ErrorHeader) != e.Detail || e.Detail == "" || wire.HTTPStatus(e.Error) != atoi(want) {
			t.Errorf("refusal of %.40q: %v %+v, want code %s", body, m.Header, e, want)
		}
	}
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

// TestNATSServiceConcurrent: requests are decided concurrently, every one answered, and Stop
// waits for those in flight.
func TestNATSServiceConcurrent(t *testing.T) {
	srv := testenv.StartNATS(t)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	svc, err := StartService(nc, newPolicy(t, plansYAML+"default_plan: free\n"), ServiceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for i := range 64 {
		wg.Go(func() {
			m, err := nc.Request(wire.DefaultDecideSubject, []byte(`{"tenant": "t`+string(rune('a'+i%8))+`"}`), 5*time.Second)
			if err != nil {
				t.Error(err)
				return
			}
			var d wire.Decision
			if err := json.Unmarshal(m.Data, &d); err != nil {
				t.Error(err)
				return
			}
			if d.Allowed {
				mu.Lock()
				allowed++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if allowed != 40 { // 8 tenants × burst 5
		t.Errorf("%d allowed, want 40", allowed)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := svc.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Request(wire.DefaultDecideSubject, []byte(`{"tenant": "ta"}`), 300*time.Millisecond); err == nil {
		t.Error("a stopped service answered")
	}
}

// TestPausedRefusedByEveryFace: a paused tenant is refused over HTTP (429, Retry-After the
// rest of the pause, limit "paused") and over NATS (the same body, as a normal reply).
func TestPausedRefusedByEveryFace(t *testing.T) {
	pol := newPolicy(t, plansYAML)
	pol.SetPauses(map[string]time.Time{"acme": time.Now().Add(time.Hour)})
	srv := httptest.NewServer(NewHandler(pol))
	defer srv.Close()
	resp, body := call(t, srv, "POST", "/v1/decide", `{"tenant": "acme"}`)
	d := decode[wire.Decision](t, body)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "3600" || d.Allowed || d.Limit != "paused" || d.WaitMs < 3_599_000 {
		t.Fatalf("HTTP: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	ns := testenv.StartNATS(t)
	nc, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	svc, err := StartService(nc, pol, ServiceConfig{Subject: "test.decide"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = svc.Stop(context.Background()) }()
	m, err := nc.Request("test.decide", []byte(`{"tenant": "acme"}`), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if d := decode[wire.Decision](t, string(m.Data)); d.Allowed || d.Limit != "paused" || m.Header.Get("Retry-After") != "3600" {
		t.Fatalf("NATS: %v %s", m.Header, m.Data)
	}
}
