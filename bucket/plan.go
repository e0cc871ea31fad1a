package bucket

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"strconv"
	"time"
)

// MaxSpan is the longest time a limit can span (about 285 years): a bucket's capacity ×
// interval, a window. The scripts compute in Lua doubles, exact for integers of µs below 2^53.
const MaxSpan = maxWindow * time.Microsecond

// maxWindow is MaxSpan in µs.
const maxWindow = 1<<53 - 1

// A Limit is one token bucket: it holds at most Capacity tokens and refills one token every
// Interval. A bucket nobody has used is full.
type Limit struct {
	// Name identifies the limit in results and logs; empty names are reported by index.
	Name string
	// Capacity is the burst, in tokens (≥ 1).
	Capacity int64
	// Interval is the time to refill one token, a whole number of microseconds (≥ 1µs): the
	// written rate rounded so that the limit is never faster than the plan says.
	Interval time.Duration
	// Rate is the rate as written in the plans file ("10/s"), for display.
	Rate string
}

// PerSecond is the limit's effective refill rate in tokens per second.
func (l Limit) PerSecond() float64 { return float64(time.Second) / float64(l.Interval) }

// limitID is the stable identity of a limit's state: a 52-bit hash of its label, exact in the
// scripts' Lua numbers. State is kept by id, so a plan that reorders, adds or removes limits
// keeps the state of every limit it still has (by name; unnamed limits by index).
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

// A Plan is an ordered list of limits. A job of weight w is admitted only when every limit holds
// w tokens, and then w is taken from every limit. Plans are immutable once built.
type Plan struct {
	Name   string
	Limits []Limit

	minCapacity int64
	labels      []string
	ids         []int64
	// packed is the plan's part of the script argument: id, capacity and interval (µs) per
	// limit, little-endian int64s (see lua/state.lua).
	packed []byte
}

// NewPlan checks the limits and returns a plan ready for decisions. A limit it refuses is a
// *LimitError.
func NewPlan(name string, limits ...Limit) (*Plan, error) {
	if len(limits) == 0 {
		return nil, fmt.Errorf("bucket: plan %q has no limits", name)
	}
	p := &Plan{Name: name, Limits: append([]Limit(nil), limits...)}
	for i, l := range p.Limits {
		bad := func(format string, args ...any) error {
			return &LimitError{Plan: name, Index: i, Label: l.label(i), Msg: fmt.Sprintf(format, args...)}
		}
		if l.Capacity < 1 {
			return nil, bad("capacity must be ≥ 1, got %d", l.Capacity)
		}
		if l.Interval < time.Microsecond || l.Interval%time.Microsecond != 0 {
			return nil, bad("interval must be a whole number of microseconds ≥ 1µs, got %v", l.Interval)
		}
		us := l.Interval.Microseconds()
		if l.Capacity > maxWindow/us {
			return nil, bad("capacity %d takes longer than 285 years to refill", l.Capacity)
		}
		if p.minCapacity == 0 || l.Capacity < p.minCapacity {
			p.minCapacity = l.Capacity
		}
		p.labels = append(p.labels, l.label(i))
		id := limitID(l.label(i))
		for j, other := range p.ids {
			if other == id {
				return nil, bad("shares its state id with limit %s: rename one", p.labels[j])
			}
		}
		p.ids = append(p.ids, id)
		p.packed = binary.LittleEndian.AppendUint64(p.packed, uint64(id))
		p.packed = binary.LittleEndian.AppendUint64(p.packed, uint64(l.Capacity))
		p.packed = binary.LittleEndian.AppendUint64(p.packed, uint64(us))
	}
	return p, nil
}

// MaxWeight is the largest weight the plan can ever admit: its smallest capacity.
func (p *Plan) MaxWeight() int64 { return p.minCapacity }
