package tests

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/admitter/admitter/internal/testenv"
	"github.com/admitter/admitter/wire"
	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go/jetstream"
)

// consolePlans: bob and carol are paced at 5/s and 10/s, acme goes fast, slow gets one job an
// hour, zed has no plan (and there is no default plan): its jobs are dead-lettered until it is
// given one.
const consolePlans = `
plans:
  five: {limits: [{name: burst, capacity: 5, rate: 5/s}]}
  ten:  {limits: [{name: burst, capacity: 10, rate: 10/s}]}
  fast: {limits: [{name: burst, capacity: 100, rate: 100/s}, {name: hourly, kind: window, limit: 5000, window: 1h}]}
  hourly: {limits: [{name: hour, capacity: 1, rate: 1/h}]}
tenants:
  bob: five
  carol: ten
  acme: fast
  slow: hourly
`

const consoleToken = "console-token-0123456789"

// browser is a headless Chromium driven over the DevTools protocol, and every message its
// pages write to their console (errors, exceptions, failed loads, CSP refusals).
type browser struct {
	t    *testing.T
	ctx  context.Context
	mu   sync.Mutex
	msgs []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	if _, err := exec.LookPath("chromium"); err != nil {
		t.Fatalf("chromium is not installed: run `make deps` (it installs Debian's chromium): %v", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.NoSandbox, chromedp.Headless, chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 4*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	b := &browser{t: t, ctx: ctx}
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil { // starts the browser
		t.Fatalf("start chromium: %v", err)
	}
	var wg sync.WaitGroup
	lctx, stop := context.WithCancel(ctx)
	wg.Go(func() {
		for m, err := range chromedp.Console(lctx) {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException || m.Type == chromedp.ConsoleWarning {
				b.mu.Lock()
				b.msgs = append(b.msgs, m.String())
				b.mu.Unlock()
			}
		}
	})
	t.Cleanup(func() { stop(); wg.Wait() })
	return b
}

// do runs actions, failing the test on error.
func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("browser: %s: %v", what, err)
	}
}

// text is the text of the first element sel matches.
func (b *browser) text(sel string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("browser: text of %s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}

// tryText is the text of the first element sel matches, "" when there is none yet (a page
// still loading).
func (b *browser) tryText(sel string) string {
	ctx, cancel := context.WithTimeout(b.ctx, 2*time.Second)
	defer cancel()
	s, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	return strings.TrimSpace(s)
}

// errors returns the console messages so far and forgets them.
func (b *browser) errors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.msgs
	b.msgs = nil
	return out
}

// shot writes a screenshot of the page to dir/name.png when dir is set (make console-shots).
func (b *browser) shot(dir, name string) {
	b.t.Helper()
	if dir == "" {
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// waitingIn is how many jobs wait in tenant's queue: its jobs in the input.
func (w *world) waitingIn(tenant string) uint64 {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := w.js.Stream(ctx, "JOBS")
	if err != nil {
		return 0
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter("jobs.submit."+tenant+".>"))
	if err != nil {
		w.t.Fatal(err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

// TestConsoleInBrowser drives the console in headless Chromium against a running admitter
// with real traffic, its plans in a file: every page loads without a console error; the tenants
// table shows bob and carol at their plans' rates; a pause from the tenant page holds acme's
// jobs until a resume from it; a dead letter replayed from the dead letters page comes through
// once, and a second replay publishes nothing; a tenant's recent waits show the same wait
// decided again and again as one line with its count; the overview shows the last reload of
// the plans and the last version refused. With ADMITTER_CONSOLE_SHOTS=DIR it writes a
// screenshot of each
// page there (make console-shots).
func TestConsoleInBrowser(t *testing.T) {
	t.Parallel()
	shots := os.Getenv("ADMITTER_CONSOLE_SHOTS")
	w := newWorld(t, consolePlans)
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	p := w.start(fmt.Sprintf("ADMITTER_HTTP_ADDR=127.0.0.1:%d", port), "ADMITTER_CONSOLE_TOKEN="+consoleToken) // the plans in a file
	b := newBrowser(t)

	// Traffic: backlogs for bob and carol, forwarded at their plans' pace; three jobs of slow,
	// one forwarded and two left to wait for an hour; a job of zed, who has no plan:
	// dead-lettered.
	w.publishMany("jobs.submit.bob.report", "b", 150, 0)
	w.publishMany("jobs.submit.carol.email", "c", 300, 0)
	w.publishMany("jobs.submit.slow.x", "s", 3, 0)
	w.publish("jobs.submit.zed.email.send", "zed's job", "X-Request", "r-1")
	w.read("DEAD", 1, 10*time.Second)

	// Every page loads without a console error.
	for _, path := range []string{"/console/", "/console/tenants", "/console/tenants/acme", "/console/dead", "/console/login"} {
		b.do("load "+path, chromedp.Navigate(base+path), chromedp.WaitVisible(chromedp.CSS("footer")))
		if e := b.errors(); len(e) > 0 {
			t.Errorf("%s: console messages: %q", path, e)
		}
	}

	// The tenants table shows bob at 5/s and carol at 10/s (over the last 10 s, against their
	// plans), once their lanes have run for that long.
	var bob, carol float64
	waitFor(t, 40*time.Second, "the tenants table to show bob at 5/s and carol at 10/s", func() bool {
		b.do("tenants", chromedp.Navigate(base+"/console/tenants?sort=tenant&dir=asc"), chromedp.WaitVisible(chromedp.CSS(`tr[data-tenant="carol"]`)))
		bob, _ = strconv.ParseFloat(b.text(`tr[data-tenant="bob"] td.rate`), 64)
		carol, _ = strconv.ParseFloat(b.text(`tr[data-tenant="carol"] td.rate`), 64)
		return bob >= 4.5 && bob <= 5.5 && carol >= 9 && carol <= 11
	})
	t.Logf("tenants table: bob %.2f/s (plan 5/s), carol %.2f/s (plan 10/s)", bob, carol)
	if use := b.text(`tr[data-tenant="bob"] td.use`); !strings.Contains(use, "of 5.00/s") {
		t.Errorf("bob's rate is not shown against his plan's: %q", use)
	}
	if n := b.text(`tr[data-tenant="bob"] td.waiting`); n == "0" {
		t.Errorf("bob's waiting jobs: %s, want his backlog", n)
	}
	b.do("overview", chromedp.Navigate(base+"/console/"), chromedp.WaitVisible(chromedp.CSS("#rate-admitted")))
	if v, _ := strconv.ParseFloat(b.text("#rate-admitted"), 64); v < 10 {
		t.Errorf("overview: admitted %v/s, want bob's and carol's 15/s", v)
	}
	b.shot(shots, "overview")
	b.do("tenants", chromedp.Navigate(base+"/console/tenants"), chromedp.WaitVisible(chromedp.CSS("#tenants")))
	b.shot(shots, "tenants")

	// Without signing in, the tenant page has no controls, and an action is refused.
	b.do("acme", chromedp.Navigate(base+"/console/tenants/acme"), chromedp.WaitVisible(chromedp.CSS("#why")))
	if html, _ := chromedp.Run(b.ctx, chromedp.OuterHTML(chromedp.CSS("main"))); strings.Contains(html, `id="pause"`) {
		t.Fatal("the pause control is shown before signing in")
	}
	resp, err := http.PostForm(base+"/console/tenants/acme/pause", url.Values{"for": {"1h"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("pause without the token: %d, want 403", resp.StatusCode)
	}

	// Sign in, pause acme from its page: its jobs wait; resume: they go.
	b.do("sign in", chromedp.Navigate(base+"/console/login?next=/console/tenants/acme"), chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#name"), "alice"), chromedp.SendKeys(chromedp.CSS("#token"), consoleToken),
		chromedp.Submit(chromedp.CSS("#token")), chromedp.WaitVisible(chromedp.CSS("#pause")))
	if f := b.text("#flash"); f != "Signed in." {
		t.Errorf("after signing in the page says %q", f)
	}
	b.do("acme", chromedp.Navigate(base+"/console/tenants/acme"), chromedp.WaitVisible(chromedp.CSS("#pause")))
	b.do("pause", chromedp.Click(chromedp.CSS("#pause")))
	waitFor(t, 10*time.Second, "the page to say acme is paused", func() bool { return strings.Contains(b.tryText("#flash"), "Paused acme until") })
	// Every replica applies it within about a second: the page then offers to resume.
	waitFor(t, 5*time.Second, "the tenant page to show the pause", func() bool {
		b.do("acme", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#why")))
		html, _ := chromedp.Run(b.ctx, chromedp.OuterHTML(chromedp.CSS("main")))
		return strings.Contains(html, `id="resume"`)
	})
	waitFor(t, 5*time.Second, "the pause to apply", func() bool { return strings.Contains(p.logs.String(), "paused: acme until") })
	if logs := p.logs.String(); !strings.Contains(logs, "console action") || !strings.Contains(logs, "action=pause") || !strings.Contains(logs, "alice (cookie)") {
		t.Errorf("the pause is not logged with who asked:\n%s", logs)
	}
	before := w.countFor("acme")
	w.publishMany("jobs.submit.acme.x", "a", 5, 0)
	waitFor(t, 10*time.Second, "acme's 5 jobs to wait in its lane", func() bool { return w.waitingIn("acme") == 5 })
	if n := w.countFor("acme") - before; n != 0 {
		t.Fatalf("%d jobs of the paused acme forwarded, want 0", n)
	}
	b.do("acme paused", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#why")))
	if why := b.text("#why"); !strings.Contains(why, "waits until the pause ends") {
		t.Errorf("why, while paused: %q", why)
	}
	b.shot(shots, "tenant")
	b.do("resume", chromedp.Click(chromedp.CSS("#resume")))
	waitFor(t, 10*time.Second, "the page to say acme is resumed", func() bool { return strings.Contains(b.tryText("#flash"), "Resumed acme") })
	waitFor(t, 10*time.Second, "acme's jobs to go after the resume", func() bool { return w.countFor("acme")-before == 5 })

	// Give zed a plan, then replay its dead letter from the dead letters page: once.
	if code, out, errOut := w.plansCLI(nil, "set", "zed", "fast"); code != 0 {
		t.Fatalf("plans set zed: %d %s%s", code, out, errOut)
	}
	waitFor(t, 5*time.Second, "zed's plan to apply", func() bool { return strings.Contains(p.logs.String(), "zed: fast") })
	b.do("dead letters", chromedp.Navigate(base+"/console/dead?tenant=zed"), chromedp.WaitVisible(chromedp.CSS("#letters")))
	b.shot(shots, "dead")
	seq := b.text("#letters tbody tr th a")
	b.do("select and replay", chromedp.Click(chromedp.CSS("#sel-"+seq)), chromedp.Click(chromedp.CSS("#replay-selected")))
	var outcome string
	waitFor(t, 10*time.Second, "the replay's results", func() bool { outcome = b.tryText("#results td.outcome"); return outcome != "" })
	if outcome != "replayed" {
		t.Fatalf("replay outcome %q, want replayed", outcome)
	}
	waitFor(t, 10*time.Second, "zed's replayed job to be forwarded", func() bool { return w.countFor("zed") == 1 })
	// The dead letter now says it was replayed and offers no replay; a second replay, by bearer
	// token, publishes nothing.
	b.do("the replayed letter", chromedp.Navigate(base+"/console/dead/"+seq), chromedp.WaitVisible(chromedp.CSS("#replayed")))
	if r := b.text("#replayed"); !strings.Contains(r, "alice") {
		t.Errorf("the dead letter's replay: %q, want it to name alice", r)
	}
	b.shot(shots, "letter")
	req, _ := http.NewRequest("POST", base+"/console/dead/replay", strings.NewReader(url.Values{"seq": {seq}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+consoleToken)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("second replay: %d", resp.StatusCode)
	}
	waitFor(t, 10*time.Second, "zed's jobs to leave the input", func() bool {
		return w.waitingIn("zed") == 0
	})
	if n := w.countFor("zed"); n != 1 {
		t.Errorf("zed's job forwarded %d times after two replays, want once", n)
	}
	for _, j := range w.readAll("ADMITTED") {
		if j.header.Get("Admit-Tenant") == "zed" && (j.header.Get("Admit-Replay-Of") != "DEAD:"+seq || j.header.Get("X-Request") != "r-1" || j.payload != "zed's job") {
			t.Errorf("the replayed job: %q %v", j.payload, j.header)
		}
	}

	// slow's recent waits: its two jobs told to wait on its hourly limit, then its head woken
	// by every change of the plans since (the pause, the resume, zed's plan) and told each time
	// to wait on. Each run of the same wait is one line with its count: no line repeats the
	// one below it.
	b.do("slow", chromedp.Navigate(base+"/console/tenants/slow"), chromedp.WaitVisible(chromedp.CSS("#waits")))
	rows, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#waits tbody tr")].map(r =>
		[r.dataset.count, r.dataset.replica, r.cells[1].childNodes[0].textContent.trim(), r.cells[2].innerText, r.cells[4].innerText,
		 r.cells[1].innerText, r.cells[0].innerText].join(" | "))`))
	if err != nil {
		t.Fatal(err)
	}
	folded := false
	for i, row := range rows {
		f := strings.Split(row, " | ")
		if i+1 < len(rows) && strings.Join(f[1:5], "|") == strings.Join(strings.Split(rows[i+1], " | ")[1:5], "|") {
			t.Errorf("slow's recent waits: line %d repeats line %d, want them as one line with a count:\n%s", i+1, i+2, strings.Join(rows, "\n"))
		}
		if n, _ := strconv.Atoi(f[0]); n > 1 {
			folded = true
			if !strings.Contains(f[5], fmt.Sprintf("(%d times in ", n)) || !strings.Contains(f[6], " to ") {
				t.Errorf("slow's recent waits: a line of %d waits does not say how many and when: %q", n, row)
			}
		}
	}
	if !folded {
		t.Errorf("slow's recent waits hold no line of repeated waits, want its two jobs told to wait as one:\n%s", strings.Join(rows, "\n"))
	}
	t.Logf("slow's recent waits:\n%s", strings.Join(rows, "\n"))

	// The overview says what the last reload of the plans file changed, then that a version
	// was refused, and why.
	replaceFile(t, w.plans, strings.Replace(consolePlans, "rate: 10/s", "rate: 20/s", 1))
	waitFor(t, 10*time.Second, "the reload", func() bool { return strings.Contains(p.logs.String(), "plans changed: ten") })
	b.do("overview after a reload", chromedp.Navigate(base+"/console/"), chromedp.WaitVisible(chromedp.CSS("#last-reload")))
	if got := b.text("#last-reload"); !strings.Contains(got, "plans changed: ten (limit burst: 10 at 10/s → 10 at 20/s)") {
		t.Errorf("the overview's last reload: %q", got)
	}
	if got := b.text("#last-refused"); !strings.Contains(got, "none since this replica started") {
		t.Errorf("the overview's last refusal before any: %q", got)
	}
	replaceFile(t, w.plans, strings.Replace(consolePlans, "rate: 10/s", "rate: often", 1))
	waitFor(t, 10*time.Second, "the refusal", func() bool { return strings.Contains(p.logs.String(), "plans reload refused") })
	b.do("overview after a refusal", chromedp.Navigate(base+"/console/"), chromedp.WaitVisible(chromedp.CSS("#last-refused")))
	if got := b.text("#last-refused"); !strings.Contains(got, "plans.yaml:4: plans.ten.limits[0].rate") || !strings.Contains(got, "the plans in force stay") {
		t.Errorf("the overview's last refusal: %q", got)
	}
	b.shot(shots, "overview-plans")
	if e := b.errors(); len(e) > 0 {
		t.Errorf("console messages: %q", e)
	}
}

// TestConsoleShowsEveryReplica: two replicas, alpha and beta, share twelve tenants. Each
// replica's tenants page lists every tenant, each marked with the replica that decided it (both
// replicas decided some, and both pages agree), and each overview says the other replica's share
// came in. Before the console asked the other replicas, each page showed its own tenants only.
func TestConsoleShowsEveryReplica(t *testing.T) {
	t.Parallel()
	w := newPartitionedWorld(t, onePlan+"default_plan: free\n", 8)
	names := []string{"alpha", "beta"}
	base := map[string]string{}
	var procs []*proc
	for _, name := range names {
		port, err := testenv.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		base[name] = fmt.Sprintf("http://127.0.0.1:%d", port)
		procs = append(procs, w.start("ADMITTER_WORKERS=4", "ADMITTER_REPLICA="+name, fmt.Sprintf("ADMITTER_HTTP_ADDR=127.0.0.1:%d", port)))
	}
	waitFor(t, 10*time.Second, "both replicas to see each other", func() bool {
		for _, name := range names {
			if _, body := httpGet(t, base[name]+"/metrics"); metricValue(body, wire.MetricReplicas.Prom) != 2 {
				return false
			}
		}
		return true
	})
	w.waitShared(base["alpha"]+"/metrics", base["beta"]+"/metrics")
	const tenants, each = 12, 3
	for k := range tenants {
		for i := range each {
			w.publish(fmt.Sprintf("jobs.submit.t%02d.x", k), fmt.Sprintf("job-%02d-%d", k, i))
		}
	}
	w.read("ADMITTED", tenants*each, 30*time.Second)

	row := regexp.MustCompile(`<tr data-tenant="(t\d\d)"( data-replica="([^"]*)")?`)
	decided := map[string]map[string]string{} // page → tenant → replica
	for _, name := range names {
		code, body := httpGet(t, base[name]+"/console/tenants?sort=tenant&dir=asc")
		if code != 200 {
			t.Fatalf("%s's tenants page: %d\n%s", name, code, body)
		}
		decided[name] = map[string]string{}
		by := map[string]int{}
		for _, m := range row.FindAllStringSubmatch(body, -1) {
			decided[name][m[1]] = m[3]
			by[m[3]]++
		}
		if len(decided[name]) != tenants || by["alpha"] == 0 || by["beta"] == 0 || by["alpha"]+by["beta"] != tenants {
			t.Fatalf("%s's tenants page lists %d of the %d tenants, decided by %v (\"\": not said); want every tenant, decided by alpha or beta, both:\n%s", name, len(decided[name]), tenants, by, body)
		}
		if strings.Contains(body, "Partial view") {
			t.Errorf("%s's tenants page says its view is partial", name)
		}
		t.Logf("%s's tenants page: decided by %v", name, by)
	}
	for tenant, r := range decided["alpha"] {
		if decided["beta"][tenant] != r {
			t.Errorf("tenant %s: decided by %s on alpha's page, by %s on beta's", tenant, r, decided["beta"][tenant])
		}
	}
	_, body := httpGet(t, base["alpha"]+"/console/")
	if !strings.Contains(body, `data-replica="beta" data-share="answered"`) || !strings.Contains(body, `data-replica="alpha" data-share="memory"`) {
		t.Errorf("alpha's overview does not say both shares are in:\n%s", body)
	}
	for _, p := range procs {
		if p.signal(syscall.SIGTERM, 15*time.Second) != 0 {
			t.Errorf("replica exited non-zero:\n%s", p.logs.String())
		}
	}
}

// TestConsoleShowsWhatEachReplicaDoes: three replicas on two partitions, so one stands by. The
// overview, in a browser, says which replicas read (and which partitions) and which stands by;
// a replica killed stays in the table as gone, since its last heartbeat, past the ten heartbeats
// after which the replicas forget it (15 s here), and one stopped by SIGTERM shows as stopped.
// Before, every replica heard from was "live", reading or not, and a replica that died vanished
// from the table ten heartbeats after its last one (one that stopped, at once).
func TestConsoleShowsWhatEachReplicaDoes(t *testing.T) {
	t.Parallel()
	w := newPartitionedWorld(t, onePlan+"default_plan: free\n", 2)
	names := []string{"alpha", "beta", "gamma"}
	base, procs := map[string]string{}, map[string]*proc{}
	for _, name := range names {
		port, err := testenv.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		base[name] = fmt.Sprintf("http://127.0.0.1:%d", port)
		procs[name] = w.start("ADMITTER_REPLICA="+name, fmt.Sprintf("ADMITTER_HTTP_ADDR=127.0.0.1:%d", port))
	}
	var standby string
	var readers []string
	waitFor(t, 30*time.Second, "the replicas to see each other and share the 2 partitions", func() bool {
		standby, readers = "", nil
		for _, name := range names {
			_, body := httpGet(t, base[name]+"/metrics")
			if metricValue(body, wire.MetricReplicas.Prom) != 3 {
				return false
			}
			switch metricValue(body, wire.MetricPartitions.Prom) {
			case 0:
				standby = name
			case 1:
				readers = append(readers, name)
			}
		}
		return standby != "" && len(readers) == 2
	})
	page, killed := readers[0], readers[1]
	t.Logf("%s and %s read, %s stands by; the page is %s's", readers[0], readers[1], standby, page)
	b := newBrowser(t)
	row := func(name string) string {
		b.do("overview", chromedp.Navigate(base[page]+"/console/"), chromedp.WaitVisible(chromedp.CSS("#replicas")))
		return b.tryText(`#replicas tr[data-replica="` + name + `"]`)
	}
	waitFor(t, 10*time.Second, "the overview to say who reads and who stands by", func() bool {
		return strings.Contains(row(standby), "standby") && strings.Contains(row(readers[0]), "reading partition") &&
			strings.Contains(row(readers[1]), "reading partition")
	})
	for _, name := range names {
		t.Logf("%s's row: %q", name, row(name))
	}

	procs[killed].kill()
	killedAt := time.Now()
	waitFor(t, 15*time.Second, "the killed replica to show as gone", func() bool {
		r := row(killed)
		return strings.Contains(r, "gone since") && strings.Contains(r, "no heartbeat")
	})
	for time.Since(killedAt) < 15*time.Second { // past the ten heartbeats after which it is forgotten
		if r := row(killed); !strings.Contains(r, "gone since") {
			t.Fatalf("%v after it was killed, %s's row is %q, want it shown as gone", time.Since(killedAt).Round(time.Second), killed, r)
		}
		time.Sleep(time.Second)
	}
	t.Logf("%s's row 15 s after it was killed: %q", killed, row(killed))

	if code := procs[standby].signal(syscall.SIGTERM, 15*time.Second); code != 0 {
		t.Errorf("%s exited %d", standby, code)
	}
	waitFor(t, 10*time.Second, "the stopped replica to show as stopped", func() bool {
		r := row(standby)
		return strings.Contains(r, "gone since") && strings.Contains(r, "stopped")
	})
	t.Logf("%s's row after SIGTERM: %q", standby, row(standby))
	b.shot(os.Getenv("ADMITTER_CONSOLE_SHOTS"), "overview-replicas")
	if e := b.errors(); len(e) > 0 {
		t.Errorf("console messages: %q", e)
	}
}
