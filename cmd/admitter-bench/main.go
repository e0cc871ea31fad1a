// Command admitter-bench measures admitter on this machine, side by side with what it is
// compared to: limiter decisions per second against github.com/go-redis/redis_rate and a
// minimal Redis script, the decision API over HTTP and NATS against redis_rate behind net/http,
// end-to-end JetStream throughput and added latency against a plain relay, pacing under
// overload, a deep flood, tenants' shares when the admitter is the bottleneck (fair), a crowd
// of tenants bursting at once against their plans' pace (crowd), a pool's shares of the workers
// (pool), and an adaptive pool in front of a downstream that does not say its capacity, which
// halves for a while, beside the same pool fixed (downstream). It starts its own redis-server
// and nats-servers on 127.0.0.1, prints one progress line per phase, then a table of ratios
// against the goals, and writes the same figures as JSON. A scenario that fails is reported as
// failed in its row and in the JSON, and the others still run. Goals not met are a result, not
// an error: it exits 0 when every scenario was measured, 1 when one failed (or nothing could
// be), 2 when the flags are wrong and 130 when interrupted.
//
//	go run ./cmd/admitter-bench              # the full run
//	go run ./cmd/admitter-bench -quick       # every phase shortened: a smoke run
//	go run ./cmd/admitter-bench -scenarios e2e -cpuprofile admitter.pprof
//
// The flags, scenarios and report live in internal/bench (bench.Main); this file wires the
// signals.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/admitter/admitter/internal/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := bench.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
