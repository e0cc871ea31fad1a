package bucket

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Plans is a loaded plans file: named plans, the plans of known tenants, and an optional default
// plan for every other tenant. A file looks like this:
//
//	plans:
//	  free:
//	    limits:
//	      - {capacity: 5, rate: 2/s}
//	  gold:
//	    limits:
//	      - {name: burst, capacity: 20, rate: 10/s}
//	      - {name: daily, capacity: 100000, rate: 100000/d}
//	tenants:
//	  acme: gold
//	  bob: free
//	default_plan: free   # optional; when absent, jobs of unknown tenants are rejected
//
// The top level holds plans (required, at least one), tenants and default_plan (both optional;
// an explicit null means absent). A plan holds limits (required, at least one); a limit holds
// capacity (an integer ≥ 1), rate (see [ParseRate]) and name (optional: unnamed limits are
// labelled by their index, so a name must not be all digits; names are unique within a plan).
// Plan and tenant names are non-empty strings; tenant names must not contain '{' or '}'. Keys are
// checked strictly: unknown and duplicate keys are errors, and so are YAML aliases and more than
// one non-empty YAML document.
//
// A Plans is immutable and safe for concurrent use.
type Plans struct {
	plans   map[string]*Plan
	names   []string // sorted
	tenants map[string]string
	def     string
}

// LoadPlans reads and parses the plans file at path (see [ParsePlans]). An unreadable or missing
// file is an error wrapping both [ErrPlansFile] and the error from the file system, naming path.
func LoadPlans(path string) (*Plans, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPlansFile, err)
	}
	return ParsePlans(path, data)
}

// ParsePlans parses the contents of a plans file (see [Plans] for the format); filename is used
// only in error messages. It stops at the first problem found: keys of a mapping are checked
// before its values, and references between plans, tenants and default_plan last. The error wraps
// [ErrPlansFile] and reads "bucket: FILE:LINE: FIELD: problem", where FIELD is a path such as
// plans.gold.limits[1].rate (FIELD or LINE is missing when the problem has none, such as an empty
// file or a YAML syntax error reported without a line).
func ParsePlans(filename string, data []byte) (*Plans, error) {
	if filename == "" {
		filename = "plans file"
	}
	ps := plansParser{file: filename}
	root, err := ps.document(data)
	if err != nil {
		return nil, err
	}
	return ps.top(root)
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

// Describe returns a human-readable, multi-line summary: every plan with its limits (label,
// capacity, rate as written, and the effective interval and tokens per second after rounding),
// the tenant assignments and the default plan. Plans and tenants are sorted by name. The exact
// layout is for people and may change.
func (p *Plans) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "plans (%d):\n", len(p.names))
	for _, name := range p.names {
		pl := p.plans[name]
		fmt.Fprintf(&b, "  %s: %d %s, max weight %d\n", name, len(pl.Limits), plansPlural(len(pl.Limits), "limit", "limits"), pl.MaxWeight())
		for i, l := range pl.Limits {
			fmt.Fprintf(&b, "    limit %s: capacity %d, rate %s = 1 token every %v (%s tokens/s)\n",
				l.label(i), l.Capacity, l.Rate, l.Interval, plansPerSecond(l.PerSecond()))
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

// plansFileError is a problem at a place in a plans file. It wraps ErrPlansFile and the cause, if
// any.
type plansFileError struct {
	file  string
	line  int    // 0 when unknown
	field string // "" when none
	msg   string
	cause error
}

func (e *plansFileError) Error() string {
	var b strings.Builder
	b.WriteString("bucket: ")
	b.WriteString(e.file)
	if e.line > 0 {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(e.line))
	}
	b.WriteString(": ")
	if e.field != "" {
		b.WriteString(e.field)
		b.WriteString(": ")
	}
	b.WriteString(e.msg)
	return b.String()
}

func (e *plansFileError) Unwrap() []error {
	if e.cause != nil {
		return []error{ErrPlansFile, e.cause}
	}
	return []error{ErrPlansFile}
}

// plansParser walks the YAML node tree of one plans file.
type plansParser struct {
	file string
}

// plansPair is one key and value of a YAML mapping.
type plansPair struct {
	key       string
	keyNode   *yaml.Node
	valueNode *yaml.Node
}

// errorf returns an error at line (0: unknown) and field ("": none).
func (ps *plansParser) errorf(line int, field, format string, args ...any) error {
	return &plansFileError{file: ps.file, line: line, field: field, msg: fmt.Sprintf(format, args...)}
}

// wrap returns an error at line and field whose message is cause's, without the package prefix.
func (ps *plansParser) wrap(line int, field string, cause error) error {
	return &plansFileError{file: ps.file, line: line, field: field, msg: strings.TrimPrefix(cause.Error(), "bucket: "), cause: cause}
}

// syntaxError turns an error of the YAML parser, "yaml: line N: problem" or "yaml: problem", into
// a plans file error.
func (ps *plansParser) syntaxError(err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, after, ok := strings.Cut(rest, ": "); ok {
			if n, err := strconv.Atoi(num); err == nil && n > 0 {
				line, msg = n, after
			}
		}
	}
	return &plansFileError{file: ps.file, line: line, msg: "invalid YAML: " + msg, cause: err}
}

// document parses data into the root node of its single YAML document. Further documents are an
// error unless they are empty.
func (ps *plansParser) document(data []byte) (*yaml.Node, error) {
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
		if len(extra.Content) == 1 && plansIsNull(extra.Content[0]) {
			continue
		}
		return nil, ps.errorf(extra.Line, "", "the file holds more than one YAML document")
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || plansIsNull(doc.Content[0]) {
		return nil, ps.errorf(0, "", empty)
	}
	return doc.Content[0], nil
}

// top parses the top-level mapping.
func (ps *plansParser) top(root *yaml.Node) (*Plans, error) {
	pairs, err := ps.mapping(root, "", "a mapping with plans, tenants and default_plan", "plans", "tenants", "default_plan")
	if err != nil {
		return nil, err
	}
	p := &Plans{plans: map[string]*Plan{}, tenants: map[string]string{}}
	var (
		sawPlans    bool
		tenantPairs []plansPair
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
		case "default_plan":
			if plansIsNull(kv.valueNode) {
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
	for _, kv := range tenantPairs {
		plan := kv.valueNode.Value
		if _, ok := p.plans[plan]; !ok {
			return nil, ps.errorf(kv.valueNode.Line, plansField("tenants", kv.key), "no plan named %s", plansQuote(plan))
		}
		p.tenants[kv.key] = plan
	}
	if defNode != nil {
		if _, ok := p.plans[defNode.Value]; !ok {
			return nil, ps.errorf(defNode.Line, "default_plan", "no plan named %s", plansQuote(defNode.Value))
		}
		p.def = defNode.Value
	}
	return p, nil
}

// plans parses the plans mapping into p.
func (ps *plansParser) plans(p *Plans, n *yaml.Node) error {
	const want = "a mapping of plan names to plans"
	if plansIsNull(n) {
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
		pl, err := ps.plan(kv.key, plansField("plans", kv.key), kv.valueNode)
		if err != nil {
			return err
		}
		p.plans[kv.key] = pl
		p.names = append(p.names, kv.key)
	}
	slices.Sort(p.names)
	return nil
}

// plan parses the plan called name at field.
func (ps *plansParser) plan(name, field string, n *yaml.Node) (*Plan, error) {
	const want = "a mapping with limits"
	if plansIsNull(n) {
		return nil, ps.errorf(n.Line, field, "empty plan (want %s)", want)
	}
	pairs, err := ps.mapping(n, field, want, "limits")
	if err != nil {
		return nil, err
	}
	if len(pairs) == 0 {
		return nil, ps.errorf(n.Line, field+".limits", "missing (want a list of limits)")
	}
	field += ".limits"
	ln := pairs[0].valueNode
	if err := ps.noAlias(ln, field); err != nil {
		return nil, err
	}
	if plansIsNull(ln) || (ln.Kind == yaml.SequenceNode && len(ln.Content) == 0) {
		return nil, ps.errorf(ln.Line, field, "plan %s has no limits (want at least one)", plansQuote(name))
	}
	if ln.Kind != yaml.SequenceNode {
		return nil, ps.errorf(ln.Line, field, "want a list of limits, got %s", plansDescribeNode(ln))
	}
	limits := make([]Limit, 0, len(ln.Content))
	names := map[string]int{} // limit name → index
	for i, item := range ln.Content {
		f := fmt.Sprintf("%s[%d]", field, i)
		l, err := ps.limit(f, item)
		if err != nil {
			return nil, err
		}
		if l.Name != "" {
			if j, dup := names[l.Name]; dup {
				return nil, ps.errorf(plansKeyLine(item, "name"), f+".name", "duplicate limit name %s (also %s[%d], line %d)", plansQuote(l.Name), field, j, plansKeyLine(ln.Content[j], "name"))
			}
			names[l.Name] = i
		}
		limits = append(limits, l)
	}
	pl, err := NewPlan(name, limits...)
	if err != nil {
		// Blame the first limit that makes NewPlan fail (the shortest failing prefix, found by
		// binary search), else the whole list.
		i := sort.Search(len(limits), func(i int) bool {
			_, e := NewPlan(name, limits[:i+1]...)
			return e != nil
		})
		if i < len(limits) {
			if _, e := NewPlan(name, limits[:i+1]...); e != nil {
				msg := strings.TrimPrefix(e.Error(), "bucket: ")
				msg = strings.TrimPrefix(msg, fmt.Sprintf("plan %q limit %s: ", name, limits[i].label(i)))
				return nil, &plansFileError{file: ps.file, line: ln.Content[i].Line, field: fmt.Sprintf("%s[%d]", field, i), msg: msg, cause: e}
			}
		}
		return nil, ps.wrap(ln.Line, field, err)
	}
	return pl, nil
}

// limit parses one limit at field.
func (ps *plansParser) limit(field string, n *yaml.Node) (Limit, error) {
	var l Limit
	pairs, err := ps.mapping(n, field, "a mapping with capacity, rate and an optional name", "name", "capacity", "rate")
	if err != nil {
		return l, err
	}
	var sawCapacity, sawRate bool
	for _, kv := range pairs {
		f := field + "." + kv.key
		v := kv.valueNode
		if err := ps.noAlias(v, f); err != nil {
			return l, err
		}
		switch kv.key {
		case "name":
			name, err := ps.name(v, f, "a limit name")
			if err != nil {
				return l, err
			}
			if rateAllDigits(name) {
				return l, ps.errorf(v.Line, f, "%s is all digits, which would read as an index (unnamed limits are labelled by index)", plansQuote(name))
			}
			l.Name = name
		case "capacity":
			sawCapacity = true
			c, err := ps.capacity(v, f)
			if err != nil {
				return l, err
			}
			l.Capacity = c
		case "rate":
			sawRate = true
			if v.Kind != yaml.ScalarNode || plansIsNull(v) {
				return l, ps.errorf(v.Line, f, "want a rate such as 10/s, got %s", plansDescribeNode(v))
			}
			iv, err := parseRate(v.Value)
			if err != nil {
				return l, ps.wrap(v.Line, f, err)
			}
			l.Rate, l.Interval = v.Value, iv
		}
	}
	if !sawCapacity {
		return l, ps.errorf(n.Line, field+".capacity", "missing (want an integer ≥ 1)")
	}
	if !sawRate {
		return l, ps.errorf(n.Line, field+".rate", "missing (want a rate such as 10/s)")
	}
	return l, nil
}

// capacity parses a capacity: a YAML integer ≥ 1.
func (ps *plansParser) capacity(n *yaml.Node, field string) (int64, error) {
	const want = "want an integer ≥ 1"
	if n.Kind != yaml.ScalarNode || plansIsNull(n) {
		return 0, ps.errorf(n.Line, field, "%s, got %s", want, plansDescribeNode(n))
	}
	var c int64
	if n.ShortTag() != "!!int" {
		if n.ShortTag() == "!!float" && rateAllDigits(strings.TrimPrefix(n.Value, "+")) {
			return 0, ps.errorf(n.Line, field, "%s is too large", n.Value)
		}
		return 0, ps.errorf(n.Line, field, "%s is not an integer (%s)", plansDescribeNode(n), want)
	}
	if err := n.Decode(&c); err != nil {
		return 0, ps.errorf(n.Line, field, "%s is too large", plansDescribeNode(n))
	}
	if c < 1 {
		return 0, ps.errorf(n.Line, field, "%s is not positive (%s)", plansDescribeNode(n), want)
	}
	return c, nil
}

// name parses a plan or limit name: a non-empty scalar.
func (ps *plansParser) name(n *yaml.Node, field, what string) (string, error) {
	if err := ps.noAlias(n, field); err != nil {
		return "", err
	}
	if n.Kind != yaml.ScalarNode || plansIsNull(n) || n.Value == "" {
		return "", ps.errorf(n.Line, field, "want %s, got %s", what, plansDescribeNode(n))
	}
	return n.Value, nil
}

// tenants parses the tenants mapping. Each returned pair's valueNode is a scalar plan name, still
// to be checked against the plans.
func (ps *plansParser) tenants(n *yaml.Node) ([]plansPair, error) {
	if plansIsNull(n) {
		return nil, nil
	}
	pairs, err := ps.mapping(n, "tenants", "a mapping of tenant names to plan names")
	if err != nil {
		return nil, err
	}
	for _, kv := range pairs {
		f := plansField("tenants", kv.key)
		if strings.ContainsAny(kv.key, "{}") {
			return nil, &plansFileError{file: ps.file, line: kv.keyNode.Line, field: f,
				msg: fmt.Sprintf("tenant name %s contains '{' or '}'", plansQuote(kv.key)), cause: ErrInvalidTenant}
		}
		if _, err := ps.name(kv.valueNode, f, "a plan name"); err != nil {
			return nil, err
		}
	}
	return pairs, nil
}

// mapping checks that n is a mapping whose keys are non-empty, unique scalars, and, when allowed
// is not empty, among allowed. want describes the expected mapping for messages.
func (ps *plansParser) mapping(n *yaml.Node, field, want string, allowed ...string) ([]plansPair, error) {
	if err := ps.noAlias(n, field); err != nil {
		return nil, err
	}
	if n.Kind != yaml.MappingNode {
		return nil, ps.errorf(n.Line, field, "want %s, got %s", want, plansDescribeNode(n))
	}
	pairs := make([]plansPair, 0, len(n.Content)/2)
	seen := make(map[string]*yaml.Node, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if err := ps.noAlias(k, field); err != nil {
			return nil, err
		}
		if k.Kind != yaml.ScalarNode || plansIsNull(k) || k.Value == "" {
			return nil, ps.errorf(k.Line, field, "want a non-empty name as key, got %s", plansDescribeNode(k))
		}
		f := plansField(field, k.Value)
		if len(allowed) > 0 && !slices.Contains(allowed, k.Value) {
			return nil, ps.errorf(k.Line, f, "unknown key %s (want %s)", plansQuote(k.Value), plansOrList(allowed))
		}
		if first, dup := seen[k.Value]; dup {
			return nil, ps.errorf(k.Line, f, "duplicate key %s (first at line %d)", plansQuote(k.Value), first.Line)
		}
		seen[k.Value] = k
		pairs = append(pairs, plansPair{key: k.Value, keyNode: k, valueNode: v})
	}
	return pairs, nil
}

// plansKeyLine returns the line of key in mapping n, else the line of n.
func plansKeyLine(n *yaml.Node, key string) int {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i].Line
		}
	}
	return n.Line
}

// noAlias rejects YAML aliases, which the format does not use.
func (ps *plansParser) noAlias(n *yaml.Node, field string) error {
	if n.Kind == yaml.AliasNode {
		return ps.errorf(n.Line, field, "YAML aliases (*%s) are not supported", n.Value)
	}
	return nil
}

// plansIsNull reports whether n is an empty or null scalar ("", "~", "null").
func plansIsNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// plansDescribeNode describes n for an error message: a quoted string, a number as written, "a
// mapping", and so on.
func plansDescribeNode(n *yaml.Node) string {
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
			return plansQuote(n.Value)
		case "!!int", "!!float", "!!bool":
			if len(n.Value) <= plansMaxQuoted {
				return n.Value
			}
		}
		return plansQuote(n.Value)
	}
	return "nothing"
}

// plansField appends key to the field path prefix: prefix.key for plain keys, prefix["key"]
// otherwise.
func plansField(prefix, key string) string {
	plain := key != ""
	for _, r := range key {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			plain = false
			break
		}
	}
	switch {
	case !plain:
		return prefix + "[" + plansQuote(key) + "]"
	case prefix == "":
		return key
	default:
		return prefix + "." + key
	}
}

// plansOrList formats words as "a, b or c".
func plansOrList(words []string) string {
	if len(words) == 1 {
		return words[0]
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}
