//go:build sim

package bucket

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// The simulation's checker: a model of what the plans allow, independent of how the limiters
// decide. It is told every weight a limiter let through (a job admitted and forwarded, a request
// allowed), at its simulated time, and every job in flight as the workers' reports leave it, and
// it checks the README's invariants against them after every event:
//
//   - each bucket at most C + r·t over every interval (a GCRA conformance test: exact, O(1));
//   - each window at most its limit in any interval of its length (a take at s counts until
//     s + window, as lua/state.lua counts it);
//   - each quota at most its limit per calendar period;
//   - in flight at most every concurrency limit and pool, a job counted from its admission until
//     its done message or the end of its lease (README invariant 8), a request allowed under a
//     concurrency limit for a lease;
//   - a pool's bucket at most C + r·t;
//
// beside which it grants only what the README and docs/design.md state (allowance, below).

// allowance is a weight the checker lets a tenant's limit exceed its bound by, and why: each is
// granted when the simulation sees the event the documents name, and ends with it.
type allowance struct {
	weight int64
	until  time.Time // the grant ends then (zero: with the outage of replica by)
	by     int       // the replica whose outage it belongs to (-1: none)
	why    string
}

// The allowances, each a sentence of the documents:
const (
	// README "Faults", fail mode local: "+ one capacity for a tenant first decided during the
	// outage" — a tenant no replica's copy knew exactly when it was first decided on one is taken
	// as forgotten then: a bucket empty, a window full, both conservative; a quota the elapsed
	// share of its period, which may be less than it used (its remaining share, at most one
	// limit).
	whyFirstDecided = "a tenant no copy knew, taken as forgotten (README Faults: + one capacity for a tenant first decided during the outage)"
	// docs/design.md §11, fail mode local: "a request ... another replica decided after the
	// tenant's last step is not in it": requests decided on Redis after the deciding replica's
	// copy was last mirrored, up to its switch, may be handed out again on the copy.
	whyUnseen = "requests decided on Redis after the copy's last mirror (design.md §11)"
	// README "Faults", Redis restarted without its data: "a quota the share of its period
	// elapsed"; design.md §11: "A Redis that forgot costs a quota up to the remaining share of
	// its period once".
	whyForgot = "a Redis that forgot: a quota's remaining share of its period (design.md §11)"
)

// A job in flight after a loss (a Redis that forgot, a replica turning local, a tenant or pool
// taken over by another replica's copy) is held by slots nobody can name until its worker
// reports or lua.PhantomPercent of a lease after the loss (README Faults: "concurrency and pool
// slots held until the running jobs report (at most 60 % of a lease)"; design.md §10: "every lease
// copied is held until 60 % of a lease later unless its job reports"): a job whose worker died
// is counted until then at most (flight.capAt).

// simGCRA is a bucket's conformance test: tat is the theoretical arrival time of the next take.
type simGCRA struct {
	iv, span int64 // µs per token; capacity × iv
	tat      int64
	recent   []simTake // the last takes, for a failure
}

// take records w at s; it returns by how much it exceeds the bound (tokens, 0: conforms) before
// and after absorbing at most spare.
func (g *simGCRA) take(s, w, spare int64) (over, used int64) {
	g.recent = append(g.recent, simTake{s, w})
	if len(g.recent) > 24 {
		g.recent = g.recent[1:]
	}
	t := max(g.tat, s) + w*g.iv
	if ex := t - s - g.span; ex > 0 {
		over = (ex + g.iv - 1) / g.iv
		used = min(over, spare)
		t -= used * g.iv
		over -= used
	}
	g.tat = t
	return over, used
}

// giveBack returns g tokens at s (lua/lease.lua: a reported cost below the weight).
func (g *simGCRA) giveBack(s, n int64) { g.tat = max(g.tat-n*g.iv, s) }

// simTake is a window's or quota's take: weight at µs.
type simTake struct{ at, w int64 }

// simLog is a window's or a quota's log of takes.
type simLog struct {
	lim   *Limit
	cap   int64
	takes []simTake // by time
}

// counts is the weight the limit counts at s with a take at s: a window's takes in
// (s − window, s], a quota's in the period holding s.
func (l *simLog) counts(s int64) int64 {
	lo := s - l.lim.Window.Microseconds()
	if l.lim.Kind == KindQuota {
		start, _ := l.lim.PeriodBounds(time.UnixMicro(s))
		lo = start.UnixMicro() - 1
	}
	n := int64(0)
	for _, t := range l.takes {
		if t.at > lo && t.at <= s {
			n += t.w
		}
	}
	return n
}

func (l *simLog) take(s, w, spare int64) (over, used int64) {
	over = max(l.counts(s)+w-l.cap, 0)
	used = min(over, spare)
	over -= used
	if w-used > 0 {
		l.takes = append(l.takes, simTake{s, w - used})
	}
	// Keep what an interval ending now or later may still count: a window's last window, a
	// quota's period (an hour at most here).
	keep := s - max(l.lim.Window.Microseconds(), int64(time.Hour/time.Microsecond))
	if len(l.takes) > 256 && l.takes[0].at < keep {
		i := slices.IndexFunc(l.takes, func(t simTake) bool { return t.at >= keep })
		if i < 0 {
			i = len(l.takes)
		}
		l.takes = slices.Delete(l.takes, 0, i)
	}
	return over, used
}

// giveBack takes n out of the take made at `taken` (lua/lease.lua gives back from the take's
// own slot); it returns what it did not find there (the take was excused by an allowance).
func (l *simLog) giveBack(taken, n int64) int64 {
	for i := range l.takes {
		if l.takes[i].at == taken && n > 0 {
			back := min(n, l.takes[i].w)
			l.takes[i].w -= back
			n -= back
		}
	}
	return n
}

// simBook is one tenant's rate limits (buckets, windows, quotas), by the plan's index; nil at
// a concurrency limit, counted from the flights.
type simBook struct {
	tenant string
	plan   *Plan
	gcra   []*simGCRA
	logs   []*simLog
	spare  [][]allowance // per limit
}

func newSimBook(tenant string, p *Plan) *simBook {
	b := &simBook{tenant: tenant, plan: p, gcra: make([]*simGCRA, len(p.Limits)), logs: make([]*simLog, len(p.Limits)),
		spare: make([][]allowance, len(p.Limits))}
	for i := range p.Limits {
		l := &p.Limits[i]
		switch l.Kind {
		case KindBucket:
			iv := p.specs[i].iv
			b.gcra[i] = &simGCRA{iv: iv, span: l.Capacity * iv}
		case KindWindow, KindQuota:
			b.logs[i] = &simLog{lim: l, cap: l.Capacity}
		}
	}
	return b
}

// spareAt is what limit i's allowances grant at s, live ones only.
func (b *simBook) spareAt(i int, s time.Time) int64 {
	n := int64(0)
	for _, a := range b.spare[i] {
		if a.until.IsZero() || s.Before(a.until) {
			n += a.weight
		}
	}
	return n
}

// use spends n of limit i's allowances at s, the first granted first.
func (b *simBook) use(i int, s time.Time, n int64) {
	for k := range b.spare[i] {
		a := &b.spare[i][k]
		if n == 0 {
			break
		}
		if a.until.IsZero() || s.Before(a.until) {
			d := min(n, a.weight)
			a.weight -= d
			n -= d
		}
	}
	b.spare[i] = slices.DeleteFunc(b.spare[i], func(a allowance) bool { return a.weight == 0 })
}

// take records w let through at s on every rate limit; it returns the first limit exceeded.
func (b *simBook) take(s time.Time, w int64) string {
	us := s.UnixMicro()
	for i := range b.plan.Limits {
		spare := b.spareAt(i, s)
		var over, used int64
		switch {
		case b.gcra[i] != nil:
			over, used = b.gcra[i].take(us, w, spare)
		case b.logs[i] != nil:
			over, used = b.logs[i].take(us, w, spare)
		default:
			continue
		}
		b.use(i, s, used)
		if over > 0 {
			return fmt.Sprintf("tenant %s: %s %s (%s) exceeded by %d (weight %d taken at +%v; allowances left %d); its takes: %s",
				b.tenant, b.plan.Limits[i].Kind, b.plan.labels[i], b.plan.Limits[i].Rule(), over, w, time.UnixMicro(us).Sub(worldStart), spare-used, b.takes(i))
		}
	}
	return ""
}

// giveBack returns n of a job taken at `taken`, at s (Admit-Cost below the weight). What an
// allowance excused of the take goes back to the allowances.
func (b *simBook) giveBack(s, taken time.Time, n int64) {
	for i := range b.plan.Limits {
		switch {
		case b.gcra[i] != nil:
			b.gcra[i].giveBack(s.UnixMicro(), n)
		case b.logs[i] != nil:
			if rest := b.logs[i].giveBack(taken.UnixMicro(), n); rest > 0 {
				l := &b.plan.Limits[i]
				until := taken.Add(l.Window)
				if l.Kind == KindQuota {
					_, until = l.PeriodBounds(taken)
				}
				b.spare[i] = append(b.spare[i], allowance{weight: rest, until: until, by: -1, why: "given back"})
			}
		}
	}
}

// grant adds an allowance to every rate limit of the kinds given (none: all), capped at each
// limit's capacity.
func (b *simBook) grant(a allowance, kinds ...Kind) {
	for i := range b.plan.Limits {
		l := &b.plan.Limits[i]
		if l.Kind == KindConcurrency || (len(kinds) > 0 && !slices.Contains(kinds, l.Kind)) {
			continue
		}
		g := a
		g.weight = min(g.weight, l.Capacity)
		if g.weight > 0 {
			b.spare[i] = append(b.spare[i], g)
		}
	}
}

// grantQuotaShare grants each quota of the plan what a loss at s leaves it beyond what it used:
// its remaining share of the period holding s (lua/state.lua load), until the period's end.
func (b *simBook) grantQuotaShare(s time.Time, by int, why string) {
	for i := range b.plan.Limits {
		l := &b.plan.Limits[i]
		if l.Kind != KindQuota {
			continue
		}
		start, end := l.PeriodBounds(s)
		used := int64(float64(l.Capacity) * float64(s.Sub(start).Microseconds()) / float64(end.Sub(start).Microseconds()))
		b.spare[i] = append(b.spare[i], allowance{weight: l.Capacity - used, until: end, by: by, why: why})
	}
}

// endOutage ends the allowances of replica by's outage, now, once what they allowed can no
// longer matter: what the copy handed out beyond its limit is charged to Redis as a difference
// (merge.go), so that Redis may in turn hand out what the copy did not count, until a bucket
// refills, a window passes or a quota's period ends.
func (b *simBook) endOutage(by int, now time.Time) {
	for i := range b.spare {
		l := &b.plan.Limits[i]
		until := now
		switch l.Kind {
		case KindBucket:
			until = now.Add(time.Duration(l.Capacity) * l.Interval)
		case KindWindow:
			until = now.Add(l.Window)
		case KindQuota:
			_, until = l.PeriodBounds(now)
		}
		for k := range b.spare[i] {
			if a := &b.spare[i][k]; a.until.IsZero() && a.by == by {
				a.until = until
			}
		}
	}
}

// takes lists limit i's latest takes, for a failure.
func (b *simBook) takes(i int) string {
	var ts []simTake
	if g := b.gcra[i]; g != nil {
		ts = g.recent
	} else if l := b.logs[i]; l != nil {
		ts = l.takes[max(len(l.takes)-24, 0):]
	}
	var sb strings.Builder
	for _, t := range ts {
		fmt.Fprintf(&sb, " +%v:%d", time.UnixMicro(t.at).Sub(worldStart), t.w)
	}
	return sb.String()
}
