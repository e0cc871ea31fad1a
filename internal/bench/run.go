// Package bench measures admitter side by side with what it is compared to, on one machine in
// one run: limiter decisions per second against github.com/go-redis/redis_rate and a minimal
// script (the ceiling), synchronous decisions over HTTP and NATS against redis_rate behind
// net/http, end-to-end JetStream throughput and latency against a plain relay, and pacing
// accuracy under overload. cmd/admitter-bench runs it; the figures come back as a Report.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/internal/testenv"
	"github.com/admitter/admitter/plans"
)

// logger is o.Logger, or one that discards.
func (o Options) logger() *slog.Logger {
	if o.Logger != nil {
		return o.Logger
	}
	return slog.New(slog.DiscardHandler)
}

// Plans are the plans every scenario uses: the default plan (two limits, 1,000,000 burst at
// 1,000,000/s and 1,000,000,000 a day) admits everything a run can publish; the overload
// tenant has its own small plan. The decisions scenario also measures one plan per other limit
// kind and a plan mixing all three, each admitting everything: a three-second window (counted in
// 64 sub-windows of 46.875ms; at tens of decisions per second per tenant they all fill within
// its first 3s, so a full run measures a window near its largest state, a -quick one does not),
// a daily quota, and a bucket, that window and that quota chained.
func Plans(o Options) (*bucket.Plans, error) {
	src := fmt.Sprintf(`plans:
  bench:
    limits:
      - {name: burst, capacity: 1000000, rate: 1000000/s}
      - {name: daily, capacity: 1000000000, rate: 1000000000/d}
  bench-window:
    limits:
      - {name: seconds, kind: window, limit: 1000000000000, window: 3s}
  bench-quota:
    limits:
      - {name: daily, kind: quota, limit: 1000000000000000, period: day}
  bench-mixed:
    limits:
      - {name: burst, capacity: 1000000, rate: 1000000/s}
      - {name: seconds, kind: window, limit: 1000000000000, window: 3s}
      - {name: daily, kind: quota, limit: 1000000000000000, period: day}
  overload:
    limits:
      - {capacity: %d, rate: %d/s}
tenants:
  %s: overload
default_plan: bench
`, o.OverloadCapacity, o.OverloadRate, overloadTenant)
	return plans.Parse("bench-plans.yaml", []byte(src))
}

// progress prints one line per phase: elapsed time since the start, what runs, and once it is
// done, the result and how long it took.
type progress struct {
	w     io.Writer
	start time.Time
}

// say prints one line of what a phase found.
func (p *progress) say(line string) {
	fmt.Fprintf(p.w, "[%6.1fs] %s\n", time.Since(p.start).Seconds(), line)
}

func (p *progress) phase(what string, f func() (string, error)) error {
	begin := time.Now()
	fmt.Fprintf(p.w, "[%6.1fs] %s ... ", begin.Sub(p.start).Seconds(), what)
	ended := false
	defer func() {
		if !ended { // f panicked, or a server it started could not: the line ends before the scenario's failure is said
			fmt.Fprintf(p.w, "failed after %.1fs\n", time.Since(begin).Seconds())
		}
	}()
	res, err := f()
	ended = true
	took := time.Since(begin).Seconds()
	if err != nil {
		if errors.Is(err, context.Canceled) {
			fmt.Fprintf(p.w, "interrupted after %.1fs\n", took)
		} else {
			fmt.Fprintf(p.w, "failed after %.1fs\n", took)
		}
		return err
	}
	fmt.Fprintf(p.w, "%s (%.1fs)\n", res, took)
	return nil
}

// Run starts a redis-server, then runs the selected scenarios in turn (runScenarios: each on
// servers and processes of its own, stopped when it ends), printing progress to w. It returns
// the report with its goals evaluated and the scenarios that failed in its Failures; an error
// when nothing could be measured (the options, Redis), or ctx's when ctx ends first. What it
// started is stopped when it returns.
func Run(ctx context.Context, o Options, w io.Writer) (*Report, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	plans, err := Plans(o)
	if err != nil {
		return nil, err
	}
	p := &progress{w: w, start: time.Now()}
	rep := &Report{Meta: newMeta(ctx, p.start, o.Quick), Options: optionsJSON(o)}
	run := &scope{log: o.logger()}
	defer run.close()
	e := &env{plans: plans, o: o}
	if err := run.run(func() error {
		e.bins = &binaries{dir: run.TempDir()}
		return p.phase("start redis-server", func() (string, error) {
			srv := testenv.StartRedis(run)
			e.redisURL = srv.URL()
			if e.admin, err = newRedisAdmin(e.redisURL); err != nil {
				return "", err
			}
			run.Cleanup(e.admin.close) // before the server stops
			info, err := e.admin.info(ctx, "server")
			if err != nil {
				return "", err
			}
			rep.Meta.RedisVersion = infoField(info, "redis_version")
			return fmt.Sprintf("redis %s on %s", rep.Meta.RedisVersion, srv.Addr), nil
		})
	}); err != nil {
		return nil, err
	}

	var chosen []scenario
	for _, sc := range scenarios {
		if o.Has(sc.name) {
			chosen = append(chosen, sc)
		}
	}
	if err := runScenarios(ctx, *e, p, rep, chosen); err != nil {
		return nil, err
	}
	rep.Meta.ElapsedS = round(time.Since(p.start).Seconds(), 1)
	rep.EvaluateGoals()
	return rep, nil
}

// decisions is scenario 1.
func (e *env) decisions(ctx context.Context, p *progress) (*Decisions, error) {
	tenants := tenantNames(e.o.Tenants)
	plan, _ := e.plans.Plan("bench")
	d := &Decisions{Concurrency: e.o.Concurrency, Tenants: e.o.Tenants, Kinds: make([]DecisionRun, len(kindPlans))}
	type run struct {
		into *DecisionRun
		new  func() (contender, error)
	}
	runs := []run{
		{&d.Ours, func() (contender, error) { return oursContender("ours", e.redisURL, plan, tenants) }},
		{&d.RedisRate, func() (contender, error) { return redisRateContender(e.redisURL, e.o.Concurrency, tenants) }},
		{&d.Ceiling, func() (contender, error) { return ceilingContender(e.redisURL, tenants) }},
		{&d.Batched, func() (contender, error) { return batchedContender(e.redisURL, plan, tenants) }},
		{&d.FallbackBatched, func() (contender, error) {
			return fallbackContender("fail mode local, Redis up", e.redisURL, plan, tenants, true, nil)
		}},
		{&d.LocalBatched, func() (contender, error) {
			gone := testenv.StartRedis(e.tb)
			return fallbackContender("fail mode local, Redis away", gone.URL(), plan, tenants, true, gone.Kill)
		}},
		{&d.LocalSingle, func() (contender, error) {
			gone := testenv.StartRedis(e.tb)
			return fallbackContender("fail mode local, Redis away, single", gone.URL(), plan, tenants, false, gone.Kill)
		}},
	}
	// The kinds run on a Redis with an append-only file, as the README asks where windows and
	// quotas matter: a fresh Redis without one is a Redis that forgot, and the limiter then takes
	// every window and quota for used up (until a window, or the period, has passed).
	kindsFrom := len(runs)
	for i, k := range kindPlans {
		p, ok := e.plans.Plan(k.plan)
		if !ok {
			return nil, fmt.Errorf("no plan %s", k.plan)
		}
		runs = append(runs, run{&d.Kinds[i], func() (contender, error) { return oursContender("ours "+k.name, e.redisURL, p, tenants) }})
	}
	defer func() { _ = e.admin.persist(context.WithoutCancel(ctx), false) }()
	for i, mk := range runs {
		if i == kindsFrom {
			if err := e.admin.persist(ctx, true); err != nil {
				return nil, err
			}
		}
		if err := e.admin.flush(ctx); err != nil {
			return nil, err
		}
		c, err := mk.new()
		if err != nil {
			return nil, err
		}
		err = p.phase(fmt.Sprintf("decisions: %s, %d goroutines, %v warm-up + %v", c.name, e.o.Concurrency, e.o.Warmup, e.o.Duration), func() (string, error) {
			profile := ""
			if mk.into == &d.Ours {
				profile = e.o.DecisionsProfile
			}
			r, err := measureDecisions(ctx, c, e.o.Concurrency, e.o.Warmup, e.o.Duration, profile)
			*mk.into = r
			if profile != "" {
				return fmt.Sprintf("%s/s, p50 %.2fms p99 %.2fms, CPU profile in %s", count(r.PerSecond), r.Latency.P50Ms, r.Latency.P99Ms, profile), err
			}
			return fmt.Sprintf("%s/s, p50 %.2fms p99 %.2fms", count(r.PerSecond), r.Latency.P50Ms, r.Latency.P99Ms), err
		})
		c.close()
		if err != nil {
			return nil, err
		}
	}
	d.VsRedisRate = round(Ratio(d.Ours.PerSecond, d.RedisRate.PerSecond), 4)
	d.VsCeiling = round(Ratio(d.Ours.PerSecond, d.Ceiling.PerSecond), 4)
	d.BatchedVsCeiling = round(Ratio(d.Batched.PerSecond, d.Ceiling.PerSecond), 4)
	return d, e.admin.flush(ctx)
}

// kindPlans are the decisions scenario's plans of each limit kind (see Plans), measured on a
// Redis with an append-only file; the bucket plan again, for comparison on the same footing.
var kindPlans = []struct{ name, plan string }{{"bucket", "bench"}, {"window", "bench-window"}, {"quota", "bench-quota"}, {"mixed", "bench-mixed"}}
