package tests

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// admittedTimes returns when each of n jobs was stored on ADMITTED, sorted, waiting (bounded)
// for all of them.
func (w *world) admittedTimes(n int, timeout time.Duration) []time.Time {
	w.t.Helper()
	got := w.read("ADMITTED", n, timeout)
	if len(got) != n {
		w.t.Fatalf("forwarded %d jobs, want exactly %d", len(got), n)
	}
	times := make([]time.Time, 0, n)
	seen := map[string]bool{}
	for _, j := range got {
		if seen[j.payload] {
			w.t.Fatalf("job %s forwarded twice", j.payload)
		}
		seen[j.payload] = true
		times = append(times, j.stored)
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	return times
}

// TestWindowPacesABurst: 25 jobs on a sliding window of 10 per 3 s come out as 10 at once, 10
// about 3 s later and 5 about 6 s later, and never more than 10 in any 3 s.
func TestWindowPacesABurst(t *testing.T) {
	w := newWorld(t, `
plans:
  w:
    limits:
      - {name: three-seconds, kind: window, limit: 10, window: 3s}
default_plan: w
`)
	w.start()
	for i := range 25 {
		w.publish("jobs.submit.acme.x", fmt.Sprint("job-", i))
	}
	times := w.admittedTimes(25, 30*time.Second)
	t0 := times[0]
	at := func(i int) time.Duration { return times[i].Sub(t0) }
	// Decisions are exact; what is stored lags each decision by a publish (milliseconds), so the
	// bounds allow 100ms early (a slow publish before) and a loaded machine's lateness.
	const early, late = 100 * time.Millisecond, 1500 * time.Millisecond
	for i := range 25 {
		group := time.Duration(i/10) * 3 * time.Second
		if at(i) < group-early || at(i) > group+late {
			t.Errorf("job %d of 25 stored at +%v, want about +%v", i+1, at(i).Round(time.Millisecond), group)
		}
		if i >= 10 && times[i].Sub(times[i-10]) < 3*time.Second-early {
			t.Errorf("jobs %d and %d stored %v apart: 11 in less than 3s", i-9, i+1, times[i].Sub(times[i-10]))
		}
	}
	t.Logf("stored at +%v (10th), +%v (11th), +%v (20th), +%v (21st), +%v (25th)",
		at(9).Round(time.Millisecond), at(10).Round(time.Millisecond), at(19).Round(time.Millisecond), at(20).Round(time.Millisecond), at(24).Round(time.Millisecond))
}

// TestQuotaResetsAtTheMinute: a quota of 5 per calendar minute admits 5 jobs of a burst of 9,
// then the other 4 right after the minute turns (on the Redis server's clock, this host's). The
// test waits for a real minute to turn, at most a minute: it starts its burst early enough in a
// minute that the first 5 cannot straddle the turn.
func TestQuotaResetsAtTheMinute(t *testing.T) {
	t.Parallel()
	w := newWorld(t, `
plans:
  q:
    limits:
      - {name: per-minute, kind: quota, limit: 5, period: minute}
default_plan: q
`)
	w.start()
	if now := time.Now(); now.Second() >= 45 {
		time.Sleep(now.Truncate(time.Minute).Add(time.Minute + time.Second).Sub(now))
	}
	turn := time.Now().Truncate(time.Minute).Add(time.Minute)
	for i := range 9 {
		w.publish("jobs.submit.acme.x", fmt.Sprint("job-", i))
	}
	first := w.read("ADMITTED", 5, 15*time.Second)
	if time.Now().Before(turn) && len(first) != 5 {
		t.Fatalf("%d admitted before the minute turned, want 5", len(first))
	}
	times := w.admittedTimes(9, time.Until(turn)+20*time.Second)
	for i, at := range times {
		switch {
		case i < 5 && !at.Before(turn):
			t.Errorf("job %d stored at %v, after the turn at %v: want it in the first minute", i+1, at.Format(time.RFC3339Nano), turn.Format(time.RFC3339))
		case i >= 5 && (at.Before(turn) || at.After(turn.Add(2*time.Second))):
			t.Errorf("job %d stored at %v, want right after the turn at %v", i+1, at.Format(time.RFC3339Nano), turn.Format(time.RFC3339))
		}
	}
	t.Logf("5 stored by %v; the minute turned at %v; the other 4 stored by +%v", times[4].Format("15:04:05.000"), turn.Format("15:04:05"), times[8].Sub(turn).Round(time.Millisecond))
}

// TestChainedKindsTakeNothingWhenOneRefuses: a bucket, a window and a quota chained; each
// tenant's plan has one of them tight. Of 4 jobs, 2 pass and 2 wait in the lane, and admitter
// inspect shows that every limit counts the 2 that passed and nothing of the 2 refused.
func TestChainedKindsTakeNothingWhenOneRefuses(t *testing.T) {
	t.Parallel()
	plan := func(name string, b, win, q int) string {
		return fmt.Sprintf(`  %s:
    limits:
      - {name: burst, capacity: %d, rate: 1/h}
      - {name: hourly, kind: window, limit: %d, window: 1h}
      - {name: monthly, kind: quota, limit: %d, period: month}
`, name, b, win, q)
	}
	w := newWorld(t, "plans:\n"+plan("tight-bucket", 2, 10, 10)+plan("tight-window", 10, 2, 10)+plan("tight-quota", 10, 10, 2)+
		"tenants: {tb: tight-bucket, tw: tight-window, tq: tight-quota}\n")
	w.start()
	for _, tenant := range []string{"tb", "tw", "tq"} {
		for i := range 4 {
			w.publish("jobs.submit."+tenant+".x", fmt.Sprint(tenant, "-", i))
		}
	}
	w.read("ADMITTED", 6, 20*time.Second)
	waitFor(t, 20*time.Second, "6 jobs waiting in their queues", func() bool { return w.streamMsgs("JOBS") == 6 })
	time.Sleep(500 * time.Millisecond) // let any further (wrong) admission show
	if got := len(w.readAll("ADMITTED")); got != 6 {
		t.Fatalf("%d admitted, want 6: 2 per tenant", got)
	}
	split := regexp.MustCompile(`\s{2,}`)
	for _, c := range []struct{ tenant, binding string }{{"tb", "burst"}, {"tw", "hourly"}, {"tq", "monthly"}} {
		out, err := w.command("inspect", c.tenant).CombinedOutput()
		if err != nil {
			t.Fatalf("admitter inspect %s: %v\n%s", c.tenant, err, out)
		}
		text := string(out)
		rows := map[string][]string{}
		for _, line := range strings.Split(text, "\n") {
			f := split.Split(strings.TrimSpace(line), -1)
			rows[f[0]] = f
		}
		for _, limit := range []string{"burst", "hourly", "monthly"} {
			r := rows[limit]
			if len(r) < 5 || r[3] != "2" {
				t.Errorf("tenant %s, limit %s: %q, want USED 2 (the two admitted, nothing of the two refused):\n%s", c.tenant, limit, r, text)
			}
		}
		if !strings.Contains(text, "why jobs wait: limit "+c.binding+" (") {
			t.Errorf("tenant %s: want the wait blamed on %s:\n%s", c.tenant, c.binding, text)
		}
		t.Logf("admitter inspect %s:\n%s", c.tenant, text)
	}
}
