// Package activity keeps what this replica's queue decided recently, in memory, bounded
// whatever the number of tenants: per-second counts of the whole replica over the last
// SeriesSeconds, and for the tenants seen most recently (at most MaxTenants of them) their
// counts over the last RateWindow, their latest decision and their last RecentWaits waits (a
// run of identical waits in a row kept as one, with its count and time range: a queue's head
// woken again and again and told each time to wait on the same limit).
//
// The queue (package admission) records into an Index as it applies each verdict; the console
// (package console) reads it. The data goes one way: an Index decides nothing, reads no message,
// talks to no server, and nothing it holds flows back into decisions.
//
// A replica's share (Share, share.go) is what the consoles of the other replicas read of its
// index: a bounded JSON message, written and read here (AppendJSON, ParseShare); the console
// carries it over NATS. MergeTenants, MergeWaits and MergeSeries combine the shares of every
// replica into the cluster's view (merge.go).
//
// Memory: about 1 KiB per tenant (its per-second counts, its recent waits, its names), so at
// most about 10 MiB with the default MaxTenants of 10,000, plus 600 KiB for the replica's
// series. Past MaxTenants, the tenant seen least recently is forgotten first; tenants not seen
// for Retention are not listed.
package activity

import (
	"hash/maphash"
	"slices"
	"sync"
	"time"

	"github.com/admitter/admitter/wire"
)

// Bounds of an Index.
const (
	// SeriesSeconds is how far back the replica's per-second counts go (10 minutes).
	SeriesSeconds = 600
	// RateWindow is the window of a tenant's rates: its last RateWindow complete seconds.
	RateWindow = 10 * time.Second
	// RecentWaits is how many of a tenant's latest waits are kept, a run of identical ones
	// counting as one.
	RecentWaits = 8
	// DefaultMaxTenants bounds the tenants an Index keeps when New is given no bound.
	DefaultMaxTenants = 10_000
	// Retention is how long a tenant with no new decision stays listed.
	Retention = 10 * time.Minute
)

const (
	shards     = 16
	tenantSecs = int(RateWindow/time.Second) + 1 // the window and the second under way
)

// An Event is one job's decision as the queue applied it (its fate), or the head of a queue
// told to wait on (Again).
type Event struct {
	// At is when it was applied.
	At time.Time
	// Tenant and Plan: whose job, under which plan ("" when the tenant has none).
	Tenant, Plan string
	Fate         wire.Fate
	// Again: a job already told to wait, told so again (the head of its queue asked about
	// again): not a new decision, not counted in the series, only remembered as the tenant's
	// latest wait.
	Again bool
	// Weight is the job's weight (0 when it could not be read).
	Weight int64
	// Wait: a job that waits, how long until its weight fits (paused: until the pause ends);
	// a job forwarded after waiting, how long it waited since it was published (0: it did not).
	Wait time.Duration
	// Limit is the limit that bound the decision, by name or index ("" when none did).
	Limit string
	// Code says why a dead job is dead.
	Code wire.Code
}

// A Wait is one of a tenant's recent waits: a job told to wait (again or not), or a job
// forwarded after waiting; or a run of identical waits in a row (Count > 1): jobs told the same
// thing (the same fate, weight and limit, again or not alike) one after the other, such as the
// head of a queue woken again and again and told each time to wait on. A job forwarded after
// waiting is never folded: each is a job of its own.
type Wait struct {
	// At is when it was decided; of a run, when the latest was.
	At     time.Time
	Fate   wire.Fate // one that waits, or admitted (forwarded after waiting Wait)
	Again  bool      // told to wait again (see Event)
	Weight int64
	// Wait is how long it was told to wait (forwarded: how long it waited); of a run, what
	// the latest was told.
	Wait  time.Duration
	Limit string
	// Count is how many waits it stands for: 1, or the length of a run. First is when the
	// first of the run was decided (At when Count is 1).
	Count int
	First time.Time
}

// folds reports whether w, decided next, repeats the line of run: it is folded into it.
func (run Wait) folds(w Wait) bool {
	return run.Fate.Waits() && w.Fate == run.Fate && w.Again == run.Again && w.Weight == run.Weight && w.Limit == run.Limit
}

// fold adds w to the run: one more of its count (w's own count when w is a run too), its time
// range widened, its latest wait kept.
func (run *Wait) fold(w Wait) {
	run.Count = max(run.Count, 1) + max(w.Count, 1)
	first := w.First
	if first.IsZero() {
		first = w.At
	}
	if run.First.IsZero() || first.Before(run.First) {
		run.First = first
	}
	if w.At.After(run.At) {
		run.At, run.Wait = w.At, w.Wait
	}
}

// An Index is the recent activity. Create it with New; the zero value is not usable. It is
// safe for concurrent use; Record does not block on readers for longer than a copy.
type Index struct {
	seed       maphash.Seed
	maxPerShrd int
	shards     [shards]shard
}

type shard struct {
	mu      sync.Mutex
	series  [SeriesSeconds]second
	tenants map[string]*tenant
}

// second is one second's counts: jobs per fate.
type second struct {
	at int64 // unix second
	n  [wire.NumFates]int64
}

type tenant struct {
	name, plan string
	last       int64 // unix ns of the latest event
	secs       [tenantSecs]tsec
	latest     Wait // the latest decision
	waits      [RecentWaits]Wait
	nwaits     int // waits recorded in all (the ring's next slot is nwaits % RecentWaits)
}

type tsec struct {
	at                      int64 // unix second
	admitted, delayed, dead int32
	admittedWeight          int64
}

// New returns an empty index keeping at most maxTenants tenants (DefaultMaxTenants when ≤ 0).
func New(maxTenants int) *Index {
	if maxTenants <= 0 {
		maxTenants = DefaultMaxTenants
	}
	x := &Index{seed: maphash.MakeSeed(), maxPerShrd: max(1, (maxTenants+shards-1)/shards)}
	for i := range x.shards {
		x.shards[i].tenants = make(map[string]*tenant)
	}
	return x
}

// MaxTenants is how many tenants the index keeps at most.
func (x *Index) MaxTenants() int { return x.maxPerShrd * shards }

func (x *Index) shard(tenant string) *shard {
	return &x.shards[maphash.String(x.seed, tenant)%shards]
}

// Record adds one event. It costs a map lookup and a few additions under one of 16 locks.
func (x *Index) Record(e Event) {
	sh := x.shard(e.Tenant)
	sec := e.At.Unix()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !e.Again && e.Fate < wire.NumFates {
		s := &sh.series[uint64(sec)%SeriesSeconds]
		if s.at != sec {
			*s = second{at: sec}
		}
		s.n[e.Fate]++
	}
	t := sh.tenants[e.Tenant]
	if t == nil {
		if len(sh.tenants) >= x.maxPerShrd {
			sh.evictLocked()
		}
		t = &tenant{name: e.Tenant}
		sh.tenants[e.Tenant] = t
	}
	if e.Plan != "" {
		t.plan = e.Plan
	}
	t.last = max(t.last, e.At.UnixNano())
	ts := &t.secs[uint64(sec)%uint64(tenantSecs)]
	if ts.at != sec {
		*ts = tsec{at: sec}
	}
	switch {
	case e.Again:
	case e.Fate.Forwarded():
		ts.admitted++
		ts.admittedWeight += e.Weight
	case e.Fate == wire.FateDelayed || e.Fate == wire.FatePaused:
		ts.delayed++
	case e.Fate == wire.FateDead:
		ts.dead++
	}
	w := Wait{At: e.At, Fate: e.Fate, Again: e.Again, Weight: e.Weight, Wait: e.Wait, Limit: e.Limit, Count: 1, First: e.At}
	t.latest = w
	if e.Fate.Waits() || (e.Fate.Forwarded() && e.Wait > 0) {
		if last := &t.waits[(t.nwaits+RecentWaits-1)%RecentWaits]; t.nwaits > 0 && last.folds(w) {
			last.fold(w)
			return
		}
		t.waits[t.nwaits%RecentWaits] = w
		t.nwaits++
	}
}

// evictLocked forgets the tenant of the shard seen least recently.
func (sh *shard) evictLocked() {
	var oldest *tenant
	for _, t := range sh.tenants {
		if oldest == nil || t.last < oldest.last {
			oldest = t
		}
	}
	if oldest != nil {
		delete(sh.tenants, oldest.name)
	}
}

// A Second is the replica's counts of one second: jobs by fate.
type Second struct {
	At   time.Time
	Jobs [wire.NumFates]int64
}

// Series returns the replica's counts of the n seconds before now's second (at most
// SeriesSeconds), oldest first; seconds without a decision are zero.
func (x *Index) Series(now time.Time, n int) []Second {
	n = min(max(n, 0), SeriesSeconds)
	end := now.Unix() // exclusive: the second under way is not complete
	out := make([]Second, n)
	for i := range out {
		out[i].At = time.Unix(end-int64(n-i), 0)
	}
	for k := range x.shards {
		sh := &x.shards[k]
		sh.mu.Lock()
		for i := range out {
			sec := end - int64(n-i)
			if s := &sh.series[uint64(sec)%SeriesSeconds]; s.at == sec {
				for j := range s.n {
					out[i].Jobs[j] += s.n[j]
				}
			}
		}
		sh.mu.Unlock()
	}
	return out
}

// Tenant is a tenant's recent activity.
type Tenant struct {
	Tenant, Plan string
	// LastSeen is when its latest decision was applied.
	LastSeen time.Time
	// AdmittedWeight is the weight admitted over the last RateWindow (complete seconds), and
	// AdmittedPerSec the same per second; Admitted, Delayed and Dead count its jobs over the
	// same window.
	AdmittedWeight          int64
	AdmittedPerSec          float64
	Admitted, Delayed, Dead int64
	// Latest is its latest decision: Fate, Limit, and for a wait the time it was told (its
	// next slot is Latest.At + Latest.Wait).
	Latest Wait
}

// NextSlot is when the tenant's latest wait ends: zero when its latest decision was no wait.
func (t *Tenant) NextSlot() time.Time {
	if t.Latest.Fate.Waits() {
		return t.Latest.At.Add(t.Latest.Wait)
	}
	return time.Time{}
}

func (t *tenant) view(now time.Time) Tenant {
	v := Tenant{Tenant: t.name, Plan: t.plan, LastSeen: time.Unix(0, t.last), Latest: t.latest}
	end := now.Unix()
	from := end - int64(tenantSecs-1)
	var w int64
	for i := range t.secs {
		s := &t.secs[i]
		if s.at >= from && s.at < end {
			w += s.admittedWeight
			v.Admitted += int64(s.admitted)
			v.Delayed += int64(s.delayed)
			v.Dead += int64(s.dead)
		}
	}
	v.AdmittedWeight, v.AdmittedPerSec = w, float64(w)/RateWindow.Seconds()
	return v
}

// Tenants returns every tenant seen within Retention before now, in no particular order. At
// most MaxTenants.
func (x *Index) Tenants(now time.Time) []Tenant {
	cut := now.Add(-Retention).UnixNano()
	var out []Tenant
	for k := range x.shards {
		sh := &x.shards[k]
		sh.mu.Lock()
		if out == nil {
			out = make([]Tenant, 0, len(sh.tenants)*shards)
		}
		for _, t := range sh.tenants {
			if t.last >= cut {
				out = append(out, t.view(now))
			}
		}
		sh.mu.Unlock()
	}
	return out
}

// Tenant returns tenant's activity and its recent waits, newest first; ok is false when it
// was not seen within Retention.
func (x *Index) Tenant(tenant string, now time.Time) (v Tenant, waits []Wait, ok bool) {
	sh := x.shard(tenant)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := sh.tenants[tenant]
	if t == nil || t.last < now.Add(-Retention).UnixNano() {
		return Tenant{}, nil, false
	}
	n := min(t.nwaits, RecentWaits)
	waits = make([]Wait, 0, n)
	for i := range n {
		waits = append(waits, t.waits[(t.nwaits-1-i)%RecentWaits])
	}
	slices.SortStableFunc(waits, func(a, b Wait) int { return b.At.Compare(a.At) })
	return t.view(now), waits, true
}
