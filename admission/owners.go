package admission

import (
	"context"
	"errors"
	"hash/fnv"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// owners decides which replica reads each partition of the input (docs/design.md section 4):
// one lease per partition in the owners bucket (Layout.Owners), under key part.<N>.<p> holding
// the owner's name, taken with a create or a compare-and-set update and renewed every heartbeat.
// Nothing else is agreed between replicas: the owner of a partition reads it whole, runs its
// tenants' queues and removes its settled jobs.
//
// A lease is counted on each replica's own monotonic clock, never on another host's: the owner
// acts until the send time of its last renewal that succeeded plus lease − heartbeat/2; a
// replica takes a key over only once its revision has stayed the same for a whole lease since it
// first saw it, with an update conditional on that revision (a renewal meanwhile makes it
// fail). A paused owner that wakes finds its renewal refused and has stopped acting already.
//
// Every replica also writes a heartbeat (key replica.<name>) every heartbeat; the replicas heard
// from within three of this one's own heartbeats (the server's store times, compared with each
// other only) are live, and each holds at most ceil(N / live) partitions: one holding more
// gives up those it ranks lowest (it stops reading them, hands their tenants over, then deletes
// their keys), one holding fewer takes free ones, those it ranks highest first.
type owners struct {
	self  string
	n     int
	beat  time.Duration
	lease time.Duration
	log   *slog.Logger
	kv    jetstream.KeyValue
	// gain starts reading partition p. drop stops it and calls done (if not nil) once nothing of
	// the partition runs any more; it must return at once.
	gain func(p int)
	drop func(p int, done func())
	// released receives the tenures given up (their drop done): their keys are deleted.
	released chan release

	mu     sync.Mutex
	keys   map[int]seenKey      // the partitions' keys as last seen
	seen   map[string]time.Time // each replica's last heartbeat, as the server stored it
	counts map[string]int       // each replica's count of partitions (its heartbeat's value)
	selfAt time.Time            // this replica's own last heartbeat, as the server stored it
	mine   map[int]*held        // the partitions this replica holds
	// unsure are the partitions whose claim failed without a refusal (cut short by the stop, or
	// unanswered): it may have been applied, the key this replica's with a revision it did not
	// learn (see leave).
	unsure map[int]bool
	ready  bool   // the watch's initial values are in
	other  string // a live replica of another count, as logged ("" when none)
	// gone are the replicas gone lately, for operators (replicas): forgotten after forgetAfter
	// heartbeats of silence, or stopped (their heartbeat deleted); at most maxGone, for goneFor.
	gone map[string]goneReplica
}

// goneReplica is a replica gone: when (its last heartbeat, or the deletion of its heartbeat, as
// the server stored them) and whether it stopped (deleted its heartbeat) rather than fell silent.
type goneReplica struct {
	at      time.Time
	stopped bool
}

// A replica gone is listed for goneFor after it was last heard from (the server's times,
// against this replica's own heartbeat), maxGone of them at most: the latest.
const (
	goneFor = 10 * time.Minute
	maxGone = 32
)

// seenKey is a partition's key as the watch delivered it: its owner ("" when deleted), its
// revision, and when this replica first saw that revision (its monotonic clock).
type seenKey struct {
	owner string
	rev   uint64
	since time.Time
}

// held is a partition this replica holds: its key's revision, until when it may act on it, and
// whether it is being given up.
type held struct {
	rev       uint64
	until     time.Time
	releasing bool
}

func newOwners(self string, n int, beat time.Duration, log *slog.Logger) *owners {
	return &owners{self: self, n: max(n, 1), beat: beat, lease: 3 * beat, log: log, released: make(chan release, max(n, 1)),
		keys: map[int]seenKey{}, seen: map[string]time.Time{}, counts: map[string]int{}, mine: map[int]*held{}, unsure: map[int]bool{},
		gone: map[string]goneReplica{}}
}

const (
	partKeyPrefix    = "part."
	replicaKeyPrefix = "replica."
)

// key is partition p's key.
func (o *owners) key(p int) string { return partKeyPrefix + strconv.Itoa(o.n) + "." + strconv.Itoa(p) }

// partOf is the partition a key names (ok false for another key or another N).
func (o *owners) partOf(key string) (int, bool) {
	rest, ok := strings.CutPrefix(key, partKeyPrefix+strconv.Itoa(o.n)+".")
	if !ok {
		return 0, false
	}
	p, err := strconv.Atoi(rest)
	return p, err == nil && p >= 0 && p < o.n
}

// holds reports whether this replica reads partition p now.
func (o *owners) holds(p int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	h := o.mine[p]
	return h != nil && !h.releasing && time.Now().Before(h.until)
}

// leased reports whether this replica's lease of partition p has not run out, given up or not:
// what it decided may still go (see Service.decideAndApply).
func (o *owners) leased(p int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	h := o.mine[p]
	return h != nil && time.Now().Before(h.until)
}

// tenure reports whether partition p is this replica's (taken and not given up or lost), whatever
// its lease's clock says: a renewal may be under way.
func (o *owners) tenure(p int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	h := o.mine[p]
	return h != nil && !h.releasing
}

// owner is the replica that holds partition p as last seen ("" when none is known).
func (o *owners) owner(p int) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if h := o.mine[p]; h != nil && !h.releasing {
		return o.self
	}
	k := o.keys[p]
	if k.owner == o.self || time.Since(k.since) >= o.lease {
		return ""
	}
	return k.owner
}

// liveLocked is the live replicas, this one included, sorted.
func (o *owners) liveLocked() []string {
	live := []string{o.self}
	if o.selfAt.IsZero() {
		return live
	}
	cut := o.selfAt.Add(-3 * o.beat)
	for id, at := range o.seen {
		if id != o.self && at.After(cut) {
			live = append(live, id)
		}
	}
	slices.Sort(live)
	return live
}

// liveNow is the live replicas, this one included, sorted.
func (o *owners) liveNow() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.liveLocked()
}

// count is the number of live replicas.
func (o *owners) count() int { return len(o.liveNow()) }

// held is the partitions this replica holds, sorted.
func (o *owners) heldNow() []int {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]int, 0, len(o.mine))
	for p, h := range o.mine {
		if !h.releasing {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// score ranks partition p for replica id (rendezvous hashing): each replica takes free
// partitions in the order of its scores, so replicas prefer different ones.
func score(id string, p int) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	h.Write([]byte{0})
	h.Write([]byte(strconv.Itoa(p)))
	return mix(h.Sum64())
}

// mix spreads the bits of an FNV-1a hash (splitmix64's finalizer): FNV-1a of names that differ
// in their last bytes ("t01", "t02") differs little in its high bits, and rendezvous hashing
// compares whole values.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// run keeps this replica's heartbeat and leases and follows the others' until ctx ends. It does
// not give the partitions up (see leave).
func (o *owners) run(ctx context.Context) {
	ticker := time.NewTicker(o.beat)
	defer ticker.Stop()
	o.tick(ctx)
	for ctx.Err() == nil {
		w, err := o.kv.WatchAll(ctx)
		if err != nil {
			o.log.Warn("partition owners: watch", "err", err)
			select {
			case <-ctx.Done():
			case <-ticker.C:
				o.tick(ctx)
			}
			continue
		}
		o.follow(ctx, w, ticker)
		_ = w.Stop()
		o.mu.Lock()
		o.ready = false
		o.mu.Unlock()
	}
}

// follow applies the watch's updates, the heartbeat ticks and the releases until ctx ends or
// the watch closes.
func (o *owners) follow(ctx context.Context, w jetstream.KeyWatcher, ticker *time.Ticker) {
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil { // the initial values are in
				o.mu.Lock()
				o.ready = true
				o.mu.Unlock()
				o.tick(ctx)
				continue
			}
			o.heard(e)
		case <-ticker.C:
			o.tick(ctx)
		case r := <-o.released:
			o.deleteKey(ctx, r.p, r.h)
		}
	}
}

// heard records a key as the watch delivered it.
func (o *owners) heard(e jetstream.KeyValueEntry) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if id, ok := strings.CutPrefix(e.Key(), replicaKeyPrefix); ok {
		if e.Operation() != jetstream.KeyValuePut {
			delete(o.seen, id)
			delete(o.counts, id)
			o.goneLocked(id, goneReplica{at: e.Created(), stopped: true})
			return
		}
		o.seen[id] = e.Created()
		delete(o.gone, id)
		if n, err := strconv.Atoi(string(e.Value())); err == nil {
			o.counts[id] = n
		}
		if id == o.self && e.Created().After(o.selfAt) {
			o.selfAt = e.Created()
			for other, at := range o.seen { // a replica silent for forgetAfter heartbeats is forgotten
				if at.Before(o.selfAt.Add(-forgetAfter * o.beat)) {
					delete(o.seen, other)
					delete(o.counts, other)
					o.goneLocked(other, goneReplica{at: at})
				}
			}
		}
		return
	}
	p, ok := o.partOf(e.Key())
	if !ok {
		return
	}
	k := seenKey{rev: e.Revision(), since: time.Now()}
	if e.Operation() == jetstream.KeyValuePut {
		k.owner = string(e.Value())
	}
	if old, ok := o.keys[p]; ok && old.rev >= k.rev {
		return // the watch delivered it after a renewal this replica made and recorded
	}
	o.keys[p] = k
}

// forgetAfter is how many heartbeats a silent replica is remembered: its key may stay without a
// delete (it died), and every start brings a new name.
const forgetAfter = 10

// tick writes the heartbeat, renews the leases held, drops those that ended, and moves
// partitions to reach this replica's share.
func (o *owners) tick(ctx context.Context) {
	tctx, cancel := context.WithTimeout(ctx, o.beat)
	defer cancel()
	if _, err := o.kv.Put(tctx, replicaKeyPrefix+o.self, []byte(strconv.Itoa(o.n))); err != nil && ctx.Err() == nil {
		o.log.Warn("replica heartbeat", "err", err)
	}
	o.renew(tctx)
	o.balance(tctx)
}

// renew renews every lease held; a lease whose renewal is refused (another replica took it
// over: this one was paused past its end) or that ended is dropped.
func (o *owners) renew(ctx context.Context) {
	o.mu.Lock()
	revs := make(map[int]uint64, len(o.mine))
	for p, h := range o.mine {
		revs[p] = h.rev
	}
	o.mu.Unlock()
	var lost []int
	for p, rev := range revs {
		sent := time.Now()
		next, err := o.kv.Update(ctx, o.key(p), []byte(o.self), rev)
		if isWrongLast(err) {
			// A renewal whose answer was lost (cut short, timed out) may have been applied: the
			// key then still names this replica, at a revision it did not learn. Only this
			// replica writes its name, and a take-over would have replaced it: the tenure goes on.
			if e, gerr := o.kv.Get(ctx, o.key(p)); gerr == nil && string(e.Value()) == o.self {
				sent = time.Now()
				next, err = o.kv.Update(ctx, o.key(p), []byte(o.self), e.Revision())
			}
		}
		o.mu.Lock()
		h := o.mine[p]
		switch {
		case h == nil:
		case err == nil:
			h.rev, h.until = next, sent.Add(o.lease-o.beat/2)
			o.keys[p] = seenKey{owner: o.self, rev: next, since: sent}
		case errors.Is(err, jetstream.ErrKeyExists) || isWrongLast(err):
			if o.loseLocked(p, "another replica holds it: this one's lease had ended (it was paused or cut off)") {
				lost = append(lost, p)
			}
		}
		o.mu.Unlock()
	}
	o.mu.Lock()
	for p, h := range o.mine {
		if time.Now().After(h.until) && !h.releasing && o.loseLocked(p, "its lease ended before a renewal succeeded") {
			lost = append(lost, p)
		}
	}
	o.mu.Unlock()
	for _, p := range lost {
		o.drop(p, nil) // returns at once
	}
}

// isWrongLast reports whether err is a compare-and-set that found another revision.
func isWrongLast(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// loseLocked forgets partition p at once: it is no longer this replica's. It reports whether
// its queues must be dropped (they are unless it was being given up already); the caller drops
// them once it has released the lock.
func (o *owners) loseLocked(p int, why string) bool {
	h := o.mine[p]
	delete(o.mine, p)
	o.log.Warn("partition lost", "partition", p, "why", why)
	return h != nil && !h.releasing
}

// balance takes free partitions up to this replica's share, and gives up those above it.
func (o *owners) balance(ctx context.Context) {
	o.mu.Lock()
	if !o.ready || o.selfAt.IsZero() {
		o.mu.Unlock()
		return
	}
	live := o.liveLocked()
	if other := o.otherCountLocked(live); other != "" {
		// Replicas of two counts would both read the streams of the other count's tenants: this
		// one takes nothing until the others have stopped (it keeps what it holds).
		logIt := o.other != other
		o.other = other
		o.mu.Unlock()
		if logIt {
			o.log.Error("another live replica runs with another ADMITTER_PARTITIONS: no partition is taken until every replica runs the same count (stop the others, docs/upgrading.md)",
				"replica", other, "its_partitions", o.countOf(other), "partitions", o.n)
		}
		return
	}
	o.other = ""
	share := int(math.Ceil(float64(o.n) / float64(len(live))))
	var holding []int
	for p, h := range o.mine {
		if !h.releasing {
			holding = append(holding, p)
		}
	}
	byScore := func(ps []int) {
		slices.SortFunc(ps, func(a, b int) int {
			sa, sb := score(o.self, a), score(o.self, b)
			switch {
			case sa > sb:
				return -1
			case sa < sb:
				return 1
			}
			return 0
		})
	}
	if len(holding) > share {
		byScore(holding)
		var gone []release
		for _, p := range holding[share:] {
			h := o.mine[p]
			h.releasing = true
			gone = append(gone, release{p, h})
			o.log.Info("giving a partition up to another replica", "partition", p, "live", len(live), "share", share)
		}
		o.mu.Unlock()
		for _, r := range gone {
			o.drop(r.p, func() { // returns at once; done runs once the partition's steps ended
				select {
				case o.released <- r:
				default: // the loop has ended: leave deletes the key
				}
			})
		}
		return
	}
	type claim struct {
		p   int
		rev uint64 // 0: create
	}
	var claims []claim
	free := make([]int, 0, o.n)
	for p := range o.n {
		if o.mine[p] == nil {
			free = append(free, p)
		}
	}
	byScore(free)
	for _, p := range free {
		if len(holding)+len(claims) >= share {
			break
		}
		k, known := o.keys[p]
		switch {
		case !known || k.owner == "":
			claims = append(claims, claim{p: p, rev: k.rev})
		case time.Since(k.since) >= o.lease:
			claims = append(claims, claim{p: p, rev: k.rev})
		}
	}
	o.mu.Unlock()
	for _, c := range claims {
		sent := time.Now()
		var rev uint64
		var err error
		if c.rev == 0 {
			rev, err = o.kv.Create(ctx, o.key(c.p), []byte(o.self))
		} else if k := o.keyNow(c.p); k.owner == "" {
			rev, err = o.kv.Create(ctx, o.key(c.p), []byte(o.self)) // deleted: a create over its marker
		} else {
			rev, err = o.kv.Update(ctx, o.key(c.p), []byte(o.self), c.rev)
			if isWrongLast(err) {
				// The key may be gone without a delete marker (the bucket's TTL removed the
				// key of a replica dead for that long): then it is free to create.
				// Or its revision moved on unseen (a watch that missed it): the key as it is
				// now starts its lease again here, as if the watch had delivered it.
				e, gerr := o.kv.Get(ctx, o.key(c.p))
				switch {
				case errors.Is(gerr, jetstream.ErrKeyNotFound):
					rev, err = o.kv.Create(ctx, o.key(c.p), []byte(o.self))
				case gerr == nil:
					o.heard(e)
				}
			}
		}
		if err != nil {
			if !errors.Is(err, jetstream.ErrKeyExists) && !isWrongLast(err) {
				o.mu.Lock()
				o.unsure[c.p] = true
				o.mu.Unlock()
			}
			continue // another replica was first, or the server did not answer: next tick
		}
		o.mu.Lock()
		delete(o.unsure, c.p)
		o.mine[c.p] = &held{rev: rev, until: sent.Add(o.lease - o.beat/2)}
		o.keys[c.p] = seenKey{owner: o.self, rev: rev, since: sent}
		o.mu.Unlock()
		o.log.Info("partition taken", "partition", c.p)
		o.gain(c.p)
	}
}

// otherCountLocked is a live replica whose heartbeat says it runs with another count of
// partitions than this one ("" when none).
func (o *owners) otherCountLocked(live []string) string {
	for _, id := range live {
		if n, ok := o.counts[id]; ok && id != o.self && n != o.n {
			return id
		}
	}
	return ""
}

// countOf is replica id's count of partitions, as its heartbeat said.
func (o *owners) countOf(id string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.counts[id]
}

// release is a tenure given up: partition p, held as h.
type release struct {
	p int
	h *held
}

// keyNow is partition p's key as last seen.
func (o *owners) keyNow(p int) seenKey {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.keys[p]
}

// deleteKey deletes the key of partition p, given up: another replica takes it at once.
func (o *owners) deleteKey(ctx context.Context, p int, h *held) {
	o.mu.Lock()
	if o.mine[p] != h {
		o.mu.Unlock()
		return // lost meanwhile (and maybe taken again: a newer tenure, not this one's to end)
	}
	delete(o.mine, p)
	o.mu.Unlock()
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := o.kv.Delete(dctx, o.key(p), jetstream.LastRevision(h.rev)); err != nil && ctx.Err() == nil {
		o.log.Info("partition given up: its key ends with its lease", "partition", p, "err", err)
	}
}

// leave gives every partition up at the end (their queues stopped: see Service.Run): their keys
// are deleted, and the heartbeat, so that other replicas take them at once. A claim or a renewal
// cut short by the stop (Service.Run cancels them) may have been applied: a key this replica
// holds at a revision it did not learn is deleted too, else the next replica would wait a whole
// lease for it.
func (o *owners) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	o.mu.Lock()
	mine, unsure := o.mine, o.unsure
	o.mine, o.unsure = map[int]*held{}, map[int]bool{}
	o.mu.Unlock()
	for p, h := range mine {
		if err := o.kv.Delete(ctx, o.key(p), jetstream.LastRevision(h.rev)); err != nil {
			unsure[p] = true // renewed meanwhile, the answer lost
		}
	}
	for p := range unsure {
		if e, err := o.kv.Get(ctx, o.key(p)); err == nil && string(e.Value()) == o.self {
			_ = o.kv.Delete(ctx, o.key(p), jetstream.LastRevision(e.Revision()))
		}
	}
	_ = o.kv.Delete(ctx, replicaKeyPrefix+o.self)
}

// goneLocked records replica id gone, and keeps the latest maxGone within goneFor.
func (o *owners) goneLocked(id string, g goneReplica) {
	if id == o.self {
		return
	}
	o.gone[id] = g
	for other, og := range o.gone {
		if !o.selfAt.IsZero() && og.at.Before(o.selfAt.Add(-goneFor)) {
			delete(o.gone, other)
		}
	}
	for len(o.gone) > maxGone {
		oldest := ""
		for other, og := range o.gone {
			if oldest == "" || og.at.Before(o.gone[oldest].at) {
				oldest = other
			}
		}
		delete(o.gone, oldest)
	}
}

// replicas lists every replica seen, this one included, and those gone within goneFor, sorted
// by name, each live one with the partitions it holds as last seen.
func (o *owners) replicas() []Replica {
	o.mu.Lock()
	defer o.mu.Unlock()
	cut := o.selfAt.Add(-3 * o.beat)
	held := map[string][]int{}
	for p, h := range o.mine {
		if !h.releasing {
			held[o.self] = append(held[o.self], p)
		}
	}
	for p, k := range o.keys {
		if k.owner != "" && k.owner != o.self {
			held[k.owner] = append(held[k.owner], p)
		}
	}
	out := []Replica{{Name: o.self, Self: true, Live: true, Partitions: held[o.self]}}
	for id, at := range o.seen {
		if id != o.self {
			r := Replica{Name: id, LastSeen: at, Live: !o.selfAt.IsZero() && at.After(cut)}
			if r.Live {
				r.Partitions = held[id]
			}
			out = append(out, r)
		}
	}
	for id, g := range o.gone {
		if o.selfAt.IsZero() || !g.at.Before(o.selfAt.Add(-goneFor)) {
			out = append(out, Replica{Name: id, LastSeen: g.at, Stopped: g.stopped})
		}
	}
	for i := range out {
		slices.Sort(out[i].Partitions)
	}
	slices.SortFunc(out, func(a, b Replica) int { return strings.Compare(a.Name, b.Name) })
	return out
}
