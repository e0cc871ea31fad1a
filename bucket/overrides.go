package bucket

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"
)

// WithTenants returns the plans with some tenants moved to other plans (tenant → plan name);
// p is unchanged. A name that is not a plan of p, or a tenant name that cannot key buckets, is
// an error naming them.
func (p *Plans) WithTenants(overrides map[string]string) (*Plans, error) {
	if len(overrides) == 0 {
		return p, nil
	}
	q := *p
	q.tenants = maps.Clone(p.tenants)
	for _, t := range slices.Sorted(maps.Keys(overrides)) {
		name := overrides[t]
		if err := checkTenant(t); err != nil {
			return nil, err
		}
		if _, ok := p.plans[name]; !ok {
			return nil, fmt.Errorf("bucket: tenant %s is set to plan %q, which the plans do not define (they define %s)", t, name, strings.Join(p.names, ", "))
		}
		q.tenants[t] = name
	}
	return &q, nil
}

// Changes says how one set of plans differs from another.
type Changes struct {
	PlansAdded, PlansRemoved []string // by name, sorted
	// PlansChanged: "name (what changed)", sorted: "gold (limit burst: 5 at 2/s → 10 at 5/s)",
	// "free (share 1 → 3)", "trial (mode shadow → enforce)", "pro (pool none → workers)".
	PlansChanged []string
	// PoolsAdded "name (rule)", PoolsRemoved "name", PoolsChanged "name (old rule → new rule)",
	// sorted: the pools the plans name (a pool no plan names governs nothing).
	PoolsAdded, PoolsRemoved, PoolsChanged       []string
	TenantsAdded, TenantsRemoved, TenantsChanged []string // "tenant: plan" or "tenant: old → new", sorted
	DefaultChanged                               string   // "old → new", or "" when unchanged
}

// Empty reports whether nothing changed.
func (c Changes) Empty() bool {
	return len(c.PlansAdded)+len(c.PlansRemoved)+len(c.PlansChanged)+len(c.PoolsAdded)+len(c.PoolsRemoved)+len(c.PoolsChanged)+
		len(c.TenantsAdded)+len(c.TenantsRemoved)+len(c.TenantsChanged) == 0 && c.DefaultChanged == ""
}

// Diff says what changed from old to p: plans added, removed or changed (limits, mode, pool or
// share), pools added, removed or changed, tenants assigned, unassigned or moved, and the
// default plan.
func (p *Plans) Diff(old *Plans) Changes {
	var c Changes
	for _, name := range p.names {
		o, ok := old.plans[name]
		switch {
		case !ok:
			c.PlansAdded = append(c.PlansAdded, name)
		default:
			if what := planChanges(o, p.plans[name]); len(what) > 0 {
				c.PlansChanged = append(c.PlansChanged, name+" ("+strings.Join(what, "; ")+")")
			}
		}
	}
	for _, name := range old.names {
		if _, ok := p.plans[name]; !ok {
			c.PlansRemoved = append(c.PlansRemoved, name)
		}
	}
	for _, pool := range p.pools {
		i := slices.IndexFunc(old.pools, func(o *Pool) bool { return o.Name == pool.Name })
		switch {
		case i < 0:
			c.PoolsAdded = append(c.PoolsAdded, pool.Name+" ("+pool.describe()+")")
		case *old.pools[i] != *pool:
			c.PoolsChanged = append(c.PoolsChanged, pool.Name+" ("+old.pools[i].describe()+" → "+pool.describe()+")")
		}
	}
	for _, o := range old.pools {
		if !slices.ContainsFunc(p.pools, func(q *Pool) bool { return q.Name == o.Name }) {
			c.PoolsRemoved = append(c.PoolsRemoved, o.Name)
		}
	}
	for _, t := range slices.Sorted(maps.Keys(p.tenants)) {
		o, ok := old.tenants[t]
		switch {
		case !ok:
			c.TenantsAdded = append(c.TenantsAdded, t+": "+p.tenants[t])
		case o != p.tenants[t]:
			c.TenantsChanged = append(c.TenantsChanged, t+": "+o+" → "+p.tenants[t])
		}
	}
	for _, t := range slices.Sorted(maps.Keys(old.tenants)) {
		if _, ok := p.tenants[t]; !ok {
			c.TenantsRemoved = append(c.TenantsRemoved, t+": "+old.tenants[t])
		}
	}
	if old.def != p.def {
		c.DefaultChanged = orNone(old.def) + " → " + orNone(p.def)
	}
	return c
}

// planChanges says how a plan of the same name changed: its limits (by label), its mode, its
// pool and its share; empty when it did not.
func planChanges(old, p *Plan) []string {
	var out []string
	labels := func(pl *Plan) map[string]Limit {
		m := make(map[string]Limit, len(pl.Limits))
		for i, l := range pl.Limits {
			m[l.label(i)] = l
		}
		return m
	}
	was, is := labels(old), labels(p)
	for i, l := range p.Limits {
		label := l.label(i)
		o, ok := was[label]
		switch {
		case !ok:
			out = append(out, "limit "+label+" added: "+l.Rule())
		case o.Rule() != l.Rule():
			out = append(out, "limit "+label+": "+o.Rule()+" → "+l.Rule())
		case !reflect.DeepEqual(o, l):
			out = append(out, "limit "+label+" changed")
		}
	}
	for i, l := range old.Limits {
		if _, ok := is[l.label(i)]; !ok {
			out = append(out, "limit "+l.label(i)+" removed")
		}
	}
	if len(out) == 0 && !reflect.DeepEqual(old.Limits, p.Limits) {
		out = append(out, "limits reordered")
	}
	mode := func(pl *Plan) string {
		if pl.Shadow {
			return "shadow"
		}
		return "enforce"
	}
	if old.Shadow != p.Shadow {
		out = append(out, "mode "+mode(old)+" → "+mode(p))
	}
	pool := func(pl *Plan) string {
		if pl.Pool == nil {
			return "none"
		}
		return pl.Pool.Name
	}
	if pool(old) != pool(p) {
		out = append(out, "pool "+pool(old)+" → "+pool(p))
	}
	if old.share() != p.share() {
		out = append(out, fmt.Sprintf("share %d → %d", old.share(), p.share()))
	}
	if old.MaxWait != p.MaxWait {
		out = append(out, "max_wait "+maxWaitString(old.MaxWait)+" → "+maxWaitString(p.MaxWait))
	}
	if old.PriorityAging != p.PriorityAging {
		out = append(out, "priority_aging "+maxWaitString(old.PriorityAging)+" → "+maxWaitString(p.PriorityAging))
	}
	return out
}

// maxWaitString is a plan's max_wait (or priority_aging) as written in a plans file, or "none".
func maxWaitString(d time.Duration) string {
	if d <= 0 {
		return "none"
	}
	return ShortDuration(d)
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
