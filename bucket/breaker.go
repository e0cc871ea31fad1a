package bucket

import (
	"fmt"
	"time"
)

// A Breaker stops a pool's forwards while its downstream fails (plans file: a pool's breaker:).
// When, over the last Window, at least MinJobs of the pool's jobs came back and Failures percent
// or more of them failed or were overloaded (their done messages' Admit-Outcome), the pool opens:
// it grants nothing for Cooldown; then it is half-open: it lets Probes jobs through, and closes
// when that many come back ok, or opens again at the first that does not. Probes whose outcomes
// do not come within a Cooldown are taken for lost: Probes more go. A job delivered again (a
// start taking its slots again) counts as a forward: none while open, as a probe while
// half-open.
//
// The window is counted in two halves of Window each (the current and the previous, weighted
// by how much of it the window still covers): the count of a sliding window without a log.
// The breaker's state lives with the pool's (lua/pool.lua), shared by every replica.
type Breaker struct {
	// Failures is the share of failed or overloaded outcomes, in percent (1 to 100), at which
	// the pool opens.
	Failures int64
	// Window is how far back the outcomes count; Cooldown how long the pool stays open.
	Window, Cooldown time.Duration
	// Probes is how many jobs a half-open pool lets through (default 1, at most 1000).
	Probes int64
	// MinJobs is the fewest outcomes over Window that can open the pool (default 10).
	MinJobs int64
}

// Breaker states (PoolState.Breaker).
const (
	BreakerClosed   = 0
	BreakerOpen     = 1
	BreakerHalfOpen = 2
)

// Defaults of a Breaker.
const (
	defaultProbes  = 1
	defaultMinJobs = 10
	maxProbes      = 1000
)

// BreakerName is a breaker state in words: closed, open, half-open.
func BreakerName(state int64) string {
	switch state {
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half-open"
	}
	return "closed"
}

// check validates a breaker, defaults filled in; field names the plans file's.
func (b *Breaker) check() (field string, err error) {
	switch {
	case b.Failures < 1 || b.Failures > 100:
		return "breaker.failures", fmt.Errorf("must be 1%% to 100%%, got %d%%", b.Failures)
	case b.Window < time.Millisecond || b.Window%time.Microsecond != 0 || b.Window > MaxWindow:
		return "breaker.window", fmt.Errorf("must be a whole number of microseconds from 1ms to 100 years, got %v", b.Window)
	case b.Cooldown < time.Millisecond || b.Cooldown%time.Microsecond != 0 || b.Cooldown > MaxWindow:
		return "breaker.cooldown", fmt.Errorf("must be a whole number of microseconds from 1ms to 100 years, got %v", b.Cooldown)
	case b.Probes < 1 || b.Probes > maxProbes:
		return "breaker.probes", fmt.Errorf("must be 1 to %d, got %d", maxProbes, b.Probes)
	case b.MinJobs < 1 || b.MinJobs > 1_000_000:
		return "breaker.min_jobs", fmt.Errorf("must be 1 to 1000000, got %d", b.MinJobs)
	}
	return "", nil
}

// rule is the breaker in words.
func (b *Breaker) rule() string {
	return fmt.Sprintf("breaker at %d%% failed of %d or more in %v, cool-down %v, %d probes", b.Failures, b.MinJobs, b.Window, b.Cooldown, b.Probes)
}

// args are the breaker's arguments of lua/pool.lua: failures (0: no breaker), window, cool-down
// (µs), probes, fewest jobs.
func (b *Breaker) args() []int64 {
	if b == nil {
		return []int64{0, 0, 0, 0, 0}
	}
	return []int64{b.Failures, b.Window.Microseconds(), b.Cooldown.Microseconds(), b.Probes, b.MinJobs}
}

// breakerState is a pool's breaker: lua/pool.lua's breaker_* functions, step by step.
type breakerState struct {
	state, until   int64 // closed, open (until: its end) or half-open (until: when probes out are taken for lost)
	probes, probed int64 // half-open: jobs let through, and come back ok
	// the window: the current half's start, its outcomes and bad ones, the previous half's
	bw, bn, bb, pn, pb int64
	since              int64 // when it last changed state (µs; 0: never)
}

// tick moves the breaker at now: an open one whose cool-down is over is half-open; a half-open
// one whose probes did not come back within a cool-down lets as many again through.
func (s *breakerState) tick(now int64, b *Breaker) {
	if b == nil {
		s.state = BreakerClosed
		return
	}
	cool := b.Cooldown.Microseconds()
	if s.state == BreakerOpen && now >= s.until {
		s.state, s.until, s.probes, s.probed, s.since = BreakerHalfOpen, now+cool, 0, 0, now
	}
	if s.state == BreakerHalfOpen && now >= s.until && s.probes >= b.Probes {
		s.until, s.probes, s.probed = now+cool, 0, 0
	}
}

// report counts an outcome at now (bad: failed or overloaded), opening or closing the breaker.
func (s *breakerState) report(now int64, bad bool, b *Breaker) {
	if b == nil {
		return
	}
	win, cool := b.Window.Microseconds(), b.Cooldown.Microseconds()
	switch s.state {
	case BreakerClosed:
		if cur := now - now%win; cur != s.bw {
			if cur == s.bw+win {
				s.pn, s.pb = s.bn, s.bb
			} else {
				s.pn, s.pb = 0, 0
			}
			s.bn, s.bb, s.bw = 0, 0, cur
		}
		s.bn++
		if bad {
			s.bb++
			f := float64(win-(now-s.bw)) / float64(win)
			tot, nbad := float64(s.pn)*f+float64(s.bn), float64(s.pb)*f+float64(s.bb)
			if tot >= float64(b.MinJobs) && nbad*100 >= float64(b.Failures)*tot {
				s.state, s.until, s.probes, s.probed, s.since = BreakerOpen, now+cool, 0, 0, now
			}
		}
	case BreakerHalfOpen:
		if bad {
			s.state, s.until, s.probes, s.probed, s.since = BreakerOpen, now+cool, 0, 0, now
			return
		}
		s.probed++
		if s.probed >= b.Probes {
			*s = breakerState{since: now}
		}
	}
}

// admits reports whether the breaker lets one more job through now (counting it as a probe
// when half-open).
func (s *breakerState) admits(b *Breaker) bool {
	switch {
	case b == nil || s.state == BreakerClosed:
		return true
	case s.state == BreakerHalfOpen && s.probes < b.Probes:
		s.probes++
		return true
	}
	return false
}

// wait is how long a job the breaker held back waits before it asks again (µs): the rest of
// the cool-down, or while half-open, until its probes come back (at most reask).
func (s *breakerState) wait(now, reask int64) int64 {
	if s.state == BreakerOpen {
		return max(s.until-now, 1)
	}
	return min(reask, max(s.until-now, 1))
}
