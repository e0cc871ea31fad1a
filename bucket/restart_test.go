package bucket

import (
	"context"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
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

// TestRedisRestartStartsEmpty: a real redis-server without an append-only file or snapshots.
// A new deployment's first decision finds the bucket full (the server never knew admitter);
// restarted (SIGKILL), the server has forgotten, and the limiter takes the forgotten bucket for
// empty since the restart, so the tenant gets its rate, not a second full capacity.
func TestRedisRestartStartsEmpty(t *testing.T) {
	srv := testenv.StartRedis(t)
	r, err := DialRedis(srv.URL(), "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var seen []Forgetting
	r.OnForget(func(f Forgetting) { seen = append(seen, f) })
	p := mustPlan(t, "p", lim("", 20, time.Second)) // 20 burst, 1/s: 20 s to refill
	ctx := context.Background()
	count := func(r *Redis, tenant string) int {
		b := laneBatch(tenant, p, 20)
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
	if n := count(r, "acme"); n != 20 {
		t.Fatalf("a new deployment's first decision: %d admitted of 20, want the full burst", n)
	}
	if len(seen) != 0 {
		t.Fatalf("forgettings %v on a server that never knew admitter", seen)
	}
	srv.Kill()
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	n := count(r, "acme")
	t.Logf("after a restart of redis: %d admitted of 20 asked; forgettings %v", n, seen)
	if n > 3 {
		t.Fatalf("after a restart of redis, %d of 20 admitted at once: the forgotten bucket was taken for full", n)
	}
	if len(seen) != 1 || seen[0].Why != "restarted without its data" {
		t.Errorf("forgettings %+v, want one: the restart", seen)
	}

	// Restarted without its data while no limiter ran: a new one learns it from the record it
	// keeps outside Redis; without the record it could not tell the server from a new one.
	rec := &memRecord{}
	rec.marked.Store(true)
	srv.Kill()
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	r2, err := DialRedis(srv.URL(), "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	r2.Record(rec)
	var seen2 []Forgetting
	r2.OnForget(func(f Forgetting) { seen2 = append(seen2, f) })
	if n := count(r2, "bob"); n > 3 {
		t.Fatalf("a new process after a restart without data, with the record: %d of 20 admitted at once", n)
	}
	if len(seen2) != 1 || seen2[0].Why != "restarted or emptied while no admitter of this deployment watched it" {
		t.Errorf("forgettings %+v, want one, found through the record", seen2)
	}
	// The first process adopts the loss the second recorded, without reporting it again.
	if n := count(r, "cat"); n > 3 {
		t.Fatalf("the first process after the second found the loss: %d of 20 admitted at once", n)
	}
	if len(seen) != 1 {
		t.Errorf("the first process reported %+v, want only its own", seen)
	}
}

// memRecord is a MemoryRecord in memory: what cmd/admitter keeps in NATS.
type memRecord struct{ marked atomic.Bool }

func (m *memRecord) Marked(context.Context) (bool, error) { return m.marked.Load(), nil }
func (m *memRecord) Mark(context.Context) error           { m.marked.Store(true); return nil }

// TestRedisSnapshotsAreToldApart: a redis-server on its defaults (RDB snapshots, no
// append-only file). Shut down cleanly, it saves a snapshot and comes back with the marker:
// nothing is lost, and a new tenant starts full. Killed after a snapshot older than the gap,
// it comes back with what came after the snapshot lost: from the snapshot's marker on.
func TestRedisSnapshotsAreToldApart(t *testing.T) {
	srv := testenv.StartDefaultRedis(t)
	r, err := DialRedis(srv.URL(), "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.born.gap = 2 * time.Second
	var seen []Forgetting
	r.OnForget(func(f Forgetting) { seen = append(seen, f) })
	p := mustPlan(t, "p", lim("", 20, time.Second))
	ctx := context.Background()
	count := func(tenant string) int {
		b := laneBatch(tenant, p, 20)
		res, err := r.Admit(ctx, b)
		for tries := 0; err != nil && tries < 100; tries++ {
			time.Sleep(20 * time.Millisecond)
			res, err = r.Admit(ctx, b)
		}
		if err != nil {
			t.Fatal(err)
		}
		return admittedIn(res)
	}
	if n := count("acme"); n != 20 {
		t.Fatalf("new deployment: %d of 20", n)
	}
	srv.Stop() // SIGTERM: saves a snapshot
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	if n := count("bob"); n != 20 || len(seen) != 0 {
		t.Fatalf("after a clean restart from its snapshot: a new tenant got %d of 20, forgettings %+v; want 20 and none", n, seen)
	}
	client := r.client
	if err := client.Do(ctx, client.B().Save().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	for range 4 { // the marker is rewritten after the snapshot, for longer than the gap
		time.Sleep(time.Second)
		count("dora")
	}
	srv.Kill() // what came after the snapshot is lost
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	// The client reconnects before the decision (as it does at the first call after a restart,
	// checked or not): a call already under way when it reconnects runs before the check (see
	// README, Faults).
	for tries := 0; client.Do(ctx, client.B().Ping().Build()).Error() != nil; tries++ {
		if tries == 100 {
			t.Fatal("the client did not reconnect")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := count("erin"); n > 6 {
		t.Fatalf("after a restart from a snapshot 4 s old: a tenant without state got %d of 20 at once, want its refill since the snapshot", n)
	}
	if len(seen) != 1 || !strings.HasPrefix(seen[0].Why, "restarted from a snapshot") {
		t.Errorf("forgettings %+v, want one: the old snapshot", seen)
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
	if n := count(); n < 100 {
		t.Fatalf("a new deployment: %d admitted, want the full bucket (100)", n)
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

// TestRedisRestartNoticedWhenAnotherReplicaWasFirst: as TestRedisRestartNoticedByTheScript, but
// another replica found the restarted server first (it loaded the library and marked the loss):
// the decision, built with the old idea of the server's memory and carried to the new server by
// the reconnection, is refused by the server's marker and made again with the loss. Before, it
// ran: the bucket was taken for refilled since the previous start, and 100 of 100 went at once
// (the chaos property test's rare burst after "redis restarted without its data", two replicas).
func TestRedisRestartNoticedWhenAnotherReplicaWasFirst(t *testing.T) {
	srv := testenv.StartRedis(t)
	opt, err := RedisClientOption(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	opt.PipelineMultiplex = -1
	client, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	rec := &memRecord{}
	r := NewRedis(client, "", Options{})
	r.Record(rec)
	p := mustPlan(t, "p", lim("", 100, 40*time.Millisecond))
	ctx := context.Background()
	count := func() int {
		res, err := r.Admit(ctx, laneBatch("acme", p, 100))
		if err != nil {
			t.Fatal(err)
		}
		return admittedIn(res)
	}
	if n := count(); n < 100 {
		t.Fatalf("a new deployment: %d admitted, want the full bucket (100)", n)
	}
	srv.Kill()
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	// The other replica: it finds the restart, records the loss and loads the library.
	other, err := DialRedis(srv.URL(), "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	other.Record(rec)
	if err := other.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	for tries := 0; client.Do(ctx, client.B().Ping().Build()).Error() != nil; tries++ {
		if tries == 100 {
			t.Fatal("the client did not reconnect")
		}
		time.Sleep(20 * time.Millisecond)
	}
	n := count()
	t.Logf("after a restart of redis another replica found first: %d admitted of 100 asked", n)
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
	if r.born.at.Load() != 0 || r.born.checked.Load() == 0 {
		t.Errorf("a new server: forgotten at %d (want 0, it never knew admitter), checked %d", r.born.at.Load(), r.born.checked.Load())
	}
	if n, err := r.client.Do(ctx, r.client.B().Exists().Key(r.markerKey("0")).Build()).AsInt64(); err != nil || n != 1 {
		t.Errorf("the marker is not on the server: %d, %v", n, err)
	}
	libs, err := r.client.Do(ctx, r.client.B().FunctionList().Libraryname(lua.LibraryName).Build()).ToArray()
	if err != nil || len(libs) != 1 {
		t.Errorf("library %s not loaded: %d libraries, %v", lua.LibraryName, len(libs), err)
	}
}

// TestRedisLoadsEveryScript: on a Redis without functions, Prepare loads every script the
// backend runs, so that none of the first calls pays an EVAL.
func TestRedisLoadsEveryScript(t *testing.T) {
	srv := testenv.StartRedis(t)
	r, err := DialRedis(srv.URL(), "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	if err := r.loadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range r.scripts() {
		ok, err := r.client.Do(ctx, r.client.B().ScriptExists().Sha1(s.sha).Build()).AsIntSlice()
		if err != nil || len(ok) != 1 || ok[0] != 1 {
			t.Errorf("script %s not loaded: %v %v", s.fn, ok, err)
		}
	}
	want := 0 // every *script field of Redis is in scripts()
	for i := range reflect.TypeOf(r).Elem().NumField() {
		if reflect.TypeOf(r).Elem().Field(i).Type == reflect.TypeOf(&script{}) {
			want++
		}
	}
	if len(r.scripts()) != want {
		t.Errorf("scripts() lists %d of the backend's %d scripts", len(r.scripts()), want)
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
	var seen []Forgetting
	r.OnForget(func(f Forgetting) { mu.Lock(); seen = append(seen, f); mu.Unlock() })
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
	if len(seen) != 1 || seen[0].Node != nodes[2].Addr || seen[0].Why != "restarted without its data" {
		t.Errorf("forgettings %+v, want the node's restart only (a node missed is not one)", seen)
	}
}

// laneBatch is a batch of the head of a queue: n jobs of weight 1 (ids 1 to n) of tenant under p.
func laneBatch(tenant string, p *Plan, n int) Batch {
	b := Batch{Tenant: tenant, Plan: p, Owner: 1}
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
