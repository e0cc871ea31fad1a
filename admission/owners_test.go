package admission

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
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
	mu            sync.Mutex
	held          map[int]bool
	starts, stops int
}

func (tl *tally) wire(o *owners) {
	tl.held = map[int]bool{}
	o.start = func(p int) { tl.mu.Lock(); tl.held[p] = true; tl.starts++; tl.mu.Unlock() }
	o.stop = func(p int, stopped func()) {
		tl.mu.Lock()
		delete(tl.held, p)
		tl.stops++
		tl.mu.Unlock()
		if stopped != nil {
			stopped()
		}
	}
}

// moved is how many times a part was started and stopped.
func (tl *tally) moved() (starts, stops int) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return tl.starts, tl.stops
}

// readyOwners is replica self's owners on kv with n partitions and the given heartbeat, as
// after its watch's initial values and its own first heartbeat, its parts counted in tl.
func readyOwners(kv ownersBucket, self string, n int, beat time.Duration, tl *tally) *owners {
	o := newOwners(self, n, beat, slog.New(slog.DiscardHandler))
	o.kv = kv
	tl.wire(o)
	o.ready, o.selfAt = true, time.Now()
	return o
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
	os[0].leave(context.Background())
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
	var tl tally
	o := readyOwners(kv, "a", 1, 100*time.Millisecond, &tl)
	rev, err := kv.Put(ctx, o.key(0), []byte("ghost"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	o.heard(entry{key: o.key(0), value: "ghost", rev: rev, created: now, op: jetstream.KeyValuePut}, now)
	testenv.WaitFor(t, 5*time.Second, "the key to expire", func() bool {
		_, err := kv.Get(ctx, o.key(0))
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
	o.balance(ctx, now.Add(o.lease))
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
	testenv.WaitFor(t, 10*time.Second, "a to hold all 8", func() bool { return len(ta.parts()) == 8 })
	wg.Go(func() { b.run(bctx) })
	testenv.WaitFor(t, 10*time.Second, "b to see a running 8", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.other == "a"
	})
	if got := tb.parts(); len(got) != 0 {
		t.Fatalf("b (4 partitions) took %v while a (8) runs", got)
	}
	acancel()
	a.leave(context.Background())
	testenv.WaitFor(t, 10*time.Second, "b to hold all 4 after a left", func() bool { return len(tb.parts()) == 4 })
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
	var tl tally
	o := readyOwners(kv, "a", 2, 100*time.Millisecond, &tl)
	o.balance(ctx, time.Now()) // partition 0 and 1 taken, answered
	if got := tl.parts(); !slices.Equal(got, []int{0, 1}) {
		t.Fatalf("holds %v, want [0 1]", got)
	}
	// Partition 0 is given up (its key deleted), then claimed again, and partition 1 renewed,
	// both applied but answered as cut short.
	t0, _ := o.tenures[0].giveUp()
	o.tenures[0] = t0
	o.deleteKey(ctx, release{p: 0, id: t0.id})
	o.keys[0] = seenKey{} // as the watch would say: deleted
	o.kv = cutShortKV{kv}
	o.renewAll(ctx)
	o.balance(ctx, time.Now())
	for p := range 2 {
		if e, err := kv.Get(ctx, o.key(p)); err != nil || string(e.Value()) != "a" {
			t.Fatalf("partition %d's key: %v, %v: want held by a (the request cut short was applied)", p, e, err)
		}
	}
	o.leave(ctx)
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
	var tl tally
	o := readyOwners(kv, "a", 1, 100*time.Millisecond, &tl)
	rev, err := kv.Put(ctx, o.key(0), []byte("ghost"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	o.heard(entry{key: o.key(0), value: "ghost", rev: rev, created: now, op: jetstream.KeyValuePut}, now)
	if _, err := kv.Update(ctx, o.key(0), []byte("ghost"), rev); err != nil { // renewed, unseen
		t.Fatal(err)
	}
	o.balance(ctx, now.Add(o.lease)) // finds the key moved on, seen now
	if o.holds(0) {
		t.Fatal("taken on the strength of a revision the holder had renewed since")
	}
	o.balance(ctx, time.Now().Add(o.lease))
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
	var tl tally
	o := readyOwners(kv, "a", 1, 100*time.Millisecond, &tl)
	o.balance(ctx, time.Now())
	first, _ := o.tenures[0].giveUp()
	delete(o.tenures, 0) // lost while its hand-over ran
	o.keys[0] = seenKey{}
	if err := kv.Delete(ctx, o.key(0)); err != nil {
		t.Fatal(err)
	}
	o.balance(ctx, time.Now()) // taken again
	if !o.ours(0) {
		t.Fatal("not taken again")
	}
	o.deleteKey(ctx, release{p: 0, id: first.id}) // the first release's hand-over ends
	if !o.ours(0) {
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
	var tl tally
	o := readyOwners(kv, "a", 1, time.Second, &tl)
	o.balance(ctx, time.Now())
	if !o.ours(0) {
		t.Fatal("not taken")
	}
	o.kv = cutShortKV{kv}
	o.renewAll(ctx) // applied, answered as cut short
	o.kv = kv
	o.renewAll(ctx)
	if starts, stops := tl.moved(); !o.holds(0) || starts != 1 || stops != 0 {
		t.Fatalf("after a renewal whose answer was lost: holds %v, started %d, stopped %d times", o.holds(0), starts, stops)
	}
}

// silentKV is a bucket whose server stops answering while mute is set (its stream electing a
// leader after a node was lost): every request waits until its context ends, unapplied.
type silentKV struct {
	jetstream.KeyValue
	mute *atomic.Bool
}

func (kv silentKV) wait(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }

func (kv silentKV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	if kv.mute.Load() {
		return 0, kv.wait(ctx)
	}
	return kv.KeyValue.Put(ctx, key, value)
}

func (kv silentKV) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	if kv.mute.Load() {
		return 0, kv.wait(ctx)
	}
	return kv.KeyValue.Update(ctx, key, value, rev)
}

func (kv silentKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	if kv.mute.Load() {
		return 0, kv.wait(ctx)
	}
	return kv.KeyValue.Create(ctx, key, value, opts...)
}

func (kv silentKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if kv.mute.Load() {
		return nil, kv.wait(ctx)
	}
	return kv.KeyValue.Get(ctx, key)
}

// TestALeaseThatLapsedUnansweredResumes: a partition whose renewals go unanswered past its
// lease (the bucket's stream lost its leader with a NATS node) stops acting, and resumes on
// the first renewal the bucket applies on its revision: nobody wrote the key meanwhile. Its
// part is not stopped and started again.
func TestALeaseThatLapsedUnansweredResumes(t *testing.T) {
	kv := ownersKV(t, time.Hour)
	ctx := context.Background()
	var mute atomic.Bool
	var tl tally
	o := readyOwners(silentKV{kv, &mute}, "a", 1, 100*time.Millisecond, &tl)
	o.balance(ctx, time.Now())
	if !o.holds(0) {
		t.Fatal("not taken")
	}
	mute.Store(true)
	o.renewAll(ctx)
	o.lapse(time.Now().Add(o.lease))
	if o.holds(0) {
		t.Fatal("acting on a lease whose renewals went unanswered for longer than it")
	}
	if err := o.waits(); err == nil {
		t.Error("nothing said of the partition it cannot read")
	}
	mute.Store(false)
	o.renewAll(ctx)
	o.balance(ctx, time.Now())
	if starts, stops := tl.moved(); !o.holds(0) || starts != 1 || stops != 0 {
		t.Fatalf("after the bucket answered again: holds %v, its part started %d and stopped %d times: want held, started once, never stopped", o.holds(0), starts, stops)
	}
}

// TestASilentHeartbeatDoesNotStarveTheRenewals: a heartbeat that goes unanswered does not take
// the time of the renewals of the same tick.
func TestASilentHeartbeatDoesNotStarveTheRenewals(t *testing.T) {
	kv := ownersKV(t, time.Hour)
	ctx := context.Background()
	var tl tally
	o := readyOwners(silentPutKV{kv}, "a", 1, 100*time.Millisecond, &tl)
	o.balance(ctx, time.Now())
	for range 4 {
		o.tick(ctx)
	}
	if !o.holds(0) {
		t.Fatal("the partition lapsed: its renewals waited for the heartbeat's answer")
	}
}

// silentPutKV is a bucket that never answers a Put (a heartbeat).
type silentPutKV struct{ jetstream.KeyValue }

func (kv silentPutKV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}

// rewatchKV is a bucket whose first watch ends when end is closed (its consumer lost with a
// NATS node), and whose later watches cannot be made (they wait until their context ends).
type rewatchKV struct {
	jetstream.KeyValue
	calls *atomic.Int32
	end   chan struct{}
}

func (kv rewatchKV) WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	if kv.calls.Add(1) > 1 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	w, err := kv.KeyValue.WatchAll(ctx, opts...)
	if err != nil {
		return nil, err
	}
	ew := endingWatcher{KeyWatcher: w, ch: make(chan jetstream.KeyValueEntry)}
	go func() {
		defer close(ew.ch)
		for {
			select {
			case <-kv.end:
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				select {
				case ew.ch <- e:
				case <-kv.end:
					return
				}
			}
		}
	}()
	return ew, nil
}

type endingWatcher struct {
	jetstream.KeyWatcher
	ch chan jetstream.KeyValueEntry
}

func (w endingWatcher) Updates() <-chan jetstream.KeyValueEntry { return w.ch }

// TestAWatchThatCannotBeMadeAgainHoldsNoRenewal: the owners bucket's watch ends and cannot be
// made again for a while (its stream without a leader): the heartbeats go on renewing the
// partitions held. Before, the loop waited for the new watch, and the partition's lease lapsed.
func TestAWatchThatCannotBeMadeAgainHoldsNoRenewal(t *testing.T) {
	kv := ownersKV(t, time.Hour)
	o := newOwners("a", 1, 100*time.Millisecond, slog.New(slog.DiscardHandler))
	var calls atomic.Int32
	o.kv = rewatchKV{kv, &calls, make(chan struct{})}
	var tl tally
	tl.wire(o)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { o.run(ctx) })
	defer func() { cancel(); wg.Wait() }()
	testenv.WaitFor(t, 5*time.Second, "partition 0 taken", func() bool { return len(tl.parts()) == 1 })
	close(o.kv.(rewatchKV).end)
	revision := func() uint64 {
		e, err := kv.Get(context.Background(), o.key(0))
		if err != nil {
			return 0
		}
		return e.Revision()
	}
	from := revision()
	testenv.WaitFor(t, 5*time.Second, "three renewals after the watch ended", func() bool { return revision() >= from+3 })
	if !o.holds(0) {
		t.Fatal("the partition is not held after its renewals")
	}
}
