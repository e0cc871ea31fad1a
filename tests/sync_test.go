package tests

// Synchronous decisions on the built binary: the HTTP decision API and the NATS micro service,
// against a real redis-server, sharing the queue's buckets.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/admitter/admitter/internal/testenv"
	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go/micro"
)

// syncPlans: {5, 2/s} for acme, the default for everyone else; a second plan for capacity
// checks.
const syncPlans = `
plans:
  free:
    limits:
      - {capacity: 5, rate: 2/s}
  gold:
    limits:
      - {name: burst, capacity: 3, rate: 1/s}
tenants:
  acme: free
  initech: gold
`

// apiResponse is one answer of the decision API.
type apiResponse struct {
	status int
	header http.Header
	body   string
}

// post sends a body to url and returns the answer (status -1 when nothing answers).
func post(t *testing.T, url, body string) apiResponse {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return apiResponse{status: -1, body: err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return apiResponse{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// strict decodes a JSON body into T, refusing unknown fields.
func strict[T any](t *testing.T, body string) T {
	t.Helper()
	var v T
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	return v
}

// freeAddr is a free loopback address.
func freeAddr(t *testing.T) string {
	t.Helper()
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1:" + strconv.Itoa(port)
}

// TestDecideBurstOverHTTPAndNATS: 8 concurrent calls on a {5, 2/s} plan get 5 × 200 and
// 3 × 429 with Retry-After and the RateLimit headers; the NATS service, discovered through
// $SRV.INFO.admitter, answers from the same bucket; the metrics count both by source.
func TestDecideBurstOverHTTPAndNATS(t *testing.T) {
	w := newWorld(t, syncPlans)
	api, metrics := freeAddr(t), freeAddr(t)
	w.start("ADMITTER_API_ADDR="+api, "ADMITTER_HTTP_ADDR="+metrics)
	url := "http://" + api + "/v1/decide"

	answers := make([]apiResponse, 8)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Go(func() { answers[i] = post(t, url, `{"tenant": "acme"}`) })
	}
	wg.Wait()
	byStatus := map[int]int{}
	for _, a := range answers {
		byStatus[a.status]++
		if a.header.Get("Content-Type") != "application/json" || a.header.Get("RateLimit-Policy") != `"0";q=5;w=3` {
			t.Errorf("answer %d: headers %v", a.status, a.header)
		}
		d := strict[wire.Decision](t, a.body)
		if d.Tenant != "acme" || d.Plan != "free" || d.Limit != "0" || d.Degraded || d.Reserved {
			t.Errorf("answer %d: body %+v", a.status, d)
		}
		switch a.status {
		case 200:
			if !d.Allowed || d.WaitMs != 0 || d.Remaining < 0 || d.Remaining > 4 || a.header.Get("Retry-After") != "" ||
				a.header.Get("RateLimit") != fmt.Sprintf(`"0";r=%d;t=%d`, d.Remaining, (5-d.Remaining+1)/2) {
				t.Errorf("allowed: %v %+v", a.header, d)
			}
		case 429:
			// The bucket is empty: the weight fits within a token's refill, 500 ms.
			if d.Allowed || d.WaitMs < 1 || d.WaitMs > 500 || d.Remaining != 0 || a.header.Get("Retry-After") != "1" || a.header.Get("RateLimit") != `"0";r=0;t=1` {
				t.Errorf("denied: %v %+v", a.header, d)
			}
		}
	}
	if byStatus[200] != 5 || byStatus[429] != 3 {
		t.Fatalf("statuses %v, want 5 × 200 and 3 × 429", byStatus)
	}

	// NATS: discovery, then a request answered from the same (empty) bucket.
	subj, err := micro.ControlSubject(micro.InfoVerb, "admitter", "")
	if err != nil {
		t.Fatal(err)
	}
	m, err := w.nc.Request(subj, nil, 5*time.Second)
	if err != nil {
		t.Fatalf("request %s: %v", subj, err)
	}
	var info micro.Info
	if err := json.Unmarshal(m.Data, &info); err != nil {
		t.Fatal(err)
	}
	if info.Name != "admitter" || len(info.Endpoints) != 1 || info.Endpoints[0].Name != "decide" || info.Endpoints[0].Subject != "admitter.decide" {
		t.Fatalf("service info %+v", info)
	}
	m, err = w.nc.Request("admitter.decide", []byte(`{"tenant": "acme"}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if d := strict[wire.Decision](t, string(m.Data)); d.Allowed || d.WaitMs <= 0 || m.Header.Get(micro.ErrorCodeHeader) != "" ||
		m.Header.Get("Retry-After") != "1" || m.Header.Get("RateLimit") != `"0";r=0;t=1` {
		t.Fatalf("nats answer after the HTTP burst: %v %s", m.Header, m.Data)
	}
	m, err = w.nc.Request("admitter.decide", []byte(`{"tenant": "initech", "weight": 4}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if e := strict[wire.ErrorBody](t, string(m.Data)); m.Header.Get(micro.ErrorCodeHeader) != "422" || e.Error != wire.CodeWeightOverCapacity ||
		m.Header.Get(micro.ErrorHeader) != e.Detail {
		t.Fatalf("nats refusal: %v %s", m.Header, m.Data)
	}

	_, body := httpGet(t, "http://"+metrics+"/metrics")
	for _, c := range []struct {
		labels []string
		want   float64
	}{
		{[]string{`source="http"`, `outcome="admitted"`, `plan="free"`}, 5},
		{[]string{`source="http"`, `outcome="throttled"`, `plan="free"`}, 3},
		{[]string{`source="nats"`, `outcome="throttled"`, `plan="free"`}, 1},
		{[]string{`source="nats"`, `outcome="rejected"`, `plan="gold"`}, 1},
	} {
		if got := metricValue(body, "admitter_decisions_total", c.labels...); got != c.want {
			t.Errorf("admitter_decisions_total%v = %g, want %g", c.labels, got, c.want)
		}
	}
	if n := metricValue(body, "admitter_decision_duration_seconds_count"); n < 9 {
		t.Errorf("%g decision durations recorded, want at least 9", n)
	}
}

// TestDecideAPIErrors: every refusal of the API on the built binary, with its status, code and
// JSON body; a tenant's state; reservations.
func TestDecideAPIErrors(t *testing.T) {
	w := newWorld(t, syncPlans)
	api := freeAddr(t)
	p := w.start("ADMITTER_API_ADDR=" + api)
	base := "http://" + api
	check := func(method, path, body string, status int, code wire.Code, detail string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		e := strict[wire.ErrorBody](t, string(b))
		if resp.StatusCode != status || e.Error != code || !strings.Contains(e.Detail, detail) {
			t.Errorf("%s %s %.60q: %d %+v, want %d %s %q", method, path, body, resp.StatusCode, e, status, code, detail)
		}
	}
	check("POST", "/v1/decide", `{"tenant": "acme"`, 400, wire.CodeInvalidRequest, "malformed JSON")
	check("POST", "/v1/decide", `{"weight": 2}`, 400, wire.CodeInvalidRequest, "tenant is missing")
	check("POST", "/v1/decide", `{"tenant": "acme", "key": "k"}`, 400, wire.CodeInvalidRequest, `without "reserve": true`)
	check("POST", "/v1/decide", `{"tenant": "acme", "weight": 0}`, 400, wire.CodeInvalidWeight, "weight is 0")
	check("POST", "/v1/decide", `{"tenant": "acme", "weight": 2.5}`, 400, wire.CodeInvalidWeight, "weight is 2.5")
	check("POST", "/v1/decide", `{"tenant": "nobody"}`, 404, wire.CodeUnknownTenant, `tenant "nobody" has no plan`)
	check("POST", "/v1/decide", `{"tenant": "initech", "weight": 4}`, 422, wire.CodeWeightOverCapacity, "weight 4 exceeds 3")
	check("POST", "/v1/decide", `{"tenant": "`+strings.Repeat("a", 70_000)+`"}`, 413, wire.CodeRequestTooLarge, "65536")
	check("GET", "/v1/decide", "", 405, wire.CodeMethodNotAllowed, "POST only")
	check("GET", "/v1/nothing", "", 404, wire.CodeNotFound, "/v1/nothing")
	check("GET", "/v1/tenants/nobody", "", 404, wire.CodeUnknownTenant, `"nobody"`)

	// A reservation on initech's {3, 1/s}: the burst, then a slot booked a second ahead.
	for range 3 {
		if a := post(t, base+"/v1/decide", `{"tenant": "initech"}`); a.status != 200 {
			t.Fatalf("burst: %d %s", a.status, a.body)
		}
	}
	a := post(t, base+"/v1/decide", `{"tenant": "initech", "key": "order-7", "reserve": true}`)
	d := strict[wire.Decision](t, a.body)
	if a.status != 429 || !d.Reserved || d.WaitMs <= 0 || d.WaitMs > 1000 || a.header.Get("Retry-After") != "1" || a.header.Get("RateLimit-Policy") != `"burst";q=3;w=3` {
		t.Fatalf("reservation: %d %v %+v", a.status, a.header, d)
	}
	resp, err := http.Get(base + "/v1/tenants/initech")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if st := strict[wire.TenantState](t, string(b)); resp.StatusCode != 200 || st.Plan != "gold" || st.Reservations != 1 || st.Limit != "burst" || st.WaitMs <= 1000 {
		t.Fatalf("tenant state: %d %+v", resp.StatusCode, st)
	}
	// Before its slot the reservation is told the rest of the wait; at its slot it is allowed,
	// and again, free (the state says nothing more was taken).
	waitFor(t, 5*time.Second, "the reservation's slot", func() bool {
		a := post(t, base+"/v1/decide", `{"tenant": "initech", "key": "order-7", "reserve": true}`)
		if a.status == 429 && !strict[wire.Decision](t, a.body).Reserved {
			t.Fatalf("the reservation was lost before its slot: %s", a.body)
		}
		return a.status == 200
	})
	if a := post(t, base+"/v1/decide", `{"tenant": "initech", "key": "order-7", "reserve": true}`); a.status != 200 {
		t.Fatalf("the claimed reservation again: %d %s", a.status, a.body)
	}
	p.kill()

	// With a default plan, a name that cannot key buckets is invalid rather than unknown.
	plans := filepath.Join(t.TempDir(), "plans.yaml")
	if err := os.WriteFile(plans, []byte(syncPlans+"default_plan: free\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w.start("ADMITTER_API_ADDR="+api, "ADMITTER_PLANS_FILE="+plans)
	check("POST", "/v1/decide", `{"tenant": "a{b"}`, 400, wire.CodeInvalidTenant, `"a{b"`)
	check("GET", "/v1/tenants/a%7Db", "", 400, wire.CodeInvalidTenant, `"a}b"`)
	if a := post(t, base+"/v1/decide", `{"tenant": "somebody"}`); a.status != 200 {
		t.Errorf("a tenant on the default plan: %d %s", a.status, a.body)
	}
}

// TestDecideFailModes: with Redis killed, fail open allows marked degraded (Admit-Degraded:
// fail-open), fail closed refuses with 503 limiter-unavailable and Retry-After; over HTTP and
// NATS alike, each call bounded by ADMITTER_REDIS_TIMEOUT.
func TestDecideFailModes(t *testing.T) {
	w := newWorld(t, syncPlans)
	open, closed := freeAddr(t), freeAddr(t)
	w.start("ADMITTER_API_ADDR="+open, "ADMITTER_FAIL_MODE=open", "ADMITTER_API_SUBJECT=open.decide")
	w.start("ADMITTER_API_ADDR="+closed, "ADMITTER_FAIL_MODE=closed", "ADMITTER_API_SUBJECT=closed.decide")
	for _, addr := range []string{open, closed} {
		if a := post(t, "http://"+addr+"/v1/decide", `{"tenant": "acme"}`); a.status != 200 || a.header.Get(wire.HeaderDegraded) != "" {
			t.Fatalf("with redis: %d %v %s", a.status, a.header, a.body)
		}
	}
	w.redis.Kill()

	begin := time.Now()
	a := post(t, "http://"+open+"/v1/decide", `{"tenant": "acme"}`)
	if d := strict[wire.Decision](t, a.body); a.status != 200 || !d.Allowed || !d.Degraded || a.header.Get("Admit-Degraded") != "fail-open" || a.header.Get("RateLimit") != "" {
		t.Errorf("fail open: %d %v %+v", a.status, a.header, d)
	}
	a = post(t, "http://"+closed+"/v1/decide", `{"tenant": "acme"}`)
	if e := strict[wire.ErrorBody](t, a.body); a.status != 503 || e.Error != wire.CodeLimiterUnavailable || e.WaitMs <= 0 ||
		a.header.Get("Retry-After") == "" || a.header.Get("Admit-Degraded") != "" {
		t.Errorf("fail closed: %d %v %+v", a.status, a.header, e)
	}
	// What is refused for itself stays refused.
	if a := post(t, "http://"+open+"/v1/decide", `{"tenant": "nobody"}`); a.status != 404 {
		t.Errorf("unknown tenant with redis down, fail open: %d %s", a.status, a.body)
	}
	m, err := w.nc.Request("open.decide", []byte(`{"tenant": "acme"}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if d := strict[wire.Decision](t, string(m.Data)); !d.Allowed || !d.Degraded || m.Header.Get("Admit-Degraded") != "fail-open" {
		t.Errorf("nats fail open: %v %s", m.Header, m.Data)
	}
	m, err = w.nc.Request("closed.decide", []byte(`{"tenant": "acme"}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if e := strict[wire.ErrorBody](t, string(m.Data)); e.Error != wire.CodeLimiterUnavailable || m.Header.Get(micro.ErrorCodeHeader) != "503" || m.Header.Get("Retry-After") == "" {
		t.Errorf("nats fail closed: %v %s", m.Header, m.Data)
	}
	if took := time.Since(begin); took > 10*time.Second {
		t.Errorf("five calls with redis down took %v: not bounded by the 250ms decision deadline", took)
	}
}

// TestQueuedJobWaitsForAPICalls: API calls and queued jobs of a tenant share its buckets: a job
// published after the calls spent the burst is delayed until a token is back.
func TestQueuedJobWaitsForAPICalls(t *testing.T) {
	w := newWorld(t, syncPlans)
	api, metrics := freeAddr(t), freeAddr(t)
	w.start("ADMITTER_API_ADDR="+api, "ADMITTER_HTTP_ADDR="+metrics)
	for i := range 5 {
		if a := post(t, "http://"+api+"/v1/decide", `{"tenant": "acme"}`); a.status != 200 {
			t.Fatalf("call %d: %d %s", i, a.status, a.body)
		}
	}
	w.publish("jobs.submit.acme.email", "after the calls")
	out := w.read("ADMITTED", 1, 10*time.Second)
	delay, err := strconv.Atoi(out[0].header.Get(wire.HeaderDelayMs))
	if err != nil || delay < 200 {
		t.Errorf("the job was forwarded %q ms after it was stored, want about 500 (a token's refill): the calls did not spend its bucket", out[0].header.Get(wire.HeaderDelayMs))
	}
	_, body := httpGet(t, "http://"+metrics+"/metrics")
	if n := metricValue(body, "admitter_decisions_total", `source="queue"`, `outcome="delayed"`, `plan="free"`); n != 1 {
		t.Errorf("queue delayed decisions %g, want 1", n)
	}
	if n := metricValue(body, "admitter_decisions_total", `source="queue"`, `outcome="admitted"`, `plan="free"`); n != 1 {
		t.Errorf("queue admitted decisions %g, want 1", n)
	}
}
