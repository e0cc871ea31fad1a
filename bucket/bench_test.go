package bucket

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// benchConcurrency is the number of goroutines deciding at once in the benchmarks.
const benchConcurrency = 64

// benchParallel runs step at concurrency 64 over 1000 tenants named after prefix, each call with
// the next sequence number, and reports the calls per second under unit.
func benchParallel(b *testing.B, prefix, unit string, step func(ctx context.Context, n int64, tenant string) error) {
	tenants := make([]string, 1000)
	for i := range tenants {
		tenants[i] = uniqueTenant(prefix)
	}
	var seq atomic.Int64
	b.SetParallelism(max(1, benchConcurrency/runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			n := seq.Add(1)
			if err := step(ctx, n, tenants[n%1000]); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), unit)
}

// benchDecide measures decisions per second at concurrency 64 over 1000 tenants of a two-limit
// plan that admits everything (the common case), each decision carrying a job id.
func benchDecide(b *testing.B, l limiter) {
	p := mustPlan(b, "gold", lim("burst", 1_000_000, time.Microsecond), lim("daily", 1_000_000_000, time.Microsecond))
	benchParallel(b, "bench", "decisions/s", func(ctx context.Context, n int64, tenant string) error {
		_, err := l.Decide(ctx, Request{Tenant: tenant, Plan: p, Weight: 1, JobID: strconv.FormatInt(n, 10)})
		return err
	})
}

func BenchmarkDecideMemory(b *testing.B) { benchDecide(b, NewMemory(Options{}, nil)) }

func BenchmarkDecideRedis(b *testing.B) {
	benchDecide(b, NewRedis(redisClient(b), "", Options{MarkerTTL: 5 * time.Second}))
}

// benchLeases measures the calls of a concurrency-limited plan at concurrency 64 over 1000
// tenants: Admit of one job (a lease taken) and, with release, the Release of that lease. Each
// tenant holds at most 64 leases at once.
func benchLeases(b *testing.B, l interface {
	limiter
	Release(context.Context, LeaseRequest) (LeaseResult, error)
}, release bool) {
	p := mustPlan(b, "c", conc("running", 100, time.Minute), lim("burst", 1_000_000, time.Microsecond))
	benchParallel(b, "lease", "jobs/s", func(ctx context.Context, n int64, tenant string) error {
		if _, err := l.Admit(ctx, Batch{Tenant: tenant, Plan: p, Owner: 1, Jobs: []Job{{ID: n, Weight: 1}}}); err != nil || !release {
			return err
		}
		_, err := l.Release(ctx, LeaseRequest{Tenant: tenant, Plan: p, Lease: n, Cost: NoCost})
		return err
	})
}

// BenchmarkLeaseCycleRedis: a job admitted under a concurrency limit and its lease released,
// two script calls; BenchmarkLeaseAdmitRedis the admission alone, to compare with.
func BenchmarkLeaseCycleRedis(b *testing.B) {
	benchLeases(b, NewRedis(redisClient(b), "", Options{}), true)
}

func BenchmarkLeaseAdmitRedis(b *testing.B) {
	benchLeases(b, NewRedis(redisClient(b), "", Options{}), false)
}
