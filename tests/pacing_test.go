package tests

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"
)

const pacingPlans = `
plans:
  free:
    limits:
      - {capacity: 5, rate: 20/s}
  gold:
    limits:
      - {name: burst, capacity: 10, rate: 50/s}
      - {name: hourly, capacity: 1000, rate: 1000/h}
tenants:
  bob: free
  acme: gold
`

// TestPacingPerPlan publishes a burst for two tenants on different plans and checks every job
// is forwarded exactly once, with the contract's headers, never faster than its plan.
func TestPacingPerPlan(t *testing.T) {
	w := newWorld(t, pacingPlans)
	w.start()
	type tenant struct {
		name, plan string
		n          int
		capacity   int
		rate       float64
	}
	tenants := []tenant{{"bob", "free", 45, 5, 20}, {"acme", "gold", 70, 10, 50}}
	start := time.Now()
	total := 0
	for _, tn := range tenants {
		for i := range tn.n {
			w.publish(fmt.Sprintf("jobs.submit.%s.email.send", tn.name), fmt.Sprintf("%s-%d", tn.name, i), "X-Trace", "keep-me")
		}
		total += tn.n
	}
	got := w.read("ADMITTED", total, 60*time.Second)
	if len(got) != total {
		t.Fatalf("forwarded %d jobs, want exactly %d", len(got), total)
	}
	seen := map[string]bool{}
	for _, tn := range tenants {
		var times []time.Time
		attempts := 0
		for _, j := range got {
			if j.header.Get("Admit-Tenant") != tn.name {
				continue
			}
			if seen[j.payload] {
				t.Fatalf("job %s forwarded twice", j.payload)
			}
			seen[j.payload] = true
			if want := "jobs.admitted." + tn.name + ".email.send"; j.subject != want {
				t.Errorf("forwarded to %s, want %s", j.subject, want)
			}
			if j.header.Get("Admit-Plan") != tn.plan || j.header.Get("X-Trace") != "keep-me" ||
				j.header.Get("Nats-Msg-Id") == "" || j.header.Get("Admit-Degraded") != "" {
				t.Errorf("job %s headers %v", j.payload, j.header)
			}
			a, err := strconv.Atoi(j.header.Get("Admit-Attempts"))
			if err != nil || a < 1 {
				t.Errorf("job %s Admit-Attempts %q", j.payload, j.header.Get("Admit-Attempts"))
			}
			if d, err := strconv.Atoi(j.header.Get("Admit-Delay-Ms")); err != nil || d < 0 {
				t.Errorf("job %s Admit-Delay-Ms %q", j.payload, j.header.Get("Admit-Delay-Ms"))
			}
			attempts += a
			times = append(times, j.stored)
		}
		if len(times) != tn.n {
			t.Fatalf("tenant %s: %d forwarded, want %d", tn.name, len(times), tn.n)
		}
		slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
		// Never faster than the plan: by time t after the first publish, at most C + r·t jobs.
		for k, at := range times {
			bound := float64(tn.capacity) + tn.rate*at.Sub(start).Seconds() + 1
			if float64(k+1) > bound {
				t.Fatalf("tenant %s: %d jobs forwarded %v after the burst, plan allows %.1f", tn.name, k+1, at.Sub(start), bound)
			}
		}
		paced := times[len(times)-1].Sub(times[tn.capacity-1]).Seconds()
		t.Logf("tenant %s (%s, %v/s): %d jobs; after the burst of %d, %.2f jobs/s (plan %v/s, %+.1f%%); mean attempts %.2f",
			tn.name, tn.plan, tn.rate, tn.n, tn.capacity, float64(tn.n-tn.capacity)/paced, tn.rate,
			100*(float64(tn.n-tn.capacity)/paced/tn.rate-1), float64(attempts)/float64(tn.n))
	}
	// Every input is acknowledged, every lane emptied.
	waitFor(t, 10*time.Second, "the input stream and the lanes to drain", func() bool {
		return w.streamMsgs("JOBS") == 0
	})
}

// TestWeightsAndChainedLimits checks weights are charged to every limit, and that a job blocked
// by a slow limit waits instead of passing.
func TestWeightsAndChainedLimits(t *testing.T) {
	w := newWorld(t, `
plans:
  gold:
    limits:
      - {name: burst, capacity: 10, rate: 100/s}
      - {name: daily, capacity: 20, rate: 20/d}
default_plan: gold
`)
	w.start()
	for i := range 5 {
		w.publish("jobs.submit.acme.report", fmt.Sprint("heavy-", i), "Admit-Weight", "5")
	}
	w.read("ADMITTED", 4, 20*time.Second)
	// The fifth job needs the daily limit, empty for the next 6 hours: it waits where it arrived.
	waitFor(t, 20*time.Second, "the fifth job to be delayed", func() bool { return w.streamMsgs("JOBS") == 1 })
	if got := w.readAll("ADMITTED"); len(got) != 4 {
		t.Fatalf("forwarded %d heavy jobs, want 4 (daily capacity 20 / weight 5)", len(got))
	}
	if w.streamMsgs("JOBS") != 1 {
		t.Fatalf("input stream holds %d jobs, want the delayed one alone", w.streamMsgs("JOBS"))
	}
}
