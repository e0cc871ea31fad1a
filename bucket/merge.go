package bucket

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// What a replica decided on its copy of a tenant's state during an outage (see Fallback) is
// charged to Redis when it answers again as a difference: the copy at the outage's start (its
// base) against the copy now, applied on top of what Redis holds (lua/merge.lua). A difference
// rather than the copy itself, so that what another replica charged Redis meanwhile is kept, and
// so that what the copy took for forgotten (a tenant it did not know: see Plan.forgotten) is not
// charged as if it had been used; but the leases released on the copy are dropped on Redis,
// whether the copy held them or not (memState.released).

// tenantDelta is the difference of one tenant's copy over an outage, ready for merge.lua.
type tenantDelta struct {
	// limits is ARGV[2] of merge.lua: per limit of the plan a count and its values, then the
	// recent decisions.
	limits []byte
	stored int64
	empty  bool // nothing to charge
}

// unnamedLease is a lease without an id as a copy holds it, but its weight: the forgotten slots
// keep their end and tag as the jobs they stand for report (their weight shrinks).
type unnamedLease struct {
	death int64
	tag   leaseTag
}

// unnamedLeases is the weight of w's leases without an id, by lease.
func unnamedLeases(w work) map[unnamedLease]int64 {
	n := map[unnamedLease]int64{}
	for j, e := range w.log {
		if w.tags[j].id == 0 {
			n[unnamedLease{e.death, w.tags[j]}] += e.weight
		}
	}
	return n
}

// outageDelta is what tenant's copy cur (nil: none) holds beyond base under plan p at now (µs):
// base is the copy when it began deciding the tenant at from (µs), nil when the copy took it as
// forgotten then; a limit without a record is then used as Plan.forgotten says, otherwise full.
func outageDelta(p *Plan, base, cur *memState, from, now int64) tenantDelta {
	var sh memShard
	born := int64(0)
	if base == nil {
		born = from
	}
	bs := slices.Clone(sh.loadInto(&[]work{}, base, p, from, born))
	cs := sh.loadInto(&[]work{}, cur, p, now, born)
	d := tenantDelta{empty: true}
	b := make([]byte, 0, 64)
	for i := range p.specs {
		sp := &p.specs[i]
		switch sp.kind {
		case KindBucket:
			// The copy's takes not refilled by now, beyond what the base owed.
			if inc := cs[i].tat - max(bs[i].tat, now); inc > 0 {
				b = packInts(b, 1, inc)
				d.empty = false
			} else {
				b = packInts(b, 0)
			}
		case KindConcurrency:
			var put []int64
			unnamed := unnamedLeases(bs[i])
			for j, e := range cs[i].log {
				tag := cs[i].tags[j]
				if tag.id == 0 {
					// A lease nobody can name: the base's (the forgotten slots, or a request's
					// lease Redis holds) are Redis's own; one taken on the copy (a request's)
					// is added beside the others.
					k := unnamedLease{e.death, tag}
					if w := e.weight - unnamed[k]; w > 0 {
						put = append(put, e.death, w, 0, tag.at)
					}
					unnamed[k] = max(unnamed[k]-e.weight, 0)
					continue
				}
				k := slices.IndexFunc(bs[i].tags, func(t leaseTag) bool { return t.id == tag.id })
				if k < 0 || bs[i].log[k] != e {
					put = append(put, e.death, e.weight, tag.id, tag.at)
				}
			}
			var drop []int64
			for j := range bs[i].log {
				// released on the copy, or ended there (counted there: not by Redis again)
				drop = append(drop, bs[i].tags[j].id)
			}
			if cur != nil {
				drop = append(drop, cur.released...) // released on the copy, which did not hold them
			}
			drop = slices.DeleteFunc(drop, func(id int64) bool {
				return id == 0 || slices.ContainsFunc(cs[i].tags, func(t leaseTag) bool { return t.id == id })
			})
			slices.Sort(drop)
			drop = slices.Compact(drop)
			b = packInts(b, int64(len(put)))
			b = packInts(b, put...)
			b = packInts(b, int64(len(drop)))
			b = packInts(b, drop...)
			d.empty = d.empty && len(put) == 0 && len(drop) == 0
		default:
			var add []int64
			for _, e := range cs[i].log {
				w := e.weight
				for _, f := range bs[i].log {
					if f.death == e.death {
						w -= f.weight
					}
				}
				if w > 0 {
					add = append(add, e.death, w)
				}
			}
			b = packInts(b, int64(len(add)))
			b = packInts(b, add...)
			d.empty = d.empty && len(add) == 0
		}
	}
	var marks []int64
	if cur != nil {
		for _, m := range cur.marks {
			if m.at >= from && (base == nil || !slices.Contains(base.marks, m)) {
				marks = append(marks, m.job, m.at)
			}
		}
		if base == nil || cur.stored > base.stored {
			d.stored = cur.stored
		}
	}
	b = packInts(b, int64(len(marks)/2))
	b = packInts(b, marks...)
	var hold int64 // a hold the downstream asked for on the copy
	if cur != nil && cur.hold > now && cur.hold > base.holdAt() {
		hold = cur.hold
	}
	d.limits = packInts(b, hold)
	d.empty = d.empty && len(marks) == 0 && d.stored == 0 && hold == 0
	return d
}

// mergeTenant charges tenant's state on Redis with d (lua/merge.lua).
func (r *Redis) mergeTenant(ctx context.Context, tenant string, p *Plan, d tenantDelta) error {
	if d.empty || p.Shadow {
		return nil
	}
	_, err := r.run(ctx, r.merge, func() (keys, args []string) {
		arg := make([]byte, 0, 8*7+len(p.packed)+p.calendarsLen())
		arg = packInts(arg, r.now(), r.born.at.Load(), r.redeem, r.pad, d.stored, int64(len(p.Limits)), r.markerTag())
		arg = p.calendars(append(arg, p.packed...), r.estimate(), r.reach)
		return r.keys(tenant), []string{string(arg), string(d.limits)}
	})
	if err != nil {
		return fmt.Errorf("bucket: redis merge of tenant %q after an outage: %w", tenant, err)
	}
	return nil
}

// mergePool charges pool p on Redis with what the copy holds of it after an outage (see
// poolDelta): the tokens its bucket took, the leases taken on the copy, the Redis leases released
// meanwhile, and the downstream's hold.
func (r *Redis) mergePool(ctx context.Context, p *Pool, d poolDelta) error {
	if len(d.leases) == 0 && d.hold == 0 && d.owed == 0 {
		return nil
	}
	var rep Report
	if d.hold > 0 {
		rep = Report{RetryAfter: time.Duration(d.hold) * time.Microsecond, PoolScope: true}
	}
	if _, err := r.poolOp(ctx, poolMerge, p, "", 1, d.leases, NoCost, d.owed, rep); err != nil {
		return fmt.Errorf("bucket: redis merge of pool %s after an outage: %w", p.Name, err)
	}
	return nil
}

// probe reports whether Redis answers, and learns when its servers' memory began (see born):
// what a decision needs before it is made again after an outage.
func (r *Redis) probe(ctx context.Context) error {
	if err := r.Ping(ctx); err != nil {
		return err
	}
	return r.refreshBorn(ctx)
}
