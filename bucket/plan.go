package bucket

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"sync/atomic"
	"time"
)

// MaxSpan is the longest time a limit can span (about 285 years): a bucket's capacity ×
// interval, a window. The scripts compute in Lua doubles, exact for integers of µs below 2^53.
const MaxSpan = maxWindow * time.Microsecond

// maxWindow is MaxSpan in µs.
const maxWindow = 1<<53 - 1

// limitID is the stable identity of a limit's state: a 52-bit hash of its label, exact in the
// scripts' Lua numbers. State is kept by id and kind, so a plan that reorders, adds or removes
// limits keeps the state of every limit it still has (by name; unnamed limits by index), and a
// limit whose kind changes starts afresh.
func limitID(label string) int64 {
	h := fnv.New64a()
	h.Write([]byte(label))
	return int64(h.Sum64() & (1<<52 - 1))
}

// label is the limit's name, or its index in the plan when it has none.
func (l Limit) label(i int) string {
	if l.Name != "" {
		return l.Name
	}
	return strconv.Itoa(i)
}

// A Plan is an ordered list of limits. A job of weight w is admitted only when every limit lets
// w through, and then w is taken from every limit, all or nothing. Plans are immutable once
// built and safe for concurrent use.
type Plan struct {
	Name   string
	Limits []Limit
	// Shadow: the plan is trialled, not enforced (plans file: mode: shadow). Every job is
	// admitted now; its decision is still computed, on a state of its own (see Batch), and
	// reported as the wait it would have had (BatchResult.ShadowWaits).
	Shadow bool
	// Pool is the capacity pool the plan's tenants share with those of the other plans naming
	// it (nil: none), and Share the plan's share of it, 1 to MaxShare (0 reads as 1): see Pool.
	// Pools govern the queue's forwards; Decide (a synchronous request) does not ask them.
	Pool  *Pool
	Share int64
	// MaxWait bounds how long a job of the plan may wait, from its store in the input (plans
	// file: max_wait; 0: no bound). A job that cannot be admitted within it is dead-lettered
	// (wire.CodeExpired): see package policy. A job's own Admit-Max-Wait may bound it further.
	MaxWait time.Duration
	// PriorityAging lifts a waiting job of the plan one priority level (wire.HeaderPriority)
	// per whole period it has waited, from its store in the input, to the highest at most
	// (plans file: priority_aging; 0: never), so that a low priority cannot starve: a
	// priority-5 job waiting 2 periods ranks as a priority-3 job just stored, ahead of it.
	PriorityAging time.Duration

	minCapacity int64
	labels      []string
	specs       []spec
	// packed is the plan's part of the scripts' argument: per limit, id, kind and three
	// parameters, little-endian int64s (see lua/state.lua read_limits). The quotas' calendars
	// follow it in each call (see calendars).
	packed []byte
	// quotas holds the index of every quota limit, in plan order; cals their calendars.
	quotas []int
	cals   []atomic.Pointer[calendar]
	// concurrent says that the plan has a concurrency limit: admitted jobs take leases; lease
	// is the shortest of their lengths.
	concurrent bool
	lease      time.Duration
}

// spec is a limit as the decisions use it, in µs.
type spec struct {
	id    int64
	kind  Kind
	cap   int64  // Capacity
	iv    int64  // bucket: Interval
	span  int64  // bucket: Capacity × Interval; window: Window; concurrency: Lease
	grain int64  // window: Grain
	lim   *Limit // quota: for its calendar
}

// NewPlan checks the limits and returns a plan ready for decisions. A limit it refuses is a
// *LimitError.
func NewPlan(name string, limits ...Limit) (*Plan, error) {
	if len(limits) == 0 {
		return nil, fmt.Errorf("bucket: plan %q has no limits", name)
	}
	p := &Plan{Name: name, Limits: append([]Limit(nil), limits...)}
	for i := range p.Limits {
		l := &p.Limits[i]
		bad := func(format string, args ...any) error {
			return &LimitError{Plan: name, Index: i, Label: l.label(i), Msg: fmt.Sprintf(format, args...)}
		}
		s := spec{kind: l.Kind, cap: l.Capacity}
		switch l.Kind {
		case KindBucket:
			if l.Capacity < 1 {
				return nil, bad("capacity must be ≥ 1, got %d", l.Capacity)
			}
			if l.Interval < time.Microsecond || l.Interval%time.Microsecond != 0 {
				return nil, bad("interval must be a whole number of microseconds ≥ 1µs, got %v", l.Interval)
			}
			s.iv = l.Interval.Microseconds()
			if l.Capacity > maxWindow/s.iv {
				return nil, bad("capacity %d takes longer than 285 years to refill", l.Capacity)
			}
			s.span = l.Capacity * s.iv
			if l.Window != 0 || l.Period != NoPeriod || l.Location != nil || l.Lease != 0 {
				return nil, bad("a bucket has no window, period, location or lease")
			}
		case KindWindow, KindQuota:
			if l.Capacity < 1 || l.Capacity > MaxLimit {
				return nil, bad("limit must be 1 to %d, got %d", int64(MaxLimit), l.Capacity)
			}
			if l.Interval != 0 || l.Rate != "" || l.Lease != 0 {
				return nil, bad("a %s has no interval, rate or lease", l.Kind)
			}
			if l.Kind == KindWindow {
				if l.Window < time.Microsecond || l.Window%time.Microsecond != 0 || l.Window > MaxWindow {
					return nil, bad("window must be a whole number of microseconds from 1µs to 100 years, got %v", l.Window)
				}
				if l.Period != NoPeriod || l.Location != nil {
					return nil, bad("a window has no period or location")
				}
				s.span, s.grain = l.Window.Microseconds(), l.Grain().Microseconds()
			} else {
				if l.Period < Minute || l.Period > Month {
					return nil, bad("period must be minute, hour, day, week or month, got %v", l.Period)
				}
				if l.Window != 0 {
					return nil, bad("a quota has no window")
				}
				s.lim = l
				p.quotas = append(p.quotas, i)
			}
		case KindConcurrency:
			if l.Capacity < 1 || l.Capacity > MaxConcurrency {
				return nil, bad("limit must be 1 to %d, got %d", MaxConcurrency, l.Capacity)
			}
			if l.Lease < time.Microsecond || l.Lease%time.Microsecond != 0 || l.Lease > MaxWindow {
				return nil, bad("lease must be a whole number of microseconds from 1µs to 100 years, got %v", l.Lease)
			}
			if l.Interval != 0 || l.Rate != "" || l.Window != 0 || l.Period != NoPeriod || l.Location != nil {
				return nil, bad("a concurrency limit has no interval, rate, window, period or location")
			}
			s.span = l.Lease.Microseconds()
			if !p.concurrent || l.Lease < p.lease {
				p.lease = l.Lease
			}
			p.concurrent = true
		default:
			return nil, bad("unknown kind %v", l.Kind)
		}
		if p.minCapacity == 0 || l.Capacity < p.minCapacity {
			p.minCapacity = l.Capacity
		}
		p.labels = append(p.labels, l.label(i))
		s.id = limitID(l.label(i))
		for j, other := range p.specs {
			if other.id == s.id {
				return nil, bad("shares its state id with limit %s: rename one", p.labels[j])
			}
		}
		p.specs = append(p.specs, s)
		// bucket: capacity, interval; window: limit, window, grain; quota: limit; concurrency:
		// limit, lease.
		x, y := s.iv, int64(0)
		switch s.kind {
		case KindWindow:
			x, y = s.span, s.grain
		case KindConcurrency:
			x = s.span
		}
		p.packed = packInts(p.packed, s.id, int64(s.kind), s.cap, x, y)
	}
	p.cals = make([]atomic.Pointer[calendar], len(p.quotas))
	return p, nil
}

// Leases reports whether the plan's jobs take leases, to be released (Release) or renewed
// (Renew) by their lease id: it has a concurrency limit, or its pool has a concurrency.
func (p *Plan) Leases() bool { return p.concurrent || (p.Pool != nil && p.Pool.Concurrency > 0) }

// Lease is how long an admitted job holds its lease unless released or renewed: the shortest
// Lease of the plan's concurrency limits and of its pool's (the first to end). Zero when it
// takes none.
func (p *Plan) Lease() time.Duration {
	l := p.lease
	if p.Pool != nil && p.Pool.Concurrency > 0 && (l == 0 || p.Pool.Lease < l) {
		l = p.Pool.Lease
	}
	return l
}

// MaxWeight is the largest weight the plan can ever admit: its smallest capacity (a bucket's
// burst, a window's or a quota's limit), and its pool's.
func (p *Plan) MaxWeight() int64 {
	if p.Pool != nil {
		return min(p.minCapacity, p.Pool.maxWeight())
	}
	return p.minCapacity
}

// A calendar is a quota's period boundaries over a stretch of time, for the scripts (Lua has no
// time zones): every boundary from lo, at or before the stretch, to hi, after it.
type calendar struct {
	lo, hi int64  // µs: the first and last boundary
	packed []byte // the count, then the boundaries (int64s)
}

// calMargin is how far the Redis server's clock may be from this host's before a quota's
// calendar fails to cover it (the script then refuses the call with an error).
const calMargin = int64(2 * time.Minute / time.Microsecond)

// calendars appends to b, for every quota of the plan in order, a calendar covering
// [est-calMargin, est+reach]: est is this host's estimate of the server's time (µs), reach how
// far ahead a take may be made. Calendars are cached; a new one is built (and cached) only when
// the cached one does not cover the stretch.
func (p *Plan) calendars(b []byte, est, reach int64) []byte {
	for q, i := range p.quotas {
		c := p.cals[q].Load()
		if c == nil || c.lo > est-calMargin || est+reach >= c.hi {
			c = newCalendar(&p.Limits[i], est-calMargin, est+2*reach+calMargin)
			p.cals[q].Store(c)
		}
		b = append(b, c.packed...)
	}
	return b
}

// calendarsLen is how many bytes calendars will append (an estimate that is exact when the
// cache holds, to size a buffer).
func (p *Plan) calendarsLen() int {
	n := 0
	for q := range p.quotas {
		if c := p.cals[q].Load(); c != nil {
			n += len(c.packed)
		} else {
			n += 8 * 16
		}
	}
	return n
}

// newCalendar lists l's period boundaries from the last one at or before from to the first one
// after to.
func newCalendar(l *Limit, from, to int64) *calendar {
	start, end := l.PeriodBounds(time.UnixMicro(from))
	bs := []int64{start.UnixMicro(), end.UnixMicro()}
	for end.UnixMicro() <= to {
		_, end = l.PeriodBounds(end)
		bs = append(bs, end.UnixMicro())
	}
	c := &calendar{lo: bs[0], hi: bs[len(bs)-1]}
	c.packed = packInts(make([]byte, 0, 8*(len(bs)+1)), int64(len(bs)))
	c.packed = packInts(c.packed, bs...)
	return c
}
