package admission

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/admitter/admitter/internal/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ownersKV is a key-value bucket of a real JetStream server for the owners' leases, its keys
// expiring after ttl.
func ownersKV(t *testing.T, ttl time.Duration) jetstream.KeyValue {
	t.Helper()
	srv := testenv.StartNATS(t)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: "test_owners", TTL: ttl, History: 1})
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// tally records the partitions an owners gains and drops.
type tally struct {
	mu   sync.Mutex
	held map[int]bool
}

func (tl *tally) wire(o *owners) {
	tl.held = map[int]bool{}
	o.gain = func(p int) { tl.mu.Lock(); tl.held[p] = true; tl.mu.Unlock() }
	o.drop = func(p int, done func()) {
		tl.mu.Lock()
		delete(tl.held, p)
		tl.mu.Unlock()
		if done != nil {
			done()
		}
	}
}

func (tl *tally) parts() []int {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var out []int
	for p := range tl.held {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// TestReplicasSplitThePartitions: two replicas on one bucket each hold half of the partitions,
// none held by both; when one leaves, the other holds them all.
func TestReplicasSplitThePartitions(t *testing.T) {
	kv := ownersKV(t, time.Hour)
	const n = 8
	var tallies [2]tally
	var os [2]*owners
	ctxs := [2]context.Context{}
	cancels := [2]context.CancelFunc{}
	var wg sync.WaitGroup
	for i, name := range []string{"a", "b"} {
		os[i] = newOwners(name, n, 100*time.Millisecond, slog.New(slog.DiscardHandler))
		os[i].kv = kv
		tallies[i].wire(os[i])
		ctxs[i], cancels[i] = context.WithCancel(context.Background())
		wg.Add(1)
		go func() { defer wg.Done(); os[i].run(ctxs[i]) }()
	}
	defer func() { cancels[0](); cancels[1](); wg.Wait() }()
	split := func() bool {
		a, b := tallies[0].parts(), tallies[1].parts()
		return len(a) == n/2 && len(b) == n/2 && !slices.ContainsFunc(a, func(p int) bool { return slices.Contains(b, p) })
	}
	deadline := time.Now().Add(10 * time.Second)
	for !split() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !split() {
		t.Fatalf("a holds %v, b holds %v: want %d each, disjoint", tallies[0].parts(), tallies[1].parts(), n/2)
	}
	cancels[0]()
	os[0].leave()
	deadline = time.Now().Add(10 * time.Second)
	for len(tallies[1].parts()) < n && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := tallies[1].parts(); len(got) != n {
		t.Fatalf("b holds %v after a left, want all %d", got, n)
	}
}

// TestAnExpiredKeyIsTakenOver: a partition's key that the bucket's TTL removed (its owner died
// long ago: no delete marker is written) is taken with a create once its lease has passed.
// Before, the take-over was an update on the revision last seen, refused forever.
func TestAnExpiredKeyIsTakenOver(t *testing.T) {
	kv := ownersKV(t, 200*time.Millisecond)
	ctx := context.Background()
	o := newOwners("a", 1, 100*time.Millisecond, slog.New(slog.DiscardHandler))
	o.kv = kv
	var tl tally
	tl.wire(o)
	rev, err := kv.Put(ctx, o.key(0), []byte("ghost"))
	if err != nil {
		t.Fatal(err)
	}
	o.heard(entry{key: o.key(0), value: "ghost", rev: rev, created: time.Now(), op: jetstream.KeyValuePut})
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := kv.Get(ctx, o.key(0)); errors.Is(err, jetstream.ErrKeyNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the key did not expire")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(o.lease)
	o.mu.Lock()
	o.ready, o.selfAt = true, time.Now()
	o.mu.Unlock()
	o.balance(ctx)
	if !o.holds(0) || !slices.Equal(tl.parts(), []int{0}) {
		t.Fatalf("partition 0 not taken after its key expired: holds %v", tl.parts())
	}
}

// TestReplicasOfAnotherCountTakeNothing: a replica started with another count of partitions
// than a live one (a rolling update that changes ADMITTER_PARTITIONS) takes no partition while
// the other runs: both would read the older streams' tenants. Once it has left, the new one
// takes them all.
func TestReplicasOfAnotherCountTakeNothing(t *testing.T) {
	kv := ownersKV(t, time.Hour)
	var ta, tb tally
	a := newOwners("a", 8, 100*time.Millisecond, slog.New(slog.DiscardHandler))
	b := newOwners("b", 4, 100*time.Millisecond, slog.New(slog.DiscardHandler))
	a.kv, b.kv = kv, kv
	ta.wire(a)
	tb.wire(b)
	actx, acancel := context.WithCancel(context.Background())
	bctx, bcancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { a.run(actx) })
	defer func() { acancel(); bcancel(); wg.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for len(ta.parts()) < 8 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if len(ta.parts()) != 8 {
		t.Fatalf("a holds %v, want all 8", ta.parts())
	}
	wg.Go(func() { b.run(bctx) })
	time.Sleep(20 * b.beat) // long enough to see a, and for a's leases to look stale were they not renewed
	if got := tb.parts(); len(got) != 0 {
		t.Fatalf("b (4 partitions) took %v while a (8) runs", got)
	}
	acancel()
	a.leave()
	deadline = time.Now().Add(10 * time.Second)
	for len(tb.parts()) < 4 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := tb.parts(); len(got) != 4 {
		t.Fatalf("b holds %v after a left, want all 4", got)
	}
}

// cutShortKV is a bucket whose creates and updates the server applies but whose answers are
// lost: the stop cancels the owners' requests in flight (Service.Run cancels their context), and
// a request cut short may have been applied.
type cutShortKV struct{ jetstream.KeyValue }

func (kv cutShortKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	if _, err := kv.KeyValue.Create(ctx, key, value, opts...); err != nil {
		return 0, err
	}
	return 0, context.Canceled
}

func (kv cutShortKV) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	if _, err := kv.KeyValue.Update(ctx, key, value, rev); err != nil {
		return 0, err
	}
	return 0, context.Canceled
}

// TestLeavingGivesUpTheKeysOfRequestsCutShort: a replica stopped while it claims or renews a
// partition (its request applied, the answer lost to the stop) deletes the partition's key as it
// leaves. Before, the key stayed held, unknown to it, and the next replica waited a whole lease
// for the partition (seen end to end: TestOwnershipFlapsLoseNothing, one SIGTERM in about 15
// took 3.5 s rather than 1 s to move a partition, with "context canceled" on the claim).
func TestLeavingGivesUpTheKeysOfRequestsCutShort(t *testing.T) {
	kv := ownersKV(t, time.Hour)
	ctx := context.Background()
	o := newOwners("a", 2, 100*time.Millisecond, slog.New(slog.DiscardHandler))
	var tl tally
	tl.wire(o)
	o.kv = kv
	o.mu.Lock()
	o.ready, o.selfAt = true, time.Now()
	o.mu.Unlock()
	o.balance(ctx) // partition 0 and 1 taken, answered
	if got := tl.parts(); !slices.Equal(got, []int{0, 1}) {
		t.Fatalf("holds %v, want [0 1]", got)
	}
	// Partition 0 is given up (its key deleted), then claimed again, and partition 1 renewed,
	// both applied but answered as cut short.
	o.mu.Lock()
	h0 := o.mine[0]
	h0.releasing = true
	o.mu.Unlock()
	o.deleteKey(ctx, 0, h0)
	o.mu.Lock()
	o.keys[0] = seenKey{} // as the watch would say: deleted
	o.mu.Unlock()
	o.kv = cutShortKV{kv}
	o.renew(ctx)
	o.balance(ctx)
	for p := range 2 {
		if e, err := kv.Get(ctx, o.key(p)); err != nil || string(e.Value()) != "a" {
			t.Fatalf("partition %d's key: %v, %v: want held by a (the request cut short was applied)", p, e, err)
		}
	}
	o.leave()
	for p := range 2 {
		if e, err := kv.Get(ctx, o.key(p)); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Errorf("partition %d's key after a left: %v (%v), want deleted: the next replica waits a whole lease for it", p, e, err)
		}
	}
}

// TestAKeyThatMovedOnUnseenIsTakenOnceStale: a partition's key renewed by its holder while this
// replica's watch did not deliver it (the revision it knows is old) is not taken from a live
// holder, and is taken once the revision it finds has stayed the same for a whole lease. Before,
// the take-over was an update on the old revision, refused at every heartbeat for ever.
func TestAKeyThatMovedOnUnseenIsTakenOnceStale(t *testing.T) {
	kv := ownersKV(t, time.Hour)
	ctx := context.Background()
	o := newOwners("a", 1, 100*time.Millisecond, slog.New(slog.DiscardHandler))
	o.kv = kv
	var tl tally
	tl.wire(o)
	rev, err := kv.Put(ctx, o.key(0), []byte("ghost"))
	if err != nil {
		t.Fatal(err)
	}
	o.heard(entry{key: o.key(0), value: "ghost", rev: rev, created: time.Now(), op: jetstream.KeyValuePut})
	if _, err := kv.Update(ctx, o.key(0), []byte("ghost"), rev); err != nil { // renewed, unseen
		t.Fatal(err)
	}
	o.mu.Lock()
	o.ready, o.selfAt = true, time.Now()
	o.mu.Unlock()
	time.Sleep(o.lease)
	o.balance(ctx)
	if o.holds(0) {
		t.Fatal("taken on the strength of a revision the holder had renewed since")
	}
	time.Sleep(o.lease)
	o.balance(ctx)
	if !o.holds(0) || !slices.Equal(tl.parts(), []int{0}) {
		t.Fatalf("partition 0 not taken a lease after its revision was last seen to move: holds %v", tl.parts())
	}
}

// TestAReleaseEndsOnlyItsOwnTenure: a partition given up, lost meanwhile and taken again, is not
// ended by the first release's deletion when its hand-over finishes: the newer tenure keeps its
// key and its entry. Before, the deletion took whatever entry the partition had, and the
// partition went on unrenewed while its feed ran.
func TestAReleaseEndsOnlyItsOwnTenure(t *testing.T) {
	kv := ownersKV(t, time.Hour)
	ctx := context.Background()
	o := newOwners("a", 1, 100*time.Millisecond, slog.New(slog.DiscardHandler))
	o.kv = kv
	var tl tally
	tl.wire(o)
	o.mu.Lock()
	o.ready, o.selfAt = true, time.Now()
	o.mu.Unlock()
	o.balance(ctx)
	o.mu.Lock()
	first := o.mine[0]
	first.releasing = true
	delete(o.mine, 0) // lost while its hand-over ran
	o.keys[0] = seenKey{}
	o.mu.Unlock()
	if err := kv.Delete(ctx, o.key(0)); err != nil {
		t.Fatal(err)
	}
	o.balance(ctx) // taken again
	if !o.tenure(0) {
		t.Fatal("not taken again")
	}
	o.deleteKey(ctx, 0, first) // the first release's hand-over ends
	if !o.tenure(0) {
		t.Fatal("the first tenure's release ended the second")
	}
	if e, err := kv.Get(ctx, o.key(0)); err != nil || string(e.Value()) != "a" {
		t.Fatalf("the second tenure's key: %v, %v", e, err)
	}
}

// TestARenewalWhoseAnswerWasLostKeepsTheTenure: a renewal applied but answered as cut short
// (a timeout) leaves the key naming this replica at a revision it did not learn; the next
// renewal keeps the partition. Before, it failed on its revision and the replica dropped its own
// partition as taken by another, and took it back a lease later.
func TestARenewalWhoseAnswerWasLostKeepsTheTenure(t *testing.T) {
	kv := ownersKV(t, time.Hour)
	ctx := context.Background()
	o := newOwners("a", 1, time.Second, slog.New(slog.DiscardHandler))
	o.kv = kv
	var tl tally
	tl.wire(o)
	o.mu.Lock()
	o.ready, o.selfAt = true, time.Now()
	o.mu.Unlock()
	o.balance(ctx)
	if !o.tenure(0) {
		t.Fatal("not taken")
	}
	o.kv = cutShortKV{kv}
	o.renew(ctx) // applied, answered as cut short
	o.kv = kv
	o.renew(ctx)
	if !o.tenure(0) || !slices.Equal(tl.parts(), []int{0}) {
		t.Fatalf("the partition was dropped after a renewal whose answer was lost: holds %v", tl.parts())
	}
}
