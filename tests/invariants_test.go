package tests

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The checker of the product's invariants (README, "Invariants") over what a run forwarded:
// nothing lost, nothing forwarded twice, and every tenant's downstream arrivals within C + r·t
// for each limit of its plan in every interval, forwards marked fail-open excepted. The
// property test, the Redis Cluster failover test and the soak use it; the single-tenant tests
// use its window function.

// lateUncharged is how late a forward may be stored after its decision without being charged
// again for it (admission's lateStore).
const lateUncharged = 100 * time.Millisecond

// bucketLimit is one token-bucket limit of a plan: capacity C and rate r per second.
type bucketLimit struct{ capacity, rate float64 }

// checkedTenant is a tenant whose forwards are checked: its plan's limits, and the slack allowed
// over C + r·t (the largest weight it sends: a decision and the store of its forward are not one
// instant, and an interval's edge can fall between them).
type checkedTenant struct {
	name   string
	limits []bucketLimit
	slack  float64
}

// limitPacing is how one limit of one tenant was kept.
type limitPacing struct {
	tenant   string
	limit    bucketLimit
	slack    float64
	decided  int // forwards that were decided (not fail-open)
	degraded int // forwards marked fail-open, left out of the check
	// excess is the largest weight forwarded in an interval [from, to] above C + r·(to-from);
	// inside is the number of forwards in it.
	excess   float64
	from, to time.Time
	inside   int
}

func (p limitPacing) held() bool { return p.excess <= p.slack }

// invariantCheck is the verdict on one run.
type invariantCheck struct {
	published int      // distinct jobs published
	forwarded int      // forwards read from the output stream (a job forwarded twice counts twice)
	dead      int      // jobs dead-lettered (none expected)
	lost      []string // published, neither forwarded nor dead-lettered
	twice     []string // forwarded more than once
	unknown   []string // forwarded but never published
	degraded  int      // forwards marked fail-open
	pacing    []limitPacing
}

// checkInvariants checks forwarded (the output stream's messages, in any order) and dead (the
// dead-letter stream's) against published (payload → tenant) and the tenants' plans.
func checkInvariants(published map[string]string, forwarded, dead []job, tenants []checkedTenant) invariantCheck {
	c := invariantCheck{published: len(published), forwarded: len(forwarded), dead: len(dead)}
	seen := make(map[string]int, len(forwarded))
	for _, j := range forwarded {
		seen[j.payload]++
		if j.header.Get(wire.HeaderDegraded) == wire.DegradedFailOpen {
			c.degraded++
		}
	}
	settled := make(map[string]bool, len(dead))
	for _, j := range dead {
		settled[j.payload] = true
	}
	for p := range published {
		if seen[p] == 0 && !settled[p] {
			c.lost = append(c.lost, p)
		}
	}
	for p, n := range seen {
		if n > 1 {
			c.twice = append(c.twice, p)
		}
		if _, ok := published[p]; !ok {
			c.unknown = append(c.unknown, p)
		}
	}
	slices.Sort(c.lost)
	slices.Sort(c.twice)
	slices.Sort(c.unknown)

	byTenant := map[string][]job{}
	for _, j := range forwarded {
		tn := j.header.Get(wire.HeaderTenant)
		byTenant[tn] = append(byTenant[tn], j)
	}
	for _, tn := range tenants {
		var times []time.Time
		var weights []float64
		degraded := 0
		for _, j := range byTenant[tn.name] {
			if j.header.Get(wire.HeaderDegraded) == wire.DegradedFailOpen {
				degraded++ // forwarded without a decision; those decided locally (Admit-Degraded: local) count
				continue
			}
			w, _ := strconv.Atoi(j.header.Get(wire.HeaderWeight))
			times, weights = append(times, j.stored), append(weights, float64(max(w, 1)))
		}
		for _, l := range tn.limits {
			e, from, to := worstWeightedWindow(times, weights, l.capacity, l.rate)
			// A forward stored less than lateUncharged after its decision is not charged for its
			// lateness (README, invariant 1): up to r·lateUncharged more may land beside it.
			slack := tn.slack + l.rate*lateUncharged.Seconds()
			c.pacing = append(c.pacing, limitPacing{tenant: tn.name, limit: l, slack: slack, decided: len(times),
				degraded: degraded, excess: e, from: from, to: to, inside: countBetween(times, from, to)})
		}
	}
	return c
}

// pacingHeld is the number of limits whose bound held, of all checked.
func (c invariantCheck) pacingHeld() (held, all int) {
	for _, p := range c.pacing {
		if p.held() {
			held++
		}
	}
	return held, len(c.pacing)
}

// report fails t for every invariant broken, naming intervals relative to start.
func (c invariantCheck) report(t *testing.T, start time.Time) {
	t.Helper()
	if len(c.lost) > 0 {
		t.Errorf("%d of %d jobs lost (neither forwarded nor dead-lettered), e.g. %v", len(c.lost), c.published, c.lost[:min(len(c.lost), 10)])
	}
	if len(c.twice) > 0 {
		t.Errorf("%d jobs forwarded more than once, e.g. %v", len(c.twice), c.twice[:min(len(c.twice), 10)])
	}
	if len(c.unknown) > 0 {
		t.Errorf("%d forwards of jobs never published, e.g. %v", len(c.unknown), c.unknown[:min(len(c.unknown), 10)])
	}
	if c.dead > 0 {
		t.Errorf("%d jobs dead-lettered", c.dead)
	}
	for _, p := range c.pacing {
		if !p.held() {
			t.Errorf("tenant %s: %.2f over C %v + r %v·t in [%.2fs, %.2fs] (%d forwarded there; slack %v)", p.tenant, p.excess,
				p.limit.capacity, p.limit.rate, p.from.Sub(start).Seconds(), p.to.Sub(start).Seconds(), p.inside, p.slack)
		}
	}
}

// worstWindow is worstWeightedWindow with every weight 1: the largest excess, over every
// interval [times[i], times[j]], of the jobs forwarded in it above C + r·(times[j]-times[i]):
// zero or less when the pacing upper bound holds everywhere.
func worstWindow(times []time.Time, capacity, rate float64) (excess float64, from, to time.Time) {
	return worstWeightedWindow(times, nil, capacity, rate)
}

// worstWeightedWindow is the largest excess, over every interval [times[i], times[j]], of the
// weight forwarded in it above C + r·(times[j]-times[i]), and that interval. Weights nil means
// 1 each; times need not be sorted. O(n log n): the excess of [i, j] is (W_j - r·t_j) +
// (r·t_i - W_<i) - C with W the running weight, maximised over i ≤ j with a running maximum.
func worstWeightedWindow(times []time.Time, weights []float64, capacity, rate float64) (excess float64, from, to time.Time) {
	weight := func(i int) float64 {
		if weights == nil {
			return 1
		}
		return weights[i]
	}
	idx := make([]int, len(times))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return times[a].Compare(times[b]) })
	excess = -capacity - 1
	best, bestAt := 0.0, time.Time{}
	prefix := 0.0 // weight before the current job
	for k, i := range idx {
		ts := times[i].Sub(times[idx[0]]).Seconds()
		if v := rate*ts - prefix; k == 0 || v > best {
			best, bestAt = v, times[i]
		}
		prefix += weight(i)
		if e := prefix - rate*ts + best - capacity; e > excess {
			excess, from, to = e, bestAt, times[i]
		}
	}
	return excess, from, to
}

// countBetween is the number of times in [from, to].
func countBetween(times []time.Time, from, to time.Time) int {
	n := 0
	for _, at := range times {
		if !at.Before(from) && !at.After(to) {
			n++
		}
	}
	return n
}

// TestWorstWindow checks the window check itself on known arrival patterns.
func TestWorstWindow(t *testing.T) {
	base := time.Unix(1000, 0)
	at := func(ms ...int) []time.Time {
		var out []time.Time
		for _, m := range ms {
			out = append(out, base.Add(time.Duration(m)*time.Millisecond))
		}
		return out
	}
	// C=2, r=10/s: a burst of 2, then one every 100ms, is exactly on the bound.
	if e, _, _ := worstWindow(at(0, 0, 100, 200, 300), 2, 10); e > 1e-9 {
		t.Errorf("paced arrivals: excess %v, want ≤ 0", e)
	}
	// Three at once exceed C=2 by one.
	if e, _, _ := worstWindow(at(0, 100, 100, 100), 2, 10); e < 0.999 {
		t.Errorf("burst of three: excess %v, want ≥ 1", e)
	}
	// A late burst after a quiet stretch: the excess is found inside, not from the start.
	if e, from, _ := worstWindow(at(0, 1000, 5000, 5000, 5000, 5001), 2, 10); e < 1.98 || !from.Equal(base.Add(5*time.Second)) {
		t.Errorf("late burst: excess %v from %v, want ≥ 1.98 from 5s", e, from.Sub(base))
	}
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

// TestCheckInvariants: the checker finds a lost job, a job forwarded twice, a stranger, and a
// burst over the bound, and leaves fail-open forwards out of the pacing.
func TestCheckInvariants(t *testing.T) {
	base := time.Unix(1000, 0)
	fwd := func(payload string, ms int, weight string, degraded bool) job {
		h := map[string][]string{wire.HeaderTenant: {"ant"}}
		if weight != "" {
			h[wire.HeaderWeight] = []string{weight}
		}
		if degraded {
			h[wire.HeaderDegraded] = []string{wire.DegradedFailOpen}
		}
		return job{payload: payload, header: h, stored: base.Add(time.Duration(ms) * time.Millisecond)}
	}
	tenants := []checkedTenant{{name: "ant", limits: []bucketLimit{{4, 8}}, slack: 2}}
	published := map[string]string{"a": "ant", "b": "ant", "c": "ant", "d": "ant"}
	ok := checkInvariants(published, []job{fwd("a", 0, "2", false), fwd("b", 0, "2", false), fwd("c", 10, "", true), fwd("d", 10, "", true)}, nil, tenants)
	if len(ok.lost)+len(ok.twice)+len(ok.unknown) != 0 || ok.degraded != 2 {
		t.Errorf("a clean run: %+v", ok)
	}
	if held, all := ok.pacingHeld(); held != 1 || all != 1 || ok.pacing[0].decided != 2 {
		t.Errorf("a clean run's pacing: %+v", ok.pacing)
	}
	bad := checkInvariants(published, []job{fwd("a", 0, "3", false), fwd("a", 0, "3", false), fwd("b", 5, "3", false), fwd("x", 6, "", false)}, nil, tenants)
	if !slices.Equal(bad.lost, []string{"c", "d"}) || !slices.Equal(bad.twice, []string{"a"}) || !slices.Equal(bad.unknown, []string{"x"}) {
		t.Errorf("lost %v, twice %v, unknown %v", bad.lost, bad.twice, bad.unknown)
	}
	if held, _ := bad.pacingHeld(); held != 0 || bad.pacing[0].inside != 4 {
		t.Errorf("a burst of 10 at once on C=4 held: %+v", bad.pacing)
	}
	deadOnly := checkInvariants(map[string]string{"a": "ant"}, nil, []job{{payload: "a"}}, tenants)
	if len(deadOnly.lost) != 0 || deadOnly.dead != 1 {
		t.Errorf("a dead-lettered job counts as lost: %+v", deadOnly)
	}
}

// loadTenant is a tenant of a load: the jobs it publishes per second and the largest weight it
// gives them (each job's weight is drawn from 1 to maxW).
type loadTenant struct {
	name string
	rate float64
	maxW int
	// With every set, the tenant publishes at burst jobs/s instead for the first lasting of each
	// period of length every, shifted by phase.
	burst                 float64
	every, lasting, phase time.Duration
}

// rateAt is the tenant's rate at elapsed since the load started.
func (tn loadTenant) rateAt(elapsed time.Duration) float64 {
	if tn.every > 0 && (elapsed+tn.phase)%tn.every < tn.lasting {
		return tn.burst
	}
	return tn.rate
}

// load publishes jobs of many tenants at their rates through faults: a publish that fails is
// retried with the same Nats-Msg-Id (the input stream drops the repeat) until it is stored. A
// job counts as published once its PubAck arrived; its payload (tenant-n) names it.
type load struct {
	begin     time.Time
	stop      chan struct{}
	halt      sync.Once
	wg        sync.WaitGroup
	mu        sync.Mutex
	published map[string]string // payload → tenant
	weight    map[string]int    // tenant → weight published
	errs      []error
}

// publishRetryFor bounds the retries of one publish: a job not stored within it is an error.
const publishRetryFor = 2 * time.Minute

// startLoad starts publishers goroutines, each on its own connection to natsURL and with its
// share of the tenants (tenant k goes to publisher k mod publishers), drawing weights from a
// generator seeded with seed. finish stops them.
func startLoad(t *testing.T, natsURL string, seed uint64, tenants []loadTenant, publishers int) *load {
	t.Helper()
	l := &load{begin: time.Now(), stop: make(chan struct{}), published: map[string]string{}, weight: map[string]int{}}
	t.Cleanup(l.halted) // a test that ends early stops its load too
	for p := range publishers {
		var mine []loadTenant
		for k, tn := range tenants {
			if k%publishers == p {
				mine = append(mine, tn)
			}
		}
		if len(mine) == 0 {
			continue
		}
		nc, err := nats.Connect(natsURL, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(seed, uint64(2+p)))
		l.wg.Go(func() {
			defer nc.Close()
			l.publish(js, rng, mine)
		})
	}
	return l
}

// publish is one publisher: the tenant due first goes next.
func (l *load) publish(js jetstream.JetStream, rng *rand.Rand, tenants []loadTenant) {
	next := make([]time.Time, len(tenants))
	sent := make([]int, len(tenants))
	for {
		i := 0
		for k := range next {
			if next[k].Before(next[i]) {
				i = k
			}
		}
		select {
		case <-l.stop:
			return
		case <-time.After(time.Until(next[i])):
		}
		tn := tenants[i]
		weight := 1 + rng.IntN(tn.maxW)
		payload := fmt.Sprintf("%s-%d", tn.name, sent[i])
		m := nats.NewMsg("jobs.submit." + tn.name + ".work")
		m.Data = []byte(payload)
		m.Header.Set(wire.HeaderWeight, strconv.Itoa(weight))
		if err := publishRetrying(js, m, "load-"+payload); err != nil {
			l.mu.Lock()
			l.errs = append(l.errs, fmt.Errorf("job %s: %w", payload, err))
			l.mu.Unlock()
			return
		}
		l.mu.Lock()
		l.published[payload] = tn.name
		l.weight[tn.name] += weight
		l.mu.Unlock()
		sent[i]++
		next[i] = time.Now().Add(time.Duration(float64(time.Second) / tn.rateAt(time.Since(l.begin))))
	}
}

// halted stops the publishers and waits for them; safe to call twice.
func (l *load) halted() {
	l.halt.Do(func() { close(l.stop) })
	l.wg.Wait()
}

// publishRetrying publishes m with the Msg-Id id until it is stored, for publishRetryFor.
func publishRetrying(js jetstream.JetStream, m *nats.Msg, id string) error {
	begin := time.Now()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := js.PublishMsg(ctx, m, jetstream.WithMsgID(id))
		cancel()
		if err == nil {
			return nil
		}
		if time.Since(begin) > publishRetryFor {
			return fmt.Errorf("not stored after %v: %w", publishRetryFor, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// finish stops the publishers, waits for them (each is bounded by publishRetryFor), fails t on
// a job that could not be stored, and returns what was published (payload → tenant).
func (l *load) finish(t *testing.T) map[string]string {
	t.Helper()
	l.halted()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, err := range l.errs {
		t.Errorf("load: %v", err)
	}
	return l.published
}
