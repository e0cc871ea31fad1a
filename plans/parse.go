package plans

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // time zones mean the same on every machine, with or without a zoneinfo

	"go.yaml.in/yaml/v3"

	"github.com/admitter/admitter/bucket"
)

// Load reads and parses the plans file at path (see Parse). An unreadable or missing file is an
// error wrapping both ErrFile and the error from the file system, naming path.
func Load(path string) (*bucket.Plans, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFile, err)
	}
	return Parse(path, data)
}

// Parse parses the contents of a plans file (see the package comment for the format); filename
// is used only in error messages. It stops at the first problem found: keys of a mapping are
// checked before its values, and references between plans, tenants and default_plan last. The
// error is an *Error (wrapping ErrFile) reading "plans: FILE:LINE: FIELD: problem", where FIELD
// is a path such as plans.gold.limits[1].rate (FIELD or LINE is missing when the problem has
// none, such as an empty file or a YAML syntax error reported without a line).
func Parse(filename string, data []byte) (*bucket.Plans, error) {
	if filename == "" {
		filename = "plans file"
	}
	ps := parser{file: filename, limit: -1}
	root, err := ps.document(data)
	if err != nil {
		return nil, err
	}
	return ps.top(root)
}

// parser walks the YAML node tree of one plans file.
type parser struct {
	file string
	// plan and limit locate what is being parsed, for errors: the plan's name ("" outside one)
	// and the limit's index (-1 outside one).
	plan  string
	limit int
	// uses are the plans' pool: fields, resolved once every key is read.
	uses []poolUse
}

// parsed is what the parser gathered, before it becomes a bucket.Plans.
type parsed struct {
	plans   map[string]*bucket.Plan
	list    []*bucket.Plan // in file order
	tenants map[string]string
	def     string
	pools   map[string]*bucket.Pool
}

// poolUse is a plan's pool: field, to resolve against the pools.
type poolUse struct {
	plan  *bucket.Plan
	name  string
	line  int
	field string
}

// pair is one key and value of a YAML mapping.
type pair struct {
	key       string
	keyNode   *yaml.Node
	valueNode *yaml.Node
}

// errorf returns an error at line (0: unknown) and field ("": none), in the plan and limit being
// parsed.
func (ps *parser) errorf(line int, field, format string, args ...any) error {
	return ps.wrap(line, field, fmt.Sprintf(format, args...), nil)
}

// wrap returns an error at line and field, in the plan and limit being parsed, saying msg about
// cause.
func (ps *parser) wrap(line int, field, msg string, cause error) error {
	return &Error{File: ps.file, Line: line, Field: field, Plan: ps.plan, Limit: ps.limit, Msg: msg, Err: cause}
}

// syntaxError turns an error of the YAML parser, "yaml: line N: problem" or "yaml: problem", into
// a plans file error.
func (ps *parser) syntaxError(err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, after, ok := strings.Cut(rest, ": "); ok {
			if n, err := strconv.Atoi(num); err == nil && n > 0 {
				line, msg = n, after
			}
		}
	}
	return ps.wrap(line, "", "invalid YAML: "+msg, err)
}

// document parses data into the root node of its single YAML document. Further documents are an
// error unless they are empty.
func (ps *parser) document(data []byte) (*yaml.Node, error) {
	const empty = "the file is empty (want a mapping with plans, tenants and default_plan)"
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return nil, ps.errorf(0, "", empty)
	} else if err != nil {
		return nil, ps.syntaxError(err)
	}
	for {
		var extra yaml.Node
		err := dec.Decode(&extra)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, ps.syntaxError(err)
		}
		if len(extra.Content) == 1 && isNull(extra.Content[0]) {
			continue
		}
		return nil, ps.errorf(extra.Line, "", "the file holds more than one YAML document")
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || isNull(doc.Content[0]) {
		return nil, ps.errorf(0, "", empty)
	}
	return doc.Content[0], nil
}

// top parses the top-level mapping.
func (ps *parser) top(root *yaml.Node) (*bucket.Plans, error) {
	pairs, err := ps.mapping(root, "", "a mapping with plans, tenants, default_plan and pools", "plans", "tenants", "default_plan", "pools")
	if err != nil {
		return nil, err
	}
	p := &parsed{plans: map[string]*bucket.Plan{}, tenants: map[string]string{}, pools: map[string]*bucket.Pool{}}
	var (
		sawPlans    bool
		tenantPairs []pair
		defNode     *yaml.Node
	)
	for _, kv := range pairs {
		switch kv.key {
		case "plans":
			sawPlans = true
			if err := ps.plans(p, kv.valueNode); err != nil {
				return nil, err
			}
		case "tenants":
			if tenantPairs, err = ps.tenants(kv.valueNode); err != nil {
				return nil, err
			}
		case "pools":
			if err := ps.pools(p, kv.valueNode); err != nil {
				return nil, err
			}
		case "default_plan":
			if isNull(kv.valueNode) {
				continue
			}
			if _, err := ps.name(kv.valueNode, "default_plan", "a plan name"); err != nil {
				return nil, err
			}
			defNode = kv.valueNode
		}
	}
	if !sawPlans {
		return nil, ps.errorf(root.Line, "plans", "missing (want a mapping of plan names to plans)")
	}
	for _, u := range ps.uses {
		pool, ok := p.pools[u.name]
		if !ok {
			names := make([]string, 0, len(p.pools))
			for n := range p.pools {
				names = append(names, n)
			}
			slices.Sort(names)
			return nil, ps.errorf(u.line, u.field, "no pool named %s (pools: %s)", quote(u.name), orNone(names))
		}
		u.plan.Pool = pool
	}
	for _, kv := range tenantPairs {
		plan := kv.valueNode.Value
		if _, ok := p.plans[plan]; !ok {
			return nil, ps.errorf(kv.valueNode.Line, fieldPath("tenants", kv.key), "no plan named %s", quote(plan))
		}
		p.tenants[kv.key] = plan
	}
	if defNode != nil {
		if _, ok := p.plans[defNode.Value]; !ok {
			return nil, ps.errorf(defNode.Line, "default_plan", "no plan named %s", quote(defNode.Value))
		}
		p.def = defNode.Value
	}
	out, err := bucket.NewPlans(p.list, p.tenants, p.def)
	if err != nil { // checked above: a bug
		return nil, ps.wrap(0, "", err.Error(), err)
	}
	return out, nil
}

// plans parses the plans mapping into p.
func (ps *parser) plans(p *parsed, n *yaml.Node) error {
	const want = "a mapping of plan names to plans"
	if isNull(n) {
		return ps.errorf(n.Line, "plans", "no plans (want %s)", want)
	}
	pairs, err := ps.mapping(n, "plans", want)
	if err != nil {
		return err
	}
	if len(pairs) == 0 {
		return ps.errorf(n.Line, "plans", "no plans (want %s)", want)
	}
	for _, kv := range pairs {
		ps.plan = kv.key
		pl, err := ps.parsePlan(kv.key, fieldPath("plans", kv.key), kv.valueNode)
		ps.plan, ps.limit = "", -1
		if err != nil {
			return err
		}
		p.plans[kv.key] = pl
		p.list = append(p.list, pl)
	}
	return nil
}

// parsePlan parses the plan called name at field.
func (ps *parser) parsePlan(name, field string, n *yaml.Node) (*bucket.Plan, error) {
	const want = "a mapping with limits (and optionally mode, pool, share, max_wait and priority_aging)"
	if isNull(n) {
		return nil, ps.errorf(n.Line, field, "empty plan (want %s)", want)
	}
	pairs, err := ps.mapping(n, field, want, "limits", "mode", "pool", "share", "max_wait", "priority_aging")
	if err != nil {
		return nil, err
	}
	var ln, poolNode, shareNode *yaml.Node
	shadow := false
	var share int64
	var maxWait, aging time.Duration
	for _, kv := range pairs {
		switch kv.key {
		case "max_wait":
			if maxWait, err = ps.window(kv.valueNode, field+".max_wait"); err != nil {
				return nil, err
			}
		case "priority_aging":
			if aging, err = ps.window(kv.valueNode, field+".priority_aging"); err != nil {
				return nil, err
			}
		case "limits":
			ln = kv.valueNode
		case "mode":
			if shadow, err = ps.mode(kv.valueNode, field+".mode"); err != nil {
				return nil, err
			}
		case "pool":
			if _, err := ps.name(kv.valueNode, field+".pool", "a pool name"); err != nil {
				return nil, err
			}
			poolNode = kv.valueNode
		case "share":
			if share, err = ps.integer(kv.valueNode, field+".share", bucket.MaxShare); err != nil {
				return nil, err
			}
			shareNode = kv.valueNode
		}
	}
	if shareNode != nil && poolNode == nil {
		return nil, ps.errorf(shareNode.Line, field+".share", "a share is of a pool: the plan names none (add pool: NAME)")
	}
	if ln == nil {
		return nil, ps.errorf(n.Line, field+".limits", "missing (want a list of limits)")
	}
	field += ".limits"
	if err := ps.noAlias(ln, field); err != nil {
		return nil, err
	}
	if isNull(ln) || (ln.Kind == yaml.SequenceNode && len(ln.Content) == 0) {
		return nil, ps.errorf(ln.Line, field, "plan %s has no limits (want at least one)", quote(name))
	}
	if ln.Kind != yaml.SequenceNode {
		return nil, ps.errorf(ln.Line, field, "want a list of limits, got %s", describe(ln))
	}
	limits := make([]bucket.Limit, 0, len(ln.Content))
	names := map[string]int{} // limit name → index
	for i, item := range ln.Content {
		f := fmt.Sprintf("%s[%d]", field, i)
		ps.limit = i
		l, err := ps.parseLimit(f, item)
		if err != nil {
			return nil, err
		}
		if l.Name != "" {
			if j, dup := names[l.Name]; dup {
				return nil, ps.errorf(keyLine(item, "name"), f+".name", "duplicate limit name %s (also %s[%d], line %d)", quote(l.Name), field, j, keyLine(ln.Content[j], "name"))
			}
			names[l.Name] = i
		}
		limits = append(limits, l)
	}
	ps.limit = -1
	pl, err := bucket.NewPlan(name, limits...)
	if le := (*bucket.LimitError)(nil); errors.As(err, &le) && le.Index >= 0 && le.Index < len(ln.Content) {
		ps.limit = le.Index
		return nil, ps.wrap(ln.Content[le.Index].Line, fmt.Sprintf("%s[%d]", field, le.Index), le.Msg, err)
	}
	if err != nil {
		return nil, ps.wrap(ln.Line, field, strings.TrimPrefix(err.Error(), "bucket: "), err)
	}
	pl.Shadow, pl.Share, pl.MaxWait, pl.PriorityAging = shadow, share, maxWait, aging
	if poolNode != nil {
		ps.uses = append(ps.uses, poolUse{plan: pl, name: poolNode.Value, line: poolNode.Line, field: strings.TrimSuffix(field, ".limits") + ".pool"})
	}
	return pl, nil
}

// pools parses the pools mapping into p: name → concurrency (and lease), and/or capacity and
// rate.
func (ps *parser) pools(p *parsed, n *yaml.Node) error {
	if isNull(n) {
		return nil
	}
	pairs, err := ps.mapping(n, "pools", "a mapping of pool names to pools")
	if err != nil {
		return err
	}
	const want = "a mapping with concurrency and lease, or capacity and rate, or all four"
	for _, kv := range pairs {
		field := fieldPath("pools", kv.key)
		if strings.ContainsAny(kv.key, "{}") {
			return ps.errorf(kv.keyNode.Line, field, "pool name %s contains '{' or '}'", quote(kv.key))
		}
		if isNull(kv.valueNode) {
			return ps.errorf(kv.valueNode.Line, field, "empty pool (want %s)", want)
		}
		fields, err := ps.mapping(kv.valueNode, field, want, "concurrency", "lease", "capacity", "rate", "breaker", "adaptive")
		if err != nil {
			return err
		}
		pool := bucket.Pool{Name: kv.key}
		lines := map[string]int{}
		for _, f := range fields {
			fp, v := field+"."+f.key, f.valueNode
			lines[f.key] = v.Line
			switch f.key {
			case "concurrency":
				if pool.Concurrency, err = ps.integer(v, fp, bucket.MaxConcurrency); err != nil {
					return err
				}
			case "lease":
				if pool.Lease, err = ps.window(v, fp); err != nil {
					return err
				}
			case "capacity":
				if pool.Capacity, err = ps.integer(v, fp, 0); err != nil {
					return err
				}
			case "rate":
				if v.Kind != yaml.ScalarNode || isNull(v) {
					return ps.errorf(v.Line, fp, "want a rate such as 10/s, got %s", describe(v))
				}
				iv, err := parseRate(v.Value)
				if err != nil {
					return ps.wrap(v.Line, fp, err.Error(), err)
				}
				pool.Rate, pool.Interval = v.Value, iv
			case "breaker":
				if pool.Breaker, err = ps.breaker(v, fp, lines); err != nil {
					return err
				}
			case "adaptive":
				afields, err := ps.mapping(v, fp, "a mapping with min (the lowest limit in force)", "min")
				if err != nil {
					return err
				}
				pool.Adaptive = &bucket.Adaptive{}
				for _, af := range afields {
					lines["adaptive."+af.key] = af.valueNode.Line
					if pool.Adaptive.Min, err = ps.integer(af.valueNode, fp+"."+af.key, bucket.MaxConcurrency); err != nil {
						return err
					}
				}
				if pool.Adaptive.Min == 0 {
					return ps.errorf(v.Line, fp+".min", "missing (want the lowest limit in force, an integer ≥ 1)")
				}
			}
		}
		switch {
		case pool.Concurrency > 0 && pool.Lease == 0:
			return ps.errorf(kv.valueNode.Line, field+".lease", "missing (a concurrency holds each slot until released or its lease ends: want a duration such as %s)", durationExamples)
		case pool.Capacity > 0 && pool.Rate == "":
			return ps.errorf(kv.valueNode.Line, field+".rate", "missing (want a rate such as 10/s)")
		case pool.Rate != "" && pool.Capacity == 0:
			return ps.errorf(kv.valueNode.Line, field+".capacity", "missing (a rate refills a capacity: want an integer ≥ 1)")
		}
		made, err := bucket.NewPool(pool)
		if le := (*bucket.LimitError)(nil); errors.As(err, &le) {
			line, ok := lines[le.Label]
			if !ok {
				line = kv.valueNode.Line
			}
			return ps.wrap(line, field+"."+le.Label, le.Msg, err)
		}
		if err != nil {
			return ps.wrap(kv.valueNode.Line, field, strings.TrimPrefix(err.Error(), "bucket: "), err)
		}
		p.pools[kv.key] = made
	}
	return nil
}

// breaker parses a pool's breaker: failures (a percentage), window, cooldown, and optionally
// probes and min_jobs; lines gets the line of each field (breaker.<field>).
func (ps *parser) breaker(n *yaml.Node, field string, lines map[string]int) (*bucket.Breaker, error) {
	const want = "a mapping with failures (a percentage such as 50%), window and cooldown, and optionally probes and min_jobs"
	fields, err := ps.mapping(n, field, want, "failures", "window", "cooldown", "probes", "min_jobs")
	if err != nil {
		return nil, err
	}
	b := &bucket.Breaker{}
	for _, f := range fields {
		fp, v := field+"."+f.key, f.valueNode
		lines["breaker."+f.key] = v.Line
		switch f.key {
		case "failures":
			if b.Failures, err = ps.percent(v, fp); err != nil {
				return nil, err
			}
		case "window":
			if b.Window, err = ps.window(v, fp); err != nil {
				return nil, err
			}
		case "cooldown":
			if b.Cooldown, err = ps.window(v, fp); err != nil {
				return nil, err
			}
		case "probes":
			if b.Probes, err = ps.integer(v, fp, 0); err != nil {
				return nil, err
			}
		case "min_jobs":
			if b.MinJobs, err = ps.integer(v, fp, 0); err != nil {
				return nil, err
			}
		}
	}
	for _, need := range []string{"failures", "window", "cooldown"} {
		if _, ok := lines["breaker."+need]; !ok {
			return nil, ps.errorf(n.Line, field+"."+need, "missing (want %s)", want)
		}
	}
	return b, nil
}

// percent parses a share in percent: "50%" (or 50), an integer from 1 to 100.
func (ps *parser) percent(n *yaml.Node, field string) (int64, error) {
	const want = "want a percentage from 1% to 100%, such as 50%"
	if n.Kind != yaml.ScalarNode || isNull(n) {
		return 0, ps.errorf(n.Line, field, "%s, got %s", want, describe(n))
	}
	v, _ := strings.CutSuffix(n.Value, "%")
	p, err := strconv.ParseInt(v, 10, 64)
	if err != nil || !allDigits(v) || p < 1 || p > 100 {
		return 0, ps.errorf(n.Line, field, "%s, got %s", want, describe(n))
	}
	return p, nil
}

// orNone is names joined by ", ", or "none".
func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// mode parses a plan's mode: enforce (the default) or shadow; it reports whether it is shadow.
func (ps *parser) mode(n *yaml.Node, field string) (bool, error) {
	if err := ps.noAlias(n, field); err != nil {
		return false, err
	}
	if n.Kind != yaml.ScalarNode || isNull(n) {
		return false, ps.errorf(n.Line, field, "want enforce or shadow, got %s", describe(n))
	}
	switch n.Value {
	case "enforce":
		return false, nil
	case "shadow":
		return true, nil
	}
	return false, ps.errorf(n.Line, field, "unknown mode %s (want enforce or shadow)", quote(n.Value))
}

// kindFields lists the fields each kind of limit takes, in the order messages name them.
var kindFields = [...][]string{
	bucket.KindBucket: {"name", "kind", "capacity", "rate"},
	bucket.KindWindow: {"name", "kind", "limit", "window"},
	bucket.KindQuota:  {"name", "kind", "limit", "period", "timezone"},

	bucket.KindConcurrency: {"name", "kind", "limit", "lease"},
}

// parseLimit parses one limit at field: its kind first (default bucket), then its keys against
// that kind's fields, then their values.
func (ps *parser) parseLimit(field string, n *yaml.Node) (bucket.Limit, error) {
	var l bucket.Limit
	pairs, err := ps.mapping(n, field, "a mapping of a limit's fields (name, kind, and capacity and rate, or limit and window, or limit, period and timezone, or limit and lease)")
	if err != nil {
		return l, err
	}
	for _, kv := range pairs {
		if kv.key == "kind" {
			if l.Kind, err = ps.kind(kv.valueNode, field+".kind"); err != nil {
				return l, err
			}
		}
	}
	fields := kindFields[l.Kind]
	takes := fmt.Sprintf("a %s limit takes %s", l.Kind, andList(fields))
	for _, kv := range pairs {
		if slices.Contains(fields, kv.key) {
			continue
		}
		var owners []string
		for k, fs := range kindFields {
			if slices.Contains(fs, kv.key) {
				owners = append(owners, bucket.Kind(k).String())
			}
		}
		if len(owners) == 0 {
			return l, ps.errorf(kv.keyNode.Line, fieldPath(field, kv.key), "unknown key %s (%s)", quote(kv.key), takes)
		}
		return l, ps.errorf(kv.keyNode.Line, fieldPath(field, kv.key), "%s is a field of a %s limit, not of a %s one (%s)", quote(kv.key), orList(owners), l.Kind, takes)
	}
	seen := map[string]bool{}
	for _, kv := range pairs {
		f := field + "." + kv.key
		v := kv.valueNode
		if err := ps.noAlias(v, f); err != nil {
			return l, err
		}
		seen[kv.key] = true
		switch kv.key {
		case "name":
			name, err := ps.name(v, f, "a limit name")
			if err != nil {
				return l, err
			}
			if allDigits(name) {
				return l, ps.errorf(v.Line, f, "%s is all digits, which would read as an index (unnamed limits are labelled by index)", quote(name))
			}
			l.Name = name
		case "capacity":
			if l.Capacity, err = ps.integer(v, f, 0); err != nil {
				return l, err
			}
		case "limit":
			most := int64(bucket.MaxLimit)
			if l.Kind == bucket.KindConcurrency {
				most = bucket.MaxConcurrency
			}
			if l.Capacity, err = ps.integer(v, f, most); err != nil {
				return l, err
			}
		case "rate":
			if v.Kind != yaml.ScalarNode || isNull(v) {
				return l, ps.errorf(v.Line, f, "want a rate such as 10/s, got %s", describe(v))
			}
			iv, err := parseRate(v.Value)
			if err != nil {
				return l, ps.wrap(v.Line, f, err.Error(), err)
			}
			l.Rate, l.Interval = v.Value, iv
		case "window":
			if l.Window, err = ps.window(v, f); err != nil {
				return l, err
			}
		case "lease":
			if l.Lease, err = ps.window(v, f); err != nil {
				return l, err
			}
		case "period":
			if l.Period, err = ps.period(v, f); err != nil {
				return l, err
			}
		case "timezone":
			if l.Location, err = ps.zone(v, f); err != nil {
				return l, err
			}
		}
	}
	for _, key := range fields {
		if seen[key] {
			continue
		}
		switch key {
		case "capacity", "limit":
			return l, ps.errorf(n.Line, field+"."+key, "missing (want an integer ≥ 1)")
		case "rate":
			return l, ps.errorf(n.Line, field+".rate", "missing (want a rate such as 10/s)")
		case "window", "lease":
			return l, ps.errorf(n.Line, field+"."+key, "missing (want a duration such as %s)", durationExamples)
		case "period":
			return l, ps.errorf(n.Line, field+".period", "missing (want %s)", periodNames)
		}
	}
	return l, nil
}

// kind parses a limit's kind.
func (ps *parser) kind(n *yaml.Node, field string) (bucket.Kind, error) {
	const want = "bucket, window, quota or concurrency"
	if err := ps.noAlias(n, field); err != nil {
		return 0, err
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" {
		for k := bucket.KindBucket; k <= bucket.KindConcurrency; k++ {
			if n.Value == k.String() {
				return k, nil
			}
		}
		return 0, ps.errorf(n.Line, field, "%s is not a kind (want %s)", quote(n.Value), want)
	}
	return 0, ps.errorf(n.Line, field, "want %s, got %s", want, describe(n))
}

// durationExamples illustrates the window syntax in messages.
const durationExamples = "500ms, 3s, 1h30m or 7d"

// window parses a window's length: a Go duration ("3s", "1h30m") or a whole number of days
// ("7d"), a whole number of microseconds from 1µs to 100 years.
func (ps *parser) window(n *yaml.Node, field string) (time.Duration, error) {
	if n.Kind != yaml.ScalarNode || isNull(n) || n.ShortTag() != "!!str" {
		return 0, ps.errorf(n.Line, field, "want a duration such as %s, got %s", durationExamples, describe(n))
	}
	d, err := ParseWindow(n.Value)
	if err != nil {
		return 0, ps.wrap(n.Line, field, strings.TrimPrefix(err.Error(), "plans: "), err)
	}
	return d, nil
}

// ParseWindow parses the length of a window: a Go duration ("500ms", "3s", "1h30m", see
// time.ParseDuration) or a whole number of days ("7d"). It must be a whole number of
// microseconds from 1µs to 100 years (bucket.MaxWindow).
func ParseWindow(s string) (time.Duration, error) {
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok && allDigits(days) {
		n, err := strconv.ParseInt(days, 10, 64)
		if err != nil || n > int64(bucket.MaxWindow/(24*time.Hour)) {
			return 0, fmt.Errorf("plans: %s is longer than 100 years", quote(s))
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("plans: %s is not a duration (want e.g. %s)", quote(s), durationExamples)
		}
	}
	switch {
	case d <= 0:
		return 0, fmt.Errorf("plans: %s is not positive", quote(s))
	case d%time.Microsecond != 0:
		return 0, fmt.Errorf("plans: %s is not a whole number of microseconds", quote(s))
	case d > bucket.MaxWindow:
		return 0, fmt.Errorf("plans: %s is longer than 100 years", quote(s))
	}
	return d, nil
}

// periodNames lists the periods in messages.
const periodNames = "minute, hour, day, week or month"

// period parses a quota's calendar period.
func (ps *parser) period(n *yaml.Node, field string) (bucket.Period, error) {
	if n.Kind != yaml.ScalarNode || isNull(n) || n.ShortTag() != "!!str" {
		return 0, ps.errorf(n.Line, field, "want %s, got %s", periodNames, describe(n))
	}
	p, ok := bucket.ParsePeriod(n.Value)
	if !ok {
		return 0, ps.errorf(n.Line, field, "%s is not a period (want %s)", quote(n.Value), periodNames)
	}
	return p, nil
}

// zone parses a quota's time zone: an IANA name such as Europe/Paris, or UTC.
func (ps *parser) zone(n *yaml.Node, field string) (*time.Location, error) {
	const want = "an IANA time zone name such as Europe/Paris or UTC"
	if n.Kind != yaml.ScalarNode || isNull(n) || n.ShortTag() != "!!str" || n.Value == "" {
		return nil, ps.errorf(n.Line, field, "want %s, got %s", want, describe(n))
	}
	if n.Value == "Local" {
		return nil, ps.errorf(n.Line, field, `"Local" depends on the machine (want %s)`, want)
	}
	loc, err := time.LoadLocation(n.Value)
	if err != nil {
		return nil, ps.wrap(n.Line, field, fmt.Sprintf("%s is not a time zone (want %s)", quote(n.Value), want), err)
	}
	return loc, nil
}

// integer parses a capacity or a limit: a YAML integer ≥ 1, and at most most when most > 0.
func (ps *parser) integer(n *yaml.Node, field string, most int64) (int64, error) {
	const want = "want an integer ≥ 1"
	if n.Kind != yaml.ScalarNode || isNull(n) {
		return 0, ps.errorf(n.Line, field, "%s, got %s", want, describe(n))
	}
	var c int64
	if n.ShortTag() != "!!int" {
		if n.ShortTag() == "!!float" && allDigits(strings.TrimPrefix(n.Value, "+")) {
			return 0, ps.errorf(n.Line, field, "%s is too large", n.Value)
		}
		return 0, ps.errorf(n.Line, field, "%s is not an integer (%s)", describe(n), want)
	}
	if err := n.Decode(&c); err != nil {
		return 0, ps.errorf(n.Line, field, "%s is too large", describe(n))
	}
	if c < 1 {
		return 0, ps.errorf(n.Line, field, "%s is not positive (%s)", describe(n), want)
	}
	if most > 0 && c > most {
		return 0, ps.errorf(n.Line, field, "%s is too large (at most %d)", describe(n), most)
	}
	return c, nil
}

// name parses a plan or limit name: a non-empty scalar.
func (ps *parser) name(n *yaml.Node, field, what string) (string, error) {
	if err := ps.noAlias(n, field); err != nil {
		return "", err
	}
	if n.Kind != yaml.ScalarNode || isNull(n) || n.Value == "" {
		return "", ps.errorf(n.Line, field, "want %s, got %s", what, describe(n))
	}
	return n.Value, nil
}

// tenants parses the tenants mapping. Each returned pair's valueNode is a scalar plan name, still
// to be checked against the plans.
func (ps *parser) tenants(n *yaml.Node) ([]pair, error) {
	if isNull(n) {
		return nil, nil
	}
	pairs, err := ps.mapping(n, "tenants", "a mapping of tenant names to plan names")
	if err != nil {
		return nil, err
	}
	for _, kv := range pairs {
		f := fieldPath("tenants", kv.key)
		if strings.ContainsAny(kv.key, "{}") {
			return nil, ps.wrap(kv.keyNode.Line, f, fmt.Sprintf("tenant name %s contains '{' or '}'", quote(kv.key)), bucket.ErrInvalidTenant)
		}
		if _, err := ps.name(kv.valueNode, f, "a plan name"); err != nil {
			return nil, err
		}
	}
	return pairs, nil
}

// mapping checks that n is a mapping whose keys are non-empty, unique scalars, and, when allowed
// is not empty, among allowed. want describes the expected mapping for messages.
func (ps *parser) mapping(n *yaml.Node, field, want string, allowed ...string) ([]pair, error) {
	if err := ps.noAlias(n, field); err != nil {
		return nil, err
	}
	if n.Kind != yaml.MappingNode {
		return nil, ps.errorf(n.Line, field, "want %s, got %s", want, describe(n))
	}
	pairs := make([]pair, 0, len(n.Content)/2)
	seen := make(map[string]*yaml.Node, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if err := ps.noAlias(k, field); err != nil {
			return nil, err
		}
		if k.Kind != yaml.ScalarNode || isNull(k) || k.Value == "" {
			return nil, ps.errorf(k.Line, field, "want a non-empty name as key, got %s", describe(k))
		}
		f := fieldPath(field, k.Value)
		if len(allowed) > 0 && !slices.Contains(allowed, k.Value) {
			return nil, ps.errorf(k.Line, f, "unknown key %s (want %s)", quote(k.Value), orList(allowed))
		}
		if first, dup := seen[k.Value]; dup {
			return nil, ps.errorf(k.Line, f, "duplicate key %s (first at line %d)", quote(k.Value), first.Line)
		}
		seen[k.Value] = k
		pairs = append(pairs, pair{key: k.Value, keyNode: k, valueNode: v})
	}
	return pairs, nil
}

// keyLine returns the line of key in mapping n, else the line of n.
func keyLine(n *yaml.Node, key string) int {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i].Line
		}
	}
	return n.Line
}

// noAlias rejects YAML aliases, which the format does not use.
func (ps *parser) noAlias(n *yaml.Node, field string) error {
	if n.Kind == yaml.AliasNode {
		return ps.errorf(n.Line, field, "YAML aliases (*%s) are not supported", n.Value)
	}
	return nil
}

// isNull reports whether n is an empty or null scalar ("", "~", "null").
func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// describe describes n for an error message: a quoted string, a number as written, "a
// mapping", and so on.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "nothing"
		case "!!str":
			return quote(n.Value)
		case "!!int", "!!float", "!!bool":
			if len(n.Value) <= maxQuoted {
				return n.Value
			}
		}
		return quote(n.Value)
	}
	return "nothing"
}

// fieldPath appends key to the field path prefix: prefix.key for plain keys, prefix["key"]
// otherwise.
func fieldPath(prefix, key string) string {
	plain := key != ""
	for _, r := range key {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			plain = false
			break
		}
	}
	switch {
	case !plain:
		return prefix + "[" + quote(key) + "]"
	case prefix == "":
		return key
	default:
		return prefix + "." + key
	}
}

// andList formats words as "a, b and c".
func andList(words []string) string {
	if len(words) == 1 {
		return words[0]
	}
	return strings.Join(words[:len(words)-1], ", ") + " and " + words[len(words)-1]
}

// orList formats words as "a, b or c".
func orList(words []string) string {
	if len(words) == 1 {
		return words[0]
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}
