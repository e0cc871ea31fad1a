package tests

import (
	"context"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestAStuckStepFailsReadinessAndSIGTERMEnds: the output stream takes one message and refuses
// the next (at most 1, discard new): acme's second forward is held and its step waits for good.
// /readyz answers 503 naming acme's step (no decision for ADMITTER_STALL_AFTER), the console's
// overview says so, and SIGTERM ends the process with exit status 1, the log naming the step and
// where it stood. Before, the process exited 0 after its bound, naming nothing, and /readyz said
// only that the output held a forward.
func TestAStuckStepFailsReadinessAndSIGTERMEnds(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "plans: {p: {limits: [{capacity: 10, rate: 10/s}]}}\ndefault_plan: p\n")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := w.js.CreateStream(ctx, jetstream.StreamConfig{Name: "ADMITTED", Subjects: []string{"jobs.admitted.>"},
		MaxMsgs: 1, Discard: jetstream.DiscardNew, Duplicates: 2 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	httpEnv, metricsURL := metricsPort(t)
	base := strings.TrimSuffix(metricsURL, "/metrics")
	p := w.start(httpEnv, "ADMITTER_STALL_AFTER=1s", "ADMITTER_SHUTDOWN_TIMEOUT=2s")
	w.publish("jobs.submit.acme.work", "job-0")
	w.publish("jobs.submit.acme.work", "job-1")
	var body string
	waitFor(t, 20*time.Second, "/readyz to say that acme's step decides nothing", func() bool {
		var code int
		code, body = httpGet(t, base+"/readyz")
		return code == 503 && strings.Contains(body, "no decision since")
	})
	if !strings.Contains(body, "acme (storing its forwards") {
		t.Errorf("/readyz: %q, want acme's step named, storing its forwards", body)
	}
	if _, page := httpGet(t, base+"/console/"); !regexp.MustCompile(`id="deciding" class="bad">stalled: [^<]*acme`).MatchString(page) {
		t.Errorf("the console's overview does not say that acme's queue decides nothing:\n%s", page)
	}
	sent := time.Now()
	code := p.signal(syscall.SIGTERM, 20*time.Second)
	t.Logf("exit status %d %v after SIGTERM (ADMITTER_SHUTDOWN_TIMEOUT=2s)", code, time.Since(sent).Round(time.Millisecond))
	if code != 1 {
		t.Errorf("exit status %d after SIGTERM with a step stuck, want 1", code)
	}
	if logs := p.logs.String(); !strings.Contains(logs, "acme (storing its forwards") {
		t.Errorf("the log does not name acme's stuck step:\n%s", logs)
	}
}
