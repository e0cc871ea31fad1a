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

// TestDecisionAllocations holds the bucket's hot path to its budget of at most 2 allocations per
// decision. In process that is the whole decision (it allocates nothing once a tenant exists).
// For Redis it is everything this package does around the network call: building the keys and
// the packed argument (one buffer and one array) and decoding the reply. The client's own
// allocations are left out: they happen partly on its background goroutines, which
// testing.AllocsPerRun would count too, so their share varies with the machine's load (the Redis
// benchmark reports the whole path: ~3 allocations per decision, 1 of them the benchmark's).
func TestDecisionAllocations(t *testing.T) {
	gold := mustPlan(t, "gold", lim("burst", 1_000_000, time.Microsecond), lim("daily", 1_000_000_000, time.Microsecond))
	// Windows and quotas keep the budget once their buffers and calendars exist.
	mixed := mustPlan(t, "mixed", lim("burst", 1_000_000, time.Microsecond), win("minute", 1_000_000_000, time.Minute),
		quota("daily", 1_000_000_000, Day, mustLoc(t, "Europe/Paris")))
	for _, p := range []*Plan{gold, mixed} {
		t.Run(p.Name, func(t *testing.T) { decisionAllocations(t, p) })
	}
}

func decisionAllocations(t *testing.T, p *Plan) {
	ids := make([]string, 1000)
	for i := range ids {
		ids[i] = "JOBS:" + strconv.Itoa(i)
	}
	ctx := context.Background()
	t.Run("memory", func(t *testing.T) {
		m := NewMemory(Options{}, nil)
		i := 0
		got := testing.AllocsPerRun(500, func() {
			i++
			if _, err := m.Decide(ctx, Request{Tenant: "allocs", Plan: p, Weight: 1, JobID: ids[i%len(ids)]}); err != nil {
				t.Fatal(err)
			}
		})
		t.Logf("memory: %.2f allocations per decision", got)
		if got > 2 {
			t.Errorf("memory: %.2f allocations per decision, budget 2", got)
		}
	})
	t.Run("redis", func(t *testing.T) {
		r := NewRedis(nil, "", Options{})
		reply := packInts(nil, int64(Delayed), 0, 1500, 1, 0) // outcome, remaining, wait µs, limit, leases expired
		var res Result
		i := 0
		got := testing.AllocsPerRun(500, func() {
			i++
			req := Request{Tenant: "allocs", Plan: p, Weight: 1, JobID: ids[i%len(ids)]}
			keys, args := r.call(&req)
			if len(keys) != 2 || len(args) != 1 {
				t.Fatalf("call built %d keys and %d args", len(keys), len(args))
			}
			var err error
			if res, err = decodeReply(&req, reply); err != nil {
				t.Fatal(err)
			}
		})
		t.Logf("redis: %.2f allocations per decision around the client", got)
		if got > 2 {
			t.Errorf("redis: %.2f allocations per decision around the client, budget 2", got)
		}
		if res.Outcome != Delayed || res.Wait != 1500*time.Microsecond || res.Limit != p.Limits[1].Name {
			t.Errorf("decoded %+v", res)
		}
	})
}
