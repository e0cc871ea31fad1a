package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Report is everything one run measured. It is written as JSON so runs can be compared over
// time; sections of scenarios that did not run are absent.
type Report struct {
	Meta       Meta        `json:"meta"`
	Decisions  *Decisions  `json:"decisions,omitempty"`
	Sync       *Sync       `json:"sync,omitempty"`
	EndToEnd   *EndToEnd   `json:"end_to_end,omitempty"`
	Replicas   *Replicas   `json:"replicas,omitempty"`
	Backlog    *Backlog    `json:"backlog_at_start,omitempty"`
	Large      *Large      `json:"large,omitempty"`
	Overload   *Overload   `json:"overload,omitempty"`
	Flood      *Flood      `json:"deep_flood,omitempty"`
	Fair       *Fair       `json:"fair,omitempty"`
	Crowd      *Crowd      `json:"crowd,omitempty"`
	Pool       *Pool       `json:"pool,omitempty"`
	Downstream *Downstream `json:"downstream,omitempty"`
	Goals      []Goal      `json:"goals"`
	Notes      []string    `json:"notes,omitempty"`
	Options    OptionsJSON `json:"options"`
	// Failures are the scenarios that could not be measured, in the order they ran.
	Failures []Failure `json:"failures,omitempty"`
}

// Meta says when, where and on what the run happened.
type Meta struct {
	Timestamp         string  `json:"timestamp"` // RFC 3339, UTC
	GoVersion         string  `json:"go_version"`
	GOOS              string  `json:"goos"`
	GOARCH            string  `json:"goarch"`
	NumCPU            int     `json:"num_cpu"`
	GOMAXPROCS        int     `json:"gomaxprocs"`
	GitCommit         string  `json:"git_commit,omitempty"`
	GitDirty          bool    `json:"git_dirty,omitempty"`
	RedisVersion      string  `json:"redis_version,omitempty"`
	NATSServerVersion string  `json:"nats_server_version,omitempty"`
	Quick             bool    `json:"quick"`
	ElapsedS          float64 `json:"elapsed_s"`
}

// OptionsJSON records the options that shaped the figures.
type OptionsJSON struct {
	Scenarios         []string `json:"scenarios"`
	DurationS         float64  `json:"duration_s"`
	WarmupS           float64  `json:"warmup_s"`
	Concurrency       int      `json:"concurrency"`
	Tenants           int      `json:"tenants"`
	Jobs              int      `json:"jobs"`
	LatencyDurationS  float64  `json:"latency_duration_s"`
	RelayPipelines    int      `json:"relay_pipelines"`
	ReplicasJobs      int      `json:"replicas_jobs"`
	ReplicasTenants   int      `json:"replicas_tenants"`
	Partitions        int      `json:"partitions"`
	BacklogJobs       int      `json:"backlog_jobs"`
	BacklogTenants    int      `json:"backlog_tenants"`
	BacklogNewRate    float64  `json:"backlog_new_rate"`
	LargeJobs         int      `json:"large_jobs"`
	LargeSizeBytes    int      `json:"large_size_bytes"`
	OverloadDurationS float64  `json:"overload_duration_s"`
	OverloadTailS     float64  `json:"overload_tail_s"`
	FloodJobs         int      `json:"flood_jobs"`
	FloodDurationS    float64  `json:"flood_duration_s"`
	FairTenants       int      `json:"fair_tenants"`
	FairJobs          int      `json:"fair_jobs_per_tenant"`
	FairQuantum       int      `json:"fair_quantum"`
	CrowdTenants      int      `json:"crowd_tenants"`
	CrowdJobs         int      `json:"crowd_jobs_per_tenant"`
	PoolTenants       int      `json:"pool_tenants"`
	PoolJobs          int      `json:"pool_jobs_per_share"`
	PoolConcurrency   int      `json:"pool_concurrency"`
	PoolJobMs         float64  `json:"pool_job_ms"`
	PoolQuietTenants  int      `json:"pool_quiet_tenants"`
	DownstreamTenants int      `json:"downstream_tenants"`
	DownstreamPhaseS  float64  `json:"downstream_phase_s"`
}

func optionsJSON(o Options) OptionsJSON {
	return OptionsJSON{
		Scenarios: o.Scenarios, DurationS: o.Duration.Seconds(), WarmupS: o.Warmup.Seconds(),
		Concurrency: o.Concurrency, Tenants: o.Tenants, Jobs: o.Jobs,
		LatencyDurationS: o.LatencyDuration.Seconds(), RelayPipelines: o.RelayPipelines,
		ReplicasJobs: o.ReplicasJobs, ReplicasTenants: o.ReplicasTenants, Partitions: o.Partitions,
		BacklogJobs: o.BacklogJobs, BacklogTenants: o.BacklogTenants, BacklogNewRate: o.BacklogNewRate,
		LargeJobs: o.LargeJobs, LargeSizeBytes: o.LargeSize,
		OverloadDurationS: o.OverloadDuration.Seconds(), OverloadTailS: o.OverloadTail.Seconds(),
		FloodJobs: o.FloodJobs, FloodDurationS: o.FloodDuration.Seconds(),
		FairTenants: o.FairTenants, FairJobs: o.FairJobs, FairQuantum: o.FairQuantum,
		CrowdTenants: o.CrowdTenants, CrowdJobs: o.CrowdJobs,
		PoolTenants: o.PoolTenants, PoolJobs: o.PoolJobs, PoolConcurrency: o.PoolConcurrency,
		PoolJobMs: ms(o.PoolJobTime), PoolQuietTenants: o.PoolQuietTenants,
		DownstreamTenants: o.DownstreamTenants, DownstreamPhaseS: o.DownstreamPhase.Seconds(),
	}
}

// DecisionRun is one contender of the decisions scenario.
type DecisionRun struct {
	Name      string  `json:"name"`
	Calls     int64   `json:"calls"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"per_second"`
	Latency   Latency `json:"latency"`
	// Denied counts calls that were not admitted (the plans admit everything: expect 0).
	Denied int64 `json:"denied"`
}

// Decisions is scenario 1: limiter decisions per second at a fixed concurrency.
type Decisions struct {
	Concurrency int         `json:"concurrency"`
	Tenants     int         `json:"tenants"`
	Ours        DecisionRun `json:"ours"`
	RedisRate   DecisionRun `json:"redis_rate"`
	Ceiling     DecisionRun `json:"ceiling"`
	// Kinds are ours on a plan of each limit kind and on a plan mixing all three (bucket, window,
	// quota, mixed; see Plans), on a Redis with an append-only file (appendonly yes).
	Kinds       []DecisionRun `json:"kinds,omitempty"`
	VsRedisRate float64       `json:"ours_vs_redis_rate"`
	VsCeiling   float64       `json:"ours_vs_ceiling"`
	// Batched is the queue's path: Admit of 16 jobs of one tenant per call, the calls of many
	// tenants sent together; its PerSecond counts decisions (jobs), not calls.
	Batched          DecisionRun `json:"batched"`
	BatchedVsCeiling float64     `json:"batched_vs_ceiling"`
	// Fail mode local (bucket.Fallback): the queue's path while Redis answers (each admission
	// returning the tenant's state for the copy), and while it is away (decided on the copy),
	// batched as Batched; and single decisions while it is away, as Ours.
	FallbackBatched DecisionRun `json:"fallback_batched"`
	LocalBatched    DecisionRun `json:"local_batched"`
	LocalSingle     DecisionRun `json:"local_single"`
}

// Sync is the synchronous scenario: decisions per second and latency of admitter's HTTP API
// (POST /v1/decide) and NATS service (admitter.decide), and of redis_rate behind a minimal
// net/http handler reading the same JSON, at a fixed concurrency.
type Sync struct {
	Concurrency int         `json:"concurrency"`
	Tenants     int         `json:"tenants"`
	HTTP        DecisionRun `json:"http"`
	NATS        DecisionRun `json:"nats"`
	Peer        DecisionRun `json:"redis_rate_net_http"`
	HTTPVsPeer  float64     `json:"http_vs_redis_rate_net_http"`
	NATSVsPeer  float64     `json:"nats_vs_redis_rate_net_http"`
}

// Throughput is one forwarder draining a pre-published backlog.
type Throughput struct {
	Jobs      int     `json:"jobs"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"per_second"`
	redis     RedisCost
}

// PacedLatency is publish → forwarded-message-received latency at a paced rate.
type PacedLatency struct {
	RatePerSecond float64 `json:"rate_per_second"`
	DurationS     float64 `json:"duration_s"`
	Relay         Latency `json:"relay"`
	Admitter      Latency `json:"admitter"`
	// AddedP99Ms is admitter's p99 minus the relay's p99 (a difference of percentiles, not the
	// percentile of per-job differences); AddedP50Ms likewise.
	AddedP99Ms float64 `json:"added_p99_ms"`
	AddedP50Ms float64 `json:"added_p50_ms"`
}

// EndToEnd is scenario 2: JetStream in, JetStream out, 1000 tenants under their limits.
type EndToEnd struct {
	Tenants int        `json:"tenants"`
	Relay   Throughput `json:"relay"`
	// RelayMsgID is the relay publishing each job with a Nats-Msg-Id (its input sequence), as
	// admitter does for exactly once: what the output stream's duplicate window costs alone.
	RelayMsgID Throughput `json:"relay_msgid"`
	Admitter   Throughput `json:"admitter"`
	// Replicas is two admitters (each its own connections) draining the same jobs; Cluster is
	// one admitter on a Redis Cluster of 3 masters.
	Replicas Throughput   `json:"admitter_2_replicas"`
	Cluster  Throughput   `json:"admitter_redis_cluster"`
	Ratio    float64      `json:"admitter_vs_relay"`
	Latency  PacedLatency `json:"latency"`
	// Redis is what the admitter's drain cost the Redis server, per forwarded job.
	Redis RedisCost `json:"redis"`
	Notes []string  `json:"-"`
}

// RedisCost is what a run cost the Redis server: commands (script calls and the rest) and its
// own CPU time per forwarded job, and what it holds once the run is over: keys and memory above
// an empty server, per tenant, and per job-per-second of the run (what the admitter keeps of
// recent jobs, since no key is written per job).
type RedisCost struct {
	CallsPerJob      float64 `json:"calls_per_job"`
	CPUMicrosPerJob  float64 `json:"cpu_us_per_job"`
	Keys             int64   `json:"keys"`
	BytesPerTenant   float64 `json:"bytes_per_tenant"`
	BytesPerJobPerS  float64 `json:"bytes_per_job_per_second"`
	KeysPerJobPerSec float64 `json:"keys_per_job_per_second"`
}

// Overload is scenario 3: one tenant published at a multiple of its plan's rate.
type Overload struct {
	Capacity        int64   `json:"capacity"`
	RatePerSecond   float64 `json:"rate_per_second"`
	PublishRate     float64 `json:"publish_rate_per_second"`
	DurationS       float64 `json:"duration_s"`
	TailS           float64 `json:"tail_s"`
	Published       int64   `json:"published"`
	AdmittedAtEnd   int64   `json:"admitted_at_load_end"`
	SinceFirstS     float64 `json:"t_s"` // from the first admission to the end of the load window
	Expected        float64 `json:"expected"`
	ErrorPct        float64 `json:"error_pct"`
	AdmittedTotal   int64   `json:"admitted_total"`
	TailPerSecond   float64 `json:"tail_admitted_per_second"`
	AttemptsMean    float64 `json:"attempts_mean"`
	AttemptsMax     int64   `json:"attempts_max"`
	DelayMs         Latency `json:"admit_delay_ms"`
	Dead            int64   `json:"dead"`
	FirstAdmissionS float64 `json:"first_admission_s"` // after the first publish
	// WorstLagJobs is how far, at worst, the admitted count fell behind capacity + rate·t at
	// 100 ms checkpoints through the load window (WorstLagAtS after the first admission), and
	// WorstAheadJobs how far it ran ahead: the count at the end alone can hide a stall that a
	// burst made up for.
	WorstLagJobs   float64 `json:"worst_lag_jobs"`
	WorstLagAtS    float64 `json:"worst_lag_at_s"`
	WorstAheadJobs float64 `json:"worst_ahead_jobs"`
	// AdmittedPerSecond counts admissions in each second from the first publish to the end of
	// the tail.
	AdmittedPerSecond []int64 `json:"admitted_per_second"`
}

// Goal is one target and whether the run met it.
type Goal struct {
	Name   string  `json:"name"`
	Value  float64 `json:"value"`
	Op     string  `json:"op"` // ">=", "<=" or "abs<=" (|value| ≤ target)
	Target float64 `json:"target"`
	Met    bool    `json:"met"`
}

// syncGoal: admitter's HTTP API decides at least as many requests per second as redis_rate
// behind a bare net/http handler, although it does more per request (strict JSON decoding, two
// limits, RateLimit headers, metrics).
const syncGoal = 1.0

// Goal names.
const (
	GoalVsRedisRate = "decisions ours/redis_rate"
	GoalVsCeiling   = "decisions ours/ceiling"
	GoalBatched     = "decisions batched/ceiling"
	GoalSyncHTTP    = "sync http ours/redis_rate net/http"
	GoalEndToEnd    = "end-to-end admitter/relay"
	GoalAddedP99    = "added p99 latency ms"
	// The replicas scenario's (issue 30), against one replica on the same partitions.
	GoalReplicasTwo      = "replicas 2/1 jobs/s"
	GoalReplicasMsgs     = "replicas server msgs/job at 4"
	GoalReplicasMsgsFlat = "replicas server msgs/job 4 vs 1 %"
	GoalReplicasNATSCPU  = "replicas nats-server CPU/job 4 vs 1 %"
	GoalReplicasAdmCPU   = "replicas admitters CPU/job 4 vs 1 %"
	GoalLargeRelay       = "large jobs admitter/relay"
	GoalLargeSlow        = "large jobs slow consumers"
	GoalOverloadErr      = "overload admitted error %"
	GoalAttempts         = "overload mean attempts"
	GoalFloodQuiet       = "deep flood quiet p99 ms"
	GoalFloodNoisy       = "deep flood noisy pacing error %"
	GoalFloodRSS         = "deep flood admitter RSS MiB"
	GoalFloodRedis       = "deep flood redis calls per job"
	GoalFairDev          = "fair max deviation from the mean %"
	GoalFairJain         = "fair Jain index"
	GoalCrowdDone        = "crowd slowest tenant done s"
	GoalCrowdPacing      = "crowd pacing violations"
	GoalPoolJain         = "pool Jain index of received/share"
	GoalPoolQuiet        = "pool quiet p99 ms"
	GoalPoolHolds        = "pool most in flight"
	// The downstream scenario's, of its adaptive run.
	GoalDownFull       = "downstream full: jobs/s over capacity"
	GoalDownHalved     = "downstream halved: jobs/s over capacity"
	GoalDownAgain      = "downstream full again: jobs/s over capacity"
	GoalDownBackHalved = "downstream back within 30% after the halving s"
	GoalDownBackAgain  = "downstream back within 30% after the recovery s"
	GoalDownP99        = "downstream p99 time per job ms"
	GoalDownJain       = "downstream Jain index of done/share"
)

// Replicas goals (issue 30's): two replicas at least 0.9× one replica's jobs/s; at four, at most
// 2.5 messages delivered by the server per job and within 20 % of one replica's; the CPU per job
// of nats-server and of the admitters flat (at most 20 % more at four than at one).
const (
	replicasTwoGoal   = 0.9
	replicasMsgsGoal  = 2.5
	replicasFlatGoal  = 20
	backlogRelayGoal  = 0.5
	backlogNewP99Goal = 1000
)

// GoalBacklogRate and GoalBacklogNewP99 name the backlog-at-start scenario's goals (issue 30's)
// for a run: its drain at least half as fast as the relay's, and the new tenant's p99 wait at
// most a second.
func GoalBacklogRate(run string) string {
	return "backlog at start, " + run + ": jobs/s over the relay's"
}
func GoalBacklogNewP99(run string) string { return "backlog at start, " + run + ": new tenant p99 ms" }

// pctOver is how many percent above 1 a ratio is (0 for a ratio of 0: a figure missing).
func pctOver(ratio float64) float64 {
	if ratio == 0 {
		return 0
	}
	return round(100*(ratio-1), 2)
}

// Downstream goals (issue 31's), for the adaptive pool: in each phase's steady state at least
// 70 % of the downstream's capacity (it cannot do more: within 30 %), back there within 10 s
// after the capacity halves and after it comes back, the p99 time per job of every phase at most
// three times the floor (the downstream's 20 ms), and Jain's index of jobs done over shares at
// least 0.95.
const (
	downShareGoal = 1 - dsBand
	downBackGoalS = 10
	downFloors    = 3
	downJainGoal  = 0.95
)

// Pool goals (the issue's): Jain's index of received/share over the contending tenants at least
// 0.95 (a coefficient of variation of about 0.23), the quiet tenants' p99 from publish to forward
// at most a second, and never more jobs running at once than the pool's concurrency (the
// README's invariant 8; the target is the run's concurrency).
const (
	poolJainGoal    = 0.95
	poolQuietGoalMs = 1000
)

// overloadAttemptsGoal bounds the mean Admit-Attempts of the overloaded tenant's jobs: the times
// each was asked about at the head of its queue. A job that waits is told so once, when it
// reaches the head, and is admitted by the call its queue makes when the wait is over: 2; the
// jobs of the first burst and those admitted behind a head take 1. More means a queue asked
// before its time (it was woken for nothing, or its timer ran early). It is not
// admitter_decisions_total per job, which counts a job that waited once delayed and once
// admitted, however often it was asked. Before Admit-Attempts counted these asks, the goal was
// 1.5 "deliveries", a figure from when waiting jobs were redelivered.
const overloadAttemptsGoal = 2

// Fair-share goals: every tenant within ±10 % of the mean over the window (the issue's), and
// Jain's index at least 0.99. The index is 1/(1+CV²): 0.99 is a coefficient of variation of
// 0.1, the spread (root mean square) the ±10 % allows its worst tenant; it says whether a
// missed ±10 % is a few tenants or all of them.
const (
	fairDevGoal  = 10
	fairJainGoal = 0.99
)

func goal(name string, value float64, op string, target float64) Goal {
	g := Goal{Name: name, Value: value, Op: op, Target: target}
	switch op {
	case ">=":
		g.Met = value >= target
	case "<=":
		g.Met = value <= target
	case "abs<=":
		g.Met = math.Abs(value) <= target
	}
	return g
}

// EvaluateGoals fills r.Goals from the sections present.
func (r *Report) EvaluateGoals() {
	r.Goals = r.Goals[:0]
	if d := r.Decisions; d != nil {
		r.Goals = append(r.Goals, goal(GoalVsRedisRate, d.VsRedisRate, ">=", 2.0), goal(GoalVsCeiling, d.VsCeiling, ">=", 0.8),
			goal(GoalBatched, d.BatchedVsCeiling, ">=", 3.0))
	}
	if s := r.Sync; s != nil {
		r.Goals = append(r.Goals, goal(GoalSyncHTTP, s.HTTPVsPeer, ">=", syncGoal))
	}
	if e := r.EndToEnd; e != nil {
		r.Goals = append(r.Goals, goal(GoalEndToEnd, e.Ratio, ">=", 0.85), goal(GoalAddedP99, e.Latency.AddedP99Ms, "<=", 1))
	}
	if rp := r.Replicas; rp != nil {
		if _, ok := rp.run(2, rp.Partitions); ok {
			r.Goals = append(r.Goals, goal(GoalReplicasTwo, rp.TwoVsOne, ">=", replicasTwoGoal))
		}
		if four, ok := rp.run(4, rp.Partitions); ok {
			r.Goals = append(r.Goals, goal(GoalReplicasMsgs, four.ServerMsgsPerJob, "<=", replicasMsgsGoal),
				goal(GoalReplicasMsgsFlat, pctOver(rp.MsgsFourVsOne), "abs<=", replicasFlatGoal),
				goal(GoalReplicasNATSCPU, pctOver(rp.NATSCPUFourVsOne), "<=", replicasFlatGoal),
				goal(GoalReplicasAdmCPU, pctOver(rp.AdmitterCPUFourVsOne), "<=", replicasFlatGoal))
		}
	}
	if b := r.Backlog; b != nil {
		for _, run := range b.Runs {
			r.Goals = append(r.Goals, goal(GoalBacklogRate(run.Name), run.VsRelay, ">=", backlogRelayGoal))
			g := goal(GoalBacklogNewP99(run.Name), run.New.P99Ms, "<=", backlogNewP99Goal)
			g.Met = g.Met && run.New.Samples > 0 && run.NewMissing == 0 // a job never received is no wait met
			r.Goals = append(r.Goals, g)
		}
	}
	if l := r.Large; l != nil {
		r.Goals = append(r.Goals, goal(GoalLargeRelay, l.Ratio, ">=", 0.85), goal(GoalLargeSlow, float64(l.Admitter.SlowConsumers), "<=", 0))
	}
	if o := r.Overload; o != nil {
		r.Goals = append(r.Goals, goal(GoalOverloadErr, o.ErrorPct, "abs<=", 2), goal(GoalAttempts, o.AttemptsMean, "<=", overloadAttemptsGoal))
	}
	if f := r.Flood; f != nil {
		r.Goals = append(r.Goals, goal(GoalFloodQuiet, f.Quiet.P99Ms, "<=", 1000), goal(GoalFloodNoisy, f.NoisyErrorPct, "abs<=", 2),
			goal(GoalFloodRSS, f.AdmitterRSSMiB, "<=", 256), goal(GoalFloodRedis, f.RedisCallsPerJob, "<=", 1.5))
	}
	if f := r.Fair; f != nil {
		r.Goals = append(r.Goals, goal(GoalFairDev, f.MaxDeviationPct, "<=", fairDevGoal), goal(GoalFairJain, f.Jain, ">=", fairJainGoal))
	}
	if c := r.Crowd; c != nil {
		// The plans set the pace: every tenant done within a second of what its plan allows.
		r.Goals = append(r.Goals, goal(GoalCrowdDone, c.DoneMaxS, "<=", c.PlanS+crowdSlack.Seconds()),
			goal(GoalCrowdPacing, float64(c.PacingViolations), "<=", 0))
	}
	if d := r.Downstream; d != nil && len(d.Adaptive.Phases) == 3 && len(d.Adaptive.BackS) == 3 {
		a := d.Adaptive
		// A throughput that never came back (−1) misses its goal.
		back := func(name string, v float64) Goal {
			g := goal(name, v, "<=", downBackGoalS)
			g.Met = g.Met && v >= 0
			return g
		}
		r.Goals = append(r.Goals, goal(GoalDownFull, a.Phases[0].VsCapacity, ">=", downShareGoal),
			goal(GoalDownHalved, a.Phases[1].VsCapacity, ">=", downShareGoal), goal(GoalDownAgain, a.Phases[2].VsCapacity, ">=", downShareGoal),
			back(GoalDownBackHalved, a.BackS[1]), back(GoalDownBackAgain, a.BackS[2]),
			goal(GoalDownP99, a.WorstP99Ms, "<=", downFloors*d.JobMs), goal(GoalDownJain, a.Jain, ">=", downJainGoal))
	}
	if p := r.Pool; p != nil {
		r.Goals = append(r.Goals, goal(GoalPoolJain, p.Jain, ">=", poolJainGoal), goal(GoalPoolQuiet, p.Quiet.P99Ms, "<=", poolQuietGoalMs),
			goal(GoalPoolHolds, float64(p.MostInFlight), "<=", float64(p.Concurrency)))
	}
}

// Goal returns the goal named name.
func (r *Report) Goal(name string) (Goal, bool) {
	for _, g := range r.Goals {
		if g.Name == name {
			return g, true
		}
	}
	return Goal{}, false
}

// WriteTable prints the side-by-side table: ours, the peer or ceiling, the ratio and the goal.
func (r *Report) WriteTable(w io.Writer) error {
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 0, 3, ' ', 0)
	row := func(cells ...string) { fmt.Fprintln(tw, strings.Join(cells, "\t")) }
	met := func(name string) (string, string) {
		g, ok := r.Goal(name)
		if !ok {
			return "", ""
		}
		t := target(g.Target)
		switch g.Op {
		case "abs<=":
			t = "±" + t + "%"
		case "<=":
			switch {
			case strings.HasPrefix(name, "backlog at start") && strings.HasSuffix(name, " ms"):
				t += "ms"
			case name == GoalReplicasNATSCPU || name == GoalReplicasAdmCPU:
				t = "+" + t + "%"
			}
			switch name {
			case GoalAddedP99, GoalFloodQuiet, GoalPoolQuiet, GoalDownP99:
				t += "ms"
			case GoalFloodRSS:
				t += " MiB"
			case GoalFairDev:
				t += "%"
			case GoalCrowdDone, GoalDownBackHalved, GoalDownBackAgain:
				t += "s"
			}
			t = "<=" + t
		default:
			t = g.Op + t
		}
		return t, yesNo(g.Met)
	}
	row("scenario", "ours", "peer/ceiling", "ratio", "goal", "met")
	// A scenario that failed has a row in its place saying why (the first line of its error).
	failed := func(scenario string) {
		for _, f := range r.Failures {
			if f.Scenario == scenario {
				why, _, _ := strings.Cut(f.Error, "\n")
				row(scenario, "FAILED", "", "", "", fmt.Sprintf("after %.1fs: %s", f.AfterS, why))
			}
		}
	}
	failed(ScenarioDecisions)
	if d := r.Decisions; d != nil {
		c := strconv.Itoa(d.Concurrency)
		t, m := met(GoalVsRedisRate)
		row("decisions/s (c="+c+")", count(d.Ours.PerSecond), "redis_rate "+count(d.RedisRate.PerSecond), fixed(d.VsRedisRate, 2), t, m)
		t, m = met(GoalVsCeiling)
		row("decisions/s (c="+c+")", count(d.Ours.PerSecond), "ceiling "+count(d.Ceiling.PerSecond), fixed(d.VsCeiling, 2), t, m)
		t, m = met(GoalBatched)
		row(fmt.Sprintf("decisions/s batched (%d jobs/call)", batchSize), count(d.Batched.PerSecond), "ceiling "+count(d.Ceiling.PerSecond), fixed(d.BatchedVsCeiling, 2), t, m)
		row("decision p50/p99 ms", pair(d.Ours.Latency), "redis_rate "+pair(d.RedisRate.Latency), "", "", "")
		row("", "", "ceiling "+pair(d.Ceiling.Latency), "", "", "")
		if d.FallbackBatched.Calls > 0 {
			row("fail mode local, Redis up: batched/s", count(d.FallbackBatched.PerSecond), "batched "+count(d.Batched.PerSecond), fixed(Ratio(d.FallbackBatched.PerSecond, d.Batched.PerSecond), 2), "", "")
			row("fail mode local, Redis away: batched/s", count(d.LocalBatched.PerSecond), "batched "+count(d.Batched.PerSecond), fixed(Ratio(d.LocalBatched.PerSecond, d.Batched.PerSecond), 2), "", "")
			row("  p50/p99 ms (Redis up / away)", pair(d.FallbackBatched.Latency), "away "+pair(d.LocalBatched.Latency), "", "", "")
			row("fail mode local, Redis away: single/s", count(d.LocalSingle.PerSecond), "ours "+count(d.Ours.PerSecond), fixed(Ratio(d.LocalSingle.PerSecond, d.Ours.PerSecond), 2), "", "")
			row("  p50/p99 ms (away / ours)", pair(d.LocalSingle.Latency), "ours "+pair(d.Ours.Latency), "", "", "")
		}
		for _, k := range d.Kinds {
			kind := strings.TrimPrefix(k.Name, "ours ")
			if kind == "bucket" {
				row("decisions/s "+kind+" (c="+c+", aof)", count(k.PerSecond), "", "", "", "")
				continue
			}
			row("decisions/s "+kind+" (c="+c+", aof)", count(k.PerSecond), "ours bucket "+count(d.Kinds[0].PerSecond), fixed(Ratio(k.PerSecond, d.Kinds[0].PerSecond), 2), "", "")
		}
	}
	failed(ScenarioSync)
	if s := r.Sync; s != nil {
		c := strconv.Itoa(s.Concurrency)
		t, m := met(GoalSyncHTTP)
		row("sync http decisions/s (c="+c+")", count(s.HTTP.PerSecond), "redis_rate net/http "+count(s.Peer.PerSecond), fixed(s.HTTPVsPeer, 2), t, m)
		row("sync http p50/p99 ms", pair(s.HTTP.Latency), "redis_rate net/http "+pair(s.Peer.Latency), "", "", "")
		row("sync nats decisions/s (c="+c+")", count(s.NATS.PerSecond), "redis_rate net/http "+count(s.Peer.PerSecond), fixed(s.NATSVsPeer, 2), "", "")
		row("sync nats p50/p99 ms", pair(s.NATS.Latency), "", "", "", "")
	}
	failed(ScenarioEndToEnd)
	if e := r.EndToEnd; e != nil {
		t, m := met(GoalEndToEnd)
		row(fmt.Sprintf("end-to-end jobs/s (%s tenants)", count(float64(e.Tenants))), count(e.Admitter.PerSecond), "relay "+count(e.Relay.PerSecond), fixed(e.Ratio, 2), t, m)
		row("", "", "relay+msgid "+count(e.RelayMsgID.PerSecond), fixed(Ratio(e.Admitter.PerSecond, e.RelayMsgID.PerSecond), 2), "", "")
		row("end-to-end jobs/s, 2 replicas", count(e.Replicas.PerSecond), "relay "+count(e.Relay.PerSecond), fixed(Ratio(e.Replicas.PerSecond, e.Relay.PerSecond), 2), "", "")
		row("end-to-end jobs/s, Redis Cluster ×3", count(e.Cluster.PerSecond), "relay "+count(e.Relay.PerSecond), fixed(Ratio(e.Cluster.PerSecond, e.Relay.PerSecond), 2), "", "")
		t, m = met(GoalAddedP99)
		l := e.Latency
		row(fmt.Sprintf("latency p99 ms (%s/s paced)", count(l.RatePerSecond)), fixed(l.Admitter.P99Ms, 2), "relay "+fixed(l.Relay.P99Ms, 2), signed(l.AddedP99Ms, 2)+"ms", t, m)
		row("latency p50 ms", fixed(l.Admitter.P50Ms, 2), "relay "+fixed(l.Relay.P50Ms, 2), signed(l.AddedP50Ms, 2)+"ms", "", "")
		rc := e.Redis
		row("redis per forwarded job", fixed(rc.CallsPerJob, 3)+" calls", fixed(rc.CPUMicrosPerJob, 1)+" µs of redis CPU", "", "", "")
		row("redis after the drain", count(float64(rc.Keys))+" keys", fixed(rc.BytesPerTenant, 0)+" B/tenant", fixed(rc.BytesPerJobPerS, 2)+" B per job/s", "", "")
	}
	failed(ScenarioReplicas)
	if rp := r.Replicas; rp != nil {
		what := fmt.Sprintf(" (%s jobs, %s tenants)", count(float64(rp.Jobs)), count(float64(rp.Tenants)))
		row("replicas jobs/s: relay"+what, count(rp.Relay.PerSecond), "", "", "", "")
		for _, run := range rp.Runs {
			name := "replicas jobs/s: " + run.Name
			t, m := "", ""
			if run.Replicas == 2 && run.Partitions == rp.Partitions {
				t, m = met(GoalReplicasTwo)
			}
			row(name, count(run.PerSecond), "relay "+count(rp.Relay.PerSecond), fixed(run.VsOne, 2)+"× one", t, m)
		}
		msgs := func(f func(ReplicaRun) float64, digits int) string {
			parts := make([]string, len(rp.Runs))
			for i, run := range rp.Runs {
				parts[i] = fixed(f(run), digits)
			}
			return strings.Join(parts, "/")
		}
		order := make([]string, len(rp.Runs))
		for i, run := range rp.Runs {
			order[i] = fmt.Sprintf("%d×P%d", run.Replicas, run.Partitions)
		}
		row("replicas runs in order", strings.Join(order, " "), "", "", "", "")
		if four, ok := rp.run(4, rp.Partitions); ok {
			t, m := met(GoalReplicasMsgs)
			row("replicas server msgs/job at 4 replicas", fixed(four.ServerMsgsPerJob, 2), "relay "+fixed(rp.Relay.ServerMsgsPerJob, 2), "", t, m)
			t, m = met(GoalReplicasMsgsFlat)
			row("replicas server msgs/job 4 vs 1", signed(pctOver(rp.MsgsFourVsOne), 1)+"%", "", "", t, m)
			t, m = met(GoalReplicasNATSCPU)
			row("replicas nats-server CPU/job 4 vs 1", signed(pctOver(rp.NATSCPUFourVsOne), 1)+"%", "", "", t, m)
			t, m = met(GoalReplicasAdmCPU)
			row("replicas admitters CPU/job 4 vs 1", signed(pctOver(rp.AdmitterCPUFourVsOne), 1)+"%", "", "", t, m)
		}
		row("replicas server msgs/job by run", msgs(func(r ReplicaRun) float64 { return r.ServerMsgsPerJob }, 2), "relay "+fixed(rp.Relay.ServerMsgsPerJob, 2), "", "", "")
		row("replicas nats-server µs/job by run", msgs(func(r ReplicaRun) float64 { return r.NATSCPUMicrosPerJob }, 1), "relay "+fixed(rp.Relay.NATSCPUMicrosPerJob, 1), "", "", "")
		row("replicas admitters µs/job by run", msgs(func(r ReplicaRun) float64 { return r.AdmitterCPUMicrosPerJob }, 1), "", "", "", "")
		row("replicas redis calls/job by run", msgs(func(r ReplicaRun) float64 { return r.RedisCallsPerJob }, 3), "", "", "", "")
		row("replicas idle CPU ms/s by run", msgs(func(r ReplicaRun) float64 { return r.AdmitterIdleMsPerS }, 0), "nats-server "+msgs(func(r ReplicaRun) float64 { return r.NATSIdleMsPerS }, 0), "", "", "")
		row("replicas partitions shared after s", msgs(func(r ReplicaRun) float64 { return r.SharedS }, 2), "", "", "", "")
	}
	failed(ScenarioBacklog)
	if b := r.Backlog; b != nil {
		row(fmt.Sprintf("backlog at start: relay drain s (%s jobs, %s tenants)", count(float64(b.Jobs)), count(float64(b.Tenants))),
			fixed(b.Relay.DrainS, 2), count(b.Relay.PerSecond)+" jobs/s", "", "", "")
		row("backlog at start: relay new tenant p50/p99 ms", fixed(b.Relay.New.P50Ms, 0)+"/"+fixed(b.Relay.New.P99Ms, 0), fmt.Sprintf("%d jobs at %g/s", b.Relay.New.Samples, b.NewRate), "", "", "")
		for _, run := range b.Runs {
			t, m := met(GoalBacklogRate(run.Name))
			row("backlog at start: "+run.Name+" drain s", fixed(run.DrainS, 2), count(run.PerSecond)+" jobs/s vs relay "+count(b.Relay.PerSecond), fixed(run.VsRelay, 2), t, m)
			t, m = met(GoalBacklogNewP99(run.Name))
			missing := ""
			if run.NewMissing > 0 {
				missing = fmt.Sprintf(", %d missing", run.NewMissing)
			}
			row("backlog at start: "+run.Name+" new tenant p99 ms", fixed(run.New.P99Ms, 0), fmt.Sprintf("p50 %s over %d jobs%s", fixed(run.New.P50Ms, 0), run.New.Samples, missing), "", t, m)
			shared := "never"
			if run.SharedS >= 0 {
				shared = fixed(run.SharedS, 2)
			}
			row("backlog at start: "+run.Name+" partitions held after s", shared, fmt.Sprintf("first job after %ss", fixed(run.FirstS, 2)), "", "", "")
		}
	}
	failed(ScenarioLarge)
	if l := r.Large; l != nil {
		t, m := met(GoalLargeRelay)
		what := fmt.Sprintf("%s × %s", count(float64(l.Jobs)), sizeName(l.SizeBytes))
		row("large jobs/s ("+what+")", fixed(l.Admitter.PerSecond, 1), "relay "+fixed(l.Relay.PerSecond, 1), fixed(l.Ratio, 2), t, m)
		row("large MiB/s", fixed(l.Admitter.MiBPerSecond, 1), "relay "+fixed(l.Relay.MiBPerSecond, 1), "", "", "")
		t, m = met(GoalLargeSlow)
		row("large slow-consumer disconnects", strconv.FormatInt(l.Admitter.SlowConsumers, 10), "relay "+strconv.FormatInt(l.Relay.SlowConsumers, 10), "", t, m)
		row("large peak RSS MiB", fixed(l.Admitter.PeakRSSMiB, 1), "nats-server "+fixed(l.Admitter.NATSRSSMiB, 1), "", "", "")
	}
	failed(ScenarioOverload)
	if o := r.Overload; o != nil {
		t, m := met(GoalOverloadErr)
		row(fmt.Sprintf("overload admitted (%gs at %s/s)", o.DurationS, count(o.PublishRate)), count(float64(o.AdmittedAtEnd)), "expected "+fixed(o.Expected, 1), signed(o.ErrorPct, 2)+"%", t, m)
		t, m = met(GoalAttempts)
		row("overload attempts/admitted job", fixed(o.AttemptsMean, 2), "max "+strconv.FormatInt(o.AttemptsMax, 10), "", t, m)
		row("overload Admit-Delay-Ms p50/p99", trimFloat(o.DelayMs.P50Ms)+"/"+trimFloat(o.DelayMs.P99Ms), "", "", "", "")
		row("overload worst lag behind plan", count(o.WorstLagJobs)+" jobs", fmt.Sprintf("at t=%.1fs", o.WorstLagAtS), "", "", "")
	}
	failed(ScenarioFlood)
	if f := r.Flood; f != nil {
		jobs := count(float64(f.Jobs))
		t, m := met(GoalFloodQuiet)
		row("deep flood quiet p99 ms ("+jobs+" waiting)", fixed(f.Quiet.P99Ms, 2), "p50 "+fixed(f.Quiet.P50Ms, 2), "", t, m)
		row("deep flood quiet p50/p99 ms while it arrived", pair(f.QuietWhileArriving), fmt.Sprintf("absorbed in %.1fs", f.AbsorbS), "", "", "")
		t, m = met(GoalFloodNoisy)
		row(fmt.Sprintf("deep flood noisy forwarded (%gs at %g/s)", f.DurationS, f.NoisyRate), count(float64(f.NoisyForwarded)), "expected "+fixed(f.NoisyExpected, 1), signed(f.NoisyErrorPct, 2)+"%", t, m)
		t, m = met(GoalFloodRSS)
		row("deep flood peak RSS MiB", fixed(f.AdmitterRSSMiB, 1), "nats-server "+fixed(f.NATSRSSMiB, 1), "", t, m)
		t, m = met(GoalFloodRedis)
		row("deep flood redis calls/forwarded job", fixed(f.RedisCallsPerJob, 3), "", "", t, m)
		row("deep flood JetStream API calls/job", fixed(f.APICallsPerJob, 3), fmt.Sprintf("admitter msgs %s", fixed(f.AdmitterMsgsPerJob, 2)), "", "", "")
		row("deep flood consumers at the peak", strconv.Itoa(f.PeakConsumers), "", "", "", "")
	}
	failed(ScenarioFair)
	if f := r.Fair; f != nil {
		what := fmt.Sprintf("%s tenants × %d", count(float64(f.Tenants)), f.JobsPerTenant)
		if f.Settings != "" {
			what += ", " + f.Settings
		}
		row("fair jobs/s over the window ("+what+")", count(f.PerSecond), fmt.Sprintf("%s forwards in %.1fs", count(float64(f.WindowTo-f.WindowFrom)), f.WindowS), "", "", "")
		t, m := met(GoalFairDev)
		row("fair max deviation from the mean", fixed(f.MaxDeviationPct, 1)+"%", fmt.Sprintf("min %d, mean %s, max %d", f.Min, fixed(f.Mean, 1), f.Max), "", t, m)
		t, m = met(GoalFairJain)
		row("fair Jain index", fixed(f.Jain, 4), fmt.Sprintf("%s%% of tenants within ±10%%", fixed(f.WithinPct, 1)), "", t, m)
		row("fair first/last tenth published vs mean", fixed(f.FirstTenth, 2)+"/"+fixed(f.LastTenth, 2), fmt.Sprintf("drained in %.1fs", f.DrainS), "", "", "")
		row("fair start-up: all tenants served after", fmt.Sprintf("%.2fs", f.AllServedS), fmt.Sprintf("%s forwards, %s had %d", count(float64(f.AllServed)), f.StartLeader.Tenant, f.StartLeader.Count), "", "", "")
	}
	failed(ScenarioCrowd)
	if c := r.Crowd; c != nil {
		t, m := met(GoalCrowdDone)
		what := fmt.Sprintf("%s × %d at {%d, %g/s}", count(float64(c.Tenants)), c.JobsPerTenant, c.Capacity, c.RatePerSecond)
		row("crowd slowest tenant done s ("+what+")", fixed(c.DoneMaxS, 2), fmt.Sprintf("plan %.1fs", c.PlanS), "", t, m)
		row("crowd tenants done p50/p99 s", fixed(c.DoneP50S, 2)+"/"+fixed(c.DoneP99S, 2), fmt.Sprintf("%d late", c.Late), "", "", "")
		t, m = met(GoalCrowdPacing)
		row("crowd jobs ahead of their plan", strconv.FormatInt(c.PacingViolations, 10), "", "", t, m)
	}
	failed(ScenarioPool)
	if p := r.Pool; p != nil {
		what := fmt.Sprintf("%s tenants, shares %s, %d/share", count(float64(p.Tenants)), sharesText(p.Shares), p.JobsPerShare)
		t, m := met(GoalPoolJain)
		row("pool Jain index of received/share ("+what+")", fixed(p.Jain, 4), fmt.Sprintf("min %s×, max %s× the mean", fixed(p.MinRatio, 2), fixed(p.MaxRatio, 2)), "", t, m)
		for _, s := range p.ByShare {
			row(fmt.Sprintf("pool share %d: mean received (%d tenants)", s.Share, s.Tenants), fixed(s.MeanReceived, 1), "per share vs mean "+fixed(s.PerShareVsMean, 3), "", "", "")
		}
		t, m = met(GoalPoolQuiet)
		row(fmt.Sprintf("pool quiet p99 ms (%d tenants at %g/s)", p.QuietTenants, p.QuietRate), fixed(p.Quiet.P99Ms, 2), "p50 "+fixed(p.Quiet.P50Ms, 2), "", t, m)
		t, m = met(GoalPoolHolds)
		row(fmt.Sprintf("pool most in flight (pool of %d, %d handlers)", p.Concurrency, p.WorkerConcurrency), strconv.Itoa(p.MostInFlight), "", "", t, m)
		row(fmt.Sprintf("pool jobs/s over the window (%gms jobs)", p.JobMs), count(p.PerSecond), "pool's ceiling "+count(p.CeilingPerSecond),
			fixed(Ratio(p.PerSecond, p.CeilingPerSecond), 2), "", "")
		row("pool utilisation", fixed(100*p.Utilisation, 1)+"%", fmt.Sprintf("window %.1fs from %.1fs", p.WindowS, p.AllServedS), "", "", "")
		row("pool redis calls/forwarded job", fixed(p.RedisCallsPerJob, 3), "", "", "", "")
	}
	failed(ScenarioDownstream)
	if d := r.Downstream; d != nil && len(d.Adaptive.Phases) == 3 && len(d.Fixed.Phases) == 3 {
		a, x := d.Adaptive, d.Fixed
		fixed64 := fmt.Sprintf("fixed %d: ", d.Ceiling)
		for i, name := range []string{GoalDownFull, GoalDownHalved, GoalDownAgain} {
			pa, px := a.Phases[i], x.Phases[i]
			t, m := met(name)
			what := fmt.Sprintf("downstream %s: jobs/s of %s", pa.Name, count(pa.CapacityPerSecond))
			if i == 0 {
				what += fmt.Sprintf(" (%s tenants, adaptive %d to %d)", count(float64(d.Tenants)), d.Min, d.Ceiling)
			}
			row(what, count(pa.PerSecond), fixed64+count(px.PerSecond)+" ("+fixed(px.VsCapacity, 2)+")", fixed(pa.VsCapacity, 2), t, m)
		}
		for i, name := range []string{GoalDownBackHalved, GoalDownBackAgain} {
			t, m := met(name)
			row(fmt.Sprintf("downstream back within 30%% after the %s s", []string{"halving", "recovery"}[i]), backText(a.BackS, i+1), fixed64+backText(x.BackS, i+1), "", t, m)
		}
		row("downstream within 30% after the start s", backText(a.BackS, 0), fixed64+backText(x.BackS, 0), "", "", "")
		t, m := met(GoalDownP99)
		row(fmt.Sprintf("downstream p99 time per job ms (worst phase, floor %gms)", d.JobMs), fixed(a.WorstP99Ms, 1), fixed64+fixed(x.WorstP99Ms, 1),
			fixed(Ratio(a.WorstP99Ms, d.JobMs), 2)+"× floor", t, m)
		p99s := func(r DownstreamRun) string {
			parts := make([]string, len(r.Phases))
			for i, ph := range r.Phases {
				parts[i] = fixed(ph.TimePerJob.P99Ms, 1)
			}
			return strings.Join(parts, "/")
		}
		row("downstream p99 ms by phase", p99s(a), fixed64+p99s(x), "", "", "")
		t, m = met(GoalDownJain)
		row("downstream Jain index of done/share", fixed(a.Jain, 4), fixed64+fixed(x.Jain, 4), "", t, m)
		limits := func(r DownstreamRun) string {
			parts := make([]string, len(r.Phases))
			for i, ph := range r.Phases {
				parts[i] = strconv.FormatInt(ph.Limit, 10)
			}
			return strings.Join(parts, "/")
		}
		row("downstream limit in force by phase (median)", limits(a), fixed64+limits(x), "", "", "")
		byPhase := func(r DownstreamRun, of func(DownstreamPhase) uint64) string {
			parts := make([]string, len(r.Phases))
			for i, ph := range r.Phases {
				parts[i] = strconv.FormatUint(of(ph), 10)
			}
			return strings.Join(parts, "/")
		}
		running := func(ph DownstreamPhase) uint64 { return uint64(ph.Running) }
		waiting := func(ph DownstreamPhase) uint64 { return ph.Undelivered }
		row("downstream running at once by phase (median)", byPhase(a, running), fixed64+byPhase(x, running), "", "", "")
		row("downstream forwards not yet delivered (median)", byPhase(a, waiting), fixed64+byPhase(x, waiting), "", "", "")
		again := func(r DownstreamRun) string {
			return count(float64(r.Refused)) + ", " + count(float64(r.DoneAgain))
		}
		row("downstream refusals, jobs done on a later delivery", again(a), fixed64+again(x), "", "", "")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	lines := strings.Split(b.String(), "\n")
	b.Reset()
	for i, l := range lines {
		b.WriteString(strings.TrimRight(l, " "))
		if i < len(lines)-1 {
			b.WriteByte('\n')
		}
	}
	if e := r.EndToEnd; e != nil {
		fmt.Fprintf(&b, "\nlatency: publish (stamped in a header) → forwarded message received by a subscriber on jobs.admitted.>;\n"+
			"added = admitter's p99 − relay's p99 (difference of the two percentiles), p50 likewise.\n")
	}
	if r.Replicas != nil {
		fmt.Fprintf(&b, "\nreplicas: processes on a nats-server process of their own, started on an empty input until they share the\n"+
			"partitions; then the jobs are published at once, timed from the first publish to the last stored in ADMITTED;\n"+
			"msgs/job: what the server delivered to the forwarder's connections (/connz out_msgs); CPU: the processes'.\n")
	}
	if r.Backlog != nil {
		fmt.Fprintf(&b, "\nbacklog at start: the backlog published while no forwarder ran, timed from the forwarder's start (processes\n"+
			"started, the relay's consumer made) to its last job received; new tenant: publish → received, from the start.\n")
	}
	if r.Fair != nil {
		fmt.Fprintf(&b, "\nfair: each tenant's forwards from when a tenth of all the jobs had been forwarded and every tenant had had one\n"+
			"until the first tenant's last was.\n")
	}
	if r.Crowd != nil {
		fmt.Fprintf(&b, "\ncrowd: a tenant is done when its last job is received downstream, counted from its first job's publish;\n"+
			"ahead of its plan: its k-th job received less than (k − capacity)/rate after that publish.\n")
	}
	if r.Pool != nil {
		fmt.Fprintf(&b, "\npool: each contending tenant's forwards from when every one had had one until the first had had its last\n"+
			"(its backlog: jobs per share × its share), over its share; quiet: publish → forward of their jobs published then;\n"+
			"in flight: handlers running at once (a job holds its slot from before its handler starts until after it returns).\n")
	}
	if d := r.Downstream; d != nil {
		fmt.Fprintf(&b, "\ndownstream: jobs done a second over each phase's second half (phases of %gs: full, halved, full again), against\n"+
			"what the downstream can do; back: the first %gs bin from which every one for %gs is within 30%% of capacity;\n"+
			"time per job: the downstream's own, jobs done; Jain: each tenant's jobs done over its share, once every one had one.\n", d.PhaseS, d.BinS, d.SpanS)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	if len(r.Failures) > 0 {
		fmt.Fprintf(&b, "\nfailed: %s (%d of %d scenarios): no figures, no goals; each error in full is in the progress above and in the JSON's failures.\n",
			r.failed(), len(r.Failures), len(r.Options.Scenarios))
	}
	_, err := w.Write(b.Bytes())
	return err
}

// failed names the scenarios that failed: sync, pool.
func (r *Report) failed() string {
	names := make([]string, len(r.Failures))
	for i, f := range r.Failures {
		names[i] = f.Scenario
	}
	return strings.Join(names, ", ")
}

// WriteJSON writes the report, indented, to path.
func (r *Report) WriteJSON(path string) error {
	b, err := r.MarshalIndent()
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// MarshalIndent is the report's JSON.
func (r *Report) MarshalIndent() ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // keep ">=" readable
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return nil, fmt.Errorf("bench: encode report: %w", err)
	}
	return b.Bytes(), nil
}

// ReadJSON reads a report written by WriteJSON.
func ReadJSON(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Report
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("bench: decode %s: %w", path, err)
	}
	return &r, nil
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// count formats v rounded to an integer with thousands separators: 12,345.
func count(v float64) string {
	n := int64(math.Round(v))
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}

func fixed(v float64, digits int) string { return strconv.FormatFloat(v, 'f', digits, 64) }

func signed(v float64, digits int) string {
	s := fixed(v, digits)
	if !strings.HasPrefix(s, "-") {
		s = "+" + s
	}
	return s
}

func trimFloat(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// target prints a goal's number with at least one decimal: 2.0, 0.85.
func target(v float64) string {
	if v == math.Trunc(v) {
		return fixed(v, 1)
	}
	return trimFloat(v)
}

func pair(l Latency) string { return fixed(l.P50Ms, 2) + "/" + fixed(l.P99Ms, 2) }
