package deploy

// The NATS server of compose.yaml: its configuration file, read by nats-server's own parser,
// and the account mapping that spreads admitter's input over ADMITTER_PARTITIONS partitions, as
// admitter computes it (admission.Partitions, subjects.Partitions.Mapping).

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/admitter/admitter/admission"
	"github.com/admitter/admitter/subjects"
	"github.com/nats-io/nats-server/v2/conf"
	"github.com/nats-io/nats-server/v2/server"
)

// partitioning is how admitter spreads its input with this environment (unset variables take
// admitter's defaults): ADMITTER_PARTITIONS partitions of ADMITTER_SUBJECT_IN, stored by
// ADMITTER_STREAM_IN's partition streams.
func partitioning(env map[string]string) (subjects.Partitions, error) {
	vars, err := admitterVariables()
	if err != nil {
		return subjects.Partitions{}, err
	}
	get := func(name string) string {
		if v, ok := env[name]; ok {
			return v
		}
		return vars[name]
	}
	raw := get("ADMITTER_PARTITIONS")
	n, err := strconv.Atoi(raw)
	if err != nil || n < 1 || n > subjects.MaxPartitions {
		return subjects.Partitions{}, fmt.Errorf("ADMITTER_PARTITIONS %q: want an integer from 1 to %d (admitter refuses to start)", raw, subjects.MaxPartitions)
	}
	var ts [4]subjects.Template
	for i, name := range []string{"ADMITTER_SUBJECT_IN", "ADMITTER_SUBJECT_OUT", "ADMITTER_SUBJECT_DEAD", "ADMITTER_SUBJECT_WAIT"} {
		if ts[i], err = subjects.Parse(get(name)); err != nil {
			return subjects.Partitions{}, fmt.Errorf("%s: %w", name, err)
		}
	}
	// The subjects together, as admitter checks them at start.
	if _, _, err := admission.Mappings(ts[0], ts[1], ts[2], ts[3]); err != nil {
		return subjects.Partitions{}, fmt.Errorf("ADMITTER_SUBJECT_IN/OUT/DEAD/WAIT: %w", err)
	}
	return admission.Partitions(ts[0], get("ADMITTER_STREAM_IN"), n), nil
}

// mappingLine is the NATS server configuration admitter logs at start for ps (cmd/admitter,
// serve.go): mappings { "<source>": "<destination>" }; "" for one partition.
func mappingLine(ps subjects.Partitions) string { return ps.MappingLine() }

// natsConfigPath is the configuration file named on a nats-server command line (-c, --config,
// -config, with or without =), "" if none.
func natsConfigPath(command []string) string {
	for i, arg := range command {
		name, value, hasValue := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		if !strings.HasPrefix(arg, "-") || name != "c" && name != "config" {
			continue
		}
		if hasValue {
			return value
		}
		if i+1 < len(command) {
			return command[i+1]
		}
	}
	return ""
}

// checkNATSMapping: the nats service stores admitter's input where the admitter service reads
// it. With ADMITTER_PARTITIONS above 1 its configuration file (bind-mounted from the
// repository, accepted by nats-server's parser) maps the input's subjects exactly as admitter
// says (the line it logs at start); with one partition it maps none of them.
func checkNATSMapping(s *stack) []string {
	natsSvc, err := s.service("nats")
	if err != nil {
		return []string{err.Error()}
	}
	admitterSvc, err := s.service("admitter")
	if err != nil {
		return []string{err.Error()}
	}
	env := map[string]string{}
	for k, v := range admitterSvc.Environment {
		if v != nil {
			env[k] = *v
		}
	}
	ps, err := partitioning(env)
	if err != nil {
		return []string{"compose.yaml: services.admitter.environment." + err.Error()}
	}
	src, dst := ps.Mapping()
	want := mappingLine(ps)
	setting := fmt.Sprintf("services.admitter's ADMITTER_PARTITIONS=%d", ps.N)

	containerPath := natsConfigPath(natsSvc.Command)
	if containerPath == "" {
		if src == "" {
			return nil // no mapping needed, none configured
		}
		return []string{fmt.Sprintf("compose.yaml: services.nats.command %q names no configuration file (-c): the server lacks the mapping %s needs, %s",
			[]string(natsSvc.Command), setting, want)}
	}
	host, ok := hostPath(natsSvc, containerPath)
	if !ok {
		return []string{fmt.Sprintf("compose.yaml: services.nats: its configuration %s is not bind-mounted from the repository", containerPath)}
	}
	data, err := s.read(host)
	if err != nil {
		return []string{fmt.Sprintf("compose.yaml: services.nats: its configuration %s: %v", containerPath, err)}
	}
	file := rel(host)
	// What the server refuses at start (a mapping's destination it cannot apply, among others).
	if err := (&server.Options{}).ProcessConfigString(string(data)); err != nil {
		return []string{fmt.Sprintf("%s: nats-server refuses it: %v", file, err)}
	}
	m, err := conf.Parse(string(data))
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", file, err)}
	}
	mappings := map[string]any{}
	for _, key := range []string{"mappings", "maps"} {
		if mm, ok := m[key].(map[string]any); ok {
			maps.Copy(mappings, mm)
		}
	}
	var problems []string
	add := func(format string, args ...any) {
		problems = append(problems, file+": "+fmt.Sprintf(format, args...))
	}
	for _, from := range slices.Sorted(maps.Keys(mappings)) {
		to := mappings[from]
		switch {
		case from == src:
			if to != dst {
				add("mappings %q: %q is not the mapping %s needs, %s", from, fmt.Sprint(to), setting, want)
			}
		case server.SubjectsCollide(from, ps.In.Filter()):
			fix := "remove it"
			if src != "" {
				fix = "replace it with " + want
			}
			add("mappings %q: %q moves jobs of admitter's input (%s) where %s does not read them: %s",
				from, fmt.Sprint(to), ps.In.Filter(), setting, fix)
		}
	}
	if _, ok := mappings[src]; src != "" && !ok {
		add("no mapping of %q, which %s needs (the line admitter logs at start): %s", src, setting, want)
	}
	return problems
}

func TestNATSMapping(t *testing.T) { report(t, checkNATSMapping) }

func TestNATSMappingIsAdmitters(t *testing.T) {
	// The mapping the checks want is the one admitter computes and logs (serve.go), down to the
	// server's syntax: a literal expectation for the default input, so that a change of
	// subjects.Partitions.Mapping is seen here too.
	ps, err := partitioning(map[string]string{"ADMITTER_PARTITIONS": "4"})
	if err != nil {
		t.Fatal(err)
	}
	const want = `mappings { "jobs.submit.*.>": "admitter.JOBS.4.{{partition(4,1)}}.jobs.submit.{{wildcard(1)}}.>" }`
	if got := mappingLine(ps); got != want {
		t.Errorf("mappingLine = %s, want %s", got, want)
	}
	// The example in the chart's values.yaml (its default, 4, and the default input).
	if values, err := os.ReadFile(filepath.Join(repo, chartDir, "values.yaml")); err != nil {
		t.Error(err)
	} else if !strings.Contains(string(values), "#   "+want+"\n") {
		t.Errorf("%s/values.yaml: partitions' comment does not give admitter's mapping for 4 partitions, %s", chartDir, want)
	}
	// Another input and stream, the tenant its second wildcard: the line admitter logged with
	// ADMITTER_PARTITIONS=8 ADMITTER_SUBJECT_IN='work.*.{tenant}.>' ADMITTER_STREAM_IN=WORK
	// (ci/existing-secret-values.yaml of the chart).
	ps, err = partitioning(map[string]string{"ADMITTER_PARTITIONS": "8", "ADMITTER_SUBJECT_IN": "work.*.{tenant}.>",
		"ADMITTER_SUBJECT_OUT": "admitted.*.{tenant}.>", "ADMITTER_SUBJECT_DEAD": "dead.*.{tenant}.>", "ADMITTER_STREAM_IN": "WORK"})
	if err != nil {
		t.Fatal(err)
	}
	const want8 = `mappings { "work.*.*.>": "admitter.WORK.8.{{partition(8,2)}}.work.{{wildcard(1)}}.{{wildcard(2)}}.>" }`
	if got := mappingLine(ps); got != want8 {
		t.Errorf("mappingLine = %s, want %s", got, want8)
	}
	if ps, _ := partitioning(map[string]string{}); mappingLine(ps) != "" {
		t.Errorf("admitter's default, one partition, needs no mapping: got %s", mappingLine(ps))
	}
	for _, c := range []struct {
		command []string
		want    string
	}{
		{[]string{"-js", "-c", "/a.conf"}, "/a.conf"},
		{[]string{"--config=/b.conf", "-js"}, "/b.conf"},
		{[]string{"-config", "/c.conf"}, "/c.conf"},
		{[]string{"-js", "-sd", "/data"}, ""},
	} {
		if got := natsConfigPath(c.command); got != c.want {
			t.Errorf("natsConfigPath(%q) = %q, want %q", c.command, got, c.want)
		}
	}
}

func TestNATSChecksCatch(t *testing.T) {
	const natsConf = "deploy/nats/nats.conf"
	catches(t, "compose.yaml", checkNATSMapping, []breakage{
		{`ADMITTER_PARTITIONS: "4"`, `ADMITTER_PARTITIONS: "8"`,
			`mappings "jobs.submit.*.>": "admitter.JOBS.4.{{partition(4,1)}}.jobs.submit.{{wildcard(1)}}.>" is not the mapping services.admitter's ADMITTER_PARTITIONS=8 needs, mappings { "jobs.submit.*.>": "admitter.JOBS.8.{{partition(8,1)}}.jobs.submit.{{wildcard(1)}}.>" }`},
		{`ADMITTER_PARTITIONS: "4"`, `ADMITTER_PARTITIONS: "1"`, `where services.admitter's ADMITTER_PARTITIONS=1 does not read them: remove it`},
		{`ADMITTER_PARTITIONS: "4"`, `ADMITTER_PARTITIONS: "0"`, `environment.ADMITTER_PARTITIONS "0": want an integer from 1 to 64`},
		{`      ADMITTER_PARTITIONS: "4"` + "\n", "", "where services.admitter's ADMITTER_PARTITIONS=1 does not read them"},
		{"      ADMITTER_LOG_FORMAT: text\n", "      ADMITTER_LOG_FORMAT: text\n      ADMITTER_STREAM_IN: INPUT\n", `needs, mappings { "jobs.submit.*.>": "admitter.INPUT.4.{{partition(4,1)}}`},
		{"      ADMITTER_LOG_FORMAT: text\n", "      ADMITTER_LOG_FORMAT: text\n      ADMITTER_SUBJECT_IN: work.*.{tenant}.>\n      ADMITTER_SUBJECT_OUT: admitted.*.{tenant}.>\n      ADMITTER_SUBJECT_DEAD: dead.*.{tenant}.>\n",
			`no mapping of "work.*.*.>", which services.admitter's ADMITTER_PARTITIONS=4 needs (the line admitter logs at start): mappings { "work.*.*.>": "admitter.JOBS.4.{{partition(4,2)}}.work.{{wildcard(1)}}.{{wildcard(2)}}.>" }`},
		{"      ADMITTER_LOG_FORMAT: text\n", "      ADMITTER_LOG_FORMAT: text\n      ADMITTER_SUBJECT_IN: work.*.{tenant}.>\n",
			`environment.ADMITTER_SUBJECT_IN/OUT/DEAD/WAIT: admission: bad configuration: output subject: subjects: incompatible templates`},
		{`"-c", "/etc/nats/admitter.conf", `, "", `names no configuration file (-c): the server lacks the mapping services.admitter's ADMITTER_PARTITIONS=4 needs`},
		{"      - ./deploy/nats/nats.conf:/etc/nats/admitter.conf:ro\n", "", "services.nats: its configuration /etc/nats/admitter.conf is not bind-mounted"},
	})
	catches(t, natsConf, checkNATSMapping, []breakage{
		{"{{partition(4,1)}}", "{{partition(8,1)}}", `"admitter.JOBS.4.{{partition(8,1)}}.jobs.submit.{{wildcard(1)}}.>" is not the mapping services.admitter's ADMITTER_PARTITIONS=4 needs`},
		{`"jobs.submit.*.>": `, `"jobs.*.*.>": `, `mappings "jobs.*.*.>": "admitter.JOBS.4.{{partition(4,1)}}.jobs.submit.{{wildcard(1)}}.>" moves jobs of admitter's input`},
		{"{{wildcard(1)}}", "{{wildcard(3)}}", natsConf + ": nats-server refuses it"},
		{"mappings {", "mappings {{", natsConf + ": nats-server refuses it"},
	})
}
