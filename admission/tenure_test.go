package admission

import (
	"slices"
	"testing"
	"time"
)

// TestTenureTransitions is the tenure's state machine (tenure.go) as a table: each write's
// outcome, the lapse of a lease and a give-up, from each state, with what its part is asked.
func TestTenureTransitions(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	const valid = 2500 * time.Millisecond
	running := tenure{state: held, id: 1, rev: 5, until: t0.Add(valid), runs: true}
	lapsed := tenure{state: unsure, id: 1, rev: 5, until: t0.Add(valid), since: t0.Add(valid), why: "nats: timeout", runs: true}
	type step struct {
		name string
		from tenure
		do   func(tenure) (tenure, effect)
		want tenureState
		eff  effect
	}
	write := func(o outcome, rev uint64) func(tenure) (tenure, effect) {
		return func(tn tenure) (tenure, effect) { return tn.wrote(o, rev, t0.Add(time.Second), valid, "why") }
	}
	at := func(now time.Time) func(tenure) (tenure, effect) {
		return func(tn tenure) (tenure, effect) { return tn.at(now), noEffect }
	}
	for _, c := range []step{
		{"a claim applied is held: its part starts", claimed(1), write(applied, 6), held, startPart},
		{"a claim refused ends: another replica was first", claimed(1), write(refused, 0), lost, noEffect},
		{"a claim unanswered is unsure: it may have been applied", claimed(1), write(unanswered, 0), unsure, noEffect},
		{"an unsure claim found applied is held: its part starts", claimed(1).at(t0), func(tn tenure) (tenure, effect) {
			tn, _ = tn.wrote(unanswered, 0, t0, valid, "cut short")
			return tn.wrote(applied, 7, t0, valid, "")
		}, held, startPart},
		{"a renewal applied keeps it held, its part running", running, write(applied, 6), held, noEffect},
		{"a renewal refused loses it: its part stops", running, write(refused, 0), lost, stopPart},
		{"a renewal unanswered keeps it held while its lease lasts", running, write(unanswered, 0), held, noEffect},
		{"held within its lease stays held", running, at(t0.Add(valid - time.Millisecond)), held, noEffect},
		{"held past its lease is unsure: its part stays, paused", running, at(t0.Add(valid)), unsure, noEffect},
		{"unsure, renewed on its revision, is held again: its part goes on", lapsed, write(applied, 9), held, noEffect},
		{"unsure, found another's, is lost: its part stops", lapsed, write(refused, 0), lost, stopPart},
		{"unsure and unanswered stays unsure", lapsed, write(unanswered, 0), unsure, noEffect},
		{"given up while held: its part stops, then its key is deleted", running, tenure.giveUp, releasing, stopPart},
		{"given up while unsure: likewise", lapsed, tenure.giveUp, releasing, stopPart},
		{"given up with no part: its key is deleted at once", claimed(1), tenure.giveUp, releasing, deleteKey},
		{"being given up, renewed: it goes on releasing", tenure{state: releasing, id: 1, rev: 5}, write(applied, 6), releasing, noEffect},
		{"being given up, refused: lost, nothing more to stop", tenure{state: releasing, id: 1, rev: 5}, write(refused, 0), lost, noEffect},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, eff := c.do(c.from)
			if got.state != c.want || eff != c.eff {
				t.Fatalf("%v → %v with %v, want %v with %v", c.from.state, got.state, eff, c.want, c.eff)
			}
			if got.acts(t0.Add(time.Second)) != (c.want == held) {
				t.Errorf("acts %v in state %v", got.acts(t0.Add(time.Second)), got.state)
			}
		})
	}
}

// TestALapsedTenureActsFromItsRenewal: a tenure renewed after it lapsed acts until the renewal's
// send time plus its validity, and no longer.
func TestALapsedTenureActsFromItsRenewal(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	tn := tenure{state: unsure, id: 1, rev: 5, since: t0, runs: true}
	tn, _ = tn.wrote(applied, 9, t0.Add(10*time.Second), 2500*time.Millisecond, "")
	if !tn.acts(t0.Add(12*time.Second)) || tn.acts(t0.Add(12500*time.Millisecond)) || tn.rev != 9 {
		t.Fatalf("%+v: want acting from its renewal for 2.5s, at revision 9", tn)
	}
}

// TestTenureLeased is when what a tenure's part decided may still go (owners.leased, asked by a
// step before it publishes): while held or being given up, within the validity of its last
// renewal applied; never once unsure or lost.
func TestTenureLeased(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	const valid = 2500 * time.Millisecond
	running := tenure{state: held, id: 1, rev: 5, until: t0.Add(valid), runs: true}
	releasing, _ := running.giveUp()
	renewed, _ := releasing.wrote(applied, 6, t0.Add(2*time.Second), valid, "")
	taken, _ := running.wrote(refused, 0, t0, valid, "another's")
	for _, c := range []struct {
		name string
		tn   tenure
		at   time.Duration
		want bool
	}{
		{"held within its lease", running, valid - time.Millisecond, true},
		{"held at its lease's end", running, valid, false},
		{"unsure (its lease ran out unanswered)", running.at(t0.Add(valid)), valid, false},
		{"being given up within its lease", releasing, time.Second, true},
		{"being given up, renewed: from the renewal", renewed, 2*time.Second + valid - time.Millisecond, true},
		{"being given up past its lease", releasing, valid, false},
		{"lost", taken, time.Second, false},
		{"none", tenure{}, 0, false},
	} {
		if got := c.tn.leased(t0.Add(c.at)); got != c.want {
			t.Errorf("%s: leased %v, want %v", c.name, got, c.want)
		}
	}
}

// TestBalance is who claims what, as a table (tenure.go balance): free keys are created, stale
// ones updated at their revision, live holders' kept, a share never exceeded, those above it
// given up lowest ranked first, and nothing moved beside a replica of another count.
func TestBalance(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	const lease = 3 * time.Second
	fresh := func(owner string, rev uint64) seenKey { return seenKey{owner: owner, rev: rev, since: t0} }
	stale := func(owner string, rev uint64) seenKey { return seenKey{owner: owner, rev: rev, since: t0.Add(-lease)} }
	heldT := tenure{state: held, runs: true}
	ranked := func(ps []int) []int { // a's order of preference
		out := slices.Clone(ps)
		slices.SortFunc(out, func(x, y int) int {
			if score("a", x) > score("a", y) {
				return -1
			}
			return 1
		})
		return out
	}
	for _, c := range []struct {
		name   string
		v      view
		claims []claim
		giveUp []int
		other  string
	}{
		{name: "alone: every free partition, created",
			v:      view{self: "a", n: 2, live: []string{"a"}},
			claims: []claim{{p: ranked([]int{0, 1})[0]}, {p: ranked([]int{0, 1})[1]}}},
		{name: "a key held by a live replica is left alone; a deleted one is created",
			v:      view{self: "a", n: 2, live: []string{"a"}, keys: map[int]seenKey{0: fresh("b", 4), 1: fresh("", 9)}},
			claims: []claim{{p: 1}}},
		{name: "a key unchanged for a lease is updated at its revision",
			v:      view{self: "a", n: 1, live: []string{"a"}, keys: map[int]seenKey{0: stale("b", 4)}},
			claims: []claim{{p: 0, rev: 4}}},
		{name: "this replica's own key of a lost tenure waits a lease too",
			v: view{self: "a", n: 1, live: []string{"a"}, keys: map[int]seenKey{0: fresh("a", 4)}}},
		{name: "two live: at most its share",
			v:      view{self: "a", n: 4, live: []string{"a", "b"}, mine: map[int]tenure{ranked([]int{0, 1, 2, 3})[0]: heldT}},
			claims: []claim{{p: ranked([]int{0, 1, 2, 3})[1]}}},
		{name: "above its share: gives up those it ranks lowest",
			v:      view{self: "a", n: 3, live: []string{"a", "b"}, mine: map[int]tenure{0: heldT, 1: heldT, 2: heldT}},
			giveUp: ranked([]int{0, 1, 2})[2:]},
		{name: "an unsure tenure counts toward the share; one being given up does not, nor is claimed",
			v: view{self: "a", n: 2, live: []string{"a", "b"}, mine: map[int]tenure{0: {state: unsure}, 1: {state: releasing}}}},
		{name: "a live replica of another count: nothing moves",
			v:     view{self: "a", n: 2, live: []string{"a", "b"}, count: map[string]int{"b": 4}},
			other: "b"},
		{name: "a dead replica of another count is not in the way",
			v:      view{self: "a", n: 1, live: []string{"a"}, count: map[string]int{"b": 4}},
			claims: []claim{{p: 0}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.v.lease = lease
			m := balance(c.v, t0)
			if !slices.Equal(m.claims, c.claims) || !slices.Equal(m.giveUp, c.giveUp) || m.other != c.other {
				t.Fatalf("claims %v, gives up %v, other %q; want %v, %v, %q", m.claims, m.giveUp, m.other, c.claims, c.giveUp, c.other)
			}
		})
	}
}
