package bench

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// sample is a report with every section, made up.
func sample() *Report {
	r := &Report{
		Meta: Meta{Timestamp: "2026-11-21T21:00:00Z", GoVersion: "go1.26.8", GOOS: "linux", GOARCH: "amd64", NumCPU: 2,
			GOMAXPROCS: 2, GitCommit: "abc123", GitDirty: true, RedisVersion: "7.0.15", NATSServerVersion: "2.15.2", ElapsedS: 101.5},
		Decisions: &Decisions{Concurrency: 64, Tenants: 1000,
			Ours:      DecisionRun{Name: "ours", Calls: 400000, Seconds: 5.001, PerSecond: 79984.3, Latency: Latency{Samples: 400000, P50Ms: 0.8, P99Ms: 2.1, MaxMs: 9}},
			RedisRate: DecisionRun{Name: "redis_rate", Calls: 300000, Seconds: 5, PerSecond: 60000, Latency: Latency{Samples: 300000, P50Ms: 0.9, P99Ms: 2.5, MaxMs: 12}},
			Ceiling:   DecisionRun{Name: "ceiling", Calls: 800000, Seconds: 5, PerSecond: 160000, Latency: Latency{Samples: 800000, P50Ms: 0.4, P99Ms: 0.9, MaxMs: 3}},
			Kinds: []DecisionRun{{Name: "ours bucket", Calls: 390000, Seconds: 5, PerSecond: 78000, Latency: Latency{Samples: 390000, P50Ms: 0.8, P99Ms: 2.1, MaxMs: 9}},
				{Name: "ours window", Calls: 200000, Seconds: 5, PerSecond: 40000, Latency: Latency{Samples: 200000, P50Ms: 1.5, P99Ms: 3, MaxMs: 10}},
				{Name: "ours quota", Calls: 380000, Seconds: 5, PerSecond: 76000, Latency: Latency{Samples: 380000, P50Ms: 0.8, P99Ms: 2.2, MaxMs: 9}}},
			VsRedisRate: 1.3331, VsCeiling: 0.4999,
			Batched:          DecisionRun{Name: "ours batched", Calls: 40000, Seconds: 5, PerSecond: 640000, Latency: Latency{Samples: 40000, P50Ms: 1.2, P99Ms: 4, MaxMs: 10}},
			BatchedVsCeiling: 4},
		Sync: &Sync{Concurrency: 64, Tenants: 1000,
			HTTP:       DecisionRun{Name: "admitter http", Calls: 60000, Seconds: 5, PerSecond: 12000, Latency: Latency{Samples: 60000, P50Ms: 4.2, P99Ms: 16.5, MaxMs: 30}},
			NATS:       DecisionRun{Name: "admitter nats", Calls: 100000, Seconds: 5, PerSecond: 20000, Latency: Latency{Samples: 100000, P50Ms: 2.7, P99Ms: 9.4, MaxMs: 20}},
			Peer:       DecisionRun{Name: "redis_rate net/http", Calls: 55000, Seconds: 5, PerSecond: 11000, Latency: Latency{Samples: 55000, P50Ms: 5.1, P99Ms: 15.6, MaxMs: 31}},
			HTTPVsPeer: 1.0909, NATSVsPeer: 1.8182},
		EndToEnd: &EndToEnd{Tenants: 1000,
			Relay:    Throughput{Jobs: 50000, Seconds: 0.6, PerSecond: 83333.3},
			Admitter: Throughput{Jobs: 50000, Seconds: 2.2, PerSecond: 22727.3},
			Ratio:    0.2727,
			Redis:    RedisCost{CallsPerJob: 0.12, CPUMicrosPerJob: 4.5, Keys: 1000, BytesPerTenant: 180, BytesPerJobPerS: 7.9},
			Latency: PacedLatency{RatePerSecond: 41666.7, DurationS: 10,
				Relay:      Latency{Samples: 400000, P50Ms: 2.1, P99Ms: 10.5, MaxMs: 30},
				Admitter:   Latency{Samples: 400000, P50Ms: 2.9, P99Ms: 11.5, MaxMs: 40},
				AddedP99Ms: 1, AddedP50Ms: 0.8}},
		Overload: &Overload{Capacity: 100, RatePerSecond: 200, PublishRate: 2000, DurationS: 30, TailS: 5, Published: 60000,
			AdmittedAtEnd: 6090, SinceFirstS: 29.99, Expected: 6098, ErrorPct: -0.131, AdmittedTotal: 7090, TailPerSecond: 200,
			AttemptsMean: 1.98, AttemptsMax: 3, DelayMs: Latency{Samples: 7090, P50Ms: 15000, P99Ms: 29000, MaxMs: 29800}},
		Fair: &Fair{Tenants: 1000, JobsPerTenant: 200, Settings: "ADMITTER_QUANTUM=5", PublishS: 1.5, FirstForwardS: 0.05, DrainS: 8.2,
			DrainPerSecond: 24390.2, Forwarded: 200000, AllServed: 15000, AllServedS: 1.1, StartLeader: TenantCount{Tenant: "t0001", Count: 40},
			WindowFrom: 20000, WindowTo: 160000, WindowS: 5.6, PerSecond: 25000, Mean: 140, Min: 130, Max: 150, Jain: 0.9951,
			MaxDeviationPct: 12.5, WithinPct: 97.3, FirstTenth: 0.99, LastTenth: 1.01,
			Lowest: []TenantCount{{"t0003", 130}}, Highest: []TenantCount{{"t0999", 150}}, AdmitterCPUS: 6, NATSCPUS: 5},
		Crowd: &Crowd{Tenants: 2000, JobsPerTenant: 20, Capacity: 5, RatePerSecond: 5, PlanS: 3, PublishS: 0.5, Forwarded: 40000,
			DoneP50S: 3.2, DoneP99S: 3.9, DoneMaxS: 4, SlowestTenant: "t1999", DonePerSecond: []int{0, 0, 0, 2000},
			FirstP50S: 0.2, FirstMaxS: 0.4, OverallS: 4.4, PacingViolations: 2, EarliestMs: 12.5, AdmitterCPUS: 3, NATSCPUS: 2},
		Downstream: &Downstream{Tenants: 200, Shares: []int64{1, 2, 4}, JobsPerShare: 109, Backlog: 50685, Ceiling: 64, Min: 2, Handlers: 128,
			JobMs: 20, Knee: 8, RefusesAbove: 16, RefusalMs: 10, CapacityPerSecond: 400, PhaseS: 20, BinS: 0.5, SpanS: 5,
			Adaptive: DownstreamRun{Pool: "{concurrency: 64, lease: 30s, adaptive: {min: 2}}", PublishS: 1.2,
				Phases: []DownstreamPhase{
					{Name: "full", FromS: 0, ToS: 20, CapacityPerSecond: 400, PerSecond: 376, VsCapacity: 0.94, TimePerJob: Latency{Samples: 7000, P50Ms: 21, P99Ms: 38.5, MaxMs: 60}, Refused: 10, Limit: 9, InFlight: 9, Running: 8},
					{Name: "halved", FromS: 20, ToS: 40, CapacityPerSecond: 200, PerSecond: 130, VsCapacity: 0.65, TimePerJob: Latency{Samples: 3000, P50Ms: 21, P99Ms: 61, MaxMs: 80}, Refused: 40, Limit: 5},
					{Name: "full again", FromS: 40, ToS: 60, CapacityPerSecond: 400, PerSecond: 380, VsCapacity: 0.95, TimePerJob: Latency{Samples: 7000, P50Ms: 21, P99Ms: 30, MaxMs: 50}, Refused: 0, Limit: 9}},
				BackS: []float64{3.5, -1, 4}, Jain: 0.9812, JainFromS: 5.5, MinRatio: 0.71, MaxRatio: 1.3, Done: 17000, Refused: 50, DoneAgain: 48,
				TimePerJob: Latency{Samples: 17000, P50Ms: 21, P99Ms: 40, MaxMs: 80}, WorstP99Ms: 61, DonePerBin: []int{10, 150, 190},
				Limits:       []LimitSample{{AtS: 0.5, Limit: 2, InFlight: 2, Reason: "starting"}, {AtS: 1, Limit: 9, InFlight: 8, FloorMs: 21.5, TimePerJobMs: 22, Reason: "growing"}},
				AdmitterCPUS: 20, NATSCPUS: 10, BenchCPUS: 8},
			Fixed: DownstreamRun{Pool: "{concurrency: 64, lease: 30s}", PublishS: 1.1,
				Phases: []DownstreamPhase{
					{Name: "full", FromS: 0, ToS: 20, CapacityPerSecond: 400, PerSecond: 88, VsCapacity: 0.22, TimePerJob: Latency{Samples: 1700, P50Ms: 180, P99Ms: 180.5, MaxMs: 181}, Refused: 9000, Limit: 64},
					{Name: "halved", FromS: 20, ToS: 40, CapacityPerSecond: 200, PerSecond: 80, VsCapacity: 0.4, TimePerJob: Latency{Samples: 1600, P50Ms: 100, P99Ms: 100.5, MaxMs: 101}, Refused: 9000, Limit: 64},
					{Name: "full again", FromS: 40, ToS: 60, CapacityPerSecond: 400, PerSecond: 88, VsCapacity: 0.22, TimePerJob: Latency{Samples: 1700, P50Ms: 180, P99Ms: 180.5, MaxMs: 181}, Refused: 9000, Limit: 64}},
				BackS: []float64{-1, 1, -1}, Jain: 0.97, Done: 5000, Refused: 27000, DoneAgain: 12, WorstP99Ms: 180.5, DonePerBin: []int{40, 44},
				Limits: []LimitSample{{AtS: 0.5, Limit: 64, InFlight: 64}}}},
		Replicas: &Replicas{Jobs: 50000, Tenants: 1000, Partitions: 8,
			Relay: ReplicaRun{Name: "relay", Partitions: 1, PublishS: 0.7, Throughput: Throughput{Jobs: 50000, Seconds: 0.8, PerSecond: 62500},
				ServerMsgsPerJob: 2.01, ForwarderMsgsPerJob: 2.02, NATSCPUMicrosPerJob: 15},
			Runs: []ReplicaRun{
				{Name: "1 admitter, 1 partition", Replicas: 1, Partitions: 1, SharedS: 0.1, Held: []int{1}, PublishS: 0.7,
					Throughput: Throughput{Jobs: 50000, Seconds: 1.6667, PerSecond: 30000}, ServerMsgsPerJob: 2.02, ForwarderMsgsPerJob: 1.01, NATSCPUMicrosPerJob: 20, AdmitterCPUMicrosPerJob: 25},
				{Name: "1 admitter, 8 partitions", Replicas: 1, Partitions: 8, SharedS: 0.1, Held: []int{8}, PublishS: 0.7,
					Throughput: Throughput{Jobs: 50000, Seconds: 1.7857, PerSecond: 28000}, ServerMsgsPerJob: 2.05, ForwarderMsgsPerJob: 1.01, NATSCPUMicrosPerJob: 21, AdmitterCPUMicrosPerJob: 26},
				{Name: "2 admitter replicas, 8 partitions", Replicas: 2, Partitions: 8, SharedS: 2.1, Held: []int{4, 4}, PublishS: 0.7,
					Throughput: Throughput{Jobs: 50000, Seconds: 2.0833, PerSecond: 24000}, ServerMsgsPerJob: 2.06, ForwarderMsgsPerJob: 1.02, NATSCPUMicrosPerJob: 22, AdmitterCPUMicrosPerJob: 30},
				{Name: "4 admitter replicas, 8 partitions", Replicas: 4, Partitions: 8, SharedS: 1.2, Held: []int{2, 2, 2, 2}, PublishS: 0.7,
					Throughput: Throughput{Jobs: 50000, Seconds: 2.2727, PerSecond: 22000}, ServerMsgsPerJob: 2.6, ForwarderMsgsPerJob: 1.05, NATSCPUMicrosPerJob: 23.1, AdmitterCPUMicrosPerJob: 33.8,
					RedisCallsPerJob: 0.25, AdmitterIdleMsPerS: 40, NATSIdleMsPerS: 8}}},
		Backlog: &Backlog{Jobs: 100000, Tenants: 10000, NewTenant: "newcomer", NewRate: 2, Partitions: 8,
			Relay: BacklogRun{Name: "relay", Partitions: 1, PublishS: 1.8, FirstS: 0.01, DrainS: 1.5, Received: 100000, PerSecond: 66666.7,
				New: Latency{Samples: 3, P50Ms: 700, P99Ms: 1400, MaxMs: 1400}, NATSCPUS: 1.5},
			Runs: []BacklogRun{
				{Name: "1 admitter, 1 partition", Replicas: 1, Partitions: 1, PublishS: 1.8, FirstS: 0.1, DrainS: 4.9, Received: 100000, PerSecond: 20408.2,
					New: Latency{Samples: 10, P50Ms: 2000, P99Ms: 4400, MaxMs: 4400}, AdmitterCPUS: 4, NATSCPUS: 2},
				{Name: "1 admitter, 8 partitions", Replicas: 1, Partitions: 8, PublishS: 1.8, FirstS: 0.1, DrainS: 2.5, Received: 100000, PerSecond: 40000,
					New: Latency{Samples: 5, P50Ms: 300, P99Ms: 800, MaxMs: 800}, AdmitterCPUS: 3, NATSCPUS: 2},
				{Name: "2 admitter replicas, 8 partitions", Replicas: 2, Partitions: 8, PublishS: 1.8, FirstS: 0.2, DrainS: 2.2, Received: 100000, PerSecond: 45454.5,
					New: Latency{Samples: 4, P50Ms: 300, P99Ms: 900, MaxMs: 900}, NewMissing: 1, AdmitterCPUS: 3.5, NATSCPUS: 2,
					Held: []PartitionsHeld{{AtS: 0.1, Held: []int{0, 0}}, {AtS: 0.3, Held: []int{8, 0}}, {AtS: 1.4, Held: []int{4, 4}}}, SharedS: 1.4}}},
		Notes:   []string{"a note"},
		Options: optionsJSON(Defaults()),
	}
	r.Replicas.ReplicaFigures()
	r.Backlog.BacklogRatios()
	r.EvaluateGoals()
	return r
}

func TestEvaluateGoals(t *testing.T) {
	r := sample()
	want := map[string]bool{
		GoalVsRedisRate:      false, // 1.33 < 2
		GoalVsCeiling:        false, // 0.50 < 0.8
		GoalBatched:          true,  // 4 ≥ 3
		GoalSyncHTTP:         true,  // 1.09 ≥ 1
		GoalEndToEnd:         false, // 0.27 < 0.85
		GoalAddedP99:         true,  // 1ms ≤ 1ms
		GoalOverloadErr:      true,  // |−0.13%| ≤ 2%
		GoalAttempts:         true,  // 1.98 ≤ 2: one decision at its turn, at most one before
		GoalFairDev:          false, // 12.5% > 10%
		GoalFairJain:         true,  // 0.9951 ≥ 0.99
		GoalCrowdDone:        true,  // 4s ≤ 3s plan + 1s
		GoalCrowdPacing:      false, // 2 jobs ahead of their plan > 0
		GoalDownFull:         true,  // 0.94 ≥ 0.7
		GoalDownHalved:       false, // 0.65 < 0.7
		GoalDownAgain:        true,  // 0.95 ≥ 0.7
		GoalDownBackHalved:   false, // never (−1), although −1 ≤ 10
		GoalDownBackAgain:    true,  // 4s ≤ 10s
		GoalDownP99:          false, // 61ms > 3 × 20ms
		GoalDownJain:         true,  // 0.9812 ≥ 0.95
		GoalReplicasTwo:      false, // 24,000 / 28,000 = 0.86 < 0.9
		GoalReplicasMsgs:     false, // 2.6 > 2.5
		GoalReplicasMsgsFlat: false, // 2.6 / 2.05: +26.8% beyond ±20%
		GoalReplicasNATSCPU:  true,  // 23.1 / 21: +10% ≤ +20%
		GoalReplicasAdmCPU:   false, // 33.8 / 26: +30% > +20%
		GoalBacklogRate("1 admitter, 1 partition"):             false, // 20,408 / 66,667 = 0.31 < 0.5
		GoalBacklogNewP99("1 admitter, 1 partition"):           false, // 4.4s > 1s
		GoalBacklogRate("1 admitter, 8 partitions"):            true,  // 0.6 ≥ 0.5
		GoalBacklogNewP99("1 admitter, 8 partitions"):          true,  // 800ms ≤ 1s
		GoalBacklogRate("2 admitter replicas, 8 partitions"):   true,  // 0.68 ≥ 0.5
		GoalBacklogNewP99("2 admitter replicas, 8 partitions"): false, // 900ms, but a job never received
	}
	if len(r.Goals) != len(want) {
		t.Fatalf("%d goals, want %d: %+v", len(r.Goals), len(want), r.Goals)
	}
	for name, met := range want {
		g, ok := r.Goal(name)
		if !ok || g.Met != met {
			t.Errorf("goal %q: %+v, want met=%v", name, g, met)
		}
	}
	// boundaries count as met; the ±2% goal is symmetric
	for _, c := range []struct {
		value float64
		op    string
		tgt   float64
		met   bool
	}{{2, ">=", 2, true}, {1.999, ">=", 2, false}, {2, "<=", 2, true}, {-2, "abs<=", 2, true}, {-2.01, "abs<=", 2, false}, {2.01, "abs<=", 2, false}} {
		if g := goal("x", c.value, c.op, c.tgt); g.Met != c.met {
			t.Errorf("%g %s %g: met=%v, want %v", c.value, c.op, c.tgt, g.Met, c.met)
		}
	}
	// the crowd's goal follows its plan: a second more than the plan's own pace
	r.Crowd.PlanS, r.Crowd.DoneMaxS, r.Crowd.PacingViolations = 1, 2.01, 0
	r.EvaluateGoals()
	if g, _ := r.Goal(GoalCrowdDone); g.Target != 2 || g.Met {
		t.Errorf("crowd done within plan 1s + 1s: %+v", g)
	}
	if g, _ := r.Goal(GoalCrowdPacing); !g.Met {
		t.Errorf("crowd with no job ahead of its plan: %+v", g)
	}
	r.Fair.MaxDeviationPct, r.Fair.Jain = 10, 0.9899
	r.EvaluateGoals()
	if g, _ := r.Goal(GoalFairDev); !g.Met {
		t.Errorf("fair at 10%% deviation: %+v", g)
	}
	if g, _ := r.Goal(GoalFairJain); g.Met {
		t.Errorf("fair Jain 0.9899: %+v", g)
	}
	r.Downstream.Adaptive.BackS[1], r.Downstream.Adaptive.WorstP99Ms = 10, 60
	r.EvaluateGoals()
	if g, _ := r.Goal(GoalDownBackHalved); !g.Met {
		t.Errorf("downstream back 10s after the halving: %+v", g)
	}
	if g, _ := r.Goal(GoalDownP99); !g.Met || g.Target != 60 {
		t.Errorf("downstream p99 of 60ms, three floors of 20ms: %+v", g)
	}
	r.Decisions, r.Sync, r.EndToEnd, r.Fair, r.Crowd, r.Downstream, r.Replicas, r.Backlog = nil, nil, nil, nil, nil, nil, nil, nil
	r.EvaluateGoals()
	if len(r.Goals) != 2 {
		t.Errorf("only overload: %d goals, want 2", len(r.Goals))
	}
}

func TestWriteTable(t *testing.T) {
	var b bytes.Buffer
	if err := sample().WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	t.Log("\n" + out)
	lines := strings.Split(out, "\n")
	if !strings.HasPrefix(lines[0], "scenario") || !strings.Contains(lines[0], "peer/ceiling") || !strings.Contains(lines[0], "met") {
		t.Errorf("header: %q", lines[0])
	}
	for _, want := range [][]string{
		{"decisions/s (c=64)", "79,984", "redis_rate 60,000", "1.33", ">=2.0", "no"},
		{"decisions/s (c=64)", "79,984", "ceiling 160,000", "0.50", ">=0.8", "no"},
		{"sync http decisions/s (c=64)", "12,000", "redis_rate net/http 11,000", "1.09", ">=1.0", "yes"},
		{"sync http p50/p99 ms", "4.20/16.50", "redis_rate net/http 5.10/15.60"},
		{"sync nats decisions/s (c=64)", "20,000", "redis_rate net/http 11,000", "1.82"},
		{"sync nats p50/p99 ms", "2.70/9.40"},
		{"end-to-end jobs/s (1,000 tenants)", "22,727", "relay 83,333", "0.27", ">=0.85", "no"},
		{"latency p99 ms", "11.50", "relay 10.50", "+1.00ms", "<=1.0ms", "yes"},
		{"decisions/s batched (16 jobs/call)", "640,000", "ceiling 160,000", "4.00", ">=3.0", "yes"},
		{"redis per forwarded job", "0.120 calls", "4.5 µs of redis CPU"},
		{"redis after the drain", "1,000 keys", "180 B/tenant", "7.90 B per job/s"},
		{"overload admitted (30s at 2,000/s)", "6,090", "expected 6098.0", "-0.13%", "±2.0%", "yes"},
		{"overload attempts/admitted job", "1.98", "max 3", "<=2.0", "yes"},
		{"overload Admit-Delay-Ms p50/p99", "15000/29000"},
		{"decisions/s bucket (c=64, aof)", "78,000"},
		{"decisions/s window (c=64, aof)", "40,000", "ours bucket 78,000", "0.51"},
		{"decisions/s quota (c=64, aof)", "76,000", "ours bucket 78,000", "0.97"},
		{"fair jobs/s over the window (1,000 tenants × 200, ADMITTER_QUANTUM=5)", "25,000", "140,000 forwards in 5.6s"},
		{"fair max deviation from the mean", "12.5%", "min 130, mean 140.0, max 150", "<=10.0%", "no"},
		{"fair Jain index", "0.9951", "97.3% of tenants within ±10%", ">=0.99", "yes"},
		{"fair first/last tenth published vs mean", "0.99/1.01", "drained in 8.2s"},
		{"fair start-up: all tenants served after", "1.10s", "15,000 forwards, t0001 had 40"},
		{"crowd slowest tenant done s (2,000 × 20 at {5, 5/s})", "4.00", "plan 3.0s", "<=4.0s", "yes"},
		{"crowd tenants done p50/p99 s", "3.20/3.90", "0 late"},
		{"crowd jobs ahead of their plan", "2", "<=0.0", "no"},
		{"downstream full: jobs/s of 400 (200 tenants, adaptive 2 to 64)", "376", "fixed 64: 88 (0.22)", "0.94", ">=0.7", "yes"},
		{"downstream halved: jobs/s of 200", "130", "fixed 64: 80 (0.40)", "0.65", ">=0.7", "no"},
		{"downstream full again: jobs/s of 400", "380", "fixed 64: 88 (0.22)", "0.95", ">=0.7", "yes"},
		{"downstream back within 30% after the halving s", "never", "fixed 64: 1.0s", "<=10.0s", "no"},
		{"downstream back within 30% after the recovery s", "4.0s", "fixed 64: never", "<=10.0s", "yes"},
		{"downstream within 30% after the start s", "3.5s", "fixed 64: never"},
		{"downstream p99 time per job ms (worst phase, floor 20ms)", "61.0", "fixed 64: 180.5", "3.05× floor", "<=60.0ms", "no"},
		{"downstream p99 ms by phase", "38.5/61.0/30.0", "fixed 64: 180.5/100.5/180.5"},
		{"downstream Jain index of done/share", "0.9812", "fixed 64: 0.9700", ">=0.95", "yes"},
		{"downstream limit in force by phase (median)", "9/5/9", "fixed 64: 64/64/64"},
		{"downstream refusals, jobs done on a later delivery", "50, 48", "fixed 64: 27,000, 12"},
		{"downstream running at once by phase (median)", "8/0/0", "fixed 64: 0/0/0"},
		{"downstream forwards not yet delivered (median)", "0/0/0"},
		{"replicas jobs/s: relay (50,000 jobs, 1,000 tenants)", "62,500"},
		{"replicas jobs/s: 1 admitter, 1 partition", "30,000", "relay 62,500", "1.07× one"},
		{"replicas jobs/s: 1 admitter, 8 partitions", "28,000", "relay 62,500", "1.00× one"},
		{"replicas jobs/s: 2 admitter replicas, 8 partitions", "24,000", "relay 62,500", "0.86× one", ">=0.9", "no"},
		{"replicas jobs/s: 4 admitter replicas, 8 partitions", "22,000", "relay 62,500", "0.79× one"},
		{"replicas runs in order", "1×P1 1×P8 2×P8 4×P8"},
		{"replicas server msgs/job at 4 replicas", "2.60", "relay 2.01", "<=2.5", "no"},
		{"replicas server msgs/job 4 vs 1", "+26.8%", "±20.0%", "no"},
		{"replicas nats-server CPU/job 4 vs 1", "+10.0%", "<=+20.0%", "yes"},
		{"replicas admitters CPU/job 4 vs 1", "+30.0%", "<=+20.0%", "no"},
		{"replicas server msgs/job by run", "2.02/2.05/2.06/2.60", "relay 2.01"},
		{"replicas nats-server µs/job by run", "20.0/21.0/22.0/23.1", "relay 15.0"},
		{"replicas admitters µs/job by run", "25.0/26.0/30.0/33.8"},
		{"replicas partitions shared after s", "0.10/0.10/2.10/1.20"},
		{"replicas redis calls/job by run", "0.000/0.000/0.000/0.250"},
		{"replicas idle CPU ms/s by run", "0/0/0/40", "nats-server 0/0/0/8"},
		{"backlog at start: relay drain s (100,000 jobs, 10,000 tenants)", "1.50", "66,667 jobs/s"},
		{"backlog at start: relay new tenant p50/p99 ms", "700/1400", "3 jobs at 2/s"},
		{"backlog at start: 1 admitter, 1 partition drain s", "4.90", "20,408 jobs/s vs relay 66,667", "0.31", ">=0.5", "no"},
		{"backlog at start: 1 admitter, 1 partition new tenant p99 ms", "4400", "p50 2000 over 10 jobs", "<=1000.0ms", "no"},
		{"backlog at start: 1 admitter, 8 partitions drain s", "2.50", "40,000 jobs/s vs relay 66,667", "0.60", ">=0.5", "yes"},
		{"backlog at start: 1 admitter, 8 partitions new tenant p99 ms", "800", "p50 300 over 5 jobs", "<=1000.0ms", "yes"},
		{"backlog at start: 2 admitter replicas, 8 partitions new tenant p99 ms", "900", "p50 300 over 4 jobs, 1 missing", "<=1000.0ms", "no"},
		{"backlog at start: 2 admitter replicas, 8 partitions partitions held after s", "1.40", "first job after 0.20s"},
	} {
		found := false
		for _, l := range lines {
			ok := true
			at := 0
			for _, cell := range want { // cells in order on one line
				i := strings.Index(l[at:], cell)
				if i < 0 {
					ok = false
					break
				}
				at += i + len(cell)
			}
			found = found || ok
		}
		if !found {
			t.Errorf("no line with %q", want)
		}
	}
	if !strings.Contains(out, "admitter's p99 − relay's p99") || !strings.Contains(out, "note: a note") || !strings.Contains(out, "every one for 5s is within 30% of capacity") {
		t.Errorf("the latency definition or the notes are missing")
	}
	// columns line up: every "ratio" cell starts where the header's does
	col := strings.Index(lines[0], "ratio")
	for _, l := range lines[1:3] {
		if len(l) <= col || l[col-1] != ' ' || l[col] == ' ' {
			t.Errorf("ratio column not aligned at %d in %q", col, l)
		}
	}
}

func TestWriteTablePartial(t *testing.T) {
	r := sample()
	r.Decisions, r.Sync, r.Overload, r.Notes = nil, nil, nil, nil
	r.EvaluateGoals()
	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); strings.Contains(out, "decisions/s") || strings.Contains(out, "overload") || strings.Contains(out, "sync") || !strings.Contains(out, "end-to-end") {
		t.Errorf("partial table:\n%s", out)
	}
}

func TestJSONRoundTrip(t *testing.T) {
	r := sample()
	path := filepath.Join(t.TempDir(), "bench-results.json")
	if err := r.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	back, err := ReadJSON(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, r) {
		a, _ := json.Marshal(r)
		b, _ := json.Marshal(back)
		t.Errorf("round trip differs:\n%s\n%s", a, b)
	}
	raw, _ := os.ReadFile(path)
	for _, key := range []string{`"jain_index"`, `"max_deviation_pct"`, `"done_max_s"`, `"pacing_violations"`, `"timestamp"`, `"go_version"`, `"num_cpu"`, `"git_commit"`, `"ours_vs_redis_rate"`, `"http_vs_redis_rate_net_http"`, `"redis_rate_net_http"`, `"admitter_vs_relay"`, `"added_p99_ms"`, `"error_pct"`, `"attempts_mean"`, `"p99_ms"`, `"goals"`, `"limit_trace"`, `"back_within_30pct_s"`, `"steady_vs_capacity"`,
		`"server_msgs_per_job"`, `"two_vs_one"`, `"nats_server_cpu_us_per_job"`, `"backlog_at_start"`, `"new_tenant"`, `"drain_s"`, `"vs_relay"`} {
		if !bytes.Contains(raw, []byte(key)) {
			t.Errorf("JSON has no %s", key)
		}
	}
	// absent sections stay absent
	r.Decisions = nil
	b, err := r.MarshalIndent()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte(`"decisions": {`)) || !bytes.Contains(b, []byte(`"op": ">="`)) {
		t.Errorf("a skipped scenario is written: %s", b)
	}
	// unknown fields are refused: a file from another program is not mistaken for a report
	bad := filepath.Join(t.TempDir(), "bad.json")
	_ = os.WriteFile(bad, []byte(`{"meta":{},"surprise":1}`), 0o644)
	if _, err := ReadJSON(bad); err == nil {
		t.Errorf("ReadJSON accepted an unknown field")
	}
}

func TestCount(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 999: "999", 1000: "1,000", 12345.6: "12,346", 1234567: "1,234,567", -1234: "-1,234"} {
		if got := count(v); got != want {
			t.Errorf("count(%g) = %q, want %q", v, got, want)
		}
	}
	if target(2) != "2.0" || target(0.85) != "0.85" || target(1.5) != "1.5" {
		t.Errorf("target: %q %q %q", target(2), target(0.85), target(1.5))
	}
}
