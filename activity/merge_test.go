package activity

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/admitter/admitter/wire"
)

// TestMergeTenants: tenants of different replicas are listed once each, with the replica that
// decided them; a tenant decided by two replicas (its queue changed hands) has the sum of their
// counts, the latest decision of the two, and both replicas.
func TestMergeTenants(t *testing.T) {
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	r1 := Share{Replica: "r1", Want: WantTenants, Tenants: []Tenant{
		{Tenant: "bob", Plan: "five", LastSeen: at(-30), AdmittedWeight: 20, Admitted: 10, Delayed: 4, Latest: Wait{At: at(-30), Fate: wire.FateDelayed, Limit: "burst"}},
		{Tenant: "carol", Plan: "ten", LastSeen: at(-2), AdmittedWeight: 10, Admitted: 10, Latest: Wait{At: at(-2), Fate: wire.FateAdmitted}},
	}}
	r2 := Share{Replica: "r2", Want: WantTenants, Tenants: []Tenant{
		{Tenant: "bob", LastSeen: at(-1), AdmittedWeight: 30, Admitted: 15, Dead: 1, Latest: Wait{At: at(-1), Fate: wire.FateAdmitted}},
		{Tenant: "acme", Plan: "fast", LastSeen: at(-5), Admitted: 0, Dead: 2, Latest: Wait{At: at(-5), Fate: wire.FateDead}},
	}}
	got := MergeTenants([]Share{r1, r2})
	want := []Merged{
		{Tenant: Tenant{Tenant: "acme", Plan: "fast", LastSeen: at(-5), Dead: 2, Latest: Wait{At: at(-5), Fate: wire.FateDead}}, Replica: "r2", Replicas: []string{"r2"}},
		{Tenant: Tenant{Tenant: "bob", Plan: "five", LastSeen: at(-1), AdmittedWeight: 50, AdmittedPerSec: 5, Admitted: 25, Delayed: 4, Dead: 1, Latest: Wait{At: at(-1), Fate: wire.FateAdmitted}},
			Replica: "r2", Replicas: []string{"r1", "r2"}},
		{Tenant: Tenant{Tenant: "carol", Plan: "ten", LastSeen: at(-2), AdmittedWeight: 10, AdmittedPerSec: 1, Admitted: 10, Latest: Wait{At: at(-2), Fate: wire.FateAdmitted}}, Replica: "r1", Replicas: []string{"r1"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("merged:\n got %+v\nwant %+v", got, want)
	}
	if o := got[1].Others(); len(o) != 1 || o[0] != "r1" {
		t.Errorf("bob's other replicas: %v, want r1", o)
	}
	// The order of the shares does not matter.
	if again := MergeTenants([]Share{r2, r1}); !reflect.DeepEqual(again, want) {
		t.Errorf("merged the other way round:\n got %+v\nwant %+v", again, want)
	}
	if none := MergeTenants(nil); len(none) != 0 {
		t.Errorf("nothing merged: %+v", none)
	}
}

// TestMergeWaits: the replicas' waits of one tenant, newest first, each with its replica.
func TestMergeWaits(t *testing.T) {
	w := func(s int, limit string) Wait {
		return Wait{At: t0.Add(time.Duration(s) * time.Second), Fate: wire.FateDelayed, Wait: time.Second, Limit: limit}
	}
	got := MergeWaits([]Share{
		{Replica: "r1", Waits: []Wait{w(-10, "a"), w(-30, "b")}},
		{Replica: "r2", Waits: []Wait{w(-5, "c"), w(-10, "d")}},
	})
	var order []string
	for _, x := range got {
		order = append(order, x.Replica+":"+x.Limit)
	}
	if want := []string{"r2:c", "r1:a", "r2:d", "r1:b"}; !reflect.DeepEqual(order, want) {
		t.Errorf("merged waits %v, want %v", order, want)
	}

	// Runs of one replica in a row fold, whatever their shares did (an earlier version's share
	// folds nothing; a run cut in two); a line of another replica between them cuts the run.
	run := func(s, from, n int) Wait {
		x := w(s, "x")
		x.Count, x.First = n, t0.Add(time.Duration(from)*time.Second)
		return x
	}
	got = MergeWaits([]Share{
		{Replica: "r1", Waits: []Wait{w(-1, "x"), w(-4, "x"), run(-5, -9, 3), w(-10, "x"), w(-12, "y")}},
		{Replica: "r2", Waits: []Wait{w(-3, "x")}},
	})
	order = nil
	for _, x := range got {
		order = append(order, fmt.Sprintf("%s:%s×%d %v..%v", x.Replica, x.Limit, x.Count, x.First.Sub(t0), x.At.Sub(t0)))
	}
	if want := []string{"r1:x×1 -1s..-1s", "r2:x×1 -3s..-3s", "r1:x×5 -10s..-4s", "r1:y×1 -12s..-12s"}; !reflect.DeepEqual(order, want) {
		t.Errorf("merged runs %v, want %v", order, want)
	}
}

// TestMergeSeries: the replicas' seconds add up by their time; seconds outside the window (a
// share taken by a clock a second ahead) are left out.
func TestMergeSeries(t *testing.T) {
	a, b := New(0), New(0)
	for s := 1; s <= 5; s++ {
		a.Record(Event{At: t0.Add(-time.Duration(s) * time.Second), Tenant: "x", Fate: wire.FateAdmitted, Weight: 1})
		b.Record(Event{At: t0.Add(-time.Duration(s) * time.Second), Tenant: "y", Fate: wire.FateDelayed, Weight: 1})
	}
	b.Record(Event{At: t0, Tenant: "y", Fate: wire.FateDead}) // b's clock is a second ahead: t0 is complete for it
	sa := a.Share("a", ShareRequest{Want: WantOverview}, t0)
	sb := b.Share("b", ShareRequest{Want: WantOverview}, t0.Add(time.Second))
	got := MergeSeries(t0, 3, []Share{sa, sb})
	if len(got) != 3 || !got[0].At.Equal(t0.Add(-3*time.Second)) || !got[2].At.Equal(t0.Add(-time.Second)) {
		t.Fatalf("merged %d seconds from %v to %v", len(got), got[0].At, got[len(got)-1].At)
	}
	for _, s := range got {
		if s.Jobs[wire.FateAdmitted] != 1 || s.Jobs[wire.FateDelayed] != 1 || s.Jobs[wire.FateDead] != 0 {
			t.Errorf("second %v: %v, want 1 admitted (a), 1 delayed (b), and b's dead job of the second under way left out", s.At, s.Jobs)
		}
	}
}
