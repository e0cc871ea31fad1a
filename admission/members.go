package admission

import (
	"context"
	"encoding/json"
	"errors"
	"hash/fnv"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// members knows which replicas are alive and which of them runs each tenant's lane. Every
// replica writes a heartbeat to the replicas bucket (Layout.Replicas) every Heartbeat and
// watches the others'; one not heard from for three heartbeats is gone, and one that stops
// cleanly deletes its key, so the others take its lanes at once. A lane belongs to the live
// replica that ranks highest for its tenant (rendezvous hashing): a replica joining or leaving
// moves only its share of the lanes.
//
// Nothing depends on two replicas never running one lane at the same moment (while a change of
// membership spreads they may, for a heartbeat): every decision is idempotent per job for the
// redeem window, and every forward is deduplicated by its Nats-Msg-Id.
type members struct {
	self      string
	heartbeat time.Duration
	log       *slog.Logger
	kv        jetstream.KeyValue
	changed   func() // called after the live set changed (lanes rebalance)

	mu   sync.RWMutex
	seen map[string]time.Time // replica → when last heard (by its heartbeat's store time)
	live []string             // sorted, self included
}

func newMembers(self string, heartbeat time.Duration, log *slog.Logger) *members {
	return &members{self: self, heartbeat: heartbeat, log: log, seen: map[string]time.Time{}, live: []string{self}}
}

// owns reports whether this replica runs tenant's lane.
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
}

// run keeps this replica's heartbeat and follows the others' until ctx ends; then it removes
// its key, so that the others take its lanes at once.
func (m *members) run(ctx context.Context, kv jetstream.KeyValue) {
	m.kv = kv
	host, _ := os.Hostname()
	value, _ := json.Marshal(heartbeatValue{Host: host, PID: os.Getpid(), Started: time.Now().UTC()})
	beat := func() {
		bctx, cancel := context.WithTimeout(ctx, m.heartbeat)
		defer cancel()
		if _, err := kv.Put(bctx, m.self, value); err != nil && ctx.Err() == nil {
			m.log.Warn("replica heartbeat", "err", err)
		}
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
			m.mu.Lock()
			switch e.Operation() {
			case jetstream.KeyValuePut:
				m.seen[e.Key()] = minTime(time.Now(), e.Created())
			default:
				delete(m.seen, e.Key())
			}
			m.mu.Unlock()
			m.update()
		case <-ticker.C:
			beat()
			m.update()
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// update recomputes the live replicas: this one, and every other heard from within three
// heartbeats.
func (m *members) update() {
	cut := time.Now().Add(-3 * m.heartbeat)
	m.mu.Lock()
	live := []string{m.self}
	for id, at := range m.seen {
		if id != m.self && at.After(cut) {
			live = append(live, id)
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
