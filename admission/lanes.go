package admission

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/policy"
	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// lanes runs the lanes this replica owns. A tenant's lane is the subject Wait gives it on the
// lanes stream: its jobs that must wait, in order. A lane takes steps: read the head (a batch,
// by Direct Get), decide it (one limiter call), forward what is admitted, remove it from the
// stream, then sleep until the next head's weight fits. Only the head of a lane is ever asked
// about, and nothing of a waiting job is held in memory between steps: a lane is a tenant name,
// a cursor and a time.
//
// Which tenants have a lane comes from the lanes stream itself: the subjects it holds at
// start-up (one per tenant), then a headers-only feed of what is added. Which lanes this replica
// runs comes from the replicas' membership (members.go).
type lanes struct {
	s      *Service
	reader *reader
	stream jetstream.Stream
	feed   jetstream.ConsumeContext

	mu     sync.Mutex
	byName map[string]*lane
	queue  laneQueue
	known  map[string]struct{} // tenants with jobs in the lanes stream, whoever runs them
	wake   chan struct{}       // the timer loop's wake-up (capacity 1)
	run    chan *lane
}

type lane struct {
	tenant  string
	cursor  uint64 // the next lanes-stream sequence to read
	through int64  // the highest input sequence seen and settled here
	due     time.Time
	index   int // in queue, -1 when not scheduled
	running bool
	next    time.Duration // set by the step that is running: when to run again
	gone    bool          // closed or no longer ours: dropped when its step ends
	empty   bool          // the last step found it empty but could not close it
	errs    int           // consecutive failed steps
	held    bool          // the last step's head was held: the limiter failed (fail mode closed)
}

func newLanes(s *Service) *lanes {
	return &lanes{s: s, byName: map[string]*lane{}, known: map[string]struct{}{},
		wake: make(chan struct{}, 1), run: make(chan *lane)}
}

// start finds the lanes that exist and follows the lanes stream for new ones.
func (l *lanes) start(ctx context.Context) error {
	s := l.s
	r, err := newReader(s.cfg.JetStream)
	if err != nil {
		return err
	}
	l.reader = r
	if l.stream, err = s.cfg.JetStream.Stream(ctx, s.cfg.StreamWait); err != nil {
		return fmt.Errorf("admission: lanes stream %s: %w", s.cfg.StreamWait, err)
	}
	last, err := l.discover(ctx)
	if err != nil {
		return err
	}
	cons, err := s.cfg.JetStream.OrderedConsumer(ctx, s.cfg.StreamWait, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{s.cfg.Wait.Filter()},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    last + 1,
		HeadersOnly:    true,
	})
	if err != nil {
		return fmt.Errorf("admission: lanes feed on %s: %w", s.cfg.StreamWait, err)
	}
	l.feed, err = cons.Consume(func(m jetstream.Msg) {
		if tenant, ok := s.cfg.Wait.Match(m.Subject()); ok {
			l.touch(tenant)
		}
	}, jetstream.PullExpiry(pullExpiry), jetstream.PullHeartbeat(pullHeartbeat),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			s.log.Debug("lanes feed", "err", err)
		}))
	if err != nil {
		return fmt.Errorf("admission: lanes feed on %s: %w", s.cfg.StreamWait, err)
	}
	return nil
}

// discover lists the tenants with jobs in the lanes stream and opens the lanes this replica
// owns; it returns the stream's last sequence, from which the feed follows.
func (l *lanes) discover(ctx context.Context) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	info, err := l.stream.Info(ctx, jetstream.WithSubjectFilter(l.s.cfg.Wait.Filter()))
	if err != nil {
		return 0, fmt.Errorf("admission: list the lanes of stream %s: %w", l.s.cfg.StreamWait, err)
	}
	known := make(map[string]struct{}, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		if tenant, ok := l.s.cfg.Wait.Match(subj); ok {
			known[tenant] = struct{}{}
		}
	}
	l.mu.Lock()
	for tenant := range l.byName {
		known[tenant] = struct{}{}
	}
	l.known = known
	l.mu.Unlock()
	l.rebalance()
	return info.State.LastSeq, nil
}

// stop stops the feed and the reader; steps under way end on their own.
func (l *lanes) stop() {
	if l.feed != nil {
		l.feed.Stop()
	}
	if l.reader != nil {
		l.reader.close()
	}
}

// touch notes that tenant has jobs in its lane; a lane of ours that is idle or found empty is
// woken.
func (l *lanes) touch(tenant string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.known[tenant] = struct{}{}
	ln := l.byName[tenant]
	if ln == nil {
		if !l.s.members.owns(tenant) {
			return
		}
		ln = &lane{tenant: tenant, index: -1}
		l.byName[tenant] = ln
		l.scheduleLocked(ln, 0)
		return
	}
	if ln.empty {
		ln.empty = false
		l.scheduleLocked(ln, 0)
	}
}

// rebalance opens the lanes this replica now owns and drops those it no longer owns, after the
// membership changed or at start.
func (l *lanes) rebalance() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for tenant := range l.known {
		if l.byName[tenant] == nil && l.s.members.owns(tenant) {
			ln := &lane{tenant: tenant, index: -1}
			l.byName[tenant] = ln
			l.scheduleLocked(ln, 0)
		}
	}
	for tenant, ln := range l.byName {
		if !l.s.members.owns(tenant) {
			l.dropLocked(ln)
		}
	}
}

// wakeTenant makes tenant's lane ask again now, if this replica runs it (a lease of the tenant ended).
func (l *lanes) wakeTenant(tenant string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ln := l.byName[tenant]; ln != nil {
		l.scheduleLocked(ln, 0)
	}
}

// wakeAll makes every lane ask again now (the plans changed: waits may have too).
func (l *lanes) wakeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ln := range l.byName {
		l.scheduleLocked(ln, 0)
	}
}

// wakeFailing makes the lanes that wait out a backoff because the limiter failed (their last
// step failed, or its head was held) ask again now. A lane's errs and held are written by its
// step and read here only while it is not running (the step ends under mu).
func (l *lanes) wakeFailing() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ln := range l.byName {
		if !ln.running && (ln.errs > 0 || ln.held) {
			l.scheduleLocked(ln, 0)
		}
	}
}

// recoveryWakeEvery bounds how often wakeOnRecovery wakes the failing lanes: with one server of
// a Redis Cluster down, the limiter recovers many times a second (see policy.Recovered), and
// the lanes on that server need not ask each time.
const recoveryWakeEvery = time.Second

// recoveryWaker returns a loop that wakes the failing lanes when the limiter answers again after
// an outage, so that they do not sleep out a backoff of up to 5 s after it; at most once per
// recoveryWakeEvery. The loop returns when its ctx ends. It follows the recoveries from the
// call of recoveryWaker on.
func (l *lanes) recoveryWaker() func(ctx context.Context) {
	ch := l.s.cfg.Policy.Recovered()
	return func(ctx context.Context) { l.wakeOnRecovery(ctx, ch) }
}

func (l *lanes) wakeOnRecovery(ctx context.Context, ch <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
		ch = l.s.cfg.Policy.Recovered() // a recovery while this one is handled closes it
		l.wakeFailing()
		t := time.NewTimer(recoveryWakeEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// count is the number of lanes this replica runs.
func (l *lanes) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.byName)
}

// scheduleLocked makes ln run after d (sooner if it is already due sooner).
func (l *lanes) scheduleLocked(ln *lane, d time.Duration) {
	if ln.gone {
		return
	}
	if ln.running {
		ln.next = min(ln.next, d)
		return
	}
	at := time.Now().Add(d)
	if ln.index >= 0 {
		if at.Before(ln.due) {
			ln.due = at
			heap.Fix(&l.queue, ln.index)
		}
	} else {
		ln.due = at
		heap.Push(&l.queue, ln)
	}
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *lanes) dropLocked(ln *lane) {
	ln.gone = true
	if ln.index >= 0 {
		heap.Remove(&l.queue, ln.index)
	}
	if !ln.running {
		delete(l.byName, ln.tenant)
	}
}

// schedule runs due lanes on the workers until ctx ends.
func (l *lanes) schedule(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		l.mu.Lock()
		var ln *lane
		var wait time.Duration = time.Hour
		if len(l.queue) > 0 {
			if d := time.Until(l.queue[0].due); d <= 0 {
				ln = heap.Pop(&l.queue).(*lane)
				ln.running, ln.next = true, time.Duration(1<<62)
			} else {
				wait = d
			}
		}
		l.mu.Unlock()
		if ln != nil {
			select {
			case l.run <- ln:
				continue
			case <-ctx.Done():
				return
			}
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-l.wake:
		case <-timer.C:
		}
	}
}

// work takes steps of the lanes the scheduler hands it until take ends; the steps run on ctx,
// so that a step under way when take ends finishes.
func (l *lanes) work(take, ctx context.Context) {
	for {
		select {
		case <-take.Done():
			return
		case ln := <-l.run:
			next, done := l.step(ctx, ln)
			l.mu.Lock()
			ln.running = false
			switch {
			case done || ln.gone:
				ln.gone = true
				delete(l.byName, ln.tenant)
			default:
				l.scheduleLocked(ln, min(next, ln.next))
			}
			l.mu.Unlock()
		}
	}
}

// laneRetry is the wait after a failed step: 100ms doubling to 5s.
func laneRetry(errs int) time.Duration {
	return min(100*time.Millisecond<<min(errs, 6), 5*time.Second)
}

// step takes one step of ln: it returns when to take the next, or done when the lane is closed
// (empty) or no longer this replica's.
func (l *lanes) step(ctx context.Context, ln *lane) (next time.Duration, done bool) {
	s := l.s
	ln.held = false
	if !s.members.owns(ln.tenant) {
		return 0, true
	}
	if blocked, _ := s.pub.blocked(); blocked {
		return 500 * time.Millisecond, false // downstream is full: the lane waits with everyone
	}
	if s.isForwarding(ln.tenant) {
		// The input's forwards of this tenant are not stored yet: if they are stored late, the
		// tenant is charged for it (chargeLate) before its lane decides again.
		return 10 * time.Millisecond, false
	}
	subject, err := s.cfg.Wait.Subject(ln.tenant)
	if err != nil {
		s.log.Error("lane subject", "tenant", ln.tenant, "err", err)
		return 0, true
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	msgs, err := l.reader.read(rctx, s.cfg.StreamWait, subject, ln.cursor, s.cfg.LaneBatch, max(s.cfg.InFlightBytes/s.cfg.LaneWorkers, 1<<20))
	cancel()
	if err != nil {
		ln.errs++
		if ctx.Err() == nil {
			s.log.Warn("lane read failed: retrying", "tenant", ln.tenant, "err", err, "retry_in", laneRetry(ln.errs).String())
		}
		return laneRetry(ln.errs), false
	}
	if len(msgs) == 0 {
		open, err := s.cfg.Policy.CloseLane(ctx, ln.tenant, ln.through)
		switch {
		case err != nil:
			ln.errs++
			return laneRetry(ln.errs), false
		case open: // a job moved to it is on its way: the feed wakes the lane when it lands
			l.mu.Lock()
			ln.empty = true
			l.mu.Unlock()
			return time.Second, false
		}
		ln.errs = 0
		return 0, true
	}
	jobs := make([]job, 0, len(msgs))
	waitSeqs := make([]uint64, 0, len(msgs))
	for _, m := range msgs {
		seq, err := seqOf(m)
		if err != nil {
			s.log.Error("lane read: a reply without a sequence", "tenant", ln.tenant, "err", err)
			break
		}
		jobs = append(jobs, s.laneJob(ctx, ln.tenant, m, seq))
		waitSeqs = append(waitSeqs, seq)
	}
	settled := s.decideAndApply(ctx, ln.tenant, bucket.Lane, jobs)
	if settled > 0 {
		last := waitSeqs[settled-1]
		for _, j := range jobs[:settled] {
			ln.through = max(ln.through, int64(j.seq))
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := l.stream.Purge(pctx, jetstream.WithPurgeSubject(subject), jetstream.WithPurgeSequence(last+1)); err != nil && ctx.Err() == nil {
			// Harmless: the jobs are forwarded; read again, they are redeemed or charged again
			// and their forwards deduplicated.
			s.log.Warn("lane: removing forwarded jobs failed", "tenant", ln.tenant, "through", last, "err", err)
		}
		cancel()
		ln.cursor = last + 1
	}
	ln.errs = 0
	if settled < len(jobs) {
		v := jobs[settled].verdict
		if v.Action == policy.Held || v.Action == policy.Wait {
			ln.held = v.Action == policy.Held
			return max(v.Wait, time.Millisecond), false
		}
		return laneRetry(1), false // not stored (shutting down): read again
	}
	return 0, false
}

// laneJob reads a job from its lane.
func (s *Service) laneJob(ctx context.Context, tenant string, m *nats.Msg, waitSeq uint64) job {
	h := m.Header
	j := job{lane: m, tenant: tenant, header: h, data: m.Data, subject: h.Get(wire.HeaderInputSubject)}
	var err error
	if j.seq, err = strconv.ParseUint(h.Get(wire.HeaderInputSeq), 10, 64); err != nil || j.subject == "" {
		// Not a job the admitter moved (someone published to the lanes' subjects): dead-letter it.
		j.seq, j.subject = waitSeq, m.Subject
		j.wErr = fmt.Errorf("message %d of the lanes stream is not a job moved by the admitter (no %s / %s header)", waitSeq, wire.HeaderInputSeq, wire.HeaderInputSubject)
	} else {
		j.weight, j.wErr = wire.ParseWeight(h)
	}
	if t, err := time.Parse(time.RFC3339Nano, h.Get(wire.HeaderInputTime)); err == nil {
		j.stored = t
	}
	j.tries, _ = strconv.ParseUint(h.Get(wire.HeaderAttempts), 10, 64)
	j.ctx, j.span = s.tel.startProcess(ctx, s.tel.processWait, h, j.subject, j.seq, j.tries, s.cfg)
	return j
}

// laneQueue is a min-heap of scheduled lanes by due time.
type laneQueue []*lane

func (q laneQueue) Len() int           { return len(q) }
func (q laneQueue) Less(i, j int) bool { return q[i].due.Before(q[j].due) }
func (q laneQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *laneQueue) Push(x any) {
	ln := x.(*lane)
	ln.index = len(*q)
	*q = append(*q, ln)
}
func (q *laneQueue) Pop() any {
	old := *q
	ln := old[len(old)-1]
	old[len(old)-1] = nil
	ln.index = -1
	*q = old[:len(old)-1]
	return ln
}

var _ = errors.New
