package admission

import (
	"slices"
	"testing"
	"time"

	"github.com/admitter/admitter/policy"
	"github.com/admitter/admitter/wire"
)

// TestPlanStep: what a step does with the jobs it read, from their decision alone. The jobs are
// given in the order they were asked about; each was read in order from the cursor (ordered)
// unless said otherwise, at sequence seq (its index + 1 unless said otherwise).
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
		seqs     []uint64 // as asked; nil: 1, 2, 3...
		unread   []bool   // not read in order (from the priority index)
		src      []bool   // read from an older stream
		skips    bool
		deadline map[int]time.Duration // a job's bound on waiting, from now
		acts     []act
		out      []int // the jobs settled out of their place
		inPlace  []int
		head     int
		spent    int64
		next     time.Duration
	}{
		{name: "every job goes: each forward spends its weight", verdicts: []policy.Verdict{admitted, admitted, {Fate: wire.FateDegraded}},
			weights: []int64{1, 3, 2}, acts: []act{actForward, actForward, actForward}, inPlace: []int{0, 1, 2}, head: 3, spent: 6},
		{name: "a dead letter spends 1, a job stored before nothing", verdicts: []policy.Verdict{dead, {Fate: wire.FateStored}, admitted},
			weights: []int64{5, 5, 5}, acts: []act{actDead, actStored, actForward}, inPlace: []int{0, 1, 2}, head: 3, spent: 6},
		{name: "the first that waits stops the step: the jobs behind wait with it, as long", verdicts: []policy.Verdict{admitted, waits(2 * time.Second), admitted, waits(time.Second)},
			weights: []int64{1, 1, 1, 1}, acts: []act{actForward, actWait, actWait, actWait}, inPlace: []int{0}, head: 1, spent: 1, next: 2 * time.Second},
		{name: "a job expired behind the head leaves out of its place; the queue reads on at once", verdicts: []policy.Verdict{waits(time.Minute), expired, waits(time.Minute)},
			weights: []int64{1, 1, 1}, skips: true, acts: []act{actWait, actDead, actWait}, out: []int{1}, head: 0, spent: 1, next: 0},
		{name: "not while the list of those not yet removed is full", verdicts: []policy.Verdict{waits(time.Minute), expired},
			weights: []int64{1, 1}, acts: []act{actWait, actWait}, head: 0, next: time.Minute},
		{name: "nor one of an older stream (read by its own cursor)", verdicts: []policy.Verdict{waits(time.Minute), expired},
			weights: []int64{1, 1}, src: []bool{false, true}, skips: true, acts: []act{actWait, actWait}, head: 0, next: time.Minute},
		{name: "a bound on waiting sooner than the head's wait wakes the queue then", verdicts: []policy.Verdict{waits(time.Minute), waits(time.Minute)},
			weights: []int64{1, 1}, deadline: map[int]time.Duration{1: 10 * time.Second}, acts: []act{actWait, actWait}, head: 0, next: 10 * time.Second},
		{name: "a bound already passed asks again within a millisecond", verdicts: []policy.Verdict{waits(time.Minute)},
			weights: []int64{1}, deadline: map[int]time.Duration{0: -time.Second}, acts: []act{actWait}, head: 0, next: time.Millisecond},
		{name: "a job ranked first, read from the index, goes out of its place; the jobs stored before it wait",
			verdicts: []policy.Verdict{admitted, waits(time.Second), waits(time.Second)}, seqs: []uint64{10_001, 1, 2}, unread: []bool{true, false, false},
			weights: []int64{1, 1, 1}, skips: true, acts: []act{actForward, actWait, actWait}, out: []int{0}, head: 1, spent: 1, next: time.Second},
		{name: "ranked ahead among the jobs read in order, it settles in its place once those before it went",
			verdicts: []policy.Verdict{admitted, admitted, waits(time.Second)}, seqs: []uint64{2, 1, 3},
			weights: []int64{1, 1, 1}, skips: true, acts: []act{actForward, actForward, actWait}, inPlace: []int{1, 0}, head: 2, spent: 2, next: time.Second},
		{name: "a job ranked ahead of one stored before it that waits settles out of its place",
			verdicts: []policy.Verdict{admitted, waits(time.Second)}, seqs: []uint64{2, 1},
			weights: []int64{1, 1}, skips: true, acts: []act{actForward, actWait}, out: []int{0}, head: 1, spent: 1, next: time.Second},
		{name: "one read from the index settles out of its place even when every job goes (those between were not read)",
			verdicts: []policy.Verdict{admitted, admitted, {Fate: wire.FateStored}}, seqs: []uint64{50, 1, 60}, unread: []bool{true, false, true},
			weights: []int64{2, 1, 1}, skips: true, acts: []act{actForward, actForward, actStored}, out: []int{0, 2}, inPlace: []int{1}, head: 3, spent: 3},
		{name: "a job that may not settle out of its place waits (a queue that asks in order never has one)",
			verdicts: []policy.Verdict{admitted, waits(time.Second)}, seqs: []uint64{2, 1},
			weights: []int64{1, 1}, acts: []act{actWait, actWait}, head: 1, next: time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			jobs := make([]job, len(c.verdicts))
			d := policy.Decision{Verdicts: slices.Clone(c.verdicts)}
			for i := range jobs {
				jobs[i].weight, jobs[i].at, jobs[i].ordered = c.weights[i], uint64(i+1), true
				if c.seqs != nil {
					jobs[i].at = c.seqs[i]
				}
				if c.unread != nil {
					jobs[i].ordered = !c.unread[i]
				}
				if c.src != nil {
					jobs[i].src = c.src[i]
				}
				if dl, ok := c.deadline[i]; ok {
					d.Verdicts[i].Deadline = now.Add(dl)
				}
			}
			p := planStep(d, jobs, now, c.skips)
			var acts []act
			var out []int
			for i, pl := range p.each {
				acts = append(acts, pl.act)
				if pl.out {
					out = append(out, i)
				}
			}
			if !slices.Equal(acts, c.acts) || !slices.Equal(out, c.out) || !slices.Equal(p.inPlace, c.inPlace) || p.head != c.head || p.spent != c.spent || p.next != c.next {
				t.Fatalf("acts %v, out %v, in place %v, head %d, spent %d, next %v; want %v, %v, %v, %d, %d, %v",
					acts, out, p.inPlace, p.head, p.spent, p.next, c.acts, c.out, c.inPlace, c.head, c.spent, c.next)
			}
			for i, pl := range p.each {
				if i > c.head && pl.act == actWait && (pl.verdict.Fate != p.each[c.head].verdict.Fate || pl.verdict.Wait != p.each[c.head].verdict.Wait) {
					t.Errorf("job %d behind the head: verdict %+v, want the head's fate and wait %+v", i, pl.verdict, p.each[c.head].verdict)
				}
			}
		})
	}
}
