package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/plans"
	"github.com/admitter/admitter/wire"
)

// inspectAt parses plans and returns an in-process backend whose clock reads *now (Saturday
// 2026-11-21 12:00 UTC until the test moves it).
func inspectAt(t *testing.T, plansYAML string) (*bucket.Plans, *bucket.Memory, *time.Time) {
	t.Helper()
	ps, err := plans.Parse("plans.yaml", []byte(plansYAML))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	return ps, bucket.NewMemory(bucket.Options{}, func() time.Time { return now }), &now
}

// inspection is what `admitter inspect` prints for tenant.
func inspection(t *testing.T, m *bucket.Memory, ps *bucket.Plans, tenant string) (*wire.TenantState, string) {
	t.Helper()
	res, err := inspect(context.Background(), m, ps, tenant)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	printInspection(&out, res, "this test")
	return res, out.String()
}

// TestPrintInspectionKinds: `admitter inspect` shows each kind in its own terms: a bucket's
// tokens and next token, a window's use and when its oldest take leaves, a quota's use this
// period and when it resets.
func TestPrintInspectionKinds(t *testing.T) {
	ps, m, now := inspectAt(t, `plans:
  pro:
    limits:
      - {name: burst, capacity: 20, rate: 10/s}
      - {name: hourly, kind: window, limit: 5, window: 1h}
      - {name: monthly, kind: quota, limit: 100000, period: month, timezone: Europe/Paris}
default_plan: pro
`)
	plan, _ := ps.Lookup("acme")
	ctx := context.Background()
	if _, err := m.Admit(ctx, bucket.Batch{Tenant: "acme", Plan: plan, Owner: 1, Jobs: []bucket.Job{{ID: 1, Weight: 3}}}); err != nil {
		t.Fatal(err)
	}
	*now = now.Add(10 * time.Minute)
	if _, err := m.Admit(ctx, bucket.Batch{Tenant: "acme", Plan: plan, Owner: 1, Jobs: []bucket.Job{{ID: 2, Weight: 2}, {ID: 3, Weight: 1}}}); err != nil {
		t.Fatal(err)
	}
	_, text := inspection(t, m, ps, "acme")
	rows := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		fields := regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(line), -1)
		rows[fields[0]] = strings.Join(fields, " | ")
	}
	for name, want := range map[string]string{
		"LIMIT":   "LIMIT | KIND | RULE | USED | LEFT | NEXT | FULL IN | A JOB OF WEIGHT 1 FITS IN",
		"burst":   "burst | bucket | 20 at 10/s | 2 | 18 | next token in 100ms | 200ms | 0s",
		"hourly":  "hourly | window | 5 in any 1h | 5 | 0 | oldest leaves in 50m | 1h | 50m",
		"monthly": "monthly | quota | 100000 per month (Europe/Paris) | 5 | 99995 | resets in 9d10h50m (2026-11-30T23:00:00Z) | 9d10h50m | 0s",
	} {
		if rows[name] != want {
			t.Errorf("row %s:\n got %s\nwant %s", name, rows[name], want)
		}
	}
	for _, want := range []string{
		"queue: held by the replica deciding it",
		"why jobs wait: limit hourly (window, 5 in any 1h) counts 5 in its window; its oldest take leaves in 50m; a job of weight 1 fits in 50m",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	t.Logf("\n%s", text)
}

// TestPrintInspectionConcurrency: a concurrency limit speaks of jobs running and leases.
func TestPrintInspectionConcurrency(t *testing.T) {
	ps, m, now := inspectAt(t, "plans:\n  exports:\n    limits:\n      - {name: running, kind: concurrency, limit: 5, lease: 10m}\ndefault_plan: exports\n")
	plan, _ := ps.Lookup("acme")
	ctx := context.Background()
	var jobs []bucket.Job
	for id := int64(1); id <= 6; id++ {
		jobs = append(jobs, bucket.Job{ID: id, Weight: 1})
	}
	if _, err := m.Admit(ctx, bucket.Batch{Tenant: "acme", Plan: plan, Owner: 1, Jobs: jobs}); err != nil {
		t.Fatal(err)
	}
	*now = now.Add(6*time.Minute + 48*time.Second)
	_, text := inspection(t, m, ps, "acme")
	for _, want := range []string{
		"running  concurrency  5 running, lease 10m  5     0     oldest lease ends in 3m12s",
		"why jobs wait: limit running (concurrency, 5 running, lease 10m) has 5 of 5 running; the oldest lease ends in 3m12s, or sooner when a job is done; a job of weight 1 fits in 3m12s",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	t.Logf("\n%s", text)
}

// TestPrintInspectionHeld: a tenant whose queue a replica holds says for how long more; once
// the holder gives it up, nothing is said.
func TestPrintInspectionHeld(t *testing.T) {
	ps, m, now := inspectAt(t, "plans:\n  pro:\n    limits:\n      - {capacity: 10, rate: 10/s}\ndefault_plan: pro\n")
	ctx := context.Background()
	plan, _ := ps.Lookup("acme")
	if _, err := m.Admit(ctx, bucket.Batch{Tenant: "acme", Plan: plan, Owner: 7, Jobs: []bucket.Job{{ID: 1, Weight: 1}}}); err != nil {
		t.Fatal(err)
	}
	*now = now.Add(time.Second)
	_, text := inspection(t, m, ps, "acme")
	want := "queue: held by the replica deciding it for 2s more"
	if !strings.Contains(text, want) {
		t.Errorf("output lacks %q:\n%s", want, text)
	}
	if _, err := m.Admit(ctx, bucket.Batch{Tenant: "acme", Plan: plan, Owner: 7, Release: true}); err != nil {
		t.Fatal(err)
	}
	if res, _ := inspection(t, m, ps, "acme"); res.HeldUntil != nil {
		t.Errorf("after the holder gave it up: held until %v, want none", res.HeldUntil)
	}
}

// TestPrintInspectionPool: a tenant of a pooled plan sees its pool: what is in flight, who waits
// and with what shares, and what each received.
func TestPrintInspectionPool(t *testing.T) {
	ps, m, _ := inspectAt(t, `
pools:
  workers: {concurrency: 2, lease: 30s}
plans:
  gold: {pool: workers, share: 3, limits: [{capacity: 100, rate: 100/s}]}
  free: {pool: workers, limits: [{capacity: 100, rate: 100/s}]}
tenants: {acme: gold, bob: free}
`)
	ctx := context.Background()
	gold, _ := ps.Lookup("acme")
	free, _ := ps.Lookup("bob")
	if _, err := m.Admit(ctx, bucket.Batch{Tenant: "acme", Plan: gold, Owner: 7, Jobs: []bucket.Job{{ID: 1, Weight: 1}, {ID: 2, Weight: 1}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Admit(ctx, bucket.Batch{Tenant: "bob", Plan: free, Owner: 7, Jobs: []bucket.Job{{ID: 3, Weight: 1}}}); err != nil {
		t.Fatal(err)
	}
	res, text := inspection(t, m, ps, "acme")
	for _, want := range []string{"pool workers (2 in flight, lease 30s): 2 of 2 in flight; 1 tenant waiting for it, with shares 1 in all; acme's share is 3",
		"  bob: waiting, share 1; received 0 since it last had nothing waiting", "  acme: nothing waiting; received 2 since it last had nothing waiting"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	if res.Pool == nil || res.Pool.InFlight != 2 || res.Pool.Share != 3 {
		t.Errorf("pool state %+v", res.Pool)
	}
}

// TestPrintInspectionQueue: the service's answer is printed with where each figure came from,
// the queue's depth and its oldest job's age, the pause and who set it, and why the jobs wait
// in words: the pause first, then the pool when the limits would let a job through.
func TestPrintInspectionQueue(t *testing.T) {
	at := time.Date(2026, 11, 25, 4, 31, 26, 0, time.UTC)
	oldest, paused := at.Add(-72*time.Second), at.Add(42*time.Minute)
	res := &wire.TenantState{Tenant: "startup", Plan: "enterprise", At: at, PausedUntil: &paused,
		Limits: []wire.LimitState{{Limit: "burst", Kind: "bucket", Rule: "50 at 10/s", Capacity: 50, Tokens: 50}},
		Queue: &wire.QueueState{Waiting: 25, ListedAt: at.Add(-400 * time.Millisecond), Streams: wire.QueueStreams{{Stream: "JOBS", Jobs: 3}, {Stream: "JOBS_4_3", Jobs: 22}},
			OldestAt: &oldest, OldestSeq: 1234, OldestStream: "JOBS", OldestAgeMs: 72_000},
		Pool: &wire.PoolState{Name: "workers", Rule: "8 in flight, lease 30s", Concurrency: 8, InFlight: 8, Tokens: -1, Waiting: 1, WaitingShares: 3, Share: 3},
		Sources: &wire.Sources{Replica: "r1", Plans: "file /etc/admitter/plans.yaml", Plan: "override to plan enterprise, set by ops@bastion at 2026-11-25T04:00:00Z in bucket admitter_state",
			Limits: "Redis redis://redis:6379, shared by every replica", Queue: "streams JOBS then JOBS_4_3, counted now by replica r1", Pause: "set by ops@bastion in bucket admitter_state"}}
	var out bytes.Buffer
	printInspection(&out, res, "the admitter at 127.0.0.1:9090 (ADMITTER_HTTP_ADDR)")
	text := out.String()
	for _, want := range []string{
		"tenant startup, plan enterprise, read from the admitter at 127.0.0.1:9090 (ADMITTER_HTTP_ADDR) (replica r1) at 2026-11-25T04:31:26Z\n",
		"  plan    override to plan enterprise, set by ops@bastion at 2026-11-25T04:00:00Z in bucket admitter_state; plans: file /etc/admitter/plans.yaml\n",
		"  limits  Redis redis://redis:6379, shared by every replica\n",
		"  queue   streams JOBS then JOBS_4_3, counted now by replica r1\n",
		"  pause   set by ops@bastion in bucket admitter_state\n",
		"queue: 25 jobs waiting in the input (3 in JOBS, 22 in JOBS_4_3) (counted 400ms ago); the oldest, sequence 1234 of JOBS, was stored 1m12s ago (2026-11-25T04:30:14Z)\n",
		"paused until 2026-11-25T05:13:26Z (42m0s from now): its jobs wait in its queue, in order, and its requests are denied\n",
		"pool workers (8 in flight, lease 30s): 8 of 8 in flight; 1 tenant waiting for it, with shares 3 in all; startup's share is 3\n",
		"why jobs wait: the tenant is paused for 42m0s more\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	res.PausedUntil, res.Sources.Pause = nil, ""
	out.Reset()
	printInspection(&out, res, "the admitter")
	if want := "why jobs wait: its plan's limits let a job of weight 1 through now, but pool workers has no room"; !strings.Contains(out.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, out.String())
	}
	t.Logf("\n%s", text)
}

// TestPrintInspectionDownstream: a tenant held by the downstream's Retry-After, and its adaptive
// pool with an open breaker, in words.
func TestPrintInspectionDownstream(t *testing.T) {
	ps, m, _ := inspectAt(t, `
pools:
  api: {concurrency: 8, lease: 30s, adaptive: {min: 2}, breaker: {failures: 50%, window: 30s, cooldown: 10s, min_jobs: 1}}
plans:
  gold: {pool: api, limits: [{capacity: 100, rate: 100/s}]}
tenants: {acme: gold}
`)
	ctx := context.Background()
	gold, _ := ps.Lookup("acme")
	if _, err := m.Admit(ctx, bucket.Batch{Tenant: "acme", Plan: gold, Owner: 7, Jobs: []bucket.Job{{ID: 1, Weight: 1}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Release(ctx, bucket.LeaseRequest{Tenant: "acme", Plan: gold, Lease: 1, Cost: bucket.NoCost,
		Report: bucket.Report{Outcome: bucket.DownstreamFailed, RetryAfter: 30 * time.Second}}); err != nil {
		t.Fatal(err)
	}
	res, text := inspection(t, m, ps, "acme")
	for _, want := range []string{"downstream asked to wait until ", "(30s from now): its queue's jobs wait",
		"  adaptive: limit in force 2 of 8 (minimum 2), starting: measuring the floor at the minimum; time per job 0s, floor not measured yet",
		"  breaker open until "} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	if res.DownstreamUntil == nil || res.Pool == nil || res.Pool.Breaker != "open" || res.Pool.Limit != 2 {
		t.Errorf("state %+v, pool %+v", res, res.Pool)
	}
}
