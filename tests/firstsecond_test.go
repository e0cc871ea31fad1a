package tests

// A new deployment works from its first second: the built binary against a redis-server
// started a moment earlier with its own defaults (no append-only file), as a new user runs it;
// and a Redis that forgot (restarted without its data) costs what the README's table says, not
// the rest of a quota's period.

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/admitter/admitter/internal/testenv"
)

// firstPlans: slow buckets (one token a minute), so that a bucket taken for empty at the
// Redis's start lets nothing through for a minute, while a full one lets its burst go at once.
const firstPlans = `
plans:
  metered:
    limits:
      - {name: burst, capacity: 10, rate: 1/m}
      - {name: monthly, kind: quota, limit: 100000, period: month}
  bursty:
    limits:
      - {capacity: 10, rate: 1/m}
  slots:
    limits:
      - {name: running, kind: concurrency, limit: 3, lease: 1m}
tenants:
  acme: metered
  dora: metered
  bob: bursty
  cc: slots
`

// TestNewDeploymentStartsFull: on a Redis that never knew admitter, every tenant gets its
// burst, its quota and its concurrency slots from the first job; the first synchronous
// decision is allowed.
func TestNewDeploymentStartsFull(t *testing.T) {
	redis := testenv.StartDefaultRedis(t)
	w := newWorldWith(t, firstPlans, redis)
	api := freeAddr(t)
	w.start("ADMITTER_API_ADDR=" + api)

	r := post(t, "http://"+api+"/v1/decide", `{"tenant":"dora"}`)
	if r.status != 200 {
		t.Errorf("first decision of a new tenant on a monthly quota: %d %s (Retry-After %q), want 200", r.status, r.body, r.header.Get("Retry-After"))
	}
	for i := 0; i < 10; i++ {
		w.publish("jobs.submit.acme.email", fmt.Sprintf("acme-%d", i))
		w.publish("jobs.submit.bob.email", fmt.Sprintf("bob-%d", i))
	}
	for i := 0; i < 3; i++ {
		w.publish("jobs.submit.cc.export", fmt.Sprintf("cc-%d", i))
	}
	// One token a minute: with the burst taken for spent, at most one job of acme or bob
	// would go within this wait; with the slots taken for held, none of cc's.
	got := map[string]int{}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		got = map[string]int{}
		for _, j := range w.readHeaders("ADMITTED") {
			got[strings.Split(j.subject, ".")[2]]++
		}
		if got["acme"] == 10 && got["bob"] == 10 && got["cc"] == 3 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got["acme"] != 10 || got["bob"] != 10 || got["cc"] != 3 {
		t.Fatalf("forwarded within 20 s of a new deployment: %v, want acme 10 (bucket + monthly quota), bob 10 (its burst), cc 3 (its slots)", got)
	}
}

// forgotPlans: a bucket that refills fast beside a monthly quota.
const forgotPlans = `
plans:
  steady:
    limits:
      - {name: burst, capacity: 5, rate: 10/s}
      - {name: monthly, kind: quota, limit: 100000, period: month}
tenants:
  acme: steady
`

// TestRedisThatForgotCostsLittle: Redis restarted without its data while admitter runs
// (fail-closed), then again while no admitter runs: a tenant with a monthly quota goes on
// within what its bucket refills, and each forgetting is counted once.
func TestRedisThatForgotCostsLittle(t *testing.T) {
	t.Parallel()
	redis := testenv.StartDefaultRedis(t)
	w := newWorldWith(t, forgotPlans, redis)
	metrics := freeAddr(t)
	env := []string{"ADMITTER_FAIL_MODE=closed", "ADMITTER_HTTP_ADDR=" + metrics}
	p := w.start(env...)
	forgot := func() float64 {
		_, body := httpGet(t, "http://"+metrics+"/metrics")
		return metricValue(body, "admitter_redis_forgot_total")
	}
	published := 0
	publish := func(n int) {
		for i := 0; i < n; i++ {
			w.publish("jobs.submit.acme.email", fmt.Sprintf("acme-%d", published))
			published++
		}
	}
	forwarded := func(within time.Duration, what string) {
		t.Helper()
		w.read("ADMITTED", published, within)
		_ = what
	}
	publish(5)
	forwarded(20*time.Second, "before the restart")
	if n := forgot(); n != 0 {
		t.Fatalf("admitter_redis_forgot_total %v on a new deployment, want 0", n)
	}

	// Redis loses everything (killed, its snapshot gone) while admitter runs.
	redis.Kill()
	if err := redis.Forget(); err != nil {
		t.Fatal(err)
	}
	if err := redis.Start(); err != nil {
		t.Fatal(err)
	}
	publish(20) // 5 at once, then 10/s: about 1.5 s of the bucket's pace
	forwarded(30*time.Second, "after Redis forgot while admitter ran")
	waitFor(t, 10*time.Second, "admitter_redis_forgot_total to be 1", func() bool { return forgot() == 1 })
	if !strings.Contains(p.logs.String(), "redis forgot") {
		t.Errorf("no log line says redis forgot:\n%s", p.logs.String())
	}

	// Again while no admitter runs: the next one learns it from the record it keeps in NATS.
	if code := p.signal(syscall.SIGTERM, 15*time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	redis.Kill()
	if err := redis.Forget(); err != nil {
		t.Fatal(err)
	}
	if err := redis.Start(); err != nil {
		t.Fatal(err)
	}
	p = w.start(env...)
	publish(20)
	forwarded(30*time.Second, "after Redis forgot while no admitter ran")
	waitFor(t, 10*time.Second, "admitter_redis_forgot_total to be 1 in the new process", func() bool { return forgot() == 1 })

	// A restart of admitter alone, or of Redis with its snapshot (SIGTERM saves one), is no
	// forgetting.
	if code := p.signal(syscall.SIGTERM, 15*time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	redis.Stop()
	if err := redis.Start(); err != nil {
		t.Fatal(err)
	}
	p = w.start(env...)
	publish(5)
	forwarded(30*time.Second, "after a restart that kept the data")
	if n := forgot(); n != 0 {
		t.Errorf("admitter_redis_forgot_total %v after a Redis restart that kept its data, want 0\n%s", n, p.logs.String())
	}
}
