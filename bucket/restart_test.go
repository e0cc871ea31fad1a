package bucket

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/admitter/admitter/internal/testenv"
	"github.com/admitter/admitter/lua"
	"github.com/redis/rueidis"
)

// forget makes a backend behave as one whose memory began at t (a restarted process, a Redis
// restarted without its data).
func forget(l limiter, t time.Time) {
	switch b := l.(type) {
	case *Memory:
		b.Forgot(t)
	case *Redis:
		b.born.at.Store(t.UnixMicro())
	}
}

// TestRedisRestartStartsEmpty: a real redis-server without an append-only file is restarted
// (SIGKILL): the limiter notices and takes the forgotten buckets for empty since the restart,
// so the tenant gets its rate, not a second full capacity.
func TestRedisRestartStartsEmpty(t *testing.T) {
	srv := testenv.StartRedis(t)
	r, err := DialRedis(srv.URL(), "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var seen []bool
	r.OnForget(func(_ time.Time, first bool) { seen = append(seen, first) })
	p := mustPlan(t, "p", lim("", 20, time.Second)) // 20 burst, 1/s: 20 s to refill
	ctx := context.Background()
	count := func() int {
		b := laneBatch("acme", p, 20)
		res, err := r.Admit(ctx, b)
		for tries := 0; err != nil && tries < 50; tries++ { // the call on the connection the restart broke fails
			time.Sleep(20 * time.Millisecond)
			res, err = r.Admit(ctx, b)
		}
		if err != nil {
			t.Fatal(err)
		}
		return admittedIn(res)
	}
	// A server up for less than the refill time: buckets without state are not full yet.
	time.Sleep(1100 * time.Millisecond)
	if n := count(); n < 1 || n > 3 {
		t.Fatalf("just after the server started: %d admitted, want its refill since (1-3)", n)
	}
	srv.Kill()
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	n := count()
	t.Logf("after a restart of redis: %d admitted of 20 asked; forget events %v", n, seen)
	if n > 3 {
		t.Fatalf("after a restart of redis, %d of 20 admitted at once: the forgotten bucket was taken for full", n)
	}
	if len(seen) != 2 || !seen[0] || seen[1] {
		t.Errorf("forget events %v, want the first check, then the restart", seen)
	}
}

// TestRedisRestartNoticedByTheScript: the restart is noticed by the first script call on the
// new server, whoever made the connection: here a client of the caller's (NewRedis, no dial
// hook), already reconnected by a PING, and the call less than a check interval after the last
// check. The server does not know the script (NOSCRIPT): the limiter asks when it started
// before running it, so the forgotten bucket is empty since the restart, not since the
// previous start.
func TestRedisRestartNoticedByTheScript(t *testing.T) {
	srv := testenv.StartRedis(t)
	opt, err := RedisClientOption(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	opt.PipelineMultiplex = -1 // one connection: the PING below reconnects the one the decision uses
	client, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	r := NewRedis(client, "", Options{})
	// 100 burst at 25/s: 4 s to refill. A restart and reconnection take up to a second or two on
	// a busy machine, in which the bucket refills since the new start (25 a second): the test
	// tells that from a bucket taken for refilled since the previous start (100) while they
	// take under 3 s (at 100/s, a reconnection of over 1 s made it fail 1 run in 16).
	p := mustPlan(t, "p", lim("", 100, 40*time.Millisecond))
	ctx := context.Background()
	count := func() int {
		res, err := r.Admit(ctx, laneBatch("acme", p, 100))
		if err != nil {
			t.Fatal(err)
		}
		return admittedIn(res)
	}
	time.Sleep(4500 * time.Millisecond)
	if n := count(); n < 100 {
		t.Fatalf("4.5 s after the server started: %d admitted, want the bucket refilled since (100)", n)
	}
	srv.Kill()
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	for tries := 0; client.Do(ctx, client.B().Ping().Build()).Error() != nil; tries++ {
		if tries == 100 {
			t.Fatal("the client did not reconnect")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Taken for refilled since the previous start, the bucket would let all 100 through.
	n := count()
	t.Logf("after a restart of redis: %d admitted of 100 asked", n)
	if n > 75 {
		t.Fatalf("after a restart of redis, %d of 100 admitted at once: the forgotten bucket was taken for refilled since the previous start", n)
	}
}

// TestRedisPrepare: after Prepare the library is on the server and the start is known: the
// first decision is one call.
func TestRedisPrepare(t *testing.T) {
	srv := testenv.StartRedis(t)
	r, err := DialRedis(srv.URL(), "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	if err := r.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	if r.born.at.Load() == 0 || r.born.checked.Load() == 0 {
		t.Errorf("start not learned: at %d, checked %d", r.born.at.Load(), r.born.checked.Load())
	}
	libs, err := r.client.Do(ctx, r.client.B().FunctionList().Libraryname(lua.LibraryName).Build()).ToArray()
	if err != nil || len(libs) != 1 {
		t.Errorf("library %s not loaded: %d libraries, %v", lua.LibraryName, len(libs), err)
	}
}

// TestRedisClusterNodeDownLeavesTheOthers: on a Redis Cluster of three masters, one is killed.
// Tenants whose state is on the others are still decided (knowing when the dead node's memory
// began does not matter to them); a tenant without state there is taken for empty from the
// moment the node was missed, not full (it could have restarted then without its data, and
// its tenants' buckets be full again); and the node, restarted without its data, is noticed
// before its first decision.
func TestRedisClusterNodeDownLeavesTheOthers(t *testing.T) {
	url, nodes := testenv.StartRedisCluster(t, 3)
	r, err := DialRedis(url, "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var mu sync.Mutex
	var seen []bool
	r.OnForget(func(_ time.Time, first bool) { mu.Lock(); seen = append(seen, first); mu.Unlock() })
	// Slots of three masters: 0-5460, 5461-10921, 10922-16383. The hash tags: cat 1075 and
	// dog 254 on the first, ant 14957 on the third.
	p := mustPlan(t, "p", lim("", 20, 5*time.Second)) // 20 burst, one every 5 s
	ctx := context.Background()
	admitted := func(tenant string) (int, error) {
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		res, err := r.Admit(dctx, laneBatch(tenant, p, 20))
		return admittedIn(res), err
	}
	for _, tenant := range []string{"cat", "ant"} {
		if _, err := admitted(tenant); err != nil {
			t.Fatal(err)
		}
	}
	nodes[2].Kill()
	if _, err := admitted("ant"); err == nil {
		t.Fatal("a decision on the killed node succeeded")
	}
	if _, err := admitted("cat"); err != nil {
		t.Fatalf("a tenant on a live master is not decided while another master is down: %v", err)
	}
	n, err := admitted("dog")
	if err != nil {
		t.Fatalf("a new tenant on a live master is not decided while another master is down: %v", err)
	}
	if n > 2 {
		t.Errorf("a tenant without state got %d of 20 while a master was down: taken for full", n)
	}
	if err := nodes[2].Start(); err != nil {
		t.Fatal(err)
	}
	for tries := 0; ; tries++ {
		n, err = admitted("ant")
		if err == nil {
			break
		}
		if tries == 100 {
			t.Fatalf("no decision on the restarted node: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("after the node restarted without its data: %d of 20 admitted", n)
	if n > 3 {
		t.Errorf("after the node restarted without its data, %d of 20 admitted at once: the forgotten bucket was taken for full", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || !seen[0] || seen[1] {
		t.Errorf("forget events %v, want the first check, then the node's restart (a node missed is not one)", seen)
	}
}

// laneBatch is a lane batch of n jobs of weight 1 (ids 1 to n) of tenant under p.
func laneBatch(tenant string, p *Plan, n int) Batch {
	b := Batch{Tenant: tenant, Plan: p, Mode: Lane}
	for i := range n {
		b.Jobs = append(b.Jobs, Job{ID: int64(i + 1), Weight: 1})
	}
	return b
}

// admittedIn counts the jobs a batch's result admitted now.
func admittedIn(res BatchResult) int {
	n := 0
	for _, o := range res.Outcomes {
		if o == JobAdmitted {
			n++
		}
	}
	return n
}
