//go:build sim

package bucket

import (
	"context"
	"time"

	"github.com/redis/rueidis"
)

// The simulation's adapter: the one file that knows how the Fallback is built and what it asks of
// the replicas around it (Router). The rest of the simulation (sim_*_test.go: the schedule, the
// replicas' queues and workers, the faults, the checker, replay) speaks only of a simLimiter, a
// *Redis and the world's routing table (world.route, world.reaches, world.relayTo); re-targeting the simulation
// at another fallback is rewriting this file.
//
// What the simulation needs of a fallback, and nothing more:
//   - the verbs of a Limiter (Admit, Decide, Release, Renew, Start), deciding on Redis while it
//     answers and on the replica's copy while it does not;
//   - Serve, the answer to a question another replica routed or relayed here (the Router's Ask
//     and Relay call it);
//   - Local, whether the replica decides on its copy now;
//   - Recover, one probe of an outage as the fallback's own watcher makes it every probeEvery
//     (ask Redis, charge it with what the copy decided, decide on Redis again), stepped by the
//     simulation in virtual time instead of on a timer (the Fallback is not Watched);
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
	// Recover reports whether it ended the outage under way (Redis charged, deciding again).
	Recover(ctx context.Context) bool
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

// simFallback is the Fallback behind simLimiter. Its copy's clock, and so its settling after an
// outage, is the simulated one (r's, pinned).
type simFallback struct{ *Fallback }

// newSimLimiter is replica rep's fallback over r (pinned), routing through the world's table under
// plans.
func newSimLimiter(r *Redis, o Options, w *world, rep *simReplica, plans func() *Plans) simLimiter {
	f := NewFallback(r, o, time.Second, FallbackHooks{})
	f.Route(simRouter{w, rep}, plans)
	return simFallback{f}
}

func (s simFallback) Recover(ctx context.Context) bool {
	return s.Local() && s.Fallback.Recover(ctx) == nil
}

// simRouter is a replica's Router over the world's routing table: Ask calls the deciding
// replica's Serve directly, when the world lets the question through.
type simRouter struct {
	w *world
	r *simReplica
}

func (rt simRouter) Since(key string) time.Time {
	rt.w.yield("since")
	if d, since := rt.w.route(key, rt.r); d == rt.r {
		return since
	}
	return time.Time{}
}

func (rt simRouter) Ask(ctx context.Context, key string, req []byte) ([]byte, error) {
	rt.w.yield("ask")
	d, _ := rt.w.route(key, rt.r)
	if !rt.w.reaches(rt.r, d, key) {
		return nil, errNoAnswer
	}
	return d.lim.Serve(ctx, req), nil
}

func (rt simRouter) Back() { rt.w.redisBack() }

func (rt simRouter) Tell(local bool) { rt.w.told(rt.r, local) }

// Relay relays to the first other replica that reaches Redis (it told so) and is reached.
func (rt simRouter) Relay(ctx context.Context, req []byte) ([]byte, error) {
	rt.w.yield("relay")
	d := rt.w.relayTo(rt.r)
	if d == nil {
		return nil, errNoAnswer
	}
	return d.lim.Serve(ctx, req), nil
}
