package tests

// The deployment stack (compose.yaml, Dockerfile, .dockerignore and deploy/) is checked here
// without a container engine: every file is parsed and cross-checked against the others and
// against what admitter really does (its environment variables, its plans file parser, the
// metrics it exports). The checkers are themselves tested on broken inputs
// (TestComposeCheckers*), so that a check that can no longer fail is noticed.

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/admitter/admitter/plans"
	"go.yaml.in/yaml/v3"
)

// composeRepo is the repository root, relative to this package's directory.
const composeRepo = ".."

// composeServiceNames are the services the stack must have.
var composeServiceNames = []string{"nats", "redis", "admitter", "jaeger", "prometheus", "grafana"}

// composeMetrics are the series admitter exports (scraped from a running admitter), and the
// labels each may carry besides job, instance and otel_scope_*.
var composeMetrics = map[string][]string{
	"admitter_decisions_total":                  {"plan", "outcome", "tenant"},
	"admitter_wait_seconds_bucket":              {"plan", "outcome", "tenant", "le"},
	"admitter_wait_seconds_sum":                 {"plan", "outcome", "tenant"},
	"admitter_wait_seconds_count":               {"plan", "outcome", "tenant"},
	"admitter_decision_duration_seconds_bucket": {"le"},
	"admitter_decision_duration_seconds_sum":    {},
	"admitter_decision_duration_seconds_count":  {},
	"admitter_redis_errors_total":               {"kind"},
	"admitter_fail_mode_events_total":           {"mode"},
	"admitter_jobs_in_flight":                   {},
	"admitter_jobs_parked":                      {},
	"admitter_consumer_pending":                 {},
	"admitter_consumer_ack_pending":             {},
	"admitter_consumer_redelivered":             {},
	"up":                                        {},
	"target_info":                               nil, // nil: any label (the resource's attributes)
}

// composeLabelValues are the values an enumerated label can take.
var composeLabelValues = map[string][]string{
	"outcome": {"admitted", "delayed", "dead", "degraded", "held"},
	"mode":    {"open", "closed"},
	"kind":    {"timeout", "connection", "other"},
}

// ---------------------------------------------------------------------------------------------
// compose.yaml

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image       string `yaml:"image"`
	Build       any    `yaml:"build"`
	Command     any    `yaml:"command"`
	Environment any    `yaml:"environment"`
	Ports       []any  `yaml:"ports"`
	Volumes     []any  `yaml:"volumes"`
	NetworkMode string `yaml:"network_mode"`
}

// composeInterpolate resolves ${VAR:-default}-style references as `docker compose` would with
// none of the variables set (no .env file ships), and $$ to $. A required variable (${VAR:?})
// is an error: the stack must start as shipped.
func composeInterpolate(text string) (string, error) {
	re := regexp.MustCompile(`\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)`)
	var err error
	out := re.ReplaceAllStringFunc(text, func(m string) string {
		if m == "$$" {
			return "$"
		}
		sm := re.FindStringSubmatch(m)
		switch strings.TrimPrefix(sm[2], ":") {
		case "-":
			return sm[3]
		case "?":
			err = fmt.Errorf("%s requires variable %s to be set", m, sm[1])
		}
		return ""
	})
	return out, err
}

func loadCompose(t *testing.T) *composeFile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(composeRepo, "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	text, err := composeInterpolate(string(data))
	if err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	var c composeFile
	if err := yaml.Unmarshal([]byte(text), &c); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	if len(c.Services) == 0 {
		t.Fatal("compose.yaml: no services")
	}
	return &c
}

// service returns the named service, failing the test when it is missing.
func (c *composeFile) service(t *testing.T, name string) composeService {
	t.Helper()
	s, ok := c.Services[name]
	if !ok {
		t.Fatalf("compose.yaml: no service %q", name)
	}
	return s
}

// composeScalar renders a YAML scalar (string, number, bool) as compose reads it.
func composeScalar(v any) string {
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

// env is the service's environment, from either the mapping or the list form.
func (s composeService) env() (map[string]string, error) {
	m := map[string]string{}
	switch e := s.Environment.(type) {
	case nil:
	case map[string]any:
		for k, v := range e {
			m[k] = composeScalar(v)
		}
	case []any:
		for _, kv := range e {
			k, v, _ := strings.Cut(composeScalar(kv), "=")
			m[k] = v
		}
	default:
		return nil, fmt.Errorf("environment is a %T, want a mapping or a list", e)
	}
	return m, nil
}

// args is the service's command as a list of arguments.
func (s composeService) args() []string {
	switch c := s.Command.(type) {
	case string:
		return strings.Fields(c)
	case []any:
		out := make([]string, len(c))
		for i, a := range c {
			out[i] = composeScalar(a)
		}
		return out
	}
	return nil
}

// composeFlag returns the value of --name=value or --name value (or -name) in args.
func composeFlag(args []string, names ...string) (string, bool) {
	for i, a := range args {
		for _, n := range names {
			if v, ok := strings.CutPrefix(a, n+"="); ok {
				return v, true
			}
			if a == n && i+1 < len(args) {
				return args[i+1], true
			}
		}
	}
	return "", false
}

// composeImage is an image reference without its tag or digest, and without docker.io/library/.
func composeImage(image string) (repo, tag string) {
	image, _, _ = strings.Cut(image, "@")
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		repo, tag = image[:i], image[i+1:]
	} else {
		repo = image
	}
	repo = strings.TrimPrefix(repo, "docker.io/")
	repo = strings.TrimPrefix(repo, "library/")
	return repo, tag
}

// composePort is one published port.
type composePort struct {
	hostIP, published, target, protocol string
}

// composePorts parses the short ("[IP:][HOST:]CONTAINER[/PROTO]") and long syntaxes.
func composePorts(ports []any) ([]composePort, error) {
	var out []composePort
	for _, raw := range ports {
		var p composePort
		switch v := raw.(type) {
		case map[string]any:
			p = composePort{composeScalar(v["host_ip"]), composeScalar(v["published"]), composeScalar(v["target"]), composeScalar(v["protocol"])}
		default:
			s := composeScalar(v)
			s, p.protocol, _ = strings.Cut(s, "/")
			if strings.HasPrefix(s, "[") { // [IPv6]:HOST:CONTAINER
				end := strings.Index(s, "]:")
				if end < 0 {
					return nil, fmt.Errorf("port %q: bad IPv6 address", composeScalar(v))
				}
				p.hostIP, s = s[1:end], s[end+2:]
				p.published, p.target, _ = strings.Cut(s, ":")
				break
			}
			parts := strings.Split(s, ":")
			switch len(parts) {
			case 1:
				p.target = parts[0]
			case 2:
				p.published, p.target = parts[0], parts[1]
			case 3:
				p.hostIP, p.published, p.target = parts[0], parts[1], parts[2]
			default:
				return nil, fmt.Errorf("port %q: cannot parse", composeScalar(v))
			}
		}
		if p.protocol == "" {
			p.protocol = "tcp"
		}
		if p.target == "" {
			return nil, fmt.Errorf("port %v: no container port", raw)
		}
		out = append(out, p)
	}
	return out, nil
}

// composePortProblems reports the published ports of one service that are reachable from
// outside this machine, and host ports published twice (seen accumulates across services).
func composePortProblems(service string, ports []any, seen map[string]string) []string {
	parsed, err := composePorts(ports)
	if err != nil {
		return []string{fmt.Sprintf("service %s: %v", service, err)}
	}
	var problems []string
	for _, p := range parsed {
		if p.hostIP != "127.0.0.1" {
			problems = append(problems, fmt.Sprintf("service %s publishes container port %s on host address %q: publish on 127.0.0.1 only, e.g. \"127.0.0.1:%s:%s\"",
				service, p.target, p.hostIP, cmp.Or(p.published, p.target), p.target))
		}
		if p.published == "" {
			continue // an ephemeral host port cannot clash
		}
		key := p.hostIP + ":" + p.published + "/" + p.protocol
		if other, dup := seen[key]; dup {
			problems = append(problems, fmt.Sprintf("services %s and %s both publish host port %s", other, service, key))
		}
		seen[key] = service
	}
	return problems
}

// composeMount is one volume of a service.
type composeMount struct {
	kind, source, target string // kind: bind, volume or tmpfs
}

// mounts parses the short ("SRC:DST[:MODE]") and long syntaxes. In the short syntax a source
// starting with ., / or ~ is a host path (a bind mount), anything else a named volume.
func (s composeService) mounts() ([]composeMount, error) {
	var out []composeMount
	for _, raw := range s.Volumes {
		switch v := raw.(type) {
		case map[string]any:
			out = append(out, composeMount{composeScalar(v["type"]), composeScalar(v["source"]), composeScalar(v["target"])})
		case string:
			parts := strings.Split(v, ":")
			switch {
			case len(parts) == 1:
				out = append(out, composeMount{"volume", "", parts[0]})
			case len(parts) <= 3:
				kind := "volume"
				if strings.HasPrefix(parts[0], ".") || strings.HasPrefix(parts[0], "/") || strings.HasPrefix(parts[0], "~") {
					kind = "bind"
				}
				out = append(out, composeMount{kind, parts[0], parts[1]})
			default:
				return nil, fmt.Errorf("volume %q: cannot parse", v)
			}
		default:
			return nil, fmt.Errorf("volume %v: cannot parse", raw)
		}
	}
	return out, nil
}

// hostPath maps a path inside the service's container to the repository file a bind mount
// puts there.
func (s composeService) hostPath(containerPath string) (string, bool) {
	ms, err := s.mounts()
	if err != nil {
		return "", false
	}
	best, bestLen := "", -1
	for _, m := range ms {
		if m.kind != "bind" {
			continue
		}
		target := path.Clean(m.target)
		rel, ok := strings.CutPrefix(path.Clean(containerPath), target)
		if !ok || (rel != "" && !strings.HasPrefix(rel, "/")) || len(target) <= bestLen {
			continue
		}
		best, bestLen = filepath.Join(composeRepo, filepath.FromSlash(m.source), filepath.FromSlash(rel)), len(target)
	}
	return best, bestLen >= 0
}

// composeStack is compose.yaml with the services the other files are checked against.
type composeStack struct {
	file                                  *composeFile
	admitter, prometheus, grafana, jaeger composeService
	admitterEnv                           map[string]string
	admitterPort                          string // the port ADMITTER_HTTP_ADDR listens on
}

func loadComposeStack(t *testing.T) *composeStack {
	t.Helper()
	c := loadCompose(t)
	st := &composeStack{file: c}
	st.admitter = c.service(t, "admitter")
	st.prometheus = c.service(t, "prometheus")
	st.grafana = c.service(t, "grafana")
	st.jaeger = c.service(t, "jaeger")
	env, err := st.admitter.env()
	if err != nil {
		t.Fatalf("compose.yaml: service admitter: %v", err)
	}
	st.admitterEnv = env
	addr, ok := env["ADMITTER_HTTP_ADDR"]
	if !ok {
		t.Fatal("compose.yaml: service admitter does not set ADMITTER_HTTP_ADDR (the default, 127.0.0.1:9090, is unreachable from other containers)")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("compose.yaml: service admitter: ADMITTER_HTTP_ADDR=%q: %v", addr, err)
	}
	if host != "" && host != "0.0.0.0" && host != "::" {
		t.Fatalf("compose.yaml: service admitter: ADMITTER_HTTP_ADDR=%q listens on %q only: Prometheus in another container cannot reach it; use 0.0.0.0:%s", addr, host, port)
	}
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
		t.Fatalf("compose.yaml: service admitter: ADMITTER_HTTP_ADDR=%q: want a fixed port", addr)
	}
	st.admitterPort = port
	return st
}

func TestComposeServices(t *testing.T) {
	c := loadCompose(t)
	for _, name := range composeServiceNames {
		if _, ok := c.Services[name]; !ok {
			t.Errorf("compose.yaml: no service %q", name)
		}
	}
	wantRepo := map[string]func(string) bool{
		"nats":       func(r string) bool { return r == "nats" },
		"redis":      func(r string) bool { return r == "redis" },
		"jaeger":     func(r string) bool { return strings.HasPrefix(r, "jaegertracing/") },
		"prometheus": func(r string) bool { return r == "prom/prometheus" },
		"grafana":    func(r string) bool { return r == "grafana/grafana" || r == "grafana/grafana-oss" },
	}
	for name, s := range c.Services {
		if s.NetworkMode == "host" {
			t.Errorf("compose.yaml: service %s uses network_mode: host, which publishes every port it opens", name)
		}
		if s.Build != nil {
			continue
		}
		repo, tag := composeImage(s.Image)
		switch {
		case s.Image == "":
			t.Errorf("compose.yaml: service %s has neither image nor build", name)
		case tag == "" || tag == "latest":
			t.Errorf("compose.yaml: service %s: image %q: pin a version tag, not latest", name, s.Image)
		case wantRepo[name] != nil && !wantRepo[name](repo):
			t.Errorf("compose.yaml: service %s runs image %q, not the official one", name, s.Image)
		}
	}
	if s, ok := c.Services["admitter"]; ok && s.Build == nil {
		t.Error("compose.yaml: service admitter must be built from this repository (build: .)")
	}
	if s, ok := c.Services["redis"]; ok {
		if _, tag := composeImage(s.Image); !strings.HasPrefix(tag, "7") {
			t.Errorf("compose.yaml: service redis: image %q: want Redis 7", s.Image)
		}
	}
	if s, ok := c.Services["nats"]; ok {
		if args := s.args(); !slices.Contains(args, "-js") && !slices.Contains(args, "--jetstream") {
			t.Errorf("compose.yaml: service nats: command %q does not enable JetStream (-js)", args)
		}
	}
}

func TestComposePortsLoopbackOnly(t *testing.T) {
	c := loadCompose(t)
	seen := map[string]string{}
	names := make([]string, 0, len(c.Services))
	for name := range c.Services {
		names = append(names, name)
	}
	slices.Sort(names)
	published := 0
	for _, name := range names {
		for _, p := range composePortProblems(name, c.Services[name].Ports, seen) {
			t.Errorf("compose.yaml: %s", p)
		}
		published += len(c.Services[name].Ports)
	}
	if published == 0 {
		t.Error("compose.yaml publishes no port at all: the UIs are unreachable")
	}
}

func TestComposeAdmitterEnvironment(t *testing.T) {
	st := loadComposeStack(t)
	env := st.admitterEnv
	services := st.file.Services

	// ADMITTER_NATS_URL: every URL names the nats service on its client port.
	nurl := env["ADMITTER_NATS_URL"]
	if nurl == "" {
		t.Error("service admitter: ADMITTER_NATS_URL is unset (admitter would start an embedded server)")
	}
	for _, u := range strings.Split(nurl, ",") {
		if err := composeServiceURL(services, strings.TrimSpace(u), "nats", "4222", "nats"); err != nil {
			t.Errorf("service admitter: ADMITTER_NATS_URL: %v", err)
		}
	}
	// ADMITTER_REDIS_URL: the redis service.
	if err := composeServiceURL(services, env["ADMITTER_REDIS_URL"], "redis", "6379", "redis"); err != nil {
		t.Errorf("service admitter: ADMITTER_REDIS_URL: %v", err)
	}

	// Traces: OTLP to the jaeger (or collector) service, on the port of the protocol used.
	endpoint := cmp.Or(env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"], env["OTEL_EXPORTER_OTLP_ENDPOINT"])
	protocol := cmp.Or(env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"], env["OTEL_EXPORTER_OTLP_PROTOCOL"], "http/protobuf")
	wantPort := map[string]string{"http/protobuf": "4318", "http/json": "4318", "grpc": "4317"}[protocol]
	if wantPort == "" {
		t.Errorf("service admitter: OTEL_EXPORTER_OTLP_PROTOCOL=%q is not an OTLP protocol", protocol)
	} else if err := composeServiceURL(services, endpoint, "", wantPort, "jaegertracing/", "otel/opentelemetry-collector"); err != nil {
		t.Errorf("service admitter: OTEL_EXPORTER_OTLP_ENDPOINT: %v (protocol %s)", err, protocol)
	}
	if env["OTEL_SERVICE_NAME"] == "" {
		t.Error("service admitter: OTEL_SERVICE_NAME is unset")
	}
	if v := env["OTEL_TRACES_EXPORTER"]; v != "" && v != "otlp" {
		t.Errorf("service admitter: OTEL_TRACES_EXPORTER=%q: traces would not reach Jaeger", v)
	}
	if jenv, _ := st.jaeger.env(); strings.EqualFold(jenv["COLLECTOR_OTLP_ENABLED"], "false") {
		t.Error("service jaeger: COLLECTOR_OTLP_ENABLED=false: it would not receive admitter's traces")
	}

	// The published HTTP port is the one admitter listens on.
	ports, err := composePorts(st.admitter.Ports)
	if err != nil {
		t.Fatalf("service admitter: %v", err)
	}
	for _, p := range ports {
		if p.target != st.admitterPort {
			t.Errorf("service admitter publishes container port %s, but ADMITTER_HTTP_ADDR listens on %s", p.target, st.admitterPort)
		}
	}

	// ADMITTER_PLANS_FILE is mounted from the repository and is a valid plans file.
	plansFile := env["ADMITTER_PLANS_FILE"]
	if plansFile == "" {
		t.Fatal("service admitter: ADMITTER_PLANS_FILE is unset (admitter would run the built-in example plans)")
	}
	host, ok := st.admitter.hostPath(plansFile)
	if !ok {
		t.Fatalf("service admitter: ADMITTER_PLANS_FILE=%s is not bind-mounted from the repository", plansFile)
	}
	p, err := plans.Load(host)
	if err != nil {
		t.Fatalf("service admitter: ADMITTER_PLANS_FILE=%s (%s): %v", plansFile, host, err)
	}
	if len(p.Names()) == 0 {
		t.Errorf("%s: no plans", host)
	}
}

// composeServiceURL checks that raw is a URL with the given scheme (any when "") whose host is a
// compose service running one of images (a repository, a repository prefix ending in /, or a
// repository of which repository-* are variants), on port (explicit, or the scheme's default).
func composeServiceURL(services map[string]composeService, raw, scheme, port string, images ...string) error {
	if raw == "" {
		return fmt.Errorf("unset")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	if scheme != "" && u.Scheme != scheme {
		return fmt.Errorf("%q: scheme %q, want %q", raw, u.Scheme, scheme)
	}
	s, ok := services[u.Hostname()]
	if !ok {
		return fmt.Errorf("%q: host %q is not a service of compose.yaml", raw, u.Hostname())
	}
	repo, _ := composeImage(s.Image)
	if !slices.ContainsFunc(images, func(img string) bool {
		return repo == img || strings.HasSuffix(img, "/") && strings.HasPrefix(repo, img) || strings.HasPrefix(repo, img+"-")
	}) {
		return fmt.Errorf("%q: service %s runs %q, want %s", raw, u.Hostname(), s.Image, strings.Join(images, " or "))
	}
	p := cmp.Or(u.Port(), map[string]string{"nats": "4222", "redis": "6379", "rediss": "6379", "http": "80", "https": "443"}[u.Scheme])
	if p != port {
		return fmt.Errorf("%q: port %q, want %s", raw, p, port)
	}
	return nil
}

func TestComposeBindMountsExist(t *testing.T) {
	c := loadCompose(t)
	root, err := filepath.Abs(composeRepo)
	if err != nil {
		t.Fatal(err)
	}
	binds := 0
	for name, s := range c.Services {
		ms, err := s.mounts()
		if err != nil {
			t.Errorf("compose.yaml: service %s: %v", name, err)
			continue
		}
		for _, m := range ms {
			if m.kind == "volume" && m.source != "" {
				if _, ok := c.Volumes[m.source]; !ok {
					t.Errorf("compose.yaml: service %s mounts volume %q, which the top-level volumes do not declare", name, m.source)
				}
			}
			if m.kind != "bind" {
				continue
			}
			binds++
			if filepath.IsAbs(m.source) || strings.HasPrefix(m.source, "~") {
				t.Errorf("compose.yaml: service %s bind-mounts %s from outside the repository", name, m.source)
				continue
			}
			abs, err := filepath.Abs(filepath.Join(composeRepo, m.source))
			if err != nil {
				t.Fatal(err)
			}
			if rel, err := filepath.Rel(root, abs); err != nil || strings.HasPrefix(rel, "..") {
				t.Errorf("compose.yaml: service %s bind-mounts %s from outside the repository", name, m.source)
				continue
			}
			fi, err := os.Stat(abs)
			if err != nil {
				t.Errorf("compose.yaml: service %s bind-mounts %s, which does not exist (docker would create an empty directory there)", name, m.source)
				continue
			}
			if ext := path.Ext(m.target); fi.IsDir() && (ext == ".yml" || ext == ".yaml" || ext == ".json" || ext == ".conf") {
				t.Errorf("compose.yaml: service %s mounts directory %s on file path %s", name, m.source, m.target)
			}
		}
	}
	if binds == 0 {
		t.Error("compose.yaml bind-mounts nothing: the configuration files under deploy/ are not used")
	}
}

// ---------------------------------------------------------------------------------------------
// Dockerfile and .dockerignore

type dockerInstr struct {
	cmd, args string
	line      int
}

type dockerStage struct {
	image, name string
	instrs      []dockerInstr
}

// parseDockerfile splits a Dockerfile into stages of instructions (continuation lines joined,
// comments dropped, global ARG defaults substituted into FROM).
func parseDockerfile(text string) ([]dockerStage, error) {
	var stages []dockerStage
	globals := map[string]string{}
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		start := i + 1
		line := strings.TrimSpace(lines[i])
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		for strings.HasSuffix(line, "\\") && i+1 < len(lines) {
			i++
			next := strings.TrimSpace(lines[i])
			if strings.HasPrefix(next, "#") {
				next = ""
			}
			line = strings.TrimSuffix(line, "\\") + " " + next
		}
		cmd, args, _ := strings.Cut(line, " ")
		in := dockerInstr{strings.ToUpper(cmd), strings.TrimSpace(args), start}
		switch {
		case in.cmd == "ARG" && len(stages) == 0:
			for _, a := range strings.Fields(in.args) {
				k, v, _ := strings.Cut(a, "=")
				globals[k] = strings.Trim(v, `"`)
			}
		case in.cmd == "FROM":
			var words []string
			for _, w := range strings.Fields(in.args) {
				if !strings.HasPrefix(w, "--") {
					words = append(words, w)
				}
			}
			if len(words) == 0 {
				return nil, fmt.Errorf("line %d: FROM without an image", start)
			}
			st := dockerStage{image: os.Expand(words[0], func(k string) string { return globals[k] })}
			if len(words) == 3 && strings.EqualFold(words[1], "AS") {
				st.name = words[2]
			}
			stages = append(stages, st)
		case len(stages) == 0:
			return nil, fmt.Errorf("line %d: %s before FROM", start, in.cmd)
		default:
			stages[len(stages)-1].instrs = append(stages[len(stages)-1].instrs, in)
		}
	}
	if len(stages) == 0 {
		return nil, fmt.Errorf("no FROM")
	}
	return stages, nil
}

// buildContext is the admitter service's build context and Dockerfile.
func (s composeService) buildContext() (dir, dockerfile string, err error) {
	dir, dockerfile = ".", "Dockerfile"
	switch b := s.Build.(type) {
	case string:
		dir = b
	case map[string]any:
		dir = cmp.Or(composeScalar(b["context"]), ".")
		dockerfile = cmp.Or(composeScalar(b["dockerfile"]), "Dockerfile")
	default:
		return "", "", fmt.Errorf("build is a %T", b)
	}
	if strings.Contains(dir, "://") {
		return "", "", fmt.Errorf("build context %q is not a directory of this repository", dir)
	}
	return filepath.Join(composeRepo, dir), filepath.Join(composeRepo, dir, dockerfile), nil
}

// dockerfileProblems checks that the Dockerfile builds ./cmd/admitter statically with the Go of
// go.mod and runs it as a non-root user listening on port.
func dockerfileProblems(text, goVersion, port string) []string {
	stages, err := parseDockerfile(text)
	if err != nil {
		return []string{err.Error()}
	}
	var problems []string
	if len(stages) < 2 {
		problems = append(problems, "not a multi-stage build")
	}
	// The build stage.
	build, binary := -1, ""
	for i, st := range stages {
		repo, tag := composeImage(st.image)
		if repo != "golang" {
			continue
		}
		if tag != goVersion && !strings.HasPrefix(tag, goVersion+"-") && !strings.HasPrefix(tag, goVersion+".") {
			problems = append(problems, fmt.Sprintf("stage %d builds with %s, but go.mod says go %s", i, st.image, goVersion))
		}
		cgoOff := false
		for _, in := range st.instrs {
			if in.cmd == "ENV" && regexp.MustCompile(`\bCGO_ENABLED[= ]"?0\b`).MatchString(in.args) {
				cgoOff = true
			}
			if in.cmd != "RUN" || !regexp.MustCompile(`\bgo\s+build\b`).MatchString(in.args) {
				continue
			}
			if !slices.Contains(strings.Fields(in.args), "./cmd/admitter") {
				continue
			}
			build = i
			if !cgoOff && !strings.Contains(in.args, "CGO_ENABLED=0") {
				problems = append(problems, fmt.Sprintf("line %d: go build without CGO_ENABLED=0: the binary would need the build image's libc", in.line))
			}
			if m := regexp.MustCompile(`(?:^|\s)-o[= ]\s*(\S+)`).FindStringSubmatch(in.args); m != nil {
				binary = m[1]
			} else {
				problems = append(problems, fmt.Sprintf("line %d: go build without -o: where does the binary go?", in.line))
			}
		}
	}
	if build < 0 {
		return append(problems, "no golang stage runs `go build ... ./cmd/admitter`")
	}
	// The run stage: the last one.
	last := len(stages) - 1
	run := stages[last]
	if last == build {
		return append(problems, "the image runs in the build stage: copy the binary into a small base")
	}
	if repo, _ := composeImage(run.image); repo == "golang" {
		problems = append(problems, "the run stage is a golang image")
	}
	installed, user, entry, exposed := "", "", []string(nil), false
	for _, in := range run.instrs {
		switch in.cmd {
		case "COPY":
			f := strings.Fields(in.args)
			from := ""
			var rest []string
			for _, w := range f {
				if v, ok := strings.CutPrefix(w, "--from="); ok {
					from = v
				} else if !strings.HasPrefix(w, "--") {
					rest = append(rest, w)
				}
			}
			if (from == stages[build].name || from == strconv.Itoa(build)) && len(rest) == 2 && path.Clean(rest[0]) == path.Clean(binary) {
				installed = rest[1]
				if strings.HasSuffix(installed, "/") {
					installed = path.Join(installed, path.Base(binary))
				}
			}
		case "USER":
			user = in.args
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(in.args), &entry); err != nil {
				problems = append(problems, fmt.Sprintf("line %d: ENTRYPOINT in shell form: use the exec form, [\"/admitter\"], so that the binary is PID 1 and receives SIGTERM", in.line))
			}
		case "EXPOSE":
			for _, p := range strings.Fields(in.args) {
				if strings.TrimSuffix(p, "/tcp") == port {
					exposed = true
				}
			}
		}
	}
	if installed == "" {
		problems = append(problems, fmt.Sprintf("the run stage does not COPY --from=%s %s", cmp.Or(stages[build].name, strconv.Itoa(build)), binary))
	} else if len(entry) == 0 || path.Clean(entry[0]) != path.Clean(installed) {
		problems = append(problems, fmt.Sprintf("ENTRYPOINT %q does not run the binary copied to %s", entry, installed))
	}
	u, _, _ := strings.Cut(user, ":")
	_, tag := composeImage(run.image)
	switch {
	case user == "" && !strings.Contains(tag, "nonroot"):
		problems = append(problems, "the run stage sets no USER: the binary would run as root")
	case user != "" && (u == "root" || u == "0"):
		problems = append(problems, fmt.Sprintf("USER %s is root", user))
	}
	if !exposed {
		problems = append(problems, fmt.Sprintf("the run stage does not EXPOSE %s, the port admitter listens on", port))
	}
	return problems
}

func composeGoVersion(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(composeRepo, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go\s+(\d+\.\d+)`).FindSubmatch(data)
	if m == nil {
		t.Fatal("go.mod: no go directive")
	}
	return string(m[1])
}

func TestComposeDockerfile(t *testing.T) {
	st := loadComposeStack(t)
	dir, dockerfile, err := st.admitter.buildContext()
	if err != nil {
		t.Fatalf("compose.yaml: service admitter: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Errorf("compose.yaml: service admitter: the build context %s is not the module root: %v", dir, err)
	}
	data, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatalf("compose.yaml: service admitter: %v", err)
	}
	for _, p := range dockerfileProblems(string(data), composeGoVersion(t), st.admitterPort) {
		t.Errorf("%s: %s", dockerfile, p)
	}
}

// dockerignore is a .dockerignore file's patterns, matched as Docker matches them: each
// pattern against the path and every parent directory of it, `**` spanning directories, the
// last matching pattern deciding, `!` re-including.
type dockerignore []struct {
	re     *regexp.Regexp
	negate bool
}

func parseDockerignore(text string) (dockerignore, error) {
	var d dockerignore
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		negate := strings.HasPrefix(line, "!")
		pat := path.Clean(strings.TrimPrefix(strings.TrimSpace(strings.TrimPrefix(line, "!")), "/"))
		var b strings.Builder
		b.WriteString("^")
		for i := 0; i < len(pat); i++ {
			switch c := pat[i]; {
			case strings.HasPrefix(pat[i:], "**/"):
				b.WriteString("(?:.*/)?")
				i += 2
			case strings.HasPrefix(pat[i:], "**"):
				b.WriteString(".*")
				i++
			case c == '*':
				b.WriteString("[^/]*")
			case c == '?':
				b.WriteString("[^/]")
			case c == '[':
				end := strings.IndexByte(pat[i:], ']')
				if end < 0 {
					return nil, fmt.Errorf("pattern %q: unterminated [", line)
				}
				b.WriteString(strings.Replace(pat[i:i+end+1], "[!", "[^", 1))
				i += end
			case c == '\\' && i+1 < len(pat):
				i++
				b.WriteString(regexp.QuoteMeta(pat[i : i+1]))
			default:
				b.WriteString(regexp.QuoteMeta(string(c)))
			}
		}
		b.WriteString("$")
		re, err := regexp.Compile(b.String())
		if err != nil {
			return nil, fmt.Errorf("pattern %q: %v", line, err)
		}
		d = append(d, struct {
			re     *regexp.Regexp
			negate bool
		}{re, negate})
	}
	return d, nil
}

// excludes reports whether the file at rel (slash-separated, relative to the context) is left
// out of the build context.
func (d dockerignore) excludes(rel string) bool {
	excluded := false
	for _, p := range d {
		for prefix := rel; ; prefix = path.Dir(prefix) {
			if p.re.MatchString(prefix) {
				excluded = !p.negate
				break
			}
			if !strings.Contains(prefix, "/") {
				break
			}
		}
	}
	return excluded
}

// composeBuildFiles are the files `go build ./cmd/admitter` reads from the repository: go.mod,
// go.sum, and the Go and embedded files of every package of this module it imports.
func composeBuildFiles(t *testing.T, root string) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-f",
		`{{if and .Module .Module.Main}}{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{range .EmbedFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{end}}`,
		"./cmd/admitter")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list: %v\n%s", err, stderr)
	}
	files := []string{"go.mod", "go.sum"}
	for _, f := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(root, f)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, filepath.ToSlash(rel))
	}
	if len(files) < 4 {
		t.Fatalf("go list found only %q", files)
	}
	return files
}

func TestComposeDockerignore(t *testing.T) {
	st := loadComposeStack(t)
	dir, dockerfile, err := st.admitter.buildContext()
	if err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	ignoreFile := dockerfile + ".dockerignore" // takes precedence, as Docker does
	data, err := os.ReadFile(ignoreFile)
	if os.IsNotExist(err) {
		ignoreFile = filepath.Join(dir, ".dockerignore")
		data, err = os.ReadFile(ignoreFile)
	}
	if err != nil {
		t.Fatalf("%v (without a .dockerignore the whole repository, .git included, is sent to the builder)", err)
	}
	ign, err := parseDockerignore(string(data))
	if err != nil {
		t.Fatalf("%s: %v", ignoreFile, err)
	}
	for _, f := range composeBuildFiles(t, root) {
		if ign.excludes(f) {
			t.Errorf("%s leaves out %s, which `go build ./cmd/admitter` needs", ignoreFile, f)
		}
	}
	if !ign.excludes(".git/HEAD") {
		t.Errorf("%s does not leave out .git", ignoreFile)
	}
	// Every file the Dockerfile copies from the context is in it.
	df, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	stages, err := parseDockerfile(string(df))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stages {
		for _, in := range s.instrs {
			if (in.cmd != "COPY" && in.cmd != "ADD") || strings.Contains(in.args, "--from=") {
				continue
			}
			var words []string
			for _, w := range strings.Fields(in.args) {
				if !strings.HasPrefix(w, "--") {
					words = append(words, w)
				}
			}
			for _, src := range words[:max(len(words)-1, 0)] {
				if src == "." || strings.ContainsAny(src, "*?[") {
					continue
				}
				if _, err := os.Stat(filepath.Join(root, src)); err != nil {
					t.Errorf("%s:%d: %s copies %s: %v", dockerfile, in.line, in.cmd, src, err)
				} else if ign.excludes(path.Clean(src)) {
					t.Errorf("%s:%d: %s copies %s, which %s leaves out", dockerfile, in.line, in.cmd, src, ignoreFile)
				}
			}
		}
	}
}

// ---------------------------------------------------------------------------------------------
// Prometheus

type prometheusConfig struct {
	Global struct {
		ScrapeInterval string `yaml:"scrape_interval"`
	} `yaml:"global"`
	ScrapeConfigs []struct {
		JobName        string `yaml:"job_name"`
		ScrapeInterval string `yaml:"scrape_interval"`
		MetricsPath    string `yaml:"metrics_path"`
		Scheme         string `yaml:"scheme"`
		StaticConfigs  []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

// loadPrometheus reads the configuration file the prometheus service runs with.
func loadPrometheus(t *testing.T, st *composeStack) (*prometheusConfig, string) {
	t.Helper()
	file, _ := composeFlag(st.prometheus.args(), "--config.file")
	file = cmp.Or(file, "/etc/prometheus/prometheus.yml") // the image's default
	host, ok := st.prometheus.hostPath(file)
	if !ok {
		t.Fatalf("compose.yaml: service prometheus: its configuration %s is not mounted from the repository", file)
	}
	data, err := os.ReadFile(host)
	if err != nil {
		t.Fatal(err)
	}
	var c prometheusConfig
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatalf("%s: %v", host, err)
	}
	return &c, host
}

// prometheusDuration parses a Prometheus duration (Go's units plus d, w and y).
func prometheusDuration(s string) (time.Duration, error) {
	re := regexp.MustCompile(`^(?:(\d+)y)?(?:(\d+)w)?(?:(\d+)d)?(.*)$`)
	m := re.FindStringSubmatch(s)
	var d time.Duration
	for i, unit := range []time.Duration{365 * 24 * time.Hour, 7 * 24 * time.Hour, 24 * time.Hour} {
		if m[i+1] != "" {
			n, _ := strconv.Atoi(m[i+1])
			d += time.Duration(n) * unit
		}
	}
	if m[4] != "" {
		rest, err := time.ParseDuration(m[4])
		if err != nil {
			return 0, err
		}
		d += rest
	}
	return d, nil
}

func TestComposePrometheusScrapesAdmitter(t *testing.T) {
	st := loadComposeStack(t)
	c, file := loadPrometheus(t, st)
	target := "admitter:" + st.admitterPort
	jobs := map[string]bool{}
	found := false
	for _, sc := range c.ScrapeConfigs {
		if jobs[sc.JobName] {
			t.Errorf("%s: job_name %q appears twice", file, sc.JobName)
		}
		jobs[sc.JobName] = true
		for _, s := range sc.StaticConfigs {
			for _, tg := range s.Targets {
				if h, _, _ := strings.Cut(tg, ":"); h == "admitter" && tg != target {
					t.Errorf("%s: job %s scrapes %s, but admitter listens on %s (ADMITTER_HTTP_ADDR in compose.yaml)", file, sc.JobName, tg, target)
				}
				if tg != target {
					continue
				}
				found = true
				if p := cmp.Or(sc.MetricsPath, "/metrics"); p != "/metrics" {
					t.Errorf("%s: job %s scrapes %s, admitter serves /metrics", file, sc.JobName, p)
				}
				if s := cmp.Or(sc.Scheme, "http"); s != "http" {
					t.Errorf("%s: job %s scrapes over %s, admitter serves plain http", file, sc.JobName, s)
				}
				interval := cmp.Or(sc.ScrapeInterval, c.Global.ScrapeInterval, "1m")
				if d, err := prometheusDuration(interval); err != nil || d != 5*time.Second {
					t.Errorf("%s: job %s scrapes admitter every %s, want 5s", file, sc.JobName, interval)
				}
			}
		}
	}
	if !found {
		t.Errorf("%s: no job scrapes %s", file, target)
	}
}

// ---------------------------------------------------------------------------------------------
// Grafana

// grafanaProvisioning is what the grafana service is provisioned with.
type grafanaProvisioning struct {
	promUID   string   // the Prometheus data source's uid
	dashboard string   // the admitter dashboard file
	jobs      []string // Prometheus job names (for job="..." matchers)
}

func loadGrafana(t *testing.T, st *composeStack) *grafanaProvisioning {
	t.Helper()
	env, err := st.grafana.env()
	if err != nil {
		t.Fatalf("compose.yaml: service grafana: %v", err)
	}
	prov := cmp.Or(env["GF_PATHS_PROVISIONING"], "/etc/grafana/provisioning")
	g := &grafanaProvisioning{}

	// Data sources: exactly one of type prometheus, pointing at the prometheus service.
	dsDir, ok := st.grafana.hostPath(prov + "/datasources")
	if !ok {
		t.Fatalf("compose.yaml: service grafana: %s/datasources is not mounted from the repository", prov)
	}
	promListen := "9090"
	if v, ok := composeFlag(st.prometheus.args(), "--web.listen-address"); ok {
		_, promListen, _ = net.SplitHostPort(v)
	}
	for _, f := range composeYAMLFiles(t, dsDir) {
		var doc struct {
			Datasources []struct {
				Name, UID, Type, URL string
			} `yaml:"datasources"`
		}
		composeReadYAML(t, f, &doc)
		for _, ds := range doc.Datasources {
			if ds.Type != "prometheus" {
				continue
			}
			if g.promUID != "" {
				t.Errorf("%s: a second Prometheus data source (%s): the dashboard's must be unambiguous", f, ds.Name)
			}
			if ds.UID == "" {
				t.Errorf("%s: data source %s has no uid: Grafana would make one up, and the dashboard could not refer to it", f, ds.Name)
			}
			g.promUID = ds.UID
			if err := composeServiceURL(st.file.Services, ds.URL, "http", promListen, "prom/prometheus"); err != nil {
				t.Errorf("%s: data source %s: url: %v", f, ds.Name, err)
			}
		}
	}
	if g.promUID == "" {
		t.Fatalf("%s: no Prometheus data source is provisioned", dsDir)
	}

	// Dashboards: a file provider whose path holds admitter.json.
	dbDir, ok := st.grafana.hostPath(prov + "/dashboards")
	if !ok {
		t.Fatalf("compose.yaml: service grafana: %s/dashboards is not mounted from the repository", prov)
	}
	for _, f := range composeYAMLFiles(t, dbDir) {
		var doc struct {
			Providers []struct {
				Name, Type string
				Options    struct {
					Path string `yaml:"path"`
				} `yaml:"options"`
			} `yaml:"providers"`
		}
		composeReadYAML(t, f, &doc)
		for _, p := range doc.Providers {
			if p.Type != "" && p.Type != "file" {
				continue
			}
			host, ok := st.grafana.hostPath(p.Options.Path)
			if !ok {
				t.Errorf("%s: provider %s reads %s, which is not mounted from the repository", f, p.Name, p.Options.Path)
				continue
			}
			candidate := host
			if fi, err := os.Stat(host); err == nil && fi.IsDir() {
				candidate = filepath.Join(host, "admitter.json")
			}
			if _, err := os.Stat(candidate); err == nil {
				g.dashboard = candidate
			}
		}
	}
	if g.dashboard == "" {
		t.Fatalf("%s: no dashboard provider loads admitter.json", dbDir)
	}
	if home := env["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]; home != "" {
		if host, ok := st.grafana.hostPath(home); !ok {
			t.Errorf("compose.yaml: service grafana: GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH=%s is not mounted from the repository", home)
		} else if _, err := os.Stat(host); err != nil {
			t.Errorf("compose.yaml: service grafana: GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH=%s: %v", home, err)
		}
	}

	pc, _ := loadPrometheus(t, st)
	for _, sc := range pc.ScrapeConfigs {
		g.jobs = append(g.jobs, sc.JobName)
	}
	return g
}

func composeYAMLFiles(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	for _, pat := range []string{"*.yaml", "*.yml"} {
		m, err := filepath.Glob(filepath.Join(dir, pat))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) == 0 {
		t.Fatalf("%s: no provisioning file", dir)
	}
	return files
}

func composeReadYAML(t *testing.T, file string, v any) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

func TestComposeGrafanaProvisioning(t *testing.T) {
	st := loadComposeStack(t)
	g := loadGrafana(t, st)
	if filepath.Base(g.dashboard) != "admitter.json" {
		t.Errorf("provisioned dashboard %s", g.dashboard)
	}
	env, _ := st.grafana.env()
	if !strings.EqualFold(env["GF_AUTH_ANONYMOUS_ENABLED"], "true") {
		t.Error("compose.yaml: service grafana: GF_AUTH_ANONYMOUS_ENABLED is not true")
	}
	if role := cmp.Or(env["GF_AUTH_ANONYMOUS_ORG_ROLE"], "Viewer"); role != "Viewer" {
		t.Errorf("compose.yaml: service grafana: anonymous users are %s, want Viewer", role)
	}
}

// ---------------------------------------------------------------------------------------------
// The dashboard

// promSelector is one vector selector of a PromQL expression.
type promSelector struct {
	metric   string
	matchers []promMatcher
}

type promMatcher struct{ label, op, value string }

// matcher returns the selector's matcher on label, if any.
func (s promSelector) matcher(label string) (promMatcher, bool) {
	for _, m := range s.matchers {
		if m.label == label {
			return m, true
		}
	}
	return promMatcher{}, false
}

// allows reports whether the selector can select series whose label has value v.
func (s promSelector) allows(label, v string) bool {
	m, ok := s.matcher(label)
	if !ok || strings.Contains(m.value, "$") { // a Grafana variable can be anything
		return true
	}
	switch m.op {
	case "=":
		return m.value == v
	case "!=":
		return m.value != v
	}
	re, err := regexp.Compile("^(?:" + m.value + ")$")
	if err != nil {
		return false
	}
	return re.MatchString(v) == (m.op == "=~")
}

// promKeywordsWithLabels are followed by a parenthesized list of label names.
var promKeywordsWithLabels = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

// promAggregations can be followed by a by or without clause before their parentheses.
var promAggregations = map[string]bool{"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true, "count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true, "limitk": true, "limit_ratio": true}

// promKeywords are the other words of PromQL that are not metric names.
var promKeywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true}

// promParse finds the vector selectors of a PromQL expression (Grafana variables allowed) with
// a small lexer: no full parser is needed to know which metrics and labels it names.
func promParse(expr string) ([]promSelector, error) {
	var sels []promSelector
	s := expr
	i := 0
	last := -1 // index in sels of a metric name just read: a following {...} belongs to it
	depth := 0 // of parentheses
	skipString := func() error {
		q := s[i]
		for j := i + 1; j < len(s); j++ {
			if s[j] == '\\' && q != '`' {
				j++
				continue
			}
			if s[j] == q {
				i = j + 1
				return nil
			}
		}
		return fmt.Errorf("unterminated string at %d", i)
	}
	skipGroup := func(open, close byte) error {
		depth := 0
		for j := i; j < len(s); j++ {
			switch s[j] {
			case open:
				depth++
			case close:
				depth--
				if depth == 0 {
					i = j + 1
					return nil
				}
			}
		}
		return fmt.Errorf("unbalanced %c at %d", open, i)
	}
	isIdent := func(c byte, first bool) bool {
		return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || !first && c >= '0' && c <= '9'
	}
	for i < len(s) {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
			continue
		case c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
			continue
		case c == '"' || c == '\'' || c == '`':
			if err := skipString(); err != nil {
				return nil, err
			}
		case c == '[':
			if err := skipGroup('[', ']'); err != nil {
				return nil, err
			}
			continue // a range keeps the selector adjacent to an offset
		case c == '$': // Grafana variable: $name, ${name...}, $__interval
			i++
			if i < len(s) && s[i] == '{' {
				if err := skipGroup('{', '}'); err != nil {
					return nil, err
				}
			}
			for i < len(s) && isIdent(s[i], false) {
				i++
			}
		case c == '{':
			start := i
			if err := skipGroup('{', '}'); err != nil {
				return nil, err
			}
			ms, name, err := promMatchers(s[start+1 : i-1])
			if err != nil {
				return nil, fmt.Errorf("%q: %v", s[start:i], err)
			}
			if last >= 0 {
				sels[last].matchers = ms
			} else {
				sels = append(sels, promSelector{metric: name, matchers: ms})
			}
			last = -1
			continue
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9':
			for i < len(s) && (isIdent(s[i], false) || s[i] == '.') {
				i++
			}
		case isIdent(c, true):
			start := i
			for i < len(s) && isIdent(s[i], false) {
				i++
			}
			word := s[start:i]
			j := i
			for j < len(s) && (s[j] == ' ' || s[j] == '\t' || s[j] == '\n') {
				j++
			}
			switch {
			case promKeywordsWithLabels[strings.ToLower(word)]:
				if j < len(s) && s[j] == '(' {
					i = j
					if err := skipGroup('(', ')'); err != nil {
						return nil, err
					}
				}
			case j < len(s) && s[j] == '(': // a function or an aggregation
			case promAggregations[strings.ToLower(word)] && regexp.MustCompile(`^(?i)(by|without)\b`).MatchString(s[j:]):
			case promKeywords[strings.ToLower(word)]:
			default:
				sels = append(sels, promSelector{metric: word})
				last = len(sels) - 1
				continue
			}
		case c == '(':
			depth++
			i++
		case c == ')':
			if depth--; depth < 0 {
				return nil, fmt.Errorf("unbalanced ) at %d", i)
			}
			i++
		default:
			i++
		}
		last = -1
	}
	if depth != 0 {
		return nil, fmt.Errorf("unbalanced ( in %q", expr)
	}
	return sels, nil
}

// promMatchers parses the inside of {...}: label op "value" pairs, and a quoted metric name.
func promMatchers(s string) ([]promMatcher, string, error) {
	re := regexp.MustCompile(`^\s*(?:([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*)?("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`" + `)\s*(?:,|$)`)
	var ms []promMatcher
	name := ""
	for strings.TrimSpace(s) != "" {
		m := re.FindStringSubmatch(s)
		if m == nil {
			return nil, "", fmt.Errorf("cannot parse label matchers at %q", s)
		}
		v := m[3][1 : len(m[3])-1]
		if m[3][0] == '"' {
			if uq, err := strconv.Unquote(m[3]); err == nil {
				v = uq
			}
		}
		if m[1] == "" {
			name = v
		} else {
			ms = append(ms, promMatcher{m[1], m[2], v})
			if m[1] == "__name__" && m[2] == "=" {
				name = v
			}
		}
		s = s[len(m[0]):]
	}
	return ms, name, nil
}

// promProblems checks that a PromQL expression names only metrics admitter exports (or up and
// target_info), with the labels and label values they carry.
func promProblems(expr string) []string {
	var problems []string
	for _, name := range regexp.MustCompile(`admitter_[A-Za-z0-9_:]*`).FindAllString(expr, -1) {
		if _, ok := composeMetrics[name]; !ok {
			problems = append(problems, fmt.Sprintf("%s is not a metric admitter exports", name))
		}
	}
	sels, err := promParse(expr)
	if err != nil {
		return append(problems, err.Error())
	}
	if len(sels) == 0 {
		problems = append(problems, "selects no metric")
	}
	for _, sel := range sels {
		labels, known := composeMetrics[sel.metric]
		switch {
		case sel.metric == "":
			problems = append(problems, "a selector without a metric name")
			continue
		case strings.HasPrefix(sel.metric, "admitter_"):
			if !known {
				continue // reported above
			}
		case !known:
			problems = append(problems, fmt.Sprintf("%s is not admitter's (only admitter_*, up and target_info are)", sel.metric))
			continue
		}
		for _, m := range sel.matchers {
			if labels != nil && !slices.Contains(labels, m.label) && m.label != "job" && m.label != "instance" && m.label != "__name__" && !strings.HasPrefix(m.label, "otel_scope_") {
				problems = append(problems, fmt.Sprintf("%s has no label %s", sel.metric, m.label))
				continue
			}
			values, enum := composeLabelValues[m.label]
			if !enum || strings.Contains(m.value, "$") {
				continue
			}
			var vs []string
			switch m.op {
			case "=", "!=":
				vs = []string{m.value}
			default:
				if !regexp.MustCompile(`^[A-Za-z0-9_|]*$`).MatchString(m.value) {
					continue // a real regular expression: not checked
				}
				vs = strings.Split(m.value, "|")
			}
			for _, v := range vs {
				if !slices.Contains(values, v) {
					problems = append(problems, fmt.Sprintf("%s{%s%s%q}: %s is never %q (it is one of %s)", sel.metric, m.label, m.op, m.value, m.label, v, strings.Join(values, ", ")))
				}
			}
		}
	}
	return problems
}

// dashVariableQuery is the PromQL inside a Grafana query variable, "" when it names no metric.
func dashVariableQuery(q string) string {
	q = strings.TrimSpace(q)
	if m := regexp.MustCompile(`^label_values\((.*),\s*[A-Za-z_][A-Za-z0-9_]*\s*\)$`).FindStringSubmatch(q); m != nil {
		return m[1]
	}
	if regexp.MustCompile(`^label_values\(\s*[A-Za-z_][A-Za-z0-9_]*\s*\)$|^label_names\(\)$`).MatchString(q) {
		return ""
	}
	if m := regexp.MustCompile(`^query_result\((.*)\)$`).FindStringSubmatch(q); m != nil {
		return m[1]
	}
	return q
}

type grafanaDatasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type grafanaPanel struct {
	ID         int                `json:"id"`
	Type       string             `json:"type"`
	Title      string             `json:"title"`
	Datasource *grafanaDatasource `json:"datasource"`
	GridPos    *struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID      string             `json:"refId"`
		Expr       string             `json:"expr"`
		Datasource *grafanaDatasource `json:"datasource"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"` // a collapsed row's
}

type grafanaDashboard struct {
	UID        string         `json:"uid"`
	Title      string         `json:"title"`
	Panels     []grafanaPanel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string             `json:"name"`
			Type       string             `json:"type"`
			Datasource *grafanaDatasource `json:"datasource"`
			Query      any                `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// flatPanels lists every panel, rows' nested ones included.
func (d *grafanaDashboard) flatPanels() []grafanaPanel {
	var out []grafanaPanel
	var walk func([]grafanaPanel)
	walk = func(ps []grafanaPanel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// dashboardRequirement is one thing the dashboard must show: satisfied by a panel whose
// expressions (whitespace removed) and selectors pass ok.
type dashboardRequirement struct {
	what string
	ok   func(exprs []string, sels [][]promSelector) bool
}

// promGroupedBy reports whether expr aggregates by label.
func promGroupedBy(expr, label string) bool {
	for _, m := range regexp.MustCompile(`by\(([^)]*)\)`).FindAllStringSubmatch(expr, -1) {
		if slices.Contains(strings.Split(m[1], ","), label) {
			return true
		}
	}
	return false
}

func promRated(expr string) bool {
	return strings.Contains(expr, "rate(") || strings.Contains(expr, "increase(")
}

// dashPerSecond: an expression rates metric, keeps the series whose label is value, and shows them
// apart from the others (a matcher, or a grouping by that label); and groups by each of by.
func dashPerSecond(metric, label, value string, by ...string) func([]string, [][]promSelector) bool {
	return func(exprs []string, sels [][]promSelector) bool {
		for i, e := range exprs {
			if !promRated(e) {
				continue
			}
			for _, s := range sels[i] {
				if s.metric != metric || !s.allows(label, value) {
					continue
				}
				if _, m := s.matcher(label); !m && !promGroupedBy(e, label) {
					continue
				}
				if !slices.ContainsFunc(by, func(l string) bool { return !promGroupedBy(e, l) }) {
					return true
				}
			}
		}
		return false
	}
}

// dashQuantiles: the panel shows each quantile of the histogram metric.
func dashQuantiles(metric string, qs ...float64) func([]string, [][]promSelector) bool {
	return func(exprs []string, sels [][]promSelector) bool {
		for _, q := range qs {
			found := false
			for i, e := range exprs {
				m := regexp.MustCompile(`histogram_quantile\(([0-9.]+),`).FindStringSubmatch(e)
				if m == nil {
					continue
				}
				v, err := strconv.ParseFloat(m[1], 64)
				if err == nil && v == q && slices.ContainsFunc(sels[i], func(s promSelector) bool { return s.metric == metric }) {
					found = true
				}
			}
			if !found {
				return false
			}
		}
		return true
	}
}

// dashShows: an expression selects metric.
func dashShows(metric string) func([]string, [][]promSelector) bool {
	return func(_ []string, sels [][]promSelector) bool {
		for _, ss := range sels {
			if slices.ContainsFunc(ss, func(s promSelector) bool { return s.metric == metric }) {
				return true
			}
		}
		return false
	}
}

func dashEither(fs ...func([]string, [][]promSelector) bool) func([]string, [][]promSelector) bool {
	return func(e []string, s [][]promSelector) bool {
		return slices.ContainsFunc(fs, func(f func([]string, [][]promSelector) bool) bool { return f(e, s) })
	}
}

var dashboardRequirements = []dashboardRequirement{
	{"admitted jobs per second per plan", dashPerSecond("admitter_decisions_total", "outcome", "admitted", "plan")},
	{"delayed jobs per second per plan", dashPerSecond("admitter_decisions_total", "outcome", "delayed", "plan")},
	{"wait p50 and p99", dashQuantiles("admitter_wait_seconds_bucket", 0.5, 0.99)},
	{"decision latency p50 and p99", dashQuantiles("admitter_decision_duration_seconds_bucket", 0.5, 0.99)},
	{"fail-open events", dashEither(dashPerSecond("admitter_fail_mode_events_total", "mode", "open"), dashPerSecond("admitter_decisions_total", "outcome", "degraded"))},
	{"fail-closed events", dashEither(dashPerSecond("admitter_fail_mode_events_total", "mode", "closed"), dashPerSecond("admitter_decisions_total", "outcome", "held"))},
	{"Redis errors by kind", dashPerSecond("admitter_redis_errors_total", "kind", "timeout", "kind")},
	{"consumer pending", dashShows("admitter_consumer_pending")},
	{"consumer ack pending", dashShows("admitter_consumer_ack_pending")},
	{"jobs in flight", dashShows("admitter_jobs_in_flight")},
	{"jobs parked", dashShows("admitter_jobs_parked")},
	{"dead letters per second", dashPerSecond("admitter_decisions_total", "outcome", "dead")},
}

// dashboardProblems checks a dashboard against the provisioned Prometheus data source uid and
// the Prometheus job names.
func dashboardProblems(data []byte, promUID string, jobs []string) []string {
	var d grafanaDashboard
	if err := json.Unmarshal(data, &d); err != nil {
		return []string{err.Error()}
	}
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if d.UID == "" || d.Title == "" {
		add("no uid or title")
	}
	checkDS := func(where string, ds *grafanaDatasource) {
		if ds != nil && (ds.UID != promUID || ds.Type != "" && ds.Type != "prometheus") {
			add("%s: data source %+v, want the provisioned Prometheus (uid %q)", where, *ds, promUID)
		}
	}
	checkExpr := func(where, expr string) {
		for _, p := range promProblems(expr) {
			add("%s: %q: %s", where, expr, p)
		}
		for _, m := range regexp.MustCompile(`\bjob\s*=\s*"([^"]*)"`).FindAllStringSubmatch(expr, -1) {
			if !slices.Contains(jobs, m[1]) {
				add("%s: %q: no Prometheus job is called %q (jobs: %s)", where, expr, m[1], strings.Join(jobs, ", "))
			}
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		where := fmt.Sprintf("variable %s", v.Name)
		if v.Datasource == nil {
			add("%s: no data source", where)
		}
		checkDS(where, v.Datasource)
		q := ""
		switch qv := v.Query.(type) {
		case string:
			q = qv
		case map[string]any:
			q = composeScalar(qv["query"])
		}
		if pq := dashVariableQuery(q); pq != "" {
			checkExpr(where, pq)
		}
	}
	ids := map[int]string{}
	withQueries := 0
	var exprs [][]string
	var sels [][][]promSelector
	for _, p := range d.flatPanels() {
		where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		if other, dup := ids[p.ID]; dup {
			add("%s: id %d is also panel %q's", where, p.ID, other)
		}
		ids[p.ID] = p.Title
		if p.GridPos == nil || p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			add("%s: no sensible gridPos", where)
		}
		if p.Type == "row" {
			continue
		}
		checkDS(where, p.Datasource)
		var pe []string
		var ps [][]promSelector
		for _, tg := range p.Targets {
			tw := fmt.Sprintf("%s, query %s", where, tg.RefID)
			checkDS(tw, tg.Datasource)
			if tg.Datasource == nil && p.Datasource == nil {
				add("%s: no data source (Grafana would use whatever is the default)", tw)
			}
			if strings.TrimSpace(tg.Expr) == "" {
				add("%s: no expression", tw)
				continue
			}
			checkExpr(tw, tg.Expr)
			s, _ := promParse(tg.Expr)
			pe = append(pe, strings.Join(strings.Fields(tg.Expr), ""))
			ps = append(ps, s)
		}
		if len(pe) > 0 {
			withQueries++
			exprs, sels = append(exprs, pe), append(sels, ps)
		}
	}
	if withQueries == 0 {
		add("no panel queries anything")
	}
	for _, r := range dashboardRequirements {
		shown := false
		for i := range exprs {
			shown = shown || r.ok(exprs[i], sels[i])
		}
		if !shown {
			add("no panel shows %s", r.what)
		}
	}
	return problems
}

func TestComposeDashboard(t *testing.T) {
	st := loadComposeStack(t)
	g := loadGrafana(t, st)
	data, err := os.ReadFile(g.dashboard)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range dashboardProblems(data, g.promUID, g.jobs) {
		t.Errorf("%s: %s", g.dashboard, p)
	}
}

// ---------------------------------------------------------------------------------------------
// The checkers fail when they should.

func TestComposeCheckersPromQL(t *testing.T) {
	good := []string{
		`sum by (plan) (rate(admitter_decisions_total{outcome="admitted", plan=~"$plan"}[$__rate_interval]))`,
		`sum(rate(admitter_decisions_total[5m])) by (plan, outcome)`,
		`histogram_quantile(0.99, sum by (le, plan) (rate(admitter_wait_seconds_bucket{plan=~"$plan"}[$__rate_interval])))`,
		`rate(admitter_wait_seconds_sum[1m]) / rate(admitter_wait_seconds_count[1m])`,
		`sum(up{job="admitter"}) and on (job) count by (job) (target_info)`,
		`1e3 * max(admitter_consumer_pending offset 5m) > bool 0`,
		`admitter_decisions_total{outcome=~"degraded|held"}`,
		`label_replace(admitter_jobs_in_flight, "x", "$1", "instance", "(.*):.*")`,
		`sum(rate(admitter_fail_mode_events_total{mode!="open", otel_scope_name=~".+"}[${__rate_interval}]))`,
		`max by(instance)(admitter_jobs_in_flight) - ignoring(x) group_left sum without (le) (admitter_wait_seconds_bucket)`,
		`topk(3, sum by (plan) (increase(admitter_decisions_total{outcome=~"$outcome"}[1h])))`,
	}
	for _, e := range good {
		if p := promProblems(e); len(p) > 0 {
			t.Errorf("promProblems(%q) = %q, want none", e, p)
		}
	}
	bad := map[string]string{
		`rate(admitter_decision_total[5m])`:                          "admitter_decision_total is not a metric",
		`sum(rate(http_requests_total[5m]))`:                         "http_requests_total is not admitter's",
		`sum by (plan) (rate(process_cpu_seconds_total[1m]))`:        "process_cpu_seconds_total is not admitter's",
		`admitter_decisions_total{outcome="admited"}`:                `outcome is never "admited"`,
		`admitter_decisions_total{outcome=~"degraded|helt"}`:         `outcome is never "helt"`,
		`admitter_redis_errors_total{kind="timout"}`:                 `kind is never "timout"`,
		`admitter_fail_mode_events_total{mode="half-open"}`:          `mode is never "half-open"`,
		`admitter_redis_errors_total{plan="gold"}`:                   "admitter_redis_errors_total has no label plan",
		`{__name__="admitter_bogus"}`:                                "admitter_bogus is not a metric",
		`histogram_quantile(0.5, rate(admitter_wait_bucket[5m]))`:    "admitter_wait_bucket is not a metric",
		`sum(rate(admitter_decisions_total{outcome="admitted"}[5m])`: "unbalanced",
	}
	for e, want := range bad {
		p := promProblems(e)
		if !slices.ContainsFunc(p, func(s string) bool { return strings.Contains(s, want) }) {
			t.Errorf("promProblems(%q) = %q, want a problem containing %q", e, p, want)
		}
	}
	if got := dashVariableQuery("label_values(admitter_decisions_total{outcome=\"x\"}, plan)"); got != `admitter_decisions_total{outcome="x"}` {
		t.Errorf("variableQuery = %q", got)
	}
}

func TestComposeCheckersPorts(t *testing.T) {
	for _, tc := range []struct {
		ports any
		ok    bool
	}{
		{"127.0.0.1:3000:3000", true},
		{"127.0.0.1::3000", true},
		{"127.0.0.1:4317:4317/udp", true},
		{map[string]any{"host_ip": "127.0.0.1", "published": 80, "target": 8080}, true},
		{"3000:3000", false},
		{"3000", false},
		{3000, false},
		{"0.0.0.0:3000:3000", false},
		{"[::]:3000:3000", false},
		{map[string]any{"published": 80, "target": 8080}, false},
	} {
		p := composePortProblems("svc", []any{tc.ports}, map[string]string{})
		if (len(p) == 0) != tc.ok {
			t.Errorf("ports %v: problems %q, want ok=%v", tc.ports, p, tc.ok)
		}
	}
	seen := map[string]string{}
	composePortProblems("a", []any{"127.0.0.1:9090:9090"}, seen)
	if p := composePortProblems("b", []any{"127.0.0.1:9090:80"}, seen); len(p) != 1 {
		t.Errorf("a host port published twice: problems %q", p)
	}
}

func TestComposeCheckersDockerfile(t *testing.T) {
	good := `# syntax=docker/dockerfile:1
ARG GO=1.26
FROM --platform=$BUILDPLATFORM golang:${GO}-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod \
    CGO_ENABLED=0 go build \
    -o /out/admitter ./cmd/admitter
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/admitter /usr/local/bin/
USER 65532:65532
EXPOSE 9090
ENTRYPOINT ["/usr/local/bin/admitter"]
`
	if p := dockerfileProblems(good, "1.26", "9090"); len(p) > 0 {
		t.Errorf("good Dockerfile: %q", p)
	}
	for _, tc := range []struct{ old, new, want string }{ // want "": no problem
		{"${GO}-bookworm", "1.25-bookworm", "go.mod says go 1.26"},
		{"CGO_ENABLED=0 ", "", "CGO_ENABLED=0"},
		{"./cmd/admitter", "./cmd/other", "no golang stage"},
		{"USER 65532:65532", "USER root", "is root"},
		{"USER 65532:65532\n", "", ""}, // the nonroot image's default user
		{"static-debian12:nonroot", "static-debian12", ""},
		{"EXPOSE 9090", "EXPOSE 8080", "does not EXPOSE 9090"},
		{`["/usr/local/bin/admitter"]`, "/usr/local/bin/admitter", "shell form"},
		{`["/usr/local/bin/admitter"]`, `["/admitter"]`, "does not run the binary"},
		{"--from=build", "--from=other", "does not COPY"},
		{"FROM gcr.io/distroless/static-debian12:nonroot\nCOPY --from=build /out/admitter /usr/local/bin/\n", "", "in the build stage"},
	} {
		broken := strings.Replace(good, tc.old, tc.new, 1)
		if broken == good {
			t.Fatalf("%q does not occur in the Dockerfile", tc.old)
		}
		p := dockerfileProblems(broken, "1.26", "9090")
		switch {
		case tc.want == "" && len(p) > 0:
			t.Errorf("Dockerfile with %q → %q: problems %q, want none", tc.old, tc.new, p)
		case tc.want != "" && !slices.ContainsFunc(p, func(s string) bool { return strings.Contains(s, tc.want) }):
			t.Errorf("Dockerfile with %q → %q: problems %q, want one containing %q", tc.old, tc.new, p, tc.want)
		}
	}
	noUser := strings.Replace(strings.Replace(good, "USER 65532:65532\n", "", 1), ":nonroot", "", 1)
	if p := dockerfileProblems(noUser, "1.26", "9090"); !slices.ContainsFunc(p, func(s string) bool { return strings.Contains(s, "no USER") }) {
		t.Errorf("no USER on a root image: problems %q", p)
	}
}

func TestComposeCheckersDockerignore(t *testing.T) {
	ign, err := parseDockerignore("# comment\n.git\n/bin\n**/*.test\ncmd\n!cmd/admitter\nlua/*.lua\n")
	if err != nil {
		t.Fatal(err)
	}
	for f, want := range map[string]bool{
		".git/HEAD":             true,
		"bin/admitter":          true,
		"bucket/bucket.test":    true,
		"x.test":                true,
		"cmd/other/main.go":     true,
		"cmd/admitter/main.go":  false,
		"lua/decide.lua":        true,
		"lua/lua.go":            false,
		"go.mod":                false,
		"internal/gitx/file.go": false,
	} {
		if got := ign.excludes(f); got != want {
			t.Errorf("excludes(%q) = %v, want %v", f, got, want)
		}
	}
}

func TestComposeCheckersDashboard(t *testing.T) {
	st := loadComposeStack(t)
	g := loadGrafana(t, st)
	data, err := os.ReadFile(g.dashboard)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ old, new, want string }{
		{`"uid": "` + g.promUID + `"`, `"uid": "some-other-uid"`, "want the provisioned Prometheus"},
		{`admitter_consumer_ack_pending`, `admitter_consumer_ackpending`, "not a metric admitter exports"},
		{`outcome=\"dead\"`, `outcome=\"deadletter\"`, `outcome is never "deadletter"`},
		{`job=\"admitter\"`, `job=\"admitter-svc\"`, `no Prometheus job is called "admitter-svc"`},
		{`admitter_jobs_in_flight`, `go_goroutines`, "go_goroutines is not admitter's"},
	} {
		if !strings.Contains(string(data), tc.old) {
			t.Fatalf("the dashboard has no %s to break", tc.old)
		}
		broken := strings.ReplaceAll(string(data), tc.old, tc.new)
		p := dashboardProblems([]byte(broken), g.promUID, g.jobs)
		if !slices.ContainsFunc(p, func(s string) bool { return strings.Contains(s, tc.want) }) {
			t.Errorf("dashboard with %s → %s: problems %q, want one containing %q", tc.old, tc.new, p, tc.want)
		}
	}
	if p := dashboardProblems(data[:len(data)/2], g.promUID, g.jobs); len(p) == 0 {
		t.Error("a truncated dashboard passes")
	}
	// Removing what a requirement needs is noticed.
	var d map[string]any
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	for _, r := range dashboardRequirements {
		var kept []any
		for _, p := range d["panels"].([]any) {
			pm := p.(map[string]any)
			single := map[string]any{"uid": "x", "title": "x", "panels": []any{pm}}
			b, _ := json.Marshal(single)
			if slices.Contains(dashboardProblems(b, g.promUID, g.jobs), "no panel shows "+r.what) {
				kept = append(kept, p)
			}
		}
		if len(kept) == len(d["panels"].([]any)) {
			t.Errorf("no panel of the dashboard satisfies %q", r.what)
			continue
		}
		b, _ := json.Marshal(map[string]any{"uid": "x", "title": "x", "panels": kept})
		if p := dashboardProblems(b, g.promUID, g.jobs); !slices.Contains(p, "no panel shows "+r.what) {
			t.Errorf("dashboard without the panels showing %s: problems %q", r.what, p)
		}
	}
}
