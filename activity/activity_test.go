package activity

import (
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/admitter/admitter/wire"
)

var t0 = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

// TestTenantRate: a tenant admitted 5 jobs of weight 2 every second for 20 seconds has 10/s over
// the window; the second under way does not count.
func TestTenantRate(t *testing.T) {
	x := New(0)
	for s := range 20 {
		for j := range 5 {
			x.Record(Event{At: t0.Add(time.Duration(s)*time.Second + time.Duration(j)*100*time.Millisecond), Tenant: "acme", Plan: "gold", Fate: wire.FateAdmitted, Weight: 2})
		}
	}
	x.Record(Event{At: t0.Add(20 * time.Second), Tenant: "acme", Fate: wire.FateAdmitted, Weight: 1000}) // under way
	v, _, ok := x.Tenant("acme", t0.Add(20*time.Second+500*time.Millisecond))
	if !ok {
		t.Fatal("acme not found")
	}
	if v.AdmittedPerSec != 10 || v.Admitted != 50 || v.Plan != "gold" {
		t.Errorf("acme: %.1f/s, %d admitted, plan %q; want 10/s, 50, gold", v.AdmittedPerSec, v.Admitted, v.Plan)
	}
	// Much later, the rate is zero and the tenant is no longer listed.
	late := t0.Add(Retention + time.Minute)
	if _, _, ok := x.Tenant("acme", late); ok {
		t.Errorf("acme listed %v after its last decision", Retention+time.Minute)
	}
	if n := len(x.Tenants(late)); n != 0 {
		t.Errorf("%d tenants listed after the retention, want 0", n)
	}
}

// TestSeries: the replica's counts per second by kind, oldest first, zero where nothing
// happened; lane waits are not jobs.
func TestSeries(t *testing.T) {
	x := New(0)
	x.Record(Event{At: t0, Tenant: "a", Fate: wire.FateAdmitted, Weight: 1})
	x.Record(Event{At: t0.Add(100 * time.Millisecond), Tenant: "b", Fate: wire.FateAdmitted, Weight: 1})
	x.Record(Event{At: t0.Add(2 * time.Second), Tenant: "a", Fate: wire.FateDelayed, Weight: 1, Wait: time.Second, Limit: "burst"})
	x.Record(Event{At: t0.Add(2 * time.Second), Tenant: "c", Fate: wire.FateDead, Code: "unknown-tenant"})
	x.Record(Event{At: t0.Add(2 * time.Second), Tenant: "a", Fate: wire.FateDelayed, Again: true, Wait: time.Second})
	s := x.Series(t0.Add(3*time.Second), 4)
	if len(s) != 4 || !s[0].At.Equal(t0.Add(-time.Second)) || !s[3].At.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("series spans %v..%v (%d), want %v..%v", s[0].At, s[len(s)-1].At, len(s), t0.Add(-time.Second), t0.Add(2*time.Second))
	}
	want := [][wire.NumFates]int64{{}, {wire.FateAdmitted: 2}, {}, {wire.FateDelayed: 1, wire.FateDead: 1}}
	for i := range s {
		if s[i].Jobs != want[i] {
			t.Errorf("second %d: %v, want %v", i, s[i].Jobs, want[i])
		}
	}
	// A second from more than SeriesSeconds ago is gone (its slot reused).
	x.Record(Event{At: t0.Add(SeriesSeconds * time.Second), Tenant: "a", Fate: wire.FateAdmitted})
	if s := x.Series(t0.Add(SeriesSeconds*time.Second+time.Second), SeriesSeconds); s[0].Jobs[wire.FateAdmitted] != 0 || s[len(s)-1].Jobs[wire.FateAdmitted] != 1 {
		t.Errorf("after a wrap: oldest %v, newest %v", s[0].Jobs, s[len(s)-1].Jobs)
	}
}

// TestRecentWaits: waits are kept newest first, at most RecentWaits; the latest decision and
// its next slot follow the latest event.
func TestRecentWaits(t *testing.T) {
	x := New(0)
	for i := range 20 {
		x.Record(Event{At: t0.Add(time.Duration(i) * time.Second), Tenant: "a", Fate: wire.FateDelayed, Weight: int64(i), Wait: 3 * time.Second, Limit: "burst"})
	}
	x.Record(Event{At: t0.Add(20 * time.Second), Tenant: "a", Fate: wire.FateAdmitted, Weight: 1, Wait: 4 * time.Second})
	x.Record(Event{At: t0.Add(21 * time.Second), Tenant: "a", Fate: wire.FateAdmitted, Weight: 1}) // not a wait
	v, waits, _ := x.Tenant("a", t0.Add(22*time.Second))
	if len(waits) != RecentWaits || waits[0].Fate != wire.FateAdmitted || waits[0].Wait != 4*time.Second || waits[1].Weight != 19 {
		t.Errorf("waits: %+v", waits)
	}
	if !v.NextSlot().IsZero() {
		t.Errorf("next slot %v after an admission, want none", v.NextSlot())
	}
	x.Record(Event{At: t0.Add(22 * time.Second), Tenant: "a", Fate: wire.FateDelayed, Again: true, Wait: 5 * time.Second, Limit: "daily"})
	v, _, _ = x.Tenant("a", t0.Add(23*time.Second))
	if !v.NextSlot().Equal(t0.Add(27*time.Second)) || v.Latest.Limit != "daily" {
		t.Errorf("next slot %v for limit %q, want %v for daily", v.NextSlot(), v.Latest.Limit, t0.Add(27*time.Second))
	}
}

// TestBoundedTenants: 100,000 tenants seen, at most MaxTenants kept, and the ones kept are the
// most recent.
func TestBoundedTenants(t *testing.T) {
	x := New(1000)
	for i := range 100_000 {
		x.Record(Event{At: t0.Add(time.Duration(i) * time.Millisecond), Tenant: fmt.Sprint("t", i), Fate: wire.FateAdmitted, Weight: 1})
	}
	now := t0.Add(100 * time.Second)
	ts := x.Tenants(now)
	if len(ts) > x.MaxTenants() || len(ts) < 900 {
		t.Fatalf("%d tenants kept, want at most %d (and most of them)", len(ts), x.MaxTenants())
	}
	if _, _, ok := x.Tenant("t99999", now); !ok {
		t.Errorf("the latest tenant was forgotten")
	}
	if _, _, ok := x.Tenant("t0", now); ok {
		t.Errorf("the first tenant is still kept")
	}
}

// TestConcurrentRecord: records and reads from many goroutines (run under -race).
func TestConcurrentRecord(t *testing.T) {
	x := New(100)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				x.Record(Event{At: t0.Add(time.Duration(i) * time.Millisecond), Tenant: fmt.Sprint("t", (g*i)%300), Fate: wire.Fate(i % int(wire.NumFates)), Weight: 1})
				if i%100 == 0 {
					x.Tenants(t0.Add(time.Second))
					x.Series(t0.Add(time.Second), 10)
				}
			}
		})
	}
	wg.Wait()
	if n := len(x.Tenants(t0.Add(3 * time.Second))); n > x.MaxTenants() {
		t.Errorf("%d tenants, over the bound %d", n, x.MaxTenants())
	}
}

// BenchmarkRecord: the cost the decision path pays per job.
func BenchmarkRecord(b *testing.B) {
	x := New(0)
	names := make([]string, 1000)
	for i := range names {
		names[i] = fmt.Sprint("tenant-", i)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			x.Record(Event{At: t0.Add(time.Duration(i) * time.Microsecond), Tenant: names[i%len(names)], Fate: wire.FateAdmitted, Weight: 1})
			i++
		}
	})
}

// TestRecentWaitsFoldRepeats: the head of a queue woken 100 times in a row and told each time
// to wait on the same limit is one line, with its count, its time range and the latest wait;
// it does not push the tenant's other waits out. Jobs forwarded after waiting stay one line
// each, and a change of limit, weight or "again" starts a new line.
func TestRecentWaitsFoldRepeats(t *testing.T) {
	x := New(0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	rec := func(ms int, f wire.Fate, again bool, weight int64, wait time.Duration, limit string) {
		x.Record(Event{At: at(ms), Tenant: "a", Fate: f, Again: again, Weight: weight, Wait: wait, Limit: limit})
	}
	rec(0, wire.FateAdmitted, false, 1, 2*time.Second, "")         // forwarded after waiting
	rec(10, wire.FateAdmitted, false, 1, 2*time.Second, "")        // another one: its own line
	rec(20, wire.FateDelayed, false, 1, 30*time.Second, "running") // told to wait
	for i := range 100 {
		rec(30+7*i, wire.FateDelayed, true, 1, 30*time.Second-time.Duration(i)*time.Millisecond, "running")
	}
	rec(800, wire.FateDelayed, true, 1, 20*time.Second, "burst") // another limit
	rec(810, wire.FateDelayed, true, 1, 20*time.Second, "burst")
	rec(820, wire.FateDelayed, true, 2, 20*time.Second, "burst") // another weight
	_, waits, _ := x.Tenant("a", at(900))
	type line struct {
		fate        wire.Fate
		again       bool
		weight      int64
		limit       string
		count       int
		first, last int
		wait        time.Duration
	}
	var got []line
	for _, w := range waits {
		got = append(got, line{w.Fate, w.Again, w.Weight, w.Limit, w.Count, int(w.First.Sub(t0).Milliseconds()), int(w.At.Sub(t0).Milliseconds()), w.Wait})
	}
	want := []line{
		{wire.FateDelayed, true, 2, "burst", 1, 820, 820, 20 * time.Second},
		{wire.FateDelayed, true, 1, "burst", 2, 800, 810, 20 * time.Second},
		{wire.FateDelayed, true, 1, "running", 100, 30, 723, 30*time.Second - 99*time.Millisecond},
		{wire.FateDelayed, false, 1, "running", 1, 20, 20, 30 * time.Second},
		{wire.FateAdmitted, false, 1, "", 1, 10, 10, 2 * time.Second},
		{wire.FateAdmitted, false, 1, "", 1, 0, 0, 2 * time.Second},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("waits, newest first:\n got %+v\nwant %+v", got, want)
	}
}
