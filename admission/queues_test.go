package admission

import (
	"slices"
	"testing"
)

// ring is a scheduler of ready queues alone (no servers): quantum per turn.
func ring(quantum int, tenants ...string) (*queues, map[string]*queue) {
	qs := newQueues(&Service{cfg: Config{Quantum: quantum}})
	byName := map[string]*queue{}
	for _, t := range tenants {
		q := &queue{tenant: t, index: -1}
		qs.byName[t], byName[t] = q, q
		qs.readyLocked(q)
	}
	return qs, byName
}

// turns takes n turns: each queue spends spend(tenant, budget) and stays ready.
func turns(qs *queues, n int, spend func(string, int64) int64) []string {
	var got []string
	for range n {
		q, budget, ok := qs.take()
		if !ok {
			break
		}
		got = append(got, q.tenant)
		qs.done(q, stepResult{more: true, spent: spend(q.tenant, budget)})
	}
	return got
}

// TestHeavyHeadPaysItsTurnsBack: a head heavier than a turn goes at once (nothing else could
// ever let it go), and its queue then sits out the rounds it owes while others are ready.
func TestHeavyHeadPaysItsTurnsBack(t *testing.T) {
	qs, _ := ring(10, "heavy", "a", "b")
	first := true
	got := turns(qs, 12, func(tenant string, budget int64) int64 {
		if tenant == "heavy" && first {
			first = false
			return 35 // a head of weight 35 on a turn of 10: it owes 25
		}
		return budget
	})
	// It sits out two rounds (-15, -5) and goes on the third with 5.
	want := []string{"heavy", "a", "b", "a", "b", "a", "b", "heavy", "a", "b", "heavy", "a"}
	if !slices.Equal(got, want) {
		t.Fatalf("turns %v, want %v", got, want)
	}
}

// TestDebtorsAloneGoWithoutSpinning: when every ready queue owes, the rounds until the first
// may go pass at once, in one take.
func TestDebtorsAloneGoWithoutSpinning(t *testing.T) {
	qs, q := ring(10, "x", "y")
	q["x"].deficit, q["y"].deficit = -1_000_000_000_000, -5_000_000_000_000
	tq, budget, ok := qs.take()
	if !ok || tq.tenant != "x" || budget <= 0 || budget > 10 {
		t.Fatalf("took %v with budget %d, want x with a budget in (0, 10]", tq.tenant, budget)
	}
	if want := int64(-5_000_000_000_000 + 1_000_000_000_000); q["y"].deficit > want || q["y"].deficit < want-10 {
		t.Errorf("y owes %d after x's turn, want about %d", -q["y"].deficit, -want)
	}
}

// TestUnspentTurnIsNotBanked: a queue that leaves the ring keeps what it owes and loses what it
// did not spend.
func TestUnspentTurnIsNotBanked(t *testing.T) {
	qs, q := ring(10, "a")
	tq, _, _ := qs.take()
	qs.done(tq, stepResult{next: 1e9, spent: 3}) // its head waits: it leaves the ring
	if q["a"].deficit != 0 {
		t.Errorf("deficit %d after leaving the ring with 7 unspent, want 0", q["a"].deficit)
	}
	qs.wakeTenant("a")
	tq, _, _ = qs.take()
	qs.done(tq, stepResult{next: 1e9, spent: 30})
	if q["a"].deficit != -20 {
		t.Errorf("deficit %d after spending 30 of 10 and leaving, want -20 (owed)", q["a"].deficit)
	}
}
