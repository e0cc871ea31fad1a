package tests

import (
	"fmt"

	"github.com/admitter/admitter/internal/testenv"
	"github.com/admitter/admitter/wire"
	"strings"
	"syscall"
	"testing"
	"time"
)

const onePlan = `
plans:
  free:
    limits:
      - {capacity: 5, rate: 20/s}
  fast:
    limits:
      - {capacity: 20, rate: 200/s}
tenants:
  bob: free
  carol: fast
`

// countDegraded counts forwarded jobs marked Admit-Degraded: fail-open.
func countDegraded(jobs []job) int {
	n := 0
	for _, j := range jobs {
		if j.header.Get("Admit-Degraded") == "fail-open" {
			n++
		}
	}
	return n
}

// uniquePayloads fails the test if a payload was forwarded twice and returns the count.
func uniquePayloads(t *testing.T, jobs []job) int {
	t.Helper()
	seen := map[string]bool{}
	for _, j := range jobs {
		if seen[j.payload] {
			t.Fatalf("job %s forwarded twice", j.payload)
		}
		seen[j.payload] = true
	}
	return len(seen)
}

func TestFailOpenWhileRedisIsDown(t *testing.T) {
	w := newWorld(t, onePlan)
	p := w.start("ADMITTER_FAIL_MODE=open") // the default is local (tests/faults_test.go)
	w.publish("jobs.submit.bob.x", "before")
	w.read("ADMITTED", 1, 10*time.Second)

	w.redis.Kill()
	for i := range 10 {
		w.publish("jobs.submit.bob.x", fmt.Sprint("during-", i))
	}
	got := w.read("ADMITTED", 11, 10*time.Second)
	if n := countDegraded(got); n != 10 {
		t.Fatalf("%d jobs forwarded fail-open, want the 10 published while Redis was down", n)
	}

	if err := w.redis.Start(); err != nil {
		t.Fatal(err)
	}
	// Probe until a job passes with a real decision again.
	probes := 0
	waitFor(t, 20*time.Second, "a decided forward after Redis came back", func() bool {
		w.publish("jobs.submit.carol.x", fmt.Sprint("after-", probes))
		probes++
		time.Sleep(100 * time.Millisecond)
		got = w.readAll("ADMITTED")
		for _, j := range got {
			if strings.HasPrefix(j.payload, "after-") && j.header.Get("Admit-Degraded") == "" {
				return true
			}
		}
		return false
	})
	// State changes are logged, not jobs: one outage, ten jobs, at most a flap of the
	// reconnection (rueidis has more than one connection) beside it.
	logs := p.logs.String()
	if n := strings.Count(logs, "limiter unavailable"); n < 1 || n > 2 {
		t.Errorf("'limiter unavailable' logged %d times for one outage and 10 jobs, want 1 (2 at most)", n)
	}
	if n := strings.Count(logs, "limiter available again"); n < 1 || n > 2 {
		t.Errorf("'limiter available again' logged %d times, want 1 (2 at most)", n)
	}
	uniquePayloads(t, w.read("ADMITTED", 11+probes, 10*time.Second))
}

func TestFailClosedWhileRedisIsDown(t *testing.T) {
	w := newWorld(t, onePlan)
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	metrics := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	p := w.start("ADMITTER_FAIL_MODE=closed", fmt.Sprintf("ADMITTER_HTTP_ADDR=127.0.0.1:%d", port))
	w.redis.Kill()
	for i := range 3 {
		w.publish("jobs.submit.carol.x", fmt.Sprint("job-", i))
	}
	// Each job is refused a decision and held back (counted held once), then tried again, more
	// than once (each try a fail-mode event).
	waitFor(t, 20*time.Second, "every job to be held back and tried again while Redis is down", func() bool {
		_, body := httpGet(t, metrics)
		return metricValue(body, "admitter_decisions_total", `outcome="held"`) >= 1 &&
			metricValue(body, "admitter_fail_mode_events_total", `mode="closed"`) >= 6
	})
	if got := w.readAll("ADMITTED"); len(got) != 0 {
		t.Fatalf("fail-closed forwarded %d jobs while Redis was down", len(got))
	}
	if err := w.redis.Start(); err != nil {
		t.Fatal(err)
	}
	got := w.read("ADMITTED", 3, 30*time.Second)
	if countDegraded(got) != 0 || uniquePayloads(t, got) != 3 {
		t.Fatalf("after Redis came back: %d forwarded, %d degraded", len(got), countDegraded(got))
	}
	if n := strings.Count(p.logs.String(), "limiter unavailable"); n < 1 || n > 2 {
		t.Errorf("'limiter unavailable' logged %d times for one outage and 6+ held decisions, want 1 (2 at most)", n)
	}
}

// TestCrashMidStreamForwardsEveryJobOnce kills the admitter with SIGKILL while it paces a
// backlog, restarts it, and checks every job is forwarded exactly once.
func TestCrashMidStreamForwardsEveryJobOnce(t *testing.T) {
	t.Parallel()
	w := newWorld(t, onePlan)
	p := w.start()
	const n = 300
	for i := range n {
		w.publish("jobs.submit.carol.work", fmt.Sprint("job-", i))
	}
	w.read("ADMITTED", 60, 20*time.Second)
	p.kill()
	before := len(w.readAll("ADMITTED"))
	w.start()
	w.read("ADMITTED", n, 60*time.Second)
	waitFor(t, 20*time.Second, "the input stream to drain", func() bool { return w.streamMsgs("JOBS") == 0 })
	got := w.readAll("ADMITTED")
	if uniquePayloads(t, got) != n || len(got) != n {
		t.Fatalf("forwarded %d messages for %d jobs", len(got), n)
	}
	t.Logf("killed after %d of %d forwarded; after restart all %d forwarded once", before, n, n)
}

// TestTwoReplicasShareTheTenants runs two admitters on one input: each tenant's queue is decided
// by one of them, both decide some, every job is forwarded once, and no tenant exceeds its plan.
func TestTwoReplicasShareTheTenants(t *testing.T) {
	t.Parallel()
	w := newPartitionedWorld(t, onePlan+"default_plan: free\n", 8)
	var replicas []*proc
	var metrics []string
	for range 2 {
		port, err := testenv.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		replicas = append(replicas, w.start("ADMITTER_WORKERS=4", fmt.Sprintf("ADMITTER_HTTP_ADDR=127.0.0.1:%d", port)))
		metrics = append(metrics, fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	}
	waitFor(t, 10*time.Second, "both replicas to see each other", func() bool {
		for _, url := range metrics {
			if _, body := httpGet(t, url); metricValue(body, wire.MetricReplicas.Prom) != 2 {
				return false
			}
		}
		return true
	})
	w.waitShared(metrics...)
	const tenants, each, capacity, rate = 12, 25, 5, 20.0
	start := time.Now()
	for i := range each {
		for k := range tenants {
			w.publish(fmt.Sprintf("jobs.submit.bob%02d.x", k), fmt.Sprintf("job-%02d-%d", k, i))
		}
	}
	got := w.read("ADMITTED", tenants*each, 30*time.Second)
	if uniquePayloads(t, got) != tenants*each {
		t.Fatalf("forwarded %d, want %d", len(got), tenants*each)
	}
	for k := range tenants {
		times := arrivals(t, got, fmt.Sprintf("bob%02d", k))
		for n, at := range times {
			if bound := capacity + rate*at.Sub(start).Seconds() + 1; float64(n+1) > bound {
				t.Fatalf("bob%02d: %d jobs forwarded %v after the first; the plan allows %.1f", k, n+1, at.Sub(start), bound)
			}
		}
	}
	for i, url := range metrics {
		_, body := httpGet(t, url)
		decided := metricValue(body, "admitter_decisions_total")
		t.Logf("replica %d decided %v jobs, admitted %v", i, decided, metricValue(body, "admitter_decisions_total", `outcome="admitted"`))
		if decided == 0 {
			t.Errorf("replica %d decided no job: the tenants were not shared", i)
		}
	}
	for _, p := range replicas {
		if p.signal(syscall.SIGTERM, 15*time.Second) != 0 {
			t.Errorf("replica exited non-zero:\n%s", p.logs.String())
		}
	}
}

// TestSIGTERMSettlesAndExits stops the admitter while jobs are delayed and in flight: it exits 0
// within the bound, and a restarted admitter forwards every job once.
func TestSIGTERMSettlesAndExits(t *testing.T) {
	w := newWorld(t, onePlan)
	p := w.start()
	const n = 40
	for i := range n {
		w.publish("jobs.submit.bob.x", fmt.Sprint("job-", i))
	}
	w.read("ADMITTED", 8, 10*time.Second)
	if code := p.signal(syscall.SIGTERM, 15*time.Second); code != 0 {
		t.Fatalf("exit status %d after SIGTERM, want 0:\n%s", code, p.logs.String())
	}
	if !strings.Contains(p.logs.String(), "stopped") {
		t.Fatalf("no 'stopped' line:\n%s", p.logs.String())
	}
	w.start()
	got := w.read("ADMITTED", n, 30*time.Second)
	if uniquePayloads(t, got) != n {
		t.Fatalf("forwarded %d, want %d", len(got), n)
	}
}
