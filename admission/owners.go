package admission

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
// tenants' queues and removes its settled jobs. The rules (tenures, who claims what, when a key
// may be taken over) are tenure.go's; this is their I/O: the bucket's watch, the heartbeats, the
// writes the rules ask for, and the parts (input.go) they start and stop.
//
// A lease is counted on each replica's own monotonic clock, never on another host's. Every
// replica also writes a heartbeat (key replica.<name>) every heartbeat; the replicas heard from
// within three of this one's own heartbeats (the server's store times, compared with each other
// only) are live.
type owners struct {
	self  string
	n     int
	beat  time.Duration
	lease time.Duration
	log   *slog.Logger
	kv    ownersBucket
	// start starts partition p's part; stop stops it and calls stopped once it has (its steps
	// ended, its queues handed over). Both return at once.
	start func(p int)
	stop  func(p int, stopped func())
	// released receives the tenures given up whose part has stopped: their keys are deleted.
	released chan release
	// readyNow wakes the heartbeat loop when the watch's initial values are in.
	readyNow chan struct{}

	mu      sync.Mutex
	keys    map[int]seenKey      // the partitions' keys as last seen
	seen    map[string]time.Time // each replica's last heartbeat, as the server stored it
	counts  map[string]int       // each replica's count of partitions (its heartbeat's value)
	selfAt  time.Time            // this replica's own last heartbeat, as the server stored it
	tenures map[int]tenure       // this replica's tenures (none lost or released)
	lastID  uint64
	ready   bool   // the watch's initial values are in
	other   string // a live replica of another count, as logged ("" when none)
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

// ownersBucket is what owners asks of the owners bucket (a jetstream.KeyValue).
type ownersBucket interface {
	Put(ctx context.Context, key string, value []byte) (uint64, error)
	Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error)
	Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error)
	Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error)
	Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error
	WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error)
}

var _ ownersBucket = jetstream.KeyValue(nil)

// release is a tenure given up whose part has stopped.
type release struct {
	p  int
	id uint64
}

func newOwners(self string, n int, beat time.Duration, log *slog.Logger) *owners {
	return &owners{self: self, n: max(n, 1), beat: beat, lease: 3 * beat, log: log,
		released: make(chan release, max(n, 1)), readyNow: make(chan struct{}, 1),
		keys: map[int]seenKey{}, seen: map[string]time.Time{}, counts: map[string]int{}, tenures: map[int]tenure{},
		gone: map[string]goneReplica{}}
}

const (
	partKeyPrefix    = "part."
	replicaKeyPrefix = "replica."
)

// valid is how long a write of a tenure's key lets it act, from the write's send time.
func (o *owners) valid() time.Duration { return o.lease - o.beat/2 }

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

// holds reports whether this replica acts on partition p now.
func (o *owners) holds(p int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.tenures[p].acts(time.Now())
}

// leased reports whether this replica's lease of partition p runs now, given up or not: what
// it decided may still go (see Service.decideAndApply).
func (o *owners) leased(p int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.tenures[p].leased(time.Now())
}

// ours reports whether partition p is this replica's (claimed, held or unsure: neither given up
// nor lost), whatever its lease's clock says.
func (o *owners) ours(p int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.tenures[p].pursued()
}

// owner is the replica that holds partition p as last seen ("" when none is known).
func (o *owners) owner(p int) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.tenures[p].pursued() {
		return o.self
	}
	k := o.keys[p]
	if k.owner == o.self || time.Since(k.since) >= o.lease {
		return ""
	}
	return k.owner
}

// waits says what this replica waits for to act on the partitions it holds: those whose leases
// lapsed (their renewals unanswered), since when and why; nil when none did.
func (o *owners) waits() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	var errs []error
	for p := range o.n {
		if t := o.tenures[p]; t.state == unsure && t.runs {
			errs = append(errs, fmt.Errorf("partition %d: not read since %s: the owners bucket has not confirmed its lease (%s)", p, t.since.UTC().Format(time.RFC3339), t.why))
		}
	}
	return errors.Join(errs...)
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

// heldNow is the partitions this replica holds (neither given up nor lost), sorted.
func (o *owners) heldNow() []int {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []int
	for p, t := range o.tenures {
		if t.state == held || t.state == unsure {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// run keeps this replica's heartbeat and leases and follows the others' until ctx ends. It does
// not give the partitions up (see leave). The bucket's watch runs beside the heartbeats: a
// watch that cannot be made again (the bucket's stream without a leader) holds no renewal up.
func (o *owners) run(ctx context.Context) {
	var watching sync.WaitGroup
	watching.Go(func() { o.watch(ctx) })
	defer watching.Wait()
	ticker := time.NewTicker(o.beat)
	defer ticker.Stop()
	o.tick(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			o.tick(ctx)
		case <-o.readyNow:
			o.tick(ctx)
		case r := <-o.released:
			o.deleteKey(ctx, r)
		}
	}
}

// watch follows the bucket's keys until ctx ends, making its watch again (after a heartbeat)
// whenever it ends.
func (o *owners) watch(ctx context.Context) {
	for ctx.Err() == nil {
		if w, err := o.kv.WatchAll(ctx); err != nil {
			if ctx.Err() == nil {
				o.log.Warn("partition owners: watch", "err", err)
			}
		} else {
			o.follow(ctx, w)
			_ = w.Stop()
			o.mu.Lock()
			o.ready = false
			o.mu.Unlock()
		}
		t := time.NewTimer(o.beat)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

// follow applies the watch's updates until ctx ends or the watch closes.
func (o *owners) follow(ctx context.Context, w jetstream.KeyWatcher) {
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
				select {
				case o.readyNow <- struct{}{}:
				default:
				}
				continue
			}
			o.heard(e, time.Now())
		}
	}
}

// heard records a key as the watch delivered it, at now.
func (o *owners) heard(e jetstream.KeyValueEntry, now time.Time) {
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
	k := seenKey{rev: e.Revision(), since: now}
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

// tick writes the heartbeat and renews the tenures, each write bounded by a heartbeat of its
// own (one that goes unanswered takes none of the others' time), then moves partitions to reach
// this replica's share.
func (o *owners) tick(ctx context.Context) {
	var writes sync.WaitGroup
	writes.Go(func() {
		hctx, cancel := context.WithTimeout(ctx, o.beat)
		defer cancel()
		if _, err := o.kv.Put(hctx, replicaKeyPrefix+o.self, []byte(strconv.Itoa(o.n))); err != nil && ctx.Err() == nil {
			o.log.Warn("replica heartbeat", "err", err)
		}
	})
	writes.Go(func() { o.renewAll(ctx) })
	writes.Wait()
	o.lapse(time.Now())
	o.balance(ctx, time.Now())
}

// renewAll renews every tenure held, unsure or being given up, side by side.
func (o *owners) renewAll(ctx context.Context) {
	o.mu.Lock()
	renewing := make(map[int]tenure, len(o.tenures))
	for p, t := range o.tenures {
		if t.state == held || t.state == unsure || t.state == releasing {
			renewing[p] = t
		}
	}
	o.mu.Unlock()
	var writes sync.WaitGroup
	for p, t := range renewing {
		writes.Go(func() { o.renew(ctx, p, t) })
	}
	writes.Wait()
}

// renew writes partition p's key for tenure t: on its revision when held (or being given up);
// when unsure, or refused for its revision, on the revision the key has if it still names this
// replica (an earlier write was applied and its answer lost: only this replica writes its name,
// and a take-over would have replaced it).
func (o *owners) renew(ctx context.Context, p int, t tenure) {
	rctx, cancel := context.WithTimeout(ctx, o.beat)
	defer cancel()
	sent := time.Now()
	var rev uint64
	var err error
	if t.state != unsure {
		rev, err = o.kv.Update(rctx, o.key(p), []byte(o.self), t.rev)
	}
	if t.state == unsure || isWrongLast(err) {
		var e jetstream.KeyValueEntry
		switch e, err = o.kv.Get(rctx, o.key(p)); {
		case err == nil && e.Operation() == jetstream.KeyValuePut && string(e.Value()) == o.self:
			sent = time.Now()
			rev, err = o.kv.Update(rctx, o.key(p), []byte(o.self), e.Revision())
		case err == nil:
			err = fmt.Errorf("the key names %q", string(e.Value()))
			o.wrote(p, t.id, refused, 0, sent, "another replica holds it: this one's lease had ended (it was paused or cut off): "+err.Error())
			return
		case errors.Is(err, jetstream.ErrKeyNotFound):
			o.wrote(p, t.id, refused, 0, sent, "its key is gone")
			return
		}
	}
	switch {
	case err == nil:
		o.wrote(p, t.id, applied, rev, sent, "")
	case errors.Is(err, jetstream.ErrKeyExists) || isWrongLast(err):
		o.wrote(p, t.id, refused, 0, sent, "another replica holds it: this one's lease had ended (it was paused or cut off)")
	default:
		o.wrote(p, t.id, unanswered, 0, sent, err.Error())
	}
}

// wrote applies what a write of partition p's key for tenure id came to (see tenure.wrote),
// and its effect.
func (o *owners) wrote(p int, id uint64, out outcome, rev uint64, sent time.Time, why string) {
	o.mu.Lock()
	t := o.tenures[p]
	if t.id != id || t.state == 0 {
		o.mu.Unlock()
		return // ended meanwhile
	}
	was := t.state
	t, eff := t.wrote(out, rev, sent, o.valid(), why)
	o.setLocked(p, t)
	if out == applied {
		o.keys[p] = seenKey{owner: o.self, rev: rev, since: sent}
	}
	o.mu.Unlock()
	switch {
	case t.state == lost && was != claiming:
		o.log.Warn("partition lost", "partition", p, "why", why)
	case was == claiming && t.state == held:
		o.log.Info("partition taken", "partition", p)
	case was == unsure && t.state == held && eff == noEffect:
		o.log.Info("partition read again: the owners bucket confirmed its lease", "partition", p)
	case was == unsure && t.state == held:
		o.log.Info("partition taken (its claim's answer had been lost)", "partition", p)
	}
	o.apply(p, t, eff)
}

// setLocked records partition p's tenure t (a lost one is forgotten).
func (o *owners) setLocked(p int, t tenure) {
	if t.state == lost {
		delete(o.tenures, p)
		return
	}
	o.tenures[p] = t
}

// apply carries a transition's effect out on partition p, whose tenure is now t.
func (o *owners) apply(p int, t tenure, eff effect) {
	switch eff {
	case startPart:
		o.start(p)
	case stopPart:
		r := release{p: p, id: t.id}
		var stopped func()
		if t.state == releasing {
			stopped = func() {
				select {
				case o.released <- r:
				default: // the loop has ended: leave deletes the key
				}
			}
		}
		o.stop(p, stopped)
	case deleteKey:
		select {
		case o.released <- release{p: p, id: t.id}:
		default:
		}
	}
}

// lapse makes the held tenures whose validity passed at now unsure: they stop acting until a
// renewal is applied.
func (o *owners) lapse(now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for p, t := range o.tenures {
		if u := t.at(now); u.state != t.state {
			o.tenures[p] = u
			o.log.Warn("partition paused: its lease ended before a renewal was answered; it is read again once the owners bucket confirms it (or another replica has it)", "partition", p, "why", u.why)
		}
	}
}

// isWrongLast reports whether err is a compare-and-set that found another revision.
func isWrongLast(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// balance claims free partitions up to this replica's share, and gives up those above it (see
// balance in tenure.go), at now.
func (o *owners) balance(ctx context.Context, now time.Time) {
	o.mu.Lock()
	if !o.ready || o.selfAt.IsZero() {
		o.mu.Unlock()
		return
	}
	v := view{self: o.self, n: o.n, lease: o.lease, live: o.liveLocked(), count: o.counts, keys: o.keys, mine: o.tenures}
	m := balance(v, now)
	logOther := m.other != "" && m.other != o.other
	o.other = m.other
	type move struct {
		p   int
		t   tenure
		eff effect
	}
	var gone []move
	for _, p := range m.giveUp {
		t, eff := o.tenures[p].giveUp()
		o.tenures[p] = t
		gone = append(gone, move{p, t, eff})
	}
	ids := make([]uint64, len(m.claims))
	for i, c := range m.claims {
		o.lastID++
		ids[i] = o.lastID
		o.tenures[c.p] = claimed(o.lastID)
	}
	live := len(v.live)
	o.mu.Unlock()
	if logOther {
		// Replicas of two counts would both read the streams of the other count's tenants: this
		// one takes nothing until the others have stopped (it keeps what it holds).
		o.log.Error("another live replica runs with another ADMITTER_PARTITIONS: no partition is taken until every replica runs the same count (stop the others, docs/upgrading.md)",
			"replica", m.other, "its_partitions", o.countOf(m.other), "partitions", o.n)
	}
	for _, g := range gone {
		o.log.Info("giving a partition up to another replica", "partition", g.p, "live", live)
		o.apply(g.p, g.t, g.eff)
	}
	var claims sync.WaitGroup
	for i, c := range m.claims {
		claims.Go(func() { o.claim(ctx, c, ids[i]) })
	}
	claims.Wait()
}

// claim writes partition c.p's key for the tenure id: a create, or an update on the revision
// seen unchanged for a lease.
func (o *owners) claim(ctx context.Context, c claim, id uint64) {
	cctx, cancel := context.WithTimeout(ctx, o.beat)
	defer cancel()
	sent := time.Now()
	var rev uint64
	var err error
	if c.rev == 0 {
		rev, err = o.kv.Create(cctx, o.key(c.p), []byte(o.self))
	} else {
		rev, err = o.kv.Update(cctx, o.key(c.p), []byte(o.self), c.rev)
		if isWrongLast(err) {
			// The key may be gone without a delete marker (the bucket's TTL removed the key of
			// a replica dead for that long): then it is free to create. Or its revision moved on
			// unseen (a watch that missed it): the key as it is now starts its lease again here,
			// as if the watch had delivered it.
			e, gerr := o.kv.Get(cctx, o.key(c.p))
			switch {
			case errors.Is(gerr, jetstream.ErrKeyNotFound):
				sent = time.Now()
				rev, err = o.kv.Create(cctx, o.key(c.p), []byte(o.self))
			case gerr == nil:
				o.heard(e, time.Now())
			}
		}
	}
	switch {
	case err == nil:
		o.wrote(c.p, id, applied, rev, sent, "")
	case errors.Is(err, jetstream.ErrKeyExists) || isWrongLast(err):
		o.wrote(c.p, id, refused, 0, sent, "") // another replica was first
	default:
		o.wrote(c.p, id, unanswered, 0, sent, err.Error()) // it may have been applied: asked about at the next heartbeat
	}
}

// countOf is replica id's count of partitions, as its heartbeat said.
func (o *owners) countOf(id string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.counts[id]
}

// deleteKey deletes the key of the tenure r given up, once its part has stopped: another
// replica takes the partition at once. A tenure lost meanwhile (or a newer one of the same
// partition) is not this one's to end.
func (o *owners) deleteKey(ctx context.Context, r release) {
	o.mu.Lock()
	t := o.tenures[r.p]
	if t.id != r.id || t.state != releasing {
		o.mu.Unlock()
		return
	}
	delete(o.tenures, r.p)
	o.mu.Unlock()
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := o.kv.Delete(dctx, o.key(r.p), jetstream.LastRevision(t.rev)); err != nil && ctx.Err() == nil {
		o.log.Info("partition given up: its key ends with its lease", "partition", r.p, "err", err)
	}
}

// leave gives every partition up at the end (their parts stopped: see Service.Run), within ctx
// and 2 s: their keys are deleted, and the heartbeat, so that other replicas take them at once. A claim or a renewal
// cut short by the stop (Service.Run cancels them) may have been applied: a key this replica
// holds at a revision it did not learn is deleted too, else the next replica would wait a whole
// lease for it.
func (o *owners) leave(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	o.mu.Lock()
	tenures := o.tenures
	o.tenures = map[int]tenure{}
	o.mu.Unlock()
	for p, t := range tenures {
		if t.rev != 0 && t.state != unsure {
			if err := o.kv.Delete(ctx, o.key(p), jetstream.LastRevision(t.rev)); err == nil {
				continue
			} // renewed meanwhile, the answer lost: asked below
		}
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
	holding := map[string][]int{}
	for p, t := range o.tenures {
		if t.state == held || t.state == unsure {
			holding[o.self] = append(holding[o.self], p)
		}
	}
	for p, k := range o.keys {
		if k.owner != "" && k.owner != o.self {
			holding[k.owner] = append(holding[k.owner], p)
		}
	}
	out := []Replica{{Name: o.self, Self: true, Live: true, Partitions: holding[o.self]}}
	for id, at := range o.seen {
		if id != o.self {
			r := Replica{Name: id, LastSeen: at, Live: !o.selfAt.IsZero() && at.After(cut)}
			if r.Live {
				r.Partitions = holding[id]
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
