package tests

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// secretParts are the pieces of nastyPassword: none may appear in any output, whatever the
// characters between them.
var secretParts = []string{"Kx9w", "Lp2q", "Zr5t", "Mn6y", "Vb3u", "Ty8i", "Hj4o"}

// nastyPassword holds every character that breaks a URL or a naive mask: '@', '#', ':', '/',
// '%', '?', a space.
const nastyPassword = "Kx9w@Lp2q#Zr5t:Mn6y/Vb3u%Ty8i? Hj4o"

// noSecret fails the test if any piece of the secret appears in out.
func noSecret(t *testing.T, what, out string) {
	t.Helper()
	for _, p := range secretParts {
		if strings.Contains(out, p) {
			t.Errorf("%s shows %q, a piece of the secret:\n%s", what, p, out)
		}
	}
}

// writeSecret writes content to a file of its own and returns its path.
func writeSecret(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// checkConfig runs check-config and returns its printed variables, failing unless it exits 0.
func checkConfig(t *testing.T, over ...string) (map[string]string, string) {
	t.Helper()
	code, stdout, stderr := runBinary(t, configEnv(t, over...), "check-config")
	if code != 0 || stderr != "" {
		t.Fatalf("check-config: exit %d, stderr %q; want 0 and nothing\nstdout:\n%s", code, stderr, stdout)
	}
	values := map[string]string{}
	for _, line := range strings.Split(stdout, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && strings.HasPrefix(k, "ADMITTER_") {
			values[k] = v
		}
	}
	return values, stdout
}

// TestCredentialsCheckConfigMasksEverySecret: every secret, whatever characters it holds, is
// printed masked by check-config, given directly or as a _FILE; URLs keep their user, host and
// port and lose their password, found by the URL's structure (a raw '@' in it included).
func TestCredentialsCheckConfigMasksEverySecret(t *testing.T) {
	t.Parallel()
	encoded := url.UserPassword("svc", nastyPassword).String() // percent-encoded
	values, out := checkConfig(t,
		"ADMITTER_NATS_URL=nats://"+encoded+"@127.0.0.1:4222",
		"ADMITTER_REDIS_URL_FILE="+writeSecret(t, "redis-url", "rediss://"+encoded+"@127.0.0.1:6380/2\n"),
		"ADMITTER_REDIS_URL",
		"ADMITTER_HTTP_TOKEN="+nastyPassword,
	)
	noSecret(t, "check-config", out)
	if u, err := url.Parse(values["ADMITTER_NATS_URL"]); err != nil || u.User.Username() != "svc" || u.Host != "127.0.0.1:4222" {
		t.Errorf("ADMITTER_NATS_URL printed as %q, want user svc at 127.0.0.1:4222, password masked", values["ADMITTER_NATS_URL"])
	}
	if u, err := url.Parse(values["ADMITTER_REDIS_URL"]); err != nil || u.Scheme != "rediss" || u.User.Username() != "svc" || u.Host != "127.0.0.1:6380" || u.Path != "/2" {
		t.Errorf("ADMITTER_REDIS_URL (from its _FILE) printed as %q, want rediss://svc:…@127.0.0.1:6380/2", values["ADMITTER_REDIS_URL"])
	}
	if v := values["ADMITTER_HTTP_TOKEN"]; !strings.Contains(v, "masked") {
		t.Errorf("ADMITTER_HTTP_TOKEN printed as %q, want it masked", v)
	}

	// The separate variables, directly and from files.
	values, out = checkConfig(t,
		"ADMITTER_NATS_USER=svc", "ADMITTER_NATS_PASSWORD="+nastyPassword,
		"ADMITTER_REDIS_USERNAME=svc", "ADMITTER_REDIS_PASSWORD_FILE="+writeSecret(t, "redis-pw", nastyPassword+"\n"),
		"ADMITTER_HTTP_TOKEN_FILE="+writeSecret(t, "http-token", nastyPassword),
	)
	noSecret(t, "check-config", out)
	for _, k := range []string{"ADMITTER_NATS_PASSWORD", "ADMITTER_REDIS_PASSWORD", "ADMITTER_HTTP_TOKEN"} {
		if v := values[k]; !strings.Contains(v, "masked") {
			t.Errorf("%s printed as %q, want it masked", k, v)
		}
	}
	for k, v := range map[string]string{"ADMITTER_NATS_USER": "svc", "ADMITTER_REDIS_USERNAME": "svc"} {
		if values[k] != v {
			t.Errorf("%s printed as %q, want %q", k, values[k], v)
		}
	}
	if !strings.HasSuffix(values["ADMITTER_REDIS_PASSWORD_FILE"], "redis-pw") {
		t.Errorf("ADMITTER_REDIS_PASSWORD_FILE printed as %q, want its path", values["ADMITTER_REDIS_PASSWORD_FILE"])
	}

	// A token in a URL and a raw '@' in a URL's password: unambiguous (the user information ends
	// at the last '@'), accepted and masked.
	values, out = checkConfig(t,
		"ADMITTER_NATS_URL=nats://Kx9wLp2q@127.0.0.1:4222,nats://svc:Zr5t@Mn6y@127.0.0.2:4222",
		"ADMITTER_REDIS_URL=redis://:Vb3u@Ty8i@127.0.0.1:6379",
	)
	noSecret(t, "check-config", out)
	for k, hosts := range map[string][]string{"ADMITTER_NATS_URL": {"127.0.0.1:4222", "svc:", "127.0.0.2:4222"}, "ADMITTER_REDIS_URL": {"127.0.0.1:6379"}} {
		for _, h := range hosts {
			if !strings.Contains(values[k], h) {
				t.Errorf("%s printed as %q, want it to show %s", k, values[k], h)
			}
		}
	}
}

// TestCredentialsConfigErrors: a bad credential setting exits 2 before connecting, with one
// line naming the variable (and the file), and never the secret.
func TestCredentialsConfigErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notPEM := writeSecret(t, "ca.pem", "Kx9w this is not a certificate\n")
	keyOnly := writeSecret(t, "key-as-cert.pem", "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIKx9w\n-----END EC PRIVATE KEY-----\n")
	notSeed := writeSecret(t, "user.nk", "SAKx9wLp2qZr5tMn6yVb3uTy8iHj4o\n")
	notCreds := writeSecret(t, "user.creds", "Kx9w not a creds file\n")
	empty := writeSecret(t, "empty", "\n")
	missing := filepath.Join(dir, "nowhere", "secret")
	for _, tc := range []struct {
		name string
		over []string
		want []string
	}{
		{"password in URL with raw '#'", []string{"ADMITTER_REDIS_URL=redis://u:12#Kx9w@127.0.0.1:6379"},
			[]string{"ADMITTER_REDIS_URL", "'#'", "percent-encode", "ADMITTER_REDIS_PASSWORD", "127.0.0.1:6379"}},
		{"password in NATS URL with raw '#'", []string{"ADMITTER_NATS_URL=nats://u:Kx9w#Lp2q@127.0.0.1:4222"},
			[]string{"ADMITTER_NATS_URL", "'#'", "percent-encode", "ADMITTER_NATS_PASSWORD"}},
		{"password in URL with raw '/'", []string{"ADMITTER_REDIS_URL=redis://:Kx9w/Lp2q@127.0.0.1:6379"},
			[]string{"ADMITTER_REDIS_URL", "'/'", "percent-encode"}},
		{"password in URL with a space", []string{"ADMITTER_REDIS_URL=redis://:Kx9w Lp2q@127.0.0.1:6379"},
			[]string{"ADMITTER_REDIS_URL", "percent-encode"}},
		{"password in URL with a bad escape", []string{"ADMITTER_NATS_URL=nats://u:Kx9w%zzLp2q@127.0.0.1:4222"},
			[]string{"ADMITTER_NATS_URL", "%"}},
		{"both a variable and its file", []string{"ADMITTER_NATS_USER=u", "ADMITTER_NATS_PASSWORD=Kx9w", "ADMITTER_NATS_PASSWORD_FILE=" + empty},
			[]string{"ADMITTER_NATS_PASSWORD", "ADMITTER_NATS_PASSWORD_FILE", "both"}},
		{"secret file missing", []string{"ADMITTER_REDIS_PASSWORD_FILE=" + missing}, []string{"ADMITTER_REDIS_PASSWORD_FILE", missing}},
		{"secret file empty", []string{"ADMITTER_REDIS_PASSWORD_FILE=" + empty}, []string{"ADMITTER_REDIS_PASSWORD_FILE", empty, "empty"}},
		{"URL and the password variable", []string{"ADMITTER_REDIS_URL=redis://:Kx9w@127.0.0.1:6379", "ADMITTER_REDIS_PASSWORD=Lp2q"},
			[]string{"ADMITTER_REDIS_PASSWORD", "ADMITTER_REDIS_URL"}},
		{"NATS URL credentials and a token", []string{"ADMITTER_NATS_URL=nats://u:Kx9w@127.0.0.1:4222", "ADMITTER_NATS_TOKEN=Lp2q"},
			[]string{"ADMITTER_NATS_TOKEN", "ADMITTER_NATS_URL"}},
		{"creds file and user", []string{"ADMITTER_NATS_CREDS=" + notCreds, "ADMITTER_NATS_USER=u", "ADMITTER_NATS_PASSWORD=Kx9w"},
			[]string{"ADMITTER_NATS_CREDS", "ADMITTER_NATS_USER"}},
		{"password without user", []string{"ADMITTER_NATS_PASSWORD=Kx9w"}, []string{"ADMITTER_NATS_PASSWORD", "ADMITTER_NATS_USER"}},
		{"user without password", []string{"ADMITTER_NATS_USER=u"}, []string{"ADMITTER_NATS_USER", "ADMITTER_NATS_PASSWORD"}},
		{"CA not a certificate", []string{"ADMITTER_NATS_CA=" + notPEM}, []string{"ADMITTER_NATS_CA", notPEM, "certificate"}},
		{"CA missing", []string{"ADMITTER_NATS_CA=" + missing}, []string{"ADMITTER_NATS_CA", missing}},
		{"client cert without key", []string{"ADMITTER_NATS_CERT=" + notPEM}, []string{"ADMITTER_NATS_CERT", "ADMITTER_NATS_KEY"}},
		{"client cert is a key", []string{"ADMITTER_REDIS_URL=rediss://127.0.0.1:6380", "ADMITTER_REDIS_CERT=" + keyOnly, "ADMITTER_REDIS_KEY=" + keyOnly},
			[]string{"ADMITTER_REDIS_CERT", keyOnly, "certificate"}},
		{"nkey not a seed", []string{"ADMITTER_NATS_NKEY=" + notSeed}, []string{"ADMITTER_NATS_NKEY", notSeed, "seed"}},
		{"creds not a creds file", []string{"ADMITTER_NATS_CREDS=" + notCreds}, []string{"ADMITTER_NATS_CREDS", notCreds}},
		{"redis CA on a plain URL", []string{"ADMITTER_REDIS_CA=" + notPEM}, []string{"ADMITTER_REDIS_CA", "rediss://"}},
		{"sentinel password without sentinels", []string{"ADMITTER_REDIS_SENTINEL_PASSWORD=Kx9w"},
			[]string{"ADMITTER_REDIS_SENTINEL_PASSWORD", "master_set"}},
		{"NATS credentials for the embedded server", []string{"ADMITTER_NATS_URL", "ADMITTER_NATS_TOKEN=Kx9w"}, []string{"ADMITTER_NATS_TOKEN", "ADMITTER_NATS_URL"}},
		{"redis credentials without redis", []string{"ADMITTER_REDIS_URL", "ADMITTER_REDIS_PASSWORD=Kx9w"}, []string{"ADMITTER_REDIS_PASSWORD", "ADMITTER_REDIS_URL"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, args := range [][]string{nil, {"check-config"}} {
				code, stdout, stderr := runBinary(t, configEnv(t, tc.over...), args...)
				if code != 2 || stdout != "" {
					t.Errorf("%q: exit %d, stdout %q; want 2 and nothing", args, code, stdout)
				}
				lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
				if len(lines) != 1 || lines[0] == "" {
					t.Fatalf("%q: stderr %q, want exactly one line", args, stderr)
				}
				for _, w := range tc.want {
					if !strings.Contains(lines[0], w) {
						t.Errorf("%q: stderr %q does not contain %q", args, lines[0], w)
					}
				}
				noSecret(t, "the error", stdout+stderr)
			}
		})
	}
}
