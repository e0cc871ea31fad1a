package bench

import (
	"reflect"
	"testing"
	"time"
)

// arrivals are forwards of the given tenants, in order, 1ms apart from t0.
func arrivals(t0 time.Time, tenants ...int32) []landed {
	out := make([]landed, len(tenants))
	for i, tenant := range tenants {
		out[i] = landed{tenant: tenant, at: t0.Add(time.Duration(i) * time.Millisecond)}
	}
	return out
}

func TestFairFiguresInTurn(t *testing.T) {
	t.Parallel()
	names := tenantNames(4)
	var order []int32
	for range 10 {
		order = append(order, 0, 1, 2, 3)
	}
	f := FairFigures(arrivals(time.Unix(0, 0), order...), names, 10)
	// Every tenant served after 4; a tenth of 40 is 4; t0001's last is the 37th (index 36).
	if f.AllServed != 4 || f.WindowFrom != 4 || f.WindowTo != 36 || f.StartLeader != (TenantCount{"t0001", 1}) {
		t.Errorf("window: %+v", f)
	}
	if f.Mean != 8 || f.Min != 8 || f.Max != 8 || f.Jain != 1 || f.MaxDeviationPct != 0 || f.WithinPct != 100 || f.FirstTenth != 1 || f.LastTenth != 1 {
		t.Errorf("served in turn: %+v", f)
	}
	if f.WindowS != 0.031 || f.PerSecond != 1000 || f.Forwarded != 40 {
		t.Errorf("throughput: %gs, %g/s, %d forwarded", f.WindowS, f.PerSecond, f.Forwarded)
	}
}

func TestFairFiguresInArrivalOrder(t *testing.T) {
	t.Parallel()
	names := tenantNames(4)
	var order []int32
	for tenant := range int32(4) {
		for range 10 {
			order = append(order, tenant)
		}
	}
	f := FairFigures(arrivals(time.Unix(0, 0), order...), names, 10)
	// t0001 runs out before the others are served at all: the window is the start, t0001's 9.
	if f.AllServed != 0 || f.WindowFrom != 0 || f.WindowTo != 9 {
		t.Errorf("window: %+v", f)
	}
	if f.Mean != 2.25 || f.Min != 0 || f.Max != 9 || f.Jain != 0.25 || f.MaxDeviationPct != 300 || f.WithinPct != 0 ||
		f.FirstTenth != 4 || f.LastTenth != 0 {
		t.Errorf("served in arrival order: %+v", f)
	}
	if want := []TenantCount{{"t0002", 0}, {"t0003", 0}, {"t0004", 0}, {"t0001", 9}}; !reflect.DeepEqual(f.Lowest, want) {
		t.Errorf("lowest %v, want %v", f.Lowest, want)
	}
	if want := []TenantCount{{"t0001", 9}, {"t0004", 0}, {"t0003", 0}, {"t0002", 0}}; !reflect.DeepEqual(f.Highest, want) {
		t.Errorf("highest %v, want %v", f.Highest, want)
	}
}

func TestFairFiguresUneven(t *testing.T) {
	t.Parallel()
	// 10 tenants of 200 jobs, none running out; every tenant gets 10 a round, but t0010 gets 12
	// and t0009 8: from the third round (a tenth of all is 200), deviation 20%, 8 of 10 within
	// ±10%.
	names := tenantNames(10)
	var order []int32
	for range 10 {
		for tenant := range int32(10) {
			n := 10
			switch tenant {
			case 8:
				n = 8
			case 9:
				n = 12
			}
			for range n {
				order = append(order, tenant)
			}
		}
	}
	f := FairFigures(arrivals(time.Unix(0, 0), order...), names, 200)
	if f.WindowTo != len(order) || f.WindowFrom != 200 {
		t.Fatalf("window: %+v", f)
	}
	if f.MaxDeviationPct != 20 || f.WithinPct != 80 || f.Min != 64 || f.Max != 96 || f.Mean != 80 || f.Jain != 0.9921 {
		t.Errorf("uneven: %+v", f)
	}
	if f.Lowest[0] != (TenantCount{"t0009", 64}) || f.Highest[0] != (TenantCount{"t0010", 96}) || len(f.Lowest) != fairExtremes {
		t.Errorf("extremes: %v %v", f.Lowest, f.Highest)
	}
	if f := FairFigures(nil, names, 100); !reflect.DeepEqual(f, Fair{Tenants: 10, JobsPerTenant: 100}) {
		t.Errorf("no forward: %+v", f)
	}
}

func TestCrowdFigures(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(100, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	names := tenantNames(3)
	first := []time.Time{at(0), at(5), at(10)}
	// Plan: capacity 2 at 10/s, 4 jobs a tenant: the 3rd may go 100ms after the first publish,
	// the 4th 200ms after (plan 0.2s).
	jobs := []landed{
		{0, at(10)}, {0, at(11)}, {1, at(12)}, {1, at(12)}, {1, at(15)}, // t0002's 3rd: 90ms early
		{0, at(100)}, {0, at(200)}, // t0001: done at 0.2s
		{2, at(300)}, {2, at(300)}, {2, at(400)}, {1, at(405)}, // t0002: done at 0.4s
		{2, at(1510)}, // t0003: done at 1.5s, more than a second after the plan
	}
	c := CrowdFigures(first, jobs, names, 4, 2, 10)
	want := Crowd{Tenants: 3, JobsPerTenant: 4, Capacity: 2, RatePerSecond: 10, PlanS: 0.2, Forwarded: 12,
		DoneP50S: 0.4, DoneP99S: 1.5, DoneMaxS: 1.5, SlowestTenant: "t0003", Late: 1, DonePerSecond: []int{2, 1},
		FirstP50S: 0.01, FirstMaxS: 0.29, OverallS: 1.51, PacingViolations: 1, EarliestMs: 90}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("crowd figures:\n got %+v\nwant %+v", c, want)
	}
	if c := CrowdFigures(first, nil, names, 20, 5, 5); c.PlanS != 3 || c.Forwarded != 0 || c.DoneMaxS != 0 {
		t.Errorf("no forward: %+v", c)
	}
}
