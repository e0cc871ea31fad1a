package tests

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTheExampleWorkerChargesInTheWeightsUnit runs examples/worker, built, beside the admitter
// on a plan of 5 tokens at 5/s with a concurrency limit (its done messages reconcile the cost),
// and publishes the export its package comment shows (250,000 rows, Admit-Weight: 3). Once its
// done message is in, the tenant's next job goes within a second or two: the cost it reported is
// in the weight's unit. Before, it reported a unit per 1,000 rows, 250 for a job weighed 3: the
// plan was charged 247 more than its 5 tokens, and the next job waited about 50 s.
func TestTheExampleWorkerChargesInTheWeightsUnit(t *testing.T) {
	w := newWorld(t, `plans:
  exports:
    limits:
      - {name: burst, capacity: 5, rate: 5/s}
      - {name: running, kind: concurrency, limit: 4, lease: 30s}
tenants:
  acme: exports
`)
	env, metrics, api := servePorts(t)
	w.start(env...)

	bin := filepath.Join(t.TempDir(), "worker")
	if out, err := exec.Command("go", "build", "-o", bin, "../examples/worker").CombinedOutput(); err != nil {
		t.Fatalf("build examples/worker: %v\n%s", err, out)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "-nats", w.natsURL)
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	waitFor(t, 10*time.Second, "the example worker to start", func() bool { return strings.Contains(logs.String(), "worker: exporting") })

	w.publish("jobs.submit.acme.export.csv", "rows=250000", "Admit-Weight", "3")
	waitFor(t, 15*time.Second, "the export's done message", func() bool { return leaseMetric(t, metrics, "done", "released") >= 1 })
	burst := tenantLimit(t, api, "acme", "burst")
	t.Logf("after the export: %s\nlimit burst: %d tokens, a job of weight 1 fits in %dms", logs.String(), burst.Tokens, burst.WaitMs)

	start := time.Now()
	w.publish("jobs.submit.acme.email.send", "next")
	w.read("ADMITTED", 2, 5*time.Second)
	t.Logf("the tenant's next job went after %v", time.Since(start).Round(time.Millisecond))
}
