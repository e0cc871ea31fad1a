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

// TestRefusedAcknowledgementsAreCountedAndNothingIsTwice: the admitter's acknowledgements of
// the input are refused for 3 s while a tenant's jobs are forwarded: each refusal is counted
// (admitter_settle_errors_total) and logged, the jobs come back after the ack wait, and none is
// stored twice downstream.
func TestRefusedAcknowledgementsAreCountedAndNothingIsTwice(t *testing.T) {
	w, deny, env := lossyWorld(t, `
plans:
  fast:
    limits: [{capacity: 1000, rate: 1000/s}]
default_plan: fast
`)
	metrics := freeAddr(t)
	p := w.start(append(env, "ADMITTER_HTTP_ADDR="+metrics)...)
	deny("$JS.ACK.>")
	for i := range 50 {
		w.publish("jobs.submit.acme.email", fmt.Sprintf("acme-%d", i))
	}
	w.read("ADMITTED", 50, 20*time.Second)
	time.Sleep(3 * time.Second)
	deny() // acknowledgements go through again
	_, body := httpGet(t, "http://"+metrics+"/metrics")
	if n := metricValue(body, "admitter_settle_errors_total", `op="ack"`); n < 1 {
		t.Errorf("admitter_settle_errors_total{op=\"ack\"} = %v while every ack was refused, want ≥ 1", n)
	}
	if !strings.Contains(p.logs.String(), "acknowledging an input job failed") {
		t.Errorf("no log line says an acknowledgement failed")
	}
	// The 50 come back after the ack wait (5 s) and are acknowledged then.
	waitFor(t, 30*time.Second, "the input to be empty", func() bool { return w.streamMsgs("JOBS") == 0 })
	seen := map[string]int{}
	for _, j := range w.readAll("ADMITTED") {
		seen[j.payload]++
	}
	for i := range 50 {
		if n := seen[fmt.Sprintf("acme-%d", i)]; n != 1 {
			t.Errorf("acme-%d stored %d times downstream, want once", i, n)
		}
	}
}
