package admission

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/plans"
	"github.com/admitter/admitter/policy"
	"github.com/nats-io/nats.go/jetstream"
)

// The findings of a review of the replica layer (issue 30), each a test that failed before its
// fix.

// tenantOwnedBy is a tenant name that replica owner ranks highest for among live.
func tenantOwnedBy(live []string, owner string) string {
	for i := 0; ; i++ {
		if t := fmt.Sprintf("t%d", i); rank(live, t) == owner {
			return t
		}
	}
}

// setLive makes m's live replicas live, as a change of membership would, and tells the queues.
func setLive(qs *queues, live ...string) {
	m := qs.s.members
	m.mu.Lock()
	m.live = live
	m.mu.Unlock()
	qs.rebalance()
}

// TestOwnershipFlapLosesNoJob: a queue whose tenant goes to another replica while its step runs,
// and comes back before the step ends, keeps its tenant's jobs: the job the feed handed it
// meanwhile, and the one the feed skipped while the tenant was away, are still this replica's
// to forward, and the floor does not pass them. Before, the step's end dropped the queue and
// its buffer (the tenant still had that queue, so the adoption gave it no other), and the
// compaction purged both jobs.
func TestOwnershipFlapLosesNoJob(t *testing.T) {
	qs := feedRig(t, 10, 1000)
	tn := tenantOwnedBy([]string{"a", "b"}, "b")
	qs.feed(tn, fed{seq: 10, subject: "jobs.submit." + tn + ".x", size: 10})
	q, _, _ := qs.take()    // its step runs
	setLive(qs, "a", "b")   // b joins: the tenant is b's
	qs.feed(tn, fedJob(11)) // skipped: not this replica's
	setLive(qs, "a")        // b leaves: the tenant is this replica's again
	qs.feed(tn, fedJob(12)) // handed to the queue
	qs.mu.Lock()
	qs.adoptLocked(tn)  // the adoption's listing found the tenant's jobs
	qs.adopting = false // and completed
	qs.mu.Unlock()
	qs.settled(q, 10) // the step forwarded job 10
	qs.done(q, stepResult{more: true, spent: 1})
	q2 := qs.byName[tn]
	if q2 == nil {
		t.Fatalf("the tenant has no queue after its step: jobs 11 and 12 are lost")
	}
	if f := qs.floor(); f > 11 {
		t.Errorf("floor %d: jobs 11 and 12 may be compacted away before they are forwarded", f)
	}
	if q2.mode == following {
		t.Errorf("the queue follows the feed again: job 11, skipped while the tenant was away, would never be read")
	}
}

// TestDroppedQueueLeavesTheRing: a ready queue whose tenant goes to another replica leaves the
// ring with its name; when the tenant comes back, one queue runs it, not two. Before, the
// dropped queue stayed in the ring and stepped the tenant beside the new one.
func TestDroppedQueueLeavesTheRing(t *testing.T) {
	qs := feedRig(t, 10, 1000)
	tn := tenantOwnedBy([]string{"a", "b"}, "b")
	other := tenantOwnedBy([]string{"a", "b"}, "a")
	qs.feed(tn, fedJob(10)) // ready
	qs.feed(other, fedJob(11))
	qs.s.cfg.Policy = testPolicy(t)
	setLive(qs, "a", "b") // dropped: not running
	setLive(qs, "a")
	qs.mu.Lock()
	qs.adoptLocked(tn) // the adoption gives it a new queue
	qs.mu.Unlock()
	seen := map[*queue]bool{}
	for range 3 {
		q, _, ok := qs.tryTake()
		if !ok {
			break
		}
		if q.tenant == tn {
			seen[q] = true
		}
		qs.done(q, stepResult{next: time.Hour})
	}
	if len(seen) != 1 {
		t.Fatalf("%d queues of tenant %s stepped, want 1", len(seen), tn)
	}
}

// testPolicy is a policy on in-process buckets, for a hand-over call.
func testPolicy(t *testing.T) *policy.Policy {
	t.Helper()
	ps, err := plans.Parse("plans.yaml", []byte("plans: {p: {limits: [{capacity: 5, rate: 5/s}]}}\ndefault_plan: p\n"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.New(policy.Config{Limiter: bucket.NewMemory(bucket.Options{}, nil), Plans: ps, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// heartbeat is a replica's heartbeat as the watch delivers it.
type heartbeat struct {
	jetstream.KeyValueEntry
	key     string
	created time.Time
	op      jetstream.KeyValueOp
}

func (h heartbeat) Key() string                     { return h.key }
func (h heartbeat) Value() []byte                   { return []byte(`{"floor":0}`) }
func (h heartbeat) Created() time.Time              { return h.created }
func (h heartbeat) Operation() jetstream.KeyValueOp { return h.op }

// TestMembershipIgnoresTheServersClock: the NATS server's clock 3 s behind this host's changes
// nothing: a replica heard from at its last heartbeat is live. Before, every peer's heartbeat
// was dated by the server's clock and compared with this host's: each looked 3 s old, dead, and
// every replica ran every tenant.
func TestMembershipIgnoresTheServersClock(t *testing.T) {
	m := newMembers("a", time.Second, slog.New(slog.DiscardHandler))
	server := time.Now().Add(-3 * time.Second) // the server's clock
	m.heard(heartbeat{key: "a", created: server, op: jetstream.KeyValuePut})
	m.heard(heartbeat{key: "b", created: server.Add(10 * time.Millisecond), op: jetstream.KeyValuePut})
	time.Sleep(20 * time.Millisecond) // time passes on this host; the server's clock is not read
	m.update()
	if live := m.liveNow(); len(live) != 2 {
		t.Fatalf("live %v, want a and b (b's heartbeat is as recent as a's own)", live)
	}
	// Three of this replica's heartbeats later, b has not been heard from: gone.
	m.heard(heartbeat{key: "a", created: server.Add(3100 * time.Millisecond), op: jetstream.KeyValuePut})
	m.update()
	if live := m.liveNow(); len(live) != 1 {
		t.Fatalf("live %v, want a alone (b silent for three heartbeats)", live)
	}
}

// TestReplicaMapsShrink: replicas that stopped being heard from (their keys expired without a
// delete, every start has a new name) leave the maps. Before, the maps kept every replica ever
// seen.
func TestReplicaMapsShrink(t *testing.T) {
	m := newMembers("a", time.Second, slog.New(slog.DiscardHandler))
	now := time.Now()
	for i := range 100 {
		m.heard(heartbeat{key: fmt.Sprintf("old%d", i), created: now, op: jetstream.KeyValuePut})
	}
	m.heard(heartbeat{key: "a", created: now.Add(time.Minute), op: jetstream.KeyValuePut})
	m.update()
	m.mu.RLock()
	n, r := len(m.seen), len(m.reports)
	m.mu.RUnlock()
	if n > 1 || r > 1 {
		t.Fatalf("%d replicas seen and %d reports kept a minute after the others fell silent, want only this one", n, r)
	}
}

// blocking is a limiter whose Admit waits until released (a hand-over that cannot finish).
type blocking struct {
	*bucket.Memory
	release chan struct{}
}

func (b blocking) Admit(ctx context.Context, batch bucket.Batch) (bucket.BatchResult, error) {
	select {
	case <-b.release:
	case <-ctx.Done():
	}
	return bucket.BatchResult{}, ctx.Err()
}

// TestHandOverDoesNotHoldTheHeartbeat: a change of membership hands the queues it gives up over
// without waiting for the limiter (the calls of the hand-over run on their own): the heartbeat
// loop that reported the change goes on at once. Before, it waited up to 2 s, against a liveness
// window of 3 s.
func TestHandOverDoesNotHoldTheHeartbeat(t *testing.T) {
	qs := feedRig(t, 10, 1000)
	ps, err := plans.Parse("plans.yaml", []byte("plans: {p: {limits: [{capacity: 5, rate: 5/s}]}}\ndefault_plan: p\n"))
	if err != nil {
		t.Fatal(err)
	}
	lim := blocking{bucket.NewMemory(bucket.Options{}, nil), make(chan struct{})}
	defer close(lim.release)
	pol, err := policy.New(policy.Config{Limiter: lim, Plans: ps, Logger: slog.New(slog.DiscardHandler), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	qs.s.cfg.Policy = pol
	tn := tenantOwnedBy([]string{"a", "b"}, "b")
	qs.feed(tn, fedJob(10))
	done := make(chan struct{})
	go func() { setLive(qs, "a", "b"); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second): // a hand-over's calls are bounded by 2 s
		t.Fatal("the change of membership waited for the hand-over's limiter call")
	}
	qs.s.handOvers.Wait()
}
