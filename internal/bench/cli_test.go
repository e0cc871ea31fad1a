package bench

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseArgsDefaults(t *testing.T) {
	o, path, err := ParseArgs(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if path != "bench-results.json" || o.Quick || o.Duration != 5*time.Second || o.Warmup != time.Second ||
		o.Concurrency != 64 || o.Tenants != 1000 || o.Jobs != 50_000 || o.OverloadDuration != 30*time.Second ||
		o.OverloadTail != 5*time.Second || len(o.Scenarios) != 12 || o.LatencyRate != 5000 || o.LargeJobs != 1000 || o.LargeSize != 1<<20 ||
		o.FloodJobs != 1_000_000 || o.FloodQuietTenants != 100 || o.FloodDuration != 30*time.Second ||
		o.FairTenants != 1000 || o.FairJobs != 200 || o.FairQuantum != 5 ||
		o.CrowdTenants != 2000 || o.CrowdJobs != 20 || o.CrowdCapacity != 5 || o.CrowdRate != 5 ||
		o.PoolTenants != 1000 || o.PoolJobs != 50 || o.PoolConcurrency != 64 || o.PoolJobTime != 20*time.Millisecond || o.PoolQuietTenants != 40 ||
		o.DownstreamTenants != 200 || o.DownstreamPhase != 20*time.Second ||
		o.ReplicasJobs != 50_000 || o.ReplicasTenants != 1000 || o.Partitions != 8 || o.BacklogJobs != 100_000 || o.BacklogTenants != 10_000 || o.BacklogNewRate != 2 {
		t.Errorf("defaults: %+v, json %q", o, path)
	}
}

func TestParseArgsQuick(t *testing.T) {
	o, _, err := ParseArgs([]string{"-quick", "-jobs", "777", "-scenarios", "overload,decisions"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	q := Defaults().Shortened()
	if !o.Quick || o.Duration != q.Duration || o.OverloadDuration != q.OverloadDuration || o.LatencyRate != q.LatencyRate {
		t.Errorf("-quick did not shorten: %+v", o)
	}
	if o.Jobs != 777 {
		t.Errorf("-jobs given with -quick: %d, want 777", o.Jobs)
	}
	if o.FairTenants != 100 || o.FairJobs != 100 || o.FairQuantum != 5 || o.CrowdTenants != 200 || o.CrowdJobs != 20 {
		t.Errorf("-quick fair and crowd: %+v", o)
	}
	if o, _, _ := ParseArgs([]string{"-quick", "-fair-tenants", "300", "-crowd-tenants", "50"}, io.Discard); o.FairTenants != 300 || o.CrowdTenants != 50 {
		t.Errorf("-fair-tenants and -crowd-tenants given with -quick: %d, %d", o.FairTenants, o.CrowdTenants)
	}
	if o.DownstreamTenants != 30 || o.DownstreamPhase != 6*time.Second {
		t.Errorf("-quick downstream: %d tenants, phases of %v", o.DownstreamTenants, o.DownstreamPhase)
	}
	if o, _, _ := ParseArgs([]string{"-quick", "-downstream-phase", "3s"}, io.Discard); o.DownstreamPhase != 3*time.Second || o.DownstreamTenants != 30 {
		t.Errorf("-downstream-phase given with -quick: %v, %d tenants", o.DownstreamPhase, o.DownstreamTenants)
	}
	if o.ReplicasJobs != 5000 || o.BacklogJobs != 10_000 || o.BacklogTenants != 1000 || o.Partitions != 8 {
		t.Errorf("-quick replicas and backlog: %+v", o)
	}
	if o, _, _ := ParseArgs([]string{"-quick", "-backlog-jobs", "2000", "-replicas-jobs", "3000"}, io.Discard); o.BacklogJobs != 2000 || o.ReplicasJobs != 3000 || o.BacklogTenants != 1000 {
		t.Errorf("-backlog-jobs and -replicas-jobs given with -quick: %+v", o)
	}
	if !o.Has(ScenarioOverload) || !o.Has(ScenarioDecisions) || o.Has(ScenarioEndToEnd) {
		t.Errorf("scenarios %v", o.Scenarios)
	}
}

func TestParseArgsErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-nope"}, "flag provided but not defined: -nope"},
		{[]string{"-duration", "soon"}, `invalid value "soon" for flag -duration`},
		{[]string{"-duration", "0s"}, "-duration must be positive"},
		{[]string{"-concurrency", "0"}, "-concurrency must be from 1"},
		{[]string{"-jobs", "-5"}, "-jobs must be from 1"},
		{[]string{"-scenarios", "decisions,speed"}, `unknown scenario "speed"`},
		{[]string{"-overload-factor", "0"}, "overload factor must be positive"},
		{[]string{"-large-kib", "0"}, "-large-kib must be from 1 to 16384"},
		{[]string{"-large-jobs", "0"}, "-large-jobs must be from 1"},
		{[]string{"-fair-tenants", "5"}, "-fair-tenants must be from 10"},
		{[]string{"-fair-jobs", "1"}, "-fair-jobs must be from 2"},
		{[]string{"-fair-quantum", "-1"}, "-fair-quantum must be from 0"},
		{[]string{"-crowd-tenants", "0"}, "-crowd-tenants must be from 1"},
		{[]string{"-crowd-jobs", "20000"}, "-crowd-jobs must be from 1 to 10000"},
		{[]string{"-crowd-rate", "0"}, "-crowd-rate must be from 1"},
		{[]string{"-downstream-tenants", "2"}, "-downstream-tenants must be from 3"},
		{[]string{"-downstream-phase", "1s"}, "-downstream-phase must be from 2s to 10m"},
		{[]string{"-partitions", "1"}, "-partitions must be from 2 to 64"},
		{[]string{"-backlog-new-rate", "0"}, "-backlog-new-rate must be above 0"},
		{[]string{"-replicas-jobs", "0"}, "-replicas-jobs must be from 1"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		_, _, err := ParseArgs(c.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one containing %q", c.args, err, c.want)
		}
	}
	var usage bytes.Buffer
	if _, _, err := ParseArgs([]string{"-h"}, &usage); !errors.Is(err, flag.ErrHelp) || !strings.Contains(usage.String(), "-cpuprofile") {
		t.Errorf("-h: %v\n%s", err, usage.String())
	}
}

func TestMainBadFlagsExit2(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Main(t.Context(), []string{"-tenants", "0"}, &out, &errOut); code != 2 {
		t.Errorf("exit %d, want 2", code)
	}
	if !strings.HasPrefix(errOut.String(), "admitter-bench: -tenants must be") || out.Len() != 0 {
		t.Errorf("stderr %q, stdout %q", errOut.String(), out.String())
	}
	if code := Main(t.Context(), []string{"-h"}, &out, io.Discard); code != 0 {
		t.Errorf("-h: exit %d, want 0", code)
	}
}

// TestARunWithAFailedScenarioPrintsItsFiguresAndExits1: the table and the JSON are written with
// what was measured and what failed, and the exit status says that one failed.
func TestARunWithAFailedScenarioPrintsItsFiguresAndExits1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "results.json")
	rep := &Report{Options: OptionsJSON{Scenarios: []string{ScenarioSync, ScenarioCrowd}},
		Crowd:    &Crowd{Tenants: 2000, JobsPerTenant: 20, Capacity: 5, RatePerSecond: 5, PlanS: 3, DoneMaxS: 3.3, Forwarded: 40000},
		Failures: []Failure{{Scenario: ScenarioSync, Error: "the NATS decision endpoint admitter.decide answers: not done within 30s (124 tries), the last: nats: no responders available for request", AfterS: 31.2}}}
	rep.EvaluateGoals()
	var out, errOut bytes.Buffer
	if code := finish(rep, path, &out, &errOut); code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	if !strings.Contains(out.String(), "crowd slowest tenant done s") || !strings.Contains(out.String(), "figures written to "+path) ||
		errOut.String() != "admitter-bench: 1 of 2 scenarios failed: sync\n" {
		t.Errorf("stdout:\n%s\nstderr: %q", out.String(), errOut.String())
	}
	back, err := ReadJSON(path)
	if err != nil || back.Crowd == nil || len(back.Failures) != 1 {
		t.Errorf("JSON: %v, %+v", err, back)
	}
	rep.Failures = nil
	out.Reset()
	errOut.Reset()
	if code := finish(rep, "", &out, &errOut); code != 0 || errOut.Len() != 0 {
		t.Errorf("every scenario measured: exit %d, stderr %q; want 0 and nothing", code, errOut.String())
	}
}
