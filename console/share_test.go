package console

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
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

// replica is one admitter replica in process: its own NATS connection, activity index, policy
// and running queue (heartbeats in the replicas bucket), and, when it shares, its Shares.
type replica struct {
	name   string
	nc     *nats.Conn
	idx    *activity.Index
	pol    *policy.Policy
	svc    *admission.Service
	shares *Shares
}

// startReplica runs replica name on the server at url until the test ends; it answers for its
// share when share is set.
func startReplica(t *testing.T, url, name string, share bool) *replica {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	pol, err := policy.New(policy.Config{Limiter: bucket.NewMemory(bucket.Options{}, nil), Plans: testPlans(t, 0)})
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{name: name, nc: nc, idx: activity.New(0), pol: pol}
	r.svc, err = admission.New(admission.Config{JetStream: js, Policy: pol, In: subjects.MustParse("jobs.submit.{tenant}.>"), Out: subjects.MustParse("jobs.admitted.{tenant}.>"),
		Dead: subjects.MustParse("jobs.dead.{tenant}.>"), Wait: subjects.MustParse("jobs.waiting.{tenant}"), Activity: r.idx, Replica: name,
		Heartbeat: 200 * time.Millisecond, Workers: 1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.svc.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	run, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.svc.Run(run) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("replica %s: %v", name, err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("replica %s did not stop within 15 s", name)
		}
	})
	if share {
		if r.shares, err = StartShares(nc, SharesConfig{Consumer: "admitter", Replica: name, Activity: r.idx, Logger: slog.New(slog.DiscardHandler)}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.shares.Stop)
	}
	return r
}

// console serves r's console, its Backend asking the other replicas through r's Shares.
func (r *replica) console(t *testing.T) *httptest.Server {
	t.Helper()
	con, err := New(Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	con.Attach(&Backend{Activity: r.idx, Policy: r.pol, Queue: r.svc, Shares: r.shares})
	srv := httptest.NewServer(con)
	t.Cleanup(srv.Close)
	return srv
}

// sees waits until r counts every one of names among the live replicas.
func (r *replica) sees(t *testing.T, names ...string) {
	t.Helper()
	testenv.WaitFor(t, 10*time.Second, r.name+" to see "+strings.Join(names, ", "), func() bool {
		live := 0
		for _, rp := range r.svc.Status(context.Background()).Replicas {
			if rp.Live && slices.Contains(names, rp.Name) {
				live++
			}
		}
		return live == len(names)
	})
}

func fetch(t *testing.T, url string) (string, time.Duration) {
	t.Helper()
	start := time.Now()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d\n%s", url, resp.StatusCode, body)
	}
	return string(body), time.Since(start)
}

// decidedBy reads the tenants table: tenant → the replica named in its row.
func decidedBy(body string) map[string]string {
	out := map[string]string{}
	for _, m := range regexp.MustCompile(`<tr data-tenant="([^"]+)" data-replica="([^"]*)"`).FindAllStringSubmatch(body, -1) {
		out[m[1]] = m[2]
	}
	return out
}

// TestConsoleMergesReplicas: two replicas on one NATS server, each with its own activity.
// Alpha's console lists every tenant with the replica that decided it (dora, whose queue moved
// from alpha to beta, under beta, also alpha), sums both replicas' decisions on the overview
// and says both shares are in, and shows bob's waits decided by beta on bob's page. A third
// replica, live by its heartbeats but never answering, makes the pages partial, named, after
// the timeout; a replica that stops answering (no responder) is named at once.
func TestConsoleMergesReplicas(t *testing.T) {
	ns := testenv.StartNATS(t)
	alpha := startReplica(t, ns.URL(), "alpha", true)
	beta := startReplica(t, ns.URL(), "beta", true)
	srv := alpha.console(t)
	at := time.Now().Add(-3 * time.Second)
	for range 10 {
		alpha.idx.Record(activity.Event{At: at, Tenant: "acme", Plan: "gold", Fate: wire.FateAdmitted, Weight: 2})
		beta.idx.Record(activity.Event{At: at, Tenant: "carol", Plan: "five", Fate: wire.FateAdmitted, Weight: 1})
	}
	alpha.idx.Record(activity.Event{At: at.Add(-time.Minute), Tenant: "dora", Plan: "five", Fate: wire.FateAdmitted, Weight: 1})
	beta.idx.Record(activity.Event{At: at, Tenant: "dora", Plan: "five", Fate: wire.FateAdmitted, Weight: 1})
	beta.idx.Record(activity.Event{At: at, Tenant: "bob", Plan: "five", Fate: wire.FateDelayed, Weight: 3, Wait: 400 * time.Millisecond, Limit: "burst"})
	alpha.sees(t, "alpha", "beta")

	body, _ := fetch(t, srv.URL+"/console/tenants?sort=tenant&dir=asc")
	want := map[string]string{"acme": "alpha", "bob": "beta", "carol": "beta", "dora": "beta"}
	if got := decidedBy(body); !maps(got, want) {
		t.Fatalf("alpha's tenants page: decided by %v, want %v\n%s", got, want, body)
	}
	if !regexp.MustCompile(`data-tenant="dora"[\s\S]*?<td class="replica">beta <span class="hint">\(also alpha\)</span></td>`).MatchString(body) {
		t.Errorf("dora's row does not say alpha decided some of her jobs too")
	}
	if strings.Contains(body, "Partial view") || !strings.Contains(body, "summed over the 2 of 2 replicas that answered") {
		t.Errorf("the tenants page does not say both replicas answered")
	}

	body, _ = fetch(t, srv.URL+"/console/")
	for _, s := range []string{`data-replica="alpha" data-share="memory"`, `data-replica="beta" data-share="answered"`, `id="rate-admitted">2.10<`, "Decisions of 2 of 2 replicas", "Served by replica alpha at"} {
		if !strings.Contains(body, s) {
			t.Errorf("alpha's overview lacks %s", s)
		}
	}
	body, _ = fetch(t, srv.URL+"/console/tenants/bob")
	if !strings.Contains(body, `decided by <span id="decided-by">beta</span>`) || !regexp.MustCompile(`<tr data-replica="beta"[^>]*>[\s\S]*?400ms[\s\S]*?burst`).MatchString(body) {
		t.Errorf("bob's page does not show his wait decided by beta:\n%s", body)
	}

	// Gamma is live (its heartbeats) but never answers: the pages wait the timeout, then say
	// which replica is missing, and still show the others.
	gamma := startReplica(t, ns.URL(), "gamma", false)
	swallow, err := gamma.nc.Subscribe(ShareSubject("admitter", "gamma"), func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = swallow.Unsubscribe() })
	alpha.sees(t, "alpha", "beta", "gamma")
	body, took := fetch(t, srv.URL+"/console/tenants?sort=tenant&dir=asc")
	if got := decidedBy(body); !maps(got, want) {
		t.Errorf("with gamma silent, the tenants page lists %v, want %v", got, want)
	}
	if !strings.Contains(body, "Partial view: the decisions of 1 of the 3 live replicas are missing below.") ||
		!strings.Contains(body, `<span class="missing" data-replica="gamma">Replica gamma: did not answer within 500ms.</span>`) {
		t.Errorf("the tenants page does not say gamma is missing:\n%s", body)
	}
	if took < DefaultShareTimeout || took > DefaultShareTimeout+2*time.Second {
		t.Errorf("the page took %v with a replica silent, want the timeout (%v) and a little more", took, DefaultShareTimeout)
	}
	t.Logf("the tenants page with gamma silent took %v", took)
	body, _ = fetch(t, srv.URL+"/console/")
	if !strings.Contains(body, `data-replica="gamma" data-share="missing"`) || !strings.Contains(body, "Decisions of 2 of 3 replicas") {
		t.Errorf("the overview does not say gamma is missing")
	}

	// Beta stops answering: nothing listens on its subject any more, and the server says so at
	// once.
	beta.shares.Stop()
	beta.shares.Stop() // twice is fine
	swallow.Unsubscribe()
	if err := gamma.nc.Flush(); err != nil { // the server has dropped gamma's interest too
		t.Fatal(err)
	}
	body, took = fetch(t, srv.URL+"/console/")
	if !strings.Contains(body, `<span class="missing" data-replica="beta">Replica beta: no answer: nothing listens on its subject`) {
		t.Errorf("the overview does not say beta has no responder:\n%s", body)
	}
	if took >= DefaultShareTimeout {
		t.Errorf("the overview took %v with no responder on either replica's subject, want less than the timeout", took)
	}
}

func maps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestSharesRefuse: a request that is not a share request is answered with a refusal that says
// what is wrong, and the asker reads it as such.
func TestSharesRefuse(t *testing.T) {
	ns := testenv.StartNATS(t)
	nc, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	s, err := StartShares(nc, SharesConfig{Consumer: "admitter", Replica: "alpha", Activity: activity.New(0)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	m, err := nc.Request(ShareSubject("admitter", "alpha"), []byte(`{"v":1,"want":"everything"}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, err = activity.ParseShare(m.Data)
	if !errors.Is(err, activity.ErrShareRefused) || !strings.Contains(s.why(err), `refused: replica alpha: activity: bad share request: want "everything": overview, tenants or tenant`) {
		t.Errorf("a bad request: %v (%s)", err, s.why(err))
	}
	for _, c := range []SharesConfig{{Consumer: "admitter", Replica: "a.b", Activity: activity.New(0)}, {Consumer: "x>", Replica: "a", Activity: activity.New(0)}, {Consumer: "admitter", Replica: "a"}} {
		if _, err := StartShares(nc, c); err == nil {
			t.Errorf("StartShares(%+v) started", c)
		}
	}
}
