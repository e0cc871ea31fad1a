package admission

import (
	"context"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// TestAskOrder: a step asks about its jobs highest (effective) priority first, FIFO within a
// priority; a plan's aging lifts a waiting job one level per period waited.
func TestAskOrder(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	type in struct {
		seq uint64
		p   int
		age time.Duration
	}
	for _, c := range []struct {
		name  string
		jobs  []in
		aging time.Duration
		want  []uint64 // sequences, as asked
	}{
		{name: "the default priority alone: as stored", jobs: []in{{1, 3, 0}, {2, 3, 0}, {3, 3, 0}}, want: []uint64{1, 2, 3}},
		{name: "1 first, 5 last, FIFO within each", jobs: []in{{1, 5, 0}, {2, 3, 0}, {3, 1, 0}, {4, 3, 0}, {5, 1, 0}, {6, 4, 0}},
			want: []uint64{3, 5, 2, 4, 6, 1}},
		{name: "without aging a job waits at its level however long", jobs: []in{{1, 5, time.Hour}, {2, 3, 0}}, want: []uint64{2, 1}},
		{name: "aging lifts one level per period waited: 5 waiting 2 periods goes with the 3s, ahead of those stored after it",
			jobs: []in{{1, 5, 20 * time.Minute}, {2, 3, 0}, {3, 1, 0}}, aging: 10 * time.Minute, want: []uint64{3, 1, 2}},
		{name: "one period short of it, it still waits", jobs: []in{{1, 5, 19 * time.Minute}, {2, 3, 0}}, aging: 10 * time.Minute, want: []uint64{2, 1}},
		{name: "never above the highest: aged to 1, it goes after the priority-1 jobs stored before it", jobs: []in{{1, 1, 0}, {2, 5, 10 * time.Hour}, {3, 1, 0}},
			aging: time.Minute, want: []uint64{1, 2, 3}},
	} {
		t.Run(c.name, func(t *testing.T) {
			jobs := make([]job, len(c.jobs))
			for i, j := range c.jobs {
				jobs[i] = job{at: j.seq, priority: j.p, stored: now.Add(-j.age)}
			}
			var got []uint64
			for _, i := range askOrder(jobs, c.aging, now) {
				got = append(got, jobs[i].at)
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("asked %v, want %v", got, c.want)
			}
		})
	}
}

// TestPick: what a step asks about within its budget, in the order ranked, and which of them may
// settle in their place (read in order, none left out before them).
func TestPick(t *testing.T) {
	for _, c := range []struct {
		name    string
		weights []int64 // as read: the dense first, then those of the index
		dense   int
		order   []int
		budget  int64
		asked   []int // indexes as read
		inOrder int
	}{
		{name: "all fit, in order", weights: []int64{1, 1, 1}, dense: 3, order: []int{0, 1, 2}, budget: 10, asked: []int{0, 1, 2}, inOrder: 3},
		{name: "a head heavier than the turn goes alone", weights: []int64{5, 1}, dense: 2, order: []int{0, 1}, budget: 2, asked: []int{0}, inOrder: 1},
		{name: "the budget goes to the jobs ranked first; those read after a job left out do not settle in place",
			weights: []int64{1, 1, 1, 1}, dense: 4, order: []int{2, 0, 3, 1}, budget: 3, asked: []int{2, 0, 3}, inOrder: 1},
		{name: "jobs of the index are never in order", weights: []int64{1, 1, 1}, dense: 2, order: []int{2, 0, 1}, budget: 3, asked: []int{2, 0, 1}, inOrder: 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			jobs := make([]job, len(c.weights))
			for i := range jobs {
				jobs[i] = job{at: uint64(i + 1), weight: c.weights[i], span: trace.SpanFromContext(context.Background())}
			}
			picked, at, inOrder := pick(jobs, c.dense, c.order, c.budget)
			var asked []int
			for _, k := range at {
				asked = append(asked, int(picked[k].at)-1)
			}
			if !slices.Equal(asked, c.asked) || inOrder != c.inOrder {
				t.Fatalf("asked %v, in order %d; want %v, %d", asked, inOrder, c.asked, c.inOrder)
			}
			for k := range picked[:inOrder] {
				if picked[k].at != uint64(k+1) {
					t.Fatalf("job %d of those in order is at %d: not the run from the cursor", k, picked[k].at)
				}
			}
		})
	}
}

// TestPriorities: the index keeps each priority's jobs by sequence, drops what is settled, and
// gives the jobs beyond those read that rank ahead of the default, best first, at most n.
func TestPriorities(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	var x priorities
	x.add(5, 3, now.Add(-30*time.Minute))
	x.add(1, 10, now)
	x.add(2, 11, now)
	x.add(1, 12, now)
	x.add(4, 13, now)
	seqs := func(es []indexed) []uint64 {
		var out []uint64
		for _, e := range es {
			out = append(out, e.seq)
		}
		return out
	}
	if got := seqs(x.ahead(0, 10, 0, now)); !slices.Equal(got, []uint64{10, 11, 12}) {
		t.Errorf("ahead without aging: %v, want 10 11 12 (priorities 1 and 2)", got)
	}
	if got := seqs(x.ahead(10, 10, 0, now)); !slices.Equal(got, []uint64{11, 12}) {
		t.Errorf("ahead after 10: %v, want 11 12", got)
	}
	if got := seqs(x.ahead(0, 2, 0, now)); !slices.Equal(got, []uint64{10, 12}) {
		t.Errorf("the best 2: %v, want 10 12 (both priority 1)", got)
	}
	if got := seqs(x.ahead(0, 10, 10*time.Minute, now)); !slices.Equal(got, []uint64{3, 10, 11, 12}) {
		t.Errorf("ahead with aging 10m: %v, want 3 (priority 5, 30 minutes old: 2) with 10 11 12", got)
	}
	if n := x.remove(11, 99); n != 1 || x.n != 4 {
		t.Errorf("remove(11, 99) = %d, n %d; want 1, 4", n, x.n)
	}
	if n := x.below(12); n != 2 || x.n != 2 {
		t.Errorf("below(12) = %d, n %d; want 2 (3 and 10), 2", n, x.n)
	}
	if got := seqs(x.ahead(0, 10, 0, now)); !slices.Equal(got, []uint64{12}) {
		t.Errorf("ahead after removals: %v, want 12", got)
	}
}
