package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestAFailedScenarioLeavesTheOthersTheirRows: a run of scenarios where one returns an error,
// one panics, one cannot start its server (testenv's Fatalf) and one waits for a readiness that
// never comes, between two that measure. Each failure is recorded (scenario, error) and shown in
// its place in the table, what each failed scenario started is cleaned up before the next
// starts, and the scenarios before and after still produce their rows. Before, the run ended at
// the first error with no report, and a panic took the process down.
func TestAFailedScenarioLeavesTheOthersTheirRows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var events []string
		started := func(e *env, name string) {
			events = append(events, name+" started")
			e.tb.Cleanup(func() { events = append(events, name+" cleaned up") })
		}
		list := []scenario{
			{ScenarioOverload, func(ctx context.Context, e *env, p *progress, rep *Report) error {
				started(e, "overload")
				rep.Overload = &Overload{Capacity: 100, RatePerSecond: 200, PublishRate: 2000, DurationS: 30, AdmittedAtEnd: 6100, Expected: 6100, AttemptsMean: 2}
				return nil
			}},
			{ScenarioSync, func(ctx context.Context, e *env, p *progress, rep *Report) error {
				started(e, "sync")
				return errors.New("redis FLUSHALL: i/o timeout")
			}},
			{ScenarioEndToEnd, func(ctx context.Context, e *env, p *progress, rep *Report) error {
				started(e, "e2e")
				var jobs []int
				return fmt.Errorf("job %d", jobs[len(events)])
			}},
			{ScenarioReplicas, func(ctx context.Context, e *env, p *progress, rep *Report) error {
				started(e, "replicas")
				e.tb.Fatalf("testenv: redis-server exited at start")
				return nil
			}},
			{ScenarioBacklog, func(ctx context.Context, e *env, p *progress, rep *Report) error {
				started(e, "backlog")
				return p.phase("backlog at start: an admitter that never answers", func() (string, error) {
					return "", retry(ctx, "the admitter's http://127.0.0.1:1/readyz answers 200", readyWithin, func(context.Context) error {
						return errors.New("connection refused")
					})
				})
			}},
			{ScenarioCrowd, func(ctx context.Context, e *env, p *progress, rep *Report) error {
				started(e, "crowd")
				rep.Crowd = &Crowd{Tenants: 2000, JobsPerTenant: 20, Capacity: 5, RatePerSecond: 5, PlanS: 3, DoneMaxS: 3.3, Forwarded: 40000}
				return nil
			}},
		}
		var out bytes.Buffer
		rep := &Report{Options: OptionsJSON{Scenarios: []string{ScenarioOverload, ScenarioSync, ScenarioEndToEnd, ScenarioReplicas, ScenarioBacklog, ScenarioCrowd}}}
		if err := runScenarios(t.Context(), env{o: Defaults()}, &progress{w: &out, start: time.Now()}, rep, list); err != nil {
			t.Fatalf("runScenarios: %v", err)
		}
		t.Logf("progress:\n%s", out.String())

		if rep.Overload == nil || rep.Crowd == nil {
			t.Errorf("the scenarios that measured have no section: overload %v, crowd %v", rep.Overload, rep.Crowd)
		}
		want := []struct{ scenario, err string }{
			{ScenarioSync, "redis FLUSHALL: i/o timeout"},
			{ScenarioEndToEnd, "panic: runtime error: index out of range [5] with length 0"},
			{ScenarioReplicas, "testenv: redis-server exited at start"},
			{ScenarioBacklog, "the admitter's http://127.0.0.1:1/readyz answers 200: not done within 30s ("},
		}
		if len(rep.Failures) != len(want) {
			t.Fatalf("failures %+v, want %d", rep.Failures, len(want))
		}
		for i, w := range want {
			if f := rep.Failures[i]; f.Scenario != w.scenario || !strings.HasPrefix(f.Error, w.err) {
				t.Errorf("failure %d: %+v, want scenario %s, error %q…", i, f, w.scenario, w.err)
			}
		}
		wantEvents := []string{"overload started", "overload cleaned up", "sync started", "sync cleaned up", "e2e started", "e2e cleaned up",
			"replicas started", "replicas cleaned up", "backlog started", "backlog cleaned up", "crowd started", "crowd cleaned up"}
		if !slices.Equal(events, wantEvents) {
			t.Errorf("events %q, want %q", events, wantEvents)
		}
		for _, w := range []string{"backlog at start: an admitter that never answers ... failed after 30.0s\n",
			"e2e: failed: panic: runtime error: index out of range [5] with length 0\n"} {
			if !strings.Contains(out.String(), w) {
				t.Errorf("progress has no %q", w)
			}
		}

		rep.EvaluateGoals()
		var table bytes.Buffer
		if err := rep.WriteTable(&table); err != nil {
			t.Fatal(err)
		}
		t.Logf("table:\n%s", table.String())
		lines := strings.Split(table.String(), "\n")
		row := func(prefix string) int {
			return slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, prefix) })
		}
		at := map[string]int{}
		for _, name := range []string{"sync ", "e2e ", "replicas ", "backlog ", "overload admitted", "crowd slowest tenant done s"} {
			if at[name] = row(name); at[name] < 0 {
				t.Errorf("the table has no row %q…", name)
			}
		}
		for _, f := range rep.Failures {
			l := lines[max(0, at[f.Scenario+" "])]
			if !strings.Contains(l, "FAILED") || !strings.Contains(l, strings.SplitN(f.Error, "\n", 2)[0]) {
				t.Errorf("the row of %s does not say it failed and why: %q", f.Scenario, l)
			}
		}
		if !(at["sync "] < at["e2e "] && at["e2e "] < at["replicas "] && at["replicas "] < at["backlog "] && at["backlog "] < at["overload admitted"]) {
			t.Errorf("the failed rows are not in their scenarios' places: %v", at)
		}

		path := filepath.Join(t.TempDir(), "results.json")
		if err := rep.WriteJSON(path); err != nil {
			t.Fatal(err)
		}
		back, err := ReadJSON(path)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(table.String(), "\nfailed: sync, e2e, replicas, backlog (4 of 6 scenarios)") {
			t.Error("the table does not end saying which scenarios failed")
		}
		if !slices.Equal(back.Failures, rep.Failures) {
			t.Errorf("JSON failures %+v, want %+v", back.Failures, rep.Failures)
		}
	})
}

// TestAnInterruptedRunStopsWithoutAFailure: Ctrl-C ends the scenario under way, which is not a
// failure of it, and the next ones do not start.
func TestAnInterruptedRunStopsWithoutAFailure(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	ran := 0
	list := []scenario{
		{ScenarioSync, func(ctx context.Context, e *env, p *progress, rep *Report) error {
			ran++
			cancel()
			return fmt.Errorf("sync: %w", ctx.Err())
		}},
		{ScenarioCrowd, func(ctx context.Context, e *env, p *progress, rep *Report) error {
			ran++
			return nil
		}},
	}
	rep := &Report{}
	err := runScenarios(ctx, env{o: Defaults()}, &progress{w: os.Stderr}, rep, list)
	if !errors.Is(err, context.Canceled) || ran != 1 || len(rep.Failures) != 0 {
		t.Errorf("runScenarios: %v after %d scenarios, failures %+v; want canceled after 1, none", err, ran, rep.Failures)
	}
}
