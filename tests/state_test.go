package tests

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/admitter/admitter/internal/testenv"
)

// TestPauseWithPlansFile: with the plans in a file (no ADMITTER_PLANS_KV), `admitter plans
// pause` holds a tenant on every replica within 2 s, its requests are denied, `plans pauses`
// lists who paused it and until when, `plans set` moves a tenant, and `resume` lets its held
// jobs go, in order.
func TestPauseWithPlansFile(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "plans:\n  slow: {limits: [{capacity: 1, rate: 1/m}]}\n  fast: {limits: [{capacity: 5, rate: 20/s}]}\ndefault_plan: fast\n")
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	api := fmt.Sprintf("127.0.0.1:%d", port)
	a := w.start("ADMITTER_API_ADDR=" + api)
	b := w.start()

	paused := time.Now()
	code, out, errOut := w.plansCLI(nil, "pause", "acme", "--for", "1h", "--by", "tester@bastion")
	if code != 0 || !strings.Contains(out, "tenant acme: paused until") {
		t.Fatalf("pause with a plans file: exit %d\n%s%s", code, out, errOut)
	}
	waitFor(t, 5*time.Second, "both replicas to apply the pause", func() bool {
		return strings.Contains(a.logs.String(), "paused: acme until") && strings.Contains(b.logs.String(), "paused: acme until")
	})
	if d := time.Since(paused); d > 2*time.Second+time.Second { // the CLI's own start is in it
		t.Errorf("the pause reached both replicas %v after the command started, want within 2s", d)
	}
	if !strings.Contains(a.logs.String(), "tester@bastion") {
		t.Errorf("the log does not say who paused:\n%s", a.logs.String())
	}
	w.publishMany("jobs.submit.acme.x", "p", 5, 0)
	w.publishMany("jobs.submit.bob.x", "b", 3, 0)
	waitFor(t, 10*time.Second, "bob's jobs forwarded beside the paused acme", func() bool { return w.countFor("bob") == 3 })
	time.Sleep(500 * time.Millisecond)
	if n := w.countFor("acme"); n != 0 {
		t.Fatalf("%d jobs of the paused tenant forwarded", n)
	}
	resp, err := http.Post("http://"+api+"/v1/decide", "application/json", strings.NewReader(`{"tenant":"acme"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Errorf("a request of the paused tenant: %d %v", resp.StatusCode, resp.Header)
	}
	code, out, errOut = w.plansCLI(nil, "pauses")
	if code != 0 || !strings.Contains(out, "acme") || !strings.Contains(out, "tester@bastion") || !strings.Contains(out, "until") {
		t.Errorf("plans pauses: exit %d\n%s%s", code, out, errOut)
	}
	// An override, with a plans file too; one naming a plan the file lacks is refused.
	if code, out, errOut := w.plansCLI(nil, "set", "bob", "gold"); code != 2 || !strings.Contains(errOut, `"gold"`) {
		t.Errorf("set to an undefined plan: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := w.plansCLI(nil, "set", "bob", "slow"); code != 0 {
		t.Fatalf("set: exit %d\n%s%s", code, out, errOut)
	}
	waitFor(t, 5*time.Second, "the override to apply", func() bool { return strings.Contains(b.logs.String(), "tenants added: bob: slow") })
	w.publishMany("jobs.submit.bob.x", "s", 3, 0)
	waitFor(t, 10*time.Second, "bob on the slow plan: one more forwarded", func() bool { return w.countFor("bob") == 4 })
	if code, out, errOut := w.plansCLI(nil, "show"); code != 0 || !strings.Contains(out, "bob: slow (set by") || !strings.Contains(out, "acme: paused until") {
		t.Errorf("plans show: exit %d\n%s%s", code, out, errOut)
	}

	if code, out, errOut := w.plansCLI(nil, "resume", "acme"); code != 0 {
		t.Fatalf("resume: exit %d\n%s%s", code, out, errOut)
	}
	got := w.read("ADMITTED", 3+1+5, 10*time.Second)
	var order []string
	for _, j := range got {
		if strings.HasPrefix(j.payload, "p-") {
			order = append(order, j.payload)
		}
	}
	if strings.Join(order, ",") != "p-0,p-1,p-2,p-3,p-4" {
		t.Errorf("after the resume, acme's jobs forwarded in the order %v", order)
	}
}
