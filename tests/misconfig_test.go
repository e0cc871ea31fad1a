package tests

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/admitter/admitter/internal/testenv"
)

// TestJobsWithoutTheMappingAreWarnedOnce: ADMITTER_PARTITIONS=4 on a NATS server without the
// partitions' mapping. The jobs land in JOBS and are forwarded all the same; the admitter warns
// once for the episode (not once per job), naming the stream and the mapping line to add, and
// /readyz answers ready with that detail. Before, the jobs flowed through JOBS with nothing but
// an info line per tenant ("the tenant's jobs left in an older stream are forwarded"), and
// /readyz answered 503: the partitions' feeds, which had nothing to deliver, were taken as stuck.
func TestJobsWithoutTheMappingAreWarnedOnce(t *testing.T) {
	w := newWorld(t, onePlan+"default_plan: free\n") // a server without the mapping
	w.parts = 4
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	p := w.start(fmt.Sprintf("ADMITTER_HTTP_ADDR=127.0.0.1:%d", port))
	waitFor(t, 20*time.Second, "the replica to hold the 4 partitions", func() bool {
		return strings.Count(p.logs.String(), "partition taken") == 4
	})
	const mapping = `mappings { \"jobs.submit.*.>\": \"admitter.JOBS.4.{{partition(4,1)}}.jobs.submit.{{wildcard(1)}}.>\" }`
	warning := "jobs are published to a NATS server without this deployment's mapping"

	for i := range 3 {
		w.publish("jobs.submit.bob.x", fmt.Sprint("job-", i))
	}
	w.read("ADMITTED", 3, 20*time.Second)
	waitFor(t, 10*time.Second, "the warning", func() bool { return strings.Contains(p.logs.String(), warning) })
	for i := range 3 {
		w.publish("jobs.submit.carol.x", fmt.Sprint("job-", i))
	}
	w.read("ADMITTED", 6, 20*time.Second)

	var line string
	for _, l := range strings.Split(p.logs.String(), "\n") {
		if strings.Contains(l, warning) {
			if line != "" {
				t.Errorf("warned again within the episode:\n%s\n%s", line, l)
			}
			line = l
		}
	}
	if !strings.Contains(line, "level=WARN") || !strings.Contains(line, "stream=JOBS") || !strings.Contains(line, mapping) {
		t.Errorf("the warning does not name the stream and the mapping line %s:\n%s", mapping, line)
	}
	waitFor(t, 10*time.Second, "/readyz to answer ready with the detail", func() bool {
		code, body := httpGet(t, base+"/readyz")
		t.Logf("/readyz: %d %s", code, body)
		return code == 200 && strings.Contains(body, "jobs published without the partitions' mapping") &&
			strings.Contains(body, "stored in stream JOBS")
	})
}

// TestAPausePastMaxWaitIsRefusedWithoutYes: `admitter plans pause alpha --for 2m` on a plan whose
// max_wait is 60s would dead-letter every job the pause holds (README, "A bound on waiting"): the
// command says so and writes nothing unless --yes; a pause within max_wait goes as before. Before,
// it paused and said nothing of the jobs it would dead-letter.
func TestAPausePastMaxWaitIsRefusedWithoutYes(t *testing.T) {
	w := newWorld(t, `plans:
  exports:
    max_wait: 60s
    limits:
      - {capacity: 5, rate: 5/s}
tenants:
  alpha: exports
`)
	p := w.start()
	waitFor(t, 20*time.Second, "the admitter to run", func() bool { return strings.Contains(p.logs.String(), "partition taken") })

	code, stdout, stderr := w.plansCLI(nil, "pause", "alpha", "--for", "2m")
	if code != 2 || !strings.Contains(stderr, "max_wait 1m0s") || !strings.Contains(stderr, "expired") || !strings.Contains(stderr, "--yes") {
		t.Errorf("pause past max_wait: exit %d, stdout %q, stderr %q; want 2, saying the jobs would expire and how to pause anyway", code, stdout, stderr)
	}
	if _, out, _ := w.plansCLI(nil, "pauses"); !strings.Contains(out, "pauses (0)") {
		t.Errorf("a refused pause was written:\n%s", out)
	}

	code, stdout, stderr = w.plansCLI(nil, "pause", "alpha", "--for", "2m", "--yes")
	if code != 0 || !strings.Contains(stdout, "paused until") || !strings.Contains(stdout, "expired") {
		t.Errorf("pause --yes: exit %d, stdout %q, stderr %q; want 0, saying what expires", code, stdout, stderr)
	}
	if code, stdout, stderr := w.plansCLI(nil, "pause", "alpha", "--for", "30s"); code != 0 || strings.Contains(stdout, "expired") {
		t.Errorf("pause within max_wait: exit %d, stdout %q, stderr %q; want 0 without a word of expiry", code, stdout, stderr)
	}
}
