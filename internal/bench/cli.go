package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// ParseArgs reads the command line of admitter-bench: the options and the JSON path ("" for
// none). -h prints the usage to stderr and returns flag.ErrHelp; any other problem is an error
// saying which flag is wrong.
func ParseArgs(args []string, stderr io.Writer) (Options, string, error) {
	def := Defaults()
	fs := flag.NewFlagSet("admitter-bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported by run, the usage only on -h
	o := def
	scenarios := fs.String("scenarios", "all", "scenarios to run, comma separated: decisions, sync, e2e, replicas, backlog, large, overload, flood, fair, crowd, pool, downstream (or all)")
	quick := fs.Bool("quick", false, "shorten every phase for a smoke run of seconds (flags given explicitly still apply)")
	jsonPath := fs.String("json", "bench-results.json", "write the figures as JSON to this `path` (empty: don't)")
	fs.DurationVar(&o.Duration, "duration", def.Duration, "decisions and sync: measured time per contender")
	fs.DurationVar(&o.Warmup, "warmup", def.Warmup, "decisions and sync: warm-up before each measurement")
	fs.IntVar(&o.Concurrency, "concurrency", def.Concurrency, "decisions and sync: goroutines deciding at once")
	fs.IntVar(&o.Tenants, "tenants", def.Tenants, "decisions, sync and end to end: number of tenants")
	fs.IntVar(&o.Jobs, "jobs", def.Jobs, "end to end: jobs pre-published and drained by the relay and by admitter")
	fs.DurationVar(&o.LatencyDuration, "latency-duration", def.LatencyDuration, "end to end: paced publishing time of each latency run")
	fs.Float64Var(&o.LatencyRate, "latency-rate", def.LatencyRate, "end to end: paced rate in jobs/s (0: half the relay's measured rate; -quick: 2000)")
	fs.IntVar(&o.RelayPipelines, "relay-pipelines", def.RelayPipelines, "end to end: the relay's consume→publish→ack pipelines")
	fs.IntVar(&o.Workers, "workers", def.Workers, "admitter's Workers (0: admission's default)")
	fs.StringVar(&o.DecisionsProfile, "decisions-cpuprofile", "", "decisions: write a CPU profile of the bench process during the ours run (single decisions through bucket.Redis, warm-up excluded) to this `path`")
	fs.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of admitter's end-to-end throughput run to this `path`")
	fs.StringVar(&o.LatencyProfile, "latency-cpuprofile", "", "write a CPU profile of the bench process (the admitter, nats-server, producer and subscriber) during admitter's paced latency run to this `path`")
	fs.IntVar(&o.ReplicasJobs, "replicas-jobs", def.ReplicasJobs, "replicas: jobs published at once, drained by the relay and by 1, 2 and 4 admitter replicas (-quick: 5000)")
	fs.IntVar(&o.ReplicasTenants, "replicas-tenants", def.ReplicasTenants, "replicas: tenants the jobs are spread over")
	fs.IntVar(&o.Partitions, "partitions", def.Partitions, "replicas and backlog: the admitters' ADMITTER_PARTITIONS")
	fs.StringVar(&o.ReplicasProfile, "replicas-cpuprofile", "", "replicas: write CPU profiles of every admitter process from the burst's start to `prefix`-<n>x<p>-<i>.pprof")
	fs.IntVar(&o.BacklogJobs, "backlog-jobs", def.BacklogJobs, "backlog: jobs queued while no forwarder runs (-quick: 10000)")
	fs.IntVar(&o.BacklogTenants, "backlog-tenants", def.BacklogTenants, "backlog: tenants the backlog is spread over (-quick: 1000)")
	fs.Float64Var(&o.BacklogNewRate, "backlog-new-rate", def.BacklogNewRate, "backlog: jobs/s of the new tenant publishing while the backlog drains")
	fs.IntVar(&o.LargeJobs, "large-jobs", def.LargeJobs, "large: jobs queued while the forwarder is down")
	largeKiB := fs.Int("large-kib", def.LargeSize>>10, "large: each job's payload in KiB")
	fs.IntVar(&o.LargeTenants, "large-tenants", def.LargeTenants, "large: tenants the jobs are spread over")
	fs.DurationVar(&o.OverloadDuration, "overload-duration", def.OverloadDuration, "overload: how long the tenant is published at the overload factor")
	fs.DurationVar(&o.OverloadTail, "overload-tail", def.OverloadTail, "overload: how long to keep watching after the load ends")
	fs.Int64Var(&o.OverloadCapacity, "overload-capacity", def.OverloadCapacity, "overload: the tenant's plan capacity")
	fs.Int64Var(&o.OverloadRate, "overload-rate", def.OverloadRate, "overload: the tenant's plan rate per second")
	fs.Float64Var(&o.OverloadFactor, "overload-factor", def.OverloadFactor, "overload: published rate as a multiple of the plan's rate")
	fs.IntVar(&o.FloodJobs, "flood-jobs", def.FloodJobs, "deep flood: the noisy tenant's backlog")
	fs.IntVar(&o.FloodRate, "flood-rate", def.FloodRate, "deep flood: the noisy tenant's plan rate per second (and burst)")
	fs.IntVar(&o.FloodQuietTenants, "flood-quiet", def.FloodQuietTenants, "deep flood: quiet tenants, 5 jobs/s each, within their plan")
	fs.StringVar(&o.FloodProfile, "flood-cpuprofile", "", "deep flood: write a 15s CPU profile of the admitter process from the start of the flood to this `path`")
	fs.DurationVar(&o.FloodDuration, "flood-duration", def.FloodDuration, "deep flood: measured time once the backlog waits in the tenant's queue")
	fs.IntVar(&o.FairTenants, "fair-tenants", def.FairTenants, "fair: tenants with a backlog each (-quick: 100)")
	fs.IntVar(&o.FairJobs, "fair-jobs", def.FairJobs, "fair: each tenant's backlog, published tenant by tenant (-quick: 100)")
	fs.IntVar(&o.FairQuantum, "fair-quantum", def.FairQuantum, "fair: the admitter's ADMITTER_QUANTUM (0: its default, 100)")
	fs.IntVar(&o.CrowdTenants, "crowd-tenants", def.CrowdTenants, "crowd: tenants firing their jobs at once (-quick: 200)")
	fs.IntVar(&o.CrowdJobs, "crowd-jobs", def.CrowdJobs, "crowd: jobs each tenant fires")
	fs.IntVar(&o.CrowdCapacity, "crowd-capacity", def.CrowdCapacity, "crowd: every tenant's plan capacity")
	fs.IntVar(&o.CrowdRate, "crowd-rate", def.CrowdRate, "crowd: every tenant's plan rate per second")
	fs.IntVar(&o.PoolTenants, "pool-tenants", def.PoolTenants, "pool: contending tenants, spread over shares 1, 2 and 4 (-quick: 100)")
	fs.IntVar(&o.PoolJobs, "pool-jobs", def.PoolJobs, "pool: each contending tenant's backlog per unit of its share (-quick: 20)")
	fs.IntVar(&o.PoolConcurrency, "pool-concurrency", def.PoolConcurrency, "pool: the pool's concurrency, its workers (-quick: 16)")
	fs.DurationVar(&o.PoolJobTime, "pool-job-time", def.PoolJobTime, "pool: how long each job takes a worker")
	fs.IntVar(&o.PoolQuietTenants, "pool-quiet", def.PoolQuietTenants, "pool: quiet tenants publishing a job every 4 s each, share 1: well under their share (-quick: 5)")
	fs.StringVar(&o.PoolProfile, "pool-cpuprofile", "", "pool: write a 15s CPU profile of the admitter process from its start to this `path`")
	fs.IntVar(&o.DownstreamTenants, "downstream-tenants", def.DownstreamTenants, "downstream: tenants with backlogs, spread over shares 1, 2 and 4 (-quick: 30)")
	fs.DurationVar(&o.DownstreamPhase, "downstream-phase", def.DownstreamPhase, "downstream: each phase's length (full, halved, full again), per run (adaptive, fixed) (-quick: 6s)")
	fs.StringVar(&o.DownstreamProfile, "downstream-cpuprofile", "", "downstream: write a 15s CPU profile of the admitter process from the adaptive run's first job to this `path`")
	usage := func() {
		fs.SetOutput(stderr)
		fmt.Fprintf(stderr, "usage: admitter-bench [flags]\n\n"+
			"Measures admitter against redis_rate (alone and behind net/http), a minimal-script ceiling\n"+
			"and a plain JetStream relay (small jobs and megabyte jobs),\n"+
			"on servers it starts itself on 127.0.0.1, and prints a table against the goals.\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		usage()
		return o, "", err
	} else if err != nil {
		return o, "", fmt.Errorf("%w (see -h for the flags)", err)
	}
	if fs.NArg() > 0 {
		return o, "", fmt.Errorf("unexpected argument %q (every option is a flag; see -h)", fs.Arg(0))
	}
	o.LargeSize = *largeKiB << 10
	var err error
	if o.Scenarios, err = ParseScenarios(*scenarios); err != nil {
		return o, "", fmt.Errorf("-scenarios: %w", err)
	}
	if *quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		q := o.Shortened()
		for name, field := range map[string]func(){
			"latency-rate":       func() { q.LatencyRate = o.LatencyRate },
			"duration":           func() { q.Duration = o.Duration },
			"warmup":             func() { q.Warmup = o.Warmup },
			"jobs":               func() { q.Jobs = o.Jobs },
			"latency-duration":   func() { q.LatencyDuration = o.LatencyDuration },
			"overload-duration":  func() { q.OverloadDuration = o.OverloadDuration },
			"overload-tail":      func() { q.OverloadTail = o.OverloadTail },
			"flood-jobs":         func() { q.FloodJobs = o.FloodJobs },
			"large-jobs":         func() { q.LargeJobs = o.LargeJobs },
			"replicas-jobs":      func() { q.ReplicasJobs = o.ReplicasJobs },
			"backlog-jobs":       func() { q.BacklogJobs = o.BacklogJobs },
			"backlog-tenants":    func() { q.BacklogTenants = o.BacklogTenants },
			"flood-quiet":        func() { q.FloodQuietTenants = o.FloodQuietTenants },
			"flood-duration":     func() { q.FloodDuration = o.FloodDuration },
			"fair-tenants":       func() { q.FairTenants = o.FairTenants },
			"fair-jobs":          func() { q.FairJobs = o.FairJobs },
			"crowd-tenants":      func() { q.CrowdTenants = o.CrowdTenants },
			"pool-tenants":       func() { q.PoolTenants = o.PoolTenants },
			"pool-jobs":          func() { q.PoolJobs = o.PoolJobs },
			"pool-concurrency":   func() { q.PoolConcurrency = o.PoolConcurrency },
			"pool-quiet":         func() { q.PoolQuietTenants = o.PoolQuietTenants },
			"downstream-tenants": func() { q.DownstreamTenants = o.DownstreamTenants },
			"downstream-phase":   func() { q.DownstreamPhase = o.DownstreamPhase },
		} {
			if set[name] {
				field()
			}
		}
		o = q
	}
	if err := o.Validate(); err != nil {
		return o, "", err
	}
	return o, *jsonPath, nil
}

// Main is admitter-bench: it parses args, runs the scenarios on servers it starts (and stops),
// prints progress and the table to stdout, writes the JSON, and returns the exit status (see
// finish): 1 as well when nothing could be measured, 2 for bad flags, 130 when ctx ended first
// (Ctrl-C).
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, jsonPath, err := ParseArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "admitter-bench: %v\n", strings.ReplaceAll(err.Error(), "\n", "\nadmitter-bench: "))
		return 2
	}
	o.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	fmt.Fprintf(stdout, "admitter-bench: scenarios %s%s; servers on 127.0.0.1\n", strings.Join(o.Scenarios, ", "), map[bool]string{true: " (quick)"}[o.Quick])
	rep, err := Run(ctx, o, stdout)
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "admitter-bench: interrupted: the servers stopped, nothing written")
		return 130
	}
	if err != nil {
		fmt.Fprintf(stderr, "admitter-bench: %v\n", err)
		return 1
	}
	return finish(rep, jsonPath, stdout, stderr)
}

// finish prints rep's table to stdout and writes its JSON to jsonPath ("" for none), and returns
// the exit status: 0 when every scenario was measured (goals met or not: they are results), 1
// when one failed (its row says so, its error is in the JSON) or the figures could not be
// written.
func finish(rep *Report, jsonPath string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stdout)
	if err := rep.WriteTable(stdout); err != nil {
		fmt.Fprintf(stderr, "admitter-bench: %v\n", err)
		return 1
	}
	if jsonPath != "" {
		if err := rep.WriteJSON(jsonPath); err != nil {
			fmt.Fprintf(stderr, "admitter-bench: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "\nfigures written to %s\n", jsonPath)
	}
	if len(rep.Failures) > 0 {
		fmt.Fprintf(stderr, "admitter-bench: %d of %d scenarios failed: %s\n", len(rep.Failures), len(rep.Options.Scenarios), rep.failed())
		return 1
	}
	return 0
}
