package deploy

// admitter's alerts: deploy/prometheus/alerts.yml, which the compose stack's Prometheus loads,
// and the chart's PrometheusRule. Both are read by Prometheus' own rule parser (rulefmt: the
// file's fields, each expression through the PromQL parser, each annotation's template), and
// each expression's selectors are checked as the dashboard's are (queryProblems): metrics
// admitter exports, with the labels and values they have.

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	promparser "github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// awaitedMetrics are metrics an alert selects before admitter exports them, each with why. A
// rule may select them (with any label); once wire/wire.go exports one, it must leave this list,
// so that the check is strict again.
var awaitedMetrics = map[string]string{}

// requiredAlerts are the alerts admitter ships, each with a metric it must select and what it
// watches.
var requiredAlerts = []struct{ alert, metric, watches string }{
	{"AdmitterLimiterUnreachable", "admitter_fail_mode_events_total", "the limiter (Redis) out of reach"},
	{"AdmitterOutputBlocked", "admitter_output_blocked", "the output blocked"},
	{"AdmitterJobWaitingTooLong", "admitter_oldest_waiting_seconds", "a tenant's oldest job older than its plan allows"},
	{"AdmitterBacklogGrowing", "admitter_jobs_waiting", "the jobs waiting growing"},
	{"AdmitterDeadLetters", "admitter_decisions_total", "dead letters rising"},
	{"AdmitterReplicasMissing", "admitter_replicas", "replicas missing"},
}

// severities are the values of an alert's severity label.
var severities = []string{"critical", "warning"}

// alert is one alerting rule as Prometheus parsed it, with the metrics its expression selects
// (none when it does not parse: broken).
type alert struct {
	rule    rulefmt.Rule
	metrics []string // sorted
	broken  bool
}

// withAwaited is e with the awaited metrics as series of any label.
func withAwaited(e *exports) *exports {
	c := *e
	c.series, c.labels = maps.Clone(e.series), maps.Clone(e.labels)
	for m := range awaitedMetrics {
		if _, ok := c.series[m]; !ok {
			c.series[m], c.labels[m] = m, nil
		}
	}
	return &c
}

// parseAlerts reads a rules file with Prometheus' rule parser (unknown fields refused, as
// Prometheus refuses them) and checks every rule's expression against what admitter exports;
// jobs are the Prometheus jobs a job matcher may name (nil: any). It returns the alerts by name,
// or nil when the file does not decode.
func parseAlerts(where string, data []byte, jobs []string) (map[string]alert, []string) {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, where+": "+fmt.Sprintf(format, args...)) }
	parser := promparser.NewParser(promparser.Options{})
	groups, errs := rulefmt.Parse(data, false, model.UTF8Validation, parser, slog.New(slog.DiscardHandler))
	seen := map[string]bool{} // the file is decoded twice (values, then nodes): an error may come twice
	for _, err := range errs {
		if !seen[err.Error()] {
			seen[err.Error()] = true
			add("%v", err)
		}
	}
	if groups == nil {
		return nil, problems
	}
	e, err := exported()
	if err != nil {
		return nil, append(problems, err.Error())
	}
	for m, why := range awaitedMetrics {
		if slices.Contains(e.metrics, m) {
			problems = append(problems, fmt.Sprintf("deploy/alerts_test.go: awaitedMetrics lists %s (%s), which wire/wire.go exports now: remove it", m, why))
		}
	}
	e = withAwaited(e)
	alerts := map[string]alert{}
	for _, g := range groups.Groups {
		for i, r := range g.Rules {
			name := r.Alert
			if name == "" {
				name = r.Record
			}
			rw := fmt.Sprintf("group %s, rule %d (%s)", g.Name, i+1, name)
			used := map[string]bool{}
			_, perr := parser.ParseExpr(r.Expr)
			if perr == nil { // else rulefmt said why
				for _, p := range queryProblems(e, r.Expr, jobs, used) {
					add("%s: %q: %s", rw, r.Expr, p)
				}
			}
			if r.Alert == "" {
				continue
			}
			if _, dup := alerts[r.Alert]; dup {
				add("%s: a second alert named %s", rw, r.Alert)
			}
			if !slices.Contains(severities, r.Labels["severity"]) {
				add("%s: labels.severity %q, want one of %s (routing reads it)", rw, r.Labels["severity"], strings.Join(severities, ", "))
			}
			for _, a := range []string{"summary", "description"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					add("%s: no annotations.%s: the alert would not say what is wrong", rw, a)
				}
			}
			alerts[r.Alert] = alert{rule: r, metrics: slices.Sorted(maps.Keys(used)), broken: perr != nil}
		}
	}
	return alerts, problems
}

// requireAlerts: every alert admitter ships is there and selects its metric.
func requireAlerts(where string, alerts map[string]alert) []string {
	var problems []string
	for _, r := range requiredAlerts {
		a, ok := alerts[r.alert]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("%s: no alert %s (%s)", where, r.alert, r.watches))
		case a.broken:
		case !slices.Contains(a.metrics, r.metric):
			problems = append(problems, fmt.Sprintf("%s: alert %s (%s) selects %s, not %s", where, r.alert, r.watches, strings.Join(a.metrics, ", "), r.metric))
		}
	}
	return problems
}

// loadAlerts reads the rule files the compose stack's Prometheus loads (its rule_files, as
// mounted from the repository) and checks them.
func loadAlerts(s *stack) (map[string]alert, []string) {
	pr, problems := loadPrometheus(s)
	if pr == nil {
		return nil, problems
	}
	if len(pr.rulePatterns) == 0 {
		return nil, []string{pr.file + ": no rule_files: admitter's alerts (deploy/prometheus/alerts.yml) are not loaded"}
	}
	problems = pr.ruleProblems // checkPrometheus reports the others
	all := map[string]alert{}
	for _, f := range pr.ruleFiles {
		data, err := s.read(f)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		alerts, p := parseAlerts(rel(f), data, pr.jobs)
		problems = append(problems, p...)
		if alerts == nil {
			return nil, problems // Prometheus would not start: nothing more to compare
		}
		for name, a := range alerts {
			if _, dup := all[name]; dup {
				problems = append(problems, fmt.Sprintf("%s: alert %s is in another rule file too", rel(f), name))
			}
			all[name] = a
		}
	}
	return all, problems
}

// checkAlerts: Prometheus would load the compose stack's alerts, and they are admitter's.
func checkAlerts(s *stack) []string {
	alerts, problems := loadAlerts(s)
	if alerts == nil {
		return problems
	}
	return append(problems, requireAlerts("the compose stack's alerts", alerts)...)
}

// ruleFiles are the repository files of Prometheus' rule_files (paths relative to its
// configuration file's directory, globs in the last element), as the prometheus service mounts
// them.
func ruleFiles(s *stack, conf string, patterns []string) ([]string, []string) {
	svc, err := s.service("prometheus")
	if err != nil {
		return nil, []string{err.Error()}
	}
	var files, problems []string
	for i, p := range patterns {
		if !path.IsAbs(p) {
			p = path.Join(path.Dir(conf), p)
		}
		host, ok := hostPath(svc, p)
		if !ok {
			problems = append(problems, fmt.Sprintf("compose.yaml: services.prometheus: rule_files[%d] %s is not mounted from the repository", i, p))
			continue
		}
		found, err := filepath.Glob(host)
		if err == nil && len(found) == 0 {
			err = fmt.Errorf("no such file")
		}
		if err != nil {
			problems = append(problems, fmt.Sprintf("rule_files[%d] %s (%s): %v", i, p, rel(host), err))
		}
		files = append(files, found...)
	}
	return files, problems
}

// ---------------------------------------------------------------------------------------------
// The chart's PrometheusRule

// prometheusRule is the Prometheus Operator's PrometheusRule (monitoring.coreos.com/v1): its
// object decoded strictly with the chart's other objects, its spec.groups (the operator writes
// them out as a rules file) read by parseAlerts.
type prometheusRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		Groups []map[string]any `json:"groups"`
	} `json:"spec"`
}

// DeepCopyObject is runtime.Object's: a copy through JSON.
func (p *prometheusRule) DeepCopyObject() runtime.Object {
	data, _ := json.Marshal(p)
	var c prometheusRule
	_ = json.Unmarshal(data, &c)
	return &c
}

// addMonitoring registers PrometheusRule with the scheme the chart's objects are decoded by.
func addMonitoring(s *runtime.Scheme) error {
	s.AddKnownTypeWithName(schema.GroupVersionKind{Group: "monitoring.coreos.com", Version: "v1", Kind: "PrometheusRule"}, &prometheusRule{})
	return nil
}

// checkPrometheusRule: the chart's PrometheusRule parses as a rules file, selects admitter's
// metrics, and holds the alerts of deploy/prometheus/alerts.yml, each with the same severity,
// duration, annotations and metrics.
func checkPrometheusRule(s *stack, r *release, o object) []string {
	pr := o.obj.(*prometheusRule)
	where := r.at(o)
	data, err := yaml.Marshal(map[string]any{"groups": pr.Spec.Groups})
	if err != nil {
		return []string{fmt.Sprintf("%s: spec.groups: %v", where, err)}
	}
	alerts, problems := parseAlerts(where+": spec", data, nil)
	if alerts == nil {
		return problems
	}
	problems = append(problems, requireAlerts(where, alerts)...)
	shipped, _ := loadAlerts(s) // checkAlerts reports its problems
	if shipped == nil {
		return problems
	}
	for _, name := range slices.Sorted(maps.Keys(shipped)) {
		want, got := shipped[name], alerts[name]
		switch {
		case got.rule.Alert == "":
			problems = append(problems, fmt.Sprintf("%s: no alert %s, which deploy/prometheus/alerts.yml has", where, name))
		case got.broken || want.broken:
		case got.rule.Labels["severity"] != want.rule.Labels["severity"] || got.rule.For != want.rule.For:
			problems = append(problems, fmt.Sprintf("%s: alert %s: severity %s for %v, deploy/prometheus/alerts.yml's: severity %s for %v",
				where, name, got.rule.Labels["severity"], got.rule.For, want.rule.Labels["severity"], want.rule.For))
		case !maps.Equal(got.rule.Annotations, want.rule.Annotations):
			problems = append(problems, fmt.Sprintf("%s: alert %s: annotations %q differ from deploy/prometheus/alerts.yml's %q", where, name, got.rule.Annotations, want.rule.Annotations))
		case !slices.Equal(got.metrics, want.metrics):
			problems = append(problems, fmt.Sprintf("%s: alert %s selects %s, deploy/prometheus/alerts.yml's %s", where, name, got.metrics, want.metrics))
		}
	}
	for name := range alerts {
		if _, ok := shipped[name]; !ok {
			problems = append(problems, fmt.Sprintf("%s: alert %s is not in deploy/prometheus/alerts.yml (the same alerts ship with both)", where, name))
		}
	}
	return problems
}

func TestAlerts(t *testing.T) { report(t, checkAlerts) }

// TestAlertChecksCatch: what Prometheus would refuse to load, and what would leave an alert
// silent or unlike the chart's, is reported.
func TestAlertChecksCatch(t *testing.T) {
	const (
		file  = "deploy/prometheus/alerts.yml"
		rule  = chartDir + "/templates/prometheusrule.yaml"
		promy = "deploy/prometheus/prometheus.yml"
	)
	catches(t, file, checkAlerts, []breakage{
		{"admitter_output_blocked) > 0", "admitter_output_blocked) > 0)", file + `: {line}:15: group "admitter", rule 5, "AdmitterOutputBlocked": could not parse expression: 1:50: parse error: unexpected right parenthesis ')'`},
		{"admitter_output_blocked) > 0", "admitter_output_block) > 0", `rule 5 (AdmitterOutputBlocked): "max by (namespace) (admitter_output_block) > 0": admitter_output_block is not a metric admitter exports`},
		{`outcome="dead"`, `outcome="deadletter"`, `outcome="deadletter": outcome is never "deadletter"`},
		{"rate(admitter_redis_errors_total[5m])", `rate(admitter_redis_errors_total{plan="gold"}[5m])`, "admitter_redis_errors_total has no label plan"},
		{"        for: 2m\n", "        for: 2 minutes\n", `unknown unit " minutes" in duration "2 minutes"`},
		{"      - alert: AdmitterLimiterUnreachable\n", "      - alert: AdmitterLimiterUnreachable\n        record: admitter_x\n", "only one of 'record' and 'alert' must be set"},
		{"        annotations:\n          summary: \"admitter's output", "        annotation:\n          summary: \"admitter's output", "line {line}: field annotation not found in type rulefmt.Rule"},
		{"{{ $labels.mode }}", "{{ $labels.mode }", `annotation "description"`},
		{"          severity: warning\n        annotations:\n          summary: \"admitter dead-lettered", "          severity: page\n        annotations:\n          summary: \"admitter dead-lettered", `labels.severity "page", want one of critical, warning`},
		{"      - alert: AdmitterReplicasMissing", "      - alert: AdmitterReplicasGone", "no alert AdmitterReplicasMissing (replicas missing)"},
		{"(admitter_oldest_waiting_seconds)", "(admitter_jobs_in_flight)", "alert AdmitterJobWaitingTooLong (a tenant's oldest job older than its plan allows) selects admitter_jobs_in_flight, not admitter_oldest_waiting_seconds"},
		{"      - alert: AdmitterLimiterErrors", "      - alert: AdmitterLimiterUnreachable", "a second alert named AdmitterLimiterUnreachable"},
	})
	catches(t, promy, checkAlerts, []breakage{
		{"rule_files:\n  - /etc/prometheus/alerts.yml\n", "", promy + ": no rule_files: admitter's alerts (deploy/prometheus/alerts.yml) are not loaded"},
		{"  - /etc/prometheus/alerts.yml", "  - /etc/prometheus/rules/*.yml", "rule_files[0] /etc/prometheus/rules/*.yml is not mounted from the repository"},
	})
	catches(t, "compose.yaml", checkAlerts, []breakage{
		{"      - ./deploy/prometheus/alerts.yml:/etc/prometheus/alerts.yml:ro\n", "", "rule_files[0] /etc/prometheus/alerts.yml is not mounted from the repository"},
		{"./deploy/prometheus/alerts.yml:", "./deploy/prometheus/alert.yml:", "rule_files[0] /etc/prometheus/alerts.yml (deploy/prometheus/alert.yml): no such file"},
	})
	catches(t, rule, checkChart, []breakage{
		{"admitter_output_blocked{ {{- $sel -}} }) > 0", "admitter_output_blocked{ {{- $sel -}} }) > 0)", "PrometheusRule rate-admitter: spec: "},
		{"(admitter_replicas{ {{- $sel -}} }) <", "(admitter_replica{ {{- $sel -}} }) <", "admitter_replica is not a metric admitter exports"},
		{"        - alert: AdmitterRedisForgot\n", "        - alert: AdmitterRedisForgotten\n", "no alert AdmitterRedisForgot, which deploy/prometheus/alerts.yml has"},
		{"          for: 30m\n", "          for: 15m\n", "alert AdmitterBacklogGrowing: severity warning for 15m, deploy/prometheus/alerts.yml's: severity warning for 30m"},
		{`"admitter's output is blocked: no job is forwarded"`, `"admitter's output is blocked"`, "alert AdmitterOutputBlocked: annotations"},
		{"{{- if .enabled }}", "{{- if true }}", "PrometheusRule admitter: made with the default values: prometheusRule.enabled must default to false"},
		{"admitter_fail_mode_events_total{ {{- $sel -}} }", "admitter_fail_mode_events_total{ {{- $sel -}}, mode=\"half\" }", `mode is never "half"`},
	})
	catches(t, chartDir+"/ci/existing-secret-values.yaml", checkChart, []breakage{
		{"prometheusRule:\n  enabled: true\n", "prometheusRule:\n  enabled: false\n", "no values file (ci/*-values.yaml) sets prometheusRule.enabled: the chart's alerts go unchecked"},
		{"    team: platform", "    severity: page", "prometheusRule.alertLabels.severity: the chart sets each alert's severity itself"},
		{"  deadLetters: 10", "  deadLetters: -1", "at '/prometheusRule/deadLetters'"},
	})
}
