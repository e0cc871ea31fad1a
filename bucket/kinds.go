package bucket

import (
	"github.com/admitter/admitter/lua"

	"math"
	"slices"
	"time"
)

// The arithmetic of every limit kind, in µs, shared by the in-process backend and by snapshots.
// It mirrors lua/state.lua function by function; the differential test holds them together.
//
// A bucket is GCRA state: tat, the time at which it is full again (no earlier than now). A
// bucket of capacity C refilling one token every I µs holds (C·I − (tat − now)) / I tokens at
// now; weight w fits at s when max(tat, s) + w·I − s ≤ C·I, and taking it at s moves tat to
// max(tat, s) + w·I.
//
// A window and a quota are a log of takes, each counted until its death: a window's take at s
// dies at ⌈s/grain⌉·grain + window, a quota's at the end of the calendar period holding s. At
// time s a log counts used(s), the weight of the takes whose death is after s; weight w fits at
// s when used(s) + w ≤ limit. used only falls as s grows, so the earliest fit is found walking
// the deaths in order, and it holds at every later time: all limits fit at the latest of their
// earliest fits, which makes waits exact. Since the count at s includes takes booked after s,
// admitting w at s keeps every interval of a window, and every period of a quota, within the
// limit, bookings included.

// entry is a take a window or a quota still counts: weight, until death (µs).
type entry struct{ death, weight int64 }

// work is one limit's state during a decision: a bucket's tat, or a window's or quota's log
// (sorted by death, one entry per death), or a concurrency limit's leases: a log sorted by death
// (then by when taken), one entry per lease, and their tags beside it.
type work struct {
	tat  int64
	log  []entry
	tags []leaseTag
}

// leaseTag is a lease's identity beside its log entry: the id it is released or renewed by (0:
// none) and when it was taken (µs).
type leaseTag struct{ id, at int64 }

// used is the weight log counts at s.
func used(log []entry, s int64) int64 {
	u := int64(0)
	for _, e := range log {
		if e.death > s {
			u += e.weight
		}
	}
	return u
}

// logFit is the earliest time ≥ s at which weight w fits under lim.
func logFit(log []entry, lim, s, w int64) int64 {
	u := used(log, s)
	if u+w <= lim {
		return s
	}
	for j, e := range log {
		if e.death > s {
			u -= e.weight
			if u+w <= lim && (j+1 == len(log) || log[j+1].death > e.death) {
				return e.death
			}
		}
	}
	return s
}

// logAdd records weight w dying at d, keeping log sorted and one entry per death.
func logAdd(log []entry, d, w int64) []entry {
	j := len(log) - 1
	for j >= 0 && log[j].death > d {
		j--
	}
	if j >= 0 && log[j].death == d {
		log[j].weight += w
		return log
	}
	log = append(log, entry{})
	copy(log[j+2:], log[j+1:])
	log[j+1] = entry{d, w}
	return log
}

// death is when a take at s leaves limit s (a window or a quota).
func (s *spec) death(at int64) int64 {
	if s.kind == KindWindow {
		return ceilDiv(at, s.grain)*s.grain + s.span
	}
	return s.lim.periodEnd(at)
}

// ceilDiv is ⌈a/b⌉ for a ≥ 0, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// slot is the earliest time ≥ now at which weight w fits every limit, and the binding limit
// (the first whose own earliest fit is that time, when it is after now).
func (p *Plan) slot(ws []work, now, w int64) (s, bind int64) {
	s = now
	for i := range p.specs {
		sp := &p.specs[i]
		var si int64
		if sp.kind == KindBucket {
			si = ws[i].tat + w*sp.iv - sp.span
		} else {
			si = logFit(ws[i].log, sp.cap, now, w)
		}
		if si > s {
			s, bind = si, int64(i)
		}
	}
	return s, bind
}

// take charges weight w to every limit at time s; a concurrency limit takes lease id (a job
// already holding one gives it up first: one lease per job).
func (p *Plan) take(ws []work, s, w, id int64) {
	for i := range p.specs {
		sp := &p.specs[i]
		switch sp.kind {
		case KindBucket:
			ws[i].tat = max(ws[i].tat, s) + w*sp.iv
		case KindConcurrency:
			if id != 0 {
				if j := ws[i].leaseFind(id); j >= 0 {
					ws[i].leaseDrop(j)
				}
			}
			ws[i].leasePut(s+sp.span, w, leaseTag{id, s})
		default:
			ws[i].log = logAdd(ws[i].log, sp.death(s), w)
		}
	}
}

// leaseFind is the index of lease id, or -1.
func (wk *work) leaseFind(id int64) int {
	for j, t := range wk.tags {
		if t.id == id {
			return j
		}
	}
	return -1
}

// leaseDrop removes the lease at j and returns its entry and tag.
func (wk *work) leaseDrop(j int) (entry, leaseTag) {
	e, t := wk.log[j], wk.tags[j]
	wk.log = append(wk.log[:j], wk.log[j+1:]...)
	wk.tags = append(wk.tags[:j], wk.tags[j+1:]...)
	return e, t
}

// leasePut adds a lease of weight w dying at d, after those dying no later.
func (wk *work) leasePut(d, w int64, t leaseTag) {
	j := len(wk.log) - 1
	for j >= 0 && wk.log[j].death > d {
		j--
	}
	wk.log = slices.Insert(wk.log, j+1, entry{d, w})
	wk.tags = slices.Insert(wk.tags, j+1, t)
}

// remaining is the whole weight every limit lets through now (the minimum, never negative) and
// the limit holding it.
func (p *Plan) remaining(ws []work, now int64) (int64, int64) {
	best, bi := int64(-1), int64(0)
	for i := range p.specs {
		sp := &p.specs[i]
		var r int64
		if sp.kind == KindBucket {
			r = max((sp.span-(ws[i].tat-now))/sp.iv, 0)
		} else {
			r = max(sp.cap-used(ws[i].log, now), 0)
		}
		if best < 0 || r < best {
			best, bi = r, int64(i)
		}
	}
	return best, bi
}

// life is how long from now any of ws still matters: a bucket until it is full, a log until
// its last take dies.
func (p *Plan) life(ws []work, now int64) int64 {
	life := int64(0)
	for i := range p.specs {
		if p.specs[i].kind == KindBucket {
			life = max(life, ws[i].tat-now)
		} else if log := ws[i].log; len(log) > 0 {
			life = max(life, log[len(log)-1].death-now)
		}
	}
	return life
}

// forgotten is the state of limit i when nothing is known of it at now. Unless memory was lost
// (born µs: when; 0: nothing was lost, a tenant never seen) the limit is unused. Otherwise it
// was used up to a stated bound at born: a bucket was empty at born and has refilled since; a
// window counted its whole limit until born + window; a quota, the share of its period elapsed
// at born (limit × elapsed / period, rounded down: never blocked for the rest of the period)
// until the period's end; a concurrency limit, its whole limit in flight until born + lease.
// log and tags are buffers to reuse. lua/state.lua load is its twin.
func (p *Plan) forgotten(i int, now, born int64, log []entry, tags []leaseTag) work {
	sp := &p.specs[i]
	if sp.kind == KindBucket {
		return work{tat: max(born+sp.span, now), log: log, tags: tags}
	}
	if sp.kind == KindConcurrency {
		// every job in flight when memory began holds a lease nobody can name, until they report
		if end := phantomEnd(born, sp.span); born > 0 && end > now {
			return work{log: append(log, entry{end, sp.cap}), tags: append(tags, leaseTag{0, born})}
		}
		return work{log: log, tags: tags}
	}
	if born > 0 {
		d, w := born+sp.span, sp.cap
		if sp.kind == KindQuota {
			start, end := sp.lim.PeriodBounds(time.UnixMicro(born))
			d = end.UnixMicro()
			// in doubles, in the order the script computes it, for the same rounding
			w = int64(math.Floor(float64(sp.cap) * float64(born-start.UnixMicro()) / float64(d-start.UnixMicro())))
		}
		if d > now && w > 0 {
			log = append(log, entry{d, w})
		}
	}
	return work{log: log, tags: tags}
}

// phantomEnd is when the slots of a concurrency limit or a pool with a lease of `lease` µs,
// forgotten at born, stop being counted: lua.PhantomPercent of the lease after born (lua/state.lua
// phantom_end, in the same integer steps).
func phantomEnd(born, lease int64) int64 {
	q := lease / 100
	return born + q*lua.PhantomPercent + ((lease-100*q)*lua.PhantomPercent+99)/100
}
