package main

import (
	"errors"
	"fmt"
	"net"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/admitter/admitter/admission"
	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/plans"
	"github.com/admitter/admitter/subjects"
	"github.com/caarlos0/env/v11"
)

// config is the service's whole configuration: environment variables only (see README).
type config struct {
	NATSURL          string        `env:"ADMITTER_NATS_URL"`   // unset: an embedded JetStream server
	RedisURL         string        `env:"ADMITTER_REDIS_URL"`  // unset: in-process buckets (one replica only)
	PlansFile        string        `env:"ADMITTER_PLANS_FILE"` // unset: the built-in example plans
	PlansKV          string        `env:"ADMITTER_PLANS_KV"`   // set: the plans live in this NATS key-value bucket
	DataDir          string        `env:"ADMITTER_DATA_DIR"`   // embedded server's store; default under the user cache dir
	EmbeddedNATSPort int           `env:"ADMITTER_EMBEDDED_NATS_PORT" envDefault:"4222"`
	SubjectIn        string        `env:"ADMITTER_SUBJECT_IN" envDefault:"jobs.submit.{tenant}.>"`
	SubjectOut       string        `env:"ADMITTER_SUBJECT_OUT" envDefault:"jobs.admitted.{tenant}.>"`
	SubjectDead      string        `env:"ADMITTER_SUBJECT_DEAD" envDefault:"jobs.dead.{tenant}.>"`
	SubjectWait      string        `env:"ADMITTER_SUBJECT_WAIT" envDefault:"jobs.waiting.{tenant}"` // an earlier version's lanes, drained
	StreamIn         string        `env:"ADMITTER_STREAM_IN" envDefault:"JOBS"`
	StreamOut        string        `env:"ADMITTER_STREAM_OUT" envDefault:"ADMITTED"`
	StreamDead       string        `env:"ADMITTER_STREAM_DEAD" envDefault:"DEAD"`
	StreamWait       string        `env:"ADMITTER_STREAM_WAIT" envDefault:"WAITING"`
	StreamReplicas   int           `env:"ADMITTER_STREAM_REPLICAS" envDefault:"1"`
	Partitions       int           `env:"ADMITTER_PARTITIONS" envDefault:"1"`
	Consumer         string        `env:"ADMITTER_CONSUMER" envDefault:"admitter"`
	Replica          string        `env:"ADMITTER_REPLICA"` // unset: a random id per process
	FailMode         string        `env:"ADMITTER_FAIL_MODE" envDefault:"local"`
	RedisTimeout     time.Duration `env:"ADMITTER_REDIS_TIMEOUT" envDefault:"250ms"`
	RedisPrefix      string        `env:"ADMITTER_REDIS_PREFIX" envDefault:"admitter:"`
	RequireNoEvict   bool          `env:"ADMITTER_REDIS_REQUIRE_NOEVICTION" envDefault:"false"`
	DuplicateWindow  time.Duration `env:"ADMITTER_DUPLICATE_WINDOW" envDefault:"2m"`
	Workers          int           `env:"ADMITTER_WORKERS" envDefault:"32"`
	Batch            int           `env:"ADMITTER_BATCH" envDefault:"100"`
	Quantum          int           `env:"ADMITTER_QUANTUM" envDefault:"100"`
	Discovery        time.Duration `env:"ADMITTER_DISCOVERY_INTERVAL" envDefault:"1s"`
	ShutdownTimeout  time.Duration `env:"ADMITTER_SHUTDOWN_TIMEOUT" envDefault:"10s"`
	StallAfter       time.Duration `env:"ADMITTER_STALL_AFTER" envDefault:"30s"`
	ConnectTimeout   time.Duration `env:"ADMITTER_CONNECT_TIMEOUT"` // unset: retry for ever
	LogFormat        string        `env:"ADMITTER_LOG_FORMAT" envDefault:"json"`
	LogLevel         string        `env:"ADMITTER_LOG_LEVEL" envDefault:"info"`
	HTTPAddr         string        `env:"ADMITTER_HTTP_ADDR" envDefault:"127.0.0.1:9090"`    // "off": no HTTP server
	HTTPToken        string        `env:"ADMITTER_HTTP_TOKEN"`                               // set: every endpoint but /metrics, /healthz, /readyz needs it as a bearer token
	APIAddr          string        `env:"ADMITTER_API_ADDR" envDefault:"127.0.0.1:9080"`     // "off": no HTTP decision API
	APISubject       string        `env:"ADMITTER_API_SUBJECT" envDefault:"admitter.decide"` // "off": no NATS decision service
	RLSAddr          string        `env:"ADMITTER_RLS_ADDR" envDefault:"off"`                // "off": no Envoy rate limit service (gRPC)
	RLSDomain        string        `env:"ADMITTER_RLS_DOMAIN" envDefault:"admitter"`         // the one domain the rate limit service answers
	RLSDescriptorKey string        `env:"ADMITTER_RLS_DESCRIPTOR_KEY" envDefault:"tenant"`   // the descriptor entry naming the tenant
	TenantMetrics    bool          `env:"ADMITTER_METRICS_TENANT_LABEL" envDefault:"false"`
	SubjectDone      string        `env:"ADMITTER_SUBJECT_DONE" envDefault:"jobs.done.{tenant}.>"`   // "off": no done messages
	SubjectRenew     string        `env:"ADMITTER_SUBJECT_RENEW" envDefault:"jobs.renew.{tenant}.>"` // "off": no renew messages
	LeaseAcks        bool          `env:"ADMITTER_LEASE_ACKS" envDefault:"true"`
	Console          string        `env:"ADMITTER_CONSOLE" envDefault:"on"` // "off": no web console under /console/
	ConsoleToken     string        `env:"ADMITTER_CONSOLE_TOKEN"`           // set: the console's actions (pause, move, replay) need it

	// Credentials and TLS (credentials.go). Every secret may be given as <NAME>_FILE instead.
	NATSURLFile       string `env:"ADMITTER_NATS_URL_FILE"`
	NATSCreds         string `env:"ADMITTER_NATS_CREDS"` // a .creds file: user JWT and nkey seed
	NATSNkey          string `env:"ADMITTER_NATS_NKEY"`  // a file holding an nkey user seed
	NATSUser          string `env:"ADMITTER_NATS_USER"`
	NATSPassword      string `env:"ADMITTER_NATS_PASSWORD"`
	NATSPasswordFile  string `env:"ADMITTER_NATS_PASSWORD_FILE"`
	NATSToken         string `env:"ADMITTER_NATS_TOKEN"`
	NATSTokenFile     string `env:"ADMITTER_NATS_TOKEN_FILE"`
	NATSCA            string `env:"ADMITTER_NATS_CA"`   // PEM certificates the server's must chain to
	NATSCert          string `env:"ADMITTER_NATS_CERT"` // PEM client certificate (with ADMITTER_NATS_KEY)
	NATSKey           string `env:"ADMITTER_NATS_KEY"`
	RedisURLFile      string `env:"ADMITTER_REDIS_URL_FILE"`
	RedisUsername     string `env:"ADMITTER_REDIS_USERNAME"`
	RedisPassword     string `env:"ADMITTER_REDIS_PASSWORD"`
	RedisPasswordFile string `env:"ADMITTER_REDIS_PASSWORD_FILE"`
	RedisCA           string `env:"ADMITTER_REDIS_CA"`
	RedisCert         string `env:"ADMITTER_REDIS_CERT"`
	RedisKey          string `env:"ADMITTER_REDIS_KEY"`
	SentinelUsername  string `env:"ADMITTER_REDIS_SENTINEL_USERNAME"` // the sentinels' own ACL user (URL with ?master_set=)
	SentinelPassword  string `env:"ADMITTER_REDIS_SENTINEL_PASSWORD"`
	SentinelPassFile  string `env:"ADMITTER_REDIS_SENTINEL_PASSWORD_FILE"`
	HTTPTokenFile     string `env:"ADMITTER_HTTP_TOKEN_FILE"`
	ConsoleTokenFile  string `env:"ADMITTER_CONSOLE_TOKEN_FILE"`

	// Derived by load.
	in, out, dead, wait subjects.Template
	done, renew         subjects.Template // zero when off
	plans               *bucket.Plans
	environ             map[string]string // for the OTEL_* variables
}

// errConfig marks configuration errors: the process exits with status 2.
var errConfig = errors.New("configuration error")

// loadConfig reads the environment and the plans file and validates everything; errors name the
// variable, or the file and line.
func loadConfig(environ map[string]string) (*config, error) {
	var c config
	if err := env.ParseWithOptions(&c, env.Options{Environment: environ}); err != nil {
		return nil, fmt.Errorf("%w: %s", errConfig, envError(err))
	}
	if err := c.readSecretFiles(environ); err != nil {
		return nil, fmt.Errorf("%w: %w", errConfig, err)
	}
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", errConfig, err)
	}
	c.environ = environ
	if c.DataDir == "" {
		c.DataDir = defaultDataDir()
	}
	var ps *bucket.Plans
	var err error
	if c.PlansFile == "" {
		ps, err = plans.Parse("built-in example plans", examplePlans)
	} else {
		ps, err = plans.Load(c.PlansFile)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: ADMITTER_PLANS_FILE: %w", errConfig, err)
	}
	c.plans = ps
	return &c, nil
}

// envError rewrites the env library's errors so each names the variable, not the Go field.
func envError(err error) string {
	var agg env.AggregateError
	if !errors.As(err, &agg) {
		return err.Error()
	}
	msgs := make([]string, 0, len(agg.Errors))
	for _, e := range agg.Errors {
		var pe env.ParseError
		var unset env.VarIsNotSetError
		var empty env.EmptyVarError
		switch {
		case errors.As(e, &pe):
			f, _ := reflect.TypeOf(config{}).FieldByName(pe.Name)
			name, _, _ := strings.Cut(f.Tag.Get("env"), ",")
			msgs = append(msgs, fmt.Sprintf("%s: %v (want %s)", name, pe.Err, kind(pe.Type)))
		case errors.As(e, &unset):
			msgs = append(msgs, fmt.Sprintf("%s is required but not set", unset.Key))
		case errors.As(e, &empty):
			msgs = append(msgs, fmt.Sprintf("%s is required but empty", empty.Key))
		default:
			msgs = append(msgs, e.Error())
		}
	}
	return strings.Join(msgs, "; ")
}

func kind(t reflect.Type) string {
	switch t {
	case reflect.TypeOf(time.Duration(0)):
		return "a duration such as 250ms, 30s or 1m"
	case reflect.TypeOf(0):
		return "an integer"
	}
	return t.String()
}

func (c *config) validate() error {
	var err error
	parse := func(name, v string) subjects.Template {
		t, perr := subjects.Parse(v)
		if perr != nil && err == nil {
			err = fmt.Errorf("%s: %w", name, perr)
		}
		return t
	}
	c.in = parse("ADMITTER_SUBJECT_IN", c.SubjectIn)
	c.out = parse("ADMITTER_SUBJECT_OUT", c.SubjectOut)
	c.dead = parse("ADMITTER_SUBJECT_DEAD", c.SubjectDead)
	c.wait = parse("ADMITTER_SUBJECT_WAIT", c.SubjectWait)
	if err != nil {
		return err
	}
	if _, _, err := admission.Mappings(c.in, c.out, c.dead, c.wait); err != nil {
		return fmt.Errorf("ADMITTER_SUBJECT_IN/OUT/DEAD/WAIT: %w", err)
	}
	if err := c.validateLeaseSubjects(); err != nil {
		return err
	}
	switch {
	case c.FailMode != "local" && c.FailMode != "open" && c.FailMode != "closed":
		return fmt.Errorf("ADMITTER_FAIL_MODE must be local, open or closed, got %q", c.FailMode)
	case c.RedisTimeout <= 0:
		return fmt.Errorf("ADMITTER_REDIS_TIMEOUT must be positive, got %v", c.RedisTimeout)
	case c.DuplicateWindow < 10*time.Second:
		return fmt.Errorf("ADMITTER_DUPLICATE_WINDOW must be at least 10s (a forward repeated after a replica died is dropped within it), got %v", c.DuplicateWindow)
	case c.Workers < 1 || c.Workers > 4096:
		return fmt.Errorf("ADMITTER_WORKERS must be from 1 to 4096, got %d", c.Workers)
	case c.Batch < 1 || c.Batch > bucket.MaxBatch:
		return fmt.Errorf("ADMITTER_BATCH must be from 1 to %d, got %d", bucket.MaxBatch, c.Batch)
	case c.Quantum < 1 || c.Quantum > 1_000_000:
		return fmt.Errorf("ADMITTER_QUANTUM must be from 1 to 1000000 (weight per tenant per turn), got %d", c.Quantum)
	case c.Discovery < 10*time.Millisecond || c.Discovery > time.Minute:
		return fmt.Errorf("ADMITTER_DISCOVERY_INTERVAL must be from 10ms to 1m, got %v", c.Discovery)
	case c.Partitions < 1 || c.Partitions > subjects.MaxPartitions:
		return fmt.Errorf("ADMITTER_PARTITIONS must be from 1 to %d (streams the input is spread over), got %d", subjects.MaxPartitions, c.Partitions)
	case c.StreamReplicas < 1 || c.StreamReplicas > 5:
		return fmt.Errorf("ADMITTER_STREAM_REPLICAS must be from 1 to 5 (servers of the NATS cluster holding each stream), got %d", c.StreamReplicas)
	case c.Replica != "" && !replicaName.MatchString(c.Replica):
		return fmt.Errorf("ADMITTER_REPLICA must be letters, digits, '-' or '_', got %q", c.Replica)
	case c.ConnectTimeout < 0:
		return fmt.Errorf("ADMITTER_CONNECT_TIMEOUT must not be negative (unset: retry for ever), got %v", c.ConnectTimeout)
	case c.ShutdownTimeout <= 0:
		return fmt.Errorf("ADMITTER_SHUTDOWN_TIMEOUT must be positive, got %v", c.ShutdownTimeout)
	case c.StallAfter <= 0:
		return fmt.Errorf("ADMITTER_STALL_AFTER must be positive, got %v", c.StallAfter)
	case c.LogFormat != "json" && c.LogFormat != "text":
		return fmt.Errorf("ADMITTER_LOG_FORMAT must be json or text, got %q", c.LogFormat)
	}
	if _, err := logLevel(c.LogLevel); err != nil {
		return err
	}
	if err := c.validateAPI(); err != nil {
		return err
	}
	if err := c.validateRLS(); err != nil {
		return err
	}
	if err := c.validateConsole(); err != nil {
		return err
	}
	for _, s := range []struct{ name, v string }{{"ADMITTER_STREAM_IN", c.StreamIn}, {"ADMITTER_STREAM_OUT", c.StreamOut}, {"ADMITTER_STREAM_DEAD", c.StreamDead}, {"ADMITTER_STREAM_WAIT", c.StreamWait}} {
		if s.v == "" || strings.ContainsAny(s.v, " \t\r\n.*>/\\") {
			return fmt.Errorf("%s must be a non-empty name without spaces, '.', '*', '>', '/' or '\\', got %q", s.name, s.v)
		}
	}
	if !replicaName.MatchString(c.Consumer) {
		return fmt.Errorf("ADMITTER_CONSUMER must be letters, digits, '-' or '_' (it also names the replicas' bucket), got %q", c.Consumer)
	}
	names := map[string]string{}
	for _, s := range []struct{ name, v string }{{"ADMITTER_STREAM_IN", c.StreamIn}, {"ADMITTER_STREAM_OUT", c.StreamOut}, {"ADMITTER_STREAM_DEAD", c.StreamDead}, {"ADMITTER_STREAM_WAIT", c.StreamWait}} {
		if other, dup := names[s.v]; dup {
			return fmt.Errorf("%s and %s must differ, both are %q", other, s.name, s.v)
		}
		names[s.v] = s.name
	}
	if c.PlansKV != "" && !replicaName.MatchString(c.PlansKV) {
		return fmt.Errorf("ADMITTER_PLANS_KV must be a bucket name of letters, digits, '-' or '_', got %q", c.PlansKV)
	}
	if c.EmbeddedNATSPort < 0 || c.EmbeddedNATSPort > 65535 {
		return fmt.Errorf("ADMITTER_EMBEDDED_NATS_PORT must be a port from 0 (any) to 65535, got %d", c.EmbeddedNATSPort)
	}
	return c.checkCredentials()
}

// validateAPI checks the synchronous faces: the API's address, and the NATS service's subject,
// which must be one concrete subject that no stream of the admitter captures (a request stored
// as a job would be forwarded, not answered).
// partitions is how the input is spread (see admission.Config.Partitions): the embedded server's
// mapping, and the one to configure on an external server.
func (c *config) partitions() subjects.Partitions {
	return admission.Partitions(c.in, c.StreamIn, c.Partitions)
}

func (c *config) validateAPI() error {
	if c.APIAddr != "off" {
		_, port, err := net.SplitHostPort(c.APIAddr)
		if err != nil {
			return fmt.Errorf("ADMITTER_API_ADDR must be host:port (e.g. 127.0.0.1:9080, 0.0.0.0:9080) or off, got %q", c.APIAddr)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			return fmt.Errorf("ADMITTER_API_ADDR: port %q is not a number from 0 to 65535", port)
		}
		if c.APIAddr == c.HTTPAddr && port != "0" {
			return fmt.Errorf("ADMITTER_API_ADDR and ADMITTER_HTTP_ADDR must differ, both are %q", c.APIAddr)
		}
	}
	if c.APISubject == "off" {
		return nil
	}
	for i, tok := range strings.Split(c.APISubject, ".") {
		switch {
		case tok == "":
			return fmt.Errorf("ADMITTER_API_SUBJECT %q has an empty token (#%d): want tokens separated by single dots", c.APISubject, i+1)
		case strings.ContainsAny(tok, " \t\r\n"):
			return fmt.Errorf("ADMITTER_API_SUBJECT %q has whitespace in token %q", c.APISubject, tok)
		case tok == "*" || tok == ">":
			return fmt.Errorf("ADMITTER_API_SUBJECT %q has the wildcard %q: want one concrete subject", c.APISubject, tok)
		}
	}
	for _, s := range []struct {
		name string
		t    subjects.Template
	}{{"ADMITTER_SUBJECT_IN", c.in}, {"ADMITTER_SUBJECT_OUT", c.out}, {"ADMITTER_SUBJECT_DEAD", c.dead}, {"ADMITTER_SUBJECT_WAIT", c.wait}} {
		if subjects.Overlap(c.APISubject, s.t.Filter()) {
			return fmt.Errorf("ADMITTER_API_SUBJECT %q is captured by %s (%q): a request would be stored as a job; pick a subject outside it", c.APISubject, s.name, s.t.String())
		}
	}
	return nil
}

// validateRLS checks Envoy's rate limit service: its address (or off), apart from the other
// servers', and the domain and descriptor key it answers, which Envoy's configuration must
// repeat exactly.
func (c *config) validateRLS() error {
	if c.RLSAddr != "off" {
		_, port, err := net.SplitHostPort(c.RLSAddr)
		if err != nil {
			return fmt.Errorf("ADMITTER_RLS_ADDR must be host:port (e.g. 127.0.0.1:8081, 0.0.0.0:8081) or off, got %q", c.RLSAddr)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			return fmt.Errorf("ADMITTER_RLS_ADDR: port %q is not a number from 0 to 65535", port)
		}
		for _, o := range []struct{ name, addr string }{{"ADMITTER_API_ADDR", c.APIAddr}, {"ADMITTER_HTTP_ADDR", c.HTTPAddr}} {
			if c.RLSAddr == o.addr && port != "0" {
				return fmt.Errorf("ADMITTER_RLS_ADDR and %s must differ, both are %q", o.name, c.RLSAddr)
			}
		}
	}
	for _, v := range []struct{ name, val, what string }{
		{"ADMITTER_RLS_DOMAIN", c.RLSDomain, "the domain of Envoy's rate_limit filter"},
		{"ADMITTER_RLS_DESCRIPTOR_KEY", c.RLSDescriptorKey, "the descriptor_key of the rate limit action naming the tenant"},
	} {
		if v.val == "" {
			return fmt.Errorf("%s must not be empty: it is %s", v.name, v.what)
		}
		if i := strings.IndexFunc(v.val, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }); i >= 0 {
			return fmt.Errorf("%s must not contain whitespace or control characters (it is %s), got %q", v.name, v.what, v.val)
		}
	}
	return nil
}

// validateLeaseSubjects parses ADMITTER_SUBJECT_DONE and ADMITTER_SUBJECT_RENEW ("off" turns
// one off): subjects with {tenant}, disjoint from the others and from each other.
func (c *config) validateLeaseSubjects() error {
	all := []struct {
		name string
		t    subjects.Template
	}{{"ADMITTER_SUBJECT_IN", c.in}, {"ADMITTER_SUBJECT_OUT", c.out}, {"ADMITTER_SUBJECT_DEAD", c.dead}, {"ADMITTER_SUBJECT_WAIT", c.wait}}
	for _, l := range []struct {
		name, v string
		t       *subjects.Template
	}{{"ADMITTER_SUBJECT_DONE", c.SubjectDone, &c.done}, {"ADMITTER_SUBJECT_RENEW", c.SubjectRenew, &c.renew}} {
		if l.v == "off" {
			continue
		}
		t, err := subjects.Parse(l.v)
		if err != nil {
			return fmt.Errorf("%s: %w (or off)", l.name, err)
		}
		for _, o := range all {
			if subjects.Overlap(t.Filter(), o.t.Filter()) {
				return fmt.Errorf("%s %q overlaps %s %q: a lease message would be taken for a job; use disjoint subjects", l.name, l.v, o.name, o.t.String())
			}
		}
		if subjects.Overlap(t.Filter(), c.APISubject) && c.APISubject != "off" {
			return fmt.Errorf("%s %q captures ADMITTER_API_SUBJECT %q: use disjoint subjects", l.name, l.v, c.APISubject)
		}
		*l.t = t
		all = append(all, struct {
			name string
			t    subjects.Template
		}{l.name, t})
	}
	return nil
}

// minConsoleToken is the shortest ADMITTER_CONSOLE_TOKEN accepted: it guards actions.
const minConsoleToken = 16

// validateConsole checks the web console's variables.
func (c *config) validateConsole() error {
	switch {
	case c.Console != "on" && c.Console != "off":
		return fmt.Errorf("ADMITTER_CONSOLE must be on or off, got %q", c.Console)
	case c.ConsoleToken != "" && len(c.ConsoleToken) < minConsoleToken:
		return fmt.Errorf("ADMITTER_CONSOLE_TOKEN must be at least %d characters (it lets its holder pause tenants and replay jobs), got %d; generate one with `openssl rand -hex 16`", minConsoleToken, len(c.ConsoleToken))
	case c.ConsoleToken != "" && strings.ContainsAny(c.ConsoleToken, " \t\r\n"):
		return errors.New("ADMITTER_CONSOLE_TOKEN must not contain whitespace")
	case c.ConsoleToken != "" && c.ConsoleToken == c.HTTPToken:
		return errors.New("ADMITTER_CONSOLE_TOKEN and ADMITTER_HTTP_TOKEN must differ: the first lets its holder act, the second only read")
	}
	return nil
}

// replicaName is what ADMITTER_REPLICA and ADMITTER_CONSUMER may be: a key of the replicas'
// bucket and a bucket name.
var replicaName = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// obsolete lists the variables set in environ that this version no longer reads, with what
// replaced them: a value left from an earlier version should not be silently ignored.
func obsolete(environ map[string]string) []string {
	var out []string
	for _, o := range []struct{ name, why string }{
		{"ADMITTER_PARK_MAX", "delayed jobs no longer wait in the admitter's memory but where they arrived, in the input"},
		{"ADMITTER_HORIZON", "queued jobs no longer book slots ahead: a tenant's queue asks for its head when its weight fits"},
		{"ADMITTER_ACK_WAIT", "jobs are read from the input without a consumer: nothing is acknowledged or redelivered"},
		{"ADMITTER_MAX_ACK_PENDING", "jobs are read from the input without a consumer: ADMITTER_WORKERS and ADMITTER_BATCH bound what is in hand"},
		{"ADMITTER_LANE_WORKERS", "lanes are no more: a tenant's jobs wait in the input, and ADMITTER_WORKERS step the tenants' queues"},
	} {
		if _, set := environ[o.name]; set {
			out = append(out, o.name+" is no longer used ("+o.why+"): remove it")
		}
	}
	return out
}

// describe prints the effective configuration, secrets masked.
func (c *config) describe() string {
	var b strings.Builder
	v := reflect.ValueOf(*c)
	t := v.Type()
	for i := range t.NumField() {
		tag := t.Field(i).Tag.Get("env")
		if tag == "" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		val := fmt.Sprint(v.Field(i).Interface())
		if m, secret := describeSecret(name, val); secret {
			fmt.Fprintf(&b, "%s=%s\n", name, m)
			continue
		}
		switch {
		case name == "ADMITTER_NATS_URL" && val == "":
			val = "(unset: embedded JetStream server on 127.0.0.1)"
		case name == "ADMITTER_REDIS_URL" && val == "":
			val = "(unset: in-process buckets, not shared: run one replica only)"
		case name == "ADMITTER_PLANS_FILE" && val == "":
			val = "(unset: the built-in example plans)"
		case name == "ADMITTER_PLANS_KV" && val == "":
			val = "(unset: the plans file, watched)"
		case name == "ADMITTER_CONNECT_TIMEOUT" && val == "0s":
			val = "(unset: retry connecting for ever)"
		case name == "ADMITTER_CONSOLE_TOKEN" && val == "":
			val = "(unset: the console is read-only)"
		case name == "ADMITTER_PARTITIONS" && c.Partitions > 1:
			val += " (every NATS server needs " + c.partitions().MappingLine() + ")"
		}
		fmt.Fprintf(&b, "%s=%s\n", name, val)
	}
	b.WriteString("\n")
	b.WriteString(c.plans.Describe())
	return b.String()
}

// configWithPlans builds a configuration from environ exactly as loadConfig does, except that
// the plans are the given ones (ADMITTER_PLANS_FILE is ignored). The demo uses it.
func configWithPlans(environ map[string]string, plans *bucket.Plans) (*config, error) {
	e := make(map[string]string, len(environ))
	for k, v := range environ {
		if k != "ADMITTER_PLANS_FILE" {
			e[k] = v
		}
	}
	c, err := loadConfig(e)
	if err != nil {
		return nil, err
	}
	c.plans = plans
	return c, nil
}
