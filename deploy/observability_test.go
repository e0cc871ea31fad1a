package deploy

// Prometheus' configuration, Grafana's provisioning and the dashboard, whose queries are parsed
// by Prometheus' own PromQL parser.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/types"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	promparser "github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

// ---------------------------------------------------------------------------------------------
// Prometheus

// prometheus is what the prometheus service scrapes.
type prometheus struct {
	file     string        // its configuration file in the repository
	jobs     []string      // its scrape jobs' names
	interval time.Duration // how often it scrapes admitter
	// ruleFiles are the rule files it loads (repository files), from the patterns of its
	// rule_files; ruleProblems say which it cannot (checkAlerts reports them).
	ruleFiles, rulePatterns, ruleProblems []string
}

// flag is the value of --name=value or --name value in a command.
func flag(cmd types.ShellCommand, name string) (string, bool) {
	for i, a := range cmd {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true
		}
		if a == name && i+1 < len(cmd) {
			return cmd[i+1], true
		}
	}
	return "", false
}

// loadPrometheus reads the configuration the prometheus service runs with and checks that one
// of its jobs scrapes admitter's /metrics where admitter listens.
func loadPrometheus(s *stack) (*prometheus, []string) {
	svc, err := s.service("prometheus")
	if err != nil {
		return nil, []string{err.Error()}
	}
	conf, ok := flag(svc.Command, "--config.file")
	if !ok {
		conf = "/etc/prometheus/prometheus.yml" // the image's default
	}
	host, ok := hostPath(svc, conf)
	if !ok {
		return nil, []string{fmt.Sprintf("compose.yaml: services.prometheus: its configuration %s is not mounted from the repository", conf)}
	}
	data, err := s.read(host)
	if err != nil {
		return nil, []string{err.Error()}
	}
	pr := &prometheus{file: rel(host)}
	var c struct {
		Global struct {
			ScrapeInterval string `yaml:"scrape_interval"`
		} `yaml:"global"`
		RuleFiles     []string `yaml:"rule_files"`
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
	if err := yaml.Unmarshal(data, &c); err != nil {
		return nil, []string{fmt.Sprintf("%s: %v", pr.file, err)}
	}
	var problems []string
	add := func(format string, args ...any) {
		problems = append(problems, fmt.Sprintf(pr.file+": "+format, args...))
	}
	duration := func(where, v, def string) time.Duration {
		if v == "" {
			v = def
		}
		d, err := model.ParseDuration(v)
		if err != nil {
			add("%s: %v", where, err)
		}
		return time.Duration(d)
	}
	global := duration("global.scrape_interval", c.Global.ScrapeInterval, "1m")

	admitter, _ := s.service("admitter")
	want := ""
	if port, err := listenPort(ptr(admitter.Environment["ADMITTER_HTTP_ADDR"])); err == nil {
		want = "admitter:" + port
	} // else checkAdmitter says why
	found := false
	for i, sc := range c.ScrapeConfigs {
		where := fmt.Sprintf("scrape_configs[%d] (job %s)", i, sc.JobName)
		if slices.Contains(pr.jobs, sc.JobName) {
			add("%s: job_name %q appears twice: Prometheus refuses to start", where, sc.JobName)
		}
		pr.jobs = append(pr.jobs, sc.JobName)
		interval := duration(where+".scrape_interval", sc.ScrapeInterval, c.Global.ScrapeInterval)
		if sc.ScrapeInterval == "" {
			interval = global
		}
		for j, st := range sc.StaticConfigs {
			for k, target := range st.Targets {
				if h, _, _ := strings.Cut(target, ":"); h != "admitter" || want == "" {
					continue
				}
				tw := fmt.Sprintf("%s.static_configs[%d].targets[%d]", where, j, k)
				if target != want {
					add("%s %q: admitter listens on %s (ADMITTER_HTTP_ADDR in compose.yaml)", tw, target, want)
					continue
				}
				pr.interval, found = interval, true
				if p := sc.MetricsPath; p != "" && p != "/metrics" {
					add("%s.metrics_path %s: admitter serves /metrics", where, p)
				}
				if sc.Scheme != "" && sc.Scheme != "http" {
					add("%s.scheme %s: admitter serves plain http", where, sc.Scheme)
				}
			}
		}
	}
	if !found && want != "" {
		add("no job scrapes %s", want)
	}
	pr.rulePatterns = c.RuleFiles
	pr.ruleFiles, pr.ruleProblems = ruleFiles(s, conf, c.RuleFiles)
	return pr, problems
}

func checkPrometheus(s *stack) []string {
	_, problems := loadPrometheus(s)
	return problems
}

// ---------------------------------------------------------------------------------------------
// Grafana

// grafana is what the grafana service is provisioned with.
type grafana struct {
	promUID      string        // the Prometheus data source's uid
	timeInterval time.Duration // its jsonData.timeInterval: the scrape interval Grafana assumes
	dashboard    string        // the admitter dashboard (absolute path)
}

// loadGrafana reads the grafana service's provisioning: one Prometheus data source, the
// prometheus service's, and a dashboard provider that loads admitter.json.
func loadGrafana(s *stack) (*grafana, []string) {
	svc, err := s.service("grafana")
	if err != nil {
		return nil, []string{err.Error()}
	}
	p, _ := s.compose()
	env := func(k string) string { return ptr(svc.Environment[k]) }
	prov := env("GF_PATHS_PROVISIONING")
	if prov == "" {
		prov = "/etc/grafana/provisioning"
	}
	g := &grafana{timeInterval: 15 * time.Second}
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	// yamlFiles are the provisioning files of one kind, as Grafana reads them.
	yamlFiles := func(kind string) []string {
		dir, ok := hostPath(svc, prov+"/"+kind)
		if !ok {
			add("compose.yaml: services.grafana: %s/%s is not mounted from the repository", prov, kind)
			return nil
		}
		var files []string
		for _, pat := range []string{"*.yaml", "*.yml"} {
			m, _ := filepath.Glob(filepath.Join(dir, pat))
			files = append(files, m...)
		}
		if len(files) == 0 {
			add("%s: no provisioning file", rel(dir))
		}
		return files
	}
	readYAML := func(file string, v any) bool {
		data, err := s.read(file)
		if err == nil {
			err = yaml.Unmarshal(data, v)
		}
		if err != nil {
			add("%s: %v", rel(file), err)
		}
		return err == nil
	}

	for _, f := range yamlFiles("datasources") {
		var doc struct {
			Datasources []struct {
				Name, UID, Type, URL string
				JSONData             struct {
					TimeInterval string `yaml:"timeInterval"`
				} `yaml:"jsonData"`
			} `yaml:"datasources"`
		}
		if !readYAML(f, &doc) {
			continue
		}
		for i, ds := range doc.Datasources {
			if ds.Type != "prometheus" {
				continue
			}
			where := fmt.Sprintf("%s: datasources[%d] (%s)", rel(f), i, ds.Name)
			if g.promUID != "" {
				add("%s: a second Prometheus data source: the dashboard's must be unambiguous", where)
			}
			if ds.UID == "" {
				add("%s: no uid: Grafana would make one up, and the dashboard could not refer to it", where)
			}
			g.promUID = ds.UID
			if to, err := serviceURL(p, ds.URL, "http", "80"); err != nil {
				add("%s.url: %v", where, err)
			} else if to != "prometheus" {
				add("%s.url %q: service %s is not prometheus", where, ds.URL, to)
			}
			if ti := ds.JSONData.TimeInterval; ti != "" {
				d, err := model.ParseDuration(ti)
				if err != nil {
					add("%s.jsonData.timeInterval: %v", where, err)
				}
				g.timeInterval = time.Duration(d)
			}
		}
	}
	if g.promUID == "" {
		add("compose.yaml: services.grafana: no Prometheus data source is provisioned")
	}

	for _, f := range yamlFiles("dashboards") {
		var doc struct {
			Providers []struct {
				Name, Type string
				Options    struct {
					Path string `yaml:"path"`
				} `yaml:"options"`
			} `yaml:"providers"`
		}
		if !readYAML(f, &doc) {
			continue
		}
		for i, pv := range doc.Providers {
			if pv.Type != "" && pv.Type != "file" {
				continue
			}
			host, ok := hostPath(svc, pv.Options.Path)
			if !ok {
				add("%s: providers[%d].options.path %s is not mounted from the repository", rel(f), i, pv.Options.Path)
				continue
			}
			if fi, err := os.Stat(host); err == nil && fi.IsDir() {
				host = filepath.Join(host, "admitter.json")
			}
			if _, err := os.Stat(host); err == nil {
				g.dashboard = host
			}
		}
	}
	if g.dashboard == "" {
		add("compose.yaml: services.grafana: no dashboard provider loads admitter.json")
	}
	if home := env("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"); home != "" {
		if host, ok := hostPath(svc, home); !ok {
			add("compose.yaml: services.grafana.environment.GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH %s is not mounted from the repository", home)
		} else if _, err := os.Stat(host); err != nil {
			add("compose.yaml: services.grafana.environment.GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH %s: %v", home, err)
		}
	}
	return g, problems
}

// checkGrafana: the provisioning holds, anonymous visitors may view (and only view) the
// dashboard, and Grafana does not assume admitter is scraped more often than it is.
func checkGrafana(s *stack) []string {
	g, problems := loadGrafana(s)
	if g == nil {
		return problems
	}
	svc, _ := s.service("grafana")
	if v := ptr(svc.Environment["GF_AUTH_ANONYMOUS_ENABLED"]); !strings.EqualFold(v, "true") {
		problems = append(problems, "compose.yaml: services.grafana.environment.GF_AUTH_ANONYMOUS_ENABLED is not true: the dashboard would need a login")
	}
	if role := ptr(svc.Environment["GF_AUTH_ANONYMOUS_ORG_ROLE"]); role != "" && role != "Viewer" {
		problems = append(problems, fmt.Sprintf("compose.yaml: services.grafana.environment.GF_AUTH_ANONYMOUS_ORG_ROLE %s: anonymous visitors must be Viewers", role))
	}
	if pr, _ := loadPrometheus(s); pr != nil && pr.interval > g.timeInterval {
		problems = append(problems, fmt.Sprintf("the Prometheus data source's jsonData.timeInterval (%v, deploy/grafana/provisioning/datasources) is shorter than %s's scrape interval of admitter (%v): $__rate_interval windows could hold a single sample and rate() panels would go blank",
			g.timeInterval, pr.file, pr.interval))
	}
	return problems
}

// ---------------------------------------------------------------------------------------------
// The dashboard

// grafanaVariable is a Grafana template variable in a query: $name, ${name}, ${name:format}
// or [[name]].
var grafanaVariable = regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)(?::\w+)?\]\]`)

// anyValue replaces a variable that stands for label values: matchers that contain it are not
// checked.
const anyValue = "grafana_variable"

// promQL parses a dashboard query with Prometheus' parser, Grafana's variables replaced as
// Grafana would (a duration for the interval ones).
func promQL(q string) (promparser.Expr, error) {
	q = grafanaVariable.ReplaceAllStringFunc(q, func(m string) string {
		sm := grafanaVariable.FindStringSubmatch(m)
		name := sm[1] + sm[2] + sm[3]
		if name == "__interval" || name == "__rate_interval" || name == "__range" {
			return "5m"
		}
		return anyValue
	})
	return promparser.NewParser(promparser.Options{}).ParseExpr(q)
}

// alternatives splits a regular expression that is only a list of literal alternatives; ok is
// false for any other.
var literalAlternatives = regexp.MustCompile(`^[A-Za-z0-9_-]+(\|[A-Za-z0-9_-]+)*$`)

// targetLabels are the labels a scrape adds to every series besides job and instance: those of
// Kubernetes service discovery and of the Prometheus Operator's monitors.
var targetLabels = []string{"namespace", "pod", "container", "service", "endpoint"}

// queryProblems checks the selectors of a query: each names a series admitter exports, with the
// labels it carries and values they take, and job matchers name a Prometheus job (any when jobs
// is nil). used collects the metrics it selects.
func queryProblems(e *exports, q string, jobs []string, used map[string]bool) []string {
	expr, err := promQL(q)
	if err != nil {
		return []string{err.Error()}
	}
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	selectors := 0
	promparser.Inspect(expr, func(n promparser.Node, _ []promparser.Node) error {
		vs, ok := n.(*promparser.VectorSelector)
		if !ok {
			return nil
		}
		selectors++
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		metric, known := e.series[name]
		switch {
		case name == "" || name == anyValue:
			add("a selector without a metric name cannot be checked")
			return nil
		case !known && strings.HasPrefix(name, "admitter_"):
			add("%s is not a metric admitter exports (wire/wire.go)", name)
			return nil
		case !known:
			add("%s is not admitter's: only its metrics (wire/wire.go), up and target_info are scraped from it", name)
			return nil
		}
		used[metric] = true
		for _, m := range vs.LabelMatchers {
			switch {
			case m.Name == model.MetricNameLabel:
				continue
			case m.Name == "job":
				if jobs != nil && m.Type == labels.MatchEqual && !strings.Contains(m.Value, anyValue) && !slices.Contains(jobs, m.Value) {
					add("%s: no Prometheus job is called %q (jobs: %s)", m, m.Value, strings.Join(jobs, ", "))
				}
				continue
			case m.Name == "instance" || slices.Contains(targetLabels, m.Name) || strings.HasPrefix(m.Name, "otel_scope_"):
				continue
			case e.labels[name] != nil && !slices.Contains(e.labels[name], m.Name):
				add("%s has no label %s", name, m.Name)
				continue
			}
			values, fixed := e.values[m.Name]
			if !fixed || strings.Contains(m.Value, anyValue) {
				continue
			}
			var vs []string
			switch {
			case m.Type == labels.MatchEqual || m.Type == labels.MatchNotEqual:
				vs = []string{m.Value}
			case literalAlternatives.MatchString(m.Value):
				vs = strings.Split(m.Value, "|")
			case m.Type == labels.MatchRegexp && !slices.ContainsFunc(values, m.Matches):
				add("%s: %s matches none of its values (%s)", m, m.Name, strings.Join(values, ", "))
			}
			for _, v := range vs {
				if !slices.Contains(values, v) {
					add("%s: %s is never %q (it is one of %s)", m, m.Name, v, strings.Join(values, ", "))
				}
			}
		}
		return nil
	})
	if selectors == 0 {
		add("selects no metric")
	}
	return problems
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
	Targets    []struct {
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

// jsonError is a JSON decoding error with the line it happened on.
func jsonError(file string, data []byte, err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	off := int64(-1)
	if errors.As(err, &se) {
		off = se.Offset
	} else if errors.As(err, &te) {
		off = te.Offset
	}
	if off < 0 {
		return fmt.Sprintf("%s: %v", file, err)
	}
	return fmt.Sprintf("%s:%d: %v", file, 1+bytes.Count(data[:min(int(off), len(data))], []byte("\n")), err)
}

// variableQuery is the PromQL inside a Grafana query variable ("" when there is none).
var variableQuery = regexp.MustCompile(`^\s*(?:label_values\((.*),\s*\w+\s*\)|query_result\((.*)\))\s*$`)

// checkDashboard: the dashboard is valid JSON with a uid and a title and unique panel ids; every
// query uses the provisioned Prometheus data source, parses, and selects only series admitter
// exports with labels and values they have; and every metric admitter exports is on it.
func checkDashboard(s *stack) []string {
	g, problems := loadGrafana(s)
	if g == nil || g.dashboard == "" {
		return problems
	}
	problems = nil // checkGrafana reports them
	pr, _ := loadPrometheus(s)
	var jobs []string
	if pr != nil {
		jobs = pr.jobs
	}
	e, err := exported()
	if err != nil {
		return []string{err.Error()}
	}
	file := rel(g.dashboard)
	data, err := s.read(g.dashboard)
	if err != nil {
		return []string{err.Error()}
	}
	var d grafanaDashboard
	if err := json.Unmarshal(data, &d); err != nil {
		return []string{jsonError(file, data, err)}
	}
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(file+": "+format, args...)) }
	if d.UID == "" || d.Title == "" {
		add("no uid or no title")
	}
	checkDS := func(where string, ds *grafanaDatasource) {
		if ds != nil && (ds.UID != g.promUID || ds.Type != "" && ds.Type != "prometheus") {
			add("%s: data source %+v, want the provisioned Prometheus (uid %q)", where, *ds, g.promUID)
		}
	}
	used := map[string]bool{}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		where := "templating variable " + v.Name
		if v.Datasource == nil {
			add("%s: no data source (Grafana would use whatever is the default)", where)
		}
		checkDS(where, v.Datasource)
		q, _ := v.Query.(string)
		if m, ok := v.Query.(map[string]any); ok {
			q, _ = m["query"].(string)
		}
		if m := variableQuery.FindStringSubmatch(q); m != nil {
			q = m[1] + m[2]
		} else if strings.HasPrefix(strings.TrimSpace(q), "label_") || strings.HasPrefix(strings.TrimSpace(q), "metrics(") {
			continue // label_names(), label_values(label), metrics(re): no selector
		}
		for _, p := range queryProblems(e, q, jobs, map[string]bool{}) {
			add("%s: %q: %s", where, q, p)
		}
	}
	ids := map[int]string{}
	var walk func([]grafanaPanel)
	walk = func(panels []grafanaPanel) {
		for _, p := range panels {
			where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
			if other, dup := ids[p.ID]; dup {
				add("%s: id %d is panel %q's too", where, p.ID, other)
			}
			ids[p.ID] = p.Title
			checkDS(where, p.Datasource)
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
				for _, pb := range queryProblems(e, tg.Expr, jobs, used) {
					add("%s: %q: %s", tw, tg.Expr, pb)
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, m := range e.metrics {
		if !used[m] {
			add("no panel queries %s, a metric admitter exports (wire/wire.go)", m)
		}
	}
	return problems
}

func TestPrometheus(t *testing.T) { report(t, checkPrometheus) }
func TestGrafana(t *testing.T)    { report(t, checkGrafana) }
func TestDashboard(t *testing.T)  { report(t, checkDashboard) }

func TestObservabilityChecksCatch(t *testing.T) {
	t.Run("prometheus", func(t *testing.T) {
		const file = "deploy/prometheus/prometheus.yml"
		catches(t, file, checkPrometheus, []breakage{
			{`["admitter:9090"]`, `["admitter:9091"]`, file + `: scrape_configs[0] (job admitter).static_configs[0].targets[0] "admitter:9091": admitter listens on admitter:9090`},
			{`["admitter:9090"]`, `["localhost:9090"]`, file + ": no job scrapes admitter:9090"},
			{"metrics_path: /metrics", "metrics_path: /metrix", "scrape_configs[0] (job admitter).metrics_path /metrix: admitter serves /metrics"},
			{"  - job_name: prometheus", "  - job_name: admitter", `scrape_configs[1] (job admitter): job_name "admitter" appears twice`},
			{"    scrape_interval: 5s", "    scrape_interval: 5 s", `scrape_configs[0] (job admitter).scrape_interval: unknown unit " s" in duration "5 s"`},
			{"scrape_configs:", "scrape_configs: [", file + ": yaml: line"},
		})
		catches(t, "compose.yaml", checkPrometheus, []breakage{
			{"/etc/prometheus/prometheus.yml:ro", "/etc/prometheus/other.yml:ro", "services.prometheus: its configuration /etc/prometheus/prometheus.yml is not mounted"},
		})
	})
	t.Run("grafana", func(t *testing.T) {
		const datasources = "deploy/grafana/provisioning/datasources/datasources.yaml"
		catches(t, datasources, checkGrafana, []breakage{
			{"url: http://prometheus:9090", "url: http://prometheus:9091", datasources + `: datasources[0] (Prometheus).url: "http://prometheus:9091": service prometheus neither publishes nor exposes port 9091`},
			{"url: http://prometheus:9090", "url: http://jaeger:16686", `datasources[0] (Prometheus).url "http://jaeger:16686": service jaeger is not prometheus`},
			{"    uid: admitter-prometheus\n", "", datasources + ": datasources[0] (Prometheus): no uid"},
			{"    type: jaeger", "    type: prometheus", datasources + ": datasources[1] (Jaeger): a second Prometheus data source"},
			{"timeInterval: 5s", "timeInterval: 2s", "the Prometheus data source's jsonData.timeInterval (2s"},
		})
		catches(t, "deploy/grafana/provisioning/dashboards/dashboards.yaml", checkGrafana, []breakage{
			{"path: /var/lib/grafana/dashboards", "path: /var/lib/grafana/dashboard", "providers[0].options.path /var/lib/grafana/dashboard is not mounted"},
		})
		catches(t, "compose.yaml", checkGrafana, []breakage{
			{"GF_AUTH_ANONYMOUS_ORG_ROLE: Viewer", "GF_AUTH_ANONYMOUS_ORG_ROLE: Admin", "GF_AUTH_ANONYMOUS_ORG_ROLE Admin: anonymous visitors must be Viewers"},
			{`GF_AUTH_ANONYMOUS_ENABLED: "true"`, `GF_AUTH_ANONYMOUS_ENABLED: "false"`, "GF_AUTH_ANONYMOUS_ENABLED is not true"},
			{"./deploy/grafana/provisioning:/etc", "./deploy/grafana:/etc", "deploy/grafana/datasources: no provisioning file"},
			{"/var/lib/grafana/dashboards/admitter.json", "/var/lib/grafana/dashboards/home.json", "GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH /var/lib/grafana/dashboards/home.json: stat"},
		})
		catches(t, "deploy/prometheus/prometheus.yml", checkGrafana, []breakage{
			{"    scrape_interval: 5s", "    scrape_interval: 30s", "is shorter than deploy/prometheus/prometheus.yml's scrape interval of admitter (30s)"},
		})
	})
	t.Run("dashboard", func(t *testing.T) {
		const file = "deploy/grafana/dashboards/admitter.json"
		catches(t, file, checkDashboard, []breakage{
			{`"uid": "admitter-prometheus"`, `"uid": "prometheus"`, `panel 1 "Replicas up": data source {Type:prometheus UID:prometheus}, want the provisioned Prometheus (uid "admitter-prometheus")`},
			{"sum by (instance) (admitter_queues)", "sum by (instance) (admitter_queue)", `query A: "sum by (instance) (admitter_queue)": admitter_queue is not a metric admitter exports`},
			{`outcome=\"dead\"`, `outcome=\"deadletter\"`, `panel 4 "Dead letters / s", query A: "sum(rate(admitter_decisions_total{outcome=\"deadletter\", plan=~\"$plan\"}[$__rate_interval]))": outcome="deadletter": outcome is never "deadletter"`},
			{`outcome=\"delayed\"`, `outcome=~\"delayed|parked\"`, `outcome is never "parked"`},
			{`job=\"admitter\"`, `job=\"admitter-svc\"`, `job="admitter-svc": no Prometheus job is called "admitter-svc" (jobs: admitter, prometheus)`},
			{`sum by (instance) (admitter_jobs_in_flight)`, `sum by (instance) (go_goroutines)`, "go_goroutines is not admitter's"},
			{`sum by (kind) (rate(admitter_redis_errors_total[$__rate_interval]))`, `sum by (kind) (rate(admitter_redis_errors_total{plan=~\"$plan\"}[$__rate_interval]))`, "admitter_redis_errors_total has no label plan"},
			{`histogram_quantile(0.5, sum by (le) (rate(admitter_decision_duration_seconds_bucket`, `histogram_quantile(0.5, sum by (le) (rate(admitter_decision_duration_seconds`, "admitter_decision_duration_seconds is not a metric admitter exports"},
			{`sum(rate(admitter_fail_mode_events_total[$__rate_interval]))`, `sum(rate(admitter_fail_mode_events_total[$__rate_interval])`, `": 1:46: parse error: unclosed left parenthesis`},
			{`"id": 12,`, `"id": 11,`, `panel 11 "Redis errors / s by kind": id 11 is panel "Fail-open / fail-closed events / s"'s too`},
			{`(admitter_output_blocked)`, `(admitter_replicas)`, "no panel queries admitter_output_blocked, a metric admitter exports"},
			{`"title": "admitter",`, `"title": "admitter",,`, file + ":{line}: invalid character ','"},
			{`label_values(admitter_decisions_total, plan)`, `label_values(admitter_decision_total, plan)`, `templating variable plan: "admitter_decision_total": admitter_decision_total is not a metric admitter exports`},
		})
	})
}

// TestQueries: what queryProblems accepts and refuses, beyond the dashboard's own queries.
func TestQueries(t *testing.T) {
	e, err := exported()
	if err != nil {
		t.Fatal(err)
	}
	jobs := []string{"admitter", "prometheus"}
	for _, q := range []string{
		`sum by (plan) (rate(admitter_decisions_total{outcome="admitted", plan=~"$plan"}[$__rate_interval]))`,
		`sum(rate(admitter_decisions_total[5m])) by (plan, outcome)`,
		`histogram_quantile(0.99, sum by (le, plan) (rate(admitter_wait_seconds_bucket{plan=~"$plan"}[$__rate_interval])))`,
		`rate(admitter_wait_seconds_sum[1m]) / rate(admitter_wait_seconds_count[1m])`,
		`sum(up{job="admitter"}) and on (job) count by (job) (target_info)`,
		`1e3 * max(admitter_jobs_waiting offset 5m) > bool 0`,
		`admitter_decisions_total{outcome=~"degraded|held|paused"}`,
		`admitter_decisions_total{outcome=~"del.*", tenant!=""}`,
		`label_replace(admitter_jobs_in_flight, "x", "$1", "instance", "(.*):.*")`,
		`sum(rate(admitter_fail_mode_events_total{mode!="open", otel_scope_name=~".+"}[${__rate_interval}]))`,
		`max by (instance) (admitter_jobs_in_flight) - ignoring (x) group_left sum without (le) (admitter_wait_seconds_bucket)`,
		`topk(3, sum by (plan) (increase(admitter_decisions_total{outcome=~"$outcome"}[1h])))`,
		`{__name__="admitter_queues"} + on (instance) admitter_jobs_waiting`,
		`sum by (result) (increase(admitter_plans_reloads_total{result="error"}[$__range]))`,
		`max(admitter_output_blocked) + max(admitter_replicas) + sum(rate(admitter_forwards_late_total[5m]))`,
	} {
		if p := queryProblems(e, q, jobs, map[string]bool{}); len(p) > 0 {
			t.Errorf("%s: %q, want no problem", q, p)
		}
	}
	for q, want := range map[string]string{
		`rate(admitter_decision_total[5m])`:                          "admitter_decision_total is not a metric admitter exports",
		`admitter_jobs_parked`:                                       "admitter_jobs_parked is not a metric admitter exports",
		`admitter_jobs_waiting_bucket`:                               "admitter_jobs_waiting_bucket is not a metric admitter exports",
		`{__name__="admitter_bogus"}`:                                "admitter_bogus is not a metric admitter exports",
		`sum(rate(http_requests_total[5m]))`:                         "http_requests_total is not admitter's",
		`admitter_decisions_total{outcome="admited"}`:                `outcome is never "admited"`,
		`admitter_decisions_total{outcome=~"degraded|helt"}`:         `outcome is never "helt"`,
		`admitter_decisions_total{outcome=~"x.*"}`:                   `outcome matches none of its values`,
		`admitter_redis_errors_total{kind="timout"}`:                 `kind is never "timout"`,
		`admitter_fail_mode_events_total{mode="half-open"}`:          `mode is never "half-open"`,
		`admitter_plans_reloads_total{result="failed"}`:              `result is never "failed"`,
		`admitter_redis_errors_total{plan="gold"}`:                   "admitter_redis_errors_total has no label plan",
		`admitter_decision_duration_seconds_bucket{plan=~"$plan"}`:   "admitter_decision_duration_seconds_bucket has no label plan",
		`admitter_wait_seconds_sum{le="1"}`:                          "admitter_wait_seconds_sum has no label le",
		`sum(rate(admitter_decisions_total{outcome="admitted"}[5m])`: "parse error: unclosed left parenthesis",
		`rate(admitter_decisions_total[5 m])`:                        "parse error",
		`{job="admitter"}`:                                           "a selector without a metric name",
		`up{job="admitter2"}`:                                        `no Prometheus job is called "admitter2"`,
		`vector(1)`:                                                  "selects no metric",
	} {
		p := queryProblems(e, q, jobs, map[string]bool{})
		if !slices.ContainsFunc(p, func(p string) bool { return strings.Contains(p, want) }) {
			t.Errorf("%s: problems %q, want one containing %q", q, p, want)
		}
	}
}
