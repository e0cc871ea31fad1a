package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/admitter/admitter/internal/testenv"
	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestOutputLeaderKilledInACluster: on a 3-node JetStream cluster with ADMITTER_STREAM_REPLICAS=3,
// the server leading the output stream is shut down while jobs flow and wait in a lane: every
// job is forwarded exactly once, none is lost.
func TestOutputLeaderKilledInACluster(t *testing.T) {
	t.Parallel()
	cluster := testenv.StartNATSCluster(t, 3)
	w := newWorldOn(t, "plans: {p: {limits: [{capacity: 20, rate: 100/s}]}}\ndefault_plan: p\n", cluster.URLs(), testenv.StartPersistentRedis(t).URL())
	js := w.js
	w.start("ADMITTER_STREAM_REPLICAS=3")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := js.Stream(ctx, "ADMITTED")
	if err != nil {
		t.Fatal(err)
	}
	if r := out.CachedInfo().Config.Replicas; r != 3 {
		t.Fatalf("ADMITTED made with %d replicas, want 3", r)
	}
	const n = 600
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			m := nats.NewMsg("jobs.submit.acme.work")
			m.Data = []byte(fmt.Sprint("job-", i))
			for try := 0; ; try++ { // the producer retries through the election, as producers do
				pctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_, err := js.PublishMsg(pctx, m, jetstream.WithMsgID(fmt.Sprint("producer-", i)))
				cancel()
				if err == nil || try > 20 {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	waitFor(t, 20*time.Second, "some jobs forwarded", func() bool { return len(w.readAll("ADMITTED")) > 100 })
	info, err := out.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leader := info.Cluster.Leader
	cluster.Server(leader).Shutdown()
	t.Logf("shut down %s, the leader of ADMITTED", leader)
	<-done
	got := w.read("ADMITTED", n, 90*time.Second)
	if c := uniquePayloads(t, got); c != n || len(got) != n {
		t.Fatalf("%d messages for %d distinct jobs on ADMITTED, want %d once each", len(got), c, n)
	}
}

// failoverTenants are the chaos tests' tenants and cat, whose state is on another master than
// ant's and bee's (slots 1075 against 14957 and 15831 of three masters' 0-5460, 5461-10921 and
// 10922-16383).
var failoverTenants = append(chaosTenants[:len(chaosTenants):len(chaosTenants)], chaosTenant{"cat", []bucketLimit{{5, 10}}, 1, 12})

const failoverPlans = `
plans:
  ant: {limits: [{capacity: 4, rate: 8/s}]}
  bee: {limits: [{name: burst, capacity: 6, rate: 12/s}, {name: slow, capacity: 40, rate: 6/s}]}
  cat: {limits: [{capacity: 5, rate: 10/s}]}
tenants: {ant: ant, bee: bee, cat: cat}
`

// TestRedisClusterMasterFailover: the admitter decides on a Redis Cluster of three masters, each
// with a replica. Under load above the plans, the master holding two tenants' state (ant, bee)
// is killed (SIGKILL) and its replica takes over; the killed node then comes back, without its
// data, as a replica. Nothing is lost, nothing forwarded twice, and every tenant's forwards stay
// within C + r·t per limit, except those marked fail-open while the slot had no master; the
// tenant on another master (cat) is decided throughout.
func TestRedisClusterMasterFailover(t *testing.T) {
	t.Parallel()
	// As the README advises: the other masters answer while a slot has no master.
	rc := testenv.StartRedisClusterWithReplicas(t, 3, 1, "--cluster-require-full-coverage", "no")
	n := testenv.StartNATS(t)
	w := newWorldOn(t, failoverPlans, n.URL(), rc.URL)
	w.nats = n
	victim, replica, err := rc.MasterOf("admitter:{ant}")
	if err != nil {
		t.Fatal(err)
	}
	w.start("ADMITTER_REDIS_TIMEOUT=1s") // cat's decisions do not time out on a busy machine
	if other, _, err := rc.MasterOf("admitter:{cat}"); err != nil || other == victim {
		t.Fatalf("tenant cat's state must be on another master than ant's (%v, %v)", other, err)
	}
	var lt []loadTenant
	var checked []checkedTenant
	for _, tn := range failoverTenants {
		lt = append(lt, loadTenant{name: tn.name, rate: tn.rate, maxW: tn.maxW})
		checked = append(checked, checkedTenant{name: tn.name, limits: tn.limits, slack: float64(tn.maxW)})
	}
	start := time.Now()
	ld := startLoad(t, w.natsURL, uint64(start.UnixNano()), lt, 1)
	time.Sleep(3 * time.Second)

	victim.Kill()
	killed := time.Now()
	waitFor(t, 20*time.Second, "the replica to be promoted", func() bool { return testenv.IsMaster(replica) })
	promoted := time.Since(killed)
	if err := victim.Start(); err != nil { // it rejoins as a replica of the promoted node
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	published := ld.finish(t)

	got := w.read("ADMITTED", len(published), 60*time.Second)
	c := checkInvariants(published, got, w.readAll("DEAD"), checked)
	lastDegraded, firstDecided := killed, time.Time{}
	for _, j := range got {
		if j.header.Get(wire.HeaderTenant) == "ant" && j.header.Get(wire.HeaderDegraded) != "" && j.stored.After(lastDegraded) {
			lastDegraded = j.stored
		}
	}
	for _, j := range got {
		if j.header.Get(wire.HeaderTenant) == "ant" && j.header.Get(wire.HeaderDegraded) == "" && j.stored.After(lastDegraded) &&
			(firstDecided.IsZero() || j.stored.Before(firstDecided)) {
			firstDecided = j.stored
		}
	}
	t.Logf("master %s of tenant ant killed %.1fs in; replica %s promoted %v later; %d jobs published, %d forwarded, %d fail-open (last %v after the kill); ant's first decided forward after them %v after the kill",
		victim.Addr, killed.Sub(start).Seconds(), replica.Addr, promoted.Round(time.Millisecond), len(published), len(got), c.degraded,
		lastDegraded.Sub(killed).Round(time.Millisecond), firstDecided.Sub(killed).Round(time.Millisecond))
	catDegraded := 0
	for _, j := range got {
		if j.header.Get(wire.HeaderTenant) == "cat" && j.header.Get(wire.HeaderDegraded) == wire.DegradedFailOpen {
			catDegraded++
		}
	}
	if catDegraded > 0 {
		t.Errorf("tenant cat, on a master that stayed up, had %d forwards fail-open: the dead master failed its decisions too", catDegraded)
	}
	for _, p := range c.pacing {
		t.Logf("tenant %s, limit %v/%v per s: %d forwards decided, %d fail-open; worst window excess %.2f", p.tenant, p.limit.capacity, p.limit.rate, p.decided, p.degraded, p.excess)
	}
	c.report(t, start)
}
