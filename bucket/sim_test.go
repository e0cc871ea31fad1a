//go:build sim

package bucket

import (
	"flag"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// TestSimulation runs the deterministic simulation of the limiter layer (sim_*_test.go) for
// -sim.seeds seeds from -sim.first: each seed is a world of replicas, tenants, workers and
// faults in virtual time, checked after every event. A failing seed prints itself, how to replay
// it, and its last events; -sim.seed=N replays seed N alone and prints every event.
//
//	go test -run 'TestSimulation$' ./bucket -sim.seed=N -v
var (
	simSeeds = flag.Int("sim.seeds", 200, "TestSimulation: how many seeds to run")
	simFirst = flag.Uint64("sim.first", 1, "TestSimulation: the first seed")
	simSeed  = flag.Uint64("sim.seed", 0, "TestSimulation: run this seed alone, printing every event (with -v)")
	// A seed's schedule depends on its length: a seed replays with the length it ran with.
	simDuration = flag.Duration("sim.duration", simDefaultShape.duration, "TestSimulation: each seed's simulated time")
)

func TestSimulation(t *testing.T) {
	first, n := *simFirst, uint64(*simSeeds)
	if *simSeed != 0 {
		first, n = *simSeed, 1
	}
	var failed []string
	for seed := first; seed < first+n; seed++ {
		start := time.Now()
		v, trace := runSeed(t, seed, *simDuration, *simSeed != 0 && testing.Verbose())
		if took := time.Since(start); took > 5*time.Second {
			t.Logf("seed %d took %v", seed, took.Round(time.Millisecond))
		}
		if v == "" {
			continue
		}
		failed = append(failed, fmt.Sprint(seed))
		if len(failed) <= 3 {
			t.Errorf("seed %d: %s\n  replay: go test -run 'TestSimulation$' ./bucket -sim.seed=%d -sim.duration=%v -v\n  its last events:\n%s", seed, v, seed, *simDuration, trace)
		} else {
			t.Errorf("seed %d: %s", seed, summary(v))
		}
	}
	if len(failed) > 0 {
		t.Logf("%d of %d seeds failed: %s", len(failed), n, strings.Join(failed, " "))
	}
}

// What the simulation found on the fallback before issue 38's fixes (9867b06), at
// -sim.duration=60s: 640 of seeds 1-1000 failed; these were read in their traces (-sim.seed=N
// -sim.duration=60s -v), one or more for each item of the issue (seed, item, what the checker
// saw).
//
//	seed  item  what the checker saw
//	 851  1     renew(t3) and Admit(t4) at once on r1 during r1's outage: neither returned in 3 s;
//	            goDown waits for f.mu.Lock (fallback.go:195) while the renewal holds f.mu.RLock in
//	            onCopy (346) and asks for it again (lease → poolCall → poolHere → onCopy, 604 →
//	            639 → 660 → 335). Seed 910: the same with two renewals of one job.
//	  22  2     Redis slow for r1 only: r1 grants pool pb on its copy (taken as forgotten, refilling)
//	            while r0 and r2 take pb on Redis: pool pb's bucket {4 at 1/523ms} exceeded by 1.
//	  28  2     Redis away for r1 only: r0 allows t2's requests on Redis while r1 forwards t2's
//	            jobs on its copy: bucket {2 at 1/1.407s} exceeded by 2.
//	   3  3     r0 leaves 16.7 s into an outage (lease 10 s); r1 takes t3 (fresh) as forgotten at
//	            the outage's start, its phantom slots long ended: 4 in flight, concurrency 2.
//	   4  3     the same on a window: partition 0 moves back to r0 9 s into an outage; r0 takes t0
//	            as forgotten at 8.25 s, its window (4.7 s) empty again: 3 in any 4.7 s exceeded.
//	  33  3     r2 cut from the routed questions: its question for t4 unanswered, it decides t4 on
//	            its copy taken as forgotten at the outage's start (2.3 s of refill): bucket
//	            {4 at 1/642ms} exceeded by 1 beside the holder's copy. Seed 7: the same.
//	  35  5     pool pb {5 slots, 4 at 1/775ms}: 1.5 s of outage, 2 taken on the copy, then Redis
//	            (its pb bucket full, never charged) grants 3 more at once: exceeded by 1.
//	 165  2     Redis away for r0 only (t2's holder): r0 admits #43 on its copy; its done message
//	            reaches r1, which finds no such lease on Redis; r0's merge puts #43's lease back:
//	            t2 holds 0 of 2 by its workers' reports and waits 4 s on Redis (a stall).
//	 120  4     partition 0 left r0 at 31 s; at 49.8 s (an outage, r1 cut from the routed
//	            questions) r0 decides t3's requests on its copy of 31 s, trusted as exact: bucket
//	            {2 at 1/1.578s} exceeded by 1 beside r1's copy.
//	 147  6     t3's queue on r0 goes idle at 8 s, 0.6 s into an outage; its next job makes a new
//	            queue (Fresh), which drops r0's exact copy (10 of 14 used this minute): t3 is taken
//	            as forgotten (2 used) and the quota of 14 a minute is exceeded by 1 within 1.5 s.
//	            Seeds 560, 617, 745, 949: the same.
//	 158  7     r1 killed just after an outage; r0, still routing t2 to r1, gets no answer and
//	            releases t2's #24 on its copy (t2 unknown there: forgotten); its merge drops the
//	            release: Redis counts #24 until its lease ends, t2 holds 1 of 3 by its workers'
//	            reports and waits 4.4 s (a stall).
//
// And three defects the issue does not name:
//
//	   1  N1    r0 decides t5 on its copy (2 of a window of 8 in 9.4 s), then leaves during the
//	            outage: what its copy decided is never charged to Redis, and r1, the next holder,
//	            lets 2 more through on Redis: exceeded by 2.
//	  27  N2    Redis away for r1 only: r1's renewal of t3's job (t3 decided by r0) is the call
//	            that turns r1 local, and that call is decided on r1's copy, not routed (lease()
//	            and decide() go on to onCopy with up still true); the job's release then goes to
//	            r0, on Redis, and r1's merge puts the renewed lease back: t3 holds 0 of 2 by its
//	            workers' reports and waits 4.1 s (a stall). Seed 145: the same on a start.
//	 158  N3    in the 3 s after an outage (settling), a pool question to r1, killed and not yet
//	            noticed, fails; the failure is taken as Redis's (outageError): r0 turns local
//	            again at once, and again after each probe, until the death is noticed (3 s).
//
// The same seeds on the merged fallback: 851, 147, 158, 165, 27 and 145 pass; 910, 4, 33, 120,
// 35 and 1 no longer fail where they did, but later, on N4 or N5 below; 22 and 28 (item 2) fail
// as before.//
// On the merged fallback (issue 38's items 1 and 3-7 fixed; item 2 not yet), at
// -sim.duration=60s, 112 of the 200 seeds failed. Read in their traces, by what they show (the
// focused tests in sim_found_test.go replay one of each):
//
//	item  seeds  what the checker saw
//	N4    ≥ 27   a request allowed on the copy under a concurrency limit (no JobID: a lease
//	             without an id) is dropped at the merge (outageDelta skips leases without an id
//	             as the forgotten slots): Redis allows more at once. Seeds 3, 45, 50: a plan of 1
//	             or 2 with 2 requests and a job running.
//	2     ≈ 44   a partial outage (Redis away or slow for some replicas, including a pair event's
//	             replica): the replicas on Redis decide what the local one decides on its copy.
//	             Seeds 22 (pool pb's bucket), 28 (a renewal on Redis the holder's copy does
//	             not see: concurrency), 41 and 49 (a stall).
//	N5    ≈ 37   a replica cut off from the routed questions during an outage: the questions it
//	             cannot route are decided on the asker's copy beside the holder's, so two copies
//	             refill one limit or miss each other's renewals. Seed 8: a renewal decided on r3's
//	             copy, r2 (the holder) admits beside the job; 2 running, a limit of 1.
//	N1    61,    a replica killed during an outage: what its copy decided is never charged to
//	      154    Redis, and the next holder lets it through again (154: a window of 3 exceeded).
//	?     125    a stall after a replica was killed during an outage (Redis counts 4 of 4, the
//	             workers 3): not read to the end.

// runSeed plays seed's world for d of simulated time; it returns the first violation ("" when
// none) and the events before it.
func runSeed(t *testing.T, seed uint64, d time.Duration, verbose bool) (violation, trace string) {
	t.Helper()
	clients, raw := simClients(t)
	shape := simDefaultShape
	shape.duration = d
	w := newWorld(t, seed, shape, clients, raw, verbose)
	defer w.close()
	v := w.run()
	tail := w.trace
	if len(tail) > 60 {
		tail = tail[len(tail)-60:]
	}
	return v, "    " + strings.Join(tail, "\n    ")
}

// summary is a violation's first line and what the replicas were doing.
func summary(v string) string {
	lines := strings.Split(v, "\n")
	out := lines[0]
	for _, l := range lines[1:] {
		if strings.HasPrefix(strings.TrimSpace(l), "replicas:") {
			out += "\n  " + strings.TrimSpace(l)
		}
	}
	return out
}

// simClientsOf is one client of the package's redis-server per replica slot, made once.
var simClientsOf struct {
	once    sync.Once
	clients []rueidis.Client
	err     error
}

// simClients returns a client of the package's redis-server for each replica slot of a world,
// and one without faults.
func simClients(t testing.TB) ([]rueidis.Client, rueidis.Client) {
	t.Helper()
	raw := redisClient(t)
	simClientsOf.once.Do(func() {
		opt, err := RedisClientOption(sharedRedis.server.URL())
		if err != nil {
			simClientsOf.err = err
			return
		}
		for range simDefaultShape.maxReps {
			c, err := rueidis.NewClient(opt)
			if err != nil {
				simClientsOf.err = err
				return
			}
			simClientsOf.clients = append(simClientsOf.clients, c)
			packageCleanups = append(packageCleanups, c.Close)
		}
	})
	if simClientsOf.err != nil {
		t.Fatalf("redis clients: %v", simClientsOf.err)
	}
	return simClientsOf.clients, raw
}
