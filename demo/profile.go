package demo

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/admitter/admitter/bucket"
)

// A Profile is how a tenant publishes, relative to its plan's rate and capacity (those of the
// plan's binding limit, see [Binding]). Rates are in tokens per second: a job of weight 3 counts
// three times.
type Profile int

const (
	// Burst publishes at 10× the plan's rate for the whole run: its bucket is always empty and a
	// backlog grows.
	Burst Profile = iota
	// Steady publishes at 70% of the plan's rate: it should never be throttled.
	Steady
	// IdleThenBurst publishes nothing for the first third of the run, then a burst of 3× the
	// plan's capacity at once, then at the plan's rate: the burst's first capacity passes at
	// once, the rest waits, and the backlog neither grows nor drains.
	IdleThenBurst
)

// Profile parameters.
const (
	burstFactor  = 10
	steadyFactor = 0.7
	idleFraction = 3 // IdleThenBurst is idle for duration / idleFraction
	burstOfCaps  = 3
)

func (p Profile) String() string {
	switch p {
	case Burst:
		return "burst 10×"
	case Steady:
		return "steady 70%"
	case IdleThenBurst:
		return "idle, burst 3×cap"
	}
	return "profile(" + strconv.Itoa(int(p)) + ")"
}

// MarshalText names the profile in JSON.
func (p Profile) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// valid reports whether p is one of the profiles.
func (p Profile) valid() bool { return p >= Burst && p <= IdleThenBurst }

// demand is the cumulative number of tokens the profile has published elapsed into a run of
// duration, for a plan refilling rate tokens/s with the given capacity.
func (p Profile) demand(elapsed, duration time.Duration, rate float64, capacity int64) float64 {
	t := elapsed.Seconds()
	if t <= 0 {
		return 0
	}
	switch p {
	case Burst:
		return burstFactor * rate * t
	case Steady:
		return steadyFactor * rate * t
	case IdleThenBurst:
		idle := duration.Seconds() / idleFraction
		if t < idle {
			return 0
		}
		return burstOfCaps*float64(capacity) + rate*(t-idle)
	}
	return 0
}

// Binding returns the index of the limit of plan that allows the fewest tokens over a window of
// length window starting from full buckets, capacity + rate × window: the limit that binds a
// tenant kept busy for that long. For a plan with one limit it is that limit; for a burst limit
// beside a daily quota it is the burst limit unless the window is long.
func Binding(plan *bucket.Plan, window time.Duration) int {
	best, bi := math.Inf(1), 0
	for i, l := range plan.Limits {
		if a := limitAllowance(l, window); a < best {
			best, bi = a, i
		}
	}
	return bi
}

// Allowance is the most tokens plan can admit over a window of length window starting from full
// buckets: the smallest capacity + rate × window over its limits.
func Allowance(plan *bucket.Plan, window time.Duration) float64 {
	return limitAllowance(plan.Limits[Binding(plan, window)], window)
}

func limitAllowance(l bucket.Limit, window time.Duration) float64 {
	return float64(l.Capacity) + l.PerSecond()*max(window, 0).Seconds()
}

// limitLabel names limit i of plan: its name, else its index.
func limitLabel(plan *bucket.Plan, i int) string {
	if n := plan.Limits[i].Name; n != "" {
		return n
	}
	return "limit " + strconv.Itoa(i)
}

// formatRate formats tokens per second without trailing zeros: 5, 11.57, 0.33.
func formatRate(r float64) string {
	return strconv.FormatFloat(math.Round(r*100)/100, 'f', -1, 64)
}

// formatDuration formats a wait for a table cell: 0ms, 850ms, 4.2s, 1m05s.
func formatDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "-"
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < time.Minute:
		return strconv.FormatFloat(math.Floor(d.Seconds()*10)/10, 'f', 1, 64) + "s"
	}
	m := int(d / time.Minute)
	s := int((d % time.Minute) / time.Second)
	return fmt.Sprintf("%dm%02ds", m, s)
}
