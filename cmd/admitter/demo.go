package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/admitter/admitter/demo"
	"github.com/admitter/admitter/plans"
)

// demoTenants publish in the demo, on the built-in example plans (example-plans.yaml, the
// README's: what `admitter run` gives them); bob has the default plan.
var demoTenants = []demo.Tenant{
	{Name: "acme", Plan: "gold", Profile: demo.Steady},
	{Name: "bob", Plan: "free", Profile: demo.Burst},
	{Name: "initech", Plan: "pro", Profile: demo.IdleThenBurst},
}

const demoUsageLine = "admitter demo [-duration 30s] [-nats URL] [-redis URL] [-no-tty] [-json]"

const demoUsage = "usage: " + demoUsageLine + `

Runs admitter with three demo tenants on the built-in example plans (acme on gold, bob on free,
initech on pro: see the README), publishes their load and shows, every second, what each tenant
publishes, what is admitted and how long jobs wait.
At the end (or at Ctrl-C) it prints a summary: each tenant's admitted tokens against its plan's
allowance, and the jobs lost (counted, not assumed).

  -duration D   how long to publish (default 30s)
  -nats URL     NATS server (default $ADMITTER_NATS_URL; unset: an embedded server on a free
                port, storing in a temporary directory removed at exit)
  -redis URL    Redis for the buckets (default $ADMITTER_REDIS_URL; unset: in-process buckets)
                (the credential and TLS variables, ADMITTER_NATS_CREDS, ADMITTER_REDIS_CA and
                the others in the README, apply to the -nats and -redis servers)
  -no-tty       print plain lines even on a terminal
  -json         print the summary as JSON on stdout (the live view and text summary go to stderr)

Against an existing NATS server the demo uses the streams JOBS, ADMITTED and DEAD and the
consumer "admitter": do not point it at a server where another admitter consumes.
`

// Bounds of the demo's own waits.
const (
	demoStartTimeout = 30 * time.Second // connecting and setting up streams
	demoStopGrace    = 5 * time.Second  // beyond the service's shutdown timeout
)

// runDemo runs `admitter demo args...` and returns the exit status: 0 done (also when
// interrupted), 1 failure (or a job lost), 2 bad usage.
func runDemo(ctx context.Context, args []string, environ map[string]string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("admitter demo", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported below, on one line
	duration := fs.Duration("duration", 30*time.Second, "how long to publish")
	natsURL := fs.String("nats", environ["ADMITTER_NATS_URL"], "NATS server URL")
	redisURL := fs.String("redis", environ["ADMITTER_REDIS_URL"], "Redis URL")
	noTTY := fs.Bool("no-tty", false, "plain lines even on a terminal")
	jsonOut := fs.Bool("json", false, "summary as JSON on stdout")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, demoUsage)
			return 0
		}
		fmt.Fprintf(stderr, "admitter demo: %v (usage: %s)\n", err, demoUsageLine)
		return 2
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "admitter demo: unexpected argument %q (usage: %s)\n", fs.Arg(0), demoUsageLine)
		return 2
	case *duration <= 0:
		fmt.Fprintf(stderr, "admitter demo: -duration must be positive, got %v (usage: %s)\n", *duration, demoUsageLine)
		return 2
	}
	ps, err := plans.Parse("built-in example plans", examplePlans)
	if err != nil {
		fmt.Fprintf(stderr, "admitter demo: %v\n", err)
		return 1
	}
	env := map[string]string{
		"ADMITTER_NATS_URL":           *natsURL,
		"ADMITTER_REDIS_URL":          *redisURL,
		"ADMITTER_EMBEDDED_NATS_PORT": "0",
		"ADMITTER_REDIS_PREFIX":       "admitter-demo:", // never touch the buckets of real tenants
		"ADMITTER_LOG_LEVEL":          "warn",           // keep the table readable
		"ADMITTER_LOG_FORMAT":         "text",
		"ADMITTER_SHUTDOWN_TIMEOUT":   "5s",
	}
	for k, v := range credentialEnv(environ, *natsURL != "", *redisURL != "") {
		env[k] = v
	}
	if *natsURL == "" {
		dir, err := os.MkdirTemp("", "admitter-demo-")
		if err != nil {
			fmt.Fprintf(stderr, "admitter demo: %v\n", err)
			return 1
		}
		defer os.RemoveAll(dir) // after the stack is closed: deferred first, runs last
		env["ADMITTER_DATA_DIR"] = dir
	}
	cfg, err := configWithPlans(env, ps)
	if err != nil {
		fmt.Fprintf(stderr, "admitter demo: %v\n", err)
		return 2
	}
	log := newLogger(cfg, stderr)
	human := stdout
	if *jsonOut {
		human = stderr
	}

	tel, err := newTelemetry(ctx, cfg.environ)
	if err != nil {
		fmt.Fprintf(stderr, "admitter demo: %v\n", err)
		return 2
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tel.shutdown(sctx)
	}()
	sctx, cancel := context.WithTimeout(ctx, demoStartTimeout)
	st, err := start(sctx, cfg, log, tel, newBoot(log, demoStartTimeout))
	cancel()
	if err != nil {
		switch {
		case ctx.Err() != nil:
			fmt.Fprintln(stderr, "admitter demo: interrupted while starting")
			return 0
		case errors.Is(err, errConfig):
			fmt.Fprintf(stderr, "admitter demo: %v\n", err)
			return 2
		case sctx.Err() != nil:
			fmt.Fprintf(stderr, "admitter demo: could not start within %v: %v\n", demoStartTimeout, err)
			return 1
		}
		fmt.Fprintf(stderr, "admitter demo: %v\n", err)
		return 1
	}
	defer st.close()
	where := "NATS at " + redact(st.natsURL)
	if cfg.NATSURL == "" {
		where = "an embedded NATS server at " + st.natsURL + "\n(store " + cfg.DataDir + ", removed at exit)"
	}
	buckets := "in-process buckets"
	if cfg.RedisURL != "" {
		buckets = "Redis at " + redactURL(cfg.RedisURL)
	}
	fmt.Fprintf(human, "admitter runs on %s with %s.\n", where, buckets)

	// The service runs until the demo is over; if it stops by itself, the demo stops too.
	svcCtx, stopSvc := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSvc()
	demoCtx, stopDemo := context.WithCancel(ctx)
	defer stopDemo()
	var svcErr error
	svcStopped := make(chan struct{})
	var watch sync.WaitGroup
	go func() {
		svcErr = st.svc.Run(svcCtx)
		close(svcStopped)
	}()
	watch.Go(func() {
		select {
		case <-svcStopped:
			stopDemo()
		case <-demoCtx.Done():
		}
	})

	sum, runErr := demo.Run(demoCtx, demo.Config{
		Conn: st.nc, Plans: ps, Tenants: demoTenants, Duration: *duration,
		Out: human, TTY: !*noTTY && isTerminal(human, environ),
		SubjectIn: cfg.in, SubjectOut: cfg.out, SubjectDead: cfg.dead,
		StreamIn: cfg.StreamIn, StreamOut: cfg.StreamOut, StreamDead: cfg.StreamDead,
	})
	stopDemo()
	watch.Wait()
	var svcFailed error
	select {
	case <-svcStopped:
		svcFailed = fmt.Errorf("the admission service stopped during the demo: %v", svcErr)
	default:
		stopSvc()
		select {
		case <-svcStopped:
			if svcErr != nil {
				svcFailed = fmt.Errorf("admission service: %w", svcErr)
			}
		case <-time.After(cfg.ShutdownTimeout + demoStopGrace):
			svcFailed = fmt.Errorf("the admission service did not stop within %v", cfg.ShutdownTimeout+demoStopGrace)
		}
	}

	if *jsonOut && len(sum.Tenants) > 0 {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(sum)
	}
	code := 0
	for _, err := range []error{runErr, svcFailed} {
		if err != nil {
			fmt.Fprintf(stderr, "admitter demo: %v\n", err)
			code = 1
		}
	}
	if sum.Lost > 0 {
		fmt.Fprintf(stderr, "admitter demo: %d jobs lost\n", sum.Lost)
		code = 1
	}
	return code
}

// isTerminal reports whether w is a terminal that understands the escape codes the table uses.
func isTerminal(w io.Writer, environ map[string]string) bool {
	f, ok := w.(*os.File)
	if !ok || environ["TERM"] == "dumb" {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
