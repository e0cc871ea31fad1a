package admission

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/internal/testenv"
	"github.com/admitter/admitter/subjects"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/rueidis"
)

// TestTheRouterTellsOneTenureFromTheNext: the router says since when this replica decides a
// tenant: the same time for as long as it holds the tenant's partition, a later one once it has
// given the partition up and taken it again (a copy mirrored before is not trusted), none while
// another replica holds it, and a time of its own while none is known to.
func TestTheRouterTellsOneTenureFromTheNext(t *testing.T) {
	o := newOwners("a", 1, 100*time.Millisecond, slog.New(slog.DiscardHandler))
	r := newRouter(&Service{cfg: Config{Replica: "a", Consumer: "c"}, owners: o, in: input{ps: subjects.Partitions{N: 1}}})
	id := uint64(0)
	set := func(mine bool, other string) {
		o.mu.Lock()
		defer o.mu.Unlock()
		if mine {
			id++
			o.tenures[0] = tenure{state: held, id: id, until: time.Now().Add(time.Minute)}
		} else {
			delete(o.tenures, 0)
		}
		o.keys[0] = seenKey{owner: other, since: time.Now()}
	}
	key := "tenant:acme"
	set(true, "")
	first := r.Since(key)
	if first.IsZero() || !r.Since(key).Equal(first) {
		t.Fatalf("held: since %v, then %v: want one time for the tenure", first, r.Since(key))
	}
	set(false, "b")
	if s := r.Since(key); !s.IsZero() {
		t.Fatalf("held by b: since %v, want zero", s)
	}
	time.Sleep(time.Millisecond) // a later tenure begins at a later time on this host's clock
	set(true, "")
	second := r.Since(key)
	if !second.After(first) {
		t.Fatalf("held again: since %v, want later than the first tenure's %v", second, first)
	}
	set(false, "")
	if s := r.Since(key); s.IsZero() || s.Equal(second) {
		t.Fatalf("held by none: since %v, want a time of its own", s)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.since) != 1 {
		t.Errorf("the router remembers %d tenures, want the one under way", len(r.since))
	}
}

// TestACutReplicaIsDecidedOnRedisThroughAPeer: two replicas over NATS; a's Redis is gone, b's
// answers. A request a decides is relayed to b and decided on Redis (not on a's copy), and
// spends the tenant's one token there; once b has lost Redis too, the relay finds no responder
// and a decides on its copy.
func TestACutReplicaIsDecidedOnRedisThroughAPeer(t *testing.T) {
	srv := testenv.StartNATS(t)
	plan, err := bucket.NewPlan("one", bucket.Limit{Name: "b", Capacity: 1, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	tenant := fmt.Sprintf("cut-%d", time.Now().UnixNano())
	plans, err := bucket.NewPlans([]*bucket.Plan{plan}, map[string]string{tenant: "one"}, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	replica := func(name string) (*bucket.Fallback, *testenv.RedisServer) {
		red := testenv.StartRedis(t)
		opt, err := bucket.RedisClientOption(red.URL())
		if err != nil {
			t.Fatal(err)
		}
		client, err := rueidis.NewClient(opt)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(client.Close)
		f := bucket.NewFallback(bucket.NewRedis(client, "", bucket.Options{}), bucket.Options{}, time.Second, bucket.FallbackHooks{})
		nc, err := nats.Connect(srv.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		s := &Service{cfg: Config{Replica: name, Consumer: "c", JetStream: js}, log: slog.New(slog.DiscardHandler),
			owners: newOwners(name, 1, time.Second, slog.New(slog.DiscardHandler)), in: input{ps: subjects.Partitions{N: 1}}}
		r := newRouter(s)
		f.Route(r, func() *bucket.Plans { return plans })
		unsubscribe, err := r.serve(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(unsubscribe)
		if err := nc.Flush(); err != nil { // its relay subscription is in place
			t.Fatal(err)
		}
		return f, red
	}
	a, redA := replica("a")
	b, redB := replica("b")
	redA.Kill()
	req := bucket.Request{Tenant: tenant, Plan: plan, Weight: 1}
	res, err := a.Decide(ctx, req)
	if err != nil || !res.Allowed || res.Local || !a.Local() {
		t.Fatalf("a's request, a cut from Redis: %+v %v (a local %v), want allowed on Redis through b", res, err, a.Local())
	}
	if res, err := b.Decide(ctx, req); err != nil || res.Allowed || res.Local {
		t.Fatalf("b's request after it: %+v %v, want refused on Redis (the token spent by a's)", res, err)
	}
	redB.Kill()
	if _, err := b.Decide(ctx, req); err != nil || !b.Local() {
		t.Fatalf("b's request, b cut too: %v (b local %v)", err, b.Local())
	}
	if res, err := a.Decide(ctx, bucket.Request{Tenant: tenant + "-x", Plan: plan, Weight: 1}); err != nil || !res.Local {
		t.Fatalf("a's request, every replica cut: %+v %v, want decided on a's copy", res, err)
	}
}
