package bucket

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/admitter/admitter/internal/testenv"
	"github.com/redis/rueidis"
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
// TTL matching its logical life and that an idle tenant leaves nothing behind. The admitted
// markers live 3s so that a stalled machine still finds them; the state and the booked slot live
// a few hundred milliseconds and are checked when still there.
func TestRedisKeysExpire(t *testing.T) {
	r := NewRedis(redisClient(t), "", Options{MarkerTTL: 3 * time.Second, SlotGrace: 200 * ms})
	r.born.off = true // the test server may have just started: take unknown limits for unused, not forgotten
	tenant := uniqueTenant("expire")
	p := mustPlan(t, "p", lim("a", 2, 50*ms), lim("b", 4, 25*ms))
	ctx := context.Background()
	for _, id := range []string{"x", "y", "z"} {
		if _, err := r.Decide(ctx, Request{Tenant: tenant, Plan: p, Weight: 1, JobID: id}); err != nil {
			t.Fatal(err)
		}
	}
	keys := tenantKeys(t, tenant)
	markers := 0
	for k, ttl := range keys {
		var max time.Duration
		switch {
		case strings.HasSuffix(k, "}"): // state: counts z's slot, booked 50ms ahead, for the grace after
			max = 250 * ms
		case strings.HasSuffix(k, ":z"): // booked 50ms ahead, kept for the grace after
			max = 250 * ms
		case strings.HasSuffix(k, ":x"), strings.HasSuffix(k, ":y"): // admitted markers
			max = 3 * time.Second
			markers++
		default:
			t.Errorf("unexpected key %s", k)
		}
		if ttl <= 0 || ttl > max {
			t.Errorf("key %s: TTL %v, want in (0, %v]", k, ttl, max)
		}
	}
	if markers != 2 {
		t.Fatalf("keys = %v, want both admitted markers", keys)
	}
	// Redis evicts by its own clock: wait for it, bounded.
	deadline := time.Now().Add(15 * time.Second)
	for len(tenantKeys(t, tenant)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("keys still present 15s after their TTLs: %v", tenantKeys(t, tenant))
		}
		time.Sleep(50 * ms)
	}
}

// TestRedisIdleTenantMemory measures the Redis memory (MEMORY USAGE) of an idle-but-live tenant
// for each limit kind after one decision, and of windows holding their most entries: the figures
// the README states. A tenant's state is one key; its TTL ends it once nothing matters.
func TestRedisIdleTenantMemory(t *testing.T) {
	c := redisClient(t)
	r := NewRedis(c, "", Options{})
	r.born.off = true // the test server just started: take unknown limits for unused, not forgotten
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		plan  *Plan
		takes int           // decisions of weight 1
		every time.Duration // between them (on the server's clock: real sleeps)
		book  bool          // with a job id each: the ones that do not fit book a slot
		max   int64
	}{
		{"bucket", mustPlan(t, "b", lim("burst", 20, time.Second)), 1, 0, false, 190},
		{"two buckets", mustPlan(t, "gold", lim("burst", 20, time.Second), lim("daily", 100000, 864*ms)), 1, 0, false, 240},
		{"window", mustPlan(t, "w", win("hourly", 1000, time.Hour)), 1, 0, false, 190},
		{"quota", mustPlan(t, "q", quota("monthly", 100000, Month, nil)), 1, 0, false, 190},
		{"bucket+window+quota", mustPlan(t, "mixed", lim("burst", 20, 100*ms), win("hourly", 1000, time.Hour), quota("monthly", 100000, Month, nil)), 1, 0, false, 270},
		// The most a window stores: an exact one at its limit of distinct instants, an
		// approximate one with every sub-window in use.
		{"exact window, 64 takes", mustPlan(t, "w64", win("w", ExactWindowMax, time.Hour)), ExactWindowMax, 0, false, 1400},
		{"window in sub-windows, all in use", mustPlan(t, "wide", win("w", 1_000_000, 640*ms)), 70, 10 * ms, false, 1400},
		// A concurrency limit holds one lease of 32 bytes per job in flight.
		{"concurrency, 1 lease held", mustPlan(t, "c", conc("running", 5, time.Minute)), 1, 0, false, 200},
		{"concurrency, 5 leases held", mustPlan(t, "c", conc("running", 5, time.Minute)), 5, 0, false, 330},
		{"bucket+concurrency, 5 leases held", mustPlan(t, "c", lim("burst", 20, 100*ms), conc("running", 5, time.Minute)), 5, 0, false, 400},
		// Slots booked by Decide are counted in the state, in at most 16 entries.
		{"bucket with 100 slots booked", mustPlan(t, "b", lim("burst", 1, 100*ms)), 101, 0, true, 460},
	} {
		tenant := uniqueTenant("idle")
		for i := 0; i < tc.takes; i++ {
			req := Request{Tenant: tenant, Plan: tc.plan, Weight: 1}
			if tc.book {
				req.JobID = fmt.Sprint("j", i)
			}
			if _, err := r.Decide(ctx, req); err != nil {
				t.Fatal(err)
			}
			time.Sleep(tc.every)
		}
		keys := tenantKeys(t, tenant)
		if len(keys) != 1+tc.takes*btoi(tc.book) {
			t.Fatalf("%s: keys %v, want the state alone (and the job keys)", tc.name, keys)
		}
		n, err := c.Do(ctx, c.B().MemoryUsage().Key(r.stateKey(tenant)).Samples(0).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("idle tenant, %s: %d bytes", tc.name, n)
		if n == 0 || n > tc.max {
			t.Errorf("idle tenant, %s: %d bytes of Redis memory, want (0, %d]", tc.name, n, tc.max)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestRedisStallDoesNotBlockCallers freezes redis-server (SIGSTOP) under load with large job ids,
// so the socket buffers fill within the first second, and checks no decision outlives its deadline by more than the
// connection's write timeout: a stalled Redis costs a bounded wait, never a hang. It then thaws
// the server and checks decisions succeed again. (With rueidis v1.0.79 we could not make the
// default options hang either — 33k calls, slowest 35ms — so this guards the property against
// regressions of the client or of RedisClientOption rather than telling the two apart.)
func TestRedisStallDoesNotBlockCallers(t *testing.T) {
	srv := testenv.StartRedis(t)
	opt, err := RedisClientOption(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	client, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	r := NewRedis(client, "", Options{})
	p := mustPlan(t, "p", lim("", 1000, time.Microsecond))
	// The slack covers a reconnect in progress (bounded by the 300ms write timeout) and a
	// starved CPU: with two busy loops beside it the slowest call took 1.05s. A hang lasts as
	// long as the stall, or up to rueidis's 10s default write timeout.
	const deadline, slack = 20 * ms, 5 * time.Second
	srv.Pause()
	defer srv.Resume()
	var worst atomic.Int64
	var calls atomic.Int64
	var wg sync.WaitGroup
	pad := strings.Repeat("x", 4000)
	stop := time.Now().Add(5 * time.Second)
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(stop); i++ {
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				begin := time.Now()
				_, err := r.Decide(ctx, Request{Tenant: "stall", Plan: p, Weight: 1, JobID: fmt.Sprint(pad, g, "-", i)})
				took := time.Since(begin)
				cancel()
				calls.Add(1)
				if err == nil {
					t.Error("a decision succeeded while Redis was frozen")
					return
				}
				for old := worst.Load(); int64(took) > old && !worst.CompareAndSwap(old, int64(took)); old = worst.Load() {
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d calls during a 5s stall; slowest returned after %v (deadline %v)", calls.Load(), time.Duration(worst.Load()), deadline)
	if time.Duration(worst.Load()) > deadline+slack {
		t.Fatalf("a caller was blocked %v, past its %v deadline by more than %v", time.Duration(worst.Load()), deadline, slack)
	}
	srv.Resume()
	var lastErr error
	for i := 0; i < 100; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, lastErr = r.Decide(ctx, Request{Tenant: "stall", Plan: p, Weight: 1})
		cancel()
		if lastErr == nil {
			return
		}
		time.Sleep(50 * ms)
	}
	t.Fatalf("decisions still fail 5s after Redis resumed: %v", lastErr)
}

// TestClusterSpreadsTenants checks the cluster runs are more than one node in disguise: tenants
// land on different masters, and each decision still works there.
func TestClusterSpreadsTenants(t *testing.T) {
	c := clusterClient(t)
	r := NewRedis(c, "", Options{})
	p := mustPlan(t, "p", lim("", 10, time.Second))
	ctx := context.Background()
	for i := 0; i < 30; i++ {
		if _, err := r.Decide(ctx, Request{Tenant: uniqueTenant("spread"), Plan: p, Weight: 1, JobID: "j"}); err != nil {
			t.Fatal(err)
		}
	}
	holding := 0
	for addr, node := range c.Nodes() {
		n, err := node.Do(ctx, node.B().Dbsize().Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("node %s holds %d keys", addr, n)
		if n > 0 {
			holding++
		}
	}
	if holding < 2 {
		t.Fatalf("keys on %d node(s): the tenants did not spread over the cluster", holding)
	}
}

// TestRedisReadsStateBeforeKinds: a state written before limit kinds ("ADM2": pairs of limit id
// and tat) is read as the buckets it holds, so that an upgrade does not refill every bucket.
func TestRedisReadsStateBeforeKinds(t *testing.T) {
	c := newClock()
	r := NewRedis(redisClient(t), "", Options{})
	r.pin(c.Now)
	tenant := uniqueTenant("adm2")
	p := mustPlan(t, "p", lim("burst", 10, time.Second), win("w", 5, time.Minute))
	now := c.Now().UnixMicro()
	// burst 7 s short of full: 3 tokens; the window has no state in it (unused).
	old := packInts(nil, 1094995250, 1, 0, 0, 0, 0, now+7_000_000, limitID("burst"), now+7_000_000)
	cl := redisClient(t)
	if err := cl.Do(context.Background(), cl.B().Set().Key(r.stateKey(tenant)).Value(string(old)).Px(time.Minute).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	s, err := r.Inspect(context.Background(), tenant, p)
	if err != nil {
		t.Fatal(err)
	}
	if s.Limits[0].Tokens != 3 || s.Limits[1].Tokens != 5 {
		t.Fatalf("tokens %d and %d, want 3 and 5: %+v", s.Limits[0].Tokens, s.Limits[1].Tokens, s)
	}
}

// TestRedisRefusesACalendarThatMissesItsClock: a quota's calendar comes from the client; when it
// does not hold the server's time (a clock off by more than calMargin) the script refuses the
// call with an error, and charges nothing, instead of guessing the period.
func TestRedisRefusesACalendarThatMissesItsClock(t *testing.T) {
	c := newClock()
	r := NewRedis(redisClient(t), "", Options{})
	r.pin(c.Now)
	p := mustPlan(t, "q", quota("q", 5, Minute, nil))
	tenant := uniqueTenant("skew")
	now := c.Now().UnixMicro()
	for _, est := range []int64{now + 10*60e6, now - 10*60e6} {
		arg := packInts(nil, now, 0, r.redeem, r.late, r.horizon, 1, r.hold, 0, 0, 0, 0, 1, 1, r.pad, 0, 0, -1, 0, 1, 1)
		arg = append(arg, p.packed...)
		arg = append(arg, newCalendar(&p.Limits[0], est-calMargin, est+calMargin).packed...)
		c := &admitCall{keys: []string{r.stateKey(tenant)}, jobs: 1, size: admitReplyLen(1, false), arg: func() string { return string(arg) }, done: make(chan struct{})}
		r.execAdmits(context.Background(), []*admitCall{c})
		err := c.err
		if err == nil || !strings.Contains(err.Error(), "quota calendar") {
			t.Errorf("calendar around %+dm: error %v, want the calendar refused", (est-now)/60e6, err)
		}
	}
	if keys := tenantKeys(t, tenant); len(keys) != 0 {
		t.Errorf("a refused call wrote %v", keys)
	}
	// The calendar the backend builds itself holds the clock.
	if _, err := r.Admit(context.Background(), Batch{Tenant: tenant, Plan: p, Owner: 1, Jobs: []Job{{ID: 1, Weight: 1}}}); err != nil {
		t.Fatal(err)
	}
}
