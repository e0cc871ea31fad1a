package deploy

// The stack under test and the sources of truth the deployment files are checked against.

import (
	"context"
	"fmt"
	"go/ast"
	goparser "go/parser"
	"go/token"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/admitter/admitter/wire"
	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
)

// repo is the repository root: this module's parent directory.
var repo = func() string {
	abs, err := filepath.Abs("..")
	if err != nil {
		panic(err)
	}
	return abs
}()

// rel names a file of the repository in messages.
func rel(file string) string {
	if r, err := filepath.Rel(repo, file); err == nil && !strings.HasPrefix(r, "..") {
		return filepath.ToSlash(r)
	}
	return file
}

// stack is the deployment files as checked: the repository's, except those replaced (by a
// negative test) in edited.
type stack struct {
	edited map[string][]byte // absolute path → content

	once       sync.Once
	project    *types.Project
	projectErr error
}

// onDisk is the stack as it is in the repository.
func onDisk() *stack { return &stack{} }

// edit is the stack with one repository file (slash-separated, relative to the root) replaced.
func edit(file string, content []byte) *stack {
	return &stack{edited: map[string][]byte{filepath.Join(repo, filepath.FromSlash(file)): content}}
}

func (s *stack) read(file string) ([]byte, error) {
	if b, ok := s.edited[file]; ok {
		return b, nil
	}
	return os.ReadFile(file)
}

// compose is compose.yaml as `docker compose` loads it (schema validation, interpolation with
// no variable set, as it ships without a .env file, normalization and the consistency checks),
// paths resolved against the repository root.
func (s *stack) compose() (*types.Project, error) {
	s.once.Do(func() {
		file := filepath.Join(repo, "compose.yaml")
		data, err := s.read(file)
		if err != nil {
			s.projectErr = err
			return
		}
		s.project, s.projectErr = loader.LoadWithContext(context.Background(), types.ConfigDetails{
			WorkingDir:  repo,
			ConfigFiles: []types.ConfigFile{{Filename: file, Content: data}},
			Environment: types.Mapping{},
		})
		if s.projectErr != nil {
			s.projectErr = fmt.Errorf("compose.yaml: %w", s.projectErr)
		}
	})
	return s.project, s.projectErr
}

// service is the named service of compose.yaml.
func (s *stack) service(name string) (types.ServiceConfig, error) {
	p, err := s.compose()
	if err != nil {
		return types.ServiceConfig{}, err
	}
	svc, ok := p.Services[name]
	if !ok {
		return svc, fmt.Errorf("compose.yaml: no service %q", name)
	}
	return svc, nil
}

// hostPath is the repository file a bind mount of svc puts at containerPath (the longest
// mount target that contains it wins, as in the container).
func hostPath(svc types.ServiceConfig, containerPath string) (string, bool) {
	best, bestLen := "", -1
	for _, v := range svc.Volumes {
		if v.Type != types.VolumeTypeBind {
			continue
		}
		target := path.Clean(v.Target)
		rest, ok := strings.CutPrefix(path.Clean(containerPath), target)
		if !ok || rest != "" && !strings.HasPrefix(rest, "/") && target != "/" || len(target) <= bestLen {
			continue
		}
		best, bestLen = filepath.Join(v.Source, filepath.FromSlash(rest)), len(target)
	}
	return best, bestLen >= 0
}

// listens reports whether the service's containers take connections on port: a port it
// publishes or exposes.
func listens(svc types.ServiceConfig, port string) bool {
	for _, p := range svc.Ports {
		if strconv.FormatUint(uint64(p.Target), 10) == port {
			return true
		}
	}
	for _, e := range svc.Expose {
		if strings.TrimSuffix(e, "/tcp") == port {
			return true
		}
	}
	return false
}

// serviceURL checks that raw is a URL of the given scheme whose host is a service of
// compose.yaml that listens on its port (explicit, or defaultPort); it returns that service.
func serviceURL(p *types.Project, raw, scheme, defaultPort string) (string, error) {
	if raw == "" {
		return "", fmt.Errorf("unset")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	if u.Scheme != scheme {
		return "", fmt.Errorf("%q: scheme %q, want %q", raw, u.Scheme, scheme)
	}
	svc, ok := p.Services[u.Hostname()]
	if !ok {
		return "", fmt.Errorf("%q: host %q is not a service of compose.yaml", raw, u.Hostname())
	}
	port := u.Port()
	if port == "" {
		port = defaultPort
	}
	if !listens(svc, port) {
		return "", fmt.Errorf("%q: service %s neither publishes nor exposes port %s", raw, svc.Name, port)
	}
	return svc.Name, nil
}

// listenPort is the port of a listen address that must be reachable from other containers
// (all interfaces, a fixed port).
func listenPort(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	if host != "" && host != "0.0.0.0" && host != "::" {
		return "", fmt.Errorf("%q listens on %s only: other containers cannot reach it; use 0.0.0.0:%s", addr, host, port)
	}
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
		return "", fmt.Errorf("%q: want a fixed port", addr)
	}
	return port, nil
}

// ---------------------------------------------------------------------------------------------
// Sources of truth

// goSource parses one Go file of the main module with Go's own parser.
func goSource(file string) (*ast.File, error) {
	return goparser.ParseFile(token.NewFileSet(), filepath.Join(repo, filepath.FromSlash(file)), nil, goparser.SkipObjectResolution)
}

// admitterVariables are the environment variables admitter reads, each with its default: the env
// and envDefault tags of the config struct in cmd/admitter/config.go ("" when it has none).
var admitterVariables = sync.OnceValues(func() (map[string]string, error) {
	const file = "cmd/admitter/config.go"
	f, err := goSource(file)
	if err != nil {
		return nil, err
	}
	vars := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || ts.Name.Name != "config" {
			return true
		}
		st, ok := ts.Type.(*ast.StructType)
		if !ok {
			return false
		}
		for _, field := range st.Fields.List {
			if field.Tag == nil {
				continue
			}
			tag, err := strconv.Unquote(field.Tag.Value)
			if err != nil {
				continue
			}
			if name, _, _ := strings.Cut(reflect.StructTag(tag).Get("env"), ","); name != "" {
				vars[name] = reflect.StructTag(tag).Get("envDefault")
			}
		}
		return false
	})
	if len(vars) == 0 {
		return nil, fmt.Errorf("%s: no env tag in type config", file)
	}
	return vars, nil
})

// exports describes admitter's /metrics.
type exports struct {
	metrics []string            // every metric's Prometheus name (wire.Metric.Prom)
	series  map[string]string   // every series name → its metric's name (a histogram has three)
	labels  map[string][]string // series name → its labels (nil: any)
	values  map[string][]string // label → the values it takes, for labels with a fixed set
}

// histograms are admitter's histogram metrics (admission/telemetry.go): Prometheus serves
// them as _bucket (with le), _sum and _count.
var histograms = []wire.Metric{wire.MetricWait, wire.MetricDecisionTime, wire.MetricJobTime}

// metricLabels are the labels admitter's metrics carry besides job, instance and otel_scope_*
// (admission/telemetry.go, cmd/admitter/plans.go); those not listed have none.
var metricLabels = map[wire.Metric][]string{
	wire.MetricDecisions:     {"source", "plan", "outcome", "tenant"},
	wire.MetricWait:          {"plan", "outcome", "tenant"},
	wire.MetricRedisErrors:   {"kind"},
	wire.MetricFailEvents:    {"mode"},
	wire.MetricPlansReloads:  {"result"},
	wire.MetricJobOutcomes:   {"pool", "outcome", "tenant"},
	wire.MetricJobTime:       {"pool", "tenant"},
	wire.MetricJobsExpired:   {"plan", "reason", "tenant"},
	wire.MetricOldestWaiting: {"plan", "tenant"},
}

// labelValues are the values of the labels that take a fixed set; outcome's are the jobs'
// outcomes downstream and wire's Decision* constants.
var labelValues = map[string][]string{
	"outcome": {wire.OutcomeOK, wire.OutcomeFailed, wire.OutcomeOverloaded},
	"mode":    {"open", "closed"},
	"kind":    {"timeout", "connection", "other"},
	"result":  {"ok", "error"},
	"source":  {string(wire.SourceQueue), string(wire.SourceHTTP), string(wire.SourceNATS)},
}

// exported reads the metrics from wire/wire.go: every variable whose value is a
// wire.Metric{Name, Prom, ...} literal, and the Decision* constants (the outcome label's values).
var exported = sync.OnceValues(func() (*exports, error) {
	const file = "wire/wire.go"
	f, err := goSource(file)
	if err != nil {
		return nil, err
	}
	e := &exports{series: map[string]string{}, labels: map[string][]string{}, values: map[string][]string{}}
	maps.Copy(e.values, labelValues)
	str := func(x ast.Expr) (string, bool) {
		lit, ok := x.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(lit.Value)
		return s, err == nil
	}
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok {
			continue
		}
		for _, spec := range gd.Specs {
			vs, ok := spec.(*ast.ValueSpec)
			if !ok {
				continue
			}
			for i, name := range vs.Names {
				if i >= len(vs.Values) {
					break
				}
				if gd.Tok == token.CONST && strings.HasPrefix(name.Name, "Decision") {
					if s, ok := str(vs.Values[i]); ok {
						e.values["outcome"] = append(e.values["outcome"], s)
					}
				}
				cl, ok := vs.Values[i].(*ast.CompositeLit)
				if !ok || len(cl.Elts) < 2 {
					continue
				}
				if id, ok := cl.Type.(*ast.Ident); !ok || id.Name != "Metric" {
					continue
				}
				prom, ok := str(cl.Elts[1])
				if !ok {
					return nil, fmt.Errorf("%s: %s: the Prometheus name is not a string literal", file, name.Name)
				}
				e.metrics = append(e.metrics, prom)
			}
		}
	}
	if len(e.metrics) == 0 || len(e.values["outcome"]) == 0 {
		return nil, fmt.Errorf("%s: no wire.Metric variable or no Decision constant found", file)
	}
	for _, m := range e.metrics {
		var labels []string
		for wm, l := range metricLabels {
			if wm.Prom == m {
				labels = l
			}
		}
		if slices.ContainsFunc(histograms, func(h wire.Metric) bool { return h.Prom == m }) {
			e.series[m+"_bucket"], e.labels[m+"_bucket"] = m, append(slices.Clone(labels), "le")
			e.series[m+"_sum"], e.labels[m+"_sum"] = m, labels
			e.series[m+"_count"], e.labels[m+"_count"] = m, labels
			continue
		}
		e.series[m], e.labels[m] = m, labels
	}
	for _, m := range append(slices.Collect(maps.Keys(metricLabels)), histograms...) {
		if !slices.Contains(e.metrics, m.Prom) {
			return nil, fmt.Errorf("%s: %s is not among the metrics found there", file, m.Prom)
		}
	}
	// Not admitter's own, but always there: Prometheus' per-target series and the
	// OpenTelemetry exporter's resource attributes.
	e.series["up"], e.labels["up"] = "up", []string{}
	e.series["target_info"], e.labels["target_info"] = "target_info", nil
	return e, nil
})

// goCommand runs the go command in the repository root (the main module).
func goCommand(args ...string) (string, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); ok {
		err = fmt.Errorf("go %s: %v: %s", strings.Join(args, " "), err, ee.Stderr)
	}
	return string(out), err
}

// goVersion is go.mod's go directive, as the go command reads it: major.minor.
var goVersion = sync.OnceValues(func() (string, error) {
	out, err := goCommand("list", "-m", "-f", "{{.GoVersion}}")
	if err != nil {
		return "", err
	}
	v := strings.Split(strings.TrimSpace(out), ".")
	if len(v) < 2 {
		return "", fmt.Errorf("go.mod: go %q", strings.TrimSpace(out))
	}
	return v[0] + "." + v[1], nil
})

// buildFiles are the files `go build ./cmd/admitter` reads (for Linux, without cgo): go.mod,
// go.sum and the Go and embedded files of the main module's packages it imports, slash-separated
// and relative to the repository root.
var buildFiles = sync.OnceValues(func() ([]string, error) {
	out, err := goCommand("list", "-deps", "-f",
		`{{if and .Module .Module.Main}}{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{range .EmbedFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{end}}`,
		"./cmd/admitter")
	if err != nil {
		return nil, err
	}
	files := []string{"go.mod", "go.sum"}
	for _, f := range strings.Fields(out) {
		files = append(files, rel(f))
	}
	if len(files) < 4 {
		return nil, fmt.Errorf("go list found only %q", files)
	}
	return files, nil
})

// ---------------------------------------------------------------------------------------------
// Checks and their negative tests

// A check reports what is wrong with the stack, one sentence each, naming the file and the
// line or field.
type check func(s *stack) []string

// report fails t with each problem the check finds in the repository's files.
func report(t *testing.T, c check) {
	t.Helper()
	for _, p := range c(onDisk()) {
		t.Error(p)
	}
}

// breakage is an edit of one file that a check must notice: every old (which must occur) replaced
// by new, and a problem containing want reported; {line} in want stands for the line old starts
// on (its first occurrence).
type breakage struct{ old, new, want string }

// catches applies each breakage to file and requires c to report it (and not to report it on
// the unbroken files).
func catches(t *testing.T, file string, c check, cases []breakage) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repo, filepath.FromSlash(file)))
	if err != nil {
		t.Fatal(err)
	}
	clean := c(onDisk())
	for _, b := range cases {
		at := strings.Index(string(data), b.old)
		if at < 0 {
			t.Errorf("%s has no %q to break", file, b.old)
			continue
		}
		b.want = strings.ReplaceAll(b.want, "{line}", strconv.Itoa(1+strings.Count(string(data[:at]), "\n")))
		if slices.ContainsFunc(clean, func(p string) bool { return strings.Contains(p, b.want) }) {
			t.Errorf("%q is reported on the unbroken files already", b.want)
			continue
		}
		broken := strings.ReplaceAll(string(data), b.old, b.new)
		p := c(edit(file, []byte(broken)))
		i := slices.IndexFunc(p, func(p string) bool { return strings.Contains(p, b.want) })
		if i < 0 {
			t.Errorf("%s with %q → %q: problems %q, want one containing %q", file, b.old, b.new, p, b.want)
			continue
		}
		t.Logf("caught: %s", p[i])
	}
}
