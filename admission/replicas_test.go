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
// fix, carried over to partitions held by leases.

// flap takes partition 0 away from the rig's replica and gives it back, as a lease lost and
// taken again would: the queues of the partition leave (those whose step runs, at its end), and
// a new feed delivers the partition from its first job.
func flap(t *testing.T, qs *queues) *part {
	t.Helper()
	qs.s.cfg.Policy = testPolicy(t)
	qs.s.stopPart(0, nil)
	qs.s.moves.Wait()
	pt := newPart(qs.s, 0)
	pt.feedOn, pt.horizon = true, 0
	qs.mu.Lock()
	qs.parts[0] = pt
	qs.mu.Unlock()
	return pt
}

// TestOwnershipFlapLosesNoJob: a queue whose partition goes to another replica while its step
// runs, and comes back before the step ends, keeps its tenant's jobs: those the new feed hands
// it are still this replica's to forward, and the floor does not pass them. Before, the step's
// end dropped the queue and its buffer, and the compaction purged the jobs.
func TestOwnershipFlapLosesNoJob(t *testing.T) {
	qs := feedRig(t, 10, 1000)
	feed(qs, "t", fedJob(10))
	q, _, _ := qs.take() // its step runs
	pt := flap(t, qs)
	for _, seq := range []uint64{10, 11, 12} { // the new feed, from the partition's first job
		qs.feed(pt, "t", fedJob(seq))
	}
	qs.settled(q, 10) // the step forwarded job 10
	qs.done(q, stepResult{more: true, spent: 1})
	q2 := qs.byName["t"]
	if q2 == nil {
		t.Fatalf("the tenant has no queue after its step: jobs 11 and 12 are lost")
	}
	if f := floor(qs); f > 11 {
		t.Errorf("floor %d: jobs 11 and 12 may be compacted away before they are forwarded", f)
	}
	if got, _ := qs.buffered(q2, 10); q2.mode == following && len(got) == 0 {
		t.Errorf("the queue follows the feed with nothing buffered: jobs 11 and 12 would never be read")
	}
}

// TestDroppedQueueLeavesTheRing: a ready queue whose partition goes to another replica leaves
// the ring with its name; when the partition comes back, one queue runs the tenant, not two.
func TestDroppedQueueLeavesTheRing(t *testing.T) {
	qs := feedRig(t, 10, 1000)
	feed(qs, "t", fedJob(10)) // ready
	feed(qs, "u", fedJob(11))
	pt := flap(t, qs)
	qs.feed(pt, "t", fedJob(10))
	seen := map[*queue]bool{}
	for range 3 {
		q, _, ok := qs.tryTake()
		if !ok {
			break
		}
		if q.tenant == "t" {
			seen[q] = true
		}
		qs.done(q, stepResult{next: time.Hour})
	}
	if len(seen) != 1 {
		t.Fatalf("%d queues of tenant t stepped, want 1", len(seen))
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

// entry is a key of the owners bucket as the watch delivers it.
type entry struct {
	jetstream.KeyValueEntry
	key     string
	value   string
	rev     uint64
	created time.Time
	op      jetstream.KeyValueOp
}

func (e entry) Key() string                     { return e.key }
func (e entry) Value() []byte                   { return []byte(e.value) }
func (e entry) Revision() uint64                { return e.rev }
func (e entry) Created() time.Time              { return e.created }
func (e entry) Operation() jetstream.KeyValueOp { return e.op }

func beat(id string, at time.Time) entry {
	return entry{key: replicaKeyPrefix + id, created: at, op: jetstream.KeyValuePut}
}

// TestMembershipIgnoresTheServersClock: the NATS server's clock 3 s behind this host's changes
// nothing: a replica heard from at its last heartbeat is live. (Before partitions: every peer's
// heartbeat was compared with this host's clock, each looked dead, and every replica ran every
// tenant.)
func TestMembershipIgnoresTheServersClock(t *testing.T) {
	o := newOwners("a", 8, time.Second, slog.New(slog.DiscardHandler))
	server := time.Now().Add(-3 * time.Second) // the server's clock
	o.heard(beat("a", server), time.Now())
	o.heard(beat("b", server.Add(10*time.Millisecond)), time.Now().Add(time.Hour)) // heard an hour later on this host: its clock is not read
	if live := o.liveNow(); len(live) != 2 {
		t.Fatalf("live %v, want a and b (b's heartbeat is as recent as a's own)", live)
	}
	// Three of this replica's heartbeats later, b has not been heard from: gone.
	o.heard(beat("a", server.Add(3100*time.Millisecond)), time.Now())
	if live := o.liveNow(); len(live) != 1 {
		t.Fatalf("live %v, want a alone (b silent for three heartbeats)", live)
	}
}

// TestReplicaMapsShrink: replicas that stopped being heard from (their keys kept without a
// delete; every start has a new name) leave the map.
func TestReplicaMapsShrink(t *testing.T) {
	o := newOwners("a", 8, time.Second, slog.New(slog.DiscardHandler))
	now := time.Now()
	for i := range 100 {
		o.heard(beat(fmt.Sprintf("old%d", i), now), time.Now())
	}
	o.heard(beat("a", now.Add(time.Minute)), time.Now())
	o.mu.Lock()
	n := len(o.seen)
	o.mu.Unlock()
	if n > 1 {
		t.Fatalf("%d replicas seen a minute after the others fell silent, want only this one", n)
	}
}

// TestALeaseIsTakenOverOnlyOnceStale: a partition's key is taken over by another replica only
// after its revision stayed the same for a whole lease on this replica's own clock, whatever
// the server's clock says of it.
func TestALeaseIsTakenOverOnlyOnceStale(t *testing.T) {
	o := newOwners("a", 2, 50*time.Millisecond, slog.New(slog.DiscardHandler))
	old := time.Now().Add(-time.Hour) // the server's clock, far behind
	o.heard(entry{key: o.key(1), value: "b", rev: 7, created: old, op: jetstream.KeyValuePut}, time.Now())
	if k := o.keys[1]; k.owner != "b" || time.Since(k.since) >= o.lease {
		t.Fatalf("key just seen: %+v, want b's, fresh on this replica's clock", k)
	}
	if o.owner(1) != "b" {
		t.Fatalf("owner %q, want b while its lease lasts", o.owner(1))
	}
	o.keys[1] = seenKey{owner: "b", rev: 7, since: time.Now().Add(-o.lease)} // a lease passes
	if o.owner(1) != "" {
		t.Fatalf("owner %q a lease after its last renewal was seen, want none", o.owner(1))
	}
	// A renewal seen meanwhile starts the lease again.
	o.heard(entry{key: o.key(1), value: "b", rev: 8, created: old, op: jetstream.KeyValuePut}, time.Now())
	if o.owner(1) != "b" {
		t.Fatalf("owner %q after a renewal, want b", o.owner(1))
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

// TestHandOverDoesNotHoldTheHeartbeat: giving a partition up hands its queues over without
// waiting for the limiter (the calls of the hand-over run on their own): the owners' loop that
// gave it up goes on at once. (Before partitions: the heartbeat loop waited up to 2 s, against a
// liveness window of 3 s.)
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
	feed(qs, "t", fedJob(10))
	done := make(chan struct{})
	go func() { qs.s.stopPart(0, nil); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second): // a hand-over's calls are bounded by 2 s
		t.Fatal("giving the partition up waited for the hand-over's limiter call")
	}
	qs.s.moves.Wait()
}

// TestAPartitionTakenWithALateLeaseIsRead: a partition whose start waited for its previous
// tenure's hand-over, and whose lease is late in its renewal when the start resumes, is started
// (the renewal under way decides whether it stays). Before, the start gave up on the clock, the
// renewal then succeeded, and the partition was held and never read.
func TestAPartitionTakenWithALateLeaseIsRead(t *testing.T) {
	qs := feedRig(t, 10, 1<<20)
	s := qs.s
	delete(qs.parts, 0)
	s.owners.tenures[0] = tenure{state: held, id: 1, rev: 1, until: time.Now().Add(-time.Millisecond), runs: true}
	s.startPart(context.Background(), 0)
	qs.mu.Lock()
	pt := qs.parts[0]
	qs.mu.Unlock()
	if pt == nil {
		t.Fatal("the partition is held and not read")
	}
	if err := pt.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}
