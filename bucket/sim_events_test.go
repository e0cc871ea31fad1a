//go:build sim

package bucket

import (
	"container/heap"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// simShape is the size of one seed's world and schedule (see simDefaultShape).
type simShape struct {
	duration time.Duration // of simulated time
	parts    int           // partitions of the input
	maxReps  int           // replicas at most (clients of the redis-server)
}

// simDefaultShape is the default run's (go test -tags sim): 30 s of simulated time (-sim.duration), a few hundred events.
var simDefaultShape = simShape{duration: 30 * time.Second, parts: 4, maxReps: 4}

// newWorld builds seed's world over clients (one per replica slot) and raw (a client without
// faults, for flushes); verbose prints every event as it happens.
func newWorld(tb testing.TB, seed uint64, shape simShape, clients []rueidis.Client, raw rueidis.Client, verbose bool) *world {
	w := &world{tb: tb, seed: seed, traceAll: verbose, rng: rand.New(rand.NewPCG(seed, 0x5eed)), clock: &clock{t: worldStart}, now: worldStart,
		end: worldStart.Add(shape.duration), raw: raw, prefix: fmt.Sprintf("sim:%d:", seed), byName: map[string]*simTenant{},
		books: map[string]*simBook{}, pgcra: map[string]*simGCRA{}, poolTouched: map[int]string{}, poolTenure: map[string]tenure{}, nextJob: 1}
	w.flushKeys()
	w.parts = make([]int, shape.parts)
	w.partSince = make([]time.Time, shape.parts)
	for p := range w.partSince {
		w.partSince[p] = w.now
	}
	w.makePlans()
	on := func() bool { return w.rng.IntN(3) > 0 }
	w.swarm = simSwarm{requests: on(), partial: on(), slow: on(), forgets: on(), cuts: on(), membership: on(), pairs: on(), idle: on(),
		deaths: on(), reports: on()}
	n := 2 + w.rng.IntN(shape.maxReps-1)
	for i := range shape.maxReps {
		r := &simReplica{w: w, i: i, name: fmt.Sprintf("r%d", i), state: replicaDead, gone: true}
		r.owner = OwnerID(r.name)
		r.client = &faultClient{Client: clients[i], yield: w.yield}
		w.reps = append(w.reps, r)
	}
	for i := range n {
		w.start(w.reps[i])
	}
	for p := range w.parts {
		w.parts[p] = p % n
	}
	w.allUpSince = w.now
	w.logf("seed %d: %d replicas; %s", seed, n, w.swarm)
	for _, t := range w.tenants {
		var rules []string
		for i, l := range t.plan.Limits {
			rules = append(rules, t.plan.labels[i]+" "+l.Rule())
		}
		if p := t.plan.Pool; p != nil {
			rules = append(rules, fmt.Sprintf("pool %s (%s) share %d", p.Name, p.describe(), t.plan.share()))
		}
		w.logf("%s: plan %s: %s; partition %d", t.name, t.plan.Name, strings.Join(rules, ", "), t.part)
	}
	w.schedule()
	return w
}

// close ends the world's limiters and removes its keys.
func (w *world) close() {
	for _, r := range w.reps {
		if r.lim != nil {
			r.lim.Close()
		}
	}
	w.flushKeys()
}

// flushKeys deletes every key of the world: Redis back empty.
func (w *world) flushKeys() {
	const del = `local n = 0 for _, k in ipairs(redis.call('KEYS', ARGV[1])) do redis.call('DEL', k) n = n + 1 end return n`
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.raw.Do(ctx, w.raw.B().Eval().Script(del).Numkeys(0).Arg(w.prefix+"*").Build()).Error(); err != nil {
		w.tb.Fatalf("seed %d: flush: %v", w.seed, err)
	}
}

// start runs replica r (again): a new process, its copy empty.
func (w *world) start(r *simReplica) {
	r.client.set(w.redisAll)
	r.redis = newSimRedis(r.client, w.prefix, simOpts, w.clock.Now)
	if !w.lastFlush.IsZero() {
		simRedisForgot(r.redis, w.lastFlush)
	}
	r.lim = newSimLimiter(r.redis, simOpts, w, r, func() *Plans { return w.plans })
	w.mu.Lock()
	r.state, r.gone, r.local, r.cut, r.onCopy, r.stale = replicaLive, false, false, false, false, nil
	w.mu.Unlock()
}

// makePlans draws the seed's plans, pools and tenants: every limit kind, pools of slots and of
// tokens, shares.
func (w *world) makePlans() {
	rng := w.rng
	w.lease = []time.Duration{4 * time.Second, 6 * time.Second, 10 * time.Second}[rng.IntN(3)]
	ms := func(lo, hi int) time.Duration { return time.Duration(lo+rng.IntN(hi-lo)) * time.Millisecond }
	pc, err := NewPool(Pool{Name: "pc", Concurrency: 2 + rng.Int64N(4), Lease: w.lease})
	if err != nil {
		w.tb.Fatal(err)
	}
	pbSpec := Pool{Name: "pb", Capacity: 3 + rng.Int64N(8), Interval: ms(100, 800)}
	pbSpec.Rate = "1/" + pbSpec.Interval.String()
	if rng.IntN(2) == 0 {
		pbSpec.Concurrency, pbSpec.Lease = 2+rng.Int64N(4), w.lease
	}
	pb, err := NewPool(pbSpec)
	if err != nil {
		w.tb.Fatal(err)
	}
	w.pools = []*Pool{pc, pb}
	var plans []*Plan
	for i := range 5 + rng.IntN(2) {
		var ls []Limit
		kinds := rng.IntN(16)
		if i < 4 {
			kinds |= 1 << i // every kind in every world
		}
		if kinds&1 != 0 {
			ls = append(ls, bucketOf(2+rng.Int64N(8), ms(100, 2000)))
		}
		if kinds&2 != 0 {
			ls = append(ls, Limit{Name: "w", Kind: KindWindow, Capacity: 2 + rng.Int64N(8), Window: ms(10, 120) * 100})
		}
		if kinds&4 != 0 {
			ls = append(ls, Limit{Name: "q", Kind: KindQuota, Capacity: 4 + rng.Int64N(16), Period: Minute})
		}
		if kinds&8 != 0 {
			ls = append(ls, Limit{Name: "c", Kind: KindConcurrency, Capacity: 1 + rng.Int64N(4), Lease: w.lease})
		}
		if len(ls) == 0 {
			ls = append(ls, bucketOf(2+rng.Int64N(8), ms(100, 2000)))
		}
		p, err := NewPlan(fmt.Sprintf("p%d", i), ls...)
		if err != nil {
			w.tb.Fatal(err)
		}
		switch rng.IntN(3) {
		case 1:
			p.Pool, p.Share = pc, 1+rng.Int64N(3)
		case 2:
			p.Pool, p.Share = pb, 1+rng.Int64N(3)
		}
		plans = append(plans, p)
	}
	names := map[string]string{}
	order := rng.Perm(len(plans))
	for i := range 5 + rng.IntN(4) {
		p := plans[order[i%len(plans)]]
		t := &simTenant{name: fmt.Sprintf("t%d", i), plan: p, queueOn: -1, mirrored: map[int]time.Time{}, mirroredIn: map[int]time.Time{}, touched: map[int]int{}}
		h := fnv32(t.name)
		t.part = int(h) % len(w.parts)
		names[t.name] = p.Name
		w.tenants = append(w.tenants, t)
		w.byName[t.name] = t
		w.books[t.name] = newSimBook(t.name, p)
	}
	ps, err := NewPlans(plans, names, "")
	if err != nil {
		w.tb.Fatal(err)
	}
	w.plans = ps
	for _, p := range w.pools {
		if p.Capacity > 0 {
			w.pgcra[p.Name] = &simGCRA{iv: p.Interval.Microseconds(), span: p.Capacity * p.Interval.Microseconds()}
		}
	}
}

// bucketOf is a bucket of capacity c refilling one token every iv.
func bucketOf(c int64, iv time.Duration) Limit {
	return Limit{Name: "b", Capacity: c, Interval: iv, Rate: "1/" + iv.String()}
}

// fnv32 is a small stable hash of s.
func fnv32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return h
}

// maxWeight is the heaviest job tenant t may send.
func (t *simTenant) maxWeight() int64 {
	m := t.plan.MaxWeight()
	if t.plan.Pool != nil {
		m = min(m, t.plan.Pool.maxWeight())
	}
	return min(m, 2)
}

// leased reports whether t's jobs hold leases (a concurrency limit, or a pool of slots).
func (t *simTenant) leased() bool {
	return t.plan.concurrent || (t.plan.Pool != nil && t.plan.Pool.Concurrency > 0)
}

// schedule draws the seed's schedule: arrivals, requests, faults, membership changes,
// concurrency events, and the probing of outages.
func (w *world) schedule() {
	rng := w.rng
	dur := w.end.Sub(w.now)
	for _, t := range w.tenants {
		w.at(between(rng, 0, 3*time.Second), "arrive", func() { w.arrive(t) })
	}
	if w.swarm.requests {
		w.at(between(rng, 0, time.Second), "request", w.request)
	}
	w.at(probeEvery, "probe", w.probe)
	w.at(time.Second, "idle", w.idle)
	// Faults: episodes one after another, each a while after the last ended.
	at := between(rng, 2*time.Second, 10*time.Second)
	for at < dur-5*time.Second {
		d := w.faultDuration()
		w.at(at, "fault", func() { w.fault(d) })
		at += d + between(rng, 3*time.Second, 20*time.Second)
	}
	for range rng.IntN(4) {
		if w.swarm.membership {
			w.at(between(rng, 5*time.Second, dur-5*time.Second), "membership", w.membership)
		}
	}
	for range rng.IntN(3) {
		if w.swarm.pairs {
			w.at(between(rng, 2*time.Second, dur-2*time.Second), "pair", w.pairEvent)
		}
	}
}

// faultDuration is how long a fault lasts: short ones (below 60 % of a lease), a few leases.
func (w *world) faultDuration() time.Duration {
	switch w.rng.IntN(3) {
	case 0:
		return between(w.rng, 300*time.Millisecond, w.lease/2)
	case 1:
		return between(w.rng, w.lease/2, 2*w.lease)
	}
	return between(w.rng, 2*w.lease, 4*w.lease)
}

// arrive stores jobs of t in the input, and schedules the next arrival.
func (w *world) arrive(t *simTenant) {
	n := 1
	if w.rng.IntN(5) == 0 {
		n = 2 + w.rng.IntN(5) // a burst
	}
	for range n {
		j := Job{ID: w.nextJob, Weight: 1 + w.rng.Int64N(t.maxWeight())}
		w.nextJob++
		t.queue = append(t.queue, j)
	}
	t.idleAt = time.Time{}
	w.wake(t, 0)
	w.at(between(w.rng, 200*time.Millisecond, 3*time.Second), "arrive", func() { w.arrive(t) })
}

// wake schedules a step of t's queue d from now, unless one comes sooner.
func (w *world) wake(t *simTenant, d time.Duration) {
	at := w.now.Add(d).Truncate(time.Microsecond)
	if !t.stepAt.IsZero() && !t.stepAt.After(at) {
		return
	}
	t.stepAt = at
	t.stepGen++
	gen := t.stepGen
	w.at(d, "step", func() {
		if t.stepGen != gen {
			return // superseded by a sooner step
		}
		t.stepAt = time.Time{}
		if t.steppedAt.Equal(w.now) {
			if t.steps++; t.steps > 100 {
				w.fail("tenant %s's queue stepped %d times at one instant: a loop of wakes", t.name, t.steps)
				return
			}
		} else {
			t.steppedAt, t.steps = w.now, 1
		}
		w.step(t)
	})
}

// wakePool wakes the queues a pool's freed capacity is for, as admission does: only those whose
// head waits for the pool (one whose own limit binds could not use it).
func (w *world) wakePool(names []string) {
	for _, name := range names {
		if u := w.byName[name]; u != nil && u.poolBound {
			w.wake(u, 0)
		}
	}
}

// step decides the head of t's queue on the replica holding its partition, as a queue of
// admission does: in order, for its owner.
func (w *world) step(t *simTenant) {
	if op, ok := w.stepOp(t); ok {
		w.do(op)
	}
}

// stepOp is the call step makes, if t's queue has a job and a holder to run it.
func (w *world) stepOp(t *simTenant) (simOp, bool) {
	h := w.holder(t)
	if len(t.queue) == 0 {
		return simOp{}, false
	}
	if h == nil || h.state != replicaLive {
		w.wake(t, 500*time.Millisecond) // its partition is between holders
		return simOp{}, false
	}
	if t.queueOn != h.i {
		t.queueOn, t.fresh = h.i, true
	}
	b := Batch{Tenant: t.name, Plan: t.plan, Owner: h.owner, Jobs: slices.Clone(t.queue[:min(len(t.queue), 1+w.rng.IntN(3))])}
	what := "step"
	if t.fresh {
		what = "step (a new queue)"
	}
	return w.admitOp(h, t, b, what), true
}

// simOp is one limiter call: run makes it (under the watchdog, on a goroutine of its own), then
// apply takes its answer into the world, with the replicas that answered its routed questions.
type simOp struct {
	what  string
	run   func(ctx context.Context)
	apply func(asked map[string]*simReplica)
}

// do makes op's call and applies its answer.
func (w *world) do(op simOp) {
	asked := w.asking()
	if !w.call(op.what, op.run) {
		return
	}
	w.observe()
	op.apply(asked)
}

// admitOp runs b on replica h for t's queue and applies its answer: forwards, waits, wakes.
func (w *world) admitOp(h *simReplica, t *simTenant, b Batch, what string) simOp {
	var res BatchResult
	var err error
	op := simOp{what: fmt.Sprintf("%s Admit(%s)", h.name, t.name)}
	op.run = func(ctx context.Context) { res, err = h.lim.Admit(ctx, b) }
	op.apply = func(asked map[string]*simReplica) {
		ids := make([]string, len(b.Jobs))
		for i, j := range b.Jobs {
			ids[i] = fmt.Sprintf("#%d/%d", j.ID, j.Weight)
		}
		if err != nil {
			w.logf("%s %s %s [%s]: error %v", h.name, what, t.name, strings.Join(ids, " "), err)
			if !b.Release {
				w.wake(t, between(w.rng, 100*time.Millisecond, 500*time.Millisecond))
			}
			return
		}
		if t.queueOn == h.i {
			t.fresh = false
		}
		w.logf("%s %s %s [%s]: %v wait %v %s%s%s", h.name, what, t.name, strings.Join(ids, " "), res.Outcomes,
			res.Wait, res.Limit, note(res.Local, " (copy)"), note(res.Handover, " handover"))
		switch {
		case asked[relayed] != nil && !res.Local:
			delete(t.mirrored, h.i) // decided on Redis by another: h's copy no longer knows t
			delete(t.mirroredIn, h.i)
		case !res.Local:
			t.mirrored[h.i] = w.now
			if w.holder(t) == h {
				t.mirroredIn[h.i] = w.partSince[t.part]
			} else {
				delete(t.mirroredIn, h.i) // a late step: not in a tenure of h's
			}
		default:
			w.onCopy(t, h)
		}
		if p := t.plan.Pool; p != nil && !res.Handover && asked[relayed] == nil {
			w.onPoolCopy(p, asked[RoutePool(p.Name)], h)
		}
		n := 0
		for i, o := range res.Outcomes {
			if !o.Admitted() {
				break
			}
			if slices.ContainsFunc(t.queue, func(j Job) bool { return j.ID == b.Jobs[i].ID }) {
				w.forward(t, b.Jobs[i])
			}
			n++
		}
		t.queue = slices.DeleteFunc(t.queue, func(j Job) bool {
			return slices.ContainsFunc(b.Jobs[:n], func(k Job) bool { return k.ID == j.ID })
		})
		w.wakePool(res.Wakes)
		if b.Release {
			return
		}
		t.poolBound = res.PoolBound
		switch {
		case len(t.queue) == 0:
			t.idleAt = w.now
		case n == len(b.Jobs):
			w.wake(t, 0)
		default:
			w.stall(t, res)
			w.wake(t, min(max(res.Wait, time.Millisecond), poolReask))
		}
	}
	return op
}

// forward lets job j of t through: the checker counts it, and a worker takes it.
func (w *world) forward(t *simTenant, j Job) {
	if v := w.books[t.name].take(w.now, j.Weight); v != "" {
		w.fail("forward of #%d: %s", j.ID, v)
	}
	if p := t.plan.Pool; p != nil {
		if g := w.pgcra[p.Name]; g != nil {
			if over, _ := g.take(w.now.UnixMicro(), j.Weight, 0); over > 0 {
				b := &simBook{gcra: []*simGCRA{g}}
				w.fail("forward of #%d of %s: pool %s's bucket (%d at 1/%v) exceeded by %d; its takes: %s", j.ID, t.name, p.Name, p.Capacity, p.Interval, over, b.takes(0))
			}
		}
	}
	if !t.leased() {
		return
	}
	f := &flight{id: j.ID, tenant: t, weight: j.Weight, at: w.now, end: w.now.Add(w.lease), pooled: t.plan.Pool != nil && t.plan.Pool.Concurrency > 0}
	w.flights = append(w.flights, f)
	w.worker(f)
}

// request is a synchronous decision for a random tenant at a random replica.
func (w *world) request() {
	w.at(between(w.rng, 50*time.Millisecond, 800*time.Millisecond), "request", w.request)
	if op, ok := w.requestOp(nil); ok {
		w.do(op)
	}
}

// requestOp is a request's call at replica r (nil: a random one that runs), if one runs.
func (w *world) requestOp(r *simReplica) (simOp, bool) {
	if r == nil {
		var ok bool
		if r, ok = pick(w.rng, w.live()); !ok {
			return simOp{}, false
		}
	}
	t := w.tenants[w.rng.IntN(len(w.tenants))]
	req := Request{Tenant: t.name, Plan: t.plan, Weight: 1 + w.rng.Int64N(t.maxWeight())}
	var res Result
	var err error
	op := simOp{what: fmt.Sprintf("%s Decide(%s)", r.name, t.name)}
	op.run = func(ctx context.Context) { res, err = r.lim.Decide(ctx, req) }
	op.apply = func(asked map[string]*simReplica) {
		if err != nil {
			w.logf("%s decide %s w%d: error %v", r.name, t.name, req.Weight, err)
			return
		}
		d := asked[RouteTenant(t.name)]
		if d == nil {
			d = r
		}
		w.logf("%s decide %s w%d: allowed %v wait %v %s%s%s", r.name, t.name, req.Weight, res.Allowed, res.Wait, res.Limit,
			note(d != r, " by "+d.name), note(res.Local, " (copy)"))
		if res.Local {
			w.onCopy(t, d)
		}
		if !res.Allowed {
			return
		}
		if v := w.books[t.name].take(w.now, req.Weight); v != "" {
			w.fail("request allowed: %s", v)
		}
		if !res.Local {
			t.requests = append(t.requests, simTake{w.now.UnixMicro(), req.Weight})
			if len(t.requests) > 64 {
				t.requests = t.requests[1:]
			}
		}
		if t.plan.concurrent {
			w.flights = append(w.flights, &flight{tenant: t, weight: req.Weight, at: w.now, end: w.now.Add(w.lease), request: true, dead: true})
		}
	}
	return op, true
}

// note is s when b, else nothing.
func note(b bool, s string) string {
	if b {
		return s
	}
	return ""
}

// probe steps the probing of every replica deciding on its copy, as its own loop would every
// probeEvery; a replica that charged Redis tells the others, which probe at once.
func (w *world) probe() {
	w.at(probeEvery, "probe", w.probe)
	for range len(w.reps) + 1 {
		w.mu.Lock()
		w.back = false
		w.mu.Unlock()
		for _, r := range w.reps {
			if r.state != replicaLive || !r.local {
				continue
			}
			w.do(w.recoverOp(r))
			if w.failure != "" {
				return
			}
		}
		w.mu.RLock()
		again := w.back
		w.mu.RUnlock()
		if !again {
			return
		}
	}
}

// recoverOp is one probe of r's outage.
func (w *world) recoverOp(r *simReplica) simOp {
	var ok bool
	return simOp{what: r.name + " Recover", run: func(ctx context.Context) { ok = r.lim.Recover(ctx) }, apply: func(map[string]*simReplica) {
		if ok {
			w.logf("%s back on Redis (charged it with the outage)", r.name)
		}
	}}
}

// idle drops queues that have been empty a while (admission drops an idle queue; the next job
// makes a new one, Fresh).
func (w *world) idle() {
	w.at(time.Second, "idle", w.idle)
	for _, t := range w.tenants {
		if w.swarm.idle && t.queueOn >= 0 && len(t.queue) == 0 && !t.idleAt.IsZero() && w.now.Sub(t.idleAt) > 2*time.Second && w.rng.IntN(2) == 0 {
			w.logf("%s's queue on r%d idle: dropped", t.name, t.queueOn)
			t.queueOn = -1
		}
	}
}

// observe notes each replica's switches between Redis and its copy.
func (w *world) observe() {
	up := true
	for _, r := range w.reps {
		if r.state == replicaDead {
			continue
		}
		loc := r.lim.Local()
		switch {
		case loc && !r.local:
			r.local, r.since = true, w.now
			r.epoch++
			w.logf("%s decides on its copy (Redis failed a call)", r.name)
			w.lose(w.now, nil)
		case !loc && r.local:
			r.local = false
			for _, b := range w.books {
				b.endOutage(r.i, w.now)
			}
		}
		up = up && !loc
	}
	if up && w.allUpSince.IsZero() {
		w.allUpSince = w.now
	} else if !up {
		w.allUpSince = time.Time{}
	}
}

// lose notes a loss at s (a replica turning local, a Redis that forgot, a copy taking over a
// tenant or pool it did not know): the jobs in flight then (of t, or every tenant's when nil)
// are held until they report or lua.PhantomPercent of a lease after s (see flight.capAt).
func (w *world) lose(s time.Time, t *simTenant) {
	end := time.UnixMicro(phantomEnd(s.UnixMicro(), w.lease.Microseconds()))
	for _, f := range w.flights {
		if (t == nil || f.tenant == t) && f.counts(s) && f.capAt.IsZero() {
			f.capAt = end
		}
	}
}

// asking starts recording which replicas answer the routed questions of the calls under way.
func (w *world) asking() map[string]*simReplica {
	m := map[string]*simReplica{}
	w.mu.Lock()
	w.answered = m
	w.mu.Unlock()
	return m
}

// onCopy notes that replica d decided tenant t on its copy, granting what the documents allow
// the first time in an outage of d's (see allowance).
func (w *world) onCopy(t *simTenant, d *simReplica) {
	if t.touched[d.i] == d.epoch {
		return
	}
	t.touched[d.i] = d.epoch
	b := w.books[t.name]
	since := t.mirrored[d.i]
	var n int64
	for _, q := range t.requests {
		if at := time.UnixMicro(q.at); !at.Before(since) && at.Before(d.since) {
			n += q.w
		}
	}
	if n > 0 {
		b.grant(allowance{weight: n, by: d.i, why: whyUnseen})
	}
	for _, f := range w.flights {
		if f.request && f.tenant == t && !f.at.Before(since) && f.at.Before(d.since) && !f.unseen && f.counts(w.now) {
			f.unseen = true
		}
	}
	if known := w.holder(t) == d && !since.IsZero() && t.mirroredIn[d.i].Equal(w.partSince[t.part]) && !t.mirroredIn[d.i].IsZero(); !known {
		b.grantQuotaShare(w.now, d.i, whyFirstDecided)
		w.lose(w.now, t)
	}
}

// onPoolCopy notes that pool p was decided on a copy (d's, or the caller's when nil): a pool has
// no copy, it is taken as forgotten when a copy first decides it.
func (w *world) onPoolCopy(p *Pool, d, caller *simReplica) {
	if d == nil {
		d = caller
	}
	if !d.local {
		return
	}
	key := fmt.Sprintf("%s@%d", p.Name, d.epoch)
	if w.poolTouched[d.i] == key {
		return
	}
	w.poolTouched[d.i] = key
	end := time.UnixMicro(phantomEnd(w.now.UnixMicro(), w.lease.Microseconds()))
	for _, f := range w.flights {
		if f.pooled && f.tenant.plan.Pool == p && f.counts(w.now) && f.capAt.IsZero() {
			f.capAt = end
		}
	}
}

// checkNow checks what is in flight at now against every concurrency limit and pool.
func (w *world) checkNow() {
	perTenant := map[*simTenant]int64{}
	perPool := map[*Pool]int64{}
	live := w.flights[:0]
	for _, f := range w.flights {
		if (f.done || f.dead) && w.now.Sub(f.end) > 2*w.lease {
			continue // it can no longer report, nor be counted
		}
		live = append(live, f)
		if !f.counts(w.now) {
			continue
		}
		perTenant[f.tenant] += f.weight
		if f.pooled && !f.request {
			perPool[f.tenant.plan.Pool] += f.weight
		}
	}
	w.flights = live
	for _, t := range w.tenants {
		for i, l := range t.plan.Limits {
			if l.Kind == KindConcurrency && perTenant[t] > l.Capacity {
				w.fail("tenant %s: %d in flight, concurrency limit %s is %d%s", t.name, perTenant[t], t.plan.labels[i], l.Capacity, w.inFlight(t, nil))
				return
			}
		}
	}
	for _, p := range w.pools {
		if p.Concurrency > 0 && perPool[p] > p.Concurrency {
			w.fail("pool %s: %d in flight, its concurrency is %d%s", p.Name, perPool[p], p.Concurrency, w.inFlight(nil, p))
			return
		}
	}
}

// inFlight lists the jobs in flight of t or of pool p, for a failure.
func (w *world) inFlight(t *simTenant, p *Pool) string {
	var b strings.Builder
	for _, f := range w.flights {
		if f.counts(w.now) && (f.tenant == t || (p != nil && f.pooled && !f.request && f.tenant.plan.Pool == p)) {
			fmt.Fprintf(&b, "\n    %s #%d w%d admitted +%v, lease to +%v", f.tenant.name, f.id, f.weight, f.at.Sub(worldStart), f.end.Sub(worldStart))
			if !f.capAt.IsZero() {
				fmt.Fprintf(&b, " (held by a loss to +%v)", f.capAt.Sub(worldStart))
			}
			if f.request {
				b.WriteString(" (a request)")
			}
		}
	}
	return b.String()
}

// stall checks a queue Redis left waiting: once every replica decides on Redis again, and a
// loss's slots have ended, a tenant whose head fits its concurrency limits by the workers'
// reports must not be held on them (README Faults: "Once every running job has reported, the
// rest of the slots are free").
func (w *world) stall(t *simTenant, res BatchResult) {
	if res.Local || res.Handover || res.Downstream || res.PoolBound || res.LimitIndex < 0 || w.allUpSince.IsZero() ||
		t.plan.Limits[res.LimitIndex].Kind != KindConcurrency ||
		(!w.lastFlush.IsZero() && w.now.Before(time.UnixMicro(phantomEnd(w.lastFlush.UnixMicro(), w.lease.Microseconds())))) {
		t.stallFrom = time.Time{}
		return
	}
	held := int64(0)
	for _, f := range w.flights {
		if f.tenant == t && !f.freed && w.now.Before(f.end) {
			held += f.weight
		}
	}
	head := t.queue[0].Weight
	if held+head > t.plan.Limits[res.LimitIndex].Capacity {
		t.stallFrom = time.Time{}
		return
	}
	if t.stallFrom.IsZero() {
		t.stallFrom = w.now
		return
	}
	if w.now.Sub(t.stallFrom) >= time.Second {
		w.fail("tenant %s stalls on Redis: its head (weight %d) waits %v for %s, which holds %d of %d by the workers' reports, since +%v (every replica on Redis since +%v)%s",
			t.name, head, res.Wait, res.Limit, held, t.plan.Limits[res.LimitIndex].Capacity, t.stallFrom.Sub(worldStart), w.allUpSince.Sub(worldStart), w.inFlight(t, nil))
	}
}

// run plays the schedule to its end or the first violation.
func (w *world) run() string {
	for w.queue.Len() > 0 && w.failure == "" {
		ev := heap.Pop(&w.queue).(*schedEvent)
		if ev.at.After(w.end) {
			break
		}
		w.now = ev.at
		w.clock.Set(w.now)
		ev.fn()
		if w.failure != "" {
			break
		}
		w.observe()
		w.checkNow()
	}
	return w.failure
}
