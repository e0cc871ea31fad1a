// Command admitter-bench measures admitter on this machine, side by side with what it is
// compared to: limiter decisions per second against github.com/go-redis/redis_rate and a
// minimal Redis script, the decision API over HTTP and NATS against redis_rate behind net/http,
// end-to-end JetStream throughput and added latency against a plain relay, pacing under
// overload, a deep flood, tenants' shares when the admitter is the bottleneck (fair), a crowd
// of tenants bursting at once against their plans' pace (crowd), a pool's shares of the workers
// (pool), and an adaptive pool in front of a downstream that does not say its capacity, which
// halves for a while, beside the same pool fixed (downstream). It starts its own redis-server
// and in-process nats-servers on 127.0.0.1, prints one progress line per phase, then a table of
// ratios against the goals, and writes the same figures as JSON. Goals not met are a result, not an error: it exits 0 unless
// something failed (1), the flags are wrong (2) or it was interrupted (130).
//
//	go run ./cmd/admitter-bench              # the full run, about two minutes
//	go run ./cmd/admitter-bench -quick       # every phase shortened: a smoke run
//	go run ./cmd/admitter-bench -scenarios e2e -cpuprofile admitter.pprof
//
// The flags, scenarios and report live in internal/bench (bench.Main); this file wires the
// signals and the servers' owner.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/admitter/admitter/internal/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	tb := &cmdTB{stderr: os.Stderr}
	code := run(ctx, tb)
	stop()
	tb.cleanup()
	os.Exit(code)
}

// run is bench.Main, with tb.Fatalf (a server that cannot start) turned into exit status 1.
func run(ctx context.Context, tb *cmdTB) (code int) {
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(fatal); !ok {
				tb.cleanup()
				panic(r)
			}
			code = 1
		}
	}()
	return bench.Main(ctx, os.Args[1:], os.Stdout, os.Stderr, tb)
}

// fatal is the panic of cmdTB.Fatalf, recovered by run.
type fatal struct{ msg string }

// cmdTB is the testenv.TB of the command: Fatalf says what failed on stderr and unwinds to run
// (which exits 1 after cleaning up); Cleanup functions run at exit, Ctrl-C included, newest
// first; TempDir directories are removed at exit.
type cmdTB struct {
	stderr   io.Writer
	mu       sync.Mutex
	cleanups []func()
}

func (t *cmdTB) Helper() {}

func (t *cmdTB) Logf(format string, args ...any) {
	fmt.Fprintf(t.stderr, "admitter-bench: "+format+"\n", args...)
}

func (t *cmdTB) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	fmt.Fprintf(t.stderr, "admitter-bench: fatal: %s\n", msg)
	panic(fatal{msg})
}

func (t *cmdTB) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}

func (t *cmdTB) TempDir() string {
	dir, err := os.MkdirTemp("", "admitter-bench-")
	if err != nil {
		t.Fatalf("temporary directory: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// cleanup runs the clean-up functions, newest first (servers stop before their directories go).
func (t *cmdTB) cleanup() {
	t.mu.Lock()
	fs := t.cleanups
	t.cleanups = nil
	t.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}
