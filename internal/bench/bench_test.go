package bench_test

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/admitter/admitter/internal/bench"
)

// TestQuickRun runs the whole command in -quick mode against real servers it starts itself (a
// redis-server child, in-process nats-servers) and checks that the JSON holds every figure with
// sane values. Timing goals are not checked: met or not, they are results. Phases are shortened
// further and the paced rates kept low so that it stays fast under the race detector on a busy
// 2-core machine.
func TestQuickRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers and runs for seconds")
	}
	path := filepath.Join(t.TempDir(), "results.json")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	begin := time.Now()
	code := bench.Main(ctx, []string{"-quick", "-json", path,
		"-duration", "300ms", "-warmup", "100ms", "-jobs", "1000", "-latency-duration", "1s", "-latency-rate", "300",
		"-overload-duration", "1500ms", "-overload-tail", "500ms", "-flood-jobs", "3000", "-flood-quiet", "5", "-flood-duration", "1s",
		"-large-jobs", "20", "-large-kib", "256", "-fair-tenants", "20", "-fair-jobs", "50", "-crowd-tenants", "50", "-crowd-jobs", "10",
		"-pool-tenants", "12", "-pool-jobs", "10", "-pool-concurrency", "4", "-pool-quiet", "2",
		"-downstream-tenants", "6", "-downstream-phase", "2s", "-replicas-jobs", "1000", "-replicas-tenants", "50",
		"-backlog-jobs", "1000", "-backlog-tenants", "100"}, &out, &errOut)
	t.Logf("exit %d after %v\n%s%s", code, time.Since(begin).Round(time.Millisecond), out.String(), errOut.String())
	if code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
	for _, want := range []string{"start redis-server", "decisions: ours", "decisions: redis_rate", "decisions: ceiling",
		"sync: admitter http", "sync: admitter nats", "sync: redis_rate net/http",
		"decisions: ours bucket", "decisions: ours window", "decisions: ours quota", "decisions: ours mixed",
		"relay drains", "admitter drains", "latency through relay", "latency through admitter", "large: relay drains", "large: admitter drains", "overload:", "deep flood:",
		"fair: publish 1,000 jobs tenant by tenant", "fair: the admitter drains them, with ADMITTER_QUANTUM=5", "fair: start-up", "crowd: 50 tenants fire 10 jobs each",
		"pool: publish 280 jobs tenant by tenant", "pool: 12 tenants share a pool of 4", "pool: Jain",
		"downstream (adaptive): publish", "downstream (fixed 64): 6 tenants on a pool", "downstream (adaptive): limit in force by second",
		"replicas: relay drains 1,000 jobs of 50 tenants", "replicas: 4 admitter replicas, 8 partitions drain", "backlog at start: relay drains",
		"backlog at start: 2 admitter replicas, 8 partitions drain",
		"scenario", "peer/ceiling", "figures written to " + path} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output has no %q", want)
		}
	}

	r, err := bench.ReadJSON(path)
	if err != nil {
		t.Fatal(err)
	}
	m := r.Meta
	if _, err := time.Parse(time.RFC3339, m.Timestamp); err != nil || !strings.HasPrefix(m.GoVersion, "go") ||
		m.NumCPU < 1 || m.GOMAXPROCS < 1 || m.RedisVersion == "" || m.NATSServerVersion == "" || !m.Quick || m.ElapsedS <= 0 {
		t.Errorf("meta: %+v", m)
	}
	latency := func(what string, l bench.Latency) {
		t.Helper()
		if l.Samples < 1 || l.P50Ms <= 0 || l.P50Ms > l.P99Ms || l.P99Ms > l.MaxMs {
			t.Errorf("%s latency not sane: %+v", what, l)
		}
	}

	d := r.Decisions
	if d == nil {
		t.Fatal("no decisions section")
	}
	if len(d.Kinds) != 4 || d.Kinds[0].Name != "ours bucket" || d.Kinds[1].Name != "ours window" || d.Kinds[2].Name != "ours quota" || d.Kinds[3].Name != "ours mixed" {
		t.Errorf("decisions by kind: %+v", d.Kinds)
	}
	for _, run := range append([]bench.DecisionRun{d.Ours, d.RedisRate, d.Ceiling}, d.Kinds...) {
		if run.Calls < 1 || run.PerSecond <= 0 || run.Seconds <= 0 || run.Denied != 0 {
			t.Errorf("decisions %s: %+v", run.Name, run)
		}
		latency("decisions "+run.Name, run.Latency)
	}
	if d.Concurrency != 64 || d.Tenants != 1000 || d.VsRedisRate <= 0 || d.VsCeiling <= 0 {
		t.Errorf("decisions: %+v", d)
	}

	s := r.Sync
	if s == nil {
		t.Fatal("no sync section")
	}
	for _, run := range []bench.DecisionRun{s.HTTP, s.NATS, s.Peer} {
		if run.Calls < 1 || run.PerSecond <= 0 || run.Seconds <= 0 || run.Denied != 0 {
			t.Errorf("sync %s: %+v", run.Name, run)
		}
		latency("sync "+run.Name, run.Latency)
	}
	if s.Concurrency != 64 || s.Tenants != 1000 || s.HTTPVsPeer <= 0 || s.NATSVsPeer <= 0 {
		t.Errorf("sync: %+v", s)
	}

	e := r.EndToEnd
	if e == nil {
		t.Fatal("no end-to-end section")
	}
	for name, tp := range map[string]bench.Throughput{"relay": e.Relay, "admitter": e.Admitter, "relay+msgid": e.RelayMsgID, "admitter x2": e.Replicas, "admitter cluster": e.Cluster} {
		if tp.Jobs != 1000 || tp.PerSecond <= 0 || tp.Seconds <= 0 {
			t.Errorf("end to end %s: %+v", name, tp)
		}
	}
	if e.Ratio <= 0 || e.Latency.RatePerSecond != 300 {
		t.Errorf("end to end: ratio %g, paced at %g/s", e.Ratio, e.Latency.RatePerSecond)
	}
	latency("relay", e.Latency.Relay)
	latency("admitter", e.Latency.Admitter)
	if got := e.Latency.Admitter.P99Ms - e.Latency.Relay.P99Ms; abs(got-e.Latency.AddedP99Ms) > 0.002 {
		t.Errorf("added p99 %g, want admitter p99 − relay p99 = %g", e.Latency.AddedP99Ms, got)
	}

	rp := r.Replicas
	if rp == nil {
		t.Fatal("no replicas section")
	}
	if rp.Jobs != 1000 || rp.Tenants != 50 || rp.Partitions != 8 || len(rp.Runs) != 4 || rp.TwoVsOne <= 0 || rp.FourVsOne <= 0 || rp.MsgsFourVsOne <= 0 {
		t.Errorf("replicas: %+v", rp)
	}
	for _, run := range append([]bench.ReplicaRun{rp.Relay}, rp.Runs...) {
		// Every job is delivered to the forwarder once at least, and its forward's PubAck.
		if run.Jobs != 1000 || run.PerSecond <= 0 || run.PublishS <= 0 || run.ServerMsgsPerJob < 1.9 || run.ForwarderMsgsPerJob < 0.9 || run.NATSCPUMicrosPerJob < 0 {
			t.Errorf("replicas %s: %+v", run.Name, run)
		}
		sum := 0
		for _, h := range run.Held {
			sum += h
		}
		if run.Replicas > 0 && (len(run.Held) != run.Replicas || sum != run.Partitions || run.SharedS <= 0) {
			t.Errorf("replicas %s: partitions held %v", run.Name, run.Held)
		}
	}
	bl := r.Backlog
	if bl == nil {
		t.Fatal("no backlog section")
	}
	if bl.Jobs != 1000 || bl.Tenants != 100 || bl.NewRate != 2 || len(bl.Runs) != 3 {
		t.Errorf("backlog: %+v", bl)
	}
	for _, run := range append([]bench.BacklogRun{bl.Relay}, bl.Runs...) {
		// The new tenant's first job goes at the start: one wait at least.
		if run.Received != 1000 || run.DrainS <= 0 || run.FirstS > run.DrainS || run.PerSecond <= 0 || run.VsRelay <= 0 || run.PublishS <= 0 ||
			run.New.Samples+run.NewMissing < 1 || run.Stored < uint64(run.Received) || (run.Replicas > 0 && (run.AdmitterCPUS <= 0 || len(run.Held) == 0)) {
			t.Errorf("backlog %s: %+v", run.Name, run)
		}
	}

	l := r.Large
	if l == nil {
		t.Fatal("no large section")
	}
	for name, run := range map[string]bench.LargeRun{"relay": l.Relay, "admitter": l.Admitter} {
		if run.Jobs != 20 || run.PerSecond <= 0 || run.MiBPerSecond <= 0 || run.SlowConsumers != 0 || run.NATSRSSMiB <= 0 {
			t.Errorf("large %s: %+v", name, run)
		}
	}
	if l.SizeBytes != 256<<10 || l.Admitter.PeakRSSMiB <= 0 || l.Relay.PeakRSSMiB != 0 || l.Ratio <= 0 {
		t.Errorf("large: %+v", l)
	}

	o := r.Overload
	if o == nil {
		t.Fatal("no overload section")
	}
	if o.Published != 3000 || o.PublishRate != 2000 || o.Capacity != 100 || o.RatePerSecond != 200 || o.Dead != 0 {
		t.Errorf("overload set-up: %+v", o)
	}
	// The first capacity's worth is admitted at once; nothing can pass faster than the plan.
	if o.AdmittedAtEnd < o.Capacity || o.AdmittedTotal < o.AdmittedAtEnd || o.Expected < float64(o.Capacity) ||
		float64(o.AdmittedTotal) > float64(o.Capacity)+o.RatePerSecond*(o.DurationS+o.TailS)*1.05+5 {
		t.Errorf("overload admissions: %+v", o)
	}
	if o.AttemptsMean < 1 || o.AttemptsMax < 1 || float64(o.AttemptsMax) < o.AttemptsMean {
		t.Errorf("overload attempts per admitted job: mean %g max %d", o.AttemptsMean, o.AttemptsMax)
	}
	var sum int64
	for _, n := range o.AdmittedPerSecond {
		sum += n
	}
	if len(o.AdmittedPerSecond) < 2 || sum != o.AdmittedTotal || o.WorstLagJobs < 0 || o.WorstAheadJobs < 0 {
		t.Errorf("overload pacing figures: per second %v (total %d), worst lag %g, worst ahead %g",
			o.AdmittedPerSecond, o.AdmittedTotal, o.WorstLagJobs, o.WorstAheadJobs)
	}
	if o.DelayMs.Samples != int(o.AdmittedTotal) || o.DelayMs.P50Ms > o.DelayMs.P99Ms || o.DelayMs.P99Ms > o.DelayMs.MaxMs {
		t.Errorf("overload Admit-Delay-Ms: %+v", o.DelayMs)
	}

	f := r.Flood
	if f == nil {
		t.Fatal("no deep flood section")
	}
	if f.Jobs != 3000 || f.QuietTenants != 5 || f.PublishS <= 0 || f.AbsorbS < f.PublishS || f.NoisyForwarded < 1 ||
		f.NoisyExpected <= 0 || f.Forwarded <= f.NoisyForwarded || f.AdmitterRSSMiB <= 0 || f.NATSRSSMiB <= 0 ||
		f.RedisCallsPerJob <= 0 || f.AdmitterMsgsPerJob <= 0 || f.PeakConsumers < 1 {
		t.Errorf("deep flood: %+v", f)
	}
	latency("deep flood quiet", f.Quiet)

	fa := r.Fair
	if fa == nil {
		t.Fatal("no fair section")
	}
	if fa.Tenants != 20 || fa.JobsPerTenant != 50 || fa.Settings != "ADMITTER_QUANTUM=5" || fa.Forwarded != 1000 || fa.PublishS <= 0 ||
		fa.DrainS <= 0 || fa.FirstForwardS <= 0 || fa.FirstForwardS > fa.DrainS || fa.WindowTo <= fa.WindowFrom || fa.WindowTo > 1000 ||
		fa.Mean <= 0 || fa.Min > fa.Max || fa.Jain <= 0 || fa.Jain > 1 || fa.MaxDeviationPct < 0 || fa.WithinPct < 0 || fa.WithinPct > 100 ||
		len(fa.Lowest) != 5 || len(fa.Highest) != 5 || fa.AdmitterCPUS <= 0 {
		t.Errorf("fair: %+v", fa)
	}
	c := r.Crowd
	if c == nil {
		t.Fatal("no crowd section")
	}
	// Nobody is done before its plan allows: the slowest tenant no sooner than PlanS (1s).
	if c.Tenants != 50 || c.JobsPerTenant != 10 || c.Capacity != 5 || c.RatePerSecond != 5 || c.PlanS != 1 || c.Forwarded != 500 ||
		c.DoneMaxS < c.PlanS || c.DoneP50S > c.DoneP99S || c.DoneP99S > c.DoneMaxS || c.FirstMaxS <= 0 || c.OverallS < c.DoneMaxS ||
		c.SlowestTenant == "" || len(c.DonePerSecond) < 2 || c.PublishS <= 0 {
		t.Errorf("crowd: %+v", c)
	}

	pl := r.Pool
	if pl == nil {
		t.Fatal("no pool section")
	}
	// A pool of 4: never more than 4 handlers at once (the pool, not the workers' 8, binds).
	if pl.Tenants != 12 || pl.Concurrency != 4 || pl.WorkerConcurrency != 8 || pl.Backlog != 280 || pl.MostInFlight < 1 || pl.MostInFlight > 4 ||
		pl.Jain <= 0 || pl.Jain > 1 || len(pl.ByShare) != 3 || pl.WindowS <= 0 || pl.PerSecond <= 0 || pl.Handled < 1 ||
		pl.Utilisation <= 0 || pl.Utilisation > 1 || pl.AdmitterCPUS <= 0 || (pl.Quiet.Samples > 0 && pl.Quiet.P50Ms > pl.Quiet.P99Ms) {
		t.Errorf("pool: %+v", pl)
	}

	ds := r.Downstream
	if ds == nil {
		t.Fatal("no downstream section")
	}
	if ds.Tenants != 6 || ds.PhaseS != 2 || ds.CapacityPerSecond != 400 || ds.Backlog < 6 {
		t.Errorf("downstream: %+v", ds)
	}
	for _, run := range []bench.DownstreamRun{ds.Adaptive, ds.Fixed} {
		// The fixed pool is never below its concurrency; the adaptive one never above its ceiling.
		if len(run.Phases) != 3 || len(run.BackS) != 3 || run.Done < 1 || run.Jain <= 0 || run.Jain > 1 || len(run.Limits) < 2 ||
			len(run.DonePerBin) != 12 || run.TimePerJob.P50Ms < 20 || run.AdmitterCPUS <= 0 || run.PublishS <= 0 {
			t.Errorf("downstream %s: %+v", run.Pool, run)
		}
		for _, l := range run.Limits {
			if l.Limit < 2 || l.Limit > 64 || (run.Pool == ds.Fixed.Pool && l.Limit != 64) {
				t.Errorf("downstream %s: limit sample %+v", run.Pool, l)
			}
		}
	}

	if len(r.Goals) != 39 {
		t.Errorf("%d goals, want 39: %+v", len(r.Goals), r.Goals)
	}
	for _, name := range []string{bench.GoalVsRedisRate, bench.GoalVsCeiling, bench.GoalBatched, bench.GoalSyncHTTP, bench.GoalEndToEnd, bench.GoalAddedP99,
		bench.GoalLargeRelay, bench.GoalLargeSlow, bench.GoalOverloadErr, bench.GoalAttempts,
		bench.GoalFloodQuiet, bench.GoalFloodNoisy, bench.GoalFloodRSS, bench.GoalFloodRedis,
		bench.GoalFairDev, bench.GoalFairJain, bench.GoalCrowdDone, bench.GoalCrowdPacing,
		bench.GoalPoolJain, bench.GoalPoolQuiet, bench.GoalPoolHolds,
		bench.GoalDownFull, bench.GoalDownHalved, bench.GoalDownAgain, bench.GoalDownBackHalved, bench.GoalDownBackAgain, bench.GoalDownP99, bench.GoalDownJain,
		bench.GoalReplicasTwo, bench.GoalReplicasMsgs, bench.GoalReplicasMsgsFlat, bench.GoalReplicasNATSCPU, bench.GoalReplicasAdmCPU,
		bench.GoalBacklogRate("1 admitter, 1 partition"), bench.GoalBacklogNewP99("2 admitter replicas, 8 partitions")} {
		if _, ok := r.Goal(name); !ok {
			t.Errorf("no goal %q", name)
		}
	}
}

func abs(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}
