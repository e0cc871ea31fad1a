package admission

import (
	"slices"
	"testing"
	"time"

	"github.com/admitter/admitter/policy"
	"github.com/admitter/admitter/wire"
)

// TestPlanStep: what a step does with the jobs it read, from their decision alone.
func TestPlanStep(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	admitted := policy.Verdict{Fate: wire.FateAdmitted}
	waits := func(d time.Duration) policy.Verdict { return policy.Verdict{Fate: wire.FateDelayed, Wait: d} }
	dead := policy.Verdict{Fate: wire.FateDead, Code: wire.CodeInvalidWeight}
	expired := policy.Verdict{Fate: wire.FateDead, Code: wire.CodeExpired}
	for _, c := range []struct {
		name     string
		verdicts []policy.Verdict
		weights  []int64
		src      []bool // read from an older stream
		skips    bool
		deadline map[int]time.Duration // a job's bound on waiting, from now
		acts     []act
		head     int
		spent    int64
		next     time.Duration
	}{
		{name: "every job goes: each forward spends its weight", verdicts: []policy.Verdict{admitted, admitted, {Fate: wire.FateDegraded}},
			weights: []int64{1, 3, 2}, acts: []act{actForward, actForward, actForward}, head: 3, spent: 6},
		{name: "a dead letter spends 1, a job stored before nothing", verdicts: []policy.Verdict{dead, {Fate: wire.FateStored}, admitted},
			weights: []int64{5, 5, 5}, acts: []act{actDead, actStored, actForward}, head: 3, spent: 6},
		{name: "the first that waits stops the step: the jobs behind wait with it, as long", verdicts: []policy.Verdict{admitted, waits(2 * time.Second), admitted, waits(time.Second)},
			weights: []int64{1, 1, 1, 1}, acts: []act{actForward, actWait, actWait, actWait}, head: 1, spent: 1, next: 2 * time.Second},
		{name: "a job expired behind the head leaves out of its place; the queue reads on at once", verdicts: []policy.Verdict{waits(time.Minute), expired, waits(time.Minute)},
			weights: []int64{1, 1, 1}, skips: true, acts: []act{actWait, actSkip, actWait}, head: 0, spent: 1, next: 0},
		{name: "not while the list of those not yet removed is full", verdicts: []policy.Verdict{waits(time.Minute), expired},
			weights: []int64{1, 1}, acts: []act{actWait, actWait}, head: 0, next: time.Minute},
		{name: "nor one of an older stream (read by its own cursor)", verdicts: []policy.Verdict{waits(time.Minute), expired},
			weights: []int64{1, 1}, src: []bool{false, true}, skips: true, acts: []act{actWait, actWait}, head: 0, next: time.Minute},
		{name: "a bound on waiting sooner than the head's wait wakes the queue then", verdicts: []policy.Verdict{waits(time.Minute), waits(time.Minute)},
			weights: []int64{1, 1}, deadline: map[int]time.Duration{1: 10 * time.Second}, acts: []act{actWait, actWait}, head: 0, next: 10 * time.Second},
		{name: "a bound already passed asks again within a millisecond", verdicts: []policy.Verdict{waits(time.Minute)},
			weights: []int64{1}, deadline: map[int]time.Duration{0: -time.Second}, acts: []act{actWait}, head: 0, next: time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			jobs := make([]job, len(c.verdicts))
			d := policy.Decision{Verdicts: slices.Clone(c.verdicts)}
			for i := range jobs {
				jobs[i].weight = c.weights[i]
				if c.src != nil {
					jobs[i].src = c.src[i]
				}
				if dl, ok := c.deadline[i]; ok {
					d.Verdicts[i].Deadline = now.Add(dl)
				}
			}
			p := planStep(d, jobs, now, c.skips)
			var acts []act
			for _, pl := range p.each {
				acts = append(acts, pl.act)
			}
			if !slices.Equal(acts, c.acts) || p.head != c.head || p.spent != c.spent || p.next != c.next {
				t.Fatalf("acts %v, head %d, spent %d, next %v; want %v, %d, %d, %v", acts, p.head, p.spent, p.next, c.acts, c.head, c.spent, c.next)
			}
			for i, pl := range p.each {
				if i > c.head && pl.act == actWait && (pl.verdict.Fate != p.each[c.head].verdict.Fate || pl.verdict.Wait != p.each[c.head].verdict.Wait) {
					t.Errorf("job %d behind the head: verdict %+v, want the head's fate and wait %+v", i, pl.verdict, p.each[c.head].verdict)
				}
			}
		})
	}
}
