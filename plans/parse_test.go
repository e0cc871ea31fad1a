package plans_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/plans"
)

const plansGoodFile = `# The example plans file.
plans:
  free:
    limits:
      - {capacity: 5, rate: 2/s}
  gold:
    limits:
      - {name: burst, capacity: 20, rate: 10/s}
      - {name: daily, capacity: 100000, rate: 100000/d}
tenants:
  acme: gold
  bob: free
default_plan: free   # optional; when absent, jobs of unknown tenants are rejected
`

// plansKindsFile is the issue's example: one plan with a limit of each kind.
const plansKindsFile = `plans:
  pro:
    limits:
      - {name: burst,   capacity: 20, rate: 10/s}               # kind: bucket (the default)
      - {name: hourly,  kind: window, limit: 1000, window: 1h}  # at most 1000 in ANY interval of 1h
      - {name: monthly, kind: quota,  limit: 100000, period: month}  # per calendar month (UTC)
      - {name: paris,   kind: quota,  limit: 5000, period: week, timezone: Europe/Paris}
      - {name: tiny,    kind: window, limit: 10, window: 3s}
      - {name: week,    kind: window, limit: 70, window: 7d}
      - {name: running, kind: concurrency, limit: 50, lease: 10m}  # at most 50 in flight
default_plan: pro
`

func TestParseKinds(t *testing.T) {
	p := mustParse(t, plansKindsFile)
	pro, _ := p.Plan("pro")
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	want := []bucket.Limit{
		{Name: "burst", Capacity: 20, Interval: 100 * time.Millisecond, Rate: "10/s"},
		{Name: "hourly", Kind: bucket.KindWindow, Capacity: 1000, Window: time.Hour},
		{Name: "monthly", Kind: bucket.KindQuota, Capacity: 100000, Period: bucket.Month},
		{Name: "paris", Kind: bucket.KindQuota, Capacity: 5000, Period: bucket.Week, Location: paris},
		{Name: "tiny", Kind: bucket.KindWindow, Capacity: 10, Window: 3 * time.Second},
		{Name: "week", Kind: bucket.KindWindow, Capacity: 70, Window: 7 * 24 * time.Hour},
		{Name: "running", Kind: bucket.KindConcurrency, Capacity: 50, Lease: 10 * time.Minute},
	}
	if !slices.EqualFunc(pro.Limits, want, limitsEqual) {
		t.Errorf("limits\n%+v\nwant\n%+v", pro.Limits, want)
	}
	if pro.MaxWeight() != 10 {
		t.Errorf("MaxWeight %d, want 10 (the window tiny)", pro.MaxWeight())
	}
	// kind: bucket may be written out.
	q := mustParse(t, "plans: {p: {limits: [{kind: bucket, capacity: 2, rate: 1/s}]}}\n")
	if pl, _ := q.Plan("p"); pl.Limits[0].Kind != bucket.KindBucket || pl.Limits[0].Capacity != 2 {
		t.Errorf("explicit bucket: %+v", pl.Limits[0])
	}
	out := plansToYAML(t, p)
	again, err := plans.Parse("again.yaml", out)
	if err != nil {
		t.Fatalf("reparse of\n%s: %v", out, err)
	}
	if d := plansEqual(p, again); d != "" {
		t.Errorf("round trip differs: %s\n%s", d, out)
	}
}

func ExampleParse_kinds() {
	p, err := plans.Parse("plans.yaml", []byte(plansKindsFile))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(p.Describe())
	// Output:
	// plans (1):
	//   pro: 7 limits, max weight 10
	//     limit burst: capacity 20, rate 10/s = 1 token every 100ms (10 tokens/s)
	//     limit hourly: window, at most 1000 in any 1h (counted in sub-windows of 56.25s: a take leaves up to 56.25s late)
	//     limit monthly: quota, 100000 per calendar month (UTC), reset at its start
	//     limit paris: quota, 5000 per calendar week (Europe/Paris), reset at its start
	//     limit tiny: window, at most 10 in any 3s (exact)
	//     limit week: window, at most 70 in any 7d (counted in sub-windows of 2h37m30s: a take leaves up to 2h37m30s late)
	//     limit running: concurrency, at most 50 in flight, each for at most 10m unless renewed
	// tenants (0):
	// default plan: pro
}

func mustParse(t testing.TB, src string) *bucket.Plans {
	t.Helper()
	p, err := plans.Parse("plans.yaml", []byte(src))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return p
}

func TestParseGood(t *testing.T) {
	p := mustParse(t, plansGoodFile)
	if got, want := p.Names(), []string{"free", "gold"}; !slices.Equal(got, want) {
		t.Errorf("Names() = %q, want %q", got, want)
	}
	if got, want := p.Tenants(), map[string]string{"acme": "gold", "bob": "free"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Tenants() = %v, want %v", got, want)
	}
	if got := p.Default(); got != "free" {
		t.Errorf("Default() = %q, want free", got)
	}
	wantLimits := map[string][]bucket.Limit{
		"free": {{Capacity: 5, Interval: 500 * time.Millisecond, Rate: "2/s"}},
		"gold": {
			{Name: "burst", Capacity: 20, Interval: 100 * time.Millisecond, Rate: "10/s"},
			{Name: "daily", Capacity: 100000, Interval: 864 * time.Millisecond, Rate: "100000/d"},
		},
	}
	for name, want := range wantLimits {
		pl, ok := p.Plan(name)
		if !ok {
			t.Fatalf("Plan(%q) not found", name)
		}
		if pl.Name != name || !slices.Equal(pl.Limits, want) {
			t.Errorf("Plan(%q) = %q %+v, want %+v", name, pl.Name, pl.Limits, want)
		}
	}
	if gold, _ := p.Plan("gold"); gold.MaxWeight() != 20 {
		t.Errorf("gold.MaxWeight() = %d, want 20", gold.MaxWeight())
	}
	if _, ok := p.Plan("silver"); ok {
		t.Error(`Plan("silver") found`)
	}
}

// TestParseSyntaxVariants checks forms a plans file may legitimately take.
func TestParseSyntaxVariants(t *testing.T) {
	src := `---
plans:
  "pro plan":
    limits:
      - name: burst
        capacity: 1_000
        rate: "2.5/s"
      - capacity: 0x10
        rate: 0.5/m
  7:
    limits: [{capacity: 1, rate: 1/h}]
tenants: ~
default_plan:
---
`
	p := mustParse(t, src)
	if got, want := p.Names(), []string{"7", "pro plan"}; !slices.Equal(got, want) {
		t.Fatalf("Names() = %q, want %q", got, want)
	}
	pro, _ := p.Plan("pro plan")
	want := []bucket.Limit{
		{Name: "burst", Capacity: 1000, Interval: 400 * time.Millisecond, Rate: "2.5/s"},
		{Capacity: 16, Interval: 2 * time.Minute, Rate: "0.5/m"},
	}
	if !slices.Equal(pro.Limits, want) {
		t.Errorf("limits = %+v, want %+v", pro.Limits, want)
	}
	if len(p.Tenants()) != 0 || p.Default() != "" {
		t.Errorf("Tenants() = %v, Default() = %q, want none", p.Tenants(), p.Default())
	}
}

// plansToYAML writes p back as a plans file, for round trips.
func plansToYAML(t testing.TB, p *bucket.Plans) []byte {
	t.Helper()
	type limit struct {
		Name     string `yaml:"name,omitempty"`
		Kind     string `yaml:"kind,omitempty"`
		Capacity int64  `yaml:"capacity,omitempty"`
		Rate     string `yaml:"rate,omitempty"`
		Limit    int64  `yaml:"limit,omitempty"`
		Window   string `yaml:"window,omitempty"`
		Period   string `yaml:"period,omitempty"`
		Timezone string `yaml:"timezone,omitempty"`
		Lease    string `yaml:"lease,omitempty"`
	}
	type plan struct {
		Limits []limit `yaml:"limits"`
		Mode   string  `yaml:"mode,omitempty"`
		Pool   string  `yaml:"pool,omitempty"`
		Share  int64   `yaml:"share,omitempty"`
		Wait   string  `yaml:"max_wait,omitempty"`
		Aging  string  `yaml:"priority_aging,omitempty"`
	}
	type pool struct {
		Concurrency int64  `yaml:"concurrency,omitempty"`
		Lease       string `yaml:"lease,omitempty"`
		Capacity    int64  `yaml:"capacity,omitempty"`
		Rate        string `yaml:"rate,omitempty"`
	}
	type file struct {
		Plans       map[string]plan   `yaml:"plans"`
		Tenants     map[string]string `yaml:"tenants,omitempty"`
		DefaultPlan string            `yaml:"default_plan,omitempty"`
		Pools       map[string]pool   `yaml:"pools,omitempty"`
	}
	f := file{Plans: map[string]plan{}, Tenants: p.Tenants(), DefaultPlan: p.Default(), Pools: map[string]pool{}}
	for _, pl := range p.Pools() {
		q := pool{Concurrency: pl.Concurrency, Capacity: pl.Capacity, Rate: pl.Rate}
		if pl.Lease > 0 {
			q.Lease = bucket.ShortDuration(pl.Lease)
		}
		f.Pools[pl.Name] = q
	}
	for _, name := range p.Names() {
		pl, _ := p.Plan(name)
		var ls []limit
		for _, l := range pl.Limits {
			switch l.Kind {
			case bucket.KindBucket:
				ls = append(ls, limit{Name: l.Name, Capacity: l.Capacity, Rate: l.Rate})
			case bucket.KindWindow:
				ls = append(ls, limit{Name: l.Name, Kind: "window", Limit: l.Capacity, Window: bucket.ShortDuration(l.Window)})
			case bucket.KindQuota:
				q := limit{Name: l.Name, Kind: "quota", Limit: l.Capacity, Period: l.Period.String()}
				if l.Location != nil {
					q.Timezone = l.Location.String()
				}
				ls = append(ls, q)
			case bucket.KindConcurrency:
				ls = append(ls, limit{Name: l.Name, Kind: "concurrency", Limit: l.Capacity, Lease: bucket.ShortDuration(l.Lease)})
			}
		}
		mode := ""
		if pl.Shadow {
			mode = "shadow"
		}
		pp := plan{Limits: ls, Mode: mode, Share: pl.Share}
		if pl.MaxWait > 0 {
			pp.Wait = bucket.ShortDuration(pl.MaxWait)
		}
		if pl.PriorityAging > 0 {
			pp.Aging = bucket.ShortDuration(pl.PriorityAging)
		}
		if pl.Pool != nil {
			pp.Pool = pl.Pool.Name
		}
		f.Plans[name] = pp
	}
	out, err := yaml.Marshal(f)
	if err != nil {
		t.Fatalf("yaml.Marshal: %v", err)
	}
	return out
}

// limitsEqual compares limits, their locations by name.
func limitsEqual(a, b bucket.Limit) bool {
	if (a.Location == nil) != (b.Location == nil) || (a.Location != nil && a.Location.String() != b.Location.String()) {
		return false
	}
	a.Location, b.Location = nil, nil
	return a == b
}

// plansEqual reports how a and b differ, or "" when they are equal.
func plansEqual(a, b *bucket.Plans) string {
	if !slices.Equal(a.Names(), b.Names()) {
		return fmt.Sprintf("names %q vs %q", a.Names(), b.Names())
	}
	for _, name := range a.Names() {
		pa, _ := a.Plan(name)
		pb, _ := b.Plan(name)
		if pa.Name != pb.Name || !slices.EqualFunc(pa.Limits, pb.Limits, limitsEqual) || pa.MaxWait != pb.MaxWait || pa.PriorityAging != pb.PriorityAging {
			return fmt.Sprintf("plan %q: %+v vs %+v", name, pa.Limits, pb.Limits)
		}
	}
	if !reflect.DeepEqual(a.Tenants(), b.Tenants()) {
		return fmt.Sprintf("tenants %v vs %v", a.Tenants(), b.Tenants())
	}
	if a.Default() != b.Default() {
		return fmt.Sprintf("default %q vs %q", a.Default(), b.Default())
	}
	if a.Describe() != b.Describe() {
		return fmt.Sprintf("describe:\n%s\nvs\n%s", a.Describe(), b.Describe())
	}
	return ""
}

func TestParseRoundTrip(t *testing.T) {
	p := mustParse(t, plansGoodFile)
	out := plansToYAML(t, p)
	q, err := plans.Parse("out.yaml", out)
	if err != nil {
		t.Fatalf("reparse of\n%s: %v", out, err)
	}
	if d := plansEqual(p, q); d != "" {
		t.Errorf("round trip differs: %s\n%s", d, out)
	}
}

func TestParseErrors(t *testing.T) {
	const rateHint = "is not a rate (want N/s, N/m, N/h or N/d with N a positive decimal)"
	// free builds a file whose plan "free" has the given limit on line 4.
	free := func(limit string) string {
		return "plans:\n  free:\n    limits:\n      - " + limit + "\n"
	}
	for _, tc := range []struct {
		name  string
		src   string
		line  int    // 0: the message must have no line
		field string // "": the message must have no field
		want  string
	}{
		// The file as a whole.
		{"empty file", "", 0, "", "the file is empty"},
		{"only comments", "# nothing yet\n\n", 0, "", "the file is empty"},
		{"only a document marker", "---\n", 0, "", "the file is empty"},
		{"not a mapping", "- plans\n", 1, "", "want a mapping with plans, tenants, default_plan and pools, got a list"},
		{"scalar", "plans\n", 1, "", `want a mapping with plans, tenants, default_plan and pools, got "plans"`},
		{"syntax error", "plans:\n  free: [\n", 2, "", "invalid YAML: did not find expected node content"},
		{"tab indentation", "plans:\n\tfree: {}\n", 2, "", "invalid YAML: found character that cannot start any token"},
		{"two documents", "plans:\n  free: {limits: [{capacity: 1, rate: 1/s}]}\n---\nplans: {}\n", 3, "", "more than one YAML document"},
		{"no plans key", "tenants: {}\n", 1, "plans", "missing"},
		{"null plans", "plans:\ntenants: {}\n", 1, "plans", "no plans"},
		{"empty plans", "plans: {}\n", 1, "plans", "no plans"},
		{"plans a list", "plans:\n  - free\n", 2, "plans", "want a mapping of plan names to plans, got a list"},

		// Unknown and duplicate keys at every level.
		{"unknown top key", "plans:\n  free: {limits: [{capacity: 1, rate: 1/s}]}\ndefault: free\n", 3, "default", `unknown key "default" (want plans, tenants, default_plan or pools)`},
		{"unknown plan key", "plans:\n  free:\n    limits: [{capacity: 1, rate: 1/s}]\n    burst: 5\n", 4, "plans.free.burst", `unknown key "burst" (want limits, mode, pool, share, max_wait or priority_aging)`},
		{"unknown limit key", free("{capacity: 1, rate: 1/s, per: tenant}"), 4, "plans.free.limits[0].per", `unknown key "per" (a bucket limit takes name, kind, capacity and rate)`},
		{"misspelt limits", "plans:\n  free:\n    limts: [{capacity: 1, rate: 1/s}]\n", 3, "plans.free.limts", `unknown key "limts"`},
		{"duplicate top key", "plans:\n  free: {limits: [{capacity: 1, rate: 1/s}]}\nplans:\n  gold: {limits: [{capacity: 1, rate: 1/s}]}\n", 3, "plans", `duplicate key "plans" (first at line 1)`},
		{"duplicate plan", "plans:\n  free: {limits: [{capacity: 1, rate: 1/s}]}\n  free: {limits: [{capacity: 2, rate: 1/s}]}\n", 3, "plans.free", `duplicate key "free" (first at line 2)`},
		{"duplicate limits key", "plans:\n  free:\n    limits: [{capacity: 1, rate: 1/s}]\n    limits: [{capacity: 1, rate: 1/s}]\n", 4, "plans.free.limits", `duplicate key "limits" (first at line 3)`},
		{"duplicate capacity", "plans:\n  free:\n    limits:\n      - capacity: 1\n        rate: 1/s\n        capacity: 2\n", 6, "plans.free.limits[0].capacity", `duplicate key "capacity" (first at line 4)`},
		{"duplicate tenant", "plans:\n  free: {limits: [{capacity: 1, rate: 1/s}]}\ntenants:\n  bob: free\n  bob: free\n", 5, "tenants.bob", `duplicate key "bob" (first at line 4)`},
		{"null key", "plans:\n  ~: {limits: [{capacity: 1, rate: 1/s}]}\n", 2, "plans", "want a non-empty name as key, got nothing"},
		{"empty key", "plans:\n  \"\": {limits: [{capacity: 1, rate: 1/s}]}\n", 2, "plans", `want a non-empty name as key, got ""`},
		{"list as key", "plans:\n  ? [a]\n  : {limits: [{capacity: 1, rate: 1/s}]}\n", 2, "plans", "want a non-empty name as key, got a list"},
		{"merge key", "plans:\n  free:\n    <<: {limits: []}\n", 3, `plans.free["<<"]`, `unknown key "<<"`},
		{"alias", "plans:\n  free: &f {limits: [{capacity: 1, rate: 1/s}]}\n  gold: *f\n", 3, "plans.gold", "YAML aliases (*f) are not supported"},

		// Plans and their limits.
		{"null plan", "plans:\n  free:\n", 2, "plans.free", "empty plan (want a mapping with limits (and optionally mode, pool, share, max_wait and priority_aging))"},
		{"plan a scalar", "plans:\n  free: gold\n", 2, "plans.free", `want a mapping with limits (and optionally mode, pool, share, max_wait and priority_aging), got "gold"`},
		{"plan without limits key", "plans:\n  free: {}\n", 2, "plans.free.limits", "missing (want a list of limits)"},
		{"empty limits", "plans:\n  free:\n    limits: []\n", 3, "plans.free.limits", `plan "free" has no limits`},
		{"null limits", "plans:\n  free:\n    limits:\n", 3, "plans.free.limits", `plan "free" has no limits`},
		{"limits a mapping", "plans:\n  free:\n    limits: {capacity: 1, rate: 1/s}\n", 3, "plans.free.limits", "want a list of limits, got a mapping"},
		{"limit a scalar", free("5/s"), 4, "plans.free.limits[0]", `want a mapping of a limit's fields (name, kind, and capacity and rate, or limit and window, or limit, period and timezone, or limit and lease), got "5/s"`},
		{"second limit bad", "plans:\n  free:\n    limits:\n      - {capacity: 1, rate: 1/s}\n      - {capacity: 1, rate: 1/x}\n", 5, "plans.free.limits[1].rate", `"1/x" ` + rateHint},

		// Capacity.
		{"capacity 0", free("{capacity: 0, rate: 1/s}"), 4, "plans.free.limits[0].capacity", "0 is not positive (want an integer ≥ 1)"},
		{"capacity -1", free("{capacity: -1, rate: 1/s}"), 4, "plans.free.limits[0].capacity", "-1 is not positive"},
		{"capacity 2.5", free("{capacity: 2.5, rate: 1/s}"), 4, "plans.free.limits[0].capacity", "2.5 is not an integer"},
		{"capacity 1.0", free("{capacity: 1.0, rate: 1/s}"), 4, "plans.free.limits[0].capacity", "1.0 is not an integer"},
		{"capacity ten", free(`{capacity: "ten", rate: 1/s}`), 4, "plans.free.limits[0].capacity", `"ten" is not an integer`},
		{"capacity quoted", free(`{capacity: "5", rate: 1/s}`), 4, "plans.free.limits[0].capacity", `"5" is not an integer`},
		{"capacity bool", free(`{capacity: true, rate: 1/s}`), 4, "plans.free.limits[0].capacity", `true is not an integer`},
		{"capacity null", free("{capacity: ~, rate: 1/s}"), 4, "plans.free.limits[0].capacity", "want an integer ≥ 1, got nothing"},
		{"capacity list", free("{capacity: [5], rate: 1/s}"), 4, "plans.free.limits[0].capacity", "want an integer ≥ 1, got a list"},
		{"capacity over int64", free("{capacity: 9223372036854775808, rate: 1/s}"), 4, "plans.free.limits[0].capacity", "9223372036854775808 is too large"},
		{"capacity huge", free("{capacity: 99999999999999999999, rate: 1/s}"), 4, "plans.free.limits[0].capacity", "99999999999999999999 is too large"},
		{"capacity missing", "plans:\n  free:\n    limits:\n      - rate: 1/s\n", 4, "plans.free.limits[0].capacity", "missing (want an integer ≥ 1)"},
		{"window too long", free("{capacity: 1000000000, rate: 1/d}"), 4, "plans.free.limits[0]", "capacity 1000000000 takes longer than 285 years to refill"},
		{"window too long, second limit", "plans:\n  gold:\n    limits:\n      - {capacity: 5, rate: 1/s}\n      - {capacity: 1000000000, rate: 1/d}\n", 5, "plans.gold.limits[1]", "capacity 1000000000 takes longer than 285 years"},

		// Rate.
		{"rate ten/s", free("{capacity: 1, rate: ten/s}"), 4, "plans.free.limits[0].rate", `"ten/s" ` + rateHint},
		{"rate 5", free("{capacity: 1, rate: 5}"), 4, "plans.free.limits[0].rate", `"5" ` + rateHint},
		{"rate 3/w", free("{capacity: 1, rate: 3/w}"), 4, "plans.free.limits[0].rate", `"3/w" ` + rateHint},
		{"rate 0/s", free("{capacity: 1, rate: 0/s}"), 4, "plans.free.limits[0].rate", `"0/s" ` + rateHint},
		{"rate -1/s", free("{capacity: 1, rate: -1/s}"), 4, "plans.free.limits[0].rate", `"-1/s" ` + rateHint},
		{"rate 1e3/s", free("{capacity: 1, rate: 1e3/s}"), 4, "plans.free.limits[0].rate", `"1e3/s" ` + rateHint},
		{"rate too fast", free("{capacity: 1, rate: 2000000/s}"), 4, "plans.free.limits[0].rate", `"2000000/s" is faster than the maximum rate, 1000000/s`},
		{"rate too slow", free("{capacity: 1, rate: 0.0000000001/s}"), 4, "plans.free.limits[0].rate", "is too slow"},
		{"rate null", free("{capacity: 1, rate: }"), 4, "plans.free.limits[0].rate", "want a rate such as 10/s, got nothing"},
		{"rate list", free("{capacity: 1, rate: [1, s]}"), 4, "plans.free.limits[0].rate", "want a rate such as 10/s, got a list"},
		{"rate missing", "plans:\n  free:\n    limits:\n      - capacity: 1\n", 4, "plans.free.limits[0].rate", "missing (want a rate such as 10/s)"},

		// Limit names.
		{"duplicate limit names", "plans:\n  gold:\n    limits:\n      - {name: burst, capacity: 1, rate: 1/s}\n      - capacity: 2\n        name: burst\n        rate: 1/s\n", 6, "plans.gold.limits[1].name", `duplicate limit name "burst" (also plans.gold.limits[0], line 4)`},
		{"numeric limit name", free("{name: 1, capacity: 1, rate: 1/s}"), 4, "plans.free.limits[0].name", `"1" is all digits`},
		{"empty limit name", free(`{name: "", capacity: 1, rate: 1/s}`), 4, "plans.free.limits[0].name", `want a limit name, got ""`},
		{"null limit name", free(`{name: null, capacity: 1, rate: 1/s}`), 4, "plans.free.limits[0].name", `want a limit name, got nothing`},

		// Kinds: the kind first, then the fields it takes.
		{"unknown kind", free("{kind: sliding, limit: 1, window: 1s}"), 4, "plans.free.limits[0].kind", `"sliding" is not a kind (want bucket, window, quota or concurrency)`},
		{"kind a list", free("{kind: [window], limit: 1, window: 1s}"), 4, "plans.free.limits[0].kind", "want bucket, window, quota or concurrency, got a list"},
		{"kind null", free("{kind: ~, capacity: 1, rate: 1/s}"), 4, "plans.free.limits[0].kind", "want bucket, window, quota or concurrency, got nothing"},
		{"rate on a window", free("{kind: window, limit: 10, window: 1h, rate: 1/s}"), 4, "plans.free.limits[0].rate",
			`"rate" is a field of a bucket limit, not of a window one (a window limit takes name, kind, limit and window)`},
		{"capacity on a quota", free("{kind: quota, capacity: 10, period: day}"), 4, "plans.free.limits[0].capacity",
			`"capacity" is a field of a bucket limit, not of a quota one (a quota limit takes name, kind, limit, period and timezone)`},
		{"limit on a bucket", free("{limit: 10, rate: 1/s}"), 4, "plans.free.limits[0].limit",
			`"limit" is a field of a window, quota or concurrency limit, not of a bucket one (a bucket limit takes name, kind, capacity and rate)`},
		{"period on a window", free("{kind: window, limit: 10, window: 1h, period: day}"), 4, "plans.free.limits[0].period", `"period" is a field of a quota limit`},
		{"timezone on a bucket", free("{capacity: 1, rate: 1/s, timezone: UTC}"), 4, "plans.free.limits[0].timezone", `"timezone" is a field of a quota limit, not of a bucket one`},
		{"unknown key on a quota", free("{kind: quota, limit: 1, period: day, every: 2}"), 4, "plans.free.limits[0].every", `unknown key "every" (a quota limit takes name, kind, limit, period and timezone)`},
		{"window without limit", free("{kind: window, window: 1h}"), 4, "plans.free.limits[0].limit", "missing (want an integer ≥ 1)"},
		{"window without window", free("{kind: window, limit: 5}"), 4, "plans.free.limits[0].window", "missing (want a duration such as 500ms, 3s, 1h30m or 7d)"},
		{"quota without period", free("{kind: quota, limit: 5}"), 4, "plans.free.limits[0].period", "missing (want minute, hour, day, week or month)"},
		{"limit 0", free("{kind: window, limit: 0, window: 1s}"), 4, "plans.free.limits[0].limit", "0 is not positive (want an integer ≥ 1)"},
		{"limit 1.5", free("{kind: quota, limit: 1.5, period: day}"), 4, "plans.free.limits[0].limit", "1.5 is not an integer"},
		{"limit too large", free("{kind: quota, limit: 1000000000000001, period: day}"), 4, "plans.free.limits[0].limit", "1000000000000001 is too large (at most 1000000000000000)"},
		{"window 3x", free("{kind: window, limit: 5, window: 3x}"), 4, "plans.free.limits[0].window", `"3x" is not a duration (want e.g. 500ms, 3s, 1h30m or 7d)`},
		{"window a number", free("{kind: window, limit: 5, window: 3}"), 4, "plans.free.limits[0].window", "want a duration such as 500ms, 3s, 1h30m or 7d, got 3"},
		{"window 0s", free("{kind: window, limit: 5, window: 0s}"), 4, "plans.free.limits[0].window", `"0s" is not positive`},
		{"window -1s", free("{kind: window, limit: 5, window: -1s}"), 4, "plans.free.limits[0].window", `"-1s" is not positive`},
		{"window 1ns", free("{kind: window, limit: 5, window: 1ns}"), 4, "plans.free.limits[0].window", `"1ns" is not a whole number of microseconds`},
		{"window 40000d", free("{kind: window, limit: 5, window: 40000d}"), 4, "plans.free.limits[0].window", `"40000d" is longer than 100 years`},
		{"window 1.5d", free("{kind: window, limit: 5, window: 1.5d}"), 4, "plans.free.limits[0].window", `"1.5d" is not a duration`},
		{"window null", free("{kind: window, limit: 5, window: ~}"), 4, "plans.free.limits[0].window", "want a duration such as 500ms, 3s, 1h30m or 7d, got nothing"},
		{"period fortnight", free("{kind: quota, limit: 5, period: fortnight}"), 4, "plans.free.limits[0].period", `"fortnight" is not a period (want minute, hour, day, week or month)`},
		{"period Month", free("{kind: quota, limit: 5, period: Month}"), 4, "plans.free.limits[0].period", `"Month" is not a period`},
		{"period a number", free("{kind: quota, limit: 5, period: 30}"), 4, "plans.free.limits[0].period", "want minute, hour, day, week or month, got 30"},
		{"timezone Mars", free("{kind: quota, limit: 5, period: day, timezone: Mars/Olympus}"), 4, "plans.free.limits[0].timezone", `"Mars/Olympus" is not a time zone (want an IANA time zone name such as Europe/Paris or UTC)`},
		{"timezone Local", free("{kind: quota, limit: 5, period: day, timezone: Local}"), 4, "plans.free.limits[0].timezone", `"Local" depends on the machine`},
		{"timezone empty", free(`{kind: quota, limit: 5, period: day, timezone: ""}`), 4, "plans.free.limits[0].timezone", `want an IANA time zone name such as Europe/Paris or UTC, got ""`},
		{"timezone a number", free("{kind: quota, limit: 5, period: day, timezone: 2}"), 4, "plans.free.limits[0].timezone", "got 2"},
		{"concurrency without lease", free("{kind: concurrency, limit: 5}"), 4, "plans.free.limits[0].lease", "missing (want a duration such as 500ms, 3s, 1h30m or 7d)"},
		{"concurrency without limit", free("{kind: concurrency, lease: 10m}"), 4, "plans.free.limits[0].limit", "missing (want an integer ≥ 1)"},
		{"concurrency limit too large", free("{kind: concurrency, limit: 1001, lease: 10m}"), 4, "plans.free.limits[0].limit", "1001 is too large (at most 1000)"},
		{"concurrency lease 0s", free("{kind: concurrency, limit: 5, lease: 0s}"), 4, "plans.free.limits[0].lease", `"0s" is not positive`},
		{"concurrency lease a number", free("{kind: concurrency, limit: 5, lease: 600}"), 4, "plans.free.limits[0].lease", "want a duration such as 500ms, 3s, 1h30m or 7d, got 600"},
		{"rate on a concurrency limit", free("{kind: concurrency, limit: 5, lease: 10m, rate: 1/s}"), 4, "plans.free.limits[0].rate",
			`"rate" is a field of a bucket limit, not of a concurrency one (a concurrency limit takes name, kind, limit and lease)`},
		{"lease on a bucket", free("{capacity: 1, rate: 1/s, lease: 10m}"), 4, "plans.free.limits[0].lease", `"lease" is a field of a concurrency limit, not of a bucket one`},
		{"second limit of a kind bad", "plans:\n  pro:\n    limits:\n      - {capacity: 20, rate: 10/s}\n      - kind: window\n        limit: 1000\n        window: 1y\n", 7, "plans.pro.limits[1].window", `"1y" is not a duration`},

		// Pools.
		{"pool without lease", "pools:\n  w: {concurrency: 8}\n" + free("{capacity: 1, rate: 1/s}"), 2, "pools.w.lease", "missing (a concurrency holds each slot until released or its lease ends"},
		{"pool empty", "pools:\n  w:\n" + free("{capacity: 1, rate: 1/s}"), 2, "pools.w", "empty pool (want a mapping with concurrency and lease, or capacity and rate, or all four)"},
		{"pool rate alone", "pools:\n  w: {rate: 5/s}\n" + free("{capacity: 1, rate: 1/s}"), 2, "pools.w.capacity", "missing (a rate refills a capacity"},
		{"pool capacity alone", "pools:\n  w: {capacity: 5}\n" + free("{capacity: 1, rate: 1/s}"), 2, "pools.w.rate", "missing (want a rate such as 10/s)"},
		{"pool concurrency too large", "pools:\n  w: {concurrency: 1001, lease: 1s}\n" + free("{capacity: 1, rate: 1/s}"), 2, "pools.w.concurrency", "1001 is too large (at most 1000)"},
		{"pool unknown key", "pools:\n  w: {concurrency: 2, lease: 1s, limit: 3}\n" + free("{capacity: 1, rate: 1/s}"), 2, "pools.w.limit", `unknown key "limit" (want concurrency, lease, capacity, rate, breaker or adaptive)`},
		{"adaptive without min", "pools:\n  w: {concurrency: 8, lease: 1s, adaptive: {}}\n" + free("{capacity: 1, rate: 1/s}"), 2, "pools.w.adaptive.min", "missing (want the lowest limit in force"},
		{"adaptive min above the concurrency", "pools:\n  w: {concurrency: 8, lease: 1s, adaptive: {min: 9}}\n" + free("{capacity: 1, rate: 1/s}"), 2, "pools.w.adaptive.min", "min must be 1 to the pool's concurrency 8, got 9"},
		{"adaptive without concurrency", "pools:\n  w: {capacity: 8, rate: 1/s, adaptive: {min: 2}}\n" + free("{capacity: 1, rate: 1/s}"), 2, "pools.w.adaptive", "an adaptive pool needs a concurrency"},
		{"breaker without a window", "pools:\n  w: {concurrency: 2, lease: 1s, breaker: {failures: 50%, cooldown: 10s}}\n" + free("{capacity: 1, rate: 1/s}"), 2, "pools.w.breaker.window", "missing (want a mapping with failures"},
		{"breaker failures 0%", "pools:\n  w: {concurrency: 2, lease: 1s, breaker: {failures: 0%, window: 30s, cooldown: 10s}}\n" + free("{capacity: 1, rate: 1/s}"), 2, "pools.w.breaker.failures", "want a percentage from 1% to 100%, such as 50%, got \"0%\""},
		{"breaker failures half", "pools:\n  w: {concurrency: 2, lease: 1s, breaker: {failures: half, window: 30s, cooldown: 10s}}\n" + free("{capacity: 1, rate: 1/s}"), 2, "pools.w.breaker.failures", `got "half"`},
		{"breaker probes 0", "pools:\n  w: {concurrency: 2, lease: 1s, breaker: {failures: 50%, window: 30s, cooldown: 10s, probes: 0}}\n" + free("{capacity: 1, rate: 1/s}"), 2, "pools.w.breaker.probes", "0 is not positive"},
		{"breaker probes too many", "pools:\n  w: {concurrency: 2, lease: 1s, breaker: {failures: 50%, window: 30s, cooldown: 10s, probes: 1001}}\n" + free("{capacity: 1, rate: 1/s}"), 2, "pools.w.breaker.probes", "must be 1 to 1000, got 1001"},
		{"breaker without a concurrency", "pools:\n  w: {capacity: 2, rate: 1/s, breaker: {failures: 50%, window: 30s, cooldown: 10s}}\n" + free("{capacity: 1, rate: 1/s}"), 2, "pools.w.breaker", "a breaker goes with a concurrency"},
		{"breaker unknown key", "pools:\n  w: {concurrency: 2, lease: 1s, breaker: {failures: 50%, window: 30s, cooldown: 10s, after: 3}}\n" + free("{capacity: 1, rate: 1/s}"), 2, "pools.w.breaker.after", `unknown key "after"`},
		{"pool bad rate", "pools:\n  w: {capacity: 2, rate: fast}\n" + free("{capacity: 1, rate: 1/s}"), 2, "pools.w.rate", `"fast"`},
		{"pool with braces", "pools:\n  \"w{x}\": {concurrency: 2, lease: 1s}\n" + free("{capacity: 1, rate: 1/s}"), 2, `pools["w{x}"]`, "contains '{' or '}'"},
		{"plan of a missing pool", "pools:\n  w: {concurrency: 2, lease: 1s}\nplans:\n  free:\n    pool: x\n    limits: [{capacity: 1, rate: 1/s}]\n", 5, "plans.free.pool", `no pool named "x" (pools: w)`},
		{"plan of a pool without pools", "plans:\n  free:\n    pool: x\n    limits: [{capacity: 1, rate: 1/s}]\n", 3, "plans.free.pool", `no pool named "x" (pools: none)`},
		{"share without pool", "plans:\n  free:\n    share: 3\n    limits: [{capacity: 1, rate: 1/s}]\n", 3, "plans.free.share", "a share is of a pool: the plan names none"},
		{"share 0", "pools:\n  w: {concurrency: 2, lease: 1s}\nplans:\n  free:\n    pool: w\n    share: 0\n    limits: [{capacity: 1, rate: 1/s}]\n", 6, "plans.free.share", "0 is not positive"},
		{"share too large", "pools:\n  w: {concurrency: 2, lease: 1s}\nplans:\n  free:\n    pool: w\n    share: 1001\n    limits: [{capacity: 1, rate: 1/s}]\n", 6, "plans.free.share", "1001 is too large (at most 1000)"},

		// Tenants and the default plan.
		{"tenant of missing plan", "plans:\n  free: {limits: [{capacity: 1, rate: 1/s}]}\ntenants:\n  bob: free\n  acme: platinum\n", 5, "tenants.acme", `no plan named "platinum"`},
		{"tenant of no plan", "plans:\n  free: {limits: [{capacity: 1, rate: 1/s}]}\ntenants:\n  acme:\n", 4, "tenants.acme", "want a plan name, got nothing"},
		{"tenant of a list", "plans:\n  free: {limits: [{capacity: 1, rate: 1/s}]}\ntenants:\n  acme: [free]\n", 4, "tenants.acme", "want a plan name, got a list"},
		{"tenant with braces", "plans:\n  free: {limits: [{capacity: 1, rate: 1/s}]}\ntenants:\n  \"a{b}\": free\n", 4, `tenants["a{b}"]`, `tenant name "a{b}" contains '{' or '}'`},
		{"tenants a list", "plans:\n  free: {limits: [{capacity: 1, rate: 1/s}]}\ntenants:\n  - acme\n", 4, "tenants", "want a mapping of tenant names to plan names, got a list"},
		{"tenants before plans", "tenants:\n  acme: gold\nplans:\n  free: {limits: [{capacity: 1, rate: 1/s}]}\n", 2, "tenants.acme", `no plan named "gold"`},
		{"default of missing plan", "plans:\n  free: {limits: [{capacity: 1, rate: 1/s}]}\ndefault_plan: gold\n", 3, "default_plan", `no plan named "gold"`},
		{"default a list", "plans:\n  free: {limits: [{capacity: 1, rate: 1/s}]}\ndefault_plan: [free]\n", 3, "default_plan", "want a plan name, got a list"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := plans.Parse("plans.yaml", []byte(tc.src))
			if err == nil {
				t.Fatalf("Parse succeeded:\n%s", p.Describe())
			}
			if !errors.Is(err, plans.ErrFile) {
				t.Errorf("error %q does not wrap ErrFile", err)
			}
			prefix := "plans: plans.yaml"
			if tc.line > 0 {
				prefix += ":" + strconv.Itoa(tc.line)
			}
			prefix += ": "
			if tc.field != "" {
				prefix += tc.field + ": "
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, prefix) || !strings.Contains(msg[len(prefix)-2:], tc.want) {
				t.Errorf("error = %q\nwant prefix %q and %q", msg, prefix, tc.want)
			}
		})
	}
}

func TestParseTenantError(t *testing.T) {
	_, err := plans.Parse("p.yaml", []byte("plans:\n  free: {limits: [{capacity: 1, rate: 1/s}]}\ntenants:\n  \"{x}\": free\n"))
	if !errors.Is(err, plans.ErrFile) || !errors.Is(err, bucket.ErrInvalidTenant) {
		t.Errorf("error %v, want one wrapping ErrFile and ErrInvalidTenant", err)
	}
}

func TestParseEmptyFilename(t *testing.T) {
	_, err := plans.Parse("", nil)
	if err == nil || !strings.HasPrefix(err.Error(), "plans: plans file: ") {
		t.Errorf("error = %v, want it to start with %q", err, "plans: plans file: ")
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "plans.yaml")
	if err := os.WriteFile(path, []byte(plansGoodFile), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := plans.Load(path)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if d := plansEqual(p, mustParse(t, plansGoodFile)); d != "" {
		t.Errorf("Load differs from Parse: %s", d)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("plans:\n  free: {limits: []}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := plans.Load(bad); err == nil || !strings.HasPrefix(err.Error(), "plans: "+bad+":2: plans.free.limits: ") {
		t.Errorf("Load(bad) error = %v, want it to name %s:2", err, bad)
	}

	missing := filepath.Join(dir, "missing.yaml")
	_, err = plans.Load(missing)
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("Load(missing) error = %v, want it to name %s", err, missing)
	}
	if !errors.Is(err, plans.ErrFile) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load(missing) error = %v, want it to wrap ErrFile and fs.ErrNotExist", err)
	}
}

func TestLoadTestdata(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatal("no testdata/*.yaml")
	}
	for _, path := range paths {
		p, err := plans.Load(path)
		if err != nil {
			t.Errorf("Load(%s): %v", path, err)
			continue
		}
		if len(p.Names()) == 0 {
			t.Errorf("Load(%s): no plans", path)
		}
	}
}

func TestPlansLookup(t *testing.T) {
	withDefault := mustParse(t, plansGoodFile)
	noDefault := mustParse(t, strings.Replace(plansGoodFile, "default_plan: free", "", 1))
	for _, tc := range []struct {
		plans  *bucket.Plans
		tenant string
		want   string // "": ErrUnknownTenant
	}{
		{withDefault, "acme", "gold"},
		{withDefault, "bob", "free"},
		{withDefault, "carol", "free"},
		{withDefault, "", "free"},
		{noDefault, "acme", "gold"},
		{noDefault, "bob", "free"},
		{noDefault, "carol", ""},
	} {
		pl, err := tc.plans.Lookup(tc.tenant)
		switch {
		case tc.want == "":
			if !errors.Is(err, bucket.ErrUnknownTenant) || !strings.Contains(err.Error(), strconv.Quote(tc.tenant)) {
				t.Errorf("Lookup(%q) = %v, %v; want an ErrUnknownTenant naming the tenant", tc.tenant, pl, err)
			}
		case err != nil:
			t.Errorf("Lookup(%q): %v", tc.tenant, err)
		case pl.Name != tc.want:
			t.Errorf("Lookup(%q) = plan %q, want %q", tc.tenant, pl.Name, tc.want)
		}
	}
	if noDefault.Default() != "" {
		t.Errorf("Default() = %q, want none", noDefault.Default())
	}
}

// TestPlansImmutable checks that the accessors hand out copies and that a Plans can be read
// concurrently (run with -race).
func TestPlansImmutable(t *testing.T) {
	p := mustParse(t, plansGoodFile)
	p.Tenants()["mallory"] = "gold"
	p.Names()[0] = "mallory"
	if _, err := p.Lookup("mallory"); err != nil {
		t.Fatal(err)
	}
	if pl, _ := p.Lookup("mallory"); pl.Name != "free" {
		t.Errorf("Lookup(mallory) = %q after editing copies, want the default free", pl.Name)
	}
	if p.Names()[0] != "free" {
		t.Errorf("Names() = %q after editing a copy", p.Names())
	}

	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 100 {
				tenant := []string{"acme", "bob", "carol"}[(i+j)%3]
				if _, err := p.Lookup(tenant); err != nil {
					t.Error(err)
					return
				}
				_ = p.Names()
				_ = p.Tenants()
				_ = p.Describe()
			}
		})
	}
	wg.Wait()
}

func TestPlansDescribeNoDefault(t *testing.T) {
	p := mustParse(t, "plans:\n  free: {limits: [{capacity: 1, rate: 3/s}]}\n")
	d := p.Describe()
	for _, want := range []string{
		"limit 0: capacity 1, rate 3/s = 1 token every 333.334ms (2.99999 tokens/s)",
		"tenants (0):",
		"default plan: none (jobs of unknown tenants are rejected)",
	} {
		if !strings.Contains(d, want) {
			t.Errorf("Describe() =\n%s\nwant it to contain %q", d, want)
		}
	}
}

func ExamplePlans_Describe() {
	p, err := plans.Parse("plans.yaml", []byte(plansGoodFile))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(p.Describe())
	pl, _ := p.Lookup("acme")
	fmt.Println("acme:", pl.Name)
	_, err = plans.Parse("plans.yaml", []byte(strings.Replace(plansGoodFile, "100000/d", "3/w", 1)))
	fmt.Println(err)
	// Output:
	// plans (2):
	//   free: 1 limit, max weight 5
	//     limit 0: capacity 5, rate 2/s = 1 token every 500ms (2 tokens/s)
	//   gold: 2 limits, max weight 20
	//     limit burst: capacity 20, rate 10/s = 1 token every 100ms (10 tokens/s)
	//     limit daily: capacity 100000, rate 100000/d = 1 token every 864ms (1.15741 tokens/s)
	// tenants (2):
	//   acme: gold
	//   bob: free
	// default plan: free
	// acme: gold
	// plans: plans.yaml:9: plans.gold.limits[1].rate: "3/w" is not a rate (want N/s, N/m, N/h or N/d with N a positive decimal)
}

// FuzzParse checks that Parse never panics, that every error wraps ErrFile and
// names the file, and that what it accepts is sound and survives a round trip.
func FuzzParse(f *testing.F) {
	f.Add([]byte(plansGoodFile))
	f.Add([]byte("plans:\n  free: {limits: [{capacity: 1, rate: 1/s}]}\n"))
	f.Add([]byte("plans:\n  free:\n    limits:\n      - {capacity: 0, rate: 3/w}\n"))
	f.Add([]byte("plans: {a: {limits: [{capacity: 9, rate: 0.5/m}]}}\ntenants: {x: a}\ndefault_plan: b\n"))
	f.Add([]byte(plansKindsFile))
	f.Add([]byte("plans: {w: {limits: [{kind: window, limit: 65, window: 7d}, {kind: quota, limit: 3, period: week, timezone: Asia/Kathmandu}]}}\n"))
	f.Add([]byte("plans: {w: {limits: [{kind: window, limit: 5, window: 1ns, rate: 1/s}]}}\n"))
	f.Add([]byte("plans: {w: {max_wait: 1h, limits: [{capacity: 1, rate: 1/s}]}, v: {max_wait: 7d, limits: [{kind: quota, limit: 3, period: month}]}}\n"))
	f.Add([]byte("plans: {w: {max_wait: 0s, limits: [{capacity: 1, rate: 1/s}]}}\n"))
	f.Add([]byte("plans: {w: {priority_aging: 10m, limits: [{capacity: 1, rate: 1/s}]}, v: {priority_aging: -1s, limits: [{capacity: 1, rate: 1/s}]}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := plans.Parse("fuzz.yaml", data)
		if err != nil {
			if !errors.Is(err, plans.ErrFile) {
				t.Fatalf("error %q does not wrap ErrFile", err)
			}
			if !strings.HasPrefix(err.Error(), "plans: fuzz.yaml") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		names := p.Names()
		if len(names) == 0 || !slices.IsSorted(names) {
			t.Fatalf("Names() = %q", names)
		}
		for _, name := range names {
			pl, ok := p.Plan(name)
			if !ok || pl.Name != name || len(pl.Limits) == 0 {
				t.Fatalf("plan %q: %+v", name, pl)
			}
			if pl.MaxWait < 0 || pl.MaxWait%time.Microsecond != 0 || pl.MaxWait > bucket.MaxWindow {
				t.Fatalf("plan %q: max_wait %v", name, pl.MaxWait)
			}
			if pl.PriorityAging < 0 || pl.PriorityAging%time.Microsecond != 0 || pl.PriorityAging > bucket.MaxWindow {
				t.Fatalf("plan %q: priority_aging %v", name, pl.PriorityAging)
			}
			for _, l := range pl.Limits {
				if l.Capacity < 1 || pl.MaxWeight() > l.Capacity {
					t.Fatalf("plan %q: bad capacity %+v (max weight %d)", name, l, pl.MaxWeight())
				}
				switch l.Kind {
				case bucket.KindBucket:
					if l.Interval < time.Microsecond || l.Interval%time.Microsecond != 0 || l.Window != 0 || l.Period != 0 || l.Location != nil {
						t.Fatalf("plan %q: bad bucket %+v", name, l)
					}
					if iv, err := plans.ParseRate(l.Rate); err != nil || iv != l.Interval {
						t.Fatalf("plan %q: limit %+v: ParseRate = %v, %v", name, l, iv, err)
					}
				case bucket.KindWindow:
					if l.Window < time.Microsecond || l.Window%time.Microsecond != 0 || l.Window > bucket.MaxWindow || l.Interval != 0 || l.Rate != "" || l.Capacity > bucket.MaxLimit {
						t.Fatalf("plan %q: bad window %+v", name, l)
					}
				case bucket.KindQuota:
					if l.Period < bucket.Minute || l.Period > bucket.Month || l.Interval != 0 || l.Window != 0 || l.Capacity > bucket.MaxLimit {
						t.Fatalf("plan %q: bad quota %+v", name, l)
					}
				case bucket.KindConcurrency:
					if l.Lease < time.Microsecond || l.Lease%time.Microsecond != 0 || l.Lease > bucket.MaxWindow || l.Interval != 0 || l.Window != 0 || l.Capacity > bucket.MaxConcurrency {
						t.Fatalf("plan %q: bad concurrency limit %+v", name, l)
					}
				default:
					t.Fatalf("plan %q: limit of kind %v", name, l.Kind)
				}
			}
		}
		for tenant, plan := range p.Tenants() {
			if pl, err := p.Lookup(tenant); err != nil || pl.Name != plan {
				t.Fatalf("Lookup(%q) = %v, %v; want plan %q", tenant, pl, err, plan)
			}
		}
		if d := p.Default(); d != "" {
			if _, ok := p.Plan(d); !ok {
				t.Fatalf("default plan %q does not exist", d)
			}
		}
		out := plansToYAML(t, p)
		q, err := plans.Parse("again.yaml", out)
		if err != nil {
			t.Fatalf("reparse of\n%s\nfailed: %v", out, err)
		}
		if d := plansEqual(p, q); d != "" {
			t.Fatalf("round trip differs: %s", d)
		}
	})
}

// TestParseManyLimits checks that a large plan parses quickly and that a failure late in it
// is blamed on the right limit.
func TestParseManyLimits(t *testing.T) {
	var b strings.Builder
	b.WriteString("plans:\n  big:\n    limits:\n")
	const n = 5000
	for i := range n {
		fmt.Fprintf(&b, "      - {name: l%d, capacity: %d, rate: 1/s}\n", i, i+1)
	}
	good := b.String()
	p := mustParse(t, good)
	if pl, _ := p.Plan("big"); len(pl.Limits) != n || pl.MaxWeight() != 1 {
		t.Fatalf("got %d limits, max weight %d", len(pl.Limits), pl.MaxWeight())
	}
	bad := good + "      - {capacity: 1000000000000, rate: 1/s}\n"
	_, err := plans.Parse("big.yaml", []byte(bad))
	want := fmt.Sprintf("plans: big.yaml:%d: plans.big.limits[%d]: capacity 1000000000000 takes longer than 285 years", n+4, n)
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error = %v, want %q…", err, want)
	}
}

// TestParseErrorLocatesLimit: an error within a limit carries the plan and the limit's index as
// values, whether the parser or bucket.NewPlan found it; other errors carry index -1.
func TestParseErrorLocatesLimit(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		plan      string
		limit     int
		cause     bool // wraps a *bucket.LimitError
	}{
		{"bad rate", "plans:\n  gold:\n    limits:\n      - {capacity: 1, rate: 1/s}\n      - {capacity: 1, rate: 1/x}\n", "gold", 1, false},
		{"refused by NewPlan", "plans:\n  gold:\n    limits:\n      - {capacity: 1, rate: 1/s}\n      - {capacity: 1, rate: 1/s}\n      - {capacity: 1000000000, rate: 1/d}\n", "gold", 2, true},
		{"duplicate name", "plans:\n  gold:\n    limits:\n      - {name: a, capacity: 1, rate: 1/s}\n      - {name: a, capacity: 1, rate: 1/s}\n", "gold", 1, false},
		{"plan without limits", "plans:\n  gold: {limits: []}\n", "gold", -1, false},
		{"unknown tenant plan", "plans:\n  gold: {limits: [{capacity: 1, rate: 1/s}]}\ntenants: {acme: silver}\n", "", -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := plans.Parse("plans.yaml", []byte(tc.src))
			var pe *plans.Error
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not a *plans.Error", err)
			}
			if pe.Plan != tc.plan || pe.Limit != tc.limit {
				t.Errorf("error %q: plan %q limit %d, want %q %d", err, pe.Plan, pe.Limit, tc.plan, tc.limit)
			}
			var le *bucket.LimitError
			if got := errors.As(err, &le); got != tc.cause {
				t.Errorf("error %q wraps a *bucket.LimitError: %v, want %v", err, got, tc.cause)
			} else if got && le.Index != tc.limit {
				t.Errorf("LimitError index %d, want %d", le.Index, tc.limit)
			}
		})
	}
}

// FuzzParseWindow checks that ParseWindow never panics, that what it accepts is a whole number
// of microseconds from 1µs to bucket.MaxWindow, and that the README's way of writing it back
// (bucket.ShortDuration) reads the same.
func FuzzParseWindow(f *testing.F) {
	for _, s := range []string{"3s", "1h", "1h30m", "7d", "500ms", "1µs", "0s", "-1s", "1ns", "36500d", "36501d", "1.5d", "d", "99999999999999999999d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := plans.ParseWindow(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "plans: ") {
				t.Fatalf("ParseWindow(%q) error %q lacks the package prefix", s, err)
			}
			return
		}
		if d < time.Microsecond || d%time.Microsecond != 0 || d > bucket.MaxWindow {
			t.Fatalf("ParseWindow(%q) = %v", s, d)
		}
		if again, err := plans.ParseWindow(bucket.ShortDuration(d)); err != nil || again != d {
			t.Fatalf("ParseWindow(%q) = %v, written %q, read back %v, %v", s, d, bucket.ShortDuration(d), again, err)
		}
	})
}

// TestParseMode: a plan's mode is enforce (the default, also written out) or shadow; anything
// else is refused at its line.
func TestParseMode(t *testing.T) {
	p := mustParse(t, `plans:
  trial:
    mode: shadow
    limits:
      - {capacity: 5, rate: 1/s}
  real:
    limits:
      - {capacity: 5, rate: 1/s}
    mode: enforce
  plain:
    limits:
      - {capacity: 5, rate: 1/s}
`)
	for name, want := range map[string]bool{"trial": true, "real": false, "plain": false} {
		if pl, _ := p.Plan(name); pl.Shadow != want {
			t.Errorf("plan %s: Shadow %v, want %v", name, pl.Shadow, want)
		}
	}
	if d := p.Describe(); !strings.Contains(d, "trial: 1 limit, max weight 5, shadow mode") {
		t.Errorf("Describe() does not say trial is in shadow mode:\n%s", d)
	}
	for _, c := range []struct{ doc, want string }{
		{"plans:\n  p:\n    mode: audit\n    limits: [{capacity: 1, rate: 1/s}]\n", `plans.yaml:3: plans.p.mode: unknown mode "audit" (want enforce or shadow)`},
		{"plans:\n  p:\n    limits: [{capacity: 1, rate: 1/s}]\n    mode: [shadow]\n", "plans.yaml:4: plans.p.mode: want enforce or shadow, got a list"},
		{"plans:\n  p:\n    mode: shadow\n", "plans.yaml:3: plans.p.limits: missing (want a list of limits)"},
		{"plans:\n  p:\n    mood: shadow\n    limits: [{capacity: 1, rate: 1/s}]\n", `plans.yaml:3: plans.p.mood: unknown key "mood" (want limits, mode, pool, share, max_wait or priority_aging)`},
	} {
		_, err := plans.Parse("plans.yaml", []byte(c.doc))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want it to contain %q", c.doc, err, c.want)
		}
	}
}

func TestParseBreaker(t *testing.T) {
	p, err := plans.Parse("plans.yaml", []byte("pools:\n  api: {concurrency: 64, lease: 30s, adaptive: {min: 2}, breaker: {failures: 50%, window: 30s, cooldown: 10s, probes: 2}}\n  db: {concurrency: 8, lease: 1m, breaker: {failures: 90, window: 1m, cooldown: 5s, min_jobs: 100}}\nplans:\n  p: {pool: api, limits: [{capacity: 1, rate: 1/s}]}\n  q: {pool: db, limits: [{capacity: 1, rate: 1/s}]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bucket.Breaker{}
	for _, pl := range p.Pools() {
		got[pl.Name] = *pl.Breaker
	}
	want := map[string]bucket.Breaker{
		"api": {Failures: 50, Window: 30 * time.Second, Cooldown: 10 * time.Second, Probes: 2, MinJobs: 10},
		"db":  {Failures: 90, Window: time.Minute, Cooldown: 5 * time.Second, Probes: 1, MinJobs: 100},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("breakers %+v, want %+v", got, want)
	}
	for _, pl := range p.Pools() {
		if (pl.Name == "api") != (pl.Adaptive != nil) || (pl.Adaptive != nil && pl.Adaptive.Min != 2) {
			t.Errorf("pool %s: adaptive %+v, want min 2 for api alone", pl.Name, pl.Adaptive)
		}
	}
}

// TestParseMaxWait: a plan's max_wait is a duration as a window's (Go's, or whole days), its
// bound on how long a job may wait; absent, none. Anything else is refused at its line.
func TestParseMaxWait(t *testing.T) {
	p := mustParse(t, `plans:
  urgent:
    max_wait: 90s
    limits: [{capacity: 5, rate: 1/s}]
  monthly:
    limits: [{kind: quota, limit: 100, period: month}]
    max_wait: 2d
  plain:
    limits: [{capacity: 5, rate: 1/s}]
`)
	for name, want := range map[string]time.Duration{"urgent": 90 * time.Second, "monthly": 48 * time.Hour, "plain": 0} {
		if pl, _ := p.Plan(name); pl.MaxWait != want {
			t.Errorf("plan %s: MaxWait %v, want %v", name, pl.MaxWait, want)
		}
	}
	if d := p.Describe(); !strings.Contains(d, "urgent: 1 limit, max weight 5, jobs wait at most 1m30s") || !strings.Contains(d, "monthly: 1 limit, max weight 100, jobs wait at most 2d") {
		t.Errorf("Describe() does not give the max_wait:\n%s", d)
	}
	for _, c := range []struct{ doc, want string }{
		{"plans:\n  p:\n    max_wait: 0s\n    limits: [{capacity: 1, rate: 1/s}]\n", `plans.yaml:3: plans.p.max_wait: "0s" is not positive`},
		{"plans:\n  p:\n    limits: [{capacity: 1, rate: 1/s}]\n    max_wait: soon\n", `plans.yaml:4: plans.p.max_wait: "soon" is not a duration (want e.g. 500ms, 3s, 1h30m or 7d)`},
		{"plans:\n  p:\n    max_wait: 3600\n    limits: [{capacity: 1, rate: 1/s}]\n", `plans.yaml:3: plans.p.max_wait: want a duration such as 500ms, 3s, 1h30m or 7d, got 3600`},
		{"plans:\n  p:\n    max_wait: [1h]\n    limits: [{capacity: 1, rate: 1/s}]\n", `plans.yaml:3: plans.p.max_wait: want a duration such as 500ms, 3s, 1h30m or 7d, got a list`},
		{"plans:\n  p:\n    max_wait:\n    limits: [{capacity: 1, rate: 1/s}]\n", `plans.yaml:3: plans.p.max_wait: want a duration such as 500ms, 3s, 1h30m or 7d, got nothing`},
		{"plans:\n  p:\n    max_wait: 36501d\n    limits: [{capacity: 1, rate: 1/s}]\n", `plans.yaml:3: plans.p.max_wait: "36501d" is longer than 100 years`},
		{"plans:\n  p:\n    max_wait: 1h\n    max_wait: 2h\n    limits: [{capacity: 1, rate: 1/s}]\n", `plans.yaml:4: plans.p.max_wait: duplicate key "max_wait" (first at line 3)`},
		{"plans:\n  p:\n    limits: [{capacity: 1, rate: 1/s, max_wait: 1h}]\n", `plans.yaml:3: plans.p.limits[0].max_wait: unknown key "max_wait"`},
	} {
		_, err := plans.Parse("plans.yaml", []byte(c.doc))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want it to contain %q", c.doc, err, c.want)
		}
	}
}

// TestParsePriorityAging: a plan's priority_aging is a duration as a window's, the period after
// which a waiting job rises one priority level; absent, none. Anything else is refused at its
// line.
func TestParsePriorityAging(t *testing.T) {
	p := mustParse(t, `plans:
  mail:
    priority_aging: 10m
    limits: [{capacity: 5, rate: 1/s}]
  plain:
    limits: [{capacity: 5, rate: 1/s}]
`)
	for name, want := range map[string]time.Duration{"mail": 10 * time.Minute, "plain": 0} {
		if pl, _ := p.Plan(name); pl.PriorityAging != want {
			t.Errorf("plan %s: PriorityAging %v, want %v", name, pl.PriorityAging, want)
		}
	}
	if d := p.Describe(); !strings.Contains(d, "mail: 1 limit, max weight 5, a waiting job's priority rises one level every 10m") {
		t.Errorf("Describe() does not give the priority_aging:\n%s", d)
	}
	for _, c := range []struct{ doc, want string }{
		{"plans:\n  p:\n    priority_aging: 0s\n    limits: [{capacity: 1, rate: 1/s}]\n", `plans.yaml:3: plans.p.priority_aging: "0s" is not positive`},
		{"plans:\n  p:\n    limits: [{capacity: 1, rate: 1/s}]\n    priority_aging: often\n", `plans.yaml:4: plans.p.priority_aging: "often" is not a duration (want e.g. 500ms, 3s, 1h30m or 7d)`},
		{"plans:\n  p:\n    priority_aging: 600\n    limits: [{capacity: 1, rate: 1/s}]\n", `plans.yaml:3: plans.p.priority_aging: want a duration such as 500ms, 3s, 1h30m or 7d, got 600`},
		{"plans:\n  p:\n    priority_aging: 1m\n    priority_aging: 2m\n    limits: [{capacity: 1, rate: 1/s}]\n", `plans.yaml:4: plans.p.priority_aging: duplicate key "priority_aging" (first at line 3)`},
		{"plans:\n  p:\n    priority_agin: 1m\n    limits: [{capacity: 1, rate: 1/s}]\n", `plans.yaml:3: plans.p.priority_agin: unknown key "priority_agin"`},
	} {
		_, err := plans.Parse("plans.yaml", []byte(c.doc))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want it to contain %q", c.doc, err, c.want)
		}
	}
}
