package bench

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// Scenario names, as accepted by Options.Scenarios.
const (
	ScenarioDecisions = "decisions"
	ScenarioEndToEnd  = "e2e"
	ScenarioOverload  = "overload"
	ScenarioFlood     = "flood"
	ScenarioSync      = "sync"
	ScenarioLarge     = "large"
	ScenarioFair      = "fair"
	ScenarioCrowd     = "crowd"
	ScenarioPool      = "pool"
	// ScenarioDownstream is issue 31's: an adaptive pool in front of a downstream that does not
	// say its capacity, beside the same pool fixed.
	ScenarioDownstream = "downstream"
	// ScenarioReplicas and ScenarioBacklog are issue 30's: replicas dividing the input by its
	// partitions, and an admitter starting on a backlog.
	ScenarioReplicas = "replicas"
	ScenarioBacklog  = "backlog"
)

// AllScenarios lists every scenario in the order they run.
var AllScenarios = func() []string {
	names := make([]string, len(scenarios))
	for i, s := range scenarios {
		names[i] = s.name
	}
	return names
}()

// Options say what to run and for how long. Start from Defaults or Quick.
type Options struct {
	// Scenarios to run, a subset of AllScenarios (run in that order whatever the order here).
	Scenarios []string
	// Quick is recorded in the report: the phases were shortened for a smoke run.
	Quick bool

	// Decisions and sync: Duration per contender after Warmup, at Concurrency goroutines over
	// Tenants.
	Duration    time.Duration
	Warmup      time.Duration
	Concurrency int
	Tenants     int
	// DecisionsProfile, when set, receives a CPU profile of the process during the decisions
	// scenario's ours run (single decisions through bucket.Redis), warm-up excluded.
	DecisionsProfile string

	// End to end: Jobs pre-published over Tenants, forwarded by the relay and by admitter; then
	// LatencyDuration of paced publishing at LatencyRate jobs/s (default 5000; 0: half the
	// relay's rate).
	Jobs            int
	LatencyDuration time.Duration
	LatencyRate     float64
	// RelayPipelines is how many consume→publish→ack pipelines the relay runs.
	RelayPipelines int
	// Workers is admitter's Workers setting (0: admission's default).
	Workers int
	// CPUProfile, when set, receives a CPU profile of the process during admitter's end-to-end
	// throughput run (the in-process nats-server included; redis-server is another process).
	CPUProfile string
	// LatencyProfile, when set, receives a CPU profile of the process during admitter's paced
	// latency run.
	LatencyProfile string

	// Replicas: ReplicasJobs jobs over ReplicasTenants tenants published at once, drained by the
	// relay, by one admitter on one partition, and by 1, 2 and 4 admitter replicas on Partitions.
	ReplicasJobs    int
	ReplicasTenants int
	Partitions      int
	// ReplicasProfile, when set, is the prefix of CPU profiles of every admitter process of the
	// replicas scenario from the burst's start (<prefix>-<n>x<p>-<i>.pprof, replica i of n on p
	// partitions), for about the drain (replicasProfileS).
	ReplicasProfile string

	// Backlog: BacklogJobs jobs over BacklogTenants tenants published while no forwarder runs,
	// drained by the relay, one admitter on one partition, and 1 and 2 replicas on Partitions,
	// while a new tenant publishes BacklogNewRate jobs/s.
	BacklogJobs    int
	BacklogTenants int
	BacklogNewRate float64

	// Large: LargeJobs jobs of LargeSize bytes over LargeTenants tenants, queued while the
	// forwarder was down, drained by the relay and by the admitter (a process).
	LargeJobs    int
	LargeSize    int
	LargeTenants int

	// Overload: one tenant on a plan of OverloadCapacity at OverloadRate/s, published at
	// OverloadFactor × its rate for OverloadDuration, measured until OverloadTail after.
	OverloadDuration time.Duration
	OverloadTail     time.Duration
	OverloadCapacity int64
	OverloadRate     int64
	OverloadFactor   float64

	// Deep flood: FloodJobs of one tenant on a plan of FloodRate burst at FloodRate/s, beside
	// FloodQuietTenants tenants publishing 5 jobs/s each, measured for FloodDuration once the
	// backlog is in the tenant's lane.
	FloodJobs         int
	FloodRate         int
	FloodQuietTenants int
	FloodDuration     time.Duration
	// FloodProfile, when set, receives a 15 s CPU profile of the admitter process from the
	// start of the flood.
	FloodProfile string

	// Fair: FairTenants tenants with FairJobs jobs each, published tenant by tenant, on a plan
	// far faster than the system, drained by the admitter run with ADMITTER_QUANTUM=FairQuantum
	// (0: its default).
	FairTenants int
	FairJobs    int
	FairQuantum int

	// Crowd: CrowdTenants tenants fire CrowdJobs jobs each at once, each on a plan of
	// CrowdCapacity at CrowdRate/s.
	CrowdTenants  int
	CrowdJobs     int
	CrowdCapacity int
	CrowdRate     int

	// Pool: PoolTenants tenants, spread over plans of shares 1, 2 and 4 of a pool of
	// PoolConcurrency workers (lease 30s), each with a backlog of PoolJobs × its share, beside
	// PoolQuietTenants tenants publishing 0.25 jobs/s each (share 1: well under it); every job takes the workers PoolJobTime.
	PoolTenants      int
	PoolJobs         int
	PoolConcurrency  int
	PoolJobTime      time.Duration
	PoolQuietTenants int
	// PoolProfile, when set, receives a 15 s CPU profile of the admitter process from its start.
	PoolProfile string

	// Downstream: DownstreamTenants tenants, spread over plans of shares 1, 2 and 4 of a pool of
	// ceiling 64 (adaptive, min 2; then fixed at 64), with backlogs, in front of a simulated
	// downstream of 400 jobs/s whose capacity halves after DownstreamPhase, for DownstreamPhase,
	// then comes back for DownstreamPhase more.
	DownstreamTenants int
	DownstreamPhase   time.Duration
	// DownstreamProfile, when set, receives a 15 s CPU profile of the admitter process from the
	// adaptive run's first job.
	DownstreamProfile string

	// Logger receives admitter's own log (warnings and errors are enough); nil discards it.
	Logger *slog.Logger
}

// Defaults are the options of a full run.
func Defaults() Options {
	return Options{
		Scenarios:         append([]string(nil), AllScenarios...),
		Duration:          5 * time.Second,
		Warmup:            time.Second,
		Concurrency:       64,
		Tenants:           1000,
		Jobs:              50_000,
		LatencyDuration:   10 * time.Second,
		LatencyRate:       5000, // the paced rate: a load both forwarders carry
		RelayPipelines:    2,
		ReplicasJobs:      50_000,
		ReplicasTenants:   1000,
		Partitions:        8,
		BacklogJobs:       100_000,
		BacklogTenants:    10_000,
		BacklogNewRate:    2,
		LargeJobs:         1000,
		LargeSize:         1 << 20,
		LargeTenants:      10,
		OverloadDuration:  30 * time.Second,
		OverloadTail:      5 * time.Second,
		OverloadCapacity:  100,
		OverloadRate:      200,
		OverloadFactor:    10,
		FloodJobs:         1_000_000,
		FloodRate:         500,
		FloodQuietTenants: 100,
		FloodDuration:     30 * time.Second,
		FairTenants:       1000,
		FairJobs:          200,
		FairQuantum:       defaultFairQuantum,
		CrowdTenants:      2000,
		CrowdJobs:         20,
		CrowdCapacity:     5,
		CrowdRate:         5,
		PoolTenants:       1000,
		PoolJobs:          50,
		PoolConcurrency:   64,
		PoolJobTime:       20 * time.Millisecond,
		PoolQuietTenants:  40,
		DownstreamTenants: 200,
		DownstreamPhase:   20 * time.Second,
	}
}

// Shortened shortens every phase of o for a smoke run (seconds in all, not minutes).
func (o Options) Shortened() Options {
	o.Quick = true
	o.Duration = 500 * time.Millisecond
	o.Warmup = 200 * time.Millisecond
	o.Jobs = 3000
	o.LatencyDuration = 1500 * time.Millisecond
	o.LatencyRate = 2000 // the relay's rate over a few thousand jobs says little
	o.ReplicasJobs = 5000
	o.BacklogJobs = 10_000
	o.BacklogTenants = 1000
	o.LargeJobs = 100
	o.OverloadDuration = 2 * time.Second
	o.OverloadTail = time.Second
	o.FloodJobs = 20_000
	o.FloodQuietTenants = 20
	o.FloodDuration = 3 * time.Second
	o.FairTenants = 100
	o.FairJobs = 100
	o.CrowdTenants = 200
	o.PoolTenants = 100
	o.PoolJobs = 20
	o.PoolConcurrency = 16
	o.PoolQuietTenants = 5
	o.DownstreamTenants = 30
	o.DownstreamPhase = 6 * time.Second
	return o
}

// defaultFairQuantum is the fair scenario's ADMITTER_QUANTUM. Served in turn (deficit round
// robin on weight), a tenant's forwards over any window are within about one quantum of its
// share, so a ±10 % goal needs a window of well over ten turns a tenant. At the admitter's
// default quantum (100) a backlog of 200 jobs is two turns: the window would measure the
// quantum, not the scheduler. At 5, the window of a 200-job backlog holds some 20 to 30 turns
// (one is 3 to 5 % of a tenant's count there), with no backlog of millions of jobs to publish.
const defaultFairQuantum = 5

// Has reports whether scenario is selected.
func (o Options) Has(scenario string) bool {
	for _, s := range o.Scenarios {
		if s == scenario {
			return true
		}
	}
	return false
}

// ParseScenarios reads a comma-separated list of scenario names ("all" for every one).
func ParseScenarios(s string) ([]string, error) {
	if strings.TrimSpace(s) == "all" {
		return append([]string(nil), AllScenarios...), nil
	}
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		known := false
		for _, a := range AllScenarios {
			known = known || f == a
		}
		if !known {
			return nil, fmt.Errorf("unknown scenario %q (want a comma-separated list of %s, or all)", f, strings.Join(AllScenarios, ", "))
		}
		out = append(out, f)
	}
	return out, nil
}

// Validate says what is wrong with o, naming the flag.
func (o Options) Validate() error {
	var errs []error
	pos := func(name string, d time.Duration) {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("-%s must be positive, got %v", name, d))
		}
	}
	pos("duration", o.Duration)
	pos("latency-duration", o.LatencyDuration)
	pos("overload-duration", o.OverloadDuration)
	if o.Warmup < 0 {
		errs = append(errs, fmt.Errorf("-warmup must not be negative, got %v", o.Warmup))
	}
	if o.OverloadTail < 0 {
		errs = append(errs, fmt.Errorf("-overload-tail must not be negative, got %v", o.OverloadTail))
	}
	if o.Concurrency < 1 || o.Concurrency > 10_000 {
		errs = append(errs, fmt.Errorf("-concurrency must be from 1 to 10000, got %d", o.Concurrency))
	}
	if o.Tenants < 1 || o.Tenants > 1_000_000 {
		errs = append(errs, fmt.Errorf("-tenants must be from 1 to 1000000, got %d", o.Tenants))
	}
	if o.Jobs < 1 || o.Jobs > 10_000_000 {
		errs = append(errs, fmt.Errorf("-jobs must be from 1 to 10000000, got %d", o.Jobs))
	}
	if o.LatencyRate < 0 || o.LatencyRate > 1_000_000 {
		errs = append(errs, fmt.Errorf("-latency-rate must be from 0 (half the relay's rate) to 1000000, got %g", o.LatencyRate))
	}
	if o.RelayPipelines < 1 || o.RelayPipelines > 64 {
		errs = append(errs, fmt.Errorf("-relay-pipelines must be from 1 to 64, got %d", o.RelayPipelines))
	}
	if o.Workers < 0 || o.Workers > 100_000 {
		errs = append(errs, fmt.Errorf("-workers must be from 0 (admitter's default) to 100000, got %d", o.Workers))
	}
	if o.ReplicasJobs < 1 || o.ReplicasJobs > 10_000_000 {
		errs = append(errs, fmt.Errorf("-replicas-jobs must be from 1 to 10000000, got %d", o.ReplicasJobs))
	}
	if o.ReplicasTenants < 1 || o.ReplicasTenants > 1_000_000 {
		errs = append(errs, fmt.Errorf("-replicas-tenants must be from 1 to 1000000, got %d", o.ReplicasTenants))
	}
	if o.Partitions < 2 || o.Partitions > 64 {
		errs = append(errs, fmt.Errorf("-partitions must be from 2 to 64, got %d", o.Partitions))
	}
	if o.BacklogJobs < 1 || o.BacklogJobs > 10_000_000 {
		errs = append(errs, fmt.Errorf("-backlog-jobs must be from 1 to 10000000, got %d", o.BacklogJobs))
	}
	if o.BacklogTenants < 1 || o.BacklogTenants > 1_000_000 {
		errs = append(errs, fmt.Errorf("-backlog-tenants must be from 1 to 1000000, got %d", o.BacklogTenants))
	}
	if o.BacklogNewRate <= 0 || o.BacklogNewRate > 1000 {
		errs = append(errs, fmt.Errorf("-backlog-new-rate must be above 0 and at most 1000 jobs/s, got %g", o.BacklogNewRate))
	}
	if o.LargeJobs < 1 || o.LargeJobs > 100_000 {
		errs = append(errs, fmt.Errorf("-large-jobs must be from 1 to 100000, got %d", o.LargeJobs))
	}
	if o.LargeSize < 1 || o.LargeSize > 16<<20 {
		errs = append(errs, fmt.Errorf("-large-kib must be from 1 to 16384 (16 MiB), got %d bytes", o.LargeSize))
	}
	if o.LargeTenants < 1 || o.LargeTenants > 10_000 {
		errs = append(errs, fmt.Errorf("-large-tenants must be from 1 to 10000, got %d", o.LargeTenants))
	}
	if o.OverloadCapacity < 1 {
		errs = append(errs, fmt.Errorf("overload capacity must be ≥ 1, got %d", o.OverloadCapacity))
	}
	if o.OverloadRate < 1 || o.OverloadRate > 100_000 {
		errs = append(errs, fmt.Errorf("overload rate must be from 1 to 100000/s, got %d", o.OverloadRate))
	}
	if o.OverloadFactor <= 0 || o.OverloadFactor*float64(o.OverloadRate) > 200_000 {
		errs = append(errs, fmt.Errorf("overload factor must be positive and publish at most 200000/s, got %g", o.OverloadFactor))
	}
	if o.FloodJobs < 1 || o.FloodJobs > 100_000_000 {
		errs = append(errs, fmt.Errorf("-flood-jobs must be from 1 to 100000000, got %d", o.FloodJobs))
	}
	if o.FloodRate < 1 || o.FloodRate > 100_000 {
		errs = append(errs, fmt.Errorf("-flood-rate must be from 1 to 100000/s, got %d", o.FloodRate))
	}
	if o.FloodQuietTenants < 1 || o.FloodQuietTenants > 10_000 {
		errs = append(errs, fmt.Errorf("-flood-quiet must be from 1 to 10000, got %d", o.FloodQuietTenants))
	}
	pos("flood-duration", o.FloodDuration)
	if o.FairTenants < 10 || o.FairTenants > 100_000 {
		errs = append(errs, fmt.Errorf("-fair-tenants must be from 10 to 100000, got %d", o.FairTenants))
	}
	if o.FairJobs < 2 || o.FairJobs > 100_000 || o.FairTenants*o.FairJobs > 10_000_000 {
		errs = append(errs, fmt.Errorf("-fair-jobs must be from 2 to 100000, and -fair-tenants × -fair-jobs at most 10000000, got %d", o.FairJobs))
	}
	if o.FairQuantum < 0 || o.FairQuantum > 1_000_000 {
		errs = append(errs, fmt.Errorf("-fair-quantum must be from 0 (admitter's default) to 1000000, got %d", o.FairQuantum))
	}
	if o.CrowdTenants < 1 || o.CrowdTenants > 100_000 {
		errs = append(errs, fmt.Errorf("-crowd-tenants must be from 1 to 100000, got %d", o.CrowdTenants))
	}
	if o.CrowdJobs < 1 || o.CrowdJobs > 10_000 || o.CrowdTenants*o.CrowdJobs > 10_000_000 {
		errs = append(errs, fmt.Errorf("-crowd-jobs must be from 1 to 10000, and -crowd-tenants × -crowd-jobs at most 10000000, got %d", o.CrowdJobs))
	}
	if o.CrowdCapacity < 1 || o.CrowdCapacity > 1_000_000 {
		errs = append(errs, fmt.Errorf("-crowd-capacity must be from 1 to 1000000, got %d", o.CrowdCapacity))
	}
	if o.CrowdRate < 1 || o.CrowdRate > 1_000_000 {
		errs = append(errs, fmt.Errorf("-crowd-rate must be from 1 to 1000000/s, got %d", o.CrowdRate))
	}
	if o.PoolTenants < 3 || o.PoolTenants > 100_000 {
		errs = append(errs, fmt.Errorf("-pool-tenants must be from 3 (one a share) to 100000, got %d", o.PoolTenants))
	}
	if o.PoolJobs < 1 || o.PoolJobs > 100_000 || o.PoolTenants*o.PoolJobs > 2_000_000 {
		errs = append(errs, fmt.Errorf("-pool-jobs must be from 1 to 100000, and -pool-tenants × -pool-jobs at most 2000000 (the backlog is 7/3 of it), got %d", o.PoolJobs))
	}
	if o.PoolConcurrency < 1 || o.PoolConcurrency > 500 {
		errs = append(errs, fmt.Errorf("-pool-concurrency must be from 1 to 500 (the workers get twice as many handlers, under the pool's 1000), got %d", o.PoolConcurrency))
	}
	if o.PoolJobTime < time.Millisecond || o.PoolJobTime > 10*time.Second {
		errs = append(errs, fmt.Errorf("-pool-job-time must be from 1ms to 10s, got %v", o.PoolJobTime))
	}
	if o.PoolQuietTenants < 1 || o.PoolQuietTenants > 1000 {
		errs = append(errs, fmt.Errorf("-pool-quiet must be from 1 to 1000, got %d", o.PoolQuietTenants))
	}
	if o.DownstreamTenants < 3 || o.DownstreamTenants > 10_000 {
		errs = append(errs, fmt.Errorf("-downstream-tenants must be from 3 (one a share) to 10000, got %d", o.DownstreamTenants))
	}
	if o.DownstreamPhase < 2*time.Second || o.DownstreamPhase > 10*time.Minute {
		errs = append(errs, fmt.Errorf("-downstream-phase must be from 2s to 10m, got %v", o.DownstreamPhase))
	}
	if len(o.Scenarios) == 0 {
		errs = append(errs, errors.New("no scenario selected"))
	}
	return errors.Join(errs...)
}
