package tests

// Acknowledgements and removals that the server refuses or does not answer: injected with a
// configuration reload that narrows the admitter's user's publish permissions for a while, on a
// live connection (FIELD-NOTES: "Injecting lost acknowledgements").

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/admitter/admitter/internal/testenv"
	"github.com/nats-io/nats-server/v2/server"
)

// lossyWorld is a world whose NATS server has two users, the admitter's and the test's, and
// deny narrows the admitter's publish permissions (nil: none denied) on the live server.
func lossyWorld(t *testing.T, plans string) (w *world, deny func(subjects ...string), env []string) {
	t.Helper()
	users := func(denied []string) func(*server.Options) {
		return func(o *server.Options) {
			var perms *server.Permissions
			if len(denied) > 0 {
				perms = &server.Permissions{Publish: &server.SubjectPermission{Deny: denied}}
			}
			o.Users = []*server.User{
				{Username: "admitter", Password: "admitter-pw", Permissions: perms},
				{Username: "test", Password: "test-pw"},
			}
		}
	}
	n := testenv.StartNATSWith(t, users(nil))
	redis := testenv.StartPersistentRedis(t)
	u, err := url.Parse(n.URL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword("test", "test-pw")
	w = newWorldOn(t, plans, u.String(), redis.URL())
	w.nats, w.redis, w.natsURL = n, redis, n.URL()
	deny = func(subjects ...string) {
		t.Helper()
		if err := n.Reload(users(subjects)); err != nil {
			t.Fatalf("reload the server's permissions: %v", err)
		}
	}
	return w, deny, []string{"ADMITTER_NATS_USER=admitter", "ADMITTER_NATS_PASSWORD=admitter-pw"}
}

// TestLostRemovalsForwardNothingTwice: the admitter's removals of forwarded jobs from the input
// are refused (its purges get no answer) while a tenant's jobs go, at once and then at its
// plan's pace, for longer than the output's duplicate window; then the admitter is killed, the
// removals are let through, and another admitter reads the tenant's queue again from its first
// job. Every refusal is counted, and no job is stored twice downstream: the limiter was told
// which jobs were stored, whoever reads them again.
func TestLostRemovalsForwardNothingTwice(t *testing.T) {
	t.Parallel()
	w, deny, env := lossyWorld(t, `
plans:
  steady:
    limits: [{capacity: 100, rate: 10/s}]
default_plan: steady
`)
	metrics := freeAddr(t)
	env = append(env, "ADMITTER_HTTP_ADDR="+metrics, "ADMITTER_DUPLICATE_WINDOW=10s")
	p := w.start(env...)
	deny("$JS.API.STREAM.PURGE.>")
	const n = 150 // 100 at once, 50 at 10/s
	for i := range n {
		w.publish("jobs.submit.acme.email", fmt.Sprintf("acme-%d", i))
	}
	w.read("ADMITTED", n, 30*time.Second)
	if left := w.streamMsgs("JOBS"); left != n {
		t.Fatalf("the input holds %d jobs while removals are refused, want all %d", left, n)
	}
	_, body := httpGet(t, "http://"+metrics+"/metrics")
	if c := metricValue(body, "admitter_settle_errors_total", `op="purge"`); c < 1 {
		t.Errorf("admitter_settle_errors_total{op=\"purge\"} = %v while every removal was refused, want ≥ 1", c)
	}
	if !strings.Contains(p.logs.String(), "removing forwarded jobs from the input failed") {
		t.Errorf("no log line says a removal failed")
	}
	time.Sleep(11 * time.Second) // past the output's duplicate window: a repeat would be stored
	p.kill()
	deny() // removals go through again
	w.start(env...)
	waitFor(t, 30*time.Second, "the input to be empty", func() bool { return w.streamMsgs("JOBS") == 0 })
	seen := map[string]int{}
	for _, j := range w.readAll("ADMITTED") {
		seen[j.payload]++
	}
	twice := 0
	for i := range n {
		switch c := seen[fmt.Sprintf("acme-%d", i)]; {
		case c == 0:
			t.Errorf("acme-%d lost", i)
		case c > 1:
			twice++
		}
	}
	if twice > 0 || len(seen) != n {
		t.Fatalf("%d of %d jobs stored more than once downstream (%d distinct), want each once", twice, n, len(seen))
	}
}

// TestDeadFeedIsNotReady: the admitter's pulls of its input's feed are refused (and with them the
// feed's consumer cannot be made again): the log says so at warn; a tenant's job published
// meanwhile makes /readyz say so within seconds, and is forwarded anyway (found by listing the
// input, read by subject); once the pulls are let through, /readyz is ready again. Before, the
// feed's errors were logged at debug, /readyz answered ready and the job waited for the feed.
func TestDeadFeedIsNotReady(t *testing.T) {
	t.Parallel()
	w, deny, env := lossyWorld(t, "plans: {p: {limits: [{capacity: 100, rate: 100/s}]}}\ndefault_plan: p\n")
	metrics := freeAddr(t)
	p := w.start(append(env, "ADMITTER_HTTP_ADDR="+metrics)...)
	w.publish("jobs.submit.acme.x", "before")
	w.read("ADMITTED", 1, 10*time.Second)
	deny("$JS.API.CONSUMER.MSG.NEXT.>", "$JS.API.CONSUMER.CREATE.>")
	waitFor(t, 30*time.Second, "the feed's failure in the log", func() bool { return strings.Contains(p.logs.String(), "the input's feed failed") })
	w.publish("jobs.submit.late.x", "during")
	waitFor(t, 30*time.Second, "/readyz to say the feed failed", func() bool {
		code, body := httpGet(t, "http://"+metrics+"/readyz")
		return code == 503 && strings.Contains(body, "feed")
	})
	w.read("ADMITTED", 2, 20*time.Second)
	deny()
	waitFor(t, 30*time.Second, "/readyz ready again", func() bool {
		code, _ := httpGet(t, "http://"+metrics+"/readyz")
		return code == 200
	})
	w.publish("jobs.submit.acme.x", "after")
	uniquePayloads(t, w.read("ADMITTED", 3, 20*time.Second))
}
