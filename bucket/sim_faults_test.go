//go:build sim

package bucket

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// Redis as one replica of the simulation sees it: its own client of the one redis-server, with
// the faults the schedule gives it.
type redisFault int32

const (
	// redisUp: calls reach the server and their answers come back.
	redisUp redisFault = iota
	// redisAway: calls fail at once (killed, partitioned, refused).
	redisAway
	// redisSlow: calls run on the server but the caller gets its deadline's error: a call that
	// timed out may still run.
	redisSlow
)

var redisFaultNames = [...]string{"up", "away", "slow"}

func (f redisFault) String() string { return redisFaultNames[f] }

// errSimAway is a call to a Redis the schedule made away.
var errSimAway = errors.New("sim: redis away (connection refused)")

// faultClient is a replica's rueidis client with faults: every command goes through Do or
// DoMulti (the Redis backend uses nothing else of the client for its calls). yield, when set, is
// called before each command: the simulation's concurrency events interleave two calls there.
type faultClient struct {
	rueidis.Client
	fault atomic.Int32
	yield func(site string)
}

func (c *faultClient) set(f redisFault) { c.fault.Store(int32(f)) }

func (c *faultClient) state() redisFault { return redisFault(c.fault.Load()) }

func (c *faultClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	if c.yield != nil {
		c.yield("redis")
	}
	switch c.state() {
	case redisAway:
		return rueidis.NewErrorResult(errSimAway)
	case redisSlow:
		// The server runs it; the caller has given up.
		c.Client.Do(context.WithoutCancel(ctx), cmd)
		return rueidis.NewErrorResult(fmt.Errorf("sim: redis slow: %w", context.DeadlineExceeded))
	}
	return c.Client.Do(ctx, cmd)
}

func (c *faultClient) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	if c.yield != nil {
		c.yield("redis")
	}
	var err error
	switch c.state() {
	case redisAway:
		err = errSimAway
	case redisSlow:
		c.Client.DoMulti(context.WithoutCancel(ctx), multi...)
		err = fmt.Errorf("sim: redis slow: %w", context.DeadlineExceeded)
	default:
		return c.Client.DoMulti(ctx, multi...)
	}
	out := make([]rueidis.RedisResult, len(multi))
	for i := range out {
		out[i] = rueidis.NewErrorResult(err)
	}
	return out
}

// fault starts one episode of the schedule, lasting d: Redis away or slow for every replica or
// some (a partial outage), Redis back empty (its state lost), routed questions unanswered.
func (w *world) fault(d time.Duration) {
	rng := w.rng
	var reps []*simReplica
	for _, r := range w.reps {
		if r.state != replicaDead {
			reps = append(reps, r)
		}
	}
	some := reps
	if len(reps) > 1 {
		some = slices.Clone(reps)
		rng.Shuffle(len(some), func(i, j int) { some[i], some[j] = some[j], some[i] })
		some = some[:1+rng.IntN(len(reps)-1)]
	}
	names := func(rs []*simReplica) string {
		var s []string
		for _, r := range rs {
			s = append(s, r.name)
		}
		return strings.Join(s, ",")
	}
	set := func(rs []*simReplica, f redisFault) {
		for _, r := range rs {
			r.client.set(f)
		}
		if len(rs) == len(reps) {
			w.redisAll = f // a replica started meanwhile finds it so too
		}
	}
	back := func(rs []*simReplica) func() {
		return func() {
			w.redisAll = redisUp
			if len(rs) == len(reps) {
				rs = w.reps // with those started meanwhile, which found it away too
			}
			for _, r := range rs {
				r.client.set(redisUp)
			}
			w.mu.Lock()
			for _, r := range rs {
				r.cut = false
			}
			w.mu.Unlock()
			w.logf("Redis back for %s", names(rs))
		}
	}
	type episode struct {
		on   bool
		name string
		do   func()
	}
	episodes := []episode{
		{true, "away", func() {
			set(reps, redisAway)
			w.logf("Redis away for every replica (%v)", d)
			w.at(d, "back", back(reps))
		}},
		{w.swarm.partial, "away some", func() {
			set(some, redisAway)
			w.logf("Redis away for %s only (%v): a partial outage", names(some), d)
			w.at(d, "back", back(some))
		}},
		{w.swarm.slow, "slow", func() {
			set(reps, redisSlow)
			w.logf("Redis slow for every replica (%v): calls run, their callers time out", d)
			w.at(d, "back", back(reps))
		}},
		{w.swarm.slow && w.swarm.partial, "slow some", func() {
			set(some, redisSlow)
			w.logf("Redis slow for %s only (%v)", names(some), d)
			w.at(d, "back", back(some))
		}},
		{w.swarm.forgets, "back empty", func() {
			set(reps, redisAway)
			w.logf("Redis away for every replica (%v), back empty", d)
			w.at(d, "back empty", func() {
				w.forgot()
				back(reps)()
			})
		}},
		{w.swarm.forgets, "restarted empty", func() {
			w.logf("Redis restarted without its data")
			w.forgot()
		}},
		{w.swarm.cuts, "away and cut", func() {
			set(reps, redisAway)
			w.mu.Lock()
			for _, r := range some {
				r.cut = true
			}
			w.mu.Unlock()
			w.logf("Redis away for every replica, and %s cut from the others' routed questions (%v)", names(some), d)
			w.at(d, "back", back(reps))
		}},
	}
	episodes = slices.DeleteFunc(episodes, func(e episode) bool { return !e.on })
	episodes[rng.IntN(len(episodes))].do()
}

// forgot empties Redis (every key of the world) and tells every replica it lost its state now,
// as each would learn from the servers' markers.
func (w *world) forgot() {
	w.flushKeys()
	w.lastFlush = w.now
	for _, r := range w.reps {
		if r.redis != nil {
			simRedisForgot(r.redis, w.now)
		}
	}
	w.lose(w.now, nil)
	for _, t := range w.tenants {
		w.books[t.name].grantQuotaShare(w.now, -1, whyForgot)
	}
	w.logf("Redis lost its state")
}

// membership changes the replicas: one leaves (handing its partitions over), joins, is killed
// (its partitions move without a hand-over once the others notice, 3 s later), or is paused
// (the others take its partitions 3 s later; it acts on them late when it resumes).
func (w *world) membership() {
	rng := w.rng
	live := w.live()
	var dead []*simReplica
	for _, r := range w.reps {
		if r.state == replicaDead {
			dead = append(dead, r)
		}
	}
	r, _ := pick(rng, live)
	switch k := rng.IntN(4); {
	case k == 0 && len(live) > 1:
		w.logf("%s leaves", r.name)
		w.setGone(r)
		w.rebalance(true)
		w.mu.Lock()
		r.state = replicaDead
		w.mu.Unlock()
		r.lim.Close()
	case k == 1 && len(dead) > 0:
		r, _ = pick(rng, dead)
		w.logf("%s joins", r.name)
		w.start(r)
		w.observe()
		w.rebalance(true)
	case k == 2 && len(live) > 1:
		w.logf("%s killed", r.name)
		w.mu.Lock()
		r.state = replicaDead
		w.mu.Unlock()
		r.lim.Close()
		w.at(3*time.Second, "noticed", func() {
			w.logf("%s's death noticed", r.name)
			w.setGone(r)
			w.rebalance(false)
		})
	case k == 3 && len(live) > 1:
		d := between(rng, time.Second, 10*time.Second)
		w.logf("%s paused (%v)", r.name, d)
		w.mu.Lock()
		r.state = replicaPaused
		w.mu.Unlock()
		w.at(3*time.Second, "noticed", func() {
			if r.state != replicaPaused {
				return
			}
			w.logf("%s's pause noticed", r.name)
			for _, t := range w.tenants {
				if t.queueOn == r.i && w.parts[t.part] == r.i {
					r.stale = append(r.stale, t)
				}
			}
			w.setGone(r)
			w.rebalance(false)
		})
		w.at(d, "resume", func() { w.resume(r) })
	}
}

// setGone takes r out of the replicas the others count live.
func (w *world) setGone(r *simReplica) {
	w.mu.Lock()
	r.gone = true
	w.mu.Unlock()
}

// resume ends r's pause: it first steps, late, the queues of the partitions it held before (it
// does not know yet they moved), then learns they did and rejoins.
func (w *world) resume(r *simReplica) {
	if r.state != replicaPaused {
		return
	}
	w.mu.Lock()
	r.state = replicaLive
	w.mu.Unlock()
	w.logf("%s resumes", r.name)
	for _, t := range w.tenants {
		if slices.Contains(r.stale, t) && len(t.queue) > 0 {
			b := Batch{Tenant: t.name, Plan: t.plan, Owner: r.owner, Jobs: slices.Clone(t.queue[:1])}
			w.do(w.admitOp(r, t, b, "late step"))
			if w.failure != "" {
				return
			}
		}
	}
	if r.gone {
		r.stale = nil
		w.mu.Lock()
		r.gone = false
		w.mu.Unlock()
		w.rebalance(true)
	}
}

// rebalance spreads the partitions evenly over the replicas counted live, keeping what each
// holds where it can; a partition leaving a replica that runs is handed over when handover
// (its queues give their hold up: Batch.Release).
func (w *world) rebalance(handover bool) {
	var members []*simReplica
	for _, r := range w.reps {
		if !r.gone && r.state != replicaDead {
			members = append(members, r)
		}
	}
	if len(members) == 0 {
		return
	}
	count := map[int]int{}
	for _, h := range w.parts {
		count[h]++
	}
	quota := func(i int) int { // members[i]'s share: the first len(parts) % n get one more
		q := len(w.parts) / len(members)
		if i < len(w.parts)%len(members) {
			q++
		}
		return q
	}
	want := map[int]int{}
	for i, r := range members {
		want[r.i] = quota(i)
	}
	for p, h := range w.parts {
		if h >= 0 {
			if _, ok := want[h]; ok && count[h] <= want[h] {
				continue
			}
		}
		to := -1
		for _, r := range members {
			if count[r.i] < want[r.i] {
				to = r.i
				break
			}
		}
		if to < 0 {
			continue
		}
		w.move(p, h, to, handover)
		count[h]--
		count[to]++
	}
}

// move gives partition p from replica from (-1: none) to replica to.
func (w *world) move(p, from, to int, handover bool) {
	if from >= 0 && handover && w.reps[from].state == replicaLive {
		for _, t := range w.tenants {
			if t.part == p && t.queueOn == from {
				w.do(w.admitOp(w.reps[from], t, Batch{Tenant: t.name, Plan: t.plan, Owner: w.reps[from].owner, Release: true}, "hand-over"))
			}
		}
	}
	w.mu.Lock()
	w.parts[p] = to
	w.partSince[p] = w.now
	w.mu.Unlock()
	w.logf("partition %d: r%d → r%d%s", p, from, to, note(handover, " (handed over)"))
	for _, t := range w.tenants {
		if t.part == p {
			if t.queueOn == from {
				t.queueOn = -1
			}
			if len(t.queue) > 0 {
				w.wake(t, 0)
			}
		}
	}
}
