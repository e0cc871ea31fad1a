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

// part is a partition this replica holds, as one part with a lifecycle (Start, Stop, Stopped,
// as worker.Worker): its feed (an ordered consumer from the stream's first job: the server
// streams each job once, at a few µs per job), its tenants' queues, and what of it was removed.
// Its tenure (owners.go) starts it when the partition is first held and stops it when it is
// lost or given up. Its fields are guarded by queues.mu but for health and the lifecycle's.
type part struct {
	s      *Service
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
	health  feedHealth

	quit    chan struct{} // closed by Stop: the feed's keeper ends
	stopped chan struct{} // closed once Stop has ended
	keeping sync.WaitGroup
	halt    sync.Once
}

func newPart(s *Service, p int) *part {
	return &part{s: s, index: p, stream: s.in.stream(p), horizon: math.MaxUint64, // until the stream says
		quit: make(chan struct{}), stopped: make(chan struct{})}
}

// startPart starts partition p's part, once the part of its previous tenure has stopped (the
// limiter hears what the old queues owe before a new one asks), unless the partition is no
// longer this replica's by then.
func (s *Service) startPart(ctx context.Context, p int) {
	qs := s.queues
	qs.mu.Lock()
	last := qs.last[p]
	qs.mu.Unlock()
	if last != nil {
		<-last.Stopped() // bounded: its Stop is
	}
	qs.mu.Lock()
	if qs.closed || !s.owners.ours(p) || qs.parts[p] != nil {
		// Lost while the hand-over of its last tenure ran: started now it would run unheld (its
		// queues told at each step that it is not theirs).
		qs.mu.Unlock()
		return
	}
	pt := newPart(s, p)
	qs.parts[p], qs.last[p] = pt, pt
	qs.mu.Unlock()
	pt.Start(ctx)
}

// stopPart stops partition p's part (see part.Stop) and then calls stopped (if not nil), the
// previous tenure's part first if it is still stopping. It returns at once.
func (s *Service) stopPart(p int, stopped func()) {
	qs := s.queues
	qs.mu.Lock()
	pt, last := qs.parts[p], qs.last[p]
	qs.mu.Unlock()
	s.moves.Go(func() {
		switch {
		case pt != nil:
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout+2*handOverBound)
			if err := pt.Stop(ctx); err != nil {
				s.log.Warn("a partition's part did not stop within its bound: what it still runs ends on its own", "partition", p, "err", err)
			}
			cancel()
		case last != nil:
			<-last.Stopped()
		}
		if stopped != nil {
			stopped()
		}
	})
}

// Start reads the partition: the tenants with jobs in older streams are listed first, then its
// feed hands each job to its tenant's queue (a keeper starts it again whenever it stops or
// delivers nothing while jobs wait); a poll follows at once (the jobs waiting). It returns once
// the feed is started or its first start failed (it is tried again).
func (pt *part) Start(ctx context.Context) {
	s, qs := pt.s, pt.s.queues
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
		s.log.Warn("listing the older streams' tenants failed: their jobs are found by the next listing, and their newer jobs may go first", "partition", pt.index, "err", err)
	}
	first := make(chan struct{})
	pt.keeping.Go(func() { pt.keepFeed(ctx, first) })
	select {
	case <-first:
	case <-pt.quit:
	}
	select {
	case qs.pollNow <- struct{}{}:
	default:
	}
}

// Stop stops reading the partition: its feed ends, its queues leave (one whose step runs leaves
// when the step ends), and once no step of it runs (or ctx ends) what was settled since the
// last compaction is removed and the queues are handed over: their hold is given up in the
// limiter, so that their next holder goes at once, and what they owe is said. Stopped is closed
// when it returns. It returns an error naming the steps still running when ctx ended. Stop is
// safe to call more than once (the later calls wait for the first).
func (pt *part) Stop(ctx context.Context) error {
	first := false
	pt.halt.Do(func() { first = true })
	if !first {
		select {
		case <-pt.stopped:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	defer close(pt.stopped)
	s, qs := pt.s, pt.s.queues
	qs.mu.Lock()
	// What of the partition is settled: removed before the next holder reads it.
	floor, compacted := qs.floorLocked(pt), pt.compactAt
	if qs.parts[pt.index] == pt {
		delete(qs.parts, pt.index)
	}
	var moved []*queue
	for _, q := range qs.byName {
		if q.part != pt.index {
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
	close(pt.quit)
	pt.keeping.Wait()
	// The steps get what the bound leaves after the compaction's and the hand-over's own.
	qctx := ctx
	if deadline, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		qctx, cancel = context.WithDeadline(ctx, deadline.Add(-2*handOverBound))
		defer cancel()
	}
	err := pt.quiesce(qctx)
	if floor > max(compacted, 1) {
		// The jobs settled since the last compaction would be read again by the next holder
		// (and forwarded again, into the duplicate window, charged again).
		s.compactTo(ctx, pt.stream, floor)
	}
	// Those whose step ran are handed over once it ended (what it stored late is owed), unless
	// the partition came back meanwhile and kept them.
	qs.mu.Lock()
	moved = slices.DeleteFunc(moved, func(q *queue) bool { return !q.gone || q.where == running })
	qs.mu.Unlock()
	s.handOver(ctx, moved)
	return err
}

// Stopped is closed once Stop has ended.
func (pt *part) Stopped() <-chan struct{} { return pt.stopped }

// quiesce waits until no step of the partition's queues runs, or ctx ends: then the error names
// the tenants whose steps still run.
func (pt *part) quiesce(ctx context.Context) error {
	qs := pt.s.queues
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		qs.mu.Lock()
		var busy []string
		for _, q := range qs.byName {
			if q.part == pt.index && q.gone && q.where == running {
				busy = append(busy, q.tenant)
			}
		}
		qs.mu.Unlock()
		if len(busy) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			slices.Sort(busy)
			return fmt.Errorf("partition %d: the steps of %s still run: %w", pt.index, strings.Join(busy, ", "), ctx.Err())
		case <-t.C:
		}
	}
}

// handOverBound bounds a hand-over's calls, and a compaction at a stop.
const handOverBound = 2 * time.Second

// keepFeed runs the partition's feed until the part stops: started from the feed's position,
// and started again from there whenever it stops by itself or delivers nothing for feedRestart
// while jobs wait for it (its consumer lost with a NATS node and not made again, a client that
// stopped pulling); a start that fails is tried again with a backoff. first is closed once the
// first start has been tried.
func (pt *part) keepFeed(ctx context.Context, first chan struct{}) {
	s := pt.s
	b := backoff.NewExponentialBackOff(backoff.WithInitialInterval(500*time.Millisecond), backoff.WithMaxInterval(feedGrace), backoff.WithMaxElapsedTime(0))
	check := time.NewTicker(time.Second)
	defer check.Stop()
	once := sync.OnceFunc(func() { close(first) })
	defer once()
	for {
		cc, err := s.startFeed(ctx, pt)
		once()
		wait := b.NextBackOff()
		if err != nil {
			if pt.health.failed(err) {
				s.log.Warn("the partition's feed could not start: its tenants are found by listing it and read by subject meanwhile; tried again", "partition", pt.index, "stream", pt.stream, "err", err, "retry_in", wait.String())
			}
		} else if cc == nil {
			return // no feed: a work queue
		} else {
			b.Reset()
			wait = 0
			why := pt.follow(cc, check.C)
			pt.endFeed(cc)
			if why == "" {
				return // stopping
			}
			s.log.Warn("the partition's feed stopped: started again from its position", "partition", pt.index, "stream", pt.stream, "why", why)
		}
		t := time.NewTimer(wait)
		select {
		case <-pt.quit:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// follow waits until the part stops ("") or feed cc has to be started again: why.
func (pt *part) follow(cc jetstream.ConsumeContext, check <-chan time.Time) (why string) {
	closed := cc.Closed()
	for {
		select {
		case <-pt.quit:
			return ""
		case <-closed:
			return "it ended"
		case now := <-check:
			if pt.health.stalled(now) {
				return fmt.Sprintf("it delivered nothing for %v while the input held jobs for it", feedRestart)
			}
		}
	}
}

// endFeed stops feed cc and waits (bounded) until it hands nothing more over.
func (pt *part) endFeed(cc jetstream.ConsumeContext) {
	qs := pt.s.queues
	qs.mu.Lock()
	pt.feedOn = false
	qs.mu.Unlock()
	cc.Stop()
	t := time.NewTimer(handOverBound)
	defer t.Stop()
	select {
	case <-cc.Closed():
	case <-t.C:
	}
}

// feedRestart is how long a feed may deliver nothing while jobs wait for it before it is
// started again (a NATS node lost makes a sound feed miss two heartbeats, 4 s, and make its
// consumer again by itself).
const feedRestart = 3 * feedGrace

// startFeed starts the feed of partition pt from its position (see part): nil without an error
// when the input takes none (a work queue).
func (s *Service) startFeed(ctx context.Context, pt *part) (jetstream.ConsumeContext, error) {
	st, err := s.streams.get(ctx, pt.stream)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", pt.stream, err)
	}
	if st.CachedInfo().Config.Retention == jetstream.WorkQueuePolicy {
		// A work queue (made by an earlier version) takes no consumer without acknowledgements.
		s.log.Warn("the input stream is a work queue, made by an earlier admitter: tenants with new jobs are found only by listing it every ADMITTER_DISCOVERY_INTERVAL, and every job is read by subject; recreate it with limits retention once it is empty (see docs/upgrading.md)",
			"stream", pt.stream, "interval", s.cfg.DiscoveryInterval.String())
		return nil, nil
	}
	qs := s.queues
	qs.mu.Lock()
	from := pt.pos
	qs.mu.Unlock()
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{s.in.ps.Filter(pt.index)}, DeliverPolicy: jetstream.DeliverAllPolicy}
	if from > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from
	}
	cons, err := s.cfg.JetStream.OrderedConsumer(ctx, pt.stream, cfg)
	if err != nil {
		return nil, fmt.Errorf("the feed of %s: %w", pt.stream, err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		subject, tenant, ok := s.in.published(pt.index, m.Subject())
		md, err := m.Metadata()
		if !ok || err != nil {
			return
		}
		data := m.Data()
		pt.health.delivered(time.Now())
		qs.feed(pt, tenant, fed{seq: md.Sequence.Stream, subject: subject, header: m.Headers(), data: data,
			stored: md.Timestamp, size: len(data) + len(subject) + 64, live: md.NumPending <= livePending})
	}, jetstream.PullMaxBytes(feedPullBytes), jetstream.PullExpiry(pullExpiry), jetstream.PullHeartbeat(pullHeartbeat),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if pt.health.failed(err) {
				s.log.Warn("the input's feed failed: its tenants with jobs are found by listing the input and read by subject until it recovers; /readyz says so", "stream", pt.stream, "err", err)
			}
		}))
	if err != nil {
		return nil, fmt.Errorf("the feed of %s: %w", pt.stream, err)
	}
	qs.mu.Lock()
	pt.feedOn = true
	qs.mu.Unlock()
	return cc, nil
}

// feedHealth is what a feed's deliveries say of it. A feed that delivers nothing between two
// listings of its stream that found jobs it had not delivered lags (a pull refused, a consumer
// lost with a NATS node and not made again yet): the discovery gives a queue, behind, to every
// tenant with jobs meanwhile (see queues.poll), so that nothing waits for the feed. Lagging for
// feedGrace it is broken: the service is not ready while it lasts; for feedRestart, it is
// started again (see part.keepFeed). Its errors are logged once per failure, at warn. (The
// ordered consumer's own state is not asked: it is locked while it makes its consumer again.)
type feedHealth struct {
	last atomic.Int64 // unix ns of the latest delivery
	mu   sync.Mutex
	err  error // the latest error reported, for the message
	// stuck: when a listing found jobs the feed had not delivered, none delivered since (zero:
	// none found)
	stuck time.Time
	// logged: the current failure was logged
	logged bool
}

// feedGrace is how long a feed may lag before the service says it is broken: a NATS node lost
// makes a sound feed miss two heartbeats (4 s) and make its consumer again.
const feedGrace = 5 * time.Second

// delivered records a delivery at now.
func (f *feedHealth) delivered(now time.Time) { f.last.Store(now.UnixNano()) }

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
	case last == 0 || last < next:
		f.stuck, f.logged, f.err = time.Time{}, false, nil // delivered everything
	case f.stuck.IsZero() || f.deliveredSince(f.stuck):
		f.stuck = now // jobs it has not delivered: it must deliver before the next listing
	}
}

// laggingLocked is since when the feed lags at now (zero: it does not).
func (f *feedHealth) laggingLocked(now time.Time) time.Time {
	if f.stuck.IsZero() || !now.After(f.stuck) || f.deliveredSince(f.stuck) {
		return time.Time{}
	}
	return f.stuck
}

// lagging reports whether the feed lags at now: its tenants are read by subject meanwhile.
func (f *feedHealth) lagging(now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.laggingLocked(now).IsZero()
}

// stalled reports whether the feed has lagged for feedRestart at now: it is to be started again
// (then it has a grace of its own: the failure is forgotten).
func (f *feedHealth) stalled(now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if since := f.laggingLocked(now); since.IsZero() || now.Sub(since) < feedRestart {
		return false
	}
	f.stuck, f.logged = time.Time{}, false
	return true
}

// broken is the feed's failure when it has lagged for feedGrace at now.
func (f *feedHealth) broken(now time.Time, stream string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	since := f.laggingLocked(now)
	if since.IsZero() || now.Sub(since) < feedGrace {
		return nil
	}
	why := "it delivers nothing while the input holds jobs"
	if f.err != nil {
		why = f.err.Error()
	}
	return fmt.Errorf("the feed of %s has delivered nothing since %s: %s", stream, since.UTC().Format(time.RFC3339), why)
}

// feedBroken is the first broken feed's failure among the partitions held.
func (s *Service) feedBroken(now time.Time) error {
	parts := s.queues.partsNow()
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
func (s *Service) compactTo(ctx context.Context, stream string, floor uint64) {
	ctx, cancel := context.WithTimeout(ctx, handOverBound)
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
