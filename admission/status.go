package admission

import (
	"context"
	"fmt"
	"time"
)

// Status is the service's state for operators (the console's overview): where it stands with
// NATS, its tenants' queues and the other replicas.
type Status struct {
	// Replica is this replica's name; Replicas every replica it sees, itself included, sorted,
	// with when each was last heard from (live: within three heartbeats).
	Replica  string
	Replicas []Replica
	// NATS is the connection's state ("CONNECTED", ...), NATSURL the server it is connected to.
	NATS, NATSURL string
	// NATSRTT is the round trip to the server, measured now (zero when it failed).
	NATSRTT time.Duration
	// Queues is how many tenants' queues this replica runs.
	Queues int
	// Waiting is how many jobs wait in every tenant's queue (every replica's), and Polled when
	// the input was last listed (zero: not yet).
	Waiting uint64
	Polled  time.Time
	// OutputBlocked: jobs are held because a stream the admitter publishes to is full (Why).
	OutputBlocked bool
	OutputWhy     string
	// Stuck says what keeps this replica from deciding (see Service.Ready): nil when nothing
	// does.
	Stuck error
	// Err says what could not be read, if anything.
	Err error
}

// A Replica is one replica as this one sees it: live (heard from within three heartbeats),
// silent, or gone (for 10 minutes after it was last heard from, the 32 latest).
type Replica struct {
	Name string
	// LastSeen is its last heartbeat (zero for this replica); for one that stopped, when it
	// deleted its heartbeat.
	LastSeen time.Time
	Self     bool
	Live     bool
	// Stopped: it is gone and said so (a clean stop); gone without (killed, cut off) it is not.
	Stopped bool
	// Partitions are the partitions a live replica holds, as this one last saw their keys,
	// sorted: none, it stands by.
	Partitions []int
}

// Status reads the service's state (the NATS round trip bounded by the connection's own
// timeout; the rest from memory).
func (s *Service) Status(ctx context.Context) Status {
	st := Status{Replica: s.cfg.Replica, Queues: s.queues.count(), Replicas: s.owners.replicas()}
	nc := s.cfg.JetStream.Conn()
	st.NATS, st.NATSURL = nc.Status().String(), nc.ConnectedUrlRedacted()
	if rtt, err := nc.RTT(); err == nil {
		st.NATSRTT = rtt
	}
	st.OutputBlocked, st.OutputWhy = s.pub.blocked()
	st.Stuck = s.stuck(time.Now())
	w, polled := s.queues.waitingNow()
	for _, n := range w {
		st.Waiting += n
	}
	st.Polled = polled
	if polled.IsZero() {
		st.Err = fmt.Errorf("the input has not been listed yet")
	}
	return st
}

// Waiting returns how many jobs wait in each tenant's queue (tenants with none are absent), as
// the last listing of the input's subjects counted them (every DiscoveryInterval).
func (s *Service) Waiting(ctx context.Context) (map[string]uint64, error) {
	w, polled := s.queues.waitingNow()
	if polled.IsZero() {
		return nil, fmt.Errorf("admission: the input has not been listed yet")
	}
	return w, nil
}

// WaitingFor returns how many jobs wait in tenant's queue.
func (s *Service) WaitingFor(ctx context.Context, tenant string) (uint64, error) {
	w, err := s.Waiting(ctx)
	return w[tenant], err
}
