package bucket

import (
	"fmt"
	"math"

	"github.com/admitter/admitter/lua"
)

// Adaptive makes a pool's Concurrency its ceiling (plans file: a pool's adaptive: {min: 2}):
// the limit in force moves between Min and the ceiling after the workers' time per job (from a
// job's forward to its done message) and the jobs that come back overloaded. What the limit in
// force frees is shared by the pool's fair rule as before.
//
// The controller, chosen by simulation against issue 31's downstream (docs/design.md, section 6,
// "Adaptive pools"), is a gradient on the lines of Netflix's Gradient2 and Envoy's adaptive
// concurrency, against a measured floor:
//
//   - the outcomes of a window (at least adaptWindow and two floors long, and adaptSamples
//     outcomes) are averaged: avg, the time per job, and the share that came back overloaded;
//   - with any overloaded, the limit halves; otherwise it becomes limit × g + max(1, 5 % of the
//     limit), g = clamp(1.1 × floor / avg, 0.5, 1): it grows while the time per job stays within
//     10 % of the floor and shrinks in proportion when it grows;
//   - the floor is the average time per job of a window run wholly at Min: the first window
//     (the limit starts at Min), one every adaptProbeEvery (the limit is held at Min for two
//     windows: one drains, one measures), and whenever the controller itself brought the limit
//     down to Min (the downstream got slower); a window faster than the floor lowers it.
//
// The state lives with the pool's (lua/pool.lua, fields a*), shared by every replica, and is
// computed where outcomes are reported: each release of a pooled lease.
type Adaptive struct {
	// Min is the lowest limit in force: 1 to the pool's Concurrency.
	Min int64
}

// The controller's constants, shared with lua/pool.lua (lua.go generates them into the script).
const (
	adaptWindow     = lua.AdaptWindow     // µs: the shortest window
	adaptSamples    = lua.AdaptSamples    // the fewest outcomes a window closes with
	adaptProbeEvery = lua.AdaptProbeEvery // µs between two measures of the floor
	adaptTolerance  = lua.AdaptTolerance  // percent: the time per job within which the limit grows
	adaptGrow       = lua.AdaptGrow       // percent of the limit it grows by (at least 1)
	adaptDecrease   = lua.AdaptDecrease   // percent of the limit kept after an overloaded window
)

// Why the limit in force last moved (PoolState.LimitWhy).
const (
	LimitStarting   = 0 // not measured yet: the floor is being measured at Min
	LimitGrew       = 1 // the time per job stayed near the floor
	LimitShrank     = 2 // the time per job grew above the floor
	LimitOverloaded = 3 // jobs came back overloaded
	LimitMeasuring  = 4 // the floor is being measured again: the limit is held at Min
)

// LimitWhyText is why the limit in force last moved, in words.
func LimitWhyText(why int64) string {
	switch why {
	case LimitGrew:
		return "growing: the time per job stays near its floor"
	case LimitShrank:
		return "shrinking: the time per job grew above its floor"
	case LimitOverloaded:
		return "halved: jobs came back overloaded"
	case LimitMeasuring:
		return "measuring the floor: held at the minimum"
	}
	return "starting: measuring the floor at the minimum"
}

// check validates the adaptive settings of a pool of concurrency ceiling.
func (a *Adaptive) check(ceiling int64) error {
	if a.Min < 1 || a.Min > ceiling {
		return fmt.Errorf("min must be 1 to the pool's concurrency %d, got %d", ceiling, a.Min)
	}
	return nil
}

// adaptState is a pool's controller: lua/pool.lua's adapt_* functions, step by step.
type adaptState struct {
	limit               float64 // the limit (0: not set: Min)
	floor               int64   // µs; 0: not measured yet
	start, n, sum, over int64   // the window: its first outcome's time, outcomes, their times (µs), overloaded
	probe, nextProbe    int64   // windows still held at Min, and when the next measure of the floor is due
	atMin               bool    // the last window closed with the limit in force at Min
	last, why           int64   // the last window's time per job (µs), and why the limit last moved
}

// inForce is the limit in force for a pool of concurrency ceiling: Concurrency when a is nil.
func (s *adaptState) inForce(a *Adaptive, ceiling int64) int64 {
	if a == nil {
		return ceiling
	}
	if s.probe > 0 || s.floor == 0 {
		return a.Min
	}
	return min(max(a.Min, int64(math.Floor(s.limit))), ceiling)
}

// report counts a job's time downstream (rtt, µs) and whether it came back overloaded, at now;
// a window that closes moves the limit.
func (s *adaptState) report(now, rtt int64, overloaded bool, a *Adaptive, ceiling int64) {
	if a == nil {
		return
	}
	if s.n == 0 {
		s.start = now
	}
	s.n++
	s.sum += rtt
	if overloaded {
		s.over++
	}
	if now-s.start < max(adaptWindow, 2*s.floor) || s.n < adaptSamples {
		return
	}
	lo := float64(a.Min)
	if s.limit < lo {
		s.limit = lo
	}
	avg := float64(s.sum) / float64(s.n)
	atMin := s.inForce(a, ceiling) == a.Min
	switch {
	case atMin && (s.atMin || s.floor == 0) && s.over == 0: // a window wholly at Min: the floor
		s.floor, s.nextProbe = int64(math.Floor(avg)), now+adaptProbeEvery
	case s.over == 0 && int64(math.Floor(avg)) < s.floor: // faster than the floor: so is the floor
		s.floor = int64(math.Floor(avg))
	}
	s.atMin = atMin
	switch {
	case s.floor == 0:
		s.why = LimitStarting
	case s.probe > 0:
		s.probe--
		s.why = LimitMeasuring
	case now >= s.nextProbe:
		s.probe, s.nextProbe, s.why = 2, now+adaptProbeEvery, LimitMeasuring
	case s.over > 0:
		s.limit = s.limit * adaptDecrease / 100
		s.why = LimitOverloaded
	default:
		g := min(max(adaptTolerance*float64(s.floor)/100/avg, 0.5), 1)
		next := s.limit*g + max(1, s.limit*adaptGrow/100)
		s.why = LimitGrew
		if next < s.limit {
			s.why = LimitShrank
		}
		s.limit = next
	}
	s.limit = min(max(s.limit, lo), float64(ceiling))
	s.last = int64(math.Floor(avg))
	s.n, s.sum, s.over = 0, 0, 0
}

// adaptiveArgs are the adaptive arguments of lua/pool.lua: min (0: not adaptive).
func (a *Adaptive) args() []int64 {
	if a == nil {
		return []int64{0}
	}
	return []int64{a.Min}
}

// adaptRule is the adaptive settings in words.
func (a *Adaptive) rule() string {
	return fmt.Sprintf("adaptive from %d", a.Min)
}
