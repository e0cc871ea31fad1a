package admission

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/admitter/admitter/subjects"
	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go/jetstream"
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

// TenantQueue is a tenant's queue as the streams hold it, read now (Service.QueueOf).
type TenantQueue struct {
	// Streams are the streams that hold its jobs, in the order its jobs go: the older streams
	// with some, then its partition's stream, always there.
	Streams []StreamJobs
	// Err says what could not be read (each stream's own error is also in its StreamJobs).
	Err error
}

// StreamJobs is what one stream holds of a tenant's queue.
type StreamJobs struct {
	// Stream is the stream's name as the server knows it (JOBS_4_3: partition 3 of 4), Filter
	// the tenant's subjects in it.
	Stream, Filter string
	// Jobs is how many of the tenant's jobs it holds (those forwarded in the last seconds and
	// not removed yet included).
	Jobs uint64
	// OldestSeq and OldestAt are the first of them (zero when it holds none, or when it could
	// not be read: Err).
	OldestSeq uint64
	OldestAt  time.Time
	Err       error
}

// Jobs is how many jobs wait in every stream of the queue.
func (q TenantQueue) Jobs() uint64 {
	var n uint64
	for _, sj := range q.Streams {
		n += sj.Jobs
	}
	return n
}

// Where names the streams that hold the queue (see wire.QueueStreams).
func (q TenantQueue) Where() wire.QueueStreams {
	out := make(wire.QueueStreams, len(q.Streams))
	for i, sj := range q.Streams {
		out[i] = wire.QueueStream{Stream: sj.Stream, Jobs: sj.Jobs}
	}
	return out
}

// Oldest is the stream whose first job is the queue's head (false: no stream holds a job).
func (q TenantQueue) Oldest() (StreamJobs, bool) {
	for _, sj := range q.Streams {
		if sj.OldestSeq > 0 {
			return sj, true
		}
	}
	return StreamJobs{}, false
}

// QueueOf reads tenant's queue now in every stream that holds it: the older streams with jobs
// of the tenant (the lanes stream of an earlier version, input streams of another
// partitioning), then its partition's stream. It reads the streams, not this replica's last
// listing (Waiting), which counts only the partitions this replica held when it listed: a
// tenant whose partition another replica holds, or one this replica took over a moment ago,
// would count none there.
func (s *Service) QueueOf(ctx context.Context, tenant string) TenantQueue {
	if !s.setUp {
		return TenantQueue{Err: errors.New("admission: the service is not set up (Setup)")}
	}
	type where struct{ stream, filter string }
	var in []where
	if s.legacyLanes.Load() {
		if f, err := s.cfg.Wait.TenantFilter(tenant); err == nil {
			in = append(in, where{s.cfg.StreamWait, f})
		}
	}
	var errs []error
	olds, err := s.oldStreamsNow(ctx)
	if err != nil {
		errs = append(errs, fmt.Errorf("the older input streams: %w", err))
	}
	for _, o := range olds {
		if o.p != subjects.Partition(tenant, o.ps.N) {
			continue // its jobs there were stored in another partition of that partitioning
		}
		if f, err := o.tenantFilter(tenant); err == nil {
			in = append(in, where{o.name, f})
		}
	}
	p := s.in.partOf(tenant)
	f, err := s.in.ps.TenantFilter(p, tenant)
	if err != nil {
		return TenantQueue{Err: err}
	}
	in = append(in, where{s.in.stream(p), f})
	var q TenantQueue
	for i, w := range in {
		sj := s.streamJobs(ctx, w.stream, w.filter)
		if sj.Err != nil {
			errs = append(errs, sj.Err)
		}
		if sj.Jobs > 0 || i == len(in)-1 {
			q.Streams = append(q.Streams, sj)
		}
	}
	q.Err = errors.Join(errs...)
	return q
}

// streamJobs counts the jobs of stream on filter now, and reads the first of them.
func (s *Service) streamJobs(ctx context.Context, stream, filter string) StreamJobs {
	sj := StreamJobs{Stream: stream, Filter: filter}
	st, err := s.streams.get(ctx, stream)
	if err != nil {
		sj.Err = fmt.Errorf("stream %s: %w", stream, err)
		return sj
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		sj.Err = fmt.Errorf("count the jobs of stream %s on %s: %w", stream, filter, err)
		return sj
	}
	for _, n := range info.State.Subjects {
		sj.Jobs += n
	}
	if sj.Jobs == 0 {
		return sj
	}
	msgs, _, err := s.reader.read(ctx, stream, filter, 1, 1, 1)
	if err == nil && len(msgs) > 0 {
		var f fed
		if f, err = fedOf(msgs[0]); err == nil {
			sj.OldestSeq, sj.OldestAt = f.seq, f.stored
		}
	}
	if err != nil {
		sj.Err = fmt.Errorf("the first job of stream %s on %s: %w", stream, filter, err)
	}
	return sj
}
