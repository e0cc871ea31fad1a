package activity

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/admitter/admitter/wire"
)

// busyIndex is an index that decided for bob (admitted, then delayed by burst) and carol
// (admitted) over the 12 seconds before t0, and dead-lettered a job of zed.
func busyIndex() *Index {
	x := New(0)
	for s := 12; s >= 1; s-- {
		at := t0.Add(-time.Duration(s) * time.Second)
		x.Record(Event{At: at, Tenant: "bob", Plan: "five", Fate: wire.FateAdmitted, Weight: 2})
		x.Record(Event{At: at.Add(time.Millisecond), Tenant: "carol", Plan: "ten", Fate: wire.FateAdmitted, Weight: 1})
	}
	x.Record(Event{At: t0.Add(-500 * time.Millisecond), Tenant: "bob", Plan: "five", Fate: wire.FateDelayed, Weight: 3, Wait: 400 * time.Millisecond, Limit: "burst"})
	x.Record(Event{At: t0.Add(-2 * time.Second), Tenant: "zed", Fate: wire.FateDead, Code: wire.CodeUnknownTenant})
	return x
}

func roundTrip(t *testing.T, s Share) Share {
	t.Helper()
	data := s.AppendJSON(nil)
	if len(data) > ShareBytes {
		t.Fatalf("%d bytes, over ShareBytes", len(data))
	}
	back, err := ParseShare(data)
	if err != nil {
		t.Fatalf("ParseShare(%s): %v", data, err)
	}
	return back
}

// TestShareRoundTrip: each kind of share reads back as it was written.
func TestShareRoundTrip(t *testing.T) {
	x := busyIndex()
	ov := roundTrip(t, x.Share("r1", ShareRequest{Want: WantOverview}, t0))
	if want := x.Series(t0, ShareSeconds); ov.Replica != "r1" || !ov.At.Equal(t0) || !reflect.DeepEqual(secondsOf(ov.Series), secondsOf(want)) {
		t.Errorf("overview: %s at %v, series differ from the index's", ov.Replica, ov.At)
	}
	if n := ov.Series[ShareSeconds-1].Jobs; n[wire.FateAdmitted] != 2 || n[wire.FateDelayed] != 1 {
		t.Errorf("overview: the last second counts %v, want 2 admitted and 1 delayed", n)
	}

	ts := roundTrip(t, x.Share("r1", ShareRequest{Want: WantTenants}, t0))
	if ts.Total != 3 || ts.Truncated || len(ts.Tenants) != 3 || ts.Tenants[0].Tenant != "bob" || ts.Tenants[1].Tenant != "carol" || ts.Tenants[2].Tenant != "zed" {
		t.Fatalf("tenants: %d of %d (truncated %v), want bob, carol, zed (most recent first): %+v", len(ts.Tenants), ts.Total, ts.Truncated, ts.Tenants)
	}
	bob, _, _ := x.Tenant("bob", t0)
	if got := ts.Tenants[0]; !sameTenant(got, bob) || got.AdmittedPerSec != 2 || got.Latest.Limit != "burst" {
		t.Errorf("bob:\n got %+v\nwant %+v", got, bob)
	}

	one := roundTrip(t, x.Share("r1", ShareRequest{Want: WantTenant, Tenant: "bob"}, t0))
	if len(one.Tenants) != 1 || len(one.Waits) != 1 || one.Waits[0].Wait != 400*time.Millisecond || one.Waits[0].Fate != wire.FateDelayed {
		t.Errorf("bob's share: %+v", one)
	}
	if none := roundTrip(t, x.Share("r1", ShareRequest{Want: WantTenant, Tenant: "nobody"}, t0)); len(none.Tenants) != 0 || len(none.Waits) != 0 {
		t.Errorf("a tenant not seen: %+v", none)
	}

	// A run of identical waits keeps its count and time range; a single wait reads back as one.
	for i := range 4 {
		x.Record(Event{At: t0.Add(time.Duration(i) * time.Millisecond), Tenant: "bob", Plan: "five", Fate: wire.FateDelayed, Again: true, Weight: 3, Wait: time.Second, Limit: "burst"})
	}
	runs := roundTrip(t, x.Share("r1", ShareRequest{Want: WantTenant, Tenant: "bob"}, t0.Add(time.Second)))
	if len(runs.Waits) != 2 || runs.Waits[0].Count != 4 || !runs.Waits[0].First.Equal(t0) || !runs.Waits[0].At.Equal(t0.Add(3*time.Millisecond)) ||
		runs.Waits[1].Count != 1 || !runs.Waits[1].First.Equal(runs.Waits[1].At) {
		t.Errorf("bob's waits after a run of 4: %+v", runs.Waits)
	}
	share := x.Share("r1", ShareRequest{Want: WantTenant, Tenant: "bob"}, t0.Add(time.Second))
	if data := string(share.AppendJSON(nil)); strings.Count(data, `"count"`) != 1 {
		t.Errorf("count written for other than the run: %s", data)
	}
}

func secondsOf(s []Second) map[int64][wire.NumFates]int64 {
	m := map[int64][wire.NumFates]int64{}
	for _, sec := range s {
		m[sec.At.Unix()] = sec.Jobs
	}
	return m
}

func sameTenant(a, b Tenant) bool {
	return a.Tenant == b.Tenant && a.Plan == b.Plan && a.LastSeen.Equal(b.LastSeen) && a.AdmittedWeight == b.AdmittedWeight &&
		a.Admitted == b.Admitted && a.Delayed == b.Delayed && a.Dead == b.Dead && a.Latest.At.Equal(b.Latest.At) &&
		a.Latest.Fate == b.Latest.Fate && a.Latest.Wait == b.Latest.Wait && a.Latest.Limit == b.Latest.Limit
}

// TestShareBounded: a replica keeping 10,000 tenants (of 100,000 seen) sends the 1,000 seen
// most recently, within ShareBytes, and says how many it left out; with long names, fewer, still
// within ShareBytes.
func TestShareBounded(t *testing.T) {
	x := New(0)
	for i := range 100_000 {
		x.Record(Event{At: t0.Add(time.Duration(i) * time.Millisecond), Tenant: fmt.Sprintf("tenant-%06d", i), Plan: "five", Fate: wire.FateAdmitted, Weight: 1})
	}
	now := t0.Add(100 * time.Second)
	s := x.Share("r1", ShareRequest{Want: WantTenants}, now)
	data := s.AppendJSON(nil)
	back, err := ParseShare(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > ShareBytes || len(back.Tenants) != ShareTenants || !back.Truncated || back.Total != s.Total || s.Total < 9000 {
		t.Fatalf("%d bytes, %d tenants of %d, truncated %v; want at most %d bytes, %d tenants of the %d kept, truncated",
			len(data), len(back.Tenants), back.Total, back.Truncated, ShareBytes, ShareTenants, s.Total)
	}
	if back.Tenants[0].Tenant != "tenant-099999" || back.Tenants[ShareTenants-1].Tenant != "tenant-099000" {
		t.Errorf("listed %s to %s, want the most recent first: tenant-099999 to tenant-099000", back.Tenants[0].Tenant, back.Tenants[ShareTenants-1].Tenant)
	}
	t.Logf("%d tenants of %d in %d bytes (%d per tenant)", len(back.Tenants), back.Total, len(data), len(data)/len(back.Tenants))

	long := New(0)
	for i := range 2000 {
		long.Record(Event{At: t0.Add(time.Duration(i) * time.Millisecond), Tenant: fmt.Sprintf("%04d-%s", i, strings.Repeat("x", 1000)), Fate: wire.FateAdmitted, Weight: 1})
	}
	ls := long.Share("r1", ShareRequest{Want: WantTenants}, now)
	data = ls.AppendJSON(nil)
	if back, err = ParseShare(data); err != nil {
		t.Fatal(err)
	}
	if len(data) > ShareBytes || len(back.Tenants) < 200 || len(back.Tenants) >= 300 || !back.Truncated || back.Total != 2000 {
		t.Errorf("long names: %d bytes, %d tenants of %d, truncated %v", len(data), len(back.Tenants), back.Total, back.Truncated)
	}
}

// TestParseShareRefuses: every bad share is refused with an error that says what and where.
func TestParseShareRefuses(t *testing.T) {
	head := `{"v":1,"replica":"r2","at_ns":1764000000000000000,`
	bob := `{"tenant":"bob","last_ns":1763999999000000000,"latest":{"at_ns":1763999999000000000,"fate":"admitted"}}`
	for _, c := range []struct{ in, want string }{
		{``, "no JSON value"},
		{`{"v":1`, "the JSON ends early"},
		{`{"v":1,}`, "malformed JSON after byte 8"},
		{`[]`, "array, ending at byte 1, where an object was expected"},
		{`{"v":"1"}`, `field "v", ending at byte 8: string where an integer was expected`},
		{`{"replica":"r2"}`, `no version ("v")`},
		{`{"v":2,"replica":"r2"}`, "version 2: this replica reads version 1"},
		{`{"v":1,"at_ns":5}`, `no "replica"`},
		{`{"v":1,"replica":"r2"}`, "at_ns 0 is not a time"},
		{head + `"want":"everything"}`, `want "everything": overview, tenants or tenant`},
		{head + `"want":"tenants","tenants":[` + bob + `]} {}`, "more after the JSON value, at byte"},
		{head + `"want":"tenants","tenants":[` + bob + `],"total":1,"x":` + strings.Repeat(" ", ShareBytes) + `1}`, "more than the 262144 a share may have"},
		{head + `"want":"tenants","tenants":[` + bob + `,` + bob + `],"total":2}`, `tenant 1 ("bob") is listed twice`},
		{head + `"want":"tenants","tenants":[` + bob + `],"total":0}`, "total 0 is less than the 1 tenants listed"},
		{head + `"want":"tenants","tenants":[` + bob + `],"total":5}`, "truncated is false with 1 of 5 tenants listed"},
		{head + `"want":"tenants","tenants":[{"tenant":"","last_ns":1}],"total":1}`, "tenant 0 has no name"},
		{head + `"want":"tenants","tenants":[{"tenant":"bob","last_ns":1,"admitted":-1,"latest":{"at_ns":1,"fate":"admitted"}}],"total":1}`, `tenant 0 ("bob"): a negative count (weight 0, admitted -1`},
		{head + `"want":"tenants","tenants":[{"tenant":"bob","last_ns":1,"latest":{"at_ns":1,"fate":"sideways"}}],"total":1}`, `tenant 0 ("bob"): latest: fate "sideways" is none of admitted, degraded, shadow_delayed, delayed, paused, held, dead, stored`},
		{head + `"want":"tenants","tenants":[{"tenant":"bob","last_ns":1,"weight":1.5}],"total":1}`, `field "tenants.weight", ending at byte`},
		{head + `"want":"overview","series":[[1763999999,1,0,0,0,0,0,0]]}`, "series second 0 has 8 numbers, want 9"},
		{head + `"want":"overview","series":[[1764000000,1,0,0,0,0,0,0,0]]}`, "series second 0 is 1764000000, not within the 300 seconds before at_ns (1763999700 to 1763999999)"},
		{head + `"want":"overview","series":[[1763999990,1,0,0,0,0,0,0,0],[1763999980,1,0,0,0,0,0,0,0]]}`, "series second 1 is 1763999980, not after the one before it (1763999990)"},
		{head + `"want":"overview","series":[[1763999990,0,0,0,-4,0,0,0,0]]}`, "series second 0: delayed count -4 is negative"},
		{head + `"want":"overview","tenants":[]}`, `tenants in a share of want "overview"`},
		{head + `"want":"tenants","series":[],"total":0}`, `series in a share of want "tenants"`},
		{head + `"want":"tenant","tenants":[` + bob + `,` + bob + `]}`, `2 tenants in a share of want "tenant": at most one`},
		{head + `"want":"tenant","waits":[{"at_ns":1,"fate":"delayed","wait_ns":-1}]}`, "wait 0: wait_ns -1 is negative"},
		{head + `"want":"tenant","waits":[{"at_ns":5,"fate":"delayed","count":-2}]}`, "wait 0: count -2 is negative"},
		{head + `"want":"tenant","waits":[{"at_ns":5,"fate":"delayed","first_ns":4}]}`, "wait 0: first_ns without a count above 1"},
		{head + `"want":"tenant","waits":[{"at_ns":5,"fate":"delayed","count":3}]}`, "wait 0: first_ns 0 of a run of 3 is not a time at or before at_ns 5"},
		{head + `"want":"tenant","waits":[{"at_ns":5,"fate":"delayed","count":3,"first_ns":6}]}`, "wait 0: first_ns 6 of a run of 3 is not a time at or before at_ns 5"},
		{head + `"want":"tenants","waits":[],"total":0}`, `waits in a share of want "tenants"`},
	} {
		_, err := ParseShare([]byte(c.in))
		if err == nil || !errors.Is(err, ErrBadShare) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseShare(%.80s):\n got %v\nwant ErrBadShare with %q", c.in, err, c.want)
		}
	}
	refusal := AppendRefusal(nil, "r2", t0, `bad share request: want "x"`)
	if _, err := ParseShare(refusal); !errors.Is(err, ErrShareRefused) || !strings.Contains(err.Error(), `replica r2: bad share request: want "x"`) {
		t.Errorf("a refusal: %v", err)
	}
}

// TestShareRequest: requests read back as written; bad ones are refused precisely.
func TestShareRequest(t *testing.T) {
	for _, r := range []ShareRequest{{Want: WantOverview}, {Want: WantTenants}, {Want: WantTenant, Tenant: "bob \"the\" builder"}} {
		if back, err := ParseShareRequest(r.AppendJSON(nil)); err != nil || back != r {
			t.Errorf("%+v read back as %+v, %v", r, back, err)
		}
	}
	for _, c := range []struct{ in, want string }{
		{`{"v":1}`, `no "want": overview, tenants or tenant`},
		{`{"v":1,"want":"all"}`, `want "all": overview, tenants or tenant`},
		{`{"v":1,"want":"tenant"}`, `want "tenant" without a tenant`},
		{`{"v":1,"want":"tenant","tenant":""}`, `want "tenant" without a tenant`},
		{`{"v":1,"want":"tenants","tenant":"bob"}`, `a tenant ("bob") with want "tenants": only want "tenant" names one`},
		{`{"v":3,"want":"tenants"}`, "version 3: this replica reads version 1"},
		{`{"v":1,"want":7}`, `field "want", ending at byte 15: number where a string was expected`},
		{`{"v":1,"want":"tenant","tenant":"` + strings.Repeat("x", ShareRequestBytes) + `"}`, "more than the 4096 a request may have"},
	} {
		_, err := ParseShareRequest([]byte(c.in))
		if err == nil || !errors.Is(err, ErrBadShareRequest) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseShareRequest(%.80s):\n got %v\nwant ErrBadShareRequest with %q", c.in, err, c.want)
		}
	}
}

// FuzzParseShare: the decoder never panics; what it refuses it refuses with ErrBadShare or
// ErrShareRefused; what it accepts is within the bounds and survives a round trip. Seeds live in
// testdata/fuzz/FuzzParseShare/.
func FuzzParseShare(f *testing.F) {
	x := busyIndex()
	for _, r := range []ShareRequest{{Want: WantOverview}, {Want: WantTenants}, {Want: WantTenant, Tenant: "bob"}} {
		s := x.Share("r1", r, t0)
		f.Add(s.AppendJSON(nil))
	}
	f.Add(AppendRefusal(nil, "r1", t0, "no"))
	f.Add([]byte(`{"v":1,"replica":"r","at_ns":1,"want":"tenants","total":3,"truncated":true}`))
	f.Add([]byte(`{"v":1,"replica":"r","at_ns":10,"want":"tenant","tenants":[],"waits":[{"at_ns":9,"fate":"delayed","again":true,"count":3,"first_ns":2}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseShare(data)
		if err != nil {
			if !errors.Is(err, ErrBadShare) && !errors.Is(err, ErrShareRefused) {
				t.Fatalf("ParseShare(%q): %v wraps neither ErrBadShare nor ErrShareRefused", data, err)
			}
			if !reflect.DeepEqual(s, Share{}) {
				t.Fatalf("ParseShare(%q) = %+v with error %v", data, s, err)
			}
			return
		}
		if len(s.Tenants) > ShareTenants || len(s.Waits) > RecentWaits || (s.Want == WantOverview && len(s.Series) != ShareSeconds) || s.Replica == "" {
			t.Fatalf("ParseShare(%q) accepted a share out of bounds: %+v", data, s)
		}
		again := s.AppendJSON(nil)
		back, err := ParseShare(again)
		if err != nil {
			t.Fatalf("ParseShare(%q) = %+v, written as %s, is refused: %v", data, s, again, err)
		}
		if !reflect.DeepEqual(back, s) {
			t.Fatalf("round trip of %q through %s:\n got %+v\nwant %+v", data, again, back, s)
		}
	})
}

// FuzzParseShareRequest: the request's decoder never panics, refuses with ErrBadShareRequest,
// and what it accepts survives a round trip. Seeds live in testdata/fuzz/FuzzParseShareRequest/.
func FuzzParseShareRequest(f *testing.F) {
	for _, s := range []string{`{"v":1,"want":"overview"}`, `{"v":1,"want":"tenant","tenant":"bob"}`, `{"v":1,"want":"tenants","tenant":null}`, `null`, `{"v":1,"want":"tenant","tenant":"\ud800"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseShareRequest(data)
		if err != nil {
			if !errors.Is(err, ErrBadShareRequest) || r != (ShareRequest{}) {
				t.Fatalf("ParseShareRequest(%q) = %+v, %v", data, r, err)
			}
			return
		}
		if r.Want < WantOverview || r.Want > WantTenant || (r.Want == WantTenant) != (r.Tenant != "") {
			t.Fatalf("ParseShareRequest(%q) accepted %+v", data, r)
		}
		if back, err := ParseShareRequest(r.AppendJSON(nil)); err != nil || back != r {
			t.Fatalf("round trip of %+v: %+v, %v", r, back, err)
		}
	})
}
