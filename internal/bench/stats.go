package bench

import (
	"math"
	"slices"
	"time"
)

// Percentile is the nearest-rank p-th percentile (0 < p ≤ 100) of sorted, an ascending slice:
// the smallest sample such that at least p% of the samples are ≤ it. Zero for no samples.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	if p <= 0 {
		return sorted[0]
	}
	rank := int(math.Ceil(p / 100 * float64(n)))
	return sorted[min(max(rank, 1), n)-1]
}

// Latency summarises a set of durations, in milliseconds.
type Latency struct {
	Samples int     `json:"samples"`
	P50Ms   float64 `json:"p50_ms"`
	P99Ms   float64 `json:"p99_ms"`
	MaxMs   float64 `json:"max_ms"`
}

// Summarize sorts samples in place and summarises them.
func Summarize(samples []time.Duration) Latency {
	slices.Sort(samples)
	l := Latency{Samples: len(samples)}
	if len(samples) == 0 {
		return l
	}
	l.P50Ms = ms(Percentile(samples, 50))
	l.P99Ms = ms(Percentile(samples, 99))
	l.MaxMs = ms(samples[len(samples)-1])
	return l
}

// ms is d in milliseconds, rounded to the microsecond.
func ms(d time.Duration) float64 { return round(float64(d)/float64(time.Millisecond), 3) }

// Ratio is a/b, or 0 when b is not positive (JSON has no NaN or infinity).
func Ratio(a, b float64) float64 {
	if b <= 0 || math.IsNaN(a) || math.IsNaN(b) || math.IsInf(a, 0) || math.IsInf(b, 0) {
		return 0
	}
	return a / b
}

// PerSecond is n events over d, or 0 when d is not positive.
func PerSecond(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// ErrorPct is the relative error of got against want, in percent (0 when want is 0).
func ErrorPct(got, want float64) float64 { return 100 * Ratio(got-want, want) }

// round rounds v to digits decimal places.
func round(v float64, digits int) float64 {
	f := math.Pow10(digits)
	return math.Round(v*f) / f
}

// mean is the arithmetic mean of vs, 0 for none.
func mean(vs []int64) float64 {
	if len(vs) == 0 {
		return 0
	}
	var s float64
	for _, v := range vs {
		s += float64(v)
	}
	return s / float64(len(vs))
}
