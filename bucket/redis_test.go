package bucket

import (
	"context"
	"strings"
	"testing"
	"time"
)

// tenantKeys lists the tenant's keys with their remaining life.
func tenantKeys(t *testing.T, tenant string) map[string]time.Duration {
	t.Helper()
	c := redisClient(t)
	ctx := context.Background()
	keys, err := c.Do(ctx, c.B().Keys().Pattern(DefaultKeyPrefix+"{"+tenant+"}*").Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]time.Duration, len(keys))
	for _, k := range keys {
		ms, err := c.Do(ctx, c.B().Pttl().Key(k).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		out[k] = time.Duration(ms) * time.Millisecond
	}
	return out
}

// TestRedisKeysExpire checks, on the server's own clock, that every key of a tenant carries a
// TTL matching its logical life and that an idle tenant leaves nothing behind.
func TestRedisKeysExpire(t *testing.T) {
	r := NewRedis(redisClient(t), "", Options{MarkerTTL: 300 * ms, SlotGrace: 200 * ms})
	tenant := uniqueTenant("expire")
	p := mustPlan(t, "p", lim("a", 2, 50*ms), lim("b", 4, 25*ms))
	ctx := context.Background()
	for _, id := range []string{"x", "y", "z"} {
		if _, err := r.Decide(ctx, Request{Tenant: tenant, Plan: p, Weight: 1, JobID: id}); err != nil {
			t.Fatal(err)
		}
	}
	keys := tenantKeys(t, tenant)
	if len(keys) != 4 {
		t.Fatalf("keys = %v, want the state and three jobs", keys)
	}
	for k, ttl := range keys {
		var max time.Duration
		switch {
		case strings.HasSuffix(k, "}"): // state: full again 150ms after the last take
			max = 150 * ms
		case strings.HasSuffix(k, ":z"): // booked 50ms ahead, kept for the grace after
			max = 250 * ms
		default: // admitted markers
			max = 300 * ms
		}
		if ttl <= 0 || ttl > max {
			t.Errorf("key %s: TTL %v, want in (0, %v]", k, ttl, max)
		}
	}
	// Redis evicts by its own clock: wait for it, bounded.
	deadline := time.Now().Add(5 * time.Second)
	for len(tenantKeys(t, tenant)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("keys still present 5s after their TTLs: %v", tenantKeys(t, tenant))
		}
		time.Sleep(20 * ms)
	}
}

// TestRedisIdleTenantMemory measures the Redis memory of an idle-but-live tenant with a
// two-limit plan: the target is at most 200 bytes.
func TestRedisIdleTenantMemory(t *testing.T) {
	c := redisClient(t)
	r := NewRedis(c, "", Options{})
	tenant := uniqueTenant("acme")
	p := mustPlan(t, "gold", lim("burst", 20, 100*ms), lim("daily", 100000, 864*ms))
	if _, err := r.Decide(context.Background(), Request{Tenant: tenant, Plan: p, Weight: 1}); err != nil {
		t.Fatal(err)
	}
	var total int64
	for k := range tenantKeys(t, tenant) {
		n, err := c.Do(context.Background(), c.B().MemoryUsage().Key(k).Samples(0).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		total += n
	}
	t.Logf("idle tenant with a two-limit plan: %d bytes", total)
	if total == 0 || total > 200 {
		t.Fatalf("idle tenant uses %d bytes of Redis memory, want (0, 200]", total)
	}
}
