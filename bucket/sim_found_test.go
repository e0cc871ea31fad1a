//go:build sim

package bucket

import (
	"testing"
	"time"
)

// Defects the simulation found on the merged fallback, each left failing in a focused test until
// it is fixed (see TestSimulation's table).

// TestSimulationFound replays, each alone, seeds that fail on the merged fallback, each named
// after the defect its trace shows (60 s of simulated time each, as they were found; see
// TestSimulation's table). Each passes when its defect is fixed.
func TestSimulationFound(t *testing.T) {
	for _, c := range []struct {
		name string
		seed uint64
	}{
		// 2 requests allowed on the copy (concurrency 1): their leases are dropped at the merge,
		// and Redis allows a third at once.
		{"RequestsAllowedOnTheCopyHoldTheirSlotsAfterTheMerge", 45},
		// Redis slow for r1 only (issue 38, item 2): r1 grants pool pb on its copy while r0 and
		// r2 grant it on Redis: the pool's bucket exceeded.
		{"APartialOutageKeepsAPoolsBucket", 22},
		// Redis slow for r0 only, t7's holder (item 2): r1 renews t7's job on Redis, which r0's
		// copy does not see; r0 admits another when the copied lease ends: 2 running, a limit
		// of 1.
		{"APartialOutageKeepsAConcurrencyLimit", 28},
		// r2, t1's holder, cut from the routed questions during an outage: the renewal of t1's
		// job that reaches r3 finds no answer and is decided on r3's copy; r2's copy sees the
		// lease end and admits another job: 2 running, a limit of 1.
		{"AnUnansweredQuestionIsNotDecidedBesideTheHoldersCopy", 8},
		// r1 killed during an outage: what its copy decided (t4's window) is never charged to
		// Redis, and r2, the next holder, lets 2 more through: a window of 3 exceeded.
		{"AReplicaKilledDuringAnOutageLosesNoDecision", 154},
	} {
		t.Run(c.name, func(t *testing.T) {
			if v, trace := runSeed(t, c.seed, 60*time.Second, false); v != "" {
				t.Errorf("seed %d: %s\n  replay: go test -run 'TestSimulation$' ./bucket -sim.seed=%d -sim.duration=60s -v\n  its last events:\n%s", c.seed, v, c.seed, trace)
			}
		})
	}
}
