package bench

import (
	"math"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Millisecond // 1ms … 100ms
	}
	for _, c := range []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one p50", []time.Duration{7}, 50, 7},
		{"one p99", []time.Duration{7}, 99, 7},
		{"p50 of 100", hundred, 50, 50 * time.Millisecond},
		{"p99 of 100", hundred, 99, 99 * time.Millisecond},
		{"p100 of 100", hundred, 100, 100 * time.Millisecond},
		{"p1 of 100", hundred, 1, time.Millisecond},
		{"p0 is the minimum", hundred, 0, time.Millisecond},
		{"p50 of 2 is the lower", []time.Duration{1, 2}, 50, 1},
		{"p51 of 2 is the upper", []time.Duration{1, 2}, 51, 2},
		{"p99 of 10 is the max", []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 99, 10},
		{"p90 of 10", []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 90, 9},
	} {
		if got := Percentile(c.sorted, c.p); got != c.want {
			t.Errorf("%s: Percentile(p%g) = %v, want %v", c.name, c.p, got, c.want)
		}
	}
}

func TestSummarize(t *testing.T) {
	var s []time.Duration
	for i := 1000; i >= 1; i-- { // unsorted on purpose
		s = append(s, time.Duration(i)*time.Microsecond)
	}
	l := Summarize(s)
	want := Latency{Samples: 1000, P50Ms: 0.5, P99Ms: 0.99, MaxMs: 1}
	if l != want {
		t.Errorf("Summarize = %+v, want %+v", l, want)
	}
	if l := Summarize(nil); l != (Latency{}) {
		t.Errorf("Summarize(nil) = %+v, want zero", l)
	}
	if l := Summarize([]time.Duration{1234567 * time.Nanosecond}); l.P50Ms != 1.235 || l.P99Ms != 1.235 || l.MaxMs != 1.235 {
		t.Errorf("one sample: %+v, want every figure 1.235 (rounded to the µs)", l)
	}
}

func TestRatio(t *testing.T) {
	for _, c := range []struct{ a, b, want float64 }{
		{10, 5, 2},
		{5, 10, 0.5},
		{0, 10, 0},
		{10, 0, 0},
		{10, -1, 0},
		{math.NaN(), 1, 0},
		{1, math.Inf(1), 0},
		{-3, 2, -1.5},
	} {
		if got := Ratio(c.a, c.b); got != c.want {
			t.Errorf("Ratio(%g, %g) = %g, want %g", c.a, c.b, got, c.want)
		}
	}
}

func TestErrorPctAndPerSecond(t *testing.T) {
	for _, c := range []struct{ got, want, pct float64 }{
		{102, 100, 2},
		{98, 100, -2},
		{100, 100, 0},
		{5, 0, 0},
		{0, 500, -100},
	} {
		if p := ErrorPct(c.got, c.want); math.Abs(p-c.pct) > 1e-9 {
			t.Errorf("ErrorPct(%g, %g) = %g, want %g", c.got, c.want, p, c.pct)
		}
	}
	if r := PerSecond(500, 2*time.Second); r != 250 {
		t.Errorf("PerSecond(500, 2s) = %g, want 250", r)
	}
	if r := PerSecond(500, 0); r != 0 {
		t.Errorf("PerSecond(500, 0) = %g, want 0", r)
	}
	if m := mean([]int64{1, 2, 2, 3}); m != 2 {
		t.Errorf("mean = %g, want 2", m)
	}
	if m := mean(nil); m != 0 {
		t.Errorf("mean(nil) = %g, want 0", m)
	}
}

func TestOverloadFigures(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	loadStart, loadEnd, tailEnd := t0, t0.Add(10*time.Second), t0.Add(15*time.Second)
	var jobs []forwarded
	// 100 at once 10ms after the start, then one every 10ms (100/s), delivered twice each.
	first := t0.Add(10 * time.Millisecond)
	for range 100 {
		jobs = append(jobs, forwarded{at: first, attempts: 1})
	}
	for i := 1; ; i++ {
		at := first.Add(time.Duration(i) * 10 * time.Millisecond)
		if at.After(t0.Add(16 * time.Second)) {
			break
		}
		jobs = append(jobs, forwarded{at: at, attempts: 2, delay: time.Duration(i) * time.Millisecond})
	}
	o := OverloadFigures(jobs, 100, 100, loadStart, loadEnd, tailEnd)
	// by loadEnd: 100 + floor(9.99s × 100/s) = 1099; expected 100 + 100 × 9.99 = 1099
	if o.AdmittedAtEnd != 1099 {
		t.Errorf("admitted at load end = %d, want 1099", o.AdmittedAtEnd)
	}
	if o.Expected != 1099 || o.SinceFirstS != 9.99 || o.FirstAdmissionS != 0.01 {
		t.Errorf("expected %g over t=%gs (first at %gs), want 1099 over 9.99s (first at 0.01s)", o.Expected, o.SinceFirstS, o.FirstAdmissionS)
	}
	if o.ErrorPct != 0 {
		t.Errorf("error = %g%%, want 0", o.ErrorPct)
	}
	if o.AdmittedTotal != 1599 || o.TailPerSecond != 100 { // jobs after tailEnd are left out
		t.Errorf("total %d, tail %g/s; want 1599 and 100/s", o.AdmittedTotal, o.TailPerSecond)
	}
	if o.AttemptsMax != 2 || math.Abs(o.AttemptsMean-(100+2*1499)/1599.0) > 1e-4 {
		t.Errorf("attempts mean %g max %d", o.AttemptsMean, o.AttemptsMax)
	}
	if o.DelayMs.Samples != 1599 || o.DelayMs.P50Ms > o.DelayMs.P99Ms || o.DelayMs.P99Ms > o.DelayMs.MaxMs {
		t.Errorf("delays %+v", o.DelayMs)
	}
	if o.WorstLagJobs > 1 || o.WorstAheadJobs > 1 {
		t.Errorf("even pacing: worst lag %g, worst ahead %g; want ≤ 1 job", o.WorstLagJobs, o.WorstAheadJobs)
	}
	if len(o.AdmittedPerSecond) != 15 || o.AdmittedPerSecond[0] != 199 || o.AdmittedPerSecond[5] != 100 || o.AdmittedPerSecond[14] != 100 {
		t.Errorf("admitted per second: %v", o.AdmittedPerSecond)
	}
	if z := OverloadFigures(nil, 100, 100, loadStart, loadEnd, tailEnd); z.AdmittedTotal != 0 || z.Expected != 0 || z.ErrorPct != 0 {
		t.Errorf("no jobs: %+v", z)
	}

	// A stall made up by a burst: right at the end of the window, wrong all along.
	var stalled []forwarded
	for range 100 {
		stalled = append(stalled, forwarded{at: first, attempts: 1})
	}
	for range 999 {
		stalled = append(stalled, forwarded{at: t0.Add(9 * time.Second), attempts: 2})
	}
	s := OverloadFigures(stalled, 100, 100, loadStart, loadEnd, tailEnd)
	if s.ErrorPct != 0 || s.WorstLagJobs < 890 || s.WorstLagJobs > 900 || s.WorstLagAtS < 8.9 || s.WorstLagAtS > 9 {
		t.Errorf("stall: error %g%%, worst lag %g jobs at %gs; want 0%%, about 899 jobs just before 9s", s.ErrorPct, s.WorstLagJobs, s.WorstLagAtS)
	}
	if s.WorstAheadJobs < 99 || s.WorstAheadJobs > 100 {
		t.Errorf("stall: worst ahead %g, want 99.9 (the burst overshoots the plan by a fraction of a second's worth)", s.WorstAheadJobs)
	}
}
