package tests

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/admitter/admitter/internal/testenv"
)

// httpGet returns the status and body of a GET, or -1 when nothing answers.
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	c := http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return -1, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metricValue sums the samples of a metric whose labels contain every given label pair.
func metricValue(body, name string, labels ...string) float64 {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `(\{[^}]*\})? ([0-9.e+-]+)$`)
	sum := 0.0
	for _, m := range re.FindAllStringSubmatch(body, -1) {
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(m[1], l)
		}
		if ok {
			v, _ := strconv.ParseFloat(m[2], 64)
			sum += v
		}
	}
	return sum
}

func TestMetricsMoveAndReadiness(t *testing.T) {
	w := newWorld(t, onePlan)
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	w.start(fmt.Sprintf("ADMITTER_HTTP_ADDR=127.0.0.1:%d", port))

	if code, body := httpGet(t, base+"/healthz"); code != 200 {
		t.Fatalf("/healthz = %d %s", code, body)
	}
	if code, body := httpGet(t, base+"/readyz"); code != 200 {
		t.Fatalf("/readyz = %d %s", code, body)
	}
	_, before := httpGet(t, base+"/metrics")
	for i := range 8 {
		w.publish("jobs.submit.bob.x", fmt.Sprint("job-", i))
	}
	w.publish("jobs.submit.bob.x", "bad", "Admit-Weight", "zero")
	w.read("ADMITTED", 8, 20*time.Second)
	w.read("DEAD", 1, 10*time.Second)
	_, after := httpGet(t, base+"/metrics")
	for _, c := range []struct {
		name   string
		labels []string
		min    float64
	}{
		{"admitter_decisions_total", []string{`outcome="admitted"`, `plan="free"`}, 8},
		{"admitter_decisions_total", []string{`outcome="delayed"`, `plan="free"`}, 1}, // burst 5, then delays
		{"admitter_decisions_total", []string{`outcome="dead"`, `plan="free"`}, 1},
		{"admitter_wait_seconds_count", nil, 1},
		{"admitter_decision_duration_seconds_count", nil, 2}, // a call decides a batch of a tenant's jobs
	} {
		got := metricValue(after, c.name, c.labels...) - metricValue(before, c.name, c.labels...)
		if got < c.min {
			t.Errorf("%s%v moved by %v, want at least %v", c.name, c.labels, got, c.min)
		}
	}
	for _, g := range []string{"admitter_jobs_in_flight", "admitter_queues", "admitter_jobs_waiting", "admitter_output_blocked", "admitter_replicas"} {
		if !strings.Contains(after, g) {
			t.Errorf("/metrics lacks %s", g)
		}
	}

	// NATS goes away: not ready, still alive.
	w.nats.Stop()
	waitFor(t, 15*time.Second, "/readyz to turn 503 without NATS", func() bool {
		code, _ := httpGet(t, base+"/readyz")
		return code == http.StatusServiceUnavailable
	})
	if code, _ := httpGet(t, base+"/healthz"); code != 200 {
		t.Fatalf("/healthz = %d while NATS is down, want 200 (the process is alive)", code)
	}
}

func TestInspectExplainsTheWait(t *testing.T) {
	// 30s per token: the state stands still while the test looks at it.
	w := newWorld(t, `
plans:
  slow:
    limits:
      - {name: hourly, capacity: 2, rate: 120/h}
default_plan: slow
`)
	w.start()
	for i := range 5 {
		w.publish("jobs.submit.zoe.x", fmt.Sprint("job-", i))
	}
	w.read("ADMITTED", 2, 10*time.Second)
	// two admitted, three waiting in the input
	waitFor(t, 10*time.Second, "three jobs waiting", func() bool { return w.streamMsgs("JOBS") == 3 })
	out, err := w.command("inspect", "zoe").CombinedOutput()
	if err != nil {
		t.Fatalf("admitter inspect zoe: %v\n%s", err, out)
	}
	text := string(out)
	for _, want := range []string{
		"tenant zoe, plan slow",
		"hourly  bucket  2 at 120/h  2     0     next token in 2", // 20-29 s: a token every 30 s
		"queue: held by the replica deciding it",
		"why jobs wait: limit hourly (bucket, 2 at 120/h) holds 0 tokens; a job of weight 1 fits in 2",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("inspect output lacks %q:\n%s", want, text)
		}
	}
	t.Logf("admitter inspect zoe:\n%s", text)
	if out, err := w.command("inspect", "nobody{").CombinedOutput(); err == nil {
		t.Errorf("inspect of an invalid tenant succeeded:\n%s", out)
	}
}
