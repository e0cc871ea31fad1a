package deploy

// compose.yaml, loaded by compose-spec's own loader (what `docker compose` runs).

import (
	"cmp"
	"fmt"
	"maps"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/admitter/admitter/plans"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/distribution/reference"
)

// services are the services the stack is made of (the other checks look them up by name).
var services = []string{"nats", "redis", "admitter", "jaeger", "prometheus", "grafana"}

// checkServices: every service is there, runs a pinned image, publishes its ports on loopback
// only (nothing in the stack has authentication) and each host port once; NATS has JetStream.
func checkServices(s *stack) []string {
	p, err := s.compose()
	if err != nil {
		return []string{err.Error()}
	}
	var problems []string
	add := func(format string, args ...any) {
		problems = append(problems, fmt.Sprintf("compose.yaml: "+format, args...))
	}
	for _, name := range services {
		if _, ok := p.Services[name]; !ok {
			add("no service %q", name)
		}
	}
	published := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(p.Services)) {
		svc := p.Services[name]
		if svc.NetworkMode == "host" {
			add("services.%s.network_mode: host publishes every port the service opens, on every interface", name)
		}
		if svc.Build == nil {
			ref, err := reference.ParseNormalizedNamed(svc.Image)
			switch tagged, isTagged := ref.(reference.Tagged); {
			case err != nil:
				add("services.%s.image %q: %v", name, svc.Image, err)
			case isDigested(ref):
			case !isTagged || tagged.Tag() == "latest":
				add("services.%s.image %q: pin a version tag, not latest (a new major version would change the stack under it)", name, svc.Image)
			}
		}
		for i, port := range svc.Ports {
			if ip := net.ParseIP(port.HostIP); ip == nil || !ip.IsLoopback() {
				add("services.%s.ports[%d] publishes container port %d on host address %q, reachable from other machines: publish on 127.0.0.1 only, e.g. \"127.0.0.1:%s:%d\"",
					name, i, port.Target, port.HostIP, cmp.Or(port.Published, fmt.Sprint(port.Target)), port.Target)
			}
			if port.Published == "" {
				continue // an ephemeral host port cannot clash
			}
			key := net.JoinHostPort(port.HostIP, port.Published) + "/" + port.Protocol
			if other, dup := published[key]; dup {
				add("services.%s.ports[%d]: host port %s is published by service %s too", name, i, key, other)
			}
			published[key] = name
		}
	}
	if nats, ok := p.Services["nats"]; ok && !slices.Contains(nats.Command, "-js") && !slices.Contains(nats.Command, "--jetstream") {
		add("services.nats.command %q does not enable JetStream (-js): admitter needs it", []string(nats.Command))
	}
	return problems
}

func isDigested(ref reference.Named) bool {
	_, ok := ref.(reference.Digested)
	return ok
}

// checkMounts: every bind mount is a file or directory of the repository (a missing source
// would be created empty by docker), and no directory is mounted where a file is expected.
func checkMounts(s *stack) []string {
	p, err := s.compose()
	if err != nil {
		return []string{err.Error()}
	}
	var problems []string
	binds := 0
	for _, name := range slices.Sorted(maps.Keys(p.Services)) {
		for i, v := range p.Services[name].Volumes {
			if v.Type != types.VolumeTypeBind {
				continue
			}
			binds++
			where := fmt.Sprintf("compose.yaml: services.%s.volumes[%d]", name, i)
			if r, err := filepath.Rel(repo, v.Source); err != nil || r == ".." || strings.HasPrefix(r, "../") {
				problems = append(problems, fmt.Sprintf("%s bind-mounts %s, outside the repository", where, v.Source))
				continue
			}
			fi, err := os.Stat(v.Source)
			if _, edited := s.edited[v.Source]; edited {
				err = nil
			}
			switch {
			case err != nil:
				problems = append(problems, fmt.Sprintf("%s bind-mounts %s, which does not exist (docker would create an empty directory there)", where, rel(v.Source)))
			case fi != nil && fi.IsDir() && slices.Contains([]string{".yml", ".yaml", ".json", ".conf"}, path.Ext(v.Target)):
				problems = append(problems, fmt.Sprintf("%s mounts directory %s on file path %s", where, rel(v.Source), v.Target))
			}
		}
	}
	if binds == 0 {
		problems = append(problems, "compose.yaml bind-mounts nothing: the configuration files under deploy/ are not used")
	}
	return problems
}

// checkAdmitter: the admitter service is built from this repository, sets only variables
// admitter reads, reaches the other services where they listen, serves on the port it
// publishes, and runs a plans file of the repository that admitter's own parser accepts.
func checkAdmitter(s *stack) []string {
	svc, err := s.service("admitter")
	if err != nil {
		return []string{err.Error()}
	}
	p, _ := s.compose()
	var problems []string
	add := func(format string, args ...any) {
		problems = append(problems, fmt.Sprintf("compose.yaml: services.admitter."+format, args...))
	}
	if svc.Build == nil {
		add("build is unset: admitter must be built from this repository (build: .)")
	} else if svc.Build.Context != repo {
		add("build.context %s is not the repository root (the module admitter is built from)", rel(svc.Build.Context))
	}

	vars, err := admitterVariables()
	if err != nil {
		return append(problems, err.Error())
	}
	env := map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(svc.Environment)) {
		v := svc.Environment[k]
		if v == nil {
			add("environment.%s has no value: it would be taken from the environment of whoever runs docker compose", k)
			continue
		}
		env[k] = *v
		if _, reads := vars[k]; strings.HasPrefix(k, "ADMITTER_") && !reads {
			add("environment.%s: admitter does not read this variable (see the env tags in cmd/admitter/config.go and README, Configuration)", k)
		}
	}

	// Where admitter listens: on all interfaces (Prometheus scrapes it from its own container,
	// services ask the decision API from theirs), on the ports it publishes.
	listening := map[string]string{} // container port → the variable listening on it
	if port, err := listenPort(env["ADMITTER_HTTP_ADDR"]); err != nil {
		add("environment.ADMITTER_HTTP_ADDR: %v (the default, 127.0.0.1:9090, is unreachable from other containers)", err)
	} else {
		listening[port] = "ADMITTER_HTTP_ADDR"
	}
	if v, ok := env["ADMITTER_API_ADDR"]; ok && v != "off" {
		if port, err := listenPort(v); err != nil {
			add("environment.ADMITTER_API_ADDR: %v (the default, 127.0.0.1:9080, is unreachable from other containers)", err)
		} else {
			listening[port] = "ADMITTER_API_ADDR"
		}
	}
	for i, pc := range svc.Ports {
		if _, ok := listening[fmt.Sprint(pc.Target)]; !ok && len(listening) > 0 {
			add("ports[%d] publishes container port %d, but admitter listens on %s", i, pc.Target, describePorts(listening))
		}
	}

	// The servers it talks to.
	nurl := env["ADMITTER_NATS_URL"]
	if nurl == "" {
		add("environment.ADMITTER_NATS_URL is unset: admitter would start an embedded server instead of using service nats")
	}
	for u := range strings.SplitSeq(nurl, ",") {
		if _, err := serviceURL(p, strings.TrimSpace(u), "nats", "4222"); nurl != "" && err != nil {
			add("environment.ADMITTER_NATS_URL: %v", err)
		}
	}
	if _, err := serviceURL(p, env["ADMITTER_REDIS_URL"], "redis", "6379"); err != nil {
		add("environment.ADMITTER_REDIS_URL: %v", err)
	}

	// Traces: OTLP to the Jaeger service on the port of the protocol used.
	endpointVar, endpoint := "OTEL_EXPORTER_OTLP_ENDPOINT", env["OTEL_EXPORTER_OTLP_ENDPOINT"]
	if v, ok := env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]; ok {
		endpointVar, endpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", v
	}
	protocol := cmp.Or(env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"], env["OTEL_EXPORTER_OTLP_PROTOCOL"], "http/protobuf")
	if port, ok := map[string]string{"http/protobuf": "4318", "http/json": "4318", "grpc": "4317"}[protocol]; !ok {
		add("environment.OTEL_EXPORTER_OTLP_PROTOCOL %q is not an OTLP protocol", protocol)
	} else if u, err := urlPort(endpoint); err != nil {
		add("environment.%s %q: %v", endpointVar, endpoint, err)
	} else if u != port {
		add("environment.%s %q: OTLP over %s is served on port %s", endpointVar, endpoint, protocol, port)
	} else if to, err := serviceURL(p, endpoint, "http", ""); err != nil {
		add("environment.%s: %v", endpointVar, err)
	} else if jaeger := p.Services[to]; strings.EqualFold(ptr(jaeger.Environment["COLLECTOR_OTLP_ENABLED"]), "false") {
		problems = append(problems, fmt.Sprintf("compose.yaml: services.%s.environment.COLLECTOR_OTLP_ENABLED=false: admitter's traces would be refused", to))
	}
	if v, ok := env["OTEL_TRACES_EXPORTER"]; ok && v != "otlp" {
		add("environment.OTEL_TRACES_EXPORTER %q: traces would not reach Jaeger", v)
	}
	if env["OTEL_SERVICE_NAME"] == "" {
		add("environment.OTEL_SERVICE_NAME is unset: Jaeger would list admitter's traces under unknown_service")
	}

	// The plans file: mounted from the repository, accepted by admitter's parser.
	plansFile := env["ADMITTER_PLANS_FILE"]
	if plansFile == "" {
		return append(problems, "compose.yaml: services.admitter.environment.ADMITTER_PLANS_FILE is unset: admitter would run its built-in example plans")
	}
	host, ok := hostPath(svc, plansFile)
	if !ok {
		add("environment.ADMITTER_PLANS_FILE %s is not bind-mounted from the repository", plansFile)
		return problems
	}
	data, err := s.read(host)
	if err != nil {
		add("environment.ADMITTER_PLANS_FILE %s: %v", plansFile, err)
	} else if _, err := plans.Parse(rel(host), data); err != nil {
		problems = append(problems, err.Error())
	}
	return problems
}

// describePorts names the ports admitter listens on and the variables that set them, in port
// order: "9080 (ADMITTER_API_ADDR), 9090 (ADMITTER_HTTP_ADDR)".
func describePorts(listening map[string]string) string {
	var out []string
	for _, port := range slices.Sorted(maps.Keys(listening)) {
		out = append(out, port+" ("+listening[port]+")")
	}
	return strings.Join(out, ", ")
}

func urlPort(raw string) (string, error) {
	_, port, err := net.SplitHostPort(strings.TrimPrefix(strings.TrimPrefix(raw, "http://"), "https://"))
	return port, err
}

func ptr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func TestComposeServices(t *testing.T) { report(t, checkServices) }
func TestComposeMounts(t *testing.T)   { report(t, checkMounts) }
func TestComposeAdmitter(t *testing.T) { report(t, checkAdmitter) }

func TestComposeChecksCatch(t *testing.T) {
	t.Run("loader", func(t *testing.T) {
		// What compose-spec's loader refuses, as `docker compose up` would.
		catches(t, "compose.yaml", checkServices, []breakage{
			{"      - nats-data:/data", "      - natz-data:/data", "undefined volume natz-data"},
			{"    ports:\n      - \"127.0.0.1:6379:6379\"", "    portz:\n      - \"127.0.0.1:6379:6379\"", "services.redis.portz false schema"},
			{"\"127.0.0.1:6379:6379\"", "\"127.0.0.1:6379:63a79\"", "invalid containerPort: 63a79"},
			{"      retries: 30\n    restart: unless-stopped\n\n  redis:", "      retries: [30\n    restart: unless-stopped\n\n  redis:", "did not find expected ',' or ']'"},
			{"image: redis:7.4-alpine", "image: redis:${REDIS_TAG:?set REDIS_TAG}", "set REDIS_TAG"},
		})
	})
	t.Run("services", func(t *testing.T) {
		catches(t, "compose.yaml", checkServices, []breakage{
			{"\"127.0.0.1:3000:3000\"", "\"3000:3000\"", `services.grafana.ports[0] publishes container port 3000 on host address ""`},
			{"\"127.0.0.1:3000:3000\"", "\"0.0.0.0:3000:3000\"", `services.grafana.ports[0] publishes container port 3000 on host address "0.0.0.0"`},
			{"\"127.0.0.1:3000:3000\"", "\"[::]:3000:3000\"", `host address "::"`},
			{"\"127.0.0.1:9091:9090\"", "\"127.0.0.1:9090:9090\"", "services.prometheus.ports[0]: host port 127.0.0.1:9090/tcp is published by service admitter too"},
			{"grafana/grafana:12.3.1", "grafana/grafana", `services.grafana.image "grafana/grafana": pin a version tag`},
			{"prom/prometheus:v3.7.3", "prom/prometheus:latest", `services.prometheus.image "prom/prometheus:latest": pin a version tag`},
			{`"-js", "-sd", "/data", "-m", "8222"]`, `"-sd", "/data", "-m", "8222"]`, `services.nats.command ["-c" "/etc/nats/admitter.conf" "-sd" "/data" "-m" "8222"] does not enable JetStream`},
			{"  grafana:\n    image:", "  dashboards:\n    image:", `compose.yaml: no service "grafana"`},
			{"    restart: unless-stopped\n\n  redis:", "    restart: unless-stopped\n    network_mode: host\n\n  redis:", "services.nats.network_mode: host"},
		})
	})
	t.Run("mounts", func(t *testing.T) {
		catches(t, "compose.yaml", checkMounts, []breakage{
			{"./deploy/prometheus/prometheus.yml:", "./deploy/prometheus.yml:", "services.prometheus.volumes[0] bind-mounts deploy/prometheus.yml, which does not exist"},
			{"./deploy/prometheus/prometheus.yml:", "./deploy/prometheus:", "services.prometheus.volumes[0] mounts directory deploy/prometheus on file path /etc/prometheus/prometheus.yml"},
			{"./deploy/plans.yaml:", "/etc/passwd:", "services.admitter.volumes[0] bind-mounts /etc/passwd, outside the repository"},
		})
	})
	t.Run("admitter", func(t *testing.T) {
		catches(t, "compose.yaml", checkAdmitter, []breakage{
			{"      ADMITTER_LOG_FORMAT: text\n", "      ADMITTER_LOG_FORMAT: text\n      ADMITTER_PARK_MAX: \"1000\"\n", "services.admitter.environment.ADMITTER_PARK_MAX: admitter does not read this variable"},
			{"ADMITTER_REDIS_URL:", "ADMITTER_REDIS_ULR:", "environment.ADMITTER_REDIS_ULR: admitter does not read this variable"},
			{"ADMITTER_HTTP_ADDR: 0.0.0.0:9090", "ADMITTER_HTTP_ADDR: 127.0.0.1:9090", `environment.ADMITTER_HTTP_ADDR: "127.0.0.1:9090" listens on 127.0.0.1 only`},
			{"ADMITTER_HTTP_ADDR: 0.0.0.0:9090", "ADMITTER_HTTP_ADDR: 0.0.0.0:9095", "services.admitter.ports[0] publishes container port 9090, but admitter listens on 9080 (ADMITTER_API_ADDR), 9095 (ADMITTER_HTTP_ADDR)"},
			{"ADMITTER_API_ADDR: 0.0.0.0:9080", "ADMITTER_API_ADDR: 0.0.0.0:9081", "services.admitter.ports[1] publishes container port 9080, but admitter listens on 9081 (ADMITTER_API_ADDR), 9090 (ADMITTER_HTTP_ADDR)"},
			{"ADMITTER_NATS_URL: nats://nats:4222", "ADMITTER_NATS_URL: nats://nats:4222,nats://nats-2:4222", `ADMITTER_NATS_URL: "nats://nats-2:4222": host "nats-2" is not a service`},
			{"ADMITTER_NATS_URL: nats://nats:4222", "ADMITTER_NATS_URL: nats://nats:8223", `ADMITTER_NATS_URL: "nats://nats:8223": service nats neither publishes nor exposes port 8223`},
			{"ADMITTER_REDIS_URL: redis://redis:6379", "ADMITTER_REDIS_URL: http://redis:6379", `ADMITTER_REDIS_URL: "http://redis:6379": scheme "http", want "redis"`},
			{"      ADMITTER_NATS_URL: nats://nats:4222\n", "", "ADMITTER_NATS_URL is unset"},
			{"OTEL_EXPORTER_OTLP_PROTOCOL: http/protobuf", "OTEL_EXPORTER_OTLP_PROTOCOL: grpc", `OTEL_EXPORTER_OTLP_ENDPOINT "http://jaeger:4318": OTLP over grpc is served on port 4317`},
			{"OTEL_EXPORTER_OTLP_ENDPOINT: http://jaeger:4318", "OTEL_EXPORTER_OTLP_ENDPOINT: http://collector:4318", `host "collector" is not a service`},
			{`COLLECTOR_OTLP_ENABLED: "true"`, `COLLECTOR_OTLP_ENABLED: "false"`, "services.jaeger.environment.COLLECTOR_OTLP_ENABLED=false"},
			{"      OTEL_SERVICE_NAME: admitter\n", "", "OTEL_SERVICE_NAME is unset"},
			{"ADMITTER_PLANS_FILE: /etc/admitter/plans.yaml", "ADMITTER_PLANS_FILE: /etc/plans.yaml", "ADMITTER_PLANS_FILE /etc/plans.yaml is not bind-mounted"},
			{"    build: .\n", "", "build is unset"},
			{"    build: .\n", "    build: ./cmd\n", "build.context cmd is not the repository root"},
		})
		// A plans file admitter's parser refuses.
		catches(t, "deploy/plans.yaml", checkAdmitter, []breakage{
			{"rate: 2/s}", "rate: 2/fortnight}", "deploy/plans.yaml:{line}: plans.free.limits[0].rate"},
			{"  hooli: free", "  hooli: platinum", `deploy/plans.yaml:{line}: tenants.hooli: no plan named "platinum"`},
		})
	})
}
