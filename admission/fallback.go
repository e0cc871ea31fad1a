package admission

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/nats-io/nats.go"
)

// router is the bucket.Router of fail mode local over NATS (see Config.Fallback): a tenant's
// questions go to the replica that holds its partition (owners.owner), a pool's to the live
// replica that ranks highest for the pool's key (rendezvous hashing), each on its own subject.
type router struct {
	s      *Service
	prefix string    // _ADMITTER.<consumer>.fallback.
	born   time.Time // the router's start: since when this replica decides the pools it ranks first
	mu     sync.Mutex
	// since is when the router first saw each stretch of this replica's (see Since).
	since map[stretch]time.Time
	// relay answers relayed questions while this replica reaches Redis (see Tell): set by serve;
	// relaying is its subscription while it does.
	relay    nats.MsgHandler
	relaying *nats.Subscription
	local    bool
}

var _ bucket.Router = (*router)(nil)

func newRouter(s *Service) *router {
	return &router{s: s, prefix: "_ADMITTER." + s.cfg.Consumer + ".fallback.", born: time.Now(), since: map[stretch]time.Time{}}
}

// decider is the live replica that decides for key: this one for a tenant whose partition no
// other replica is known to hold.
func (r *router) decider(key string) string {
	if t, ok := strings.CutPrefix(key, "tenant:"); ok {
		if o := r.s.owners.owner(r.s.in.partOf(t)); o != "" {
			return o
		}
		return r.s.cfg.Replica
	}
	return rank(r.s.owners.liveNow(), key)
}

// rank is the replica of live that ranks highest for key (rendezvous hashing).
func rank(live []string, key string) string {
	var best string
	var bestScore uint64
	for _, id := range live {
		h := fnv.New64a()
		h.Write([]byte(id))
		h.Write([]byte{0})
		h.Write([]byte(key))
		if s := mix(h.Sum64()); best == "" || s > bestScore {
			best, bestScore = id, s
		}
	}
	return best
}

// Since is since when this replica decides for key (zero: another does). A tenant's: its
// partition's tenure here, one take of it by the owners (a partition given up and taken again is
// a new tenure), or, while no replica is known to hold it, that time; each as the router first
// saw it, which is no earlier than it began. A pool's: since the router began (no copy of a pool
// is ever trusted: it only needs to be said whose it is).
func (r *router) Since(key string) time.Time {
	t, ok := strings.CutPrefix(key, "tenant:")
	if !ok {
		if r.decider(key) == r.s.cfg.Replica {
			return r.born
		}
		return time.Time{}
	}
	tn, ok := r.stretch(r.s.in.partOf(t))
	if !ok {
		return time.Time{}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	since, seen := r.since[tn]
	if !seen {
		since = time.Now()
		for k := range r.since {
			if now, ok := r.stretch(k.p); !ok || now != k {
				delete(r.since, k) // ended
			}
		}
		r.since[tn] = since
	}
	return since
}

// stretch is one stretch of time during which this replica decides partition p's tenants: one
// tenure of p by its owners (id: a partition given up and taken again is a new one), or, with
// id 0, while no replica is known to hold p.
type stretch struct {
	p  int
	id uint64
}

// stretch is this replica's stretch of partition p now; false when another replica holds p.
func (r *router) stretch(p int) (stretch, bool) {
	o := r.s.owners
	o.mu.Lock()
	t := o.tenures[p]
	o.mu.Unlock()
	if t.state == held || t.state == unsure {
		return stretch{p, t.id}, true
	}
	return stretch{p: p}, o.owner(p) == ""
}

// Ask sends req to the replica that decides for key.
func (r *router) Ask(ctx context.Context, key string, req []byte) ([]byte, error) {
	m, err := r.s.cfg.JetStream.Conn().RequestWithContext(ctx, r.prefix+r.decider(key), req)
	if err != nil {
		return nil, fmt.Errorf("admission: ask the replica deciding %s: %w", key, err)
	}
	return m.Data, nil
}

// Back tells every replica that Redis answers again: each probes it at once.
func (r *router) Back() {
	_ = r.s.cfg.JetStream.Conn().Publish(r.prefix+"back", nil)
}

// Tell subscribes this replica to the relayed questions while it reaches Redis (local false),
// in one queue group with every replica that does, and unsubscribes it while it does not: a
// relayed question goes to one replica that reaches Redis, and finds no responder when none does.
func (r *router) Tell(local bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.local = local
	r.subscribeRelay()
}

// subscribeRelay makes the relay subscription agree with the mode told, under r.mu.
func (r *router) subscribeRelay() {
	switch {
	case r.local && r.relaying != nil:
		_ = r.relaying.Unsubscribe()
		r.relaying = nil
	case !r.local && r.relaying == nil && r.relay != nil:
		sub, err := r.s.cfg.JetStream.Conn().QueueSubscribe(r.prefix+"relay", "relay", r.relay)
		if err != nil {
			r.s.log.Warn("fail mode local: this replica cannot take relayed questions; a replica cut from Redis decides on its copy", "err", err)
			return
		}
		r.relaying = sub
	}
}

// Relay sends req to a replica that reaches Redis (see Tell).
func (r *router) Relay(ctx context.Context, req []byte) ([]byte, error) {
	m, err := r.s.cfg.JetStream.Conn().RequestWithContext(ctx, r.prefix+"relay", req)
	if err != nil {
		return nil, fmt.Errorf("admission: relay to a replica that reaches Redis: %w", err)
	}
	return m.Data, nil
}

// routeTimeout bounds the answer to a routed question (the asker gives up sooner).
const routeTimeout = time.Second

// serve answers the questions other replicas route to this one, and probes Redis when another
// found it again, until the subscriptions end (unsubscribe).
func (r *router) serve(ctx context.Context, f Fallback) (unsubscribe func(), err error) {
	nc := r.s.cfg.JetStream.Conn()
	asked, err := nc.Subscribe(r.prefix+r.s.cfg.Replica, func(m *nats.Msg) {
		qctx, cancel := context.WithTimeout(ctx, routeTimeout)
		defer cancel()
		_ = m.Respond(f.Serve(qctx, m.Data))
	})
	if err != nil {
		return nil, err
	}
	back, err := nc.Subscribe(r.prefix+"back", func(*nats.Msg) { f.Probe() })
	if err != nil {
		_ = asked.Unsubscribe()
		return nil, err
	}
	r.mu.Lock()
	r.relay = func(m *nats.Msg) {
		qctx, cancel := context.WithTimeout(ctx, routeTimeout)
		defer cancel()
		_ = m.Respond(f.Serve(qctx, m.Data))
	}
	r.subscribeRelay()
	r.mu.Unlock()
	return func() {
		_ = asked.Unsubscribe()
		_ = back.Unsubscribe()
		r.mu.Lock()
		if r.relaying != nil {
			_ = r.relaying.Unsubscribe()
		}
		r.relay, r.relaying = nil, nil
		r.mu.Unlock()
	}, nil
}
