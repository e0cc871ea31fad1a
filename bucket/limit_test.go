package bucket

import (
	"math/rand/v2"
	"testing"
	"time"
)

func mustLoc(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// TestPeriodBounds checks calendar periods at their edges, daylight-saving changes included.
func TestPeriodBounds(t *testing.T) {
	ny, howe, nepal, santiago := mustLoc(t, "America/New_York"), mustLoc(t, "Australia/Lord_Howe"), mustLoc(t, "Asia/Kathmandu"), mustLoc(t, "America/Santiago")
	utc := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, c := range []struct {
		p          Period
		loc        *time.Location
		at         string
		start, end string
	}{
		{Minute, nil, "2026-11-21T12:00:30Z", "2026-11-21T12:00:00Z", "2026-11-21T12:01:00Z"},
		{Minute, nil, "2026-11-21T12:01:00Z", "2026-11-21T12:01:00Z", "2026-11-21T12:02:00Z"},
		{Hour, nil, "2026-11-21T12:59:59Z", "2026-11-21T12:00:00Z", "2026-11-21T13:00:00Z"},
		{Hour, nepal, "2026-11-21T12:00:00Z", "2026-11-21T11:15:00Z", "2026-11-21T12:15:00Z"}, // UTC+5:45
		{Day, nil, "2026-12-31T23:59:59Z", "2026-12-31T00:00:00Z", "2027-01-01T00:00:00Z"},
		{Day, ny, "2026-11-21T04:00:00Z", "2026-11-20T05:00:00Z", "2026-11-21T05:00:00Z"},
		{Week, nil, "2026-11-21T12:00:00Z", "2026-11-16T00:00:00Z", "2026-11-23T00:00:00Z"}, // Saturday → Monday
		{Week, nil, "2026-11-23T00:00:00Z", "2026-11-23T00:00:00Z", "2026-11-30T00:00:00Z"},
		{Week, nil, "2026-12-30T00:00:00Z", "2026-12-28T00:00:00Z", "2027-01-04T00:00:00Z"}, // across the year
		{Month, nil, "2026-02-15T00:00:00Z", "2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z"},
		{Month, nil, "2026-12-31T23:00:00Z", "2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z"},
		{Month, ny, "2026-12-01T03:00:00Z", "2026-11-01T04:00:00Z", "2026-12-01T05:00:00Z"}, // EDT → EST inside
		// New York springs forward at 02:00 EST (07:00Z) on 2026-03-08: the day lasts 23h, the
		// 02:00 hour does not exist.
		{Day, ny, "2026-03-08T12:00:00Z", "2026-03-08T05:00:00Z", "2026-03-09T04:00:00Z"},
		{Hour, ny, "2026-03-08T06:30:00Z", "2026-03-08T06:00:00Z", "2026-03-08T07:00:00Z"},
		{Hour, ny, "2026-03-08T07:30:00Z", "2026-03-08T07:00:00Z", "2026-03-08T08:00:00Z"},
		// It falls back at 02:00 EDT (06:00Z) on 2026-11-01: the day lasts 25h.
		{Day, ny, "2026-11-01T12:00:00Z", "2026-11-01T04:00:00Z", "2026-11-02T05:00:00Z"},
		// Lord Howe moves by 30 minutes (+10:30 → +11 at 02:00 on 2026-10-04): a day of 23h30,
		// and an hour "02" of 30 minutes.
		{Day, howe, "2026-10-04T12:00:00Z", "2026-10-03T13:30:00Z", "2026-10-04T13:00:00Z"},
		{Hour, howe, "2026-10-03T15:40:00Z", "2026-10-03T15:30:00Z", "2026-10-03T16:00:00Z"},
		// New York's repeated hour on 2026-11-01 (01:00–02:00 EDT, then 01:00–02:00 EST): two hours.
		{Hour, ny, "2026-11-01T05:30:00Z", "2026-11-01T05:00:00Z", "2026-11-01T06:00:00Z"},
		{Hour, ny, "2026-11-01T06:30:00Z", "2026-11-01T06:00:00Z", "2026-11-01T07:00:00Z"},
		{Minute, ny, "2026-11-01T06:34:15Z", "2026-11-01T06:34:00Z", "2026-11-01T06:35:00Z"},
		// Santiago springs forward at midnight (2026-09-06 00:00 → 01:00): the day starts at 01:00.
		{Day, santiago, "2026-09-06T12:00:00Z", "2026-09-06T04:00:00Z", "2026-09-07T03:00:00Z"},
	} {
		l := quota("q", 1, c.p, c.loc)
		start, end := l.PeriodBounds(utc(c.at))
		if !start.Equal(utc(c.start)) || !end.Equal(utc(c.end)) {
			t.Errorf("%v in %v at %s: [%s, %s), want [%s, %s)", c.p, l.location(), c.at,
				start.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339), c.start, c.end)
		}
	}
}

// TestPeriodBoundsPartition: periods tile time, in every zone and period, across the
// daylight-saving changes of several years: each instant lies in exactly one period, whose
// bounds it reproduces.
func TestPeriodBoundsPartition(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, name := range []string{"UTC", "America/New_York", "Europe/Paris", "Australia/Lord_Howe", "Asia/Kathmandu", "America/Santiago", "Pacific/Apia", "Africa/Casablanca"} {
		loc := mustLoc(t, name)
		for p := Minute; p <= Month; p++ {
			l := quota("q", 1, p, loc)
			for range 400 {
				at := base.Add(time.Duration(rng.Int64N(int64(3 * 365 * 24 * time.Hour))))
				start, end := l.PeriodBounds(at)
				if at.Before(start) || !at.Before(end) {
					t.Fatalf("%s %v: %v not in [%v, %v)", name, p, at, start, end)
				}
				if d := end.Sub(start); d < p.nominal()/2-time.Hour || d > 31*24*time.Hour+time.Hour {
					t.Fatalf("%s %v at %v: a period of %v", name, p, at, d)
				}
				for _, inside := range []time.Time{start, end.Add(-time.Microsecond), start.Add(end.Sub(start) / 2)} {
					s2, e2 := l.PeriodBounds(inside)
					if !s2.Equal(start) || !e2.Equal(end) {
						t.Fatalf("%s %v: %v gives [%v, %v), but %v in it gives [%v, %v)", name, p, at, start, end, inside, s2, e2)
					}
				}
				if s3, _ := l.PeriodBounds(end); !s3.Equal(end) {
					t.Fatalf("%s %v: the period after [%v, %v) starts at %v", name, p, start, end, s3)
				}
			}
		}
	}
}

func TestGrainAndShortDuration(t *testing.T) {
	for _, c := range []struct {
		limit  int64
		window time.Duration
		grain  time.Duration
	}{
		{64, time.Hour, time.Microsecond},
		{65, 64 * time.Second, time.Second},
		{1000, time.Hour, 56250 * time.Millisecond},
		{1000, 100 * time.Microsecond, 2 * time.Microsecond}, // rounded up
	} {
		if g := win("", c.limit, c.window).Grain(); g != c.grain {
			t.Errorf("grain of %d per %v = %v, want %v", c.limit, c.window, g, c.grain)
		}
	}
	for d, want := range map[time.Duration]string{time.Hour: "1h", 3 * time.Second: "3s", 90 * time.Second: "1m30s",
		48 * time.Hour: "2d", 90 * time.Minute: "1h30m", 1500 * time.Millisecond: "1.5s", 10 * time.Minute: "10m"} {
		if got := ShortDuration(d); got != want {
			t.Errorf("ShortDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

// TestPlanLease: a plan's lease is the shortest of its concurrency limits' (the first to end
// when a job is neither released nor renewed), zero without one.
func TestPlanLease(t *testing.T) {
	for _, tc := range []struct {
		plan *Plan
		want time.Duration
	}{
		{mustPlan(t, "bucket", lim("b", 5, time.Second)), 0},
		{mustPlan(t, "one", conc("c", 2, time.Minute), lim("b", 5, time.Second)), time.Minute},
		{mustPlan(t, "two", conc("long", 8, time.Hour), conc("short", 2, 1500*time.Millisecond)), 1500 * time.Millisecond},
	} {
		if got := tc.plan.Lease(); got != tc.want {
			t.Errorf("plan %s: Lease() = %v, want %v", tc.plan.Name, got, tc.want)
		}
	}
}
