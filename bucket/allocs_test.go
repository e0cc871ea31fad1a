// The race detector's instrumentation changes what escapes to the heap, so the budget is
// checked in a plain build: `make test` runs this test in its own pass without -race.

//go:build !race

package bucket

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// TestDecisionAllocations holds the hot path to its allocation budget: at most 2 allocations per
// decision, counting everything (rueidis's pooled command builder and reply included). For Redis
// they are the one buffer holding keys and argument and the array behind the key and argument
// slices; the in-process backend allocates nothing once a tenant exists.
func TestDecisionAllocations(t *testing.T) {
	p := mustPlan(t, "gold", lim("burst", 1_000_000, time.Microsecond), lim("daily", 1_000_000_000, time.Microsecond))
	ids := make([]string, 1000)
	for i := range ids {
		ids[i] = "JOBS:" + strconv.Itoa(i)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		l     limiter
		limit float64
	}{
		{"memory", NewMemory(Options{}, nil), 2},
		{"redis", NewRedis(redisClient(t), "", Options{}), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tenant := uniqueTenant("allocs")
			i := 0
			decide := func() {
				i++
				if _, err := tc.l.Decide(ctx, Request{Tenant: tenant, Plan: p, Weight: 1, JobID: ids[i%len(ids)]}); err != nil {
					t.Fatal(err)
				}
			}
			decide()
			got := testing.AllocsPerRun(500, decide)
			t.Logf("%s: %.2f allocations per decision", tc.name, got)
			if got > tc.limit {
				t.Errorf("%s: %.2f allocations per decision, budget %v", tc.name, got, tc.limit)
			}
		})
	}
}
