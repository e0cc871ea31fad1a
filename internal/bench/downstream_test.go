package bench

import (
	"math"
	"reflect"
	"testing"
	"time"
)

func TestJain(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		xs   []float64
		want float64
	}{
		{[]float64{3, 3, 3}, 1},
		{[]float64{4, 0, 0, 0}, 0.25}, // one has everything: 1/n
		{[]float64{1, 3}, 0.8},        // 16 / (2 × 10)
		{nil, 0},
		{[]float64{0, 0}, 0},
	} {
		if got := jain(c.xs); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("jain(%v) = %v, want %v", c.xs, got, c.want)
		}
	}
}

func TestBinCountsAndSteadyRate(t *testing.T) {
	t.Parallel()
	ms := func(v int) time.Duration { return time.Duration(v) * time.Millisecond }
	bins := binCounts([]time.Duration{0, ms(499), ms(500), ms(1200), ms(1499), ms(1500), ms(1600), -1}, dsBin, ms(1600))
	if want := []int{2, 1, 2, 1}; !reflect.DeepEqual(bins, want) { // the last bin ends at 1600: 1600 and -1 are out
		t.Errorf("bins %v, want %v", bins, want)
	}
	bins = []int{100, 200, 200, 100}
	// [0.5s, 2s): bins 1 to 3, 500 jobs in 1.5s.
	if got := steadyRate(bins, dsBin, ms(500), ms(2000)); math.Abs(got-1000.0/3) > 1e-9 {
		t.Errorf("steady rate %v", got)
	}
	// Only bins wholly inside count: [0.2s, 1.6s) is bins 1 and 2.
	if got := steadyRate(bins, dsBin, ms(200), ms(1600)); got != 400 {
		t.Errorf("steady rate of whole bins %v, want 400", got)
	}
	if got := steadyRate(bins, dsBin, ms(1000), ms(1000)); got != 0 {
		t.Errorf("an empty span: %v", got)
	}
}

func TestBackWithin(t *testing.T) {
	t.Parallel()
	s := func(v float64) time.Duration { return time.Duration(v * float64(time.Second)) }
	// Capacity 200/s: a bin of 0.5s is within 30 % from 70 to 130 jobs.
	bins := []int{0, 30, 69, 70, 130, 100, 131, 100, 100, 100, 100, 100}
	// From 0, spans of 1s (two bins): bins 3 and 4 are the first pair within.
	if got := backWithin(bins, dsBin, 0, s(6), s(1), 200, 0.3); got != s(1.5) {
		t.Errorf("back %v, want 1.5s", got)
	}
	// Spans of 2s: bin 6 breaks every run of four up to it; 7-10 is the first.
	if got := backWithin(bins, dsBin, 0, s(6), s(2), 200, 0.3); got != s(3.5) {
		t.Errorf("back over 2s spans %v, want 3.5s", got)
	}
	// Counted from a change at 1s: bin 7 starts 2.5s after it.
	if got := backWithin(bins, dsBin, s(1), s(6), s(2), 200, 0.3); got != s(2.5) {
		t.Errorf("back after a change at 1s %v, want 2.5s", got)
	}
	// The span must end before the phase does: to at 5.5s still holds 7-10; at 5s it does not.
	if got := backWithin(bins, dsBin, 0, s(5.5), s(2), 200, 0.3); got != s(3.5) {
		t.Errorf("a span that ends with the phase: %v, want 3.5s", got)
	}
	if got := backWithin(bins, dsBin, 0, s(5), s(2), 200, 0.3); got != -1 {
		t.Errorf("a span past the phase: %v, want -1 (never)", got)
	}
	if got := backWithin([]int{400, 400}, dsBin, 0, s(1), s(1), 200, 0.3); got != -1 {
		t.Errorf("above the band: %v, want never", got)
	}
}

// TestDownstreamFigures computes a run's figures from a hand-made one: phases of 4s (full 400/s,
// halved, full again) with two tenants of shares 1 and 2.
func TestDownstreamFigures(t *testing.T) {
	t.Parallel()
	phase := 4 * time.Second
	phases := dsPhases(phase)
	r := downstreamRun{shares: []int64{1, 2}, jobs: []int{5000, 10000}, phases: phases, end: 3 * phase}
	add := func(tenant int32, start, took time.Duration, refused bool) {
		r.calls = append(r.calls, dsCall{tenant: tenant, start: start, end: start + took, refused: refused})
	}
	// Full: 100 jobs per bin (200/s, half the capacity) for the first two seconds, then 190 (380/s).
	// Halved: 20 per bin for 2s (40/s), then 100 (200/s). Full again: 180 per bin (360/s).
	// Jobs take 20ms, but one in two hundred 70ms; tenant 1 gets two of every three.
	perBin := []int{100, 100, 100, 100, 190, 190, 190, 190, 20, 20, 20, 20, 100, 100, 100, 100, 180, 180, 180, 180, 180, 180, 180, 180}
	k := 0
	for b, n := range perBin {
		for i := range n {
			took := 20 * time.Millisecond
			if k%200 == 199 {
				took = 70 * time.Millisecond
			}
			end := time.Duration(b)*dsBin + time.Duration(i)*dsBin/time.Duration(n)
			add(int32(min(k%3, 1)), end-took, took, false)
			k++
		}
	}
	r.calls[5].again = true
	add(0, time.Second, dsRefusal, true)
	add(1, 5*time.Second, dsRefusal, true)
	add(1, 5*time.Second, dsRefusal, true)
	add(0, 12*time.Second-time.Millisecond, 20*time.Millisecond, false) // ends after the run: not counted
	r.limits = []LimitSample{{AtS: 0.5, Limit: 2}, {AtS: 2.5, Limit: 9, InFlight: 9, Running: 7, AckPending: 8}, {AtS: 3, Limit: 10, InFlight: 8, Running: 8, AckPending: 9},
		{AtS: 3.5, Limit: 9, InFlight: 9, Running: 6, AckPending: 7, Undelivered: 1}, {AtS: 7, Limit: 5, InFlight: 5, Running: 4}, {AtS: 11, Limit: 9}}

	f := DownstreamFigures(r)
	if f.Done != int64(k) || f.Refused != 3 || f.DoneAgain != 1 || len(f.DonePerBin) != 24 || f.DonePerBin[4] != 190 {
		t.Fatalf("counts: done %d of %d, refused %d, bins %v", f.Done, k, f.Refused, f.DonePerBin)
	}
	if len(f.Phases) != 3 {
		t.Fatalf("phases: %+v", f.Phases)
	}
	for i, want := range []struct {
		name          string
		capacity, per float64
		vs            float64
		refused       int64
		limit         int64
	}{{"full", 400, 380, 0.95, 1, 9}, {"halved", 200, 200, 1, 2, 5}, {"full again", 400, 360, 0.9, 0, 9}} {
		ph := f.Phases[i]
		if ph.Name != want.name || ph.CapacityPerSecond != want.capacity || ph.PerSecond != want.per || ph.VsCapacity != want.vs ||
			ph.Refused != want.refused || ph.Limit != want.limit || ph.FromS != float64(4*i) || ph.ToS != float64(4*i+4) {
			t.Errorf("phase %d: %+v, want %+v", i, ph, want)
		}
		if l := f.Phases[0]; i == 0 && (l.InFlight != 9 || l.Running != 7 || l.AckPending != 8 || l.Undelivered != 0) {
			t.Errorf("phase 0: medians of in flight %d, running %d, ack pending %d, undelivered %d; want 9, 7, 8, 0", l.InFlight, l.Running, l.AckPending, l.Undelivered)
		}
		if ph.TimePerJob.P50Ms != 20 || ph.TimePerJob.P99Ms != 20 || ph.TimePerJob.MaxMs != 70 {
			t.Errorf("phase %d: time per job %+v", i, ph.TimePerJob)
		}
	}
	// Spans of 1s (a quarter of the phase): full from 2s (bins 4, 5 at 380/s), halved from 2s
	// after the halving, full again at once.
	if want := []float64{2, 2, 0}; !reflect.DeepEqual(f.BackS, want) {
		t.Errorf("back %v, want %v", f.BackS, want)
	}
	if f.WorstP99Ms != 20 || f.TimePerJob.Samples != k || f.TimePerJob.MaxMs != 70 {
		t.Errorf("time per job: worst p99 %v, %+v", f.WorstP99Ms, f.TimePerJob)
	}
	// Both tenants had a job done by the first bin's end; tenant 1 has two in three, its share
	// twice tenant 0's: fair, to the rounding of the thirds.
	if f.JainFromS > 0.01 || f.Jain < 0.9999 || f.RanOut != 0 || f.MinRatio < 0.99 || f.MaxRatio > 1.01 {
		t.Errorf("fairness: Jain %v from %vs (min %v, max %v), ran out %d", f.Jain, f.JainFromS, f.MinRatio, f.MaxRatio, f.RanOut)
	}
	if !reflect.DeepEqual(f.Limits, r.limits) {
		t.Errorf("limits %v", f.Limits)
	}

	// Every job to tenant 0: Jain of done/share (x, 0) is 1/2, and a tenant never served puts
	// the window at the start; tenant 0 had its backlog of 3000 done.
	for i := range r.calls {
		r.calls[i].tenant = 0
	}
	r.jobs[0] = 3000
	f = DownstreamFigures(r)
	if f.Jain != 0.5 || f.JainFromS != 0 || f.RanOut != 1 || f.MinRatio != 0 || f.MaxRatio != 2 {
		t.Errorf("one tenant served: Jain %v from %v, ran out %d, min %v max %v", f.Jain, f.JainFromS, f.RanOut, f.MinRatio, f.MaxRatio)
	}
	// Never back: the halved phase below 70 % throughout.
	for i := range r.calls {
		if c := r.calls[i]; c.end >= 6*time.Second && c.end < 8*time.Second {
			r.calls[i].refused = true
		}
	}
	if f = DownstreamFigures(r); f.BackS[1] != -1 || f.Phases[1].PerSecond != 0 {
		t.Errorf("a halved phase that never came back: back %v, %+v", f.BackS, f.Phases[1])
	}
	if f := DownstreamFigures(downstreamRun{}); f.Jain != 0 || f.Phases != nil {
		t.Errorf("no run: %+v", f)
	}
}

func TestDownstreamSettings(t *testing.T) {
	t.Parallel()
	if got := dsSpan(20 * time.Second); got != 5*time.Second {
		t.Errorf("span of 20s phases %v", got)
	}
	if got := dsSpan(6 * time.Second); got != 1500*time.Millisecond {
		t.Errorf("span of 6s phases %v", got)
	}
	if got := dsSpan(time.Second); got != dsBin {
		t.Errorf("span of 1s phases %v", got)
	}
	// 200 tenants of shares 1, 2, 4 in turn: 465 shares; 2 × 400/s × 60s / 465 = 103.2.
	shares := make([]int64, 200)
	for i := range shares {
		shares[i] = poolShares[i%3]
	}
	if got := dsJobsPerShare(shares, 20*time.Second); got != 109 {
		t.Errorf("jobs per share %d, want 109", got)
	}
	if p := dsPhases(time.Second); p[1].capacity() != 200 || p[0].capacity() != 400 || p[2].from != 2*time.Second || p[1].refuse != 8 {
		t.Errorf("phases %+v", p)
	}
	want := "pools:\n  api: {concurrency: 64}\nplans:\n" +
		"  share1: {pool: api, share: 1, limits: [{capacity: 1000000, rate: 1000000/s}]}\n" +
		"  share2: {pool: api, share: 2, limits: [{capacity: 1000000, rate: 1000000/s}]}\n" +
		"tenants:\n  a: share2\n  b: share1\n"
	if got := dsPlansFile("{concurrency: 64}", []string{"a", "b"}, []int64{2, 1}); got != want {
		t.Errorf("plans file:\n%s\nwant\n%s", got, want)
	}
	if got := limitTrace([]LimitSample{{AtS: 0, Limit: 2}, {AtS: 0.5, Limit: 3}, {AtS: 1.2, Limit: 4}, {AtS: 3.1, Limit: 9}}); got != "2 4 9" {
		t.Errorf("limit trace %q", got)
	}
	if got := perSecondTrace([]int{1, 2, 3, 4, 5}, dsBin); got != "3 7 5" {
		t.Errorf("per second %q", got)
	}
}
