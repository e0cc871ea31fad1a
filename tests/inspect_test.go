package tests

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/admitter/admitter/internal/testenv"
)

// TestInspectAsksTheService: `admitter inspect` from a shell without the service's plans (only
// ADMITTER_REDIS_URL and the HTTP address, or only NATS) asks the running service: it prints the
// plan in force (an override), the pause and who set it, the queue's depth and its oldest job's
// age, and where each figure came from. A tenant the service refuses is not asked elsewhere.
// With no replica running, it reads Redis itself under the plans file, and says so.
func TestInspectAsksTheService(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "plans:\n  free: {limits: [{name: burst, capacity: 1, rate: 1/h}]}\n  enterprise: {limits: [{name: burst, capacity: 2, rate: 1/h}]}\ndefault_plan: free\n")
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	httpAddr := fmt.Sprintf("127.0.0.1:%d", port)
	p := w.start("ADMITTER_HTTP_ADDR=" + httpAddr)
	for _, args := range [][]string{{"set", "startup", "enterprise", "--by", "ops@bastion"}, {"pause", "startup", "--for", "1h", "--by", "ops@bastion"}} {
		if code, out, errOut := w.plansCLI(nil, args...); code != 0 {
			t.Fatalf("plans %q: exit %d\n%s%s", args, code, out, errOut)
		}
	}
	waitFor(t, 5*time.Second, "the override and the pause", func() bool { return strings.Contains(p.logs.String(), "paused: startup until") })
	w.publishMany("jobs.submit.startup.x", "s", 25, 0)
	stored := time.Now()

	bare := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()} // no plans, no NATS: the example plans would say free
	overHTTP := append(bare, "ADMITTER_REDIS_URL="+w.redisURL, "ADMITTER_HTTP_ADDR="+httpAddr)
	var out string
	waitFor(t, 10*time.Second, "inspect to count the 25 jobs", func() bool {
		var code int
		var errOut string
		code, out, errOut = runBinary(t, overHTTP, "inspect", "startup")
		if code != 0 {
			t.Fatalf("inspect over HTTP: exit %d\n%s%s", code, out, errOut)
		}
		return strings.Contains(out, "queue: 25 jobs waiting in the input")
	})
	time.Sleep(time.Until(stored.Add(2 * time.Second)))
	_, out, _ = runBinary(t, overHTTP, "inspect", "startup")
	for _, want := range []string{
		"tenant startup, plan enterprise, read from the admitter at " + httpAddr + " (ADMITTER_HTTP_ADDR) (replica ",
		"  plan    override to plan enterprise, set by ops@bastion at ",
		"in bucket admitter_state; plans: file " + w.plans,
		"  limits  Redis redis://",
		"  queue   stream JOBS as replica ",
		"  pause   set by ops@bastion",
		"queue: 25 jobs waiting in the input (counted ",
		"; the oldest, sequence 1, was stored ",
		"paused until ",
		"why jobs wait: the tenant is paused for ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect over HTTP lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "was stored 0s ago") || strings.Contains(out, "was stored 1s ago") {
		t.Errorf("the oldest job's age is not its own (stored 2s or more ago):\n%s", out)
	}
	t.Logf("admitter inspect startup, over HTTP:\n%s", out)

	overNATS := append(bare, "ADMITTER_NATS_URL="+w.natsURL, "ADMITTER_HTTP_ADDR=off")
	code, out, errOut := runBinary(t, overNATS, "inspect", "startup")
	if code != 0 || !strings.Contains(out, "tenant startup, plan enterprise, read from the admitter over NATS at ") || !strings.Contains(out, "queue: 25 jobs waiting") {
		t.Errorf("inspect over NATS: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := runBinary(t, overNATS, "inspect", "a{b"); code != 1 || !strings.Contains(errOut, "the admitter over NATS") || strings.Contains(errOut, "no running admitter") {
		t.Errorf("inspect of a tenant the service refuses: exit %d\n%s%s", code, out, errOut)
	}

	// No replica: Redis read here, under the plans file and the state bucket, said so.
	if code := p.signal(syscall.SIGTERM, 20*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM", code)
	}
	code, out, errOut = runBinary(t, w.env("ADMITTER_HTTP_ADDR="+httpAddr), "inspect", "startup")
	for _, want := range []string{"tenant startup, plan enterprise, read from Redis redis://", "plans: file " + w.plans + " as read here",
		"not known: no running admitter answered: HTTP at " + httpAddr, "paused until "} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("inspect with no replica running: exit %d, lacks %q\n%s%s", code, want, out, errOut)
		}
	}
	if code, out, errOut := runBinary(t, overNATS, "inspect", "startup"); code != 1 || !strings.Contains(errOut, "no running admitter answered") || !strings.Contains(errOut, "ADMITTER_REDIS_URL is unset") {
		t.Errorf("inspect with no replica and no Redis: exit %d\n%s%s", code, out, errOut)
	}
}
