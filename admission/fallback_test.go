package admission

import (
	"log/slog"
	"testing"
	"time"

	"github.com/admitter/admitter/subjects"
)

// TestTheRouterTellsOneTenureFromTheNext: the router says since when this replica decides a
// tenant: the same time for as long as it holds the tenant's partition, a later one once it has
// given the partition up and taken it again (a copy mirrored before is not trusted), none while
// another replica holds it, and a time of its own while none is known to.
func TestTheRouterTellsOneTenureFromTheNext(t *testing.T) {
	o := newOwners("a", 1, 100*time.Millisecond, slog.New(slog.DiscardHandler))
	r := newRouter(&Service{cfg: Config{Replica: "a", Consumer: "c"}, owners: o, in: input{ps: subjects.Partitions{N: 1}}})
	set := func(h *held, other string) {
		o.mu.Lock()
		defer o.mu.Unlock()
		if h != nil {
			o.mine[0] = h
		} else {
			delete(o.mine, 0)
		}
		o.keys[0] = seenKey{owner: other, since: time.Now()}
	}
	key := "tenant:acme"
	set(&held{until: time.Now().Add(time.Minute)}, "")
	first := r.Since(key)
	if first.IsZero() || !r.Since(key).Equal(first) {
		t.Fatalf("held: since %v, then %v: want one time for the tenure", first, r.Since(key))
	}
	set(nil, "b")
	if s := r.Since(key); !s.IsZero() {
		t.Fatalf("held by b: since %v, want zero", s)
	}
	time.Sleep(time.Millisecond) // a later tenure begins at a later time on this host's clock
	set(&held{until: time.Now().Add(time.Minute)}, "")
	second := r.Since(key)
	if !second.After(first) {
		t.Fatalf("held again: since %v, want later than the first tenure's %v", second, first)
	}
	set(nil, "")
	if s := r.Since(key); s.IsZero() || s.Equal(second) {
		t.Fatalf("held by none: since %v, want a time of its own", s)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.since) != 1 {
		t.Errorf("the router remembers %d tenures, want the one under way", len(r.since))
	}
}
