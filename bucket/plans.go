package bucket

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Plans is the plans in force: named plans, the plans of known tenants, and an optional default
// plan for every other tenant. Package plans reads them from a plans file; NewPlans builds them
// from values.
//
// A Plans is immutable and safe for concurrent use.
type Plans struct {
	plans   map[string]*Plan
	names   []string // sorted
	tenants map[string]string
	def     string
	pools   []*Pool // the plans' pools, by name
}

// NewPlans returns plans holding plans (at least one, with unique non-empty names), assigning
// tenants (tenant → plan name) and, when def is not empty, the plan def to every other tenant.
// Tenant names must be usable as keys (non-empty, without '{' or '}': ErrInvalidTenant). The
// arguments are copied.
func NewPlans(plans []*Plan, tenants map[string]string, def string) (*Plans, error) {
	if len(plans) == 0 {
		return nil, fmt.Errorf("bucket: no plans")
	}
	p := &Plans{plans: make(map[string]*Plan, len(plans)), tenants: make(map[string]string, len(tenants))}
	for _, pl := range plans {
		switch {
		case pl == nil:
			return nil, fmt.Errorf("bucket: a nil plan")
		case pl.Name == "":
			return nil, fmt.Errorf("bucket: a plan without a name")
		}
		if _, dup := p.plans[pl.Name]; dup {
			return nil, fmt.Errorf("bucket: two plans named %q", pl.Name)
		}
		p.plans[pl.Name] = pl
		p.names = append(p.names, pl.Name)
		if pl.Share < 0 || pl.Share > MaxShare || (pl.Share > 1 && pl.Pool == nil) {
			return nil, fmt.Errorf("bucket: plan %q: share %d (want 1 to %d, with a pool)", pl.Name, pl.Share, MaxShare)
		}
		if pl.Pool == nil {
			continue
		}
		i := slices.IndexFunc(p.pools, func(q *Pool) bool { return q.Name == pl.Pool.Name })
		switch {
		case i < 0:
			p.pools = append(p.pools, pl.Pool)
		case *p.pools[i] != *pl.Pool:
			return nil, fmt.Errorf("bucket: two pools named %q", pl.Pool.Name)
		}
	}
	slices.Sort(p.names)
	slices.SortFunc(p.pools, func(a, b *Pool) int { return strings.Compare(a.Name, b.Name) })
	for t, name := range tenants {
		if err := checkTenant(t); err != nil {
			return nil, err
		}
		if _, ok := p.plans[name]; !ok {
			return nil, fmt.Errorf("bucket: tenant %q: no plan named %q", t, name)
		}
		p.tenants[t] = name
	}
	if def != "" {
		if _, ok := p.plans[def]; !ok {
			return nil, fmt.Errorf("bucket: default plan: no plan named %q", def)
		}
		p.def = def
	}
	return p, nil
}

// Lookup returns the plan of tenant: the plan the file assigns to it, else the default plan. With
// neither, the error wraps [ErrUnknownTenant] and names the tenant.
func (p *Plans) Lookup(tenant string) (*Plan, error) {
	name, ok := p.tenants[tenant]
	if !ok {
		name = p.def
	}
	if name == "" {
		return nil, fmt.Errorf("%w %q: the plans file assigns it no plan and has no default_plan", ErrUnknownTenant, tenant)
	}
	return p.plans[name], nil
}

// Plan returns the plan called name, if there is one.
func (p *Plans) Plan(name string) (*Plan, bool) {
	pl, ok := p.plans[name]
	return pl, ok
}

// Pools returns the pools the plans name, sorted by name. The slice is the caller's.
func (p *Plans) Pools() []*Pool { return slices.Clone(p.pools) }

// Names returns the names of all plans, sorted. The slice is the caller's.
func (p *Plans) Names() []string { return slices.Clone(p.names) }

// Tenants returns a copy of the tenant → plan name assignments of the file (never nil).
func (p *Plans) Tenants() map[string]string {
	m := make(map[string]string, len(p.tenants))
	for t, n := range p.tenants {
		m[t] = n
	}
	return m
}

// Default returns the name of the default plan, or "" when the file names none (and jobs of
// unknown tenants are rejected).
func (p *Plans) Default() string { return p.def }

// Describe returns a human-readable, multi-line summary: every plan with its limits (label and
// rule: a bucket's capacity, rate as written, and the effective interval and tokens per second
// after rounding; a window's limit, length and resolution; a quota's limit, period and zone),
// the tenant assignments and the default plan. Plans and tenants are sorted by name. The exact
// layout is for people and may change.
func (p *Plans) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "plans (%d):\n", len(p.names))
	for _, name := range p.names {
		pl := p.plans[name]
		mode := ""
		if pl.Shadow {
			mode = ", shadow mode: trialled, not enforced"
		}
		if pl.Pool != nil {
			mode += fmt.Sprintf(", pool %s with share %d", pl.Pool.Name, pl.share())
		}
		if pl.MaxWait > 0 {
			mode += ", jobs wait at most " + ShortDuration(pl.MaxWait)
		}
		if pl.PriorityAging > 0 {
			mode += ", a waiting job's priority rises one level every " + ShortDuration(pl.PriorityAging)
		}
		fmt.Fprintf(&b, "  %s: %d %s, max weight %d%s\n", name, len(pl.Limits), plansPlural(len(pl.Limits), "limit", "limits"), pl.MaxWeight(), mode)
		for i, l := range pl.Limits {
			fmt.Fprintf(&b, "    limit %s: %s\n", l.label(i), l.describe())
		}
	}
	if len(p.pools) > 0 {
		fmt.Fprintf(&b, "pools (%d):\n", len(p.pools))
		for _, pool := range p.pools {
			fmt.Fprintf(&b, "  %s: %s\n", pool.Name, pool.describe())
		}
	}
	tenants := make([]string, 0, len(p.tenants))
	for t := range p.tenants {
		tenants = append(tenants, t)
	}
	slices.Sort(tenants)
	fmt.Fprintf(&b, "tenants (%d):\n", len(tenants))
	for _, t := range tenants {
		fmt.Fprintf(&b, "  %s: %s\n", t, p.tenants[t])
	}
	if p.def != "" {
		fmt.Fprintf(&b, "default plan: %s\n", p.def)
	} else {
		b.WriteString("default plan: none (jobs of unknown tenants are rejected)\n")
	}
	return b.String()
}

// plansPlural returns one when n is 1, else many.
func plansPlural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// plansPerSecond formats a rate to 6 significant digits without an exponent.
func plansPerSecond(v float64) string {
	r, err := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 6, 64), 64)
	if err != nil {
		r = v
	}
	return strconv.FormatFloat(r, 'f', -1, 64)
}
