package console

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/admitter/admitter/activity"
	"github.com/admitter/admitter/admission"
	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/internal/testenv"
	"github.com/admitter/admitter/policy"
	"github.com/admitter/admitter/subjects"
	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// rig is a console over a real queue (an admission service set up on an in-process JetStream
// server, not running), a real policy over in-process buckets, and an activity index.
type rig struct {
	con    *Console
	srv    *httptest.Server
	idx    *activity.Index
	pol    *policy.Policy
	js     jetstream.JetStream
	logs   *strings.Builder
	plans  *fakePlans
	client *http.Client
}

// fakePlans records what the console asks of the state bucket (the bucket itself is tested in
// package plansource and end to end).
type fakePlans struct{ calls []string }

func (f *fakePlans) Set(_ context.Context, t, p, by string) error {
	f.calls = append(f.calls, "set "+t+" "+p+" by "+by)
	return nil
}
func (f *fakePlans) Unset(_ context.Context, t string) error {
	f.calls = append(f.calls, "unset "+t)
	return nil
}
func (f *fakePlans) Pause(_ context.Context, t string, u time.Time, by string) error {
	f.calls = append(f.calls, "pause "+t+" by "+by)
	return nil
}
func (f *fakePlans) Resume(_ context.Context, t string) error {
	f.calls = append(f.calls, "resume "+t)
	return nil
}

func newRig(t testing.TB, plans *bucket.Plans, actToken, readToken string) *rig {
	t.Helper()
	ns := testenv.StartNATS(t)
	nc, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	pol, err := policy.New(policy.Config{Limiter: bucket.NewMemory(bucket.Options{}, nil), Plans: plans})
	if err != nil {
		t.Fatal(err)
	}
	idx := activity.New(0)
	svc, err := admission.New(admission.Config{JetStream: js, Policy: pol, In: subjects.MustParse("jobs.submit.{tenant}.>"), Out: subjects.MustParse("jobs.admitted.{tenant}.>"),
		Dead: subjects.MustParse("jobs.dead.{tenant}.>"), Wait: subjects.MustParse("jobs.waiting.{tenant}"), Activity: idx, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := svc.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	logs := &strings.Builder{}
	con, err := New(Config{ActToken: actToken, ReadToken: readToken, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	fp := &fakePlans{}
	con.Attach(&Backend{Activity: idx, Policy: pol, Queue: svc, Plans: fp})
	srv := httptest.NewServer(con)
	t.Cleanup(srv.Close)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &rig{con: con, srv: srv, idx: idx, pol: pol, js: js, logs: logs, plans: fp, client: client}
}

func testPlans(t testing.TB, tenants int) *bucket.Plans {
	t.Helper()
	five, _ := bucket.NewPlan("five", bucket.Limit{Name: "burst", Capacity: 5, Interval: 200 * time.Millisecond, Rate: "5/s"})
	gold, _ := bucket.NewPlan("gold", bucket.Limit{Name: "burst", Capacity: 50, Interval: 20 * time.Millisecond, Rate: "50/s"})
	m := map[string]string{"acme": "gold", "bob": "five"}
	for i := range tenants {
		m[fmt.Sprintf("tenant-%06d", i)] = "five"
	}
	p, err := bucket.NewPlans([]*bucket.Plan{five, gold}, m, "")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (r *rig) get(t *testing.T, path string, hdr ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", r.srv.URL+path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := r.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func (r *rig) post(t *testing.T, path string, form url.Values, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", r.srv.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := r.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

const act = "act-token-0123456789"

// TestReadOnlyWithoutToken: without ADMITTER_CONSOLE_TOKEN the pages show no control and every
// action answers 403, logged.
func TestReadOnlyWithoutToken(t *testing.T) {
	r := newRig(t, testPlans(t, 0), "", "")
	code, body := r.get(t, "/console/tenants/acme")
	if code != 200 || strings.Contains(body, `id="pause"`) || !strings.Contains(body, "Read-only") {
		t.Fatalf("tenant page: %d, controls shown or not read-only:\n%s", code, body)
	}
	for _, path := range []string{"/console/tenants/acme/pause", "/console/tenants/acme/resume", "/console/tenants/acme/plan", "/console/dead/replay"} {
		resp, _ := r.post(t, path, url.Values{"for": {"1h"}, "seq": {"1"}}, "Authorization", "Bearer anything")
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("POST %s: %d, want 403", path, resp.StatusCode)
		}
	}
	if len(r.plans.calls) != 0 || !strings.Contains(r.logs.String(), "ADMITTER_CONSOLE_TOKEN is unset") {
		t.Errorf("calls %v; logs:\n%s", r.plans.calls, r.logs)
	}
}

// TestActions: with the token, a bearer acts at once; a browser signs in, gets a session and a
// form token, and its actions need both; each action is logged with who asked.
func TestActions(t *testing.T) {
	r := newRig(t, testPlans(t, 0), act, "")
	if resp, _ := r.post(t, "/console/tenants/acme/pause", url.Values{"for": {"1h"}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("pause without credentials: %d, want 403", resp.StatusCode)
	}
	if resp, _ := r.post(t, "/console/tenants/acme/pause", url.Values{"for": {"1h"}}, "Authorization", "Bearer wrong-token-0123456789"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("pause with a wrong token: %d, want 403", resp.StatusCode)
	}
	resp, _ := r.post(t, "/console/tenants/acme/pause", url.Values{"for": {"1h"}}, "Authorization", "Bearer "+act)
	if resp.StatusCode != http.StatusSeeOther || !strings.Contains(resp.Header.Get("Location"), "done=paused") {
		t.Fatalf("pause with the token: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	// Sign in.
	resp, _ = r.post(t, "/console/login", url.Values{"name": {"alice"}, "token": {"nope"}})
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("sign-in with a wrong token: %d", resp.StatusCode)
	}
	resp, _ = r.post(t, "/console/login", url.Values{"name": {"alice\n|x"}, "token": {act}, "next": {"https://evil.example/"}})
	cookie := resp.Header.Get("Set-Cookie")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/console/") || !strings.Contains(cookie, "HttpOnly") || !strings.Contains(cookie, "SameSite=Strict") {
		t.Fatalf("sign-in: %d to %q, cookie %q", resp.StatusCode, resp.Header.Get("Location"), cookie)
	}
	ck := strings.Split(cookie, ";")[0]
	_, body := r.get(t, "/console/tenants/bob", "Cookie", ck)
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(body)
	if m == nil || !strings.Contains(body, `id="pause"`) {
		t.Fatalf("the signed-in tenant page has no pause form with a form token:\n%s", body)
	}
	if resp, _ := r.post(t, "/console/tenants/bob/pause", url.Values{"for": {"1h"}}, "Cookie", ck); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a session's action without its form token: %d, want 403", resp.StatusCode)
	}
	if resp, _ := r.post(t, "/console/tenants/bob/plan", url.Values{"plan": {"gold"}, "csrf": {m[1]}}, "Cookie", ck); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("a session's move: %d, want 303", resp.StatusCode)
	}
	if resp, _ := r.post(t, "/console/tenants/bob/pause", url.Values{"for": {"forever"}, "csrf": {m[1]}}, "Cookie", ck); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a pause for ever: %d, want 400", resp.StatusCode)
	}
	if resp, _ := r.post(t, "/console/tenants/bob/plan", url.Values{"plan": {"platinum"}, "csrf": {m[1]}}, "Cookie", ck); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a move to a plan the plans do not define: %d, want 400", resp.StatusCode)
	}
	if got := strings.Join(r.plans.calls, "; "); !regexp.MustCompile(`^pause acme by console: anonymous \(bearer\) from 127\.0\.0\.1:\d+; set bob gold by console: alice\|?x \(cookie\) from 127\.0\.0\.1:\d+$`).MatchString(got) {
		t.Errorf("plans calls: %s", got)
	}
	logs := r.logs.String()
	for _, want := range []string{`action=pause who="anonymous (bearer)`, `action=move who="alice|x (cookie)`} {
		if !strings.Contains(logs, want) && !strings.Contains(logs, strings.ReplaceAll(want, "|", "")) {
			t.Errorf("the log lacks %q:\n%s", want, logs)
		}
	}
}

// TestReadToken: with ADMITTER_HTTP_TOKEN set, reading needs it (or the console's token): a
// browser is sent to sign in, a bearer is let in.
func TestReadToken(t *testing.T) {
	r := newRig(t, testPlans(t, 0), act, "read-token-0123456789")
	code, _ := r.get(t, "/console/tenants")
	if code != http.StatusSeeOther {
		t.Errorf("tenants without a token: %d, want a redirect to sign in", code)
	}
	if code, _ := r.get(t, "/console/tenants", "Authorization", "Bearer read-token-0123456789"); code != 200 {
		t.Errorf("tenants with the read token: %d", code)
	}
	if resp, _ := r.post(t, "/console/tenants/acme/pause", url.Values{"for": {"1h"}}, "Authorization", "Bearer read-token-0123456789"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("pause with the read token: %d, want 403", resp.StatusCode)
	}
}

// TestTenantsTable: the table lists tenants with activity, with their rates against their
// plans, and sorts, filters and pages.
func TestTenantsTable(t *testing.T) {
	r := newRig(t, testPlans(t, 200), "", "")
	now := time.Now()
	for s := 1; s <= 11; s++ {
		at := now.Add(-time.Duration(s) * time.Second)
		for range 5 {
			r.idx.Record(activity.Event{At: at, Tenant: "bob", Plan: "five", Fate: wire.FateAdmitted, Weight: 1})
		}
		for i := range 120 {
			r.idx.Record(activity.Event{At: at, Tenant: fmt.Sprintf("tenant-%06d", i), Plan: "five", Fate: wire.FateAdmitted, Weight: 1})
		}
	}
	code, body := r.get(t, "/console/tenants?sort=rate&dir=desc&q=bob")
	if code != 200 || !regexp.MustCompile(`data-tenant="bob"[\s\S]*?<td class="num rate">5.00</td>`).MatchString(body) || !strings.Contains(body, "100% of 5.00/s") {
		t.Fatalf("bob's row does not show 5.00/s, 100%% of his plan: %d\n%s", code, body)
	}
	_, body = r.get(t, "/console/tenants?sort=tenant&dir=asc")
	rows := regexp.MustCompile(`data-tenant="([^"]+)"`).FindAllStringSubmatch(body, -1)
	if len(rows) != PageSize || rows[0][1] != "bob" || rows[1][1] != "tenant-000000" || !strings.Contains(body, "Page 1 of 3") {
		t.Fatalf("first page sorted by name: %d rows starting %v", len(rows), rows[:2])
	}
	_, body = r.get(t, "/console/tenants?sort=tenant&dir=asc&page=3")
	if rows := regexp.MustCompile(`data-tenant="([^"]+)"`).FindAllStringSubmatch(body, -1); len(rows) != 21 {
		t.Errorf("last page: %d rows, want 21", len(rows))
	}
	if _, body := r.get(t, "/console/tenants?show=waiting"); !strings.Contains(body, "No tenant with activity") {
		t.Errorf("no tenant waits, yet the waiting filter lists some")
	}
}

// TestTenantPage: the tenant page explains a wait in a sentence naming the limit.
func TestTenantPage(t *testing.T) {
	r := newRig(t, testPlans(t, 0), "", "")
	ctx := context.Background()
	plan, _ := r.pol.Plans().Lookup("bob")
	_ = plan
	d := r.pol.Step(ctx, "bob", []policy.Job{{ID: 1, Weight: 5}}, policy.Queue{Owner: 1})
	if d.Verdicts[0].Fate != wire.FateAdmitted {
		t.Fatalf("bob's first job: %v", d.Verdicts[0].Fate)
	}
	code, body := r.get(t, "/console/tenants/bob?w=3")
	if code != 200 || !regexp.MustCompile(`A new job of weight 3 waits [0-9.]+m?s because of limit burst \(bucket, 5 at 5/s\)`).MatchString(body) {
		t.Fatalf("%d: no sentence naming the wait and the limit:\n%s", code, body)
	}
	if code, _ := r.get(t, "/console/tenants/nobody"); code != http.StatusNotFound {
		t.Errorf("a tenant without a plan: %d, want 404", code)
	}
	if _, body := r.get(t, "/console/tenants/bob?w=99"); !strings.Contains(body, "can never pass limit burst") {
		t.Errorf("a weight over the capacity is not said to never pass")
	}
}

func TestExplain(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	bucketLimit := wire.LimitState{Limit: "burst", Kind: "bucket", Rule: "20 at 10/s", Capacity: 20, Rate: "10/s", IntervalMs: 100, Tokens: 2, NextInMs: 40}
	reset := now.Add(time.Hour)
	quota := wire.LimitState{Limit: "daily", Kind: "quota", Rule: "1000 per day (UTC)", Capacity: 1000, Tokens: 0, Used: 1000, NextInMs: 3600000, ResetsAt: &reset}
	for _, c := range []struct {
		name    string
		limits  []wire.LimitState
		w       int64
		waiting uint64
		paused  time.Time
		want    string
	}{
		{"fits", []wire.LimitState{bucketLimit}, 2, 0, time.Time{}, "A new job of weight 2 goes now: every limit of plan gold has room."},
		{"bucket", []wire.LimitState{bucketLimit}, 5, 0, time.Time{}, "A new job of weight 5 waits 240ms because of limit burst (bucket, 20 at 10/s): it holds 2 of 20 tokens, and the next comes in 40ms."},
		{"quota binds", []wire.LimitState{bucketLimit, quota}, 1, 3, time.Time{}, "A new job of weight 1 waits 1h00m because of limit daily (quota, 1000 per day (UTC)): it has used 1000 of 1000 this period, which resets at 2026-11-24T13:00:00Z. It also waits behind the 3 jobs already in its queue, in order."},
		{"paused", []wire.LimitState{bucketLimit}, 1, 0, now.Add(30 * time.Minute), "A new job of weight 1 waits until the pause ends at 2026-11-24T12:30:00Z (in 30m00s), then goes: every limit has room."},
		{"never", []wire.LimitState{bucketLimit}, 21, 0, time.Time{}, "A new job of weight 21 can never pass limit burst (bucket, 20 at 10/s): its weight exceeds 20; it is dead-lettered as weight-over-capacity."},
	} {
		y := explain(wire.TenantState{Plan: "gold", Limits: c.limits}, c.w, c.waiting, c.paused, now)
		if y.Sentence != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, y.Sentence, c.want)
		}
	}
}

// BenchmarkTenantsPage: GET /console/tenants with 100,000 tenants known (in the plans, and seen
// by the activity index, which keeps at most its bound) and 1,000 active in the last 10 s, 1,000
// of them with jobs waiting in their lanes; sorted by jobs waiting (the default).
func BenchmarkTenantsPage(b *testing.B) {
	r := newRig(b, testPlans(b, 100_000), "", "")
	now := time.Now()
	for i := range 100_000 { // every known tenant seen once, long ago
		r.idx.Record(activity.Event{At: now.Add(-9 * time.Minute), Tenant: fmt.Sprintf("tenant-%06d", i), Plan: "five", Fate: wire.FateAdmitted, Weight: 1})
	}
	for s := 1; s <= 10; s++ {
		for i := range 1000 {
			r.idx.Record(activity.Event{At: now.Add(-time.Duration(s) * time.Second), Tenant: fmt.Sprintf("tenant-%06d", i*100), Plan: "five", Fate: wire.FateAdmitted, Weight: 1})
		}
	}
	ctx := context.Background()
	for i := range 1000 {
		if _, err := r.js.Publish(ctx, fmt.Sprintf("jobs.waiting.tenant-%06d", i*100), []byte("x")); err != nil {
			b.Fatal(err)
		}
	}
	client := &http.Client{}
	get := func(path string) {
		resp, err := client.Get(r.srv.URL + path)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || n < 10_000 {
			b.Fatalf("%s: %d, %d bytes", path, resp.StatusCode, n)
		}
	}
	b.Run("default", func(b *testing.B) {
		for b.Loop() {
			get("/console/tenants")
		}
	})
	b.Run("uncached-waiting", func(b *testing.B) { // the lanes' counts read from the server every time
		for b.Loop() {
			r.con.waiting.v.Store(nil)
			get("/console/tenants?sort=rate")
		}
	})
	b.Run("filtered", func(b *testing.B) {
		for b.Loop() {
			get("/console/tenants?q=tenant-0999&sort=tenant&dir=asc")
		}
	})
}

// TestShadowBadges: a tenant whose plan is in shadow mode is marked so in the table and on its
// page; the others are not.
func TestShadowBadges(t *testing.T) {
	five, _ := bucket.NewPlan("five", bucket.Limit{Name: "burst", Capacity: 5, Interval: 200 * time.Millisecond, Rate: "5/s"})
	trial, _ := bucket.NewPlan("trial", bucket.Limit{Name: "burst", Capacity: 5, Interval: 200 * time.Millisecond, Rate: "5/s"})
	trial.Shadow = true
	plans, err := bucket.NewPlans([]*bucket.Plan{five, trial}, map[string]string{"bob": "five", "tina": "trial"}, "")
	if err != nil {
		t.Fatal(err)
	}
	r := newRig(t, plans, "", "")
	for _, tenant := range []string{"bob", "tina"} {
		r.idx.Record(activity.Event{At: time.Now(), Tenant: tenant, Plan: "x", Fate: wire.FateAdmitted, Weight: 1})
	}
	_, body := r.get(t, "/console/tenants")
	badge := regexp.MustCompile(`data-tenant="(\w+)"[\s\S]*?</tr>`)
	for _, m := range badge.FindAllStringSubmatch(body, -1) {
		if has := strings.Contains(m[0], `class="badge shadow"`); has != (m[1] == "tina") {
			t.Errorf("tenant %s: shadow badge %v", m[1], has)
		}
	}
	if _, body := r.get(t, "/console/tenants/tina"); !strings.Contains(body, "shadow mode") {
		t.Errorf("tina's page does not say her plan is in shadow mode")
	}
	if _, body := r.get(t, "/console/tenants/bob"); strings.Contains(body, "shadow mode") {
		t.Errorf("bob's page says his plan is in shadow mode")
	}
}

// TestOverviewTiles: each tile and column of the overview counts its own fate (they once read
// the counts in the order of an earlier encoding: "Delayed" showed the degraded jobs).
func TestOverviewTiles(t *testing.T) {
	r := newRig(t, testPlans(t, 0), "", "")
	at := time.Now().Add(-3 * time.Second)
	for i, f := range []wire.Fate{wire.FateAdmitted, wire.FateDegraded, wire.FateDelayed, wire.FatePaused, wire.FateHeld, wire.FateDead} {
		for range 10 * (i + 1) {
			r.idx.Record(activity.Event{At: at, Tenant: "bob", Fate: f, Weight: 1})
		}
	}
	_, body := r.get(t, "/console/")
	for _, want := range []string{`id="rate-admitted">1.00<`, `id="rate-degraded">2.00<`, `id="rate-delayed">3.00<`, `<dt>Paused</dt><dd>4.00<`, `<dt>Held</dt><dd>5.00<`, `id="rate-dead">6.00<`,
		`<td class="num">10</td><td class="num">30</td><td class="num">60</td><td class="num">20</td>`} {
		if !strings.Contains(body, want) {
			t.Errorf("the overview lacks %s", want)
		}
	}
}

// TestTenantPageFoldsRepeatedWaits: the head of a queue told 40 times in a row to wait on the
// same limit (each release in a busy pool woke it) is one line of the tenant's recent waits,
// with the count and the time range, below the line of a different wait that came after.
func TestTenantPageFoldsRepeatedWaits(t *testing.T) {
	r := newRig(t, testPlans(t, 0), "", "")
	start := time.Now().Add(-5 * time.Second)
	r.idx.Record(activity.Event{At: start, Tenant: "bob", Plan: "five", Fate: wire.FateDelayed, Weight: 1, Wait: 30 * time.Second, Limit: "burst"})
	for i := range 40 {
		r.idx.Record(activity.Event{At: start.Add(time.Duration(10+50*i) * time.Millisecond), Tenant: "bob", Plan: "five", Fate: wire.FateDelayed,
			Again: true, Weight: 1, Wait: 30*time.Second - time.Duration(i)*time.Second/2, Limit: "burst"})
	}
	r.idx.Record(activity.Event{At: start.Add(3 * time.Second), Tenant: "bob", Plan: "five", Fate: wire.FatePaused, Again: true, Weight: 1, Wait: time.Hour})
	code, body := r.get(t, "/console/tenants/bob")
	if code != 200 {
		t.Fatalf("tenant page: %d", code)
	}
	rows := regexp.MustCompile(`(?s)<tr data-replica="[^"]*" data-count="(\d+)">(.*?)</tr>`).FindAllStringSubmatch(body, -1)
	var got []string
	for _, row := range rows {
		text := strings.Join(strings.Fields(regexp.MustCompile(`<[^>]+>`).ReplaceAllString(row[2], " ")), " ")
		got = append(got, row[1]+": "+text)
	}
	if len(got) != 3 {
		t.Fatalf("%d lines of recent waits, want 3 (the pause, the 40 repeats as one, the first wait):\n%s", len(got), strings.Join(got, "\n"))
	}
	first, last := start.Add(10*time.Millisecond).UTC().Format("15:04:05"), 30*time.Second-39*time.Second/2
	for i, want := range []string{
		"1: ", "held by the pause",
		"40: " + first + " to ", "the head of its queue waits on (40 times in " + human(1950*time.Millisecond) + ") 1 " + human(last) + " burst",
		"1: ", "told to wait in its queue 1 30s burst",
	} {
		if !strings.Contains(got[i/2], want) || i%2 == 0 && !strings.HasPrefix(got[i/2], want) {
			t.Errorf("line %d: %q, want it to contain %q", i/2, got[i/2], want)
		}
	}
}

// TestOverviewPlans: the overview says where the plans in force come from, what the last change
// applied changed, which version was last refused and why, and what of the state is not applied.
func TestOverviewPlans(t *testing.T) {
	r := newRig(t, testPlans(t, 0), "", "")
	b := r.con.back.Load()
	_, body := r.get(t, "/console/")
	if strings.Contains(body, `id="plans"`) {
		t.Errorf("the overview shows a plans section without a report")
	}
	now := time.Now()
	b2 := *b
	b2.PlansReport = func() PlansReport {
		return PlansReport{Source: "file /etc/plans.yaml", State: "bucket admitter_state, revision 4",
			Applied: now.Add(-90 * time.Second), Changes: []string{"pools changed: workers (6 in flight, lease 30s → 10 in flight, lease 30s)"},
			Refused: now.Add(-30 * time.Second), Why: "plans.yaml:3: plans.p.limits[0].rate: \"fast\" is not a rate",
			Ignored: []string{"override of tenant zed to plan gold"}}
	}
	r.con.Attach(&b2)
	_, body = r.get(t, "/console/")
	for _, want := range []string{`id="plans-source">file /etc/plans.yaml; pauses and overrides from bucket admitter_state, revision 4<`,
		`ago</time>: pools changed: workers (6 in flight, lease 30s → 10 in flight, lease 30s)</dd>`,
		`ago</time>: plans.yaml:3: plans.p.limits[0].rate: &#34;fast&#34; is not a rate (the plans in force stay)`,
		`id="plans-ignored" class="bad">override of tenant zed to plan gold<`} {
		if !strings.Contains(body, want) {
			t.Errorf("the overview lacks %s:\n%s", want, body)
		}
	}
}

// TestPoolChartDrawsTheLimit: an adaptive pool's chart draws its limit in force, weight in
// flight and time per job over the last 5 minutes, and says the latest in words.
func TestPoolChartDrawsTheLimit(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	var at []time.Time
	var states []bucket.PoolState
	for i := range 120 {
		at = append(at, now.Add(-time.Duration(120-i)*time.Second))
		states = append(states, bucket.PoolState{Limit: int64(2 + i%8), InFlight: int64(1 + i%8), TimePerJob: 20_000 + int64(i)*100})
	}
	ch := drawPoolChart(at, states, now)
	svg := string(ch.SVG)
	for _, want := range []string{`class="limit"`, `class="in-flight"`, `class="time-per-job"`, "−5m", "now", "ms</text>"} {
		if !strings.Contains(svg, want) {
			t.Errorf("the chart lacks %q", want)
		}
	}
	if want := "limit in force (solid) 9, in flight (dashed) 8, time per job (dotted, right axis) 31.9ms"; !strings.HasPrefix(ch.Summary, want) {
		t.Errorf("summary %q, want it to start %q", ch.Summary, want)
	}
}

// TestTheTenantPageCountsItsQueueNow: a tenant's page counts the jobs waiting in its queue when
// it is asked, in the stream that holds them, named: the replica serving the console need not
// hold the tenant's partition nor have listed the input. Before, it showed the replica's last
// listing (0 here: the input had not been listed) and named no stream (issue 39, item 5).
func TestTheTenantPageCountsItsQueueNow(t *testing.T) {
	r := newRig(t, testPlans(t, 0), "", "")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for range 3 {
		if _, err := r.js.Publish(ctx, "jobs.submit.acme.x", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	code, body := r.get(t, "/console/tenants/acme")
	if code != 200 || !strings.Contains(body, `<span id="tenant-waiting">3</span> jobs waiting in its queue (<span id="tenant-streams">JOBS</span>)`) {
		t.Fatalf("tenant page: %d, want 3 jobs waiting in JOBS:\n%s", code, body)
	}
}
