package admission

import (
	"context"
	"encoding/json"
	"errors"
	"hash/fnv"
	"log/slog"
	"math"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// members knows which replicas are alive and which of them runs each tenant's queue. Every
// replica writes a heartbeat to the replicas bucket (Layout.Replicas) every Heartbeat and
// watches the others'; one not heard from for three heartbeats is gone, and one that stops
// cleanly deletes its key, so the others take its queues at once. A queue belongs to the live
// replica that ranks highest for its tenant (rendezvous hashing): a replica joining or leaving
// moves only its share of the queues.
//
// Nothing depends on two replicas never running one queue at the same moment (while a change of
// membership spreads they may, for a heartbeat): every decision is idempotent per job for the
// redeem window, and every forward is deduplicated by its Nats-Msg-Id.
//
// The heartbeat also carries the replica's floor (queues.floor: no job it may still need lies
// below it) and the live set it saw when it computed it. The live replica with the lowest name
// compacts the input below the lowest floor, only when every live replica's last heartbeat saw
// the same live set as it does: a tenant that changes owner is covered by its old owner's floor
// until the new owner's floor covers it (a replica that gains tenants reports 0 until it has
// adopted them).
type members struct {
	self      string
	heartbeat time.Duration
	log       *slog.Logger
	kv        jetstream.KeyValue
	changed   func() // called after the live set changed (queues rebalance)
	// floor is this replica's floor (0: nothing may be removed); compact removes the input's
	// jobs below seq. Both optional.
	floor   func() uint64
	compact func(ctx context.Context, seq uint64) error

	mu sync.RWMutex
	// seen is when each replica was last heard from, and selfAt this replica: each heartbeat's
	// store time, the NATS server's clock. A replica is live when its last heartbeat is at most
	// three heartbeats older than this replica's own last: no two hosts' clocks are compared.
	seen      map[string]time.Time
	selfAt    time.Time
	reports   map[string]heartbeatValue
	live      []string // sorted, self included
	compactAt uint64   // the last compaction's sequence
}

func newMembers(self string, heartbeat time.Duration, log *slog.Logger) *members {
	return &members{self: self, heartbeat: heartbeat, log: log, seen: map[string]time.Time{}, reports: map[string]heartbeatValue{}, live: []string{self}}
}

// liveNow returns the live replicas (a copy).
func (m *members) liveNow() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return slices.Clone(m.live)
}

// owns reports whether this replica runs tenant's queue.
func (m *members) owns(tenant string) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return rank(m.live, tenant) == m.self
}

// rank is the replica of live that ranks highest for tenant.
func rank(live []string, tenant string) string {
	var best string
	var bestScore uint64
	for _, id := range live {
		h := fnv.New64a()
		h.Write([]byte(id))
		h.Write([]byte{0})
		h.Write([]byte(tenant))
		if s := mix(h.Sum64()); best == "" || s > bestScore {
			best, bestScore = id, s
		}
	}
	return best
}

// mix spreads the bits of an FNV-1a hash (splitmix64's finalizer): FNV-1a of names that differ
// in their last bytes ("t01", "t02") differs little in its high bits, and rendezvous hashing
// compares whole values, so without it one replica of two ranked highest for every such tenant.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// count is the number of live replicas, this one included.
func (m *members) count() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.live)
}

// heartbeatValue is what a replica writes under its key: for operators reading the bucket.
type heartbeatValue struct {
	Host    string    `json:"host"`
	PID     int       `json:"pid"`
	Started time.Time `json:"started"`
	// Floor and View: see members.
	Floor uint64   `json:"floor"`
	View  []string `json:"view"`
}

// run keeps this replica's heartbeat and follows the others' until ctx ends; then it removes
// its key, so that the others take its queues at once.
func (m *members) run(ctx context.Context, kv jetstream.KeyValue) {
	m.kv = kv
	host, _ := os.Hostname()
	hb := heartbeatValue{Host: host, PID: os.Getpid(), Started: time.Now().UTC()}
	beat := func() {
		hb.View = m.liveNow() // the view first: the floor then covers every tenant it gives this replica
		hb.Floor = 0
		if m.floor != nil {
			hb.Floor = m.floor()
		}
		value, _ := json.Marshal(hb)
		bctx, cancel := context.WithTimeout(ctx, m.heartbeat)
		defer cancel()
		if _, err := kv.Put(bctx, m.self, value); err != nil && ctx.Err() == nil {
			m.log.Warn("replica heartbeat", "err", err)
			return
		}
		m.mu.Lock()
		m.reports[m.self] = hb
		m.mu.Unlock()
		m.compactBelow(bctx)
	}
	beat()
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := kv.Delete(dctx, m.self); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			m.log.Warn("replica: removing the heartbeat at exit", "err", err)
		}
	}()
	ticker := time.NewTicker(m.heartbeat)
	defer ticker.Stop()
	for ctx.Err() == nil {
		w, err := kv.WatchAll(ctx)
		if err != nil {
			m.log.Warn("replicas: watch", "err", err)
			select {
			case <-ctx.Done():
			case <-ticker.C:
				beat()
			}
			continue
		}
		m.follow(ctx, w, ticker, beat)
		_ = w.Stop()
	}
}

// follow applies the watcher's updates and the heartbeat ticks until ctx ends or the watcher
// closes.
func (m *members) follow(ctx context.Context, w jetstream.KeyWatcher, ticker *time.Ticker, beat func()) {
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil { // the initial values are in
				continue
			}
			m.heard(e)
			m.update()
		case <-ticker.C:
			beat()
			m.update()
		}
	}
}

// heard records a replica's heartbeat (or its key's removal) as the watch delivered it.
func (m *members) heard(e jetstream.KeyValueEntry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch e.Operation() {
	case jetstream.KeyValuePut:
		m.seen[e.Key()] = e.Created()
		if e.Key() == m.self && e.Created().After(m.selfAt) {
			m.selfAt = e.Created()
		}
		var v heartbeatValue
		if json.Unmarshal(e.Value(), &v) == nil {
			m.reports[e.Key()] = v
		} else {
			delete(m.reports, e.Key())
		}
	default:
		delete(m.seen, e.Key())
		delete(m.reports, e.Key())
	}
}

// forgetAfter is how many heartbeats a silent replica is remembered: its key may have ended
// without a delete (the bucket's age limit), and every start brings a new name.
const forgetAfter = 10

// update recomputes the live replicas: this one, and every other heard from within three of
// this one's heartbeats (see seen); it forgets the replicas silent for forgetAfter.
func (m *members) update() {
	m.mu.Lock()
	live := []string{m.self}
	if !m.selfAt.IsZero() { // until this replica hears its own heartbeat, no other is known live
		cut := m.selfAt.Add(-3 * m.heartbeat)
		gone := m.selfAt.Add(-forgetAfter * m.heartbeat)
		for id, at := range m.seen {
			switch {
			case id == m.self:
			case at.After(cut):
				live = append(live, id)
			case at.Before(gone):
				delete(m.seen, id)
				delete(m.reports, id)
			}
		}
	}
	slices.Sort(live)
	changed := !slices.Equal(live, m.live)
	m.live = live
	m.mu.Unlock()
	if changed {
		m.log.Info("replicas", "live", len(live), "self", m.self)
		if m.changed != nil {
			m.changed()
		}
	}
}

// compactBelow removes the input's jobs below the lowest floor of the live replicas, if this
// replica is the live one with the lowest name and every live replica's last report saw the
// same live set (see members).
func (m *members) compactBelow(ctx context.Context) {
	if m.compact == nil {
		return
	}
	m.mu.RLock()
	live := m.live
	floor := uint64(math.MaxUint64)
	agreed := len(live) > 0 && live[0] == m.self
	for _, id := range live {
		r, ok := m.reports[id]
		if !ok || !slices.Equal(r.View, live) {
			agreed = false
			break
		}
		floor = min(floor, r.Floor)
	}
	last := m.compactAt
	m.mu.RUnlock()
	if !agreed || floor <= max(last, 1) || floor == math.MaxUint64 {
		return
	}
	if err := m.compact(ctx, floor); err != nil {
		if ctx.Err() == nil {
			m.log.Warn("removing the settled jobs from the input failed: tried again at the next heartbeat", "below", floor, "err", err)
		}
		return
	}
	m.mu.Lock()
	m.compactAt = max(m.compactAt, floor)
	m.mu.Unlock()
}
