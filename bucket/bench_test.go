package bucket

import (
	"context"
	"runtime"
	"strconv"
	"strings"
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

// BenchmarkPoolContendedRedis: a pool of 64 slots, full, with 1,000 tenants waiting (shares 1,
// 2 and 4), driven as the admitter does: each iteration releases the oldest job's slot, and the
// tenant the release wakes asks for its next 10 jobs (or, woken none, the next tenant in turn).
// It reports each call's time (the script's cost and a round trip) and Redis's own time per
// call: what Redis spends per pooled job when many contend. (Measured: 150 µs of Redis a call
// with the leases packed in one value and the waiters read 65 at a time, 57 µs with the leases
// in a sorted set and the waiters read in pages of 8.)
func BenchmarkPoolContendedRedis(b *testing.B) {
	r := NewRedis(redisClient(b), "", Options{})
	pool, err := NewPool(Pool{Name: uniqueTenant("bp"), Concurrency: 64, Lease: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	tenants := make([]string, 1000)
	index := map[string]int{}
	for i := range tenants {
		tenants[i] = uniqueTenant("bpt")
		index[tenants[i]] = i
	}
	share := func(i int) int64 { return []int64{1, 2, 4}[i%3] }
	id := int64(0)
	var held []int64
	var heldBy []int
	ask := func(i int) {
		jobs := make([]Job, 10)
		for k := range jobs {
			jobs[k] = Job{ID: id + int64(k) + 1, Weight: 1}
		}
		g, err := r.poolCall(ctx, poolAcquire, pool, tenants[i], share(i), jobs, NoCost, Report{})
		if err != nil {
			b.Fatal(err)
		}
		for k := range g.granted {
			held, heldBy = append(held, jobs[k].ID), append(heldBy, i)
		}
		id += 10
	}
	for i := range tenants {
		ask(i)
	}
	var releasing, asking time.Duration
	var asks int
	stats := func() (calls, usec float64) {
		info, err := redisClient(b).Do(ctx, redisClient(b).B().Info().Section("commandstats").Build()).ToString()
		if err != nil {
			b.Fatal(err)
		}
		for _, line := range strings.Split(info, "\n") {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_fcall:"); ok {
				for _, kv := range strings.Split(rest, ",") {
					k, v, _ := strings.Cut(kv, "=")
					f, _ := strconv.ParseFloat(v, 64)
					switch k {
					case "calls":
						calls = f
					case "usec":
						usec = f
					}
				}
			}
		}
		return calls, usec
	}
	c0, u0 := stats()
	b.ResetTimer()
	for n := range b.N {
		t0 := time.Now()
		var wakes []string
		if len(held) > 0 {
			rel, err := r.poolCall(ctx, poolRelease, pool, tenants[heldBy[0]], share(heldBy[0]), []Job{{ID: held[0]}}, NoCost, Report{})
			if err != nil {
				b.Fatal(err)
			}
			held, heldBy, wakes = held[1:], heldBy[1:], rel.wakes
		}
		t1 := time.Now()
		if len(wakes) == 0 {
			wakes = []string{tenants[n%len(tenants)]}
		}
		for _, w := range wakes {
			ask(index[w])
			asks++
		}
		releasing, asking = releasing+t1.Sub(t0), asking+time.Since(t1)
	}
	b.ReportMetric(float64(releasing.Microseconds())/float64(b.N), "µs/release")
	b.ReportMetric(float64(asking.Microseconds())/float64(max(asks, 1)), "µs/ask")
	b.ReportMetric(float64(asks)/float64(b.N), "asks/release")
	c1, u1 := stats()
	b.ReportMetric((u1-u0)/max(c1-c0, 1), "server-µs/call")
}
