package demo

import (
	"math"
	"testing"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/plans"
	"github.com/admitter/admitter/wire"
)

const testPlans = `
plans:
  free:
    limits:
      - {name: burst, capacity: 5, rate: 5/s}
  gold:
    limits:
      - {name: burst, capacity: 20, rate: 20/s}
      - {name: minute, capacity: 1200, rate: 1200/m}
  quota:
    limits:
      - {capacity: 100, rate: 100/s}
      - {name: hour, capacity: 10, rate: 60/h}
tenants:
  acme: free
  globex: gold
  umbrella: quota
`

func testPlansFile(t *testing.T) *bucket.Plans {
	t.Helper()
	p, err := plans.Parse("test", []byte(testPlans))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func plan(t *testing.T, name string) *bucket.Plan {
	t.Helper()
	p, ok := testPlansFile(t).Plan(name)
	if !ok {
		t.Fatalf("no plan %s", name)
	}
	return p
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func TestDemoPercentileNearestRank(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, ms(i))
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, ms(50)}, {99, ms(99)}, {100, ms(100)}, {1, ms(1)}, {0, ms(1)}, {99.5, ms(100)}} {
		if got := percentile(d, c.p); got != c.want {
			t.Errorf("p%v of 1..100ms = %v, want %v", c.p, got, c.want)
		}
	}
	one := []time.Duration{ms(7)}
	if percentile(one, 50) != ms(7) || percentile(one, 99) != ms(7) {
		t.Error("percentiles of one value must be that value")
	}
	// p99 of ten values is the largest: nearest rank ceil(9.9) = 10.
	if got := percentile([]time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 99); got != 10 {
		t.Errorf("p99 of 1..10 = %v, want 10", got)
	}
}

func TestDemoBindingAndAllowance(t *testing.T) {
	gold := plan(t, "gold")
	// Over 30s the burst limit allows 20 + 600 = 620, the minute limit 1200 + 600 = 1800.
	if i := Binding(gold, 30*time.Second); i != 0 {
		t.Errorf("binding limit of gold over 30s = %d, want 0 (burst)", i)
	}
	if a := Allowance(gold, 30*time.Second); math.Abs(a-620) > 1e-9 {
		t.Errorf("allowance of gold over 30s = %v, want 620", a)
	}
	// The hour limit of quota allows 10 + t/60, the first 100 + 100t: the hour limit binds
	// from the start.
	quota := plan(t, "quota")
	if i := Binding(quota, time.Second); i != 1 {
		t.Errorf("binding limit of quota = %d, want 1", i)
	}
	if got := limitLabel(quota, 0); got != "limit 0" {
		t.Errorf("label of an unnamed limit = %q", got)
	}
	if a := Allowance(plan(t, "free"), 0); a != 5 {
		t.Errorf("allowance over no time = %v, want the capacity 5", a)
	}
}

func TestDemoProfileDemand(t *testing.T) {
	const d = 30 * time.Second
	for _, c := range []struct {
		p       Profile
		elapsed time.Duration
		want    float64
	}{
		{Burst, 0, 0},
		{Burst, time.Second, 50},
		{Burst, 10 * time.Second, 500},
		{Steady, 10 * time.Second, 35},
		{IdleThenBurst, 9 * time.Second, 0},
		{IdleThenBurst, 10 * time.Second, 15},       // 3 × capacity 5 at once
		{IdleThenBurst, 12 * time.Second, 15 + 2*5}, // then the plan's rate
	} {
		if got := c.p.demand(c.elapsed, d, 5, 5); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%v at %v = %v tokens, want %v", c.p, c.elapsed, got, c.want)
		}
	}
}

func newTestStats(t *testing.T) *Stats {
	t.Helper()
	p := testPlansFile(t)
	free, _ := p.Plan("free")
	gold, _ := p.Plan("gold")
	return newStats([]tenantInfo{
		newTenantInfo(Tenant{Name: "acme", Plan: "free", Profile: Burst}, free, 10*time.Second),
		newTenantInfo(Tenant{Name: "globex", Plan: "gold", Profile: Steady}, gold, 10*time.Second),
	})
}

func TestDemoRowsCountTheLastSecond(t *testing.T) {
	s := newTestStats(t)
	for i, w := range []int64{1, 2, 3, 1} {
		s.published("acme", uint64(i+1), w)
	}
	s.admittedJob("acme", 1, arrival{at: at(ms(100)), weight: 1, attempts: 1, delay: 0})
	s.admittedJob("acme", 2, arrival{at: at(ms(600)), weight: 2, attempts: 2, delay: ms(400)})
	s.admittedJob("acme", 3, arrival{at: at(ms(1300)), weight: 3, attempts: 3, delay: ms(1200)})
	if s.admittedJob("acme", 3, arrival{at: at(ms(1400)), weight: 3, attempts: 9}) {
		t.Error("a sequence seen twice downstream was counted twice")
	}
	if s.admittedJob("nobody", 9, arrival{at: at(0), weight: 1}) {
		t.Error("an unknown tenant was counted")
	}

	// At 1.6s the last second is (0.6s, 1.6s]: only the job at 1.3s; the one at exactly 0.6s is
	// out.
	r := s.rows(at(ms(1600)))[0]
	if r.JobsLastSecond != 1 || r.TokensLastSecond != 3 {
		t.Errorf("last second at 1.6s: %d jobs, %d tokens; want 1 job, 3 tokens", r.JobsLastSecond, r.TokensLastSecond)
	}
	if r.Published != 4 || r.Admitted != 3 || r.Waiting != 1 {
		t.Errorf("published %d admitted %d waiting %d, want 4 3 1", r.Published, r.Admitted, r.Waiting)
	}
	if r.MeanAttempts != 2 {
		t.Errorf("mean attempts %v, want (1+2+3)/3 = 2", r.MeanAttempts)
	}
	if r.P50 != ms(400) || r.P99 != ms(1200) {
		t.Errorf("p50 %v p99 %v, want 400ms 1.2s", r.P50, r.P99)
	}
	if r.PlanRate != 5 || r.Limit != "burst" || r.Plan != "free" || r.Profile != "burst 10×" {
		t.Errorf("row %+v", r)
	}
	// At 2.4s nothing is left in the window.
	if r := s.rows(at(ms(2400)))[0]; r.JobsLastSecond != 0 || r.TokensLastSecond != 0 {
		t.Errorf("last second at 2.4s: %d jobs, %d tokens; want none", r.JobsLastSecond, r.TokensLastSecond)
	}
	// A tenant with nothing admitted shows no attempts and no percentiles.
	g := s.rows(at(ms(2400)))[1]
	if !math.IsNaN(g.MeanAttempts) || g.P50 >= 0 || g.P99 >= 0 {
		t.Errorf("empty tenant row %+v", g)
	}
}

func TestDemoRowsWaitingNeverNegative(t *testing.T) {
	s := newTestStats(t)
	// Seen downstream before its PubAck arrived.
	s.admittedJob("acme", 7, arrival{at: at(0), weight: 1, attempts: 1})
	if r := s.rows(at(0))[0]; r.Waiting != 0 || r.Admitted != 1 || r.Published != 0 {
		t.Errorf("row %+v", r)
	}
}

func TestDemoSummaryCountsEveryJobOnce(t *testing.T) {
	s := newTestStats(t)
	s.sent("acme", at(0))
	s.sent("acme", at(ms(500))) // only the first send starts the window
	// Jobs 1..10 of weight 1, 11 of weight 3.
	for seq := uint64(1); seq <= 10; seq++ {
		s.published("acme", seq, 1)
	}
	s.published("acme", 11, 3)
	s.published("acme", 11, 3) // a repeated PubAck changes nothing
	s.publishFailed("acme")
	// Admitted: 1..5 within the load (ends at 2s), 6 after it; 11 within.
	for seq := uint64(1); seq <= 5; seq++ {
		s.admittedJob("acme", seq, arrival{at: at(time.Duration(seq) * ms(300)), weight: 1, attempts: 2, delay: ms(int(seq) * 100)})
	}
	s.admittedJob("acme", 6, arrival{at: at(ms(2500)), weight: 1, attempts: 1, delay: ms(600)})
	s.admittedJob("acme", 11, arrival{at: at(ms(1900)), weight: 3, attempts: 1, delay: ms(700)})
	s.admittedJob("acme", 99, arrival{at: at(ms(100)), weight: 1, attempts: 1}) // not ours
	s.deadJob("acme", 7, "invalid-weight")
	unresolved := s.unresolved()["acme"]
	if want := []uint64{8, 9, 10}; len(unresolved) != 3 || unresolved[0] != 8 || unresolved[2] != 10 {
		t.Fatalf("unresolved %v, want %v", unresolved, want)
	}
	// 8 is still stored on the input stream; 9 could not be looked up; 10 is nowhere; 5 was
	// found stored but was admitted meanwhile (counted once, as admitted).
	waiting := map[string]map[uint64]bool{"acme": {8: true, 5: true}}
	unchecked := map[string]map[uint64]bool{"acme": {9: true}}
	sum := s.summary(at(2*time.Second), waiting, unchecked)
	a := sum[0]
	check := func(name string, got, want int64) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %d, want %d", name, got, want)
		}
	}
	check("published", a.Published, 11)
	check("published tokens", a.PublishedTokens, 13)
	check("publish errors", a.PublishErrors, 1)
	check("admitted", a.Admitted, 7)
	check("admitted tokens", a.AdmittedTokens, 9)
	check("dead", a.Dead, 1)
	check("waiting", a.Waiting, 1)
	check("unchecked", a.Unchecked, 1)
	check("lost", a.Lost, 1)
	check("unmatched", a.Unmatched, 1)
	check("window tokens", a.WindowTokens, 5+3) // job 6 came after the load
	check("p50", a.WaitP50Ms, 400)
	check("p99", a.WaitP99Ms, 700)
	if math.Abs(a.MeanAttempts-(5*2+1+1)/7.0) > 1e-9 {
		t.Errorf("mean attempts %v", a.MeanAttempts)
	}
	// Window from the first send (0) to the end of the load (2s): 5 + 5/s × 2s = 15.
	if a.WindowSeconds != 2 || a.Allowance != 15 || a.Capacity != 5 || a.Rate != 5 || a.Limit != "burst" {
		t.Errorf("window %vs allowance %v (%d + %v/s, %s), want 2s, 15 (5 + 5/s, burst)", a.WindowSeconds, a.Allowance, a.Capacity, a.Rate, a.Limit)
	}
	if math.Abs(a.PercentAllowed-100*8.0/15) > 1e-9 {
		t.Errorf("percent %v", a.PercentAllowed)
	}
	if a.Busy {
		t.Error("13 tokens published against an allowance of 15 is not busy")
	}
	// globex published nothing: no allowance, not busy, no percentiles.
	g := sum[1]
	if g.Allowance != 0 || g.Busy || g.WaitP50Ms != -1 || g.Lost != 0 {
		t.Errorf("idle tenant summary %+v", g)
	}
}

func TestDemoSummaryBusy(t *testing.T) {
	s := newTestStats(t)
	s.sent("acme", at(0))
	for seq := uint64(1); seq <= 40; seq++ {
		s.published("acme", seq, 1)
	}
	for seq := uint64(1); seq <= 15; seq++ {
		s.admittedJob("acme", seq, arrival{at: at(time.Duration(seq) * ms(130)), weight: 1, attempts: 2})
	}
	waiting := map[string]map[uint64]bool{"acme": {}}
	for seq := uint64(16); seq <= 40; seq++ {
		waiting["acme"][seq] = true
	}
	a := s.summary(at(2*time.Second), waiting, nil)[0]
	if !a.Busy || a.WindowTokens != 15 || a.PercentAllowed != 100 || a.Lost != 0 || a.Waiting != 25 {
		t.Errorf("busy tenant summary %+v", a)
	}
}

func TestDemoInputSeq(t *testing.T) {
	for _, c := range []struct {
		id, kind, stream string
		seq              uint64
		ok               bool
	}{
		{"admitter:a:JOBS:42", "a", "JOBS", 42, true},
		{"admitter:d:JOBS:7", "d", "JOBS", 7, true},
		{"admitter:a:JOBS:7", "d", "JOBS", 0, false},
		{"admitter:a:OTHER:7", "a", "JOBS", 0, false},
		{"admitter:a:JOBS:", "a", "JOBS", 0, false},
		{"admitter:a:JOBS:0", "a", "JOBS", 0, false},
		{"admitter:a:JOBS:x1", "a", "JOBS", 0, false},
		{"", "a", "JOBS", 0, false},
	} {
		seq, ok := inputSeq(c.id, wire.Kind(c.kind), c.stream)
		if seq != c.seq || ok != c.ok {
			t.Errorf("inputSeq(%q, %q, %q) = %d, %v; want %d, %v", c.id, c.kind, c.stream, seq, ok, c.seq, c.ok)
		}
	}
}
