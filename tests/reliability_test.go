package tests

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/admitter/admitter/internal/testenv"
	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestTooLargeJobIsRefusedAtPublish: on an input stream the admitter made, a job too large to be
// forwarded with the admitter's headers is refused when the producer publishes it.
func TestTooLargeJobIsRefusedAtPublish(t *testing.T) {
	w := newWorld(t, "plans: {p: {limits: [{capacity: 5, rate: 5/s}]}}\ndefault_plan: p\n")
	w.start()
	m := nats.NewMsg("jobs.submit.acme.big")
	m.Data = make([]byte, int(w.nc.MaxPayload())-200)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := w.js.PublishMsg(ctx, m)
	var api *jetstream.APIError
	if !errors.As(err, &api) || api.ErrorCode != 10054 {
		t.Fatalf("publish of a job %d bytes under the maximum payload: %v, want the stream's refusal (message size exceeds maximum)", 200, err)
	}
	small := nats.NewMsg("jobs.submit.acme.small")
	small.Data = make([]byte, int(w.nc.MaxPayload())-8<<10)
	if _, err := w.js.PublishMsg(ctx, small); err != nil {
		t.Fatalf("a job with room for the headers is refused: %v", err)
	}
	w.read("ADMITTED", 1, 10*time.Second)
}

// TestTooLargeJobIsDeadLettered: on an input stream made by someone else without a size limit, a
// job that could never be forwarded (a few bytes under the maximum payload; with the admitter's
// headers it is over) is dead-lettered once, as too-large, with its size and input sequence; the
// dead letter cannot carry the payload either and says so. It is not redelivered for ever.
func TestTooLargeJobIsDeadLettered(t *testing.T) {
	w := newWorld(t, "plans: {p: {limits: [{capacity: 5, rate: 5/s}]}}\ndefault_plan: p\n")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := w.js.CreateStream(ctx, jetstream.StreamConfig{Name: "JOBS", Subjects: []string{"jobs.submit.>"}, Retention: jetstream.WorkQueuePolicy}); err != nil {
		t.Fatal(err)
	}
	w.start()
	m := nats.NewMsg("jobs.submit.acme.big")
	m.Data = make([]byte, int(w.nc.MaxPayload())-100)
	ack, err := w.js.PublishMsg(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	w.publish("jobs.submit.acme.after", "small") // the next job is not held behind it
	dead := w.read("DEAD", 1, 10*time.Second)
	h := dead[0].header
	if h.Get(wire.HeaderError) != string(wire.CodeTooLarge) {
		t.Fatalf("dead letter %s: %s", h.Get(wire.HeaderError), h.Get(wire.HeaderErrorDetail))
	}
	detail := h.Get(wire.HeaderErrorDetail)
	for _, want := range []string{"maximum payload", "payload", "left out", "sequence", "JOBS"} {
		if !strings.Contains(detail, want) {
			t.Errorf("the detail %q does not say %q", detail, want)
		}
	}
	if len(dead[0].payload) != 0 {
		t.Errorf("the dead letter carries %d bytes", len(dead[0].payload))
	}
	w.read("ADMITTED", 1, 10*time.Second)
	waitFor(t, 10*time.Second, "the input to be settled", func() bool { return w.streamMsgs("JOBS") == 0 })
	t.Logf("input %d dead-lettered: %s", ack.Sequence, detail)
}

// TestDuplicateWindowIsTheConfigured: the streams the admitter publishes to must recognise a
// forward repeated within ADMITTER_DUPLICATE_WINDOW (a replica that died after publishing it
// and before removing its job). Made by the admitter, their window is it; made by someone else
// too short, the admitter refuses to start and says what to change.
func TestDuplicateWindowIsTheConfigured(t *testing.T) {
	w := newWorld(t, "plans: {p: {limits: [{capacity: 5, rate: 5/s}]}}\ndefault_plan: p\n")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p := w.start("ADMITTER_DUPLICATE_WINDOW=5m")
	for _, name := range []string{"ADMITTED", "DEAD"} {
		st, err := w.js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if d := st.CachedInfo().Config.Duplicates; d != 5*time.Minute {
			t.Errorf("stream %s made with a duplicate window of %v, want ADMITTER_DUPLICATE_WINDOW's 5m", name, d)
		}
	}
	p.kill()

	w2 := newWorld(t, "plans: {p: {limits: [{capacity: 5, rate: 5/s}]}}\ndefault_plan: p\n")
	if _, err := w2.js.CreateStream(ctx, jetstream.StreamConfig{Name: "ADMITTED", Subjects: []string{"jobs.admitted.>"}, Duplicates: 2 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runBinary(t, append(w2.env(), "ADMITTER_DUPLICATE_WINDOW=5m"))
	if code == 0 || !strings.Contains(stderr, "duplicate window of 2m0s") || !strings.Contains(stderr, "ADMITTER_DUPLICATE_WINDOW") || !strings.Contains(stderr, "--dupe-window 5m0s") {
		t.Errorf("start beside a stream with too short a window: exit %d\n%s", code, stderr)
	}
}

// TestRedisThatMayEvictIsNamed: a Redis whose maxmemory-policy lets it drop keys forgets
// tenants' buckets under pressure; the admitter says so in the log, a metric and /readyz, and
// refuses to start when ADMITTER_REDIS_REQUIRE_NOEVICTION is set.
func TestRedisThatMayEvictIsNamed(t *testing.T) {
	w := newWorldWith(t, "plans: {p: {limits: [{capacity: 5, rate: 5/s}]}}\ndefault_plan: p\n",
		testenv.StartRedisWith(t, "--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru"))
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	p := w.start(fmt.Sprintf("ADMITTER_HTTP_ADDR=127.0.0.1:%d", port))
	if !strings.Contains(p.logs.String(), "maxmemory-policy") || !strings.Contains(p.logs.String(), "allkeys-lru") {
		t.Errorf("the log does not name the eviction policy:\n%s", p.logs.String())
	}
	code, body := httpGet(t, base+"/readyz")
	if code != 503 || !strings.Contains(body, "allkeys-lru") {
		t.Errorf("/readyz = %d %q, want 503 naming the policy", code, body)
	}
	_, metrics := httpGet(t, base+"/metrics")
	if v := metricValue(metrics, wire.MetricRedisEvicting.Prom); v != 1 {
		t.Errorf("%s = %v, want 1", wire.MetricRedisEvicting.Prom, v)
	}
	code, _, stderr := runBinary(t, append(w.env(), "ADMITTER_REDIS_REQUIRE_NOEVICTION=true"))
	if code != 2 || !strings.Contains(stderr, "ADMITTER_REDIS_REQUIRE_NOEVICTION") || !strings.Contains(stderr, "noeviction") {
		t.Errorf("with ADMITTER_REDIS_REQUIRE_NOEVICTION: exit %d, %q; want 2 naming the variable", code, stderr)
	}
}

// TestStartupTellsTheTruth: while NATS cannot be used, /healthz answers from the first second,
// /readyz says why, and the log gives the server's own reason once (an authorization violation
// marked permanent); ADMITTER_CONNECT_TIMEOUT bounds the wait.
func TestStartupTellsTheTruth(t *testing.T) {
	w := newWorld(t, "plans: {p: {limits: [{capacity: 5, rate: 5/s}]}}\ndefault_plan: p\n")
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	nobody, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	p := &proc{t: t, cmd: exec.Command(binary), logs: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Env = w.env(fmt.Sprintf("ADMITTER_HTTP_ADDR=127.0.0.1:%d", port), fmt.Sprintf("ADMITTER_NATS_URL=nats://127.0.0.1:%d", nobody))
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	defer p.kill()
	waitFor(t, 5*time.Second, "/healthz while NATS is unreachable", func() bool { code, _ := httpGet(t, base+"/healthz"); return code == 200 })
	waitFor(t, 5*time.Second, "/readyz to say why", func() bool {
		code, body := httpGet(t, base+"/readyz")
		return code == 503 && strings.Contains(body, "connect to NATS") && strings.Contains(body, "connection refused")
	})
	time.Sleep(time.Second)
	if n := strings.Count(p.logs.String(), "cannot connect to NATS"); n != 1 || !strings.Contains(p.logs.String(), "connection refused") {
		t.Errorf("the failure logged %d times in a second of retries, want once, with the reason:\n%s", n, p.logs.String())
	}

	// A server that refuses the credentials: the reason is the server's, marked permanent, and
	// the connect timeout ends the wait.
	secured := testenv.StartNATSWith(t, func(o *server.Options) { o.Username, o.Password = "admitter", "right" })
	u := strings.Replace(secured.URL(), "nats://", "nats://admitter:wrong@", 1)
	begin := time.Now()
	code, _, stderr := runBinary(t, append(w.env(), "ADMITTER_NATS_URL="+u, "ADMITTER_CONNECT_TIMEOUT=2s"))
	if code != 1 || !strings.Contains(stderr, "authorization violation") || !strings.Contains(stderr, "permanent=true") ||
		!strings.Contains(stderr, "ADMITTER_CONNECT_TIMEOUT") || strings.Contains(stderr, "wrong") {
		t.Errorf("wrong password: exit %d after %v\n%s", code, time.Since(begin), stderr)
	}
	if took := time.Since(begin); took > 8*time.Second {
		t.Errorf("ADMITTER_CONNECT_TIMEOUT=2s gave up after %v", took)
	}
}

// TestHTTPNeverHangs: with Redis frozen, /inspect answers 503 within its bound instead of
// hanging; with ADMITTER_HTTP_TOKEN, everything but metrics and health needs the token.
func TestHTTPNeverHangs(t *testing.T) {
	w := newWorld(t, "plans: {p: {limits: [{capacity: 5, rate: 5/s}]}}\ndefault_plan: p\n")
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	// Fail mode closed: nothing answers for Redis (in the default mode, local, /inspect answers
	// from the replica's copy: see TestRedisOutageKeepsThePlans).
	w.start(fmt.Sprintf("ADMITTER_HTTP_ADDR=127.0.0.1:%d", port), "ADMITTER_HTTP_TOKEN=s3cret-token", "ADMITTER_FAIL_MODE=closed")
	get := func(path, token string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			return -1, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
		if code, _ := get(path, ""); code != 200 {
			t.Errorf("%s without a token: %d, want 200", path, code)
		}
	}
	for _, tok := range []string{"", "wrong"} {
		if code, _ := get("/inspect?tenant=acme", tok); code != 401 {
			t.Errorf("/inspect with token %q: %d, want 401", tok, code)
		}
	}
	if code, body := get("/inspect?tenant=acme", "s3cret-token"); code != 200 || !strings.Contains(body, `"tenant":"acme"`) {
		t.Errorf("/inspect with the token: %d %s", code, body)
	}
	w.redis.Pause()
	defer w.redis.Resume()
	begin := time.Now()
	code, body := get("/inspect?tenant=acme", "s3cret-token")
	if took := time.Since(begin); code != 503 || took > 3*time.Second {
		t.Errorf("/inspect with Redis frozen: %d %q after %v; want 503 within about a second", code, body, took)
	}
}

// TestMegabyteBacklogAfterARestart: 300 jobs of 900 KiB (264 MiB), on a plan that lets them all
// go now, are queued while the admitter is down; started, it forwards them all once, and the
// server never cuts it off as a slow consumer (its pulls are bounded by bytes under the
// server's buffer for one client). The time it takes is measured, not asserted (the bound is
// the wait's).
func TestMegabyteBacklogAfterARestart(t *testing.T) {
	t.Parallel()
	const n, size = 300, 900 << 10
	w := newWorld(t, "plans: {p: {limits: [{capacity: 1000000, rate: 1000000/s}]}}\ndefault_plan: p\n")
	if code := w.start().signal(syscall.SIGTERM, 15*time.Second); code != 0 { // the streams exist; the admitter is down
		t.Fatalf("exit %d after SIGTERM", code)
	}
	for _, tenant := range []string{"acme", "bob", "carol"} {
		w.publishMany("jobs.submit."+tenant+".big", tenant, n/3, size)
	}
	slow := func() int64 {
		v, err := w.nats.Varz(nil)
		if err != nil {
			t.Fatal(err)
		}
		return v.SlowConsumers
	}
	slow0 := slow()
	begin := time.Now()
	p := w.start()
	waitFor(t, 60*time.Second, fmt.Sprintf("%d jobs of 900 KiB forwarded", n), func() bool { return w.streamMsgs("ADMITTED") >= n })
	took := time.Since(begin)
	waitFor(t, 10*time.Second, "the input to be settled", func() bool { return w.streamMsgs("JOBS") == 0 })
	seen := map[string]int{} // by the input each forward comes from
	for _, j := range w.readHeaders("ADMITTED") {
		seen[j.header.Get(nats.MsgIdHdr)]++
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("job %s forwarded %d times", id, c)
		}
	}
	if len(seen) != n {
		t.Errorf("%d distinct jobs forwarded, want %d", len(seen), n)
	}
	if s := slow() - slow0; s != 0 {
		t.Errorf("the server cut %d slow consumers off while the backlog moved", s)
	}
	t.Logf("%d jobs of 900 KiB (%d MiB) forwarded %v after the admitter started (%.0f MiB/s); peak RSS %d MiB (race build)",
		n, n*size>>20, took.Round(time.Millisecond), float64(n*size>>20)/took.Seconds(), peakRSS(t, p)>>20)
}
