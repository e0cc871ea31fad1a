//go:build sim

package bucket

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// The world of one seed: replicas of admitter (each a limiter over its own client of one real
// redis-server, an in-process router between them), the partitions they hold, tenants with
// queues of jobs, workers, and a schedule of events in virtual time, all drawn from one PCG
// source seeded by the seed. Nothing sleeps: the clock every limiter reads is set to each
// event's time. See sim_test.go for what it finds.

// simOpts are the limiters' options: the defaults (a hold of 3 s, a redeem window of 2 s).
var simOpts = Options{}

// simWatchdog bounds every limiter call in real time: a call that does not return by then is
// a deadlock (a lock cycle inside testing/synctest would hang too: FIELD-NOTES), and fails the
// seed with every goroutine's stack. simCallTimeout is the call's own deadline.
const (
	simWatchdog    = 3 * time.Second
	simCallTimeout = 2 * time.Second
)

// worldStart is the simulated time at which every world begins.
var worldStart = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// world is one seed's simulation.
type world struct {
	tb    testing.TB
	seed  uint64
	rng   *rand.Rand
	clock *clock
	now   time.Time
	end   time.Time
	seq   int64 // events scheduled, their order among equal times
	queue schedQueue

	prefix string
	raw    rueidis.Client // the server without faults: flushes
	plans  *Plans
	lease  time.Duration // every concurrency limit's and pool's
	pools  []*Pool

	mu    sync.RWMutex // the tables the routers read: parts, reps' states
	reps  []*simReplica
	parts []int // partition → index of the replica holding it, -1: none
	// partSince is since when each partition's holder holds it (its tenure); poolTenure the
	// pools' deciding replicas and theirs, by Router key.
	partSince  []time.Time
	poolTenure map[string]tenure
	tenants    []*simTenant
	byName     map[string]*simTenant
	nextJob    int64

	flights []*flight
	books   map[string]*simBook
	pgcra   map[string]*simGCRA // pools' buckets

	redisAll   redisFault // the fault every replica's Redis has (a replica started finds it)
	lastFlush  time.Time  // the latest time Redis lost its state (zero: never)
	allUpSince time.Time  // since when every live replica decides on Redis
	back       bool       // a replica charged Redis after an outage: the others probe now

	answered    map[string]*simReplica // the replicas that answered the routed questions of the calls under way, by key
	poolTouched map[int]string         // replica → the pool@epoch it last decided on its copy

	swarm simSwarm

	trace    []string // the last events, for a failure
	traceAll bool     // print every event as it happens (-sim.v)
	failure  string
}

// simSwarm is what a world's schedule may do: each seed turns some of it off (swarm testing, as
// FoundationDB's simulation and TigerBeetle's VOPR do), so that a fault frequent in every world
// does not hide the others behind it.
type simSwarm struct {
	requests   bool // synchronous decisions
	partial    bool // faults of some replicas only
	slow       bool // Redis slow (calls that time out run)
	forgets    bool // Redis back empty
	cuts       bool // routed questions unanswered
	membership bool // replicas leaving, joining, killed, paused
	pairs      bool // two calls at once
	idle       bool // idle queues dropped and made again
	deaths     bool // workers that die
	reports    bool // Admit-Cost, outcomes, Retry-After
}

func (s simSwarm) String() string {
	var on []string
	for _, f := range []struct {
		on   bool
		name string
	}{{s.requests, "requests"}, {s.partial, "partial"}, {s.slow, "slow"}, {s.forgets, "forgets"}, {s.cuts, "cuts"},
		{s.membership, "membership"}, {s.pairs, "pairs"}, {s.idle, "idle"}, {s.deaths, "deaths"}, {s.reports, "reports"}} {
		if f.on {
			on = append(on, f.name)
		}
	}
	return strings.Join(on, " ")
}

// simReplica is one replica of admitter.
type simReplica struct {
	w      *world
	i      int
	name   string
	owner  int64
	client *faultClient
	redis  *Redis
	lim    simLimiter
	state  replicaState
	// gone: the others no longer count it live (a death or a pause they noticed).
	gone bool
	// local, since: the limiter decides on its copy, since when (the switch); epoch counts
	// the switches.
	local bool
	since time.Time
	epoch int
	// stale: the tenants whose queues it ran when its pause was noticed (it acts on them late).
	stale []*simTenant
	cut   bool // its routed questions get no answer (a partition between replicas)
	// onCopy: its limiter told the others it decides on its copy (Router.Tell): it is not
	// relayed to.
	onCopy bool
}

type replicaState uint8

const (
	replicaLive replicaState = iota
	replicaPaused
	replicaDead
)

// simTenant is a tenant: its plan, its partition, and its queue in the input.
type simTenant struct {
	name  string
	plan  *Plan
	part  int
	queue []Job // waiting in the input, in order
	// queueOn is the replica whose queue of this tenant runs (-1: none, idle or never made);
	// fresh: that queue has had no answer yet.
	queueOn int
	fresh   bool
	stepAt  time.Time // its next step is scheduled then (zero: none)
	stepGen int       // the steps scheduled: only the latest is made
	// steppedAt, steps: the steps made at one instant (a loop of wakes fails the seed).
	steppedAt time.Time
	steps     int
	poolBound bool      // its head waits for its pool (a pool's wake is for it)
	idleAt    time.Time // its queue went empty then
	// The checker's bookkeeping of the copies: mirrored[r] is when replica r's queue last had
	// its state mirrored (an answer from Redis), mirroredIn[r] in which of r's tenures of the
	// partition (its start); touched[r] the epoch of r's outage in which r last decided it on
	// its copy. A copy is exact in the tenure it was mirrored in (Router.Since).
	mirrored   map[int]time.Time
	mirroredIn map[int]time.Time
	touched    map[int]int
	requests   []simTake // requests allowed on Redis lately (for whyUnseen)
	stallFrom  time.Time // Redis has held its queue on a concurrency limit with room, since then
}

// flight is a job let through: a forward, or a request allowed under a concurrency limit.
type flight struct {
	id      int64
	tenant  *simTenant
	weight  int64
	at      time.Time // admitted
	end     time.Time // its lease ends then, as its reports leave it
	capAt   time.Time // a loss's slots end then unless it reports (zero: none)
	done    bool      // its done message was answered: no longer in flight
	freed   bool      // ...and the limiter found its lease (or it ended): not held anywhere
	request bool      // a request's lease (id 0: only ends)
	unseen  bool      // a request no copy saw: not counted by the copy deciding (whyUnseen)
	pooled  bool
	dead    bool // its worker died
}

func (f *flight) counts(now time.Time) bool {
	return !f.done && !f.unseen && now.Before(f.end) && (f.capAt.IsZero() || now.Before(f.capAt))
}

// schedEvent is one event of the schedule.
type schedEvent struct {
	at   time.Time
	seq  int64
	name string
	fn   func()
}

type schedQueue []*schedEvent

func (q schedQueue) Len() int { return len(q) }
func (q schedQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q schedQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *schedQueue) Push(x any)   { *q = append(*q, x.(*schedEvent)) }
func (q *schedQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// at schedules fn d from now.
func (w *world) at(d time.Duration, name string, fn func()) {
	w.seq++
	// Whole microseconds: the limiters' clock (a lease that ends at t is not held at t).
	heap.Push(&w.queue, &schedEvent{at: w.now.Add(max(d, 0)).Truncate(time.Microsecond), seq: w.seq, name: name, fn: fn})
}

// logf records an event in the trace.
func (w *world) logf(format string, args ...any) {
	line := fmt.Sprintf("%9s  ", "+"+w.now.Sub(worldStart).Truncate(time.Millisecond).String()) + fmt.Sprintf(format, args...)
	if w.traceAll {
		w.tb.Log(line)
	}
	w.trace = append(w.trace, line)
	if len(w.trace) > 400 {
		w.trace = slices.Delete(w.trace, 0, 200)
	}
}

// fail records the first violation.
func (w *world) fail(format string, args ...any) {
	if w.failure == "" {
		w.failure = fmt.Sprintf("at +%v: ", w.now.Sub(worldStart)) + fmt.Sprintf(format, args...) + "\n  replicas: " + w.replicas()
		v := fmt.Sprintf(format, args...)
		if i := strings.Index(v, "\ngoroutine "); i >= 0 {
			v = v[:i] // the stacks once, in the failure
		}
		w.logf("VIOLATION: %s", v)
	}
}

// replicas says what each replica is doing now, for a failure.
func (w *world) replicas() string {
	var s []string
	for _, r := range w.reps {
		switch {
		case r.state == replicaDead:
			continue
		case r.state == replicaPaused:
			s = append(s, r.name+" paused")
		case r.local:
			s = append(s, fmt.Sprintf("%s on its copy since +%v (Redis %v)", r.name, r.since.Sub(worldStart), r.client.state()))
		default:
			s = append(s, fmt.Sprintf("%s on Redis (%v)", r.name, r.client.state()))
		}
	}
	return strings.Join(s, "; ")
}

// errNoAnswer is a routed question nobody answered.
var errNoAnswer = errors.New("sim: no replica answered")

// reaches reports whether asker's routed question for key reaches d (recording who answered,
// for the checker): d runs and neither is cut off from the other replicas' questions.
func (w *world) reaches(asker, d *simReplica, key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	ok := d != nil && d != asker && d.state == replicaLive && !d.cut && !asker.cut
	if ok && w.answered != nil {
		w.answered[key] = d
	}
	return ok
}

// relayed is the key under which world.answered records that a call was relayed to another
// replica (decided on Redis there).
const relayed = "relay"

// relayTo is the replica asker's question is relayed to (Router.Relay): the first other live
// replica that reaches Redis (told so) and that asker reaches; nil when none.
func (w *world) relayTo(asker *simReplica) *simReplica {
	w.mu.Lock()
	defer w.mu.Unlock()
	if asker.cut {
		return nil
	}
	for _, d := range w.reps {
		if d != asker && d.state == replicaLive && !d.cut && !d.onCopy {
			if w.answered != nil {
				w.answered[relayed] = d
			}
			return d
		}
	}
	return nil
}

// told notes what r's limiter told the others (Router.Tell).
func (w *world) told(r *simReplica, local bool) {
	w.mu.Lock()
	r.onCopy = local
	w.mu.Unlock()
}

// redisBack notes that a replica charged Redis after an outage: the others probe at once.
func (w *world) redisBack() {
	w.mu.Lock()
	w.back = true
	w.mu.Unlock()
}

// route is the replica that decides key, and since when (its tenure): a tenant's, the holder of
// its partition since it took it (none between holders); a pool's, the live replica ranking
// highest for it, since the first question that found it so.
func (w *world) route(key string, asker *simReplica) (*simReplica, time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if t, ok := strings.CutPrefix(key, "tenant:"); ok {
		tn := w.byName[t]
		if tn == nil {
			return nil, time.Time{}
		}
		if h := w.parts[tn.part]; h >= 0 {
			return w.reps[h], w.partSince[tn.part]
		}
		return nil, time.Time{}
	}
	d := w.poolDecider(key)
	if d == nil {
		return nil, time.Time{}
	}
	if ten, ok := w.poolTenure[key]; !ok || ten.r != d.i {
		w.poolTenure[key] = tenure{d.i, w.now}
	}
	return d, w.poolTenure[key].since
}

// tenure is a pool's deciding replica since a time.
type tenure struct {
	r     int
	since time.Time
}

// poolDecider is the replica ranking highest for key among those the others count live
// (rendezvous hashing), under mu.
func (w *world) poolDecider(key string) *simReplica {
	var best *simReplica
	var score uint64
	for _, r := range w.reps {
		if r.gone {
			continue
		}
		h := fnv.New64a()
		h.Write([]byte(r.name + "\x00" + key))
		if s := h.Sum64(); best == nil || s > score {
			best, score = r, s
		}
	}
	return best
}

// holder is the replica holding tenant t's partition, nil when none.
func (w *world) holder(t *simTenant) *simReplica {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if h := w.parts[t.part]; h >= 0 {
		return w.reps[h]
	}
	return nil
}

// call runs one limiter call under the watchdog; false when it did not return (the seed has
// failed).
func (w *world) call(what string, fn func(ctx context.Context)) bool {
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), simCallTimeout)
		defer cancel()
		fn(ctx)
	}()
	select {
	case <-done:
		return true
	case <-time.After(simWatchdog):
		w.fail("%s did not return within %v (real time): a deadlock\n%s", what, simWatchdog, goroutines())
		return false
	}
}

// pick is a random element of xs (nil when empty).
func pick[T any](rng *rand.Rand, xs []T) (T, bool) {
	var zero T
	if len(xs) == 0 {
		return zero, false
	}
	return xs[rng.IntN(len(xs))], true
}

// between is a random duration in [lo, hi).
func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}

// live is the replicas that run (not paused, not dead).
func (w *world) live() []*simReplica {
	var out []*simReplica
	for _, r := range w.reps {
		if r.state == replicaLive {
			out = append(out, r)
		}
	}
	return out
}

// Set moves the clock to t.
func (c *clock) Set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }
