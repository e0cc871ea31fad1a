package bucket

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
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
	PlansAdded, PlansRemoved, PlansChanged       []string // by name, sorted
	TenantsAdded, TenantsRemoved, TenantsChanged []string // "tenant: plan" or "tenant: old → new", sorted
	DefaultChanged                               string   // "old → new", or "" when unchanged
}

// Empty reports whether nothing changed.
func (c Changes) Empty() bool {
	return len(c.PlansAdded)+len(c.PlansRemoved)+len(c.PlansChanged)+len(c.TenantsAdded)+len(c.TenantsRemoved)+len(c.TenantsChanged) == 0 &&
		c.DefaultChanged == ""
}

// Diff says what changed from old to p: plans added, removed or with other limits, tenants
// assigned, unassigned or moved, and the default plan.
func (p *Plans) Diff(old *Plans) Changes {
	var c Changes
	for _, name := range p.names {
		o, ok := old.plans[name]
		switch {
		case !ok:
			c.PlansAdded = append(c.PlansAdded, name)
		case !reflect.DeepEqual(o.Limits, p.plans[name].Limits) || o.Shadow != p.plans[name].Shadow:
			c.PlansChanged = append(c.PlansChanged, name)
		}
	}
	for _, name := range old.names {
		if _, ok := p.plans[name]; !ok {
			c.PlansRemoved = append(c.PlansRemoved, name)
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

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
