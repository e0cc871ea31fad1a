package tests

// A bound on waiting (issue 32): a plan's max_wait and a job's Admit-Max-Wait dead-letter a job
// that cannot be admitted within it (code expired), on time; a spent quota dead-letters at once;
// an expired dead letter replays like the others. The assertions are on the order of events
// (never before the deadline, before what would have admitted it), not on speed.

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/admitter/admitter/wire"
)

// expiredLetter checks that j is an expired dead letter of the job published on subject, which
// waited for waitedFor, stored no sooner than bound after its arrival (the stamp it carries, to
// the input's store time) and at most late after that; it returns the arrival.
func expiredLetter(t *testing.T, j job, subject, waitedFor string, bound, late time.Duration) time.Time {
	t.Helper()
	h := j.header
	if j.subject != subject || h.Get(wire.HeaderError) != string(wire.CodeExpired) || h.Get(wire.HeaderErrorWaitedFor) != waitedFor ||
		!strings.Contains(h.Get(wire.HeaderErrorDetail), " for "+waitedFor) {
		t.Errorf("dead letter on %s: %v; want %s expired, having waited for %s", j.subject, h, subject, waitedFor)
	}
	arrived, err := time.Parse(time.RFC3339Nano, h.Get(wire.HeaderErrorArrived))
	if err != nil {
		t.Fatalf("%s: %v", wire.HeaderErrorArrived, err)
	}
	if after := j.stored.Sub(arrived); after < bound || after > bound+late {
		t.Errorf("dead-lettered %v after its arrival, want from its bound %v to %v after", after, bound, bound+late)
	}
	return arrived
}

// TestPlanMaxWaitDeadLettersOnTime: under a plan with max_wait: 2s, a job waiting for a
// concurrency slot (held by a lease of a minute: a wait that a done message could cut short, so
// it is waited out) is dead-lettered expired at its bound, and its queue goes on: the job behind
// it expires at its own. Meanwhile admitter_oldest_waiting_seconds shows its age; the expiry is
// counted by plan and reason. Before, nothing expired: both waited for the lease's end.
func TestPlanMaxWaitDeadLettersOnTime(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "plans:\n  p: {max_wait: 2s, limits: [{name: running, kind: concurrency, limit: 1, lease: 1m}]}\ndefault_plan: p\n")
	metrics := freeAddr(t)
	w.start("ADMITTER_HTTP_ADDR=" + metrics)
	w.publish("jobs.submit.acme.first", "1")
	w.read("ADMITTED", 1, 10*time.Second) // it holds the only slot for a minute
	w.publish("jobs.submit.acme.second", "2")
	waitFor(t, 2*time.Second, "admitter_oldest_waiting_seconds to show the second job waiting", func() bool {
		_, body := httpGet(t, "http://"+metrics+"/metrics")
		return metricValue(body, wire.MetricOldestWaiting.Prom, `plan="p"`) > 0.2
	})
	time.Sleep(300 * time.Millisecond)
	w.publish("jobs.submit.acme.third", "3")
	dead := w.read("DEAD", 2, 10*time.Second)
	first := expiredLetter(t, dead[0], "jobs.dead.acme.second", "concurrency running", 2*time.Second, 3*time.Second)
	second := expiredLetter(t, dead[1], "jobs.dead.acme.third", "concurrency running", 2*time.Second, 3*time.Second)
	if !first.Before(second) || !strings.Contains(dead[0].header.Get(wire.HeaderErrorDetail), "beyond its bound of 2s (plan p's max_wait)") {
		t.Errorf("dead letters out of order, or without the plan's bound: %v, %v", dead[0].header, dead[1].header)
	}
	if n := len(w.readAll("ADMITTED")); n != 1 {
		t.Errorf("ADMITTED holds %d jobs, want 1", n)
	}
	waitFor(t, 10*time.Second, "the expired jobs to leave the input", func() bool { return w.streamMsgs("JOBS") == 0 })
	_, body := httpGet(t, "http://"+metrics+"/metrics")
	if n := metricValue(body, wire.MetricJobsExpired.Prom, `plan="p"`, `reason="concurrency"`); n != 2 {
		t.Errorf("%s{plan=p,reason=concurrency} = %v, want 2", wire.MetricJobsExpired.Prom, n)
	}
	if age := metricValue(body, wire.MetricOldestWaiting.Prom, `plan="p"`); age != 0 {
		t.Errorf("%s = %v with nothing waiting, want none", wire.MetricOldestWaiting.Prom, age)
	}
}

// TestAdmitMaxWaitDeadLettersOnTime: a job published with Admit-Max-Wait: 1 behind its tenant's
// head (waiting for the concurrency slot, a lease of 3 s that nobody releases) is dead-lettered at
// its bound, out of its place, before the head goes; the head and the job behind it are then
// forwarded in their order, and the expired job spent nothing (each of the others took the slot
// in turn). Before, it waited behind the head and was forwarded after it.
func TestAdmitMaxWaitDeadLettersOnTime(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "plans:\n  c: {limits: [{name: running, kind: concurrency, limit: 1, lease: 3s}]}\ndefault_plan: c\n")
	w.start()
	w.publish("jobs.submit.acme.a", "a")
	w.read("ADMITTED", 1, 10*time.Second)
	w.publish("jobs.submit.acme.b", "b") // waits for a's lease to end
	w.publish("jobs.submit.acme.c", "c", wire.HeaderMaxWait, "1")
	w.publish("jobs.submit.acme.d", "d")
	admitted := w.read("ADMITTED", 3, 15*time.Second)
	dead := w.readAll("DEAD")
	if len(dead) != 1 {
		t.Fatalf("DEAD holds %d, want the expired job", len(dead))
	}
	expiredLetter(t, dead[0], "jobs.dead.acme.c", "concurrency running", time.Second, 1500*time.Millisecond)
	if !strings.Contains(dead[0].header.Get(wire.HeaderErrorDetail), "beyond its bound of 1s (its Admit-Max-Wait)") || dead[0].header.Get(wire.HeaderMaxWait) != "1" {
		t.Errorf("the dead letter's headers: %v", dead[0].header)
	}
	var order []string
	for _, j := range admitted {
		order = append(order, j.payload)
	}
	if got := strings.Join(order, " "); got != "a b d" {
		t.Errorf("forwarded %q, want a b d", got)
	}
	if !dead[0].stored.Before(admitted[1].stored) {
		t.Errorf("the expired job was dead-lettered at %v, after the head went at %v", dead[0].stored, admitted[1].stored)
	}
}

// TestSpentQuotaDeadLettersAtOnce: with the month's quota spent and a bound of an hour, the next
// job is dead-lettered at once (its wait, until the 1st, is known when it is decided), having
// waited for the quota. Before, it waited in the input (an hour, here: for the month's end).
func TestSpentQuotaDeadLettersAtOnce(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "plans:\n  m: {max_wait: 1h, limits: [{name: monthly, kind: quota, limit: 2, period: month}]}\ndefault_plan: m\n")
	w.start()
	for i := range 3 {
		w.publish("jobs.submit.acme.report", strconv.Itoa(i))
	}
	dead := w.read("DEAD", 1, 10*time.Second)
	if len(dead) != 1 || dead[0].payload != "2" {
		t.Fatalf("dead letters %v, want the third job", dead)
	}
	expiredLetter(t, dead[0], "jobs.dead.acme.report", "quota monthly", 0, 10*time.Second)
	if d := dead[0].header.Get(wire.HeaderErrorDetail); !strings.Contains(d, "dead-lettered at once") || !strings.Contains(d, "beyond its bound of 1h (plan m's max_wait)") {
		t.Errorf("detail %q", d)
	}
	if n := len(w.read("ADMITTED", 2, 10*time.Second)); n != 2 {
		t.Errorf("ADMITTED holds %d, want the quota's 2", n)
	}
}

// TestExpiredDeadLetterReplays: an expired dead letter is replayed like any other; replayed with
// --drop-header Admit-Max-Wait it waits without its own bound and is forwarded once the slot it
// waited for is free, without the dead letter's Admit-Error-* headers. Before, nothing expired.
func TestExpiredDeadLetterReplays(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "plans:\n  c: {limits: [{name: running, kind: concurrency, limit: 1, lease: 2s}]}\ndefault_plan: c\n")
	w.start()
	w.publish("jobs.submit.acme.a", "a")
	w.read("ADMITTED", 1, 10*time.Second)
	w.publish("jobs.submit.acme.b", "b", wire.HeaderMaxWait, "500ms", "X-Trace", "t")
	dead := w.read("DEAD", 1, 10*time.Second)
	expiredLetter(t, dead[0], "jobs.dead.acme.b", "concurrency running", 500*time.Millisecond, 1500*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := w.js.Stream(ctx, "DEAD")
	if err != nil {
		t.Fatal(err)
	}
	last, err := st.GetLastMsgForSubject(ctx, "jobs.dead.acme.b")
	if err != nil {
		t.Fatal(err)
	}
	seq := strconv.FormatUint(last.Sequence, 10)
	out, err := w.command("dead", "replay", "--code", "expired", "--drop-header", "Admit-Max-Wait").CombinedOutput()
	if code := demoExitCode(t, err); code != 0 || !strings.Contains(string(out), "replayed") || !strings.Contains(string(out), "drop Admit-Max-Wait") {
		t.Fatalf("dead replay --code expired: exit %d:\n%s", code, out)
	}
	admitted := w.read("ADMITTED", 2, 10*time.Second)
	j := findJob(t, admitted, "b")
	for _, k := range []string{wire.HeaderError, wire.HeaderErrorDetail, wire.HeaderErrorArrived, wire.HeaderErrorWaitedFor, wire.HeaderMaxWait} {
		if j.header.Get(k) != "" {
			t.Errorf("the replayed job forwarded with %s: %v", k, j.header)
		}
	}
	if j.header.Get(wire.HeaderReplayOf) != "DEAD:"+seq || j.header.Get("X-Trace") != "t" {
		t.Errorf("the replayed job's headers: %v", j.header)
	}
	if n := len(w.readAll("DEAD")); n != 1 {
		t.Errorf("DEAD holds %d, want the one dead letter", n)
	}
}

// TestPausedJobsExpire: a paused tenant's jobs wait, charged nothing, until their bound: then
// they are dead-lettered expired, having waited for the pause. Before, they waited for the pause's
// end (max_wait was refused).
func TestPausedJobsExpire(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "plans:\n  p: {max_wait: 2s, limits: [{capacity: 5, rate: 5/s}]}\ndefault_plan: p\n")
	p := w.start()
	if code, out, errOut := w.plansCLI(nil, "pause", "acme", "--for", "1h", "--yes"); code != 0 { // past max_wait: --yes
		t.Fatalf("pause: exit %d\n%s%s", code, out, errOut)
	}
	waitFor(t, 5*time.Second, "the pause to apply", func() bool { return strings.Contains(p.logs.String(), "paused: acme until") })
	w.publish("jobs.submit.acme.x", "1")
	w.publish("jobs.submit.acme.x", "2")
	dead := w.read("DEAD", 2, 10*time.Second)
	for _, d := range dead {
		expiredLetter(t, d, "jobs.dead.acme.x", "paused", 2*time.Second, 3*time.Second)
	}
	if dead[0].payload != "1" || dead[1].payload != "2" || len(w.readAll("ADMITTED")) != 0 {
		t.Errorf("dead letters %q, %q and %d forwarded; want 1 then 2, none forwarded", dead[0].payload, dead[1].payload, len(w.readAll("ADMITTED")))
	}
}
