package bucket

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const ms = time.Millisecond

// TestConcurrentNeverOverAdmits hammers one tenant from many goroutines on the real clock and
// checks the admitted weight never exceeds capacity + rate × elapsed.
func TestConcurrentNeverOverAdmits(t *testing.T) {
	for _, b := range []struct {
		name string
		l    limiter
	}{
		{"memory", NewMemory(Options{}, nil)},
		{"redis", NewRedis(redisClient(t), "", Options{})},
	} {
		t.Run(b.name, func(t *testing.T) {
			const capacity, every = 20, 5 * ms // 200/s
			p := mustPlan(t, "p", lim("", capacity, every))
			tenant := uniqueTenant("hammer")
			var admitted, calls atomic.Int64
			start := time.Now()
			var wg sync.WaitGroup
			for g := 0; g < 64; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					// bounded by time, not by a count: the bound below holds however long it runs.
					for i := 0; time.Since(start) < 300*ms; i++ {
						r, err := b.l.Decide(context.Background(), Request{Tenant: tenant, Plan: p, Weight: 1 + int64(i%2)})
						if err != nil {
							t.Error(err)
							return
						}
						calls.Add(1)
						if r.Allowed {
							admitted.Add(1 + int64(i%2))
						}
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			bound := capacity + int64(elapsed/every) + 1
			if admitted.Load() > bound {
				t.Fatalf("admitted %d tokens in %v, bound is %d", admitted.Load(), elapsed, bound)
			}
			if admitted.Load() < capacity {
				t.Fatalf("admitted only %d tokens: the burst alone allows %d", admitted.Load(), capacity)
			}
			t.Logf("%d calls, admitted %d tokens in %v (bound %d)", calls.Load(), admitted.Load(), elapsed, bound)
		})
	}
}
