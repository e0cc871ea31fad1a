//go:build sim

package bucket

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"
)

// Two calls at once. A sequential schedule cannot put two goroutines inside a limiter with a
// writer waiting (FIELD-NOTES: "Interleavings a sequential driver cannot produce ... need real
// concurrency"), so a pair event runs two calls on one replica on goroutines of their own and
// interleaves them at the simulation's yield points: before each command to Redis (faultClient)
// and at each routing question (simRouter's Decides and Ask). The actor let go runs until it
// yields, ends, or blocks on a lock; the next one to go is drawn from the seed. When neither can
// go on, both are let run freely under the watchdog: a lock cycle shows as a call that does not
// return. What the interleaving checks is thus reproducible from the seed.

// simPause is an actor stopped at a yield point, until resume closes.
type simPause struct {
	site   string
	resume chan struct{}
}

// simActor is one of the pair's calls.
type simActor struct {
	op     simOp
	gid    atomic.Int64 // its goroutine
	pauses chan simPause
	done   chan struct{}
}

// simPair is the pair event under way (world.pair).
type simPair struct {
	actors [2]*simActor
	active atomic.Pointer[simActor] // the actor let go: a yield of another goroutine is its
	freed  chan struct{}            // closed: yields no longer stop
}

// pairNow is the pair event under way (nil: none); yields from any goroutine read it.
var pairNow atomic.Pointer[simPair]

// yield is a yield point: during a pair event, the calling actor stops there until the
// schedule lets it go on.
func (w *world) yield(site string) {
	p := pairNow.Load()
	if p == nil {
		return
	}
	a := p.actorOf(goid())
	if a == nil {
		a = p.active.Load() // a goroutine of the actor's call (the coalescer's, say)
	}
	if a == nil {
		return
	}
	ps := simPause{site: site, resume: make(chan struct{})}
	select {
	case a.pauses <- ps:
		<-ps.resume
	case <-p.freed:
	}
}

func (p *simPair) actorOf(gid int64) *simActor {
	for _, a := range p.actors {
		if a.gid.Load() == gid {
			return a
		}
	}
	return nil
}

// goid is the calling goroutine's id.
func goid() int64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	id, _ := strconv.ParseInt(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	return id
}

// lockWait reports whether goroutine gid waits for a lock; buf holds the goroutines' stacks.
func lockWait(gid int64, buf []byte) bool {
	all := buf[:runtime.Stack(buf, true)]
	head := fmt.Appendf(nil, "goroutine %d [", gid)
	i := bytes.Index(all, head)
	if i < 0 {
		return false
	}
	state := all[i+len(head):]
	for _, s := range []string{"sync.RWMutex.Lock", "sync.RWMutex.RLock", "sync.Mutex.Lock", "semacquire", "sync.Cond.Wait", "sync.WaitGroup.Wait"} {
		if bytes.HasPrefix(state, []byte(s)) {
			return true
		}
	}
	return false
}

// pairEvent runs two calls at once on a replica: a queue's step, a request, a lease message or
// a probe of an outage; half the time the replica's Redis goes away just before, so that it
// turns local under them.
func (w *world) pairEvent() {
	r, ok := pick(w.rng, w.live())
	if !ok {
		return
	}
	if w.rng.IntN(2) == 0 && r.client.state() == redisUp {
		r.client.set(redisAway)
		d := between(w.rng, 300*time.Millisecond, 3*time.Second)
		w.logf("Redis away for %s (%v)", r.name, d)
		w.at(d, "back", func() {
			if r.client.state() == redisAway {
				r.client.set(redisUp)
				w.logf("Redis back for %s", r.name)
			}
		})
	}
	var ops []simOp
	for len(ops) < 2 {
		if op, ok := w.pairOp(r); ok {
			ops = append(ops, op)
		}
	}
	w.logf("%s: %s and %s at once", r.name, ops[0].what, ops[1].what)
	w.runPair([2]simOp{ops[0], ops[1]})
}

// pairOp is one call on r for a pair event.
func (w *world) pairOp(r *simReplica) (simOp, bool) {
	switch w.rng.IntN(4) {
	case 0:
		var mine []*simTenant
		for _, t := range w.tenants {
			if w.holder(t) == r && len(t.queue) > 0 {
				mine = append(mine, t)
			}
		}
		if t, ok := pick(w.rng, mine); ok {
			return w.stepOp(t)
		}
	case 1:
		var up []*flight
		for _, f := range w.flights {
			if f.counts(w.now) && !f.request && !f.dead {
				up = append(up, f)
			}
		}
		if f, ok := pick(w.rng, up); ok {
			return w.leaseOp(r, f, msgRenew, func(LeaseResult) {}, func() {}, 2)
		}
	case 2:
		return w.recoverOp(r), true
	}
	return w.requestOp(r)
}

// runPair interleaves ops (see above), then applies their answers in order.
func (w *world) runPair(ops [2]simOp) {
	p := &simPair{freed: make(chan struct{})}
	for i := range ops {
		p.actors[i] = &simActor{op: ops[i], pauses: make(chan simPause), done: make(chan struct{})}
	}
	asked := w.asking()
	pairNow.Store(p)
	defer pairNow.Store(nil)
	var started, finished, blocked [2]bool
	var paused [2]*simPause
	var order []string
	for range 16 {
		var can []int
		for i := range 2 {
			if !finished[i] && !blocked[i] && (!started[i] || paused[i] != nil) {
				can = append(can, i)
			}
		}
		if len(can) == 0 {
			break
		}
		i := can[w.rng.IntN(len(can))]
		a := p.actors[i]
		p.active.Store(a)
		if !started[i] {
			started[i] = true
			go a.run()
		} else {
			close(paused[i].resume)
			paused[i] = nil
		}
		order = append(order, fmt.Sprintf("%c:%s", 'A'+i, w.await(p, i, &paused, &finished, &blocked)))
	}
	close(p.freed)
	for i, a := range p.actors {
		if paused[i] != nil {
			close(paused[i].resume)
		}
		if !started[i] {
			go a.run()
		}
	}
	w.logf("  interleaved %v", order)
	for i, a := range p.actors {
		select {
		case <-a.done:
		case <-time.After(simWatchdog):
			w.fail("%s (at once with %s) did not return within %v (real time): a deadlock\n%s", ops[i].what, ops[1-i].what, simWatchdog, goroutines())
			return
		}
	}
	w.observe()
	ops[0].apply(asked)
	ops[1].apply(asked)
}

// run makes the actor's call on its goroutine.
func (a *simActor) run() {
	a.gid.Store(goid())
	defer close(a.done)
	ctx, cancel := context.WithTimeout(context.Background(), simCallTimeout)
	defer cancel()
	a.op.run(ctx)
}

// await waits for actor i, let go, to stop at a yield ("paused at ..."), end ("done") or block
// on a lock ("blocked"), noting the other's stops and end meanwhile.
func (w *world) await(p *simPair, i int, paused *[2]*simPause, finished, blocked *[2]bool) string {
	j := 1 - i
	a, b := p.actors[i], p.actors[j]
	var bdone <-chan struct{}
	if !finished[j] {
		bdone = b.done
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(time.Second)
	buf := make([]byte, 1<<20)
	for {
		select {
		case ps := <-a.pauses:
			paused[i] = &ps
			return "paused at " + ps.site
		case <-a.done:
			finished[i] = true
			return "done"
		case ps := <-b.pauses:
			paused[j], blocked[j] = &ps, false
		case <-bdone:
			finished[j], blocked[j] = true, false
			bdone = nil
		case <-tick.C:
			if lockWait(a.gid.Load(), buf) {
				blocked[i] = true
				return "blocked"
			}
		case <-deadline:
			blocked[i] = true
			return "stuck"
		}
	}
}
