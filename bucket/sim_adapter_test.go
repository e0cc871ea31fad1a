package bucket

import (
	"context"
	"math"
	"time"

	"github.com/redis/rueidis"
)

// The simulation's adapter: the one file that knows how the Fallback is built. The rest of the
// simulation (sim_*_test.go: the schedule, the replicas' queues and workers, the faults, the
// checker, replay) speaks only of a simLimiter, a Router and a *Redis; re-targeting the
// simulation at another fallback is rewriting this file.
//
// What the simulation needs of a fallback, and nothing more:
//   - the verbs of a Limiter (Admit, Decide, Release, Renew, Start), deciding on Redis while it
//     answers and on the replica's copy while it does not;
//   - Serve, the answer to a question another replica routed here (Router.Ask calls it);
//   - Local, whether the replica decides on its copy now;
//   - Recover, one probe of an outage as the fallback's own loop makes it every probeEvery (ask
//     Redis, charge it with what the copy decided, decide on Redis again), stepped by the
//     simulation in virtual time instead of on a timer;
//   - Tick, the simulated time moving on (what the fallback times after an outage);
//   - Close.
//
// And of the Redis backend: deciding at the simulated time (pin), and being told that Redis lost
// its state at a moment (born), as every replica learns it from the servers' markers in
// production.

// simLimiter is a replica's limiter as the simulation drives it (see above).
type simLimiter interface {
	Limiter
	Serve(ctx context.Context, req []byte) []byte
	Local() bool
	Recover(ctx context.Context) bool
	Tick(now time.Time)
	Close()
}

// newSimRedis is a replica's Redis backend over client, its keys under prefix, deciding at
// clock's time.
func newSimRedis(client rueidis.Client, prefix string, o Options, clock func() time.Time) *Redis {
	r := NewRedis(client, prefix, o)
	r.pin(clock)
	return r
}

// simRedisForgot tells r that the servers lost admitter's state at at: every limit without state
// is taken as used then (what a replica adopts from the servers' markers; a pinned clock does not
// check them).
func simRedisForgot(r *Redis, at time.Time) { r.born.at.Store(at.UnixMicro()) }

// simFallback is today's Fallback behind simLimiter.
type simFallback struct {
	*Fallback
	clock func() time.Time
	// settleUntil is the simulated end of the settling after the last outage (see settleFor);
	// the Fallback's own is on this host's clock, which the simulation does not move.
	settleUntil time.Time
}

// newSimLimiter is a replica's fallback over r (pinned), routing with rt under plans.
func newSimLimiter(r *Redis, o Options, rt Router, plans func() *Plans) simLimiter {
	f := NewFallback(r, o, time.Second, FallbackHooks{})
	// The probing loop goDown starts waits on a timer that never fires: the simulation steps
	// it (Recover), and its router's Back does not call Probe.
	f.probe = time.Duration(math.MaxInt64)
	f.Route(rt, plans)
	return &simFallback{Fallback: f, clock: r.clock}
}

// Recover does what (*Fallback).recover does at each tick of its timer, once.
func (s *simFallback) Recover(ctx context.Context) bool {
	f := s.Fallback
	if f.mode.Load() != fallbackDown {
		return false
	}
	f.mu.RLock()
	o := f.out
	f.mu.RUnlock()
	if o == nil || f.redis.Ping(ctx) != nil || f.redis.refreshBorn(ctx) != nil {
		return false
	}
	if !f.merge(o) {
		return false
	}
	// merge started the settling on this host's clock: keep it on the simulated one.
	s.settleUntil = s.clock().Add(settleFor)
	f.settled.Store(math.MaxInt64)
	return true
}

// Tick ends the settling after an outage once the simulated time reaches it.
func (s *simFallback) Tick(now time.Time) {
	if !s.settleUntil.IsZero() && !now.Before(s.settleUntil) {
		s.settleUntil = time.Time{}
		s.Fallback.settled.Store(0)
	}
}
