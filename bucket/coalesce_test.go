package bucket

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// scriptCalls reads how many script calls (FCALL, EVALSHA, EVAL) the shared test server has run.
func scriptCalls(t *testing.T) int64 {
	t.Helper()
	c := redisClient(t)
	info, err := c.Do(context.Background(), c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(info, "\n") {
		for _, cmd := range []string{"fcall", "evalsha", "eval"} {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
				k, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
				n += k
			}
		}
	}
	return n
}

// TestRedisCoalescesTenants: 64 tenants' batches and requests decided at once go to Redis in
// fewer script calls than batches, and every tenant gets exactly what it gets alone (the memory
// backend, deciding one call at a time, is the reference): ingest and lane, requests with and
// without a key, shadow plans included.
func TestRedisCoalescesTenants(t *testing.T) {
	c := newClock()
	opts := Options{Redeem: 700 * ms, Horizon: time.Second}
	red := NewRedis(redisClient(t), "", opts)
	red.pin(c.Now)
	mem := NewMemory(opts, c.Now)
	plans := []*Plan{
		mustPlan(t, "a", lim("burst", 3, 100*ms)),
		mustPlan(t, "b", lim("burst", 5, 50*ms), lim("daily", 40, time.Second)),
	}
	plans = append(plans, shadowOf(plans[0]))
	const tenants, rounds = 64, 12
	names := make([]string, tenants)
	for i := range names {
		names[i] = uniqueTenant("co")
	}
	batch := func(i, round int) Batch {
		b := Batch{Tenant: names[i], Plan: plans[i%len(plans)], Owner: OwnerID(fmt.Sprint("replica", round%2))}
		for j := range 1 + (i+round)%4 {
			b.Jobs = append(b.Jobs, Job{ID: int64(round*10 + j + 1), Weight: 1})
		}
		return b
	}
	request := func(i, round int) Request { // a request of the tenant's, a key on every other one
		r := Request{Tenant: names[i], Plan: plans[i%len(plans)], Weight: 1}
		if round%2 == 0 {
			r.JobID = fmt.Sprint("r", round%4)
		}
		return r
	}
	before := scriptCalls(t)
	ctx := context.Background()
	for round := range rounds {
		got := make([]string, tenants)
		var wg sync.WaitGroup
		for i := range tenants {
			wg.Go(func() {
				r, err := red.Admit(ctx, batch(i, round))
				d, err2 := red.Decide(ctx, request(i, round))
				got[i] = fmt.Sprintf("%+v %v / %+v %v", r, err, d, err2)
			})
		}
		wg.Wait()
		for i := range tenants {
			r, err := mem.Admit(ctx, batch(i, round))
			d, err2 := mem.Decide(ctx, request(i, round))
			if want := fmt.Sprintf("%+v %v / %+v %v", r, err, d, err2); got[i] != want {
				t.Fatalf("round %d tenant %d:\nredis  %s\nmemory %s", round, i, got[i], want)
			}
		}
		c.Advance(40 * ms)
	}
	calls := scriptCalls(t) - before
	t.Logf("%d batches and %d requests in %d script calls", tenants*rounds, tenants*rounds, calls)
	if calls >= 2*tenants*rounds {
		t.Errorf("%d batches and requests took %d script calls: none was sent with another", 2*tenants*rounds, calls)
	}
}

// TestRedisCoalescedErrorStaysWithItsBatch: a batch the script refuses (a quota calendar that
// misses the server's clock) fails alone; the batch sent with it is decided.
func TestRedisCoalescedErrorStaysWithItsBatch(t *testing.T) {
	c := newClock()
	r := NewRedis(redisClient(t), "", Options{})
	r.pin(c.Now)
	q := mustPlan(t, "q", quota("q", 5, Minute, nil))
	now := c.Now().UnixMicro()
	bad := packInts(nil, now, 0, r.redeem, r.late, r.horizon, 1, r.hold, 0, 0, 0, 0, 1, 1, r.pad, 0, 0, -1, 0, 1, 1)
	bad = append(append(bad, q.packed...), newCalendar(&q.Limits[0], now+10*60e6-calMargin, now+10*60e6+calMargin).packed...)
	p := mustPlan(t, "p", lim("", 2, 100*ms))
	good := packInts(nil, now, 0, r.redeem, r.late, r.horizon, 1, r.hold, 0, 0, 0, 0, 1, 1, r.pad, 0, 0, -1, 0, 1, 1)
	good = append(good, p.packed...)
	calls := []*admitCall{
		{keys: []string{r.stateKey(uniqueTenant("bad"))}, jobs: 1, size: admitReplyLen(1, false), arg: func() string { return string(bad) }, done: make(chan struct{})},
		{keys: []string{r.stateKey(uniqueTenant("good"))}, jobs: 1, size: admitReplyLen(1, false), arg: func() string { return string(good) }, done: make(chan struct{})},
	}
	r.execAdmits(context.Background(), calls)
	if calls[0].err == nil || !strings.Contains(calls[0].err.Error(), "quota calendar") {
		t.Errorf("the bad batch: error %v, want the calendar refused", calls[0].err)
	}
	if calls[1].err != nil || len(calls[1].reply) != 8*5 {
		t.Fatalf("the good batch: %v, reply of %d bytes", calls[1].err, len(calls[1].reply))
	}
	vals := make([]int64, 5)
	if err := unpackInts(calls[1].reply, vals); err != nil || vals[4] != int64(JobAdmitted) {
		t.Errorf("the good batch: %v %v, want its job admitted", vals, err)
	}
}

// TestRedisWithoutFunctions: a client that may not use Redis Functions (an ACL user without
// FCALL and FUNCTION, as a Redis before 7.0 has none) decides through scripts instead, with the
// same answers.
func TestRedisWithoutFunctions(t *testing.T) {
	admin := redisClient(t)
	ctx := context.Background()
	if err := admin.Do(ctx, admin.B().AclSetuser().Username("nofunctions").Rule("reset", "on", ">secret", "~*", "+@all", "-fcall", "-fcall_ro", "-function").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(sharedRedis.server.URL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword("nofunctions", "secret")
	opt, err := RedisClientOption(u.String())
	if err != nil {
		t.Fatal(err)
	}
	client, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	r := NewRedis(client, "", Options{})
	r.born.off = true
	p := mustPlan(t, "p", lim("", 2, time.Second))
	tenant := uniqueTenant("nofn")
	res, err := r.Admit(ctx, Batch{Tenant: tenant, Plan: p, Owner: 1, Jobs: []Job{{ID: 1, Weight: 1}, {ID: 2, Weight: 1}, {ID: 3, Weight: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(res.Outcomes) != "[admitted admitted not-yet]" || !r.noFunctions.Load() {
		t.Errorf("outcomes %v, scripts in use %v; want two admitted, one to the lane, through scripts", res.Outcomes, r.noFunctions.Load())
	}
	if d, err := r.Decide(ctx, Request{Tenant: tenant, Plan: p, Weight: 1}); err != nil || d.Allowed {
		t.Errorf("decide: %+v %v, want throttled", d, err)
	}
	if s, err := r.Inspect(ctx, tenant, p); err != nil || s.Limits[0].Tokens != 0 {
		t.Errorf("inspect: %+v %v, want the bucket empty", s, err)
	}
	if err := r.Prepare(ctx); err != nil {
		t.Errorf("prepare without functions: %v", err)
	}
}
