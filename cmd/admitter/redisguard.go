package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/wire"
	"go.opentelemetry.io/otel/metric"
)

// evictionGuard watches the Redis servers' eviction policy: at start, then every
// evictionCheckEvery. A server that may evict keys forgets tenants' buckets under memory
// pressure (a forgotten bucket is full again): each check says so in the log, the gauge
// admitter_redis_evicting is 1, and /readyz names it.
type evictionGuard struct {
	r       *bucket.Redis
	log     *slog.Logger
	problem atomic.Pointer[string]
}

const evictionCheckEvery = time.Minute

// check reads the policies once and reports the servers that may evict.
func (g *evictionGuard) check(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	policies, err := g.r.EvictionPolicies(ctx)
	if err != nil {
		return nil, err
	}
	bad := bucket.Evicting(policies)
	if len(bad) == 0 {
		g.problem.Store(nil)
		return nil, nil
	}
	msg := "redis may evict the limiter's keys (maxmemory-policy " + strings.Join(bad, ", ") + "): a tenant whose state is evicted gets a full bucket again; set maxmemory-policy noeviction"
	g.problem.Store(&msg)
	g.log.Warn(msg)
	return bad, nil
}

// ready says why the limiter cannot be trusted, or nil.
func (g *evictionGuard) ready() error {
	if p := g.problem.Load(); p != nil {
		return errors.New(*p)
	}
	return nil
}

// startEvictionGuard checks the policy now (refusing to start when require is set and a server
// may evict) and then periodically until the returned stop is called.
func startEvictionGuard(ctx context.Context, r *bucket.Redis, require bool, meter metric.MeterProvider, log *slog.Logger) (*evictionGuard, func(), error) {
	g := &evictionGuard{r: r, log: log}
	bad, err := g.check(ctx)
	switch {
	case err != nil:
		log.Warn("redis eviction policy unknown", "err", err)
	case len(bad) > 0 && require:
		return nil, nil, fmt.Errorf("%w: ADMITTER_REDIS_REQUIRE_NOEVICTION is set and redis may evict keys (maxmemory-policy %s): set maxmemory-policy noeviction", errConfig, strings.Join(bad, ", "))
	}
	gauge, err := meter.Meter("github.com/admitter/admitter/cmd/admitter").Int64ObservableGauge(wire.MetricRedisEvicting.Name,
		metric.WithDescription("1 while a Redis server's maxmemory-policy lets it evict the limiter's keys."))
	if err != nil {
		return nil, nil, err
	}
	reg, err := meter.Meter("github.com/admitter/admitter/cmd/admitter").RegisterCallback(func(_ context.Context, o metric.Observer) error {
		v := int64(0)
		if g.problem.Load() != nil {
			v = 1
		}
		o.ObserveInt64(gauge, v)
		return nil
	}, gauge)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(evictionCheckEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if _, err := g.check(ctx); err != nil && ctx.Err() == nil {
					log.Warn("redis eviction policy unknown", "err", err)
				}
			}
		}
	})
	return g, func() { cancel(); wg.Wait(); _ = reg.Unregister() }, nil
}
