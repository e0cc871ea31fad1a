package bench

import (
	"math"
	"os"
	"slices"
	"testing"
	"time"
)

func TestReplicaFigures(t *testing.T) {
	r := &Replicas{Partitions: 8, Relay: ReplicaRun{Throughput: Throughput{PerSecond: 60000}},
		Runs: []ReplicaRun{
			{Replicas: 1, Partitions: 1, Throughput: Throughput{PerSecond: 33000}, ServerMsgsPerJob: 2, NATSCPUMicrosPerJob: 10, AdmitterCPUMicrosPerJob: 10},
			{Replicas: 1, Partitions: 8, Throughput: Throughput{PerSecond: 30000}, ServerMsgsPerJob: 2, NATSCPUMicrosPerJob: 20, AdmitterCPUMicrosPerJob: 25},
			{Replicas: 2, Partitions: 8, Throughput: Throughput{PerSecond: 27000}, ServerMsgsPerJob: 2.2, NATSCPUMicrosPerJob: 21, AdmitterCPUMicrosPerJob: 26},
			{Replicas: 4, Partitions: 8, Throughput: Throughput{PerSecond: 15000}, ServerMsgsPerJob: 5, NATSCPUMicrosPerJob: 30, AdmitterCPUMicrosPerJob: 20},
		}}
	r.ReplicaFigures()
	// against one replica on the same partitions, not the one on one partition
	if r.TwoVsOne != 0.9 || r.FourVsOne != 0.5 || r.MsgsFourVsOne != 2.5 || r.NATSCPUFourVsOne != 1.5 || r.AdmitterCPUFourVsOne != 0.8 {
		t.Errorf("ratios: %+v", r)
	}
	if r.Runs[0].VsOne != 1.1 || r.Runs[1].VsOne != 1 || r.Runs[2].VsOne != 0.9 || r.Runs[3].VsOne != 0.5 || r.Relay.VsOne != 2 {
		t.Errorf("each run over one replica: %+v, relay %+v", r.Runs, r.Relay)
	}
	if pctOver(r.MsgsFourVsOne) != 150 || pctOver(r.AdmitterCPUFourVsOne) != -20 || pctOver(0) != 0 {
		t.Errorf("pctOver: %g %g %g", pctOver(r.MsgsFourVsOne), pctOver(r.AdmitterCPUFourVsOne), pctOver(0))
	}
	rep := &Report{Replicas: r}
	rep.EvaluateGoals()
	for name, met := range map[string]bool{GoalReplicasTwo: true, GoalReplicasMsgs: false, GoalReplicasMsgsFlat: false, GoalReplicasNATSCPU: false, GoalReplicasAdmCPU: true} {
		if g, ok := rep.Goal(name); !ok || g.Met != met {
			t.Errorf("goal %q: %+v, want met=%v", name, g, met)
		}
	}

	// without one replica on the partitions there is nothing to compare with; without four,
	// no goal at four
	r.Runs = r.Runs[2:3]
	r.ReplicaFigures()
	if r.TwoVsOne != 0 || r.FourVsOne != 0 || r.MsgsFourVsOne != 0 {
		t.Errorf("no one-replica run: %+v", r)
	}
	rep.EvaluateGoals()
	if len(rep.Goals) != 1 || rep.Goals[0].Name != GoalReplicasTwo || rep.Goals[0].Met {
		t.Errorf("goals without one or four replicas: %+v", rep.Goals)
	}
}

func TestBacklogFigures(t *testing.T) {
	start := time.Unix(1000, 0)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	got := []time.Time{at(2000), at(100), at(1000), at(4000)} // in any order
	news := []newJob{
		{sent: at(0), got: at(900)},        // waited 900ms
		{sent: at(500), got: at(600)},      // 100ms
		{sent: at(1000), got: time.Time{}}, // never received: missing
		{sent: at(3500), got: at(4200)},    // 700ms, received after the drain: counted
		{sent: at(4500), got: at(4510)},    // published after the drain: not counted
	}
	r := BacklogFigures(start, got, news, 4)
	if r.FirstS != 0.1 || r.DrainS != 4 || r.Received != 4 || r.PerSecond != 1 || r.NewMissing != 1 {
		t.Errorf("figures: %+v", r)
	}
	if r.New.Samples != 3 || r.New.MaxMs != 900 || r.New.P50Ms != 700 || !slices.Equal(r.NewWaitsMs, []float64{900, 100, -1, 700}) {
		t.Errorf("new tenant: %+v, waits %v", r.New, r.NewWaitsMs)
	}
	if r := BacklogFigures(start, nil, news, 4); r.Received != 0 || r.PerSecond != 0 || r.New.Samples != 0 {
		t.Errorf("nothing received: %+v", r)
	}
	// more received than the backlog (a job delivered twice) does not make it faster
	if r := BacklogFigures(start, append(got, at(3000)), nil, 4); r.PerSecond != 1 || r.Received != 5 {
		t.Errorf("a job twice: %+v", r)
	}

	b := &Backlog{Relay: BacklogRun{PerSecond: 40000}, Runs: []BacklogRun{{Name: "a", PerSecond: 20000, New: Latency{Samples: 2, P99Ms: 1000}}, {Name: "b", PerSecond: 10000}}}
	b.BacklogRatios()
	if b.Relay.VsRelay != 1 || b.Runs[0].VsRelay != 0.5 || b.Runs[1].VsRelay != 0.25 {
		t.Errorf("ratios: %+v", b)
	}
	rep := &Report{Backlog: b}
	rep.EvaluateGoals()
	for name, met := range map[string]bool{GoalBacklogRate("a"): true, GoalBacklogNewP99("a"): true, GoalBacklogRate("b"): false,
		GoalBacklogNewP99("b"): false} { // no sample: not met
		if g, ok := rep.Goal(name); !ok || g.Met != met {
			t.Errorf("goal %q: %+v, want met=%v", name, g, met)
		}
	}
}

func TestMetricValue(t *testing.T) {
	body := `# HELP admitter_partitions Partitions of the input this replica reads.
# TYPE admitter_partitions gauge
admitter_partitions{otel_scope_name="admitter"} 4
admitter_partitions_other 9
admitter_replicas{otel_scope_name="admitter"} 2
`
	if v, err := metricValue(body, "admitter_partitions"); err != nil || v != 4 {
		t.Errorf("admitter_partitions = %g, %v", v, err)
	}
	if v, err := metricValue("x 1\nx{a=\"b\"} 2.5\n", "x"); err != nil || v != 3.5 {
		t.Errorf("sum over labels = %g, %v", v, err)
	}
	if _, err := metricValue(body, "admitter_queues"); err == nil {
		t.Error("a metric that is not there: no error")
	}
}

func TestCPUTime(t *testing.T) {
	pid := os.Getpid()
	t0, s0 := cpuTime(pid), cpuSeconds(pid)
	// Burn 200ms of CPU by cpuTime's count (whatever else the machine runs meanwhile).
	x := 0
	for deadline := time.Now().Add(10 * time.Second); cpuTime(pid)-t0 < 0.2 && time.Now().Before(deadline); {
		for i := range 100_000 {
			x += i
		}
	}
	t1, s1 := cpuTime(pid), cpuSeconds(pid)
	// ticks of 10 ms against nanoseconds: the same time within a few ticks
	if d, ds := t1-t0, s1-s0; d < 0.2 || math.Abs(d-ds) > 0.05 {
		t.Errorf("cpuTime went %.4fs, cpuSeconds %.2fs (%d)", d, ds, x)
	}
	if cpuTime(1<<30) != 0 {
		t.Error("a process that is not there has CPU time")
	}
}
