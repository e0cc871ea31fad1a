package bench

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// ceilingScript is the least a limiter script can do: read the clock, read and write a field.
const ceilingScript = "local t = redis.call('TIME'); local v = redis.call('HGET', KEYS[1], 'a'); redis.call('HSET', KEYS[1], 'a', t[2]); return 1"

// contender is one way of deciding, called by many goroutines at once. decide reports whether
// the call was admitted.
type contender struct {
	name   string
	decide func(ctx context.Context, seq int64) (bool, error)
	close  func()
	// per is how many decisions one call makes (0: one).
	per int
}

// tenantName is the i-th tenant (0-based): t0001, t0002, …
func tenantName(i int) string { return fmt.Sprintf("t%04d", i+1) }

func tenantNames(n int) []string {
	ts := make([]string, n)
	for i := range ts {
		ts[i] = tenantName(i)
	}
	return ts
}

// oursContender decides through bucket.Redis with a plan that admits everything, every call
// with a unique job id.
func oursContender(name, redisURL string, plan *bucket.Plan, tenants []string) (contender, error) {
	client, err := newRueidis(redisURL)
	if err != nil {
		return contender{}, err
	}
	lim := bucket.NewRedis(client, "", bucket.Options{})
	return contender{
		name: name,
		decide: func(ctx context.Context, seq int64) (bool, error) {
			res, err := lim.Decide(ctx, bucket.Request{
				Tenant: tenants[seq%int64(len(tenants))], Plan: plan, Weight: 1,
				JobID: "JOBS:" + strconv.FormatInt(seq, 10),
			})
			return res.Allowed, err
		},
		close: client.Close,
	}, nil
}

// batchSize is the jobs of one tenant the batched contender decides per call.
const batchSize = 16

// batchedContender decides queued jobs through bucket.Redis.Admit, batchSize jobs of one tenant
// per call, the calls of many tenants sent to Redis together (the queue's path): per decisions
// per call.
func batchedContender(redisURL string, plan *bucket.Plan, tenants []string) (contender, error) {
	client, err := newRueidis(redisURL)
	if err != nil {
		return contender{}, err
	}
	lim := bucket.NewRedis(client, "", bucket.Options{})
	return contender{
		name: "ours batched",
		per:  batchSize,
		decide: func(ctx context.Context, seq int64) (bool, error) {
			b := bucket.Batch{Tenant: tenants[seq%int64(len(tenants))], Plan: plan, Owner: 1, Jobs: make([]bucket.Job, batchSize)}
			for i := range b.Jobs {
				b.Jobs[i] = bucket.Job{ID: seq*batchSize + int64(i) + 1, Weight: 1}
			}
			res, err := lim.Admit(ctx, b)
			return err == nil && res.Outcomes[batchSize-1].Admitted(), err
		},
		close: client.Close,
	}, nil
}

// fallbackContender decides through bucket.Fallback (fail mode local) on the Redis at redisURL:
// batched as batchedContender (batch true), or single requests as oursContender. With away set,
// that Redis is stopped once the client is made: every decision is made on the copy, the first
// one having found Redis gone.
func fallbackContender(name, redisURL string, plan *bucket.Plan, tenants []string, batch bool, away func()) (contender, error) {
	client, err := newRueidis(redisURL)
	if err != nil {
		return contender{}, err
	}
	lim := bucket.NewFallback(bucket.NewRedis(client, "", bucket.Options{}), bucket.Options{}, time.Second, bucket.FallbackHooks{})
	if away != nil {
		away()
	}
	c := contender{name: name, close: func() { lim.Close(); client.Close() }}
	if batch {
		c.per = batchSize
		c.decide = func(ctx context.Context, seq int64) (bool, error) {
			b := bucket.Batch{Tenant: tenants[seq%int64(len(tenants))], Plan: plan, Owner: 1, Jobs: make([]bucket.Job, batchSize)}
			for i := range b.Jobs {
				b.Jobs[i] = bucket.Job{ID: seq*batchSize + int64(i) + 1, Weight: 1}
			}
			res, err := lim.Admit(ctx, b)
			return err == nil && res.Outcomes[batchSize-1].Admitted(), err
		}
		return c, nil
	}
	c.decide = func(ctx context.Context, seq int64) (bool, error) {
		res, err := lim.Decide(ctx, bucket.Request{Tenant: tenants[seq%int64(len(tenants))], Plan: plan, Weight: 1,
			JobID: "JOBS:" + strconv.FormatInt(seq, 10)})
		return res.Allowed, err
	}
	return c, nil
}

// newRedisRate is redis_rate's limiter on a go-redis client with a connection per goroutine.
func newRedisRate(redisURL string, concurrency int) (*goredis.Client, *redis_rate.Limiter, error) {
	opt, err := goredis.ParseURL(redisURL)
	if err != nil {
		return nil, nil, fmt.Errorf("go-redis: %w", err)
	}
	opt.PoolSize = concurrency
	opt.MinIdleConns = concurrency
	client := goredis.NewClient(opt)
	return client, redis_rate.NewLimiter(client), nil
}

// redisRateContender decides through github.com/go-redis/redis_rate (GCRA, one limit) on a
// go-redis client with a connection per goroutine.
func redisRateContender(redisURL string, concurrency int, tenants []string) (contender, error) {
	client, lim, err := newRedisRate(redisURL, concurrency)
	if err != nil {
		return contender{}, err
	}
	limit := redis_rate.PerSecond(1_000_000)
	return contender{
		name: "redis_rate",
		decide: func(ctx context.Context, seq int64) (bool, error) {
			res, err := lim.Allow(ctx, tenants[seq%int64(len(tenants))], limit)
			if err != nil {
				return false, err
			}
			return res.Allowed > 0, nil
		},
		close: func() { _ = client.Close() },
	}, nil
}

// ceilingContender runs ceilingScript through rueidis with our client options, over one key
// per tenant.
func ceilingContender(redisURL string, tenants []string) (contender, error) {
	client, err := newRueidis(redisURL)
	if err != nil {
		return contender{}, err
	}
	script := rueidis.NewLuaScript(ceilingScript)
	keys := make([][]string, len(tenants))
	for i, t := range tenants {
		keys[i] = []string{"ceiling:{" + t + "}"}
	}
	return contender{
		name: "ceiling",
		decide: func(ctx context.Context, seq int64) (bool, error) {
			err := script.Exec(ctx, client, keys[seq%int64(len(keys))], nil).Error()
			return err == nil, err
		},
		close: client.Close,
	}, nil
}

// newRueidis is a client with admitter's own options (bucket.RedisClientOption).
func newRueidis(redisURL string) (rueidis.Client, error) {
	opt, err := bucket.RedisClientOption(redisURL)
	if err != nil {
		return nil, err
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("rueidis: %w", err)
	}
	return c, nil
}

// measureDecisions runs c from concurrency goroutines for warmup (not recorded), then for
// duration, recording the latency of every call; with profile set, the process is CPU-profiled
// into it for that duration.
func measureDecisions(ctx context.Context, c contender, concurrency int, warmup, duration time.Duration, profile string) (DecisionRun, error) {
	var seq atomic.Int64
	if warmup > 0 {
		if _, _, _, err := load(ctx, c, concurrency, warmup, &seq, false); err != nil {
			return DecisionRun{}, fmt.Errorf("%s warm-up: %w", c.name, err)
		}
	}
	runtime.GC()
	stopProfile, err := startCPUProfile(profile)
	if err != nil {
		return DecisionRun{}, err
	}
	samples, elapsed, denied, err := load(ctx, c, concurrency, duration, &seq, true)
	stopProfile()
	if err != nil {
		return DecisionRun{}, fmt.Errorf("%s: %w", c.name, err)
	}
	n := int64(len(samples))
	return DecisionRun{
		Name: c.name, Calls: n, Seconds: round(elapsed.Seconds(), 3), PerSecond: round(PerSecond(n*int64(max(c.per, 1)), elapsed), 1),
		Latency: Summarize(samples), Denied: denied,
	}, nil
}

// load calls c from concurrency goroutines until duration has passed (each goroutine finishes
// the call it is in). It returns every call's latency when record is set, the time from the
// start until the last goroutine returned, and how many calls were denied. The first error
// stops every goroutine.
func load(ctx context.Context, c contender, concurrency int, duration time.Duration, seq *atomic.Int64, record bool) ([]time.Duration, time.Duration, int64, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	per := make([][]time.Duration, concurrency)
	var denied atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(duration)
	for w := range concurrency {
		wg.Go(func() {
			var mine []time.Duration
			if record {
				mine = make([]time.Duration, 0, 4096)
			}
			for ctx.Err() == nil {
				t0 := time.Now()
				if !t0.Before(deadline) {
					break
				}
				ok, err := c.decide(ctx, seq.Add(1))
				d := time.Since(t0)
				if err != nil {
					if ctx.Err() == nil {
						cancel(err)
					}
					break
				}
				if !ok {
					denied.Add(1)
				}
				if record {
					mine = append(mine, d)
				}
			}
			per[w] = mine
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := context.Cause(ctx); err != nil {
		return nil, 0, 0, err
	}
	var all []time.Duration
	if record {
		total := 0
		for _, p := range per {
			total += len(p)
		}
		all = make([]time.Duration, 0, total)
		for _, p := range per {
			all = append(all, p...)
		}
	}
	return all, elapsed, denied.Load(), nil
}
