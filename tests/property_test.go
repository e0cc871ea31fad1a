package tests

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/admitter/admitter/internal/testenv"
	"github.com/admitter/admitter/wire"
)

// chaosTenant is a tenant of the property test: its plan's limits and the weights it sends.
type chaosTenant struct {
	name   string
	limits [][2]float64 // capacity, rate per second
	maxW   int
	rate   float64 // published jobs per second
}

var chaosTenants = []chaosTenant{
	{"ant", [][2]float64{{4, 8}}, 2, 10},
	{"bee", [][2]float64{{6, 12}, {40, 6}}, 3, 8},
}

const chaosPlans = `
plans:
  ant: {limits: [{capacity: 4, rate: 8/s}]}
  bee: {limits: [{name: burst, capacity: 6, rate: 12/s}, {name: slow, capacity: 40, rate: 6/s}]}
tenants: {ant: ant, bee: bee}
`

// TestPacingHoldsThroughChaos is invariant 1 (and 4) as a property: two tenants publish above
// their plans while, at random, replicas start, are killed (SIGKILL) or stopped (SIGTERM), and
// Redis restarts without its data. Afterwards every job has been forwarded exactly once, and for
// each tenant and each limit of its plan, no interval of any length holds more forwarded weight
// than C + r·t (forwards marked fail-open excepted), up to the time between a decision and the
// store of its forward. The schedule is random; ADMITTER_CHAOS_SEED replays one.
func TestPacingHoldsThroughChaos(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("ADMITTER_CHAOS_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("ADMITTER_CHAOS_SEED: %v", err)
		}
	}
	t.Logf("seed %d (replay with ADMITTER_CHAOS_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	failMode := []string{"open", "closed"}[rng.IntN(2)]
	w := newWorldWith(t, chaosPlans, testenv.StartRedis(t)) // no append-only file: a restart forgets
	env := []string{"ADMITTER_FAIL_MODE=" + failMode, "ADMITTER_SHUTDOWN_TIMEOUT=3s", "ADMITTER_REDIS_TIMEOUT=200ms"}

	var live []*proc
	var events []string
	start := time.Now()
	event := func(format string, args ...any) {
		events = append(events, fmt.Sprintf("%6.2fs ", time.Since(start).Seconds())+fmt.Sprintf(format, args...))
	}
	live = append(live, w.start(env...))
	event("replica started")

	// Load: each tenant above its plan, random weights, published by one goroutine.
	stop := make(chan struct{})
	loadDone := make(chan map[string]int)
	go func() {
		sent := map[string]int{}
		next := make([]time.Time, len(chaosTenants))
		lrng := rand.New(rand.NewPCG(seed, 2))
		for {
			select {
			case <-stop:
				loadDone <- sent
				return
			default:
			}
			i := 0
			for k := range next {
				if next[k].Before(next[i]) {
					i = k
				}
			}
			time.Sleep(time.Until(next[i]))
			tn := chaosTenants[i]
			weight := 1 + lrng.IntN(tn.maxW)
			w.publish("jobs.submit."+tn.name+".work", fmt.Sprintf("%s-%d", tn.name, sent[tn.name]), wire.HeaderWeight, strconv.Itoa(weight))
			sent[tn.name]++
			next[i] = time.Now().Add(time.Duration(float64(time.Second) / tn.rate))
		}
	}()

	for time.Since(start) < 15*time.Second {
		time.Sleep(time.Duration(800+rng.IntN(1700)) * time.Millisecond)
		switch r := rng.IntN(100); {
		case len(live) == 0 || (r < 25 && len(live) < 3):
			live = append(live, w.start(env...))
			event("replica started (%d live)", len(live))
		case r < 50:
			k := rng.IntN(len(live))
			live[k].kill()
			live = slices.Delete(live, k, k+1)
			event("replica killed (%d live)", len(live))
		case r < 70:
			k := rng.IntN(len(live))
			if code := live[k].signal(syscall.SIGTERM, 15*time.Second); code != 0 {
				t.Errorf("a replica exited %d after SIGTERM", code)
			}
			live = slices.Delete(live, k, k+1)
			event("replica stopped (%d live)", len(live))
		case r < 85:
			w.redis.Kill()
			if err := w.redis.Start(); err != nil {
				t.Fatal(err)
			}
			event("redis restarted without its data")
		default:
			event("nothing")
		}
	}
	close(stop)
	sent := <-loadDone
	if len(live) == 0 {
		live = append(live, w.start(env...))
		event("replica started to finish")
	}
	total := 0
	for _, n := range sent {
		total += n
	}
	t.Logf("fail mode %s; %d jobs published (%v); events:\n%s", failMode, total, sent, strings.Join(events, "\n"))
	got := w.read("ADMITTED", total, 90*time.Second)

	// Exactly once.
	seen := map[string]int{}
	for _, j := range got {
		seen[j.payload]++
	}
	for _, tn := range chaosTenants {
		for i := range sent[tn.name] {
			if c := seen[fmt.Sprintf("%s-%d", tn.name, i)]; c != 1 {
				t.Errorf("job %s-%d forwarded %d times", tn.name, i, c)
			}
		}
	}
	if d := w.readAll("DEAD"); len(d) != 0 {
		t.Errorf("%d jobs dead-lettered", len(d))
	}

	// Pacing, per tenant and limit, on the forwards that were decided.
	for _, tn := range chaosTenants {
		var times []time.Time
		var weights []float64
		degraded := 0
		for _, j := range got {
			if j.header.Get(wire.HeaderTenant) != tn.name {
				continue
			}
			if j.header.Get(wire.HeaderDegraded) != "" {
				degraded++
				continue
			}
			wt, _ := strconv.Atoi(j.header.Get(wire.HeaderWeight))
			times, weights = append(times, j.stored), append(weights, float64(max(wt, 1)))
		}
		for _, l := range tn.limits {
			// slack: the largest weight (a decision and the store of its forward are not one
			// instant, and a window edge can fall between them)
			e, from, to := worstWeightedWindow(times, weights, l[0], l[1])
			t.Logf("tenant %s, limit %v/%v per s: %d forwards decided, %d fail-open; worst window excess %.2f", tn.name, l[0], l[1], len(times), degraded, e)
			if e > float64(tn.maxW) {
				t.Errorf("tenant %s: %.2f over C %v + r %v·t in [%.2fs, %.2fs] (%d forwarded there)",
					tn.name, e, l[0], l[1], from.Sub(start).Seconds(), to.Sub(start).Seconds(), countBetween(times, from, to))
			}
		}
	}
}

// worstWeightedWindow is worstWindow with weights: the largest excess, over every interval
// [times[i], times[j]], of the weight forwarded in it above C + r·(times[j]-times[i]).
func worstWeightedWindow(times []time.Time, weights []float64, capacity, rate float64) (excess float64, from, to time.Time) {
	idx := make([]int, len(times))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return times[a].Compare(times[b]) })
	excess = -capacity - 1
	best, bestAt := 0.0, time.Time{}
	prefix := 0.0 // weight before the current job
	for k, i := range idx {
		ts := times[i].Sub(times[idx[0]]).Seconds()
		if v := rate*ts - prefix; k == 0 || v > best {
			best, bestAt = v, times[i]
		}
		prefix += weights[i]
		if e := prefix - rate*ts + best - capacity; e > excess {
			excess, from, to = e, bestAt, times[i]
		}
	}
	return excess, from, to
}

func TestWorstWeightedWindow(t *testing.T) {
	base := time.Unix(1000, 0)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	// C=4, r=8/s: weight 4 at once, then 1 every 125ms: on the bound.
	times := []time.Time{at(0), at(125), at(250)}
	if e, _, _ := worstWeightedWindow(times, []float64{4, 1, 1}, 4, 8); e > 1e-9 {
		t.Errorf("paced: excess %v", e)
	}
	// A weight-3 job 10ms after a weight-4 one: 3 over (less 0.08).
	if e, _, _ := worstWeightedWindow([]time.Time{at(0), at(10)}, []float64{4, 3}, 4, 8); e < 2.9 || e > 2.93 {
		t.Errorf("burst: excess %v, want 2.92", e)
	}
	// Unsorted input is sorted by time.
	if e, _, _ := worstWeightedWindow([]time.Time{at(10), at(0)}, []float64{3, 4}, 4, 8); e < 2.9 {
		t.Errorf("unsorted: excess %v", e)
	}
}
