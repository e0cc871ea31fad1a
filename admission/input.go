package admission

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/admitter/admitter/subjects"
	"github.com/admitter/admitter/wire"
	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go/jetstream"
)

// input is the input's layout: Config.Partitions streams (one: the input stream as configured;
// N: <in>_<N>_<p>, see wire.InputStream), each holding the jobs of its tenants (see
// subjects.Partitions), read whole by the replica that holds it (owners.go).
type input struct {
	ps subjects.Partitions
	in string // the configured input stream's name
}

func (in input) n() int { return max(in.ps.N, 1) }

// stream is partition p's stream.
func (in input) stream(p int) string { return wire.InputStream(in.in, in.n(), p) }

// partOf is tenant's partition.
func (in input) partOf(tenant string) int { return subjects.Partition(tenant, in.n()) }

// published is the subject a job of partition p stored on stored was published on, and its
// tenant (ok false for a subject that is not a job's).
func (in input) published(p int, stored string) (subject, tenant string, ok bool) {
	return in.ps.Published(p, stored)
}

// jobID is the id of the job at seq of partition p's stream (see wire.JobID).
func (in input) jobID(p int, seq uint64) int64 { return wire.JobID(in.n(), p, seq) }

// part is a partition this replica holds: its feed (an ordered consumer from the stream's
// first job: the server streams each job once, at a few µs per job), how far it has delivered,
// and what of it was removed. Guarded by queues.mu but for health.
type part struct {
	index  int
	stream string
	// feedOn: its feed runs (an input stream an earlier version made as a work queue takes
	// none: its tenants are found by listing it); pos: the next sequence it delivers (every job
	// below was handed to its queue, or skipped for a queue behind); first: its first sequence
	// as last seen; compactAt: the last compaction's sequence.
	feedOn    bool
	pos       uint64
	first     uint64
	compactAt uint64
	// horizon is the stream's last sequence when this replica took the partition: a job at or
	// below it may have been forwarded by the partition's earlier holder (see policy.Job.Again).
	horizon uint64
	stop    func() // stops the feed (nil: none)
	health  feedHealth
}

// startPart starts reading partition p, just taken: its feed hands each job to its tenant's
// queue; a poll follows at once (the tenants with jobs in older streams, the jobs waiting).
func (s *Service) startPart(ctx context.Context, p int) {
	pt := &part{index: p, stream: s.in.stream(p)}
	qs := s.queues
	qs.mu.Lock()
	leaving := qs.leaving[p]
	qs.mu.Unlock()
	if leaving != nil {
		<-leaving // bounded: ShutdownTimeout and the hand-over's 2 s
	}
	qs.mu.Lock()
	if qs.closed || !s.owners.tenure(p) || qs.parts[p] != nil {
		// Lost while the hand-over of its last tenure ran: its stop found nothing to stop, and
		// started now it would run unheld (its queues told at each step that it is not theirs).
		qs.mu.Unlock()
		return
	}
	pt.horizon = math.MaxUint64 // until the stream says
	qs.parts[p] = pt
	qs.mu.Unlock()
	if st, err := s.streams.get(ctx, pt.stream); err == nil {
		if info, err := st.Info(ctx); err == nil {
			qs.mu.Lock()
			pt.horizon = info.State.LastSeq
			qs.mu.Unlock()
		}
	}
	// The tenants with jobs in older streams first: their queues forward those before the
	// feed hands any of their newer jobs over.
	// Tried a few times (a partition often moves during the same NATS trouble that fails the
	// listing): a tenant found only by a later listing would have its newer jobs go first.
	b := backoff.WithContext(backoff.NewExponentialBackOff(backoff.WithInitialInterval(100*time.Millisecond),
		backoff.WithMaxElapsedTime(2*time.Second)), ctx)
	if err := backoff.Retry(func() error { return qs.refreshOld(ctx) }, b); err != nil {
		s.log.Warn("listing the older streams' tenants failed: their jobs are found by the next listing, and their newer jobs may go first", "partition", p, "err", err)
	}
	if err := s.startFeed(ctx, pt); err != nil {
		s.log.Warn("the partition's feed could not start: its tenants are found by listing it and read by subject meanwhile", "partition", p, "stream", pt.stream, "err", err)
		pt.health.failed(err)
	}
	select {
	case qs.pollNow <- struct{}{}:
	default:
	}
}

// stopPart stops reading partition p: its feed ends, its queues leave (one whose step runs
// leaves when the step ends), and once no step of it runs their hold is given up in the
// limiter (so that their next owner goes at once); then done, if not nil. It returns at once.
func (s *Service) stopPart(p int, done func()) {
	qs := s.queues
	qs.mu.Lock()
	pt := qs.parts[p]
	var floor, compacted uint64 // what of the partition is settled: removed before the next holder reads it
	if pt != nil {
		floor, compacted = qs.floorLocked(pt), pt.compactAt
	}
	delete(qs.parts, p)
	var moved []*queue
	left := make(chan struct{})
	prev := qs.leaving[p]
	qs.leaving[p] = left
	for _, q := range qs.byName {
		if q.part != p {
			continue
		}
		q.gone = true
		switch q.where {
		case running:
			moved = append(moved, q) // its step's end drops it (or keeps it, if the partition is back: done)
			continue
		case scheduled:
			heap.Remove(&qs.due, q.index)
		case ready:
			qs.ring = slices.DeleteFunc(qs.ring, func(r *queue) bool { return r == q })
			qs.fresh = slices.DeleteFunc(qs.fresh, func(r *queue) bool { return r == q })
		}
		q.where = idle
		qs.dropLocked(q)
		moved = append(moved, q)
	}
	qs.mu.Unlock()
	if pt != nil && pt.stop != nil {
		pt.stop()
	}
	s.moves.Go(func() {
		if prev != nil {
			<-prev
		}
		s.quiesce(p)
		if pt != nil && floor > max(compacted, 1) {
			// The jobs settled since the last compaction would be read again by the next
			// holder (and forwarded again, into the duplicate window, charged again).
			s.compactTo(pt.stream, floor)
		}
		// Those whose step ran are handed over once it ended (what it stored late is owed),
		// unless the partition came back meanwhile and kept them.
		qs.mu.Lock()
		moved = slices.DeleteFunc(moved, func(q *queue) bool { return !q.gone || q.where == running })
		qs.mu.Unlock()
		s.handOver(moved)
		qs.mu.Lock()
		if qs.leaving[p] == left {
			delete(qs.leaving, p)
		}
		qs.mu.Unlock()
		close(left)
		if done != nil {
			done()
		}
	})
}

// stopFeeds stops the feeds of every partition held (the service stops).
func (qs *queues) stopFeeds() {
	qs.mu.Lock()
	var stops []func()
	for _, pt := range qs.parts {
		if pt.stop != nil {
			stops = append(stops, pt.stop)
			pt.stop = nil
		}
	}
	qs.mu.Unlock()
	for _, stop := range stops {
		stop()
	}
}

// quiesce waits until no step of partition p's queues runs, ShutdownTimeout at most.
func (s *Service) quiesce(p int) {
	deadline := time.Now().Add(s.cfg.ShutdownTimeout)
	for time.Now().Before(deadline) {
		qs := s.queues
		qs.mu.Lock()
		busy := false
		for _, q := range qs.byName {
			if q.part == p && q.gone && q.where == running {
				busy = true
				break
			}
		}
		qs.mu.Unlock()
		if !busy {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startFeed follows what partition pt's stream stores, from its first job (see part).
func (s *Service) startFeed(ctx context.Context, pt *part) error {
	st, err := s.streams.get(ctx, pt.stream)
	if err != nil {
		return fmt.Errorf("stream %s: %w", pt.stream, err)
	}
	if st.CachedInfo().Config.Retention == jetstream.WorkQueuePolicy {
		// A work queue (made by an earlier version) takes no consumer without acknowledgements.
		s.log.Warn("the input stream is a work queue, made by an earlier admitter: tenants with new jobs are found only by listing it every ADMITTER_DISCOVERY_INTERVAL, and every job is read by subject; recreate it with limits retention once it is empty (see docs/upgrading.md)",
			"stream", pt.stream, "interval", s.cfg.DiscoveryInterval.String())
		return nil
	}
	cons, err := s.cfg.JetStream.OrderedConsumer(ctx, pt.stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{s.in.ps.Filter(pt.index)},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return fmt.Errorf("the feed of %s: %w", pt.stream, err)
	}
	qs := s.queues
	cc, err := cons.Consume(func(m jetstream.Msg) {
		subject, tenant, ok := s.in.published(pt.index, m.Subject())
		md, err := m.Metadata()
		if !ok || err != nil {
			return
		}
		data := m.Data()
		pt.health.delivered()
		qs.feed(pt, tenant, fed{seq: md.Sequence.Stream, subject: subject, header: m.Headers(), data: data,
			stored: md.Timestamp, size: len(data) + len(subject) + 64, live: md.NumPending <= livePending})
	}, jetstream.PullMaxBytes(feedPullBytes), jetstream.PullExpiry(pullExpiry), jetstream.PullHeartbeat(pullHeartbeat),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if pt.health.failed(err) {
				s.log.Warn("the input's feed failed: its tenants with jobs are found by listing the input and read by subject until it recovers; /readyz says so", "stream", pt.stream, "err", err)
			}
		}))
	if err != nil {
		return fmt.Errorf("the feed of %s: %w", pt.stream, err)
	}
	qs.mu.Lock()
	if qs.parts[pt.index] == pt {
		pt.feedOn, pt.stop = true, cc.Stop
		qs.mu.Unlock()
		return nil
	}
	qs.mu.Unlock()
	cc.Stop() // given up meanwhile
	return nil
}

// feedHealth is what a feed's deliveries say of it. A feed that delivers nothing while its
// stream holds jobs it has not delivered, for feedGrace, is broken (a pull refused, a consumer
// that cannot be made again, a node lost): the service is not ready while it lasts, and the
// discovery gives a queue, behind, to every tenant with jobs meanwhile (see queues.poll), so that
// nothing waits for the feed. Its errors are logged once per failure, at warn. (The ordered
// consumer's own state is not asked: it is locked while it makes its consumer again.)
type feedHealth struct {
	last atomic.Int64 // unix ns of the latest delivery
	mu   sync.Mutex
	err  error // the latest error reported, for the message
	// stuck: since when the stream has held jobs the feed has not delivered, while it delivered
	// nothing (zero: it has not)
	stuck time.Time
	// logged: the current failure was logged
	logged bool
}

// feedGrace is how long a feed may deliver nothing while jobs wait for it before the service says
// it is broken: a NATS node lost makes the feed miss two heartbeats (4 s) and start again.
const feedGrace = 5 * time.Second

func (f *feedHealth) delivered() { f.last.Store(time.Now().UnixNano()) }

// deliveredSince reports whether the feed delivered a job after t.
func (f *feedHealth) deliveredSince(t time.Time) bool { return f.last.Load() > t.UnixNano() }

// failed records an error the feed reported; it reports whether to log it (once per failure).
func (f *feedHealth) failed(err error) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
	first := !f.logged
	f.logged = true
	return first
}

// listed records what a listing of the stream found at now: last, its last sequence (0: nothing
// left to deliver), and next, the sequence the feed will deliver next (0 before its first).
func (f *feedHealth) listed(now time.Time, last, next uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case last == 0 || last < next || f.last.Load() > now.Add(-feedGrace).UnixNano():
		f.stuck, f.logged, f.err = time.Time{}, false, nil // delivered everything, or lately
	case f.stuck.IsZero():
		f.stuck = now
	}
}

// broken is the feed's failure when it has delivered nothing for feedGrace while jobs waited
// for it.
func (f *feedHealth) broken(now time.Time, stream string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stuck.IsZero() || now.Sub(f.stuck) < feedGrace {
		return nil
	}
	why := "it delivers nothing while the input holds jobs"
	if f.err != nil {
		why = f.err.Error()
	}
	return fmt.Errorf("the feed of %s has delivered nothing since %s: %s", stream, f.stuck.UTC().Format(time.RFC3339), why)
}

// feedBroken is the first broken feed's failure among the partitions held.
func (s *Service) feedBroken(now time.Time) error {
	qs := s.queues
	qs.mu.Lock()
	parts := make([]*part, 0, len(qs.parts))
	for _, pt := range qs.parts {
		parts = append(parts, pt)
	}
	qs.mu.Unlock()
	var errs []error
	for _, pt := range parts {
		if err := pt.health.broken(now, pt.stream); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// feedPullBytes is how many bytes of jobs a feed asks the server for at a time: the jobs on
// their way to this replica are bounded in bytes, whatever their size.
const feedPullBytes = 4 << 20

// A pull of a feed lasts pullExpiry and asks the server for a heartbeat every pullHeartbeat
// while it waits; two heartbeats missed and the client pulls again: a pull lost with a NATS
// node (paused, killed) is replaced within 2 × pullHeartbeat.
const (
	pullExpiry    = 10 * time.Second
	pullHeartbeat = 2 * time.Second
)

// compactAll removes, from each partition this replica holds, the jobs below its floor: no
// unsettled job of its tenants lies below it, and no other replica reads it.
func (s *Service) compactAll(ctx context.Context) {
	qs := s.queues
	qs.mu.Lock()
	type cut struct {
		pt    *part
		floor uint64
	}
	var cuts []cut
	for _, pt := range qs.parts {
		if f := qs.floorLocked(pt); f > max(pt.compactAt, 1) {
			cuts = append(cuts, cut{pt, f})
		}
	}
	qs.mu.Unlock()
	for _, c := range cuts {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := s.purgeBelow(cctx, c.pt.stream, c.floor)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				s.tel.settleError("compact")
				s.log.Warn("removing the settled jobs from the input failed: tried again at the next heartbeat", "stream", c.pt.stream, "below", c.floor, "err", err)
			}
			continue
		}
		qs.mu.Lock()
		c.pt.compactAt = max(c.pt.compactAt, c.floor)
		c.pt.first = max(c.pt.first, c.floor)
		qs.mu.Unlock()
	}
}

// compactTo removes the jobs of stream below floor, bounded, best effort (the next holder's
// compaction removes them otherwise).
func (s *Service) compactTo(stream string, floor uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.purgeBelow(ctx, stream, floor); err != nil {
		s.log.Info("removing a partition's settled jobs as it was given up failed: the next holder reads them again (the output's duplicate window drops their forwards)", "stream", stream, "below", floor, "err", err)
	}
}

// purgeBelow removes the jobs of stream below sequence floor.
func (s *Service) purgeBelow(ctx context.Context, stream string, floor uint64) error {
	st, err := s.streams.get(ctx, stream)
	if err != nil {
		return err
	}
	return st.Purge(ctx, jetstream.WithPurgeSequence(floor))
}

// compactor compacts every heartbeat until ctx ends.
func (s *Service) compactor(ctx context.Context) {
	t := time.NewTicker(s.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.compactAll(ctx)
		}
	}
}

// oldStreams lists the input streams of other partitionings than this deployment's (an earlier
// Config.Partitions, or the configured stream itself while there are partitions: producers that
// publish without the mapping), with their partitioning and partition, oldest first: their
// jobs are forwarded before their tenants' newer ones (see source).
func (s *Service) oldStreams(ctx context.Context) ([]oldStream, error) {
	var out []oldStream
	if s.cfg.JetStream == nil {
		return nil, errors.New("list the streams: no JetStream context (Config.JetStream)")
	}
	names := s.cfg.JetStream.StreamNames(ctx)
	for name := range names.Name() {
		n, p, ok := wire.ParseInputStream(s.cfg.StreamIn, name)
		if !ok || n == s.in.n() {
			continue
		}
		st, err := s.streams.get(ctx, name)
		if err != nil {
			return nil, err
		}
		ps := Partitions(s.cfg.In, s.cfg.StreamIn, n)
		out = append(out, oldStream{name: name, ps: ps, p: p, created: st.CachedInfo().Created})
	}
	if err := names.Err(); err != nil {
		return nil, fmt.Errorf("list the streams: %w", err)
	}
	slices.SortFunc(out, func(a, b oldStream) int {
		if c := a.created.Compare(b.created); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	return out, nil
}

// oldStream is an input stream of another partitioning (see oldStreams).
type oldStream struct {
	name    string
	ps      subjects.Partitions
	p       int
	created time.Time
}

// published is the subject a job of the old stream stored on stored was published on, and its
// tenant.
func (o oldStream) published(stored string) (subject, tenant string, ok bool) {
	return o.ps.Published(o.p, stored)
}

// tenantFilter is the subject filter of tenant's jobs in the old stream.
func (o oldStream) tenantFilter(tenant string) (string, error) { return o.ps.TenantFilter(o.p, tenant) }

// oldStreamsNow is oldStreams, listed again every oldStreamsEvery (a stream appears when the
// partitions change, or when producers publish without the mapping: see Setup).
func (s *Service) oldStreamsNow(ctx context.Context) ([]oldStream, error) {
	s.olds.mu.Lock()
	defer s.olds.mu.Unlock()
	if !s.olds.at.IsZero() && time.Since(s.olds.at) < oldStreamsEvery {
		return s.olds.list, nil
	}
	list, err := s.oldStreams(ctx)
	if err != nil {
		return nil, err
	}
	s.olds.list, s.olds.at = list, time.Now()
	return list, nil
}

// oldStreamsEvery is how often the streams are listed for older input streams.
const oldStreamsEvery = 10 * time.Second

// olds is the last listing of the older input streams.
type olds struct {
	mu   sync.Mutex
	list []oldStream
	at   time.Time
}

// Partitions is how a deployment's input (template in, stream streamIn) is spread over n
// streams: the subjects its jobs are stored on, and the server's mapping (subjects.Partitions).
func Partitions(in subjects.Template, streamIn string, n int) subjects.Partitions {
	return subjects.Partitions{In: in, Prefix: "admitter." + streamIn, N: max(n, 1)}
}
