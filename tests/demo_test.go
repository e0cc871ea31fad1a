package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/admitter/admitter/demo"
	"github.com/admitter/admitter/plans"
)

// demoSummary is the part of `admitter demo -json`'s output the tests read.
type demoSummary struct {
	LoadSeconds float64 `json:"load_seconds"`
	Interrupted bool    `json:"interrupted"`
	Published   int64   `json:"published"`
	Admitted    int64   `json:"admitted"`
	Dead        int64   `json:"dead"`
	Waiting     int64   `json:"waiting"`
	Unchecked   int64   `json:"unchecked"`
	Lost        int64   `json:"lost"`
	Tenants     []struct {
		Tenant          string  `json:"tenant"`
		Plan            string  `json:"plan"`
		Profile         string  `json:"profile"`
		Published       int64   `json:"published"`
		PublishedTokens int64   `json:"published_tokens"`
		PublishErrors   int64   `json:"publish_errors"`
		Admitted        int64   `json:"admitted"`
		AdmittedTokens  int64   `json:"admitted_tokens"`
		Dead            int64   `json:"dead"`
		Waiting         int64   `json:"waiting"`
		Unchecked       int64   `json:"unchecked"`
		Lost            int64   `json:"lost"`
		MeanAttempts    float64 `json:"mean_attempts"`
		WaitP50Ms       int64   `json:"wait_p50_ms"`
		WaitP99Ms       int64   `json:"wait_p99_ms"`
		WindowSeconds   float64 `json:"window_seconds"`
		WindowTokens    int64   `json:"window_tokens"`
		Capacity        int64   `json:"capacity"`
		Rate            float64 `json:"rate"`
		Allowance       float64 `json:"allowance"`
		Busy            bool    `json:"busy"`
	} `json:"tenants"`
}

// demoEnv is an empty environment but for PATH and HOME: the demo needs nothing else.
func demoEnv(t *testing.T) []string {
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
}

// demoExitCode returns the exit status of a finished command.
func demoExitCode(t *testing.T, err error) int {
	t.Helper()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		t.Fatalf("run admitter demo: %v", err)
	}
	return 0
}

// demoParse checks the common parts of a finished demo's output and returns its summary.
func demoParse(t *testing.T, stdout, stderr string) demoSummary {
	t.Helper()
	if strings.Contains(stderr, "\x1b") || strings.Contains(stdout, "\x1b") {
		t.Errorf("output to a pipe holds ANSI escape codes:\n%q", stderr)
	}
	var sum demoSummary
	if err := json.Unmarshal([]byte(stdout), &sum); err != nil {
		t.Fatalf("stdout is not the JSON summary: %v\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	if len(sum.Tenants) != 3 {
		t.Fatalf("summary of %d tenants, want 3:\n%s", len(sum.Tenants), stdout)
	}
	// Lost is counted job by job: every published job was admitted, dead-lettered or is still
	// stored in the input stream.
	if sum.Lost != 0 || sum.Unchecked != 0 || sum.Published == 0 ||
		sum.Published != sum.Admitted+sum.Dead+sum.Waiting {
		t.Errorf("published %d, admitted %d, dead %d, waiting %d, unchecked %d, lost %d: want nothing lost",
			sum.Published, sum.Admitted, sum.Dead, sum.Waiting, sum.Unchecked, sum.Lost)
	}
	for _, ten := range sum.Tenants {
		if ten.Lost != 0 || ten.Dead != 0 || ten.PublishErrors != 0 {
			t.Errorf("%s: lost %d, dead %d, publish errors %d; want 0", ten.Tenant, ten.Lost, ten.Dead, ten.PublishErrors)
		}
	}
	if !regexp.MustCompile(`(?m)^lost: 0 \(published − admitted − dead − still in stream JOBS, each looked up\)$`).MatchString(stderr) {
		t.Errorf("the text summary does not say lost: 0:\n%s", stderr)
	}
	return sum
}

// TestDemo runs `admitter demo` as a user would, in an empty environment (an embedded NATS
// server, in-process buckets) with output to a pipe, and checks that plain progress lines were
// printed every second, that each tenant ran on its plan of the built-in example plans (the
// README's: what `make run` gives it), that the tenants over their plan were admitted their
// plan's allowance (capacity + rate × time, from the summary's own numbers: at most that, and
// less only by the job that did not fit yet), that the steady tenant was not held back, and
// that nothing was lost. Before, the demo ran plans of its own: acme on free at 5/s, where the
// built-in plans and the README give it gold.
func TestDemo(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "demo", "-duration", "6s", "-json")
	cmd.Env = demoEnv(t)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	code := demoExitCode(t, cmd.Run())
	if code != 0 {
		t.Fatalf("admitter demo exited %d:\nstderr:\n%s\nstdout:\n%s", code, stderr.String(), stdout.String())
	}
	t.Logf("stderr:\n%s", stderr.String())
	sum := demoParse(t, stdout.String(), stderr.String())

	// Progress: one plain line per tenant per second.
	progress := regexp.MustCompile(`(?m)^\d+s (acme|bob|initech): published \d+, admitted \d+ \(last 1s: \d+ jobs, \d+ tokens; plan [\d.]+ tokens/s\), waiting \d+, attempts per job (-|\d+\.\d\d), waited p50 \S+ p99 \S+$`)
	if n := len(progress.FindAllString(stderr.String(), -1)); n < 3*4 {
		t.Errorf("%d progress lines, want at least 3 tenants × 4 seconds", n)
	}
	// The embedded server's store was a temporary directory, removed at exit.
	if m := regexp.MustCompile(`\(store (\S+), removed at exit\)`).FindStringSubmatch(stderr.String()); m == nil {
		t.Error("the demo did not say where the embedded server stored its streams")
	} else if _, err := os.Stat(m[1]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the embedded server's store %s is still there after exit (%v)", m[1], err)
	}

	if sum.Interrupted || math.Abs(sum.LoadSeconds-6) > 0.01 {
		t.Errorf("load ran %.2fs (interrupted %v), want 6s", sum.LoadSeconds, sum.Interrupted)
	}
	example, err := os.ReadFile("../cmd/admitter/example-plans.yaml")
	if err != nil {
		t.Fatal(err)
	}
	builtIn, err := plans.Parse("example-plans.yaml", example)
	if err != nil {
		t.Fatal(err)
	}
	busy := map[string]bool{"bob": true, "initech": true} // 10× its plan; 3× its capacity, then its rate
	for _, ten := range sum.Tenants {
		plan, err := builtIn.Lookup(ten.Tenant)
		if err != nil {
			t.Fatalf("%s: %v", ten.Tenant, err)
		}
		if ten.Plan != plan.Name {
			t.Errorf("%s ran on plan %s, the built-in plans give it %s", ten.Tenant, ten.Plan, plan.Name)
		} else if l := plan.Limits[demo.Binding(plan, time.Duration(ten.WindowSeconds*float64(time.Second)))]; ten.Capacity != l.Capacity || ten.Rate != l.PerSecond() {
			t.Errorf("%s ran at %d, %g/s; its built-in plan %s binds at %d, %g/s", ten.Tenant, ten.Capacity, ten.Rate, plan.Name, l.Capacity, l.PerSecond())
		}
		if ten.Published == 0 || ten.Admitted == 0 {
			t.Errorf("%s: published %d, admitted %d", ten.Tenant, ten.Published, ten.Admitted)
			continue
		}
		allowance := float64(ten.Capacity) + ten.Rate*ten.WindowSeconds
		t.Logf("%s (%s, %s): admitted %d tokens in %.2fs, allowance %d + %.2f/s × %.2fs = %.1f (%.1f%%); published %d tokens, waiting %d jobs, busy %v",
			ten.Tenant, ten.Plan, ten.Profile, ten.WindowTokens, ten.WindowSeconds, ten.Capacity, ten.Rate, ten.WindowSeconds,
			allowance, 100*float64(ten.WindowTokens)/allowance, ten.PublishedTokens, ten.Waiting, ten.Busy)
		if math.Abs(allowance-ten.Allowance) > 1e-6 {
			t.Errorf("%s: summary allowance %.3f, but capacity + rate × window = %.3f", ten.Tenant, ten.Allowance, allowance)
		}
		if ten.Busy != busy[ten.Tenant] {
			t.Errorf("%s: busy %v, want %v", ten.Tenant, ten.Busy, busy[ten.Tenant])
		}
		if busy[ten.Tenant] {
			// At most the allowance (the bound), and short of it by less than the job that did
			// not fit yet (weight 3 at most) and what the rate gives in a second of latency.
			if got := float64(ten.WindowTokens); got > allowance+0.01 || got < allowance-3-ten.Rate {
				t.Errorf("%s: admitted %v tokens while publishing, want its allowance %.1f, less at most %.1f", ten.Tenant, got, allowance, 3+ten.Rate)
			}
			// Held back: jobs still waiting, and admitted ones waited (a delayed job waits in the
			// input for its slot: it is decided when it reaches the head, then when its slot comes).
			if ten.Waiting == 0 || ten.WaitP99Ms <= 0 {
				t.Errorf("%s: over its plan but waiting %d, p99 wait %dms", ten.Tenant, ten.Waiting, ten.WaitP99Ms)
			}
			continue
		}
		// Under its plan: everything it published went through, untouched by the others.
		if ten.Admitted != ten.Published || ten.Waiting != 0 || float64(ten.PublishedTokens) >= allowance {
			t.Errorf("%s: published %d (%d tokens, allowance %.1f), admitted %d, waiting %d: want everything admitted",
				ten.Tenant, ten.Published, ten.PublishedTokens, allowance, ten.Admitted, ten.Waiting)
		}
	}
}

// TestDemoInterrupted sends SIGINT (Ctrl-C) during the demo: it stops the load, still prints
// the summary with nothing lost, and exits 0.
func TestDemoInterrupted(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "demo", "-duration", "10m", "-json")
	cmd.Env = demoEnv(t)
	var stdout bytes.Buffer
	stderr := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	waitFor(t, 30*time.Second, "two seconds of progress", func() bool {
		select {
		case err := <-done:
			t.Fatalf("admitter demo exited early (%v):\n%s", err, stderr.String())
		default:
		}
		return strings.Contains(stderr.String(), "\n2s bob: ")
	})
	_ = cmd.Process.Signal(syscall.SIGINT)
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("admitter demo did not exit within 30s of SIGINT:\n%s", stderr.String())
	}
	if code := demoExitCode(t, err); code != 0 {
		t.Fatalf("admitter demo exited %d after SIGINT, want 0:\n%s", code, stderr.String())
	}
	sum := demoParse(t, stdout.String(), stderr.String())
	if !sum.Interrupted || sum.LoadSeconds < 2 || sum.LoadSeconds > 60 {
		t.Errorf("interrupted %v after %.1fs of load, want interrupted after a few seconds", sum.Interrupted, sum.LoadSeconds)
	}
	if !strings.Contains(stderr.String(), "(interrupted)") {
		t.Errorf("the text summary does not say it was interrupted:\n%s", stderr.String())
	}
}

// TestDemoBadUsage: bad flags and arguments exit 2 with one line saying what is wrong.
func TestDemoBadUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-bogus"}, "admitter demo: flag provided but not defined: -bogus"},
		{[]string{"-duration", "soon"}, `admitter demo: invalid value "soon" for flag -duration`},
		{[]string{"-duration", "0s"}, "admitter demo: -duration must be positive, got 0s"},
		{[]string{"-duration", "-5s"}, "admitter demo: -duration must be positive, got -5s"},
		{[]string{"-duration", "5s", "extra"}, `admitter demo: unexpected argument "extra"`},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, binary, append([]string{"demo"}, c.args...)...)
			cmd.Env = demoEnv(t)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			code := demoExitCode(t, cmd.Run())
			if code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
			if len(lines) != 1 || !strings.HasPrefix(lines[0], c.want) || !strings.Contains(lines[0], "usage: admitter demo [-duration 30s]") {
				t.Errorf("stderr %q, want one line starting %q with the usage", stderr.String(), c.want)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout %q, want nothing", stdout.String())
			}
		})
	}
}

// TestMakeDemoSaysItIsBuilding: on a fresh clone the first build takes minutes, so `make demo`
// says what it is doing before it compiles, then runs the demo it built. The go command is a
// stand-in that logs its arguments and "builds" a script: nothing is compiled here, and the
// Makefile runs in a directory of its own, so the repository's bin/ is left alone.
func TestMakeDemoSaysItIsBuilding(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	makefile, err := filepath.Abs("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	goStub := filepath.Join(dir, "go-stub")
	const stub = `#!/bin/sh
echo "go $*"
[ "$1" = build ] || exit 0
out= prev=
for a in "$@"; do [ "$prev" = -o ] && out=$a; prev=$a; done
[ -n "$out" ] || { echo "go build without -o" >&2; exit 2; }
mkdir -p "$(dirname "$out")"
printf '#!/bin/sh\necho "admitter $*"\n' > "$out" && chmod +x "$out"
`
	if err := os.WriteFile(goStub, []byte(stub), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("make", "--no-print-directory", "-C", dir, "-f", makefile, "demo", "GO="+goStub)
	cmd.Env = demoEnv(t)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make demo: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	said := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, "building") })
	built := slices.IndexFunc(lines, func(l string) bool {
		return strings.HasPrefix(l, "go ") && strings.Contains(l, "./cmd/admitter")
	})
	ran := slices.IndexFunc(lines, func(l string) bool { return l == "admitter demo" })
	switch {
	case built < 0 || !strings.HasPrefix(lines[built], "go build "):
		t.Errorf("make demo does not build admitter with go build before running it:\n%s", out)
	case said < 0 || said > built:
		t.Errorf("make demo compiles before saying so (want a line saying it is building first):\n%s", out)
	case ran < built:
		t.Errorf("make demo did not run the demo it built (`admitter demo`):\n%s", out)
	}
}
