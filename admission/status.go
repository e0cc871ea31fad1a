package admission

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Status is the service's state for operators (the console's overview): where it stands with
// NATS, its consumer, its lanes and the other replicas.
type Status struct {
	// Replica is this replica's name; Replicas every replica it sees, itself included, sorted,
	// with when each was last heard from (live: within three heartbeats).
	Replica  string
	Replicas []Replica
	// NATS is the connection's state ("CONNECTED", ...), NATSURL the server it is connected to.
	NATS, NATSURL string
	// NATSRTT is the round trip to the server, measured now (zero when it failed).
	NATSRTT time.Duration
	// Lanes is how many tenants' lanes this replica runs.
	Lanes int
	// Waiting is how many jobs wait in every tenant's lane (the lanes stream's messages).
	Waiting uint64
	// Pending is the input's jobs not yet delivered to any replica; AckPending those being
	// decided or forwarded; Redelivered those delivered more than once and not yet settled.
	Pending, AckPending, Redelivered uint64
	// OutputBlocked: jobs are held because a stream the admitter publishes to is full (Why).
	OutputBlocked bool
	OutputWhy     string
	// Err says what could not be read (the consumer's or the stream's info), if anything.
	Err error
}

// A Replica is one replica as this one sees it.
type Replica struct {
	Name     string
	LastSeen time.Time // zero for this replica
	Self     bool
	Live     bool
}

// Status reads the service's state, asking the server for the consumer's and the lanes
// stream's info (bounded by 2s).
func (s *Service) Status(ctx context.Context) Status {
	st := Status{Replica: s.cfg.Replica, Lanes: s.lanes.count(), Replicas: s.members.replicas()}
	nc := s.cfg.JetStream.Conn()
	st.NATS, st.NATSURL = nc.Status().String(), nc.ConnectedUrlRedacted()
	if rtt, err := nc.RTT(); err == nil {
		st.NATSRTT = rtt
	}
	st.OutputBlocked, st.OutputWhy = s.pub.blocked()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if s.cons == nil {
		st.Err = fmt.Errorf("not set up yet")
		return st
	}
	if info, err := s.cons.Info(ctx); err != nil {
		st.Err = fmt.Errorf("consumer %s: %w", s.cfg.Consumer, err)
	} else {
		st.Pending, st.AckPending, st.Redelivered = info.NumPending, uint64(info.NumAckPending), uint64(info.NumRedelivered)
	}
	if ws, err := s.cfg.JetStream.Stream(ctx, s.cfg.StreamWait); err != nil {
		st.Err = fmt.Errorf("stream %s: %w", s.cfg.StreamWait, err)
	} else {
		st.Waiting = ws.CachedInfo().State.Msgs
	}
	return st
}

// Waiting returns how many jobs wait in each tenant's lane (tenants with none are absent), read
// from the lanes stream's subjects (bounded by 5s). The map holds one entry per lane with jobs.
func (s *Service) Waiting(ctx context.Context) (map[string]uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := s.cfg.JetStream.Stream(ctx, s.cfg.StreamWait)
	if err != nil {
		return nil, fmt.Errorf("admission: stream %s: %w", s.cfg.StreamWait, err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(s.cfg.Wait.Filter()))
	if err != nil {
		return nil, fmt.Errorf("admission: lanes of stream %s: %w", s.cfg.StreamWait, err)
	}
	out := make(map[string]uint64, len(info.State.Subjects))
	for subj, n := range info.State.Subjects {
		if tenant, ok := s.cfg.Wait.Match(subj); ok && n > 0 {
			out[tenant] += n
		}
	}
	return out, nil
}

// WaitingFor returns how many jobs wait in tenant's lane (bounded by 2s).
func (s *Service) WaitingFor(ctx context.Context, tenant string) (uint64, error) {
	subject, err := s.cfg.Wait.Subject(tenant)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := s.cfg.JetStream.Stream(ctx, s.cfg.StreamWait)
	if err != nil {
		return 0, fmt.Errorf("admission: stream %s: %w", s.cfg.StreamWait, err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return 0, fmt.Errorf("admission: lane of %s: %w", tenant, err)
	}
	return info.State.Subjects[subject], nil
}

// replicas lists every replica seen, this one included, sorted by name.
func (m *members) replicas() []Replica {
	cut := time.Now().Add(-3 * m.heartbeat)
	m.mu.RLock()
	out := []Replica{{Name: m.self, Self: true, Live: true}}
	for id, at := range m.seen {
		if id != m.self {
			out = append(out, Replica{Name: id, LastSeen: at, Live: at.After(cut)})
		}
	}
	m.mu.RUnlock()
	slices.SortFunc(out, func(a, b Replica) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}
