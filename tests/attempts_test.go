package tests

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/admitter/admitter/internal/testenv"
	"github.com/admitter/admitter/wire"
)

// TestAttemptsAndDecisionsCountWhatTheReadmeSays: the demo's and the bench's "attempts per job"
// are the mean Admit-Attempts, which the README and the metric's help tell apart from
// admitter_decisions_total. Eight jobs on a plan of 5 that refills one an hour: five go, three
// wait; three reloads of the plans wake the queue, whose head is asked again each time and told
// again to wait; then a faster plan lets the three go (from an empty bucket: a head told to wait
// 10 ms at a time). The metric counts each job once per outcome (8 admitted, 3 delayed, however
// often they were asked), and Admit-Attempts counts the asks at the head: 1 for the first five,
// and for the head 1 + its waits there (at least 5: its first, one per reload, one on the faster
// plan), so that their mean is more than the metric's decisions per admitted job. Before, the
// demo and the bench called the mean Admit-Attempts "decisions per job".
func TestAttemptsAndDecisionsCountWhatTheReadmeSays(t *testing.T) {
	const slow = "plans:\n  p: {limits: [{name: burst, capacity: 5, rate: 1/h}]}\ntenants:\n  bob: p\n"
	w := newWorld(t, slow)
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	metrics := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	p := w.start(fmt.Sprintf("ADMITTER_HTTP_ADDR=127.0.0.1:%d", port))
	metric := func(name string, labels ...string) float64 {
		_, body := httpGet(t, metrics)
		return metricValue(body, name, labels...)
	}
	decisions := func(outcome string) float64 {
		return metric(wire.MetricDecisions.Prom, `source="queue"`, `outcome="`+outcome+`"`)
	}
	calls := func() float64 { return metric(wire.MetricDecisionTime.Prom + "_count") }

	w.publishMany("jobs.submit.bob.x", "job", 8, 0)
	w.read("ADMITTED", 5, 10*time.Second)
	waitFor(t, 10*time.Second, "the three others to be told to wait", func() bool { return decisions("delayed") == 3 })
	for i := range 3 {
		before := calls()
		replaceFile(t, w.plans, slow+fmt.Sprintf("# reload %d\n", i))
		waitFor(t, 10*time.Second, "the reload to ask about the head again", func() bool {
			return strings.Count(p.logs.String(), "plans reloaded") == i+1 && calls() > before
		})
	}
	replaceFile(t, w.plans, strings.Replace(slow, "1/h", "100/s", 1))
	jobs := w.read("ADMITTED", 8, 10*time.Second)

	if a, d := decisions("admitted"), decisions("delayed"); a != 8 || d != 3 {
		t.Errorf("admitter_decisions_total: admitted %v, delayed %v; want 8 and 3, each job once per outcome", a, d)
	}
	var attempts []int
	for _, j := range jobs {
		n, err := strconv.Atoi(j.header.Get(wire.HeaderAttempts))
		if err != nil {
			t.Fatalf("Admit-Attempts %q: %v", j.header.Get(wire.HeaderAttempts), err)
		}
		attempts = append(attempts, n)
	}
	t.Logf("Admit-Attempts in order: %v", attempts)
	sum := 0
	for i, n := range attempts {
		sum += n
		if i < 5 && n != 1 {
			t.Errorf("job %d, admitted at once: Admit-Attempts %d, want 1", i, n)
		}
	}
	if attempts[5] < 5 {
		t.Errorf("the head: Admit-Attempts %d, want at least 5 (its first wait, one per reload, one on the faster plan, then its admission)", attempts[5])
	}
	if mean, perJob := float64(sum)/8, (decisions("admitted")+decisions("delayed"))/8; mean <= perJob {
		t.Errorf("mean Admit-Attempts %.3f, decisions per admitted job %.3f: want the asks to outnumber the decisions here", mean, perJob)
	} else {
		t.Logf("mean Admit-Attempts %.3f, admitter_decisions_total per admitted job %.3f", mean, perJob)
	}
}
