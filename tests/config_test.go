package tests

import (
	"bytes"
	"context"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

const configPlans = `plans:
  free:
    limits:
      - {capacity: 5, rate: 2/s}
  gold:
    limits:
      - {name: burst, capacity: 20, rate: 10/s}
tenants:
  acme: gold
default_plan: free
`

// configEnv is a valid environment for an admitter that is not meant to connect anywhere (the
// servers are never dialled by check-config or by a configuration error; port 1 is there so that
// an admitter that wrongly gets past its configuration finds no server), with overrides: "K=V"
// sets K, a bare "K" removes it.
func configEnv(t *testing.T, over ...string) []string {
	t.Helper()
	plans := filepath.Join(t.TempDir(), "plans.yaml")
	if err := os.WriteFile(plans, []byte(configPlans), 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"PATH":                os.Getenv("PATH"),
		"ADMITTER_NATS_URL":   "nats://127.0.0.1:1",
		"ADMITTER_REDIS_URL":  "redis://127.0.0.1:1",
		"ADMITTER_PLANS_FILE": plans,
	}
	for _, o := range over {
		if k, v, ok := strings.Cut(o, "="); ok {
			env[k] = v
		} else {
			delete(env, o)
		}
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

// runBinary runs the admitter with exactly env and args, bounded, and returns its exit status
// and output.
func runBinary(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = env
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("admitter %q did not exit within 20s:\nstdout:\n%s\nstderr:\n%s", args, o.String(), e.String())
	}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("run admitter %q: %v", args, err)
	}
	return code, o.String(), e.String()
}

// writePlans writes a plans file called file.yaml and returns its path.
func writePlans(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "file.yaml")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConfigErrors: every configuration error exits with status 2 before connecting anywhere,
// with exactly one line on stderr that names what is wrong, and no secret in it.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	badRate := writePlans(t, "plans:\n  free:\n    limits:\n      - {capacity: 5, rate: 2/x}\n")
	badTenant := writePlans(t, "plans:\n  free:\n    limits:\n      - {capacity: 5, rate: 2/s}\ntenants:\n  bob: free\n  acme: gold\n")
	badYAML := writePlans(t, "plans:\n  free:\n    limits:\n      - {capacity: 5, rate: 2/s\n")
	badKind := writePlans(t, "plans:\n  free:\n    limits:\n      - {kind: window, limit: 5, window: 1h, rate: 2/s}\n")
	badZone := writePlans(t, "plans:\n  free:\n    limits:\n      - {capacity: 5, rate: 2/s}\n      - {kind: quota, limit: 5, period: month, timezone: Mars/Olympus}\n")
	missing := filepath.Join(t.TempDir(), "nowhere", "plans.yaml")
	for _, tc := range []struct {
		name string
		over []string
		args []string
		want []string // each must appear in the line
		// secret must not appear anywhere in the output
		secret string
	}{
		{name: "fail mode", over: []string{"ADMITTER_FAIL_MODE=sideways"}, want: []string{"ADMITTER_FAIL_MODE", "sideways"}},
		{name: "discovery not a duration", over: []string{"ADMITTER_DISCOVERY_INTERVAL=abc"}, want: []string{"ADMITTER_DISCOVERY_INTERVAL", "abc"}},
		{name: "discovery too short", over: []string{"ADMITTER_DISCOVERY_INTERVAL=1ms"}, want: []string{"ADMITTER_DISCOVERY_INTERVAL", "1ms"}},
		{name: "duplicate window too short", over: []string{"ADMITTER_DUPLICATE_WINDOW=1s"}, want: []string{"ADMITTER_DUPLICATE_WINDOW", "1s"}},
		{name: "workers zero", over: []string{"ADMITTER_WORKERS=0"}, want: []string{"ADMITTER_WORKERS", "0"}},
		{name: "workers not a number", over: []string{"ADMITTER_WORKERS=many"}, want: []string{"ADMITTER_WORKERS", "many"}},
		{name: "subject in without tenant", over: []string{"ADMITTER_SUBJECT_IN=jobs.submit"}, want: []string{"ADMITTER_SUBJECT_IN", "jobs.submit"}},
		{name: "subject out without tenant", over: []string{"ADMITTER_SUBJECT_OUT=jobs.>"}, want: []string{"ADMITTER_SUBJECT_OUT"}},
		// The overlap is between two variables; the message names the group and both templates.
		{name: "subject out overlaps in", over: []string{"ADMITTER_SUBJECT_OUT=jobs.submit.{tenant}.admitted.>"},
			want: []string{"ADMITTER_SUBJECT_", "OUT", "overlap", `"jobs.submit.{tenant}.admitted.>"`, `"jobs.submit.{tenant}.>"`}},
		{name: "subject dead overlaps out", over: []string{"ADMITTER_SUBJECT_DEAD=jobs.admitted.{tenant}.dead.>"},
			want: []string{"ADMITTER_SUBJECT_", "DEAD", "overlap", `"jobs.admitted.{tenant}.dead.>"`, `"jobs.admitted.{tenant}.>"`}},
		{name: "subject out drops the wildcard", over: []string{"ADMITTER_SUBJECT_OUT=jobs.admitted.{tenant}"},
			want: []string{"ADMITTER_SUBJECT_", "OUT", "output subject"}},
		{name: "same streams", over: []string{"ADMITTER_STREAM_DEAD=ADMITTED"}, want: []string{"ADMITTER_STREAM_DEAD"}},
		{name: "done subject overlaps in", over: []string{"ADMITTER_SUBJECT_DONE=jobs.submit.{tenant}.done.>"},
			want: []string{"ADMITTER_SUBJECT_DONE", `"jobs.submit.{tenant}.done.>"`, "overlaps ADMITTER_SUBJECT_IN", "disjoint"}},
		{name: "renew subject without tenant", over: []string{"ADMITTER_SUBJECT_RENEW=jobs.renew.>"}, want: []string{"ADMITTER_SUBJECT_RENEW", "(or off)"}},
		{name: "renew subject is the done subject", over: []string{"ADMITTER_SUBJECT_RENEW=jobs.done.{tenant}.>"}, want: []string{"ADMITTER_SUBJECT_RENEW", "overlaps ADMITTER_SUBJECT_DONE"}},
		{name: "lease acks not a bool", over: []string{"ADMITTER_LEASE_ACKS=sometimes"}, want: []string{"ADMITTER_LEASE_ACKS", "sometimes"}},
		{name: "lanes stream is the input", over: []string{"ADMITTER_STREAM_WAIT=JOBS"}, want: []string{"ADMITTER_STREAM_WAIT", "ADMITTER_STREAM_IN", "JOBS"}},
		{name: "wait subject with a wildcard", over: []string{"ADMITTER_SUBJECT_WAIT=jobs.waiting.{tenant}.>"}, want: []string{"ADMITTER_SUBJECT_", "WAIT", "jobs.waiting.{tenant}.>", "one subject per tenant"}},
		{name: "wait subject overlaps in", over: []string{"ADMITTER_SUBJECT_WAIT=jobs.submit.{tenant}.lane"}, want: []string{"ADMITTER_SUBJECT_", "overlap", `"jobs.submit.{tenant}.lane"`}},
		{name: "batch over the limiter's", over: []string{"ADMITTER_BATCH=513"}, want: []string{"ADMITTER_BATCH", "513", "512"}},
		{name: "quantum zero", over: []string{"ADMITTER_QUANTUM=0"}, want: []string{"ADMITTER_QUANTUM", "0"}},
		{name: "replica name", over: []string{"ADMITTER_REPLICA=a.b"}, want: []string{"ADMITTER_REPLICA", "a.b"}},
		{name: "consumer name", over: []string{"ADMITTER_CONSUMER=my consumer"}, want: []string{"ADMITTER_CONSUMER", "my consumer"}},
		{name: "log level", over: []string{"ADMITTER_LOG_LEVEL=loud"}, want: []string{"ADMITTER_LOG_LEVEL", "loud"}},
		{name: "plans file bad rate", over: []string{"ADMITTER_PLANS_FILE=" + badRate}, want: []string{"ADMITTER_PLANS_FILE", "file.yaml:4", "rate"}},
		{name: "plans file unknown plan", over: []string{"ADMITTER_PLANS_FILE=" + badTenant}, want: []string{"ADMITTER_PLANS_FILE", "file.yaml:7", "gold"}},
		{name: "plans file bad yaml", over: []string{"ADMITTER_PLANS_FILE=" + badYAML}, want: []string{"ADMITTER_PLANS_FILE", "file.yaml"}},
		{name: "plans file field of another kind", over: []string{"ADMITTER_PLANS_FILE=" + badKind}, want: []string{"ADMITTER_PLANS_FILE", "file.yaml:4", "plans.free.limits[0].rate", "field of a bucket limit"}},
		{name: "plans file bad time zone", over: []string{"ADMITTER_PLANS_FILE=" + badZone}, want: []string{"ADMITTER_PLANS_FILE", "file.yaml:5", "plans.free.limits[1].timezone", "Mars/Olympus"}},
		{name: "plans file missing", over: []string{"ADMITTER_PLANS_FILE=" + missing}, want: []string{"ADMITTER_PLANS_FILE", missing}},
		{name: "redis url bad port", over: []string{"ADMITTER_REDIS_URL=redis://:s3cret@127.0.0.1:notaport"}, want: []string{"ADMITTER_REDIS_URL"}, secret: "s3cret"},
		{name: "redis url bad scheme", over: []string{"ADMITTER_REDIS_URL=http://:s3cret@127.0.0.1:6379"}, want: []string{"ADMITTER_REDIS_URL"}, secret: "s3cret"},
		{name: "nats url unparsable", over: []string{"ADMITTER_NATS_URL=nats://user:s3cret@[::1"}, want: []string{"ADMITTER_NATS_URL"}, secret: "s3cret"},
		{name: "check-config too", over: []string{"ADMITTER_WORKERS=0"}, args: []string{"check-config"}, want: []string{"ADMITTER_WORKERS"}},
		{name: "api address without port", over: []string{"ADMITTER_API_ADDR=localhost"}, want: []string{"ADMITTER_API_ADDR", `"localhost"`, "host:port"}},
		{name: "api address bad port", over: []string{"ADMITTER_API_ADDR=127.0.0.1:http2"}, want: []string{"ADMITTER_API_ADDR", `"http2"`}},
		{name: "api address is the http address", over: []string{"ADMITTER_API_ADDR=127.0.0.1:9090"}, want: []string{"ADMITTER_API_ADDR", "ADMITTER_HTTP_ADDR", "differ"}},
		{name: "console neither on nor off", over: []string{"ADMITTER_CONSOLE=maybe"}, want: []string{"ADMITTER_CONSOLE", `"maybe"`, "on or off"}},
		{name: "console token too short", over: []string{"ADMITTER_CONSOLE_TOKEN=sekrit"}, args: []string{"check-config"}, want: []string{"ADMITTER_CONSOLE_TOKEN", "at least 16"}, secret: "sekrit"},
		{name: "console token is the http token", over: []string{"ADMITTER_CONSOLE_TOKEN=0123456789abcdef0123", "ADMITTER_HTTP_TOKEN=0123456789abcdef0123"},
			want: []string{"ADMITTER_CONSOLE_TOKEN", "ADMITTER_HTTP_TOKEN", "differ"}, secret: "0123456789abcdef0123"},
		{name: "api subject wildcard", over: []string{"ADMITTER_API_SUBJECT=admitter.*"}, want: []string{"ADMITTER_API_SUBJECT", `"*"`, "concrete"}},
		{name: "api subject empty token", over: []string{"ADMITTER_API_SUBJECT=admitter..decide"}, want: []string{"ADMITTER_API_SUBJECT", "empty token"}},
		{name: "api subject space", over: []string{"ADMITTER_API_SUBJECT=admitter.de cide"}, want: []string{"ADMITTER_API_SUBJECT", "whitespace"}},
		{name: "api subject captured by the input", over: []string{"ADMITTER_API_SUBJECT=jobs.submit.acme.decide"}, want: []string{"ADMITTER_API_SUBJECT", "ADMITTER_SUBJECT_IN", "stored as a job"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runBinary(t, configEnv(t, tc.over...), tc.args...)
			if code != 2 {
				t.Errorf("exit status %d, want 2", code)
			}
			if stdout != "" {
				t.Errorf("stdout %q, want nothing", stdout)
			}
			lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
			if len(lines) != 1 || lines[0] == "" || !strings.HasSuffix(stderr, "\n") {
				t.Fatalf("stderr %q, want exactly one line", stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(lines[0], w) {
					t.Errorf("stderr %q does not contain %q", lines[0], w)
				}
			}
			if tc.secret != "" && strings.Contains(stdout+stderr, tc.secret) {
				t.Errorf("the secret %q appears in the output: %q", tc.secret, stderr)
			}
		})
	}
}

func TestConfigUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		code int
		// out: in stdout (status 0) or in stderr's first line (status 2)
		out string
	}{
		{"unknown command", []string{"frobnicate"}, 2, `"frobnicate"`},
		{"extra argument", []string{"run", "now"}, 2, `"now"`},
		{"help", []string{"help"}, 0, "usage: admitter"},
		{"-h", []string{"-h"}, 0, "usage: admitter"},
		{"--help", []string{"--help"}, 0, "usage: admitter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// With no configuration at all: usage does not depend on it.
			code, stdout, stderr := runBinary(t, []string{"PATH=" + os.Getenv("PATH")}, tc.args...)
			if code != tc.code {
				t.Errorf("exit status %d, want %d", code, tc.code)
			}
			if tc.code == 0 {
				if !strings.Contains(stdout, tc.out) || !strings.Contains(stdout, "check-config") || stderr != "" {
					t.Errorf("stdout %q, stderr %q: want the usage on stdout only", stdout, stderr)
				}
				return
			}
			first, _, _ := strings.Cut(stderr, "\n")
			if !strings.Contains(first, tc.out) || stdout != "" {
				t.Errorf("stderr %q, stdout %q: want the error, naming %s, on stderr only", stderr, stdout, tc.out)
			}
		})
	}
}

// TestConfigCheck: check-config prints every variable's effective value, secrets masked, and the
// plans summary, and exits 0 without connecting.
func TestConfigCheck(t *testing.T) {
	t.Parallel()
	env := configEnv(t,
		"ADMITTER_NATS_URL=nats://user:pw@127.0.0.1:4222",
		"ADMITTER_REDIS_URL=redis://:s3cret@127.0.0.1:6379",
		"ADMITTER_WORKERS=7", "ADMITTER_QUANTUM=45", "ADMITTER_FAIL_MODE=closed", "ADMITTER_STREAM_OUT=OUT",
	)
	var plans string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "ADMITTER_PLANS_FILE="); ok {
			plans = v
		}
	}
	code, stdout, stderr := runBinary(t, env, "check-config")
	if code != 0 || stderr != "" {
		t.Fatalf("exit status %d, stderr %q; want 0 and nothing\nstdout:\n%s", code, stderr, stdout)
	}
	for _, secret := range []string{"pw", "s3cret"} {
		if strings.Contains(stdout, secret) {
			t.Errorf("the secret %q appears in the output:\n%s", secret, stdout)
		}
	}
	values := map[string][]string{}
	for _, line := range strings.Split(stdout, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && strings.HasPrefix(k, "ADMITTER_") {
			values[k] = append(values[k], v)
		}
	}
	want := map[string]string{
		"ADMITTER_PLANS_FILE":         plans,
		"ADMITTER_SUBJECT_IN":         "jobs.submit.{tenant}.>",
		"ADMITTER_SUBJECT_OUT":        "jobs.admitted.{tenant}.>",
		"ADMITTER_SUBJECT_DEAD":       "jobs.dead.{tenant}.>",
		"ADMITTER_SUBJECT_WAIT":       "jobs.waiting.{tenant}",
		"ADMITTER_STREAM_IN":          "JOBS",
		"ADMITTER_STREAM_OUT":         "OUT",
		"ADMITTER_STREAM_DEAD":        "DEAD",
		"ADMITTER_STREAM_WAIT":        "WAITING",
		"ADMITTER_CONSUMER":           "admitter",
		"ADMITTER_FAIL_MODE":          "closed",
		"ADMITTER_REDIS_TIMEOUT":      "250ms",
		"ADMITTER_REDIS_PREFIX":       "admitter:",
		"ADMITTER_QUANTUM":            "45",
		"ADMITTER_BATCH":              "100",
		"ADMITTER_DUPLICATE_WINDOW":   "2m0s",
		"ADMITTER_DISCOVERY_INTERVAL": "1s",
		"ADMITTER_WORKERS":            "7",
		"ADMITTER_SHUTDOWN_TIMEOUT":   "10s",
		"ADMITTER_LOG_FORMAT":         "json",
		"ADMITTER_LOG_LEVEL":          "info",
	}
	for k, v := range want {
		if got := values[k]; !slices.Equal(got, []string{v}) {
			t.Errorf("%s printed as %q, want [%s]", k, got, v)
		}
	}
	// The URLs: user, host and port kept, the password replaced.
	for k, w := range map[string]struct{ user, host string }{
		"ADMITTER_NATS_URL":  {"user", "127.0.0.1:4222"},
		"ADMITTER_REDIS_URL": {"", "127.0.0.1:6379"},
	} {
		got := values[k]
		if len(got) != 1 {
			t.Errorf("%s printed %d times, want once", k, len(got))
			continue
		}
		u, err := url.Parse(got[0])
		if err != nil || u.Host != w.host || u.User == nil || u.User.Username() != w.user {
			t.Errorf("%s printed as %q, want a URL of user %q at %s with the password masked", k, got[0], w.user, w.host)
		}
	}
	for k := range values {
		if _, ok := want[k]; !ok && k != "ADMITTER_NATS_URL" && k != "ADMITTER_REDIS_URL" {
			t.Logf("check-config also prints %s (not checked)", k)
		}
	}
	// The plans summary.
	for _, s := range []string{"free", "gold", "burst", "acme", "default plan: free"} {
		if !strings.Contains(stdout, s) {
			t.Errorf("the output lacks the plans summary (%q):\n%s", s, stdout)
		}
	}
	if strings.Contains(stdout, "no longer used") {
		t.Errorf("a note on an obsolete variable none of which is set:\n%s", stdout)
	}
}

// TestConfigObsoleteVariables: variables an earlier version read are not silently ignored:
// check-config notes each, and the service warns at start.
func TestConfigObsoleteVariables(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := runBinary(t, configEnv(t, "ADMITTER_PARK_MAX=1m", "ADMITTER_HORIZON=2m"), "check-config")
	if code != 0 || stderr != "" {
		t.Fatalf("exit status %d, stderr %q; want 0 and nothing", code, stderr)
	}
	for _, name := range []string{"ADMITTER_PARK_MAX", "ADMITTER_HORIZON"} {
		if !strings.Contains(stdout, "note: "+name+" is no longer used") {
			t.Errorf("check-config does not note that %s is no longer used:\n%s", name, stdout)
		}
	}
}

// TestConfigCheckMasksEveryURL: a comma-separated NATS list, a token-only user and a Redis user
// with a password are all masked.
func TestConfigCheckMasksEveryURL(t *testing.T) {
	t.Parallel()
	env := configEnv(t,
		"ADMITTER_NATS_URL=nats://tok3n@127.0.0.1:4222, nats://u2:pa55word@127.0.0.2:4222",
		"ADMITTER_REDIS_URL=redis://default:s3cret@127.0.0.1:6379/2",
	)
	code, stdout, stderr := runBinary(t, env, "check-config")
	if code != 0 {
		t.Fatalf("exit status %d, stderr %q", code, stderr)
	}
	for _, secret := range []string{"tok3n", "pa55word", "s3cret"} {
		if strings.Contains(stdout+stderr, secret) {
			t.Errorf("the secret %q appears in the output:\n%s", secret, stdout)
		}
	}
	for _, s := range []string{"127.0.0.1:4222", "u2", "127.0.0.2:4222", "default", "127.0.0.1:6379/2"} {
		if !strings.Contains(stdout, s) {
			t.Errorf("the output lacks %q:\n%s", s, stdout)
		}
	}
}

// TestConfigStreamNotCapturingSubject: an existing output stream that does not capture the
// output subjects is a set-up error: the admitter must stop rather than publish jobs nowhere.
func TestConfigStreamNotCapturingSubject(t *testing.T) {
	t.Parallel()
	w := newWorld(t, configPlans)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := w.js.CreateStream(ctx, jetstream.StreamConfig{Name: "ADMITTED", Subjects: []string{"other.>"}}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary)
	cmd.Env = w.env()
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("the admitter still runs 20s after start with an ADMITTED stream over other.>:\n%s", logs.String())
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Errorf("admitter exited with %v, want a non-zero status", err)
	}
	out := logs.String()
	if strings.Contains(out, "panic:") {
		t.Errorf("the admitter panicked instead of reporting the set-up error")
	}
	var missing []string
	for _, s := range []string{"ADMITTED", "other.>", "jobs.admitted.*.>", "do not capture", "jobs would be lost"} {
		if !strings.Contains(out, s) {
			missing = append(missing, s)
		}
	}
	if len(missing) > 0 {
		t.Errorf("the logs do not mention %q; want a line saying stream ADMITTED does not capture the subject and jobs would be lost:\n%s", missing, out)
	}
	if strings.Contains(out, "admitting") {
		t.Errorf("the admitter started consuming:\n%s", out)
	}
	// Nothing was changed on the user's stream.
	s, err := w.js.Stream(ctx, "ADMITTED")
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.Subjects; !slices.Equal(got, []string{"other.>"}) {
		t.Errorf("stream ADMITTED now has subjects %q, want [other.>] untouched", got)
	}
}
