package tests

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/admitter/admitter/internal/testenv"
	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go/jetstream"
)

const (
	slowPlans = "plans:\n  p: {limits: [{capacity: 1, rate: 1/m}]}\ndefault_plan: p\n"
	fastPlans = "plans:\n  p: {limits: [{capacity: 100, rate: 100/s}]}\ndefault_plan: p\n"
)

// countFor counts the forwarded jobs of a tenant.
func (w *world) countFor(tenant string) int {
	n := 0
	for _, j := range w.readAll("ADMITTED") {
		if j.header.Get(wire.HeaderTenant) == tenant {
			n++
		}
	}
	return n
}

// replaceFile writes data to path the way editors and config tools do: a new file renamed over
// the old one.
func replaceFile(t *testing.T, path, data string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestPlansFileReplacedByRename: the plans file is replaced by rename while jobs wait on a slow
// plan; within 2s they follow the faster one (the lane asks again at once), and the log says
// what changed.
func TestPlansFileReplacedByRename(t *testing.T) {
	w := newWorld(t, slowPlans)
	p := w.start()
	w.publishMany("jobs.submit.acme.x", "job", 20, 0)
	waitFor(t, 10*time.Second, "one job forwarded, the rest waiting", func() bool {
		return w.countFor("acme") == 1 && w.streamMsgs("JOBS") == 19
	})
	replaced := time.Now()
	replaceFile(t, w.plans, fastPlans)
	waitFor(t, 10*time.Second, "the waiting jobs to follow the faster plan", func() bool { return w.countFor("acme") == 20 })
	t.Logf("all 19 waiting jobs forwarded %v after the file was replaced", time.Since(replaced))
	if logs := p.logs.String(); !strings.Contains(logs, "plans reloaded") || !strings.Contains(logs, "plans changed: p") {
		t.Errorf("the reload is not logged with what changed:\n%s", logs)
	}
}

// TestPlansFileSwappedBySymlink: a Kubernetes ConfigMap volume updates by swapping a ..data
// symbolic link to a new directory; the admitter follows the link.
func TestPlansFileSwappedBySymlink(t *testing.T) {
	w := newWorld(t, slowPlans)
	dir := t.TempDir()
	for v, plans := range map[string]string{"v1": "plans:\n  p: {limits: [{capacity: 5, rate: 1/s}]}\ntenants: {acme: p}\n", "v2": fastPlans} {
		if err := os.MkdirAll(filepath.Join(dir, v), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, v, "plans.yaml"), []byte(plans), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "plans.yaml")
	if err := os.Symlink(filepath.Join("..data", "plans.yaml"), link); err != nil {
		t.Fatal(err)
	}
	w.start("ADMITTER_PLANS_FILE=" + link)
	w.publish("jobs.submit.zed.x", "before") // zed has no plan in v1: dead-lettered
	w.read("DEAD", 1, 10*time.Second)
	// The swap: a new link renamed over ..data.
	if err := os.Symlink("v2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a job of zed to be forwarded under v2's default plan", func() bool {
		w.publish("jobs.submit.zed.x", "after")
		time.Sleep(200 * time.Millisecond)
		return w.countFor("zed") > 0
	})
}

// TestPlansInvalidReloadIsRefused: a plans file that does not validate is refused: the error
// names file:line and field, it is counted, the process stays up and ready, and the plans in
// force stay; a valid one then applies at once on SIGHUP.
func TestPlansInvalidReloadIsRefused(t *testing.T) {
	w := newWorld(t, slowPlans)
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	p := w.start(fmt.Sprintf("ADMITTER_HTTP_ADDR=127.0.0.1:%d", port))
	if err := os.WriteFile(w.plans, []byte("plans:\n  p: {limits: [{capacity: 1, rate: fast}]}\ndefault_plan: p\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the refusal", func() bool { return strings.Contains(p.logs.String(), "plans reload refused") })
	logs := p.logs.String()
	if !strings.Contains(logs, "plans.yaml:2") || !strings.Contains(logs, "plans.p.limits[0].rate") {
		t.Errorf("the refusal does not name file:line and field:\n%s", logs)
	}
	_, body := httpGet(t, base+"/metrics")
	if v := metricValue(body, wire.MetricPlansReloads.Prom, `result="error"`); v != 1 {
		t.Errorf("%s{result=\"error\"} = %v, want 1", wire.MetricPlansReloads.Prom, v)
	}
	if code, _ := httpGet(t, base+"/readyz"); code != 200 {
		t.Errorf("/readyz = %d after a refused reload, want 200", code)
	}
	// The slow plan still holds: one job of two goes.
	w.publishMany("jobs.submit.acme.x", "job", 2, 0)
	waitFor(t, 10*time.Second, "one job forwarded and one waiting", func() bool { return w.countFor("acme") == 1 && w.streamMsgs("JOBS") == 1 })
	// A valid file, written in place, and SIGHUP: applied at once.
	if err := os.WriteFile(w.plans, []byte(fastPlans), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, 5*time.Second, "the waiting job to go under the fast plan", func() bool { return w.countFor("acme") == 2 })
}

// plansCLI runs `admitter plans ...` with the world's environment and the given extras.
func (w *world) plansCLI(env []string, args ...string) (int, string, string) {
	w.t.Helper()
	return runBinary(w.t, append(w.env(), env...), append([]string{"plans"}, args...)...)
}

// TestPlansInKVFollowedByEveryReplica: with ADMITTER_PLANS_KV, the first replica seeds the
// bucket from the plans file; a push from another process reaches both replicas within a
// second, and the waiting jobs follow it; a push that does not validate changes nothing.
func TestPlansInKVFollowedByEveryReplica(t *testing.T) {
	w := newWorld(t, slowPlans)
	kv := []string{"ADMITTER_PLANS_KV=plans"}
	a := w.start(kv...)
	b := w.start(kv...)
	w.publishMany("jobs.submit.acme.x", "job", 20, 0)
	waitFor(t, 10*time.Second, "one job forwarded, the rest waiting", func() bool {
		return w.countFor("acme") == 1 && w.streamMsgs("JOBS") == 19
	})
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("plans:\n  p: {limits: [{capacity: 0, rate: 1/s}]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := w.plansCLI(kv, "push", bad)
	if code != 2 || !strings.Contains(stderr, "bad.yaml:2") || !strings.Contains(stderr, "capacity") {
		t.Fatalf("push of an invalid file: exit %d, stderr %q; want 2 naming bad.yaml:2 and the field", code, stderr)
	}
	good := filepath.Join(t.TempDir(), "good.yaml")
	if err := os.WriteFile(good, []byte(fastPlans), 0o644); err != nil {
		t.Fatal(err)
	}
	pushed := time.Now()
	if code, stdout, stderr := w.plansCLI(kv, "push", good); code != 0 || !strings.Contains(stdout, "revision") {
		t.Fatalf("push: exit %d, %s%s", code, stdout, stderr)
	}
	waitFor(t, 10*time.Second, "both replicas to apply the pushed plans", func() bool {
		return strings.Contains(a.logs.String(), "plans changed: p") && strings.Contains(b.logs.String(), "plans changed: p")
	})
	applied := time.Since(pushed)
	waitFor(t, 10*time.Second, "the waiting jobs to follow", func() bool { return w.countFor("acme") == 20 })
	t.Logf("push → applied on both replicas within %v; all waiting jobs forwarded %v after the push", applied, time.Since(pushed))
	if applied > 2*time.Second {
		t.Errorf("the push took %v to reach both replicas, want about a second", applied)
	}
	if strings.Contains(a.logs.String()+b.logs.String(), "capacity must be") {
		t.Errorf("a replica saw the invalid document")
	}
}

// TestPlansOverridesAndPauses: a tenant moved with `plans set` follows its new plan, `unset`
// brings it back; a paused tenant's jobs wait (none forwarded) while another tenant's go, then
// they all go at the pace of the plan, in order, when it resumes.
func TestPlansOverridesAndPauses(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "plans:\n  slow: {limits: [{capacity: 1, rate: 1/m}]}\n  fast: {limits: [{capacity: 5, rate: 20/s}]}\ndefault_plan: fast\n")
	kv := []string{"ADMITTER_PLANS_KV=plans"}
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	p := w.start(append(kv, fmt.Sprintf("ADMITTER_HTTP_ADDR=127.0.0.1:%d", port))...)

	// Usage errors write nothing and exit 2.
	for _, args := range [][]string{{"set", "acme", "gold"}, {"pause", "acme"}, {"pause", "acme", "--for", "1s", "--until", "2030-01-01T00:00:00Z"},
		{"pause", "acme", "--until", "2001-01-01T00:00:00Z"}, {"resume", "acme"}, {"unset", "acme"}, {"set", "ac me", "slow"}, {"frobnicate"}} {
		if code, _, stderr := w.plansCLI(kv, args...); code != 2 || stderr == "" {
			t.Errorf("plans %q: exit %d, stderr %q; want 2 and a message", args, code, stderr)
		}
	}
	if code, _, stderr := w.plansCLI(nil, "push", w.plans); code != 2 || !strings.Contains(stderr, "ADMITTER_PLANS_KV is unset") {
		t.Errorf("plans push without ADMITTER_PLANS_KV: exit %d, %q", code, stderr)
	}

	// set / unset
	if code, out, errOut := w.plansCLI(kv, "set", "acme", "slow"); code != 0 {
		t.Fatalf("set: %d %s%s", code, out, errOut)
	}
	waitFor(t, 5*time.Second, "the override to apply", func() bool { return strings.Contains(p.logs.String(), "tenants added: acme: slow") })
	w.publishMany("jobs.submit.acme.x", "a", 3, 0)
	waitFor(t, 10*time.Second, "acme on the slow plan: one forwarded, two waiting", func() bool {
		return w.countFor("acme") == 1 && w.streamMsgs("JOBS") == 2
	})
	if code, out, errOut := w.plansCLI(kv, "unset", "acme"); code != 0 {
		t.Fatalf("unset: %d %s%s", code, out, errOut)
	}
	waitFor(t, 5*time.Second, "acme back on the fast plan", func() bool { return w.countFor("acme") == 3 })
	_, show, _ := w.plansCLI(kv, "show")
	if !strings.Contains(show, "kv bucket plans, revision") || !strings.Contains(show, "overrides (0)") {
		t.Errorf("plans show:\n%s", show)
	}

	// pause / resume
	if code, out, errOut := w.plansCLI(kv, "pause", "acme", "--for", "1h"); code != 0 {
		t.Fatalf("pause: %d %s%s", code, out, errOut)
	}
	waitFor(t, 5*time.Second, "the pause to apply", func() bool { return strings.Contains(p.logs.String(), "paused: acme until") })
	before := w.countFor("acme")
	w.publishMany("jobs.submit.acme.x", "p", 10, 0)
	w.publishMany("jobs.submit.bob.x", "b", 3, 0)
	waitFor(t, 10*time.Second, "bob's jobs forwarded beside the paused acme", func() bool { return w.countFor("bob") == 3 })
	time.Sleep(time.Second)
	if n := w.countFor("acme") - before; n != 0 {
		t.Fatalf("%d jobs of the paused tenant forwarded, want 0", n)
	}
	if code, out, errOut := runBinary(t, append(w.env(), kv...), "inspect", "acme"); code != 0 || !strings.Contains(out, "paused until") {
		t.Errorf("inspect of a paused tenant: exit %d\n%s%s", code, out, errOut)
	}
	_, body := httpGet(t, base+"/metrics")
	// Each job is counted once, when a step first reads it while the pause holds: the first
	// step reads the jobs stored by then; those that arrive while the queue sleeps until the
	// pause ends are not read (nor counted) before it ends.
	if v := metricValue(body, wire.MetricDecisions.Prom, `outcome="paused"`); v < 1 || v > 10 {
		t.Errorf("%s{outcome=\"paused\"} = %v, want 1 to 10", wire.MetricDecisions.Prom, v)
	}
	resumed := time.Now()
	if code, out, errOut := w.plansCLI(kv, "resume", "acme"); code != 0 {
		t.Fatalf("resume: %d %s%s", code, out, errOut)
	}
	got := w.read("ADMITTED", before+10+3, 10*time.Second)
	var times []time.Time
	var order []string
	for _, j := range got {
		if j.header.Get(wire.HeaderTenant) == "acme" && strings.HasPrefix(j.payload, "p-") {
			times, order = append(times, j.stored), append(order, j.payload)
		}
	}
	for i, o := range order {
		if o != fmt.Sprint("p-", i) {
			t.Fatalf("after the resume, forwarded in the order %v", order)
		}
	}
	if e, _, _ := worstWindow(times, 5, 20); e > 1 {
		t.Errorf("after the resume: %.1f jobs over C + r·t", e)
	}
	t.Logf("resumed: 10 held jobs forwarded %v after the resume, in order", times[len(times)-1].Sub(resumed))

	// A pause an earlier version wrote in the plans bucket is honoured, and resume removes it.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	raw, err := w.js.KeyValue(ctx, "plans")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Put(ctx, "pause.carl", []byte(time.Now().Add(time.Hour).UTC().Format(time.RFC3339))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the earlier version's pause to apply", func() bool { return strings.Contains(p.logs.String(), "paused: carl until") })
	if code, out, errOut := w.plansCLI(kv, "resume", "carl"); code != 0 {
		t.Fatalf("resume of a pause in the plans bucket: %d %s%s", code, out, errOut)
	}
	if _, err := raw.Get(ctx, "pause.carl"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("after resume, the plans bucket's pause.carl: %v", err)
	}
}

// TestShadowMode: a plan in shadow mode forwards every job at once, each marked with what the
// plan would have done (Admit-Shadow), counted as shadow_delayed when it would have waited;
// enforced afterwards (the file rewritten), the same plan paces the tenant, starting from its
// own state: the trial charged nothing to it.
func TestShadowMode(t *testing.T) {
	const trial = "plans:\n  p: {mode: shadow, limits: [{capacity: 2, rate: 1/s}]}\ndefault_plan: p\n"
	w := newWorld(t, trial)
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	w.start(fmt.Sprintf("ADMITTER_HTTP_ADDR=127.0.0.1:%d", port))
	w.publishMany("jobs.submit.acme.x", "job", 6, 0)
	got := w.read("ADMITTED", 6, 10*time.Second)
	var marks []string
	for _, j := range got {
		marks = append(marks, j.header.Get(wire.HeaderShadow))
	}
	t.Logf("forwarded in shadow mode: %q", marks)
	want := []int64{0, 0, 1000, 2000, 3000, 4000} // 2 at once, then one a second, as the lane would have
	for i, m := range marks {
		if want[i] == 0 {
			if m != "admitted" {
				t.Errorf("job %d: %s %q, want admitted", i, wire.HeaderShadow, m)
			}
			continue
		}
		var ms int64
		if _, err := fmt.Sscanf(m, "delayed %d", &ms); err != nil || ms < want[i]-500 || ms > want[i] {
			t.Errorf("job %d: %s %q, want delayed about %d ms", i, wire.HeaderShadow, m, want[i])
		}
	}
	_, body := httpGet(t, fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if n := metricValue(body, "admitter_decisions_total", `outcome="shadow_delayed"`, `plan="p"`); n != 4 {
		t.Errorf("admitter_decisions_total{outcome=shadow_delayed} = %g, want 4", n)
	}

	// Enforced: the tenant's own state is untouched (2 at once), then the plan's pace.
	replaceFile(t, w.plans, strings.Replace(trial, "mode: shadow, ", "", 1))
	waitFor(t, 10*time.Second, "the enforced plan to apply", func() bool {
		_, body := httpGet(t, fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
		return metricValue(body, "admitter_plans_reloads_total", `result="ok"`) >= 1
	})
	w.publishMany("jobs.submit.acme.x", "enforced", 3, 0)
	waitFor(t, 10*time.Second, "2 forwarded and 1 waiting", func() bool {
		return w.countFor("acme") == 8 && w.streamMsgs("JOBS") == 1
	})
	for _, j := range w.readAll("ADMITTED")[6:] {
		if h := j.header.Get(wire.HeaderShadow); h != "" {
			t.Errorf("an enforced job carries %s %q", wire.HeaderShadow, h)
		}
	}
}
