// Command admitter turns a per-tenant rate limiter into backpressure for jobs on NATS
// JetStream. It is configured by environment variables only; see the README.
//
//	admitter                 run the service (also: admitter run)
//	admitter check-config    validate the environment and plans file, print the effective config
//	admitter demo            run admitter with three demo tenants and watch it pace them
//	admitter inspect TENANT  show a tenant's buckets now: tokens, queue, pool, why jobs wait
//	admitter plans ...       pause, resume and move tenants; push the plans of ADMITTER_PLANS_KV
//	admitter dead ...        list dead letters, replay them to the input exactly once
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"time"
)

const usage = `usage: admitter [run | check-config | demo | inspect TENANT | plans COMMAND | dead COMMAND | help]

  run            consume, decide and forward jobs (the default)
  check-config   validate the environment and the plans file, print the effective configuration
  demo           run admitter with three demo tenants and watch it pace them (admitter demo -h)
  inspect TENANT show the tenant's plan, each limit's tokens now and time to full, its queue, its pool and
                 pause, why its jobs wait, and where each figure came from: asked of the running
                 admitter (ADMITTER_HTTP_ADDR /inspect, else NATS); with none answering, from Redis
  plans COMMAND  pause, resume, pauses, set, unset, show: tenants' pauses and plans, in every
                 mode; push: the plans in ADMITTER_PLANS_KV (admitter plans help)
  dead COMMAND   list, replay: the dead letters, replayed to the input exactly once
                 (admitter dead help)

Configuration is read from ADMITTER_* environment variables; see README.md.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := runMain(ctx, os.Args[1:], environ(), os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func environ() map[string]string {
	m := make(map[string]string)
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

// runMain runs one command and returns the exit status: 0 success, 1 failure, 2 bad usage or
// configuration.
func runMain(ctx context.Context, args []string, env map[string]string, stdout, stderr io.Writer) int {
	cmd := "run"
	if len(args) > 0 {
		cmd = args[0]
	}
	if cmd == "demo" {
		return runDemo(ctx, args[1:], env, stdout, stderr)
	}
	if cmd == "plans" {
		return runPlans(ctx, args[1:], env, stdout, stderr)
	}
	if cmd == "dead" {
		return runDead(ctx, args[1:], env, stdout, stderr)
	}
	if cmd == "inspect" {
		if len(args) != 2 || args[1] == "" {
			fmt.Fprintf(stderr, "admitter: inspect takes one tenant name, got %q\n%s", args[1:], usage)
			return 2
		}
		cfg, err := loadConfig(env)
		if err != nil {
			fmt.Fprintf(stderr, "admitter: %v\n", err)
			return 2
		}
		if err := runInspect(ctx, cfg, args[1], stdout); err != nil {
			fmt.Fprintf(stderr, "admitter inspect: %v\n", err)
			return 1
		}
		return 0
	}
	if len(args) > 1 {
		fmt.Fprintf(stderr, "admitter: %s takes no arguments, got %q\n", cmd, args[1:])
		return 2
	}
	switch cmd {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	case "run", "check-config":
	default:
		fmt.Fprintf(stderr, "admitter: unknown command %q\n%s", cmd, usage)
		return 2
	}
	cfg, err := loadConfig(env)
	if err != nil {
		fmt.Fprintf(stderr, "admitter: %v\n", err)
		return 2
	}
	if cmd == "check-config" {
		fmt.Fprintln(stdout, "configuration OK")
		for _, o := range obsolete(env) {
			fmt.Fprintln(stdout, "note: "+o)
		}
		fmt.Fprint(stdout, cfg.describe())
		return 0
	}
	log := newLogger(cfg, stderr)
	defer exitBound(ctx, cfg.ShutdownTimeout+exitGrace, log)()
	if err := serve(ctx, cfg, log); err != nil {
		log.Error("admitter stopped", "err", err)
		if errors.Is(err, errConfig) {
			return 2
		}
		return 1
	}
	return 0
}

// exitGrace is how long the process may take past ADMITTER_SHUTDOWN_TIMEOUT to end once told to
// stop: the service returns within the bound (naming the steps it left running); what follows
// (closing the connections and servers) gets this much more.
const exitGrace = 2 * time.Second

// exit ends the process.
var exit = os.Exit

// exitBound ends the process with status 1, logging what still runs, once ctx has ended and
// bound has passed, unless the function it returns is called first (the command returned).
func exitBound(ctx context.Context, bound time.Duration, log *slog.Logger) (returned func()) {
	done := make(chan struct{})
	go func() {
		select {
		case <-done:
			return
		case <-ctx.Done():
		}
		t := time.NewTimer(bound)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			var stacks strings.Builder
			_ = pprof.Lookup("goroutine").WriteTo(&stacks, 1)
			log.Error("the process did not end within ADMITTER_SHUTDOWN_TIMEOUT and its grace: exiting with what still runs", "bound", bound.String(), "goroutines", stacks.String())
			exit(1)
		}
	}()
	return sync.OnceFunc(func() { close(done) })
}

func newLogger(c *config, w io.Writer) *slog.Logger {
	level, _ := logLevel(c.LogLevel)
	opts := &slog.HandlerOptions{Level: level}
	if c.LogFormat == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

func logLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return l, fmt.Errorf("ADMITTER_LOG_LEVEL must be debug, info, warn or error, got %q", s)
	}
	return l, nil
}
