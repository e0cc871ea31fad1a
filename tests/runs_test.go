//go:build drill || soak

package tests

// What the drills and the soak share: runs counted per job at the worker, and their verdict.

import (
	"context"
	"slices"
	"time"
)

// runVerdict sorts the jobs published by how they ran at their worker: more than once, never,
// and those that ran and were dead-lettered too (payloads, sorted). Every other job ran once.
type runVerdict struct {
	twice, never, both []string
}

// judgeRuns is the verdict on published (payload → tenant) given runs (payload → times run)
// and dead (payload → dead-lettered).
func judgeRuns(published map[string]string, runs map[string]int, dead func(string) bool) runVerdict {
	var v runVerdict
	for p := range published {
		switch n := runs[p]; {
		case n > 1:
			v.twice = append(v.twice, p)
		case n == 0:
			v.never = append(v.never, p)
		}
		if runs[p] > 0 && dead(p) {
			v.both = append(v.both, p)
		}
	}
	slices.Sort(v.twice)
	slices.Sort(v.never)
	slices.Sort(v.both)
	return v
}

// poll checks cond every 100 ms until it holds or within passes, and says whether it held.
func poll(within time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(within); ; time.Sleep(100 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// runCounts is how many times each job ran (its payload → runs), and how many run now per
// tenant and in all.
func (r *running) runCounts() (runs map[string]int, now map[string]int, all int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	runs, now = make(map[string]int, len(r.runs)), make(map[string]int, len(r.now))
	for p, rs := range r.runs {
		runs[p] = len(rs)
	}
	for tn, n := range r.now {
		now[tn] = n
	}
	return runs, now, r.all
}

// runsOf is every run of the job whose payload is p.
func (r *running) runsOf(p string) []jobRun {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.runs[p])
}

// consumerDone reports whether the durable consumer name of the output stream has delivered
// every forward stored and had each settled (acked, terminated): nothing pending, nothing
// awaiting its ack. A consumer that cannot be read now is not done.
func (w *world) consumerDone(name string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := w.js.Consumer(ctx, "ADMITTED", name)
	if err != nil {
		return false
	}
	info, err := c.Info(ctx)
	return err == nil && info.NumPending == 0 && info.NumAckPending == 0
}
