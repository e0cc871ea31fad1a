package admission

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/admitter/admitter/activity"
	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/policy"
	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"
)

// job is one job being decided: read from its tenant's queue in its partition's stream, or from
// an older stream (source: the lanes stream of an earlier version, an input stream of another
// partitioning).
type job struct {
	tenant  string
	subject string // the subject it was published on
	out     string // the subject it is forwarded on (the output's mapping of subject)
	stream  string // the input stream it was stored in (its Msg-Ids name it)
	seq     uint64 // its sequence there
	id      int64  // its id: its lease, its mark in the limiter (wire.JobID)
	at      uint64 // the sequence it was read at (seq, or the lanes stream's)
	stored  time.Time
	header  nats.Header
	data    []byte
	weight  int64
	wErr    error
	maxWait time.Duration // its Admit-Max-Wait (0: none)
	mwErr   error         // why its Admit-Max-Wait does not read
	// priority is its Admit-Priority (wire.DefaultPriority when absent or unreadable), prErr
	// why it does not read.
	priority int
	prErr    error
	// ordered: read in order from the queue's cursor, with none of the tenant's jobs left out
	// before it (not read from the priority index, nor behind one a step left out): it may
	// settle in its place (see stepPlan.inPlace).
	ordered bool
	src     bool            // read from the queue's first older stream (q.old[0])
	lane    bool            // from the lanes stream of an earlier version
	tries   uint64          // the decisions it takes, this step's included (Admit-Attempts)
	ctx     context.Context // the job's trace
	span    trace.Span
}

// stepResult says what a queue's step found: when to step again, and how.
type stepResult struct {
	// next is when to step again: after a wait (a head that does not fit yet, a failure's
	// backoff), or at once (0) when more may go now.
	next time.Duration
	// more: everything the step read went (it stopped at its budget or at its read's bounds,
	// not at a job that waits): the queue is ready again.
	more bool
	// cut: the step stopped at its turn's budget: the next job read weighs more than what was
	// left of the turn (see within), which the queue keeps while it stays in the ring.
	cut bool
	// idle: the queue is empty and owes nothing: it sleeps until its tenant publishes again.
	idle bool
	// headless: the queue was empty; its wait (next) is for its settled jobs' removal, not for
	// a head, so a job that arrived during the step goes at once.
	headless bool
	// spent is what the step's turn paid for: the weight of every job it forwarded (admitted,
	// in shadow mode, without a decision or on the local copy alike), 1 per dead letter.
	spent int64
	// gone: the queue is no longer this replica's.
	gone bool
	// waitsFor is why the job the step left waiting at the head waits: its decision's reason
	// (policy.Decision.Reason: a limit's kind, policy.ReasonPool, policy.ReasonHandover); empty
	// when no job waits or no decision says why (paused, held, a failure).
	waitsFor string
	// decided: the step decided its head; oldest is then when the input stored the job it left
	// waiting (zero: none waits), under plan (admitter_oldest_waiting_seconds).
	decided bool
	oldest  time.Time
	plan    string
}

// stepRetry is the wait after a failed step: 100ms doubling to 5s.
func stepRetry(errs int) time.Duration {
	return min(100*time.Millisecond<<min(errs, 6), 5*time.Second)
}

// step takes one step of q: it reads the head of the tenant's queue (at most budget weight of
// it), decides it in one limiter call, forwards and dead-letters what may go in order, waits
// until each is stored, removes what is settled from the input, and says when to go on.
func (s *Service) step(ctx context.Context, q *queue, budget int64) stepResult {
	if !s.owners.holds(q.part) {
		return stepResult{gone: true}
	}
	if blocked, _ := s.pub.blocked(); blocked {
		return stepResult{next: 500 * time.Millisecond} // downstream is full: the queue waits with everyone
	}
	q.enter(reading)
	jobs, err := s.readHead(ctx, q, budget)
	if err != nil {
		q.errs++
		if ctx.Err() == nil {
			s.log.Warn("reading a tenant's queue failed: retrying", "tenant", q.tenant, "err", err, "retry_in", stepRetry(q.errs).String())
		}
		return stepResult{next: stepRetry(q.errs)}
	}
	jobs, passed := s.dropSkipped(q, jobs)
	if len(jobs) == 0 && passed {
		return stepResult{more: true} // only jobs dead-lettered out of their place were read: read on
	}
	if len(jobs) == 0 {
		return s.settleIdle(ctx, q)
	}
	jobs, cut := s.ask(ctx, q, jobs, budget)
	res := s.decideAndApply(ctx, q, jobs)
	res.cut = cut
	if res.gone || q.errs > 0 {
		return res
	}
	q.enter(removing)
	due, err := s.removeSettled(ctx, q, false)
	switch {
	case err != nil:
		res.next = min(max(res.next, 100*time.Millisecond), stepRetry(1))
		res.more = false
	case due > 0 && !res.more:
		res.next = min(res.next, due) // its head waits longer than its settled jobs may stay
	}
	return res
}

// readHead reads the head of q: up to budget jobs (and the read's byte bound), from its older
// streams while the tenant has jobs there, then what the feed handed it, or, behind, from its
// partition's stream by subject (see queues).
func (s *Service) readHead(ctx context.Context, q *queue, budget int64) ([]job, error) {
	n := int(min(budget, int64(s.cfg.Batch)))
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	maxBytes := max(s.cfg.InFlightBytes/s.cfg.Workers, 1<<20)
	s.queues.takeSources(q)
	for len(q.old) > 0 {
		src := &q.old[0]
		if src.unpurged > 0 {
			// Its settled jobs are removed first (a read from its cursor would find them gone
			// or not); until they are, nothing is read: the partition's jobs come after them.
			if err := s.purgeOf(rctx, q, src.stream, src.filter, src.unpurged); err != nil {
				return nil, fmt.Errorf("remove the settled jobs of %s in stream %s: %w", q.tenant, src.stream, err)
			}
			src.unpurged = 0
		}
		msgs, _, err := s.reader.read(rctx, src.stream, src.filter, src.cursor, n, maxBytes)
		if err != nil {
			return nil, fmt.Errorf("read the jobs of %s in stream %s: %w", q.tenant, src.stream, err)
		}
		if len(msgs) > 0 {
			if src.lane {
				return s.laneJobs(ctx, q, msgs), nil
			}
			return s.sourceJobs(ctx, q, src, msgs), nil
		}
		s.queues.endSource(q)
		s.log.Info("the tenant's jobs left in an older stream are forwarded: its queue goes on in its partition", "tenant", q.tenant, "stream", src.stream)
	}
	qs := s.queues
	if buf, _ := qs.buffered(q, n); len(buf) > 0 {
		return s.fedJobs(ctx, q, buf), nil
	}
	if !qs.startRead(q) {
		return nil, nil // following, and nothing buffered
	}
	msgs, pending, err := s.reader.read(rctx, s.in.stream(q.part), q.filter, q.cursor, n, maxBytes)
	read := make([]fed, 0, len(msgs))
	for _, m := range msgs {
		if err != nil {
			break
		}
		var f fed
		if f, err = fedOf(m); err == nil {
			subject, _, ok := s.in.published(q.part, f.subject)
			if !ok {
				err = fmt.Errorf("stream %s: sequence %d has subject %q, not one of its partition's", s.in.stream(q.part), f.seq, f.subject)
				break
			}
			f.subject = subject
			read = append(read, f)
		}
	}
	if err != nil {
		qs.endRead(q, nil, false)
		return nil, err
	}
	head, follows := qs.endRead(q, read, pending == 0)
	if follows {
		head, _ = qs.buffered(q, n)
	}
	return s.fedJobs(ctx, q, head), nil
}

// directHeaders are the headers a Direct Get adds to a message: the stream's, not the producer's.
var directHeaders = []string{jetstream.StreamHeader, jetstream.SubjectHeader, jetstream.SequenceHeader,
	jetstream.TimeStampHeaer, jetstream.LastSequenceHeader, "Nats-Num-Pending", "Nats-UpTo-Sequence"}

// fedOf is a job of the input read by Direct Get, as the feed would have handed it over.
func fedOf(m *nats.Msg) (fed, error) {
	seq, err := seqOf(m)
	if err != nil {
		return fed{}, err
	}
	f := fed{seq: seq, subject: m.Header.Get(jetstream.SubjectHeader), header: m.Header, data: m.Data}
	if f.subject == "" {
		f.subject = m.Subject
	}
	if t, err := time.Parse(time.RFC3339Nano, m.Header.Get(jetstream.TimeStampHeaer)); err == nil {
		f.stored = t
	}
	for _, h := range directHeaders {
		m.Header.Del(h)
	}
	f.size = len(f.data) + len(f.subject) + 64
	return f, nil
}

// fedJobs are the jobs of fs (of q's partition), to be decided.
func (s *Service) fedJobs(ctx context.Context, q *queue, fs []fed) []job {
	jobs := make([]job, len(fs))
	stream := s.in.stream(q.part)
	for i, f := range fs {
		j := job{tenant: q.tenant, subject: f.subject, stream: stream, seq: f.seq, id: s.in.jobID(q.part, f.seq), at: f.seq, stored: f.stored, header: f.header, data: f.data}
		jobs[i] = s.startJob(ctx, q, j)
	}
	return jobs
}

// startJob reads j's weight and where it goes, and starts its trace.
func (s *Service) startJob(ctx context.Context, q *queue, j job) job {
	j.out = s.outSubject(j.subject)
	j.tries = q.tries(j.id)
	j.weight, j.wErr = wire.ParseWeight(j.header)
	j.maxWait, j.mwErr = wire.ParseMaxWait(j.header)
	j.priority, j.prErr = wire.ParsePriority(j.header)
	if j.id == 0 && j.wErr == nil {
		j.wErr = fmt.Errorf("stream %s: sequence %d is beyond the ids of jobs (2^40)", j.stream, j.seq)
	}
	j.ctx, j.span = s.tel.startProcess(ctx, s.tel.processIn, j.header, j.subject, j.stream, j.seq, j.tries, s.cfg)
	return j
}

// sourceJobs are jobs read from src, an input stream of another partitioning, to be decided.
func (s *Service) sourceJobs(ctx context.Context, q *queue, src *source, msgs []*nats.Msg) []job {
	jobs := make([]job, 0, len(msgs))
	for _, m := range msgs {
		f, err := fedOf(m)
		if err != nil {
			break
		}
		subject, _, ok := src.published(f.subject)
		j := job{tenant: q.tenant, subject: subject, stream: src.stream, seq: f.seq, id: wire.JobID(src.n, src.p, f.seq), at: f.seq, stored: f.stored,
			header: f.header, data: f.data, src: true}
		if !ok {
			j.subject = f.subject
		}
		jobs = append(jobs, s.startJob(ctx, q, j))
	}
	return jobs
}

// decideAndApply decides jobs at the head of q and does what the decision says, in order:
// forward, dead-letter, or (stored before) nothing; the first that waits stops it, and the jobs
// behind wait with it (see planStep). It returns when every message is stored or refused for
// good, with what the queue does next; q's cursor moves past the jobs settled.
func (s *Service) decideAndApply(ctx context.Context, q *queue, jobs []job) stepResult {
	q.enter(deciding)
	d := s.decide(ctx, q, jobs)
	p := planStep(d.Decision, jobs, d.now, len(q.skipped) < maxSkipped)
	fwds := s.forwards(q, jobs, &d, p)
	if len(fwds) > 0 && !s.owners.leased(q.part) {
		// The partition's lease ran out while the step decided (the replica paused past it): the
		// next holder makes these forwards (it finds them admitted, looks them up: once.go), and
		// this replica's would land beside its decisions.
		for i := range jobs {
			jobs[i].span.End()
		}
		return stepResult{gone: true}
	}
	q.enter(publishing)
	s.send(ctx, q, fwds)
	return s.settle(ctx, q, jobs, &d, p, fwds)
}

// decision is a step's decision (policy.Decision), with what its messages and records say of it.
type decision struct {
	policy.Decision
	now   time.Time     // when the step decided
	plan  string        // the tenant's plan ("" without)
	limit string        // what bound it, for people ("pool workers: 8 of 8 in flight; acme's share 3 of 5")
	lease time.Duration // the plan's lease (0: no concurrency limit)
}

// decide asks the limiter about jobs for q (the queue's claim with them), then looks up the
// forwards of the jobs it redeemed (once.go), and tells the tenants whose pool capacity the call
// gave back.
func (s *Service) decide(ctx context.Context, q *queue, jobs []job) decision {
	pjobs := make([]policy.Job, len(jobs))
	horizon := s.queues.horizon(q.part)
	for i, j := range jobs {
		pjobs[i] = policy.Job{ID: j.id, Weight: j.weight, WeightErr: j.wErr, Stored: j.stored, MaxWait: j.maxWait, MaxWaitErr: j.mwErr, PriorityErr: j.prErr,
			Again: (j.src || j.lane || j.seq <= horizon) && j.id > q.waited || q.redeemed[j.id]}
	}
	span := s.tel.startDecide(ctx, jobs)
	d := decision{Decision: s.cfg.Policy.Step(ctx, q.tenant, pjobs, q.claim(s.owner)), now: s.cfg.Now()}
	s.tel.decided(ctx, span, d.Decision, jobs, q.tenant, pjobs)
	if d.Said {
		q.said()
	}
	s.resolveRedeemed(ctx, q, jobs, &d.Decision)
	if d.Plan != nil {
		d.plan, d.lease = d.Plan.Name, d.Plan.Lease()
	}
	for _, t := range d.Wakes {
		if t != q.tenant {
			s.wakeForPool(t) // the pool capacity this step gave back, or refused for their turn, is theirs
		}
	}
	if d.GiveBackErr != nil && d.Pool != nil {
		s.tel.giveBackFailed(ctx, d.Pool.Name)
		s.log.Warn("the pool's grants a decision did not use were not given back: their slots stay taken until their leases end",
			"tenant", q.tenant, "pool", d.Pool.Name, "err", d.GiveBackErr)
	}
	d.limit = d.Limit
	switch {
	case (d.Reason == policy.ReasonPool || d.Reason == policy.ReasonBreaker || d.Reason == policy.ReasonDownstream && d.Limit != bucket.LimitDownstream) && d.Pool != nil && d.Plan != nil:
		d.limit = d.Pool.Reason(q.tenant, max(d.Plan.Share, 1)) // "pool workers: 8 of 8 in flight; acme's share 3 of 5"
	case d.Reason == policy.ReasonDownstream:
		for _, v := range d.Verdicts {
			if v.Fate == wire.FateDelayed {
				d.limit = bucket.DownstreamReason(d.now.Add(v.Wait)) // "downstream asked to wait until 14:03:10"
				break
			}
		}
	}
	return d
}

// settle ends a step whose messages fwds were published: what it owes the limiter, the queue's
// cursor past the jobs settled in their place (up to the first whose message could not be
// stored: shutting down), those settled out of their place removed, when to step again, and
// each job's record.
func (s *Service) settle(ctx context.Context, q *queue, jobs []job, d *decision, p stepPlan, fwds []*forward) stepResult {
	if late := q.owe.settle(fwds, s.cfg.Policy.Late()); late > 0 {
		s.tel.lateForwards.Add(ctx, int64(late))
	}
	sent := make([]*forward, len(jobs)) // each job's message, if any
	for _, f := range fwds {
		sent[indexOf(jobs, f.job)] = f
		if f.err != nil {
			q.errs++
		}
	}
	settled := p.inPlace
	for k, i := range settled {
		if sent[i] != nil && sent[i].err != nil {
			settled = settled[:k] // those after it stay: no change of order
			break
		}
	}
	var out []uint64 // settled out of their place: removed now
	for i := range jobs {
		if p.each[i].out && (sent[i] == nil || sent[i].err == nil) && ctx.Err() == nil {
			out = append(out, jobs[i].at)
			delete(q.redeemed, jobs[i].id)
		}
	}
	slices.Sort(out)
	defer s.concludeAll(ctx, q, jobs, d, p, sent, settled)
	if len(settled) > 0 {
		inOrder := make([]job, len(settled))
		for k, i := range settled {
			inOrder[k] = jobs[i]
		}
		s.advance(q, inOrder)
	}
	if len(out) > 0 {
		s.skipExpired(ctx, q, out)
	}
	res := stepResult{decided: true, plan: d.plan, spent: p.spent}
	switch {
	case q.errs > 0 && len(settled) < len(p.inPlace):
		return stepResult{next: stepRetry(q.errs), spent: p.spent}
	case p.head < len(jobs):
		q.errs = 0
		head := p.each[p.head].verdict
		q.waits(jobs[p.head].id, jobs[p.head].tries)
		q.waitedFor = d.WaitedFor(head)
		res.next = p.next
		for i := range jobs {
			if p.each[i].act == actWait && (res.oldest.IsZero() || jobs[i].stored.Before(res.oldest)) {
				res.oldest = jobs[i].stored
			}
		}
		if head.Fate == wire.FateDelayed {
			res.waitsFor = d.Reason
		}
		return res
	}
	q.errs = 0
	q.waitedFor = ""
	res.more = true // everything read went: the queue goes on (or finds itself empty)
	return res
}

// concludeAll records what became of each job of a step (see settle): settled in its place
// (settled), out of its place, waiting, or to be read again.
func (s *Service) concludeAll(ctx context.Context, q *queue, jobs []job, d *decision, p stepPlan, sent []*forward, settled []int) {
	inPlace := make([]bool, len(jobs))
	for _, i := range settled {
		inPlace[i] = true
	}
	waited := q.waited // as the step found it: the jobs are asked about by priority, not by id
	for i := range jobs {
		j, pl := &jobs[i], p.each[i]
		err := ctx.Err()
		if f := sent[i]; f != nil {
			pl, err = f.planned, errors.Join(f.err, err) // a forward refused for good became a dead letter
		}
		switch {
		case inPlace[i]:
			s.conclude(j, d, pl.verdict, j.id <= waited, nil)
		case pl.out:
			s.conclude(j, d, pl.verdict, j.id <= waited, err) // not stored: decided again by the next step
		case pl.act == actWait:
			s.concludeWait(q, j, d, pl.verdict, i == p.head, waited)
		default:
			s.conclude(j, d, pl.verdict, false, ctx.Err()) // not stored: read again by the next step
		}
	}
}

// indexOf is the index of j in jobs (j points into it).
func indexOf(jobs []job, j *job) int {
	for i := range jobs {
		if &jobs[i] == j {
			return i
		}
	}
	return -1
}

// advance moves q past its settled jobs (in order), which are to be removed.
func (s *Service) advance(q *queue, settled []job) {
	last := settled[len(settled)-1]
	q.storedID = max(q.storedID, last.id)
	for id := range q.redeemed {
		if id <= q.storedID {
			delete(q.redeemed, id)
		}
	}
	q.owe.stored = max(q.owe.stored, q.storedID) // said by the queue's next call (see owed)
	if last.src {
		src := &q.old[0]
		src.cursor, src.unpurged = last.at+1, last.at
		return
	}
	for _, j := range settled {
		q.passSkipped(j.at)
		q.unremoved.add(j.at)
	}
	s.queues.settled(q, last.at)
}

// unremoved is a queue's settled jobs still in the input: their range and count, and their
// sequences while they are few.
type unremoved struct {
	first, last uint64 // 0: none
	n           int
	seqs        []uint64 // while n ≤ maxDeletes
	since       time.Time
}

// maxDeletes is the most settled jobs a queue removes one by one (see removeSettled).
const maxDeletes = 256

func (u *unremoved) add(seq uint64) {
	if u.n == 0 {
		u.first, u.since = seq, time.Now()
	}
	u.last = seq
	if u.n++; u.n <= maxDeletes {
		u.seqs = append(u.seqs, seq)
	} else {
		u.seqs = nil
	}
}

// sparse reports whether removing the jobs one by one costs the server less than purging the
// tenant's subjects through the last: a purge walks every message of the input between the
// first and the last (nats-server's filestore keeps no index of a subject's sequences within a
// block: FIELD-NOTES), a removal costs about as much as a walk over a thousand.
func (u *unremoved) sparse() bool {
	return u.n <= maxDeletes && u.last-u.first+1 > 1000*uint64(u.n)
}

// purgeAge is how long a tenant's settled jobs may stay in the input, left there by the
// compaction (a waiting job of another tenant below them), before the tenant's queue removes
// them itself: well within the output's duplicate window, so that a job read again by another
// replica meanwhile is forwarded again only as a duplicate the output drops.
func (s *Service) purgeAge() time.Duration { return min(5*time.Second, s.cfg.DuplicateWindow/4) }

// removeSettled removes q's settled jobs from the input when that is due: at once in the legacy
// lanes stream and without a feed (nothing compacts the input then); otherwise once they are
// purgeAge old and the compaction has not removed them (see queues). Jobs spread thinly among
// other tenants' are deleted one by one, others purged by subject. It returns how long until it
// is due (0: nothing left to remove). A removal that fails leaves them owed to the limiter as
// stored (see owed), and is tried again by the next step. now removes them at once (the queue is
// handed over: its next holder would read them again).
func (s *Service) removeSettled(ctx context.Context, q *queue, now bool) (due time.Duration, err error) {
	if len(q.old) > 0 && q.old[0].unpurged > 0 {
		src := &q.old[0]
		if err := s.purgeOf(ctx, q, src.stream, src.filter, src.unpurged); err != nil {
			return 0, err
		}
		src.unpurged = 0
	}
	u := &q.unremoved
	if u.n == 0 {
		return 0, nil
	}
	qs := s.queues
	first := qs.firstSeq(q.part)
	if first > u.last {
		*u = unremoved{} // compacted
		return 0, nil
	}
	if age := time.Since(u.since); !now && qs.feedOn(q.part) && age < s.purgeAge() {
		return s.purgeAge() - age, nil
	}
	if u.sparse() && !s.noDeletes.Load() {
		err = s.deleteEach(ctx, q, u.seqs, first)
	} else {
		err = s.purgeOf(ctx, q, s.in.stream(q.part), q.filter, u.last)
	}
	if err != nil {
		return 0, err
	}
	*u = unremoved{}
	return 0, nil
}

// deleteEach removes the input's messages seqs (those at or above first: the others are gone),
// a few at a time. A stream that denies deletes is purged by subject instead, from then on.
func (s *Service) deleteEach(ctx context.Context, q *queue, seqs []uint64, first uint64) error {
	stream := s.in.stream(q.part)
	in, err := s.streams.get(ctx, stream)
	if err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, seq := range seqs {
		if seq < first {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := in.DeleteMsg(dctx, seq); err != nil && !gone(err) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	err = errors.Join(errs...)
	switch {
	case err == nil:
		return nil
	case deleteDenied(err):
		s.noDeletes.Store(true)
		s.log.Warn("the input stream denies deletes: forwarded jobs are purged by subject instead (slower when tenants' jobs are interleaved)", "stream", stream)
		return s.purgeOf(ctx, q, stream, q.filter, seqs[len(seqs)-1])
	}
	if ctx.Err() == nil {
		s.tel.settleError("delete")
		s.log.Warn("removing forwarded jobs from the input failed: the limiter is told they were stored, and the removal is tried again",
			"tenant", q.tenant, "stream", stream, "jobs", len(seqs), "err", errs[0])
	}
	q.owe.stored, q.owe.keep = max(q.owe.stored, q.storedID), true
	return err
}

// gone reports whether a delete's error says the message is not there (removed already).
func gone(err error) bool {
	var api *jetstream.APIError
	return errors.Is(err, jetstream.ErrMsgNotFound) || (errors.As(err, &api) &&
		(api.ErrorCode == errCodeSequenceNotFound || (api.ErrorCode == errCodeMsgDeleteFailed && strings.Contains(api.Description, "no message found"))))
}

// deleteDenied reports whether a delete's error is the stream refusing deletes.
func deleteDenied(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && api.ErrorCode == errCodeMsgDeleteFailed && strings.Contains(api.Description, "not permitted")
}

// purgeOf removes subject's messages of stream through sequence through, for q.
func (s *Service) purgeOf(ctx context.Context, q *queue, stream, subject string, through uint64) error {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := s.purgeThrough(pctx, stream, subject, through)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			s.tel.settleError("purge")
			s.log.Warn("removing forwarded jobs from the input failed: the limiter is told they were stored, and the removal is tried again",
				"tenant", q.tenant, "stream", stream, "through", through, "err", err)
		}
		q.owe.stored, q.owe.keep = max(q.owe.stored, q.storedID), true
	}
	return err
}

// purgeThrough removes the messages of stream on subject at or below sequence through.
func (s *Service) purgeThrough(ctx context.Context, stream, subject string, through uint64) error {
	st, err := s.streams.get(ctx, stream)
	if err != nil {
		return err
	}
	return st.Purge(ctx, jetstream.WithPurgeSubject(subject), jetstream.WithPurgeSequence(through+1))
}

// settleIdle ends a step that found q empty: what it owes the limiter is said (a call without
// jobs), its settled jobs are removed when due (it waits for that), and then it sleeps until
// its tenant publishes again. A queue that could not say what it owes (its tenant has no plan:
// no call is made) keeps it and waits: a change of plans wakes it, and its claim is said then.
func (s *Service) settleIdle(ctx context.Context, q *queue) stepResult {
	if !q.owe.empty() {
		// Said first: were the removal below to fail, and this replica to die, whoever reads the
		// jobs again must know they were stored.
		q.enter(deciding)
		d := s.cfg.Policy.Step(ctx, q.tenant, nil, q.claim(s.owner))
		if d.Err != nil {
			q.errs++
			return stepResult{next: stepRetry(q.errs)}
		}
		if d.Said {
			q.said()
		}
	}
	q.enter(removing)
	due, err := s.removeSettled(ctx, q, false)
	switch {
	case err != nil:
		return stepResult{next: stepRetry(1)}
	case due > 0:
		return stepResult{next: due, headless: true} // its settled jobs are removed then, unless compacted meanwhile
	case !q.owe.empty():
		return stepResult{next: unsaidRetry, headless: true} // idle would drop the queue, and its claim with it
	}
	q.errs = 0
	return stepResult{idle: true}
}

// unsaidRetry is how long a queue without jobs waits to say again what it owes when no limiter
// call could carry it (its tenant has no plan); a change of plans wakes it sooner.
const unsaidRetry = 5 * time.Second

// laneJobs reads jobs from the tenant's lane in the lanes stream of an earlier version: each
// carries the sequence it had in the input stream (its id, as then) and its subject.
func (s *Service) laneJobs(ctx context.Context, q *queue, msgs []*nats.Msg) []job {
	jobs := make([]job, 0, len(msgs))
	for _, m := range msgs {
		at, err := seqOf(m)
		if err != nil {
			break
		}
		h := m.Header
		j := job{tenant: q.tenant, header: h, data: m.Data, subject: h.Get(wire.HeaderInputSubject), stream: s.cfg.StreamIn, at: at, src: true, lane: true}
		if j.seq, err = strconv.ParseUint(h.Get(wire.HeaderInputSeq), 10, 64); err != nil || j.subject == "" {
			// Not a job an admitter moved (someone published to the lanes' subjects): dead-letter it.
			j.seq, j.subject = at, m.Subject
			j.wErr = fmt.Errorf("message %d of the lanes stream is not a job moved by the admitter (no %s / %s header)", at, wire.HeaderInputSeq, wire.HeaderInputSubject)
		} else {
			j.weight, j.wErr = wire.ParseWeight(h)
			j.maxWait, j.mwErr = wire.ParseMaxWait(h)
			j.priority, j.prErr = wire.ParsePriority(h)
		}
		j.id, j.out = wire.JobID(1, 0, j.seq), s.outSubject(j.subject)
		if t, err := time.Parse(time.RFC3339Nano, h.Get(wire.HeaderInputTime)); err == nil {
			j.stored = t
		}
		j.tries = q.tries(j.id)
		j.ctx, j.span = s.tel.startProcess(ctx, s.tel.processWait, h, j.subject, j.stream, j.seq, j.tries, s.cfg)
		jobs = append(jobs, j)
	}
	return jobs
}

// conclude settles a job whose verdict v (of decision d) was applied (err: what became of its
// message; nil: stored) and records the decision; waited: it was told to wait before.
func (s *Service) conclude(j *job, d *decision, v policy.Verdict, waited bool, err error) {
	defer j.span.End()
	if err != nil {
		j.span.RecordError(err)
		if s.pub.permanent(err) {
			// Not even a dead letter without the payload can be stored (headers over the
			// server's limits): nothing the admitter can do; it says so. The job stays where it
			// is, at the head of its tenant's queue.
			s.log.Error("a job can be neither forwarded nor dead-lettered: it is left where it is; remove it by hand",
				"subject", j.subject, "tenant", j.tenant, "sequence", j.seq, "err", err)
		}
		return
	}
	if v.Fate == wire.FateStored {
		return // decided before: no new decision
	}
	if v.Fate == wire.FateDead {
		s.log.Info("dead-lettered", "subject", j.subject, "tenant", j.tenant, "code", string(v.Code), "detail", v.Detail)
		if v.Code == wire.CodeExpired {
			s.tel.jobExpired(j, d.plan, v.WaitedFor)
		}
	}
	s.tel.conclude(j, d.plan, d.Reason, v)
	s.record(j, d, v, waited, false)
}

// concludeWait records a job that waits in its queue with verdict v: counted as a decision the
// first time it is told to wait (once per job, whether it is the head or behind it: a job above
// waited, the highest told to wait before this step), and the head remembered as the tenant's
// latest wait every time.
func (s *Service) concludeWait(q *queue, j *job, d *decision, v policy.Verdict, head bool, waited int64) {
	defer j.span.End()
	again := j.id <= waited
	if !again {
		if j.ordered {
			// Every job of the tenant up to it was asked about: q.waited says none of them
			// needs a lookup as admitted before (policy.Job.Again). A job read out of order
			// (priority.go) leaves it: it may be counted again when it waits again.
			q.waited = max(q.waited, j.id)
		}
		s.tel.conclude(j, d.plan, d.Reason, v)
	}
	if head || !again {
		s.record(j, d, v, false, again)
	}
}

// record tells Config.Activity what became of a job: verdict v of decision d (waited: it waited
// before it went; again: it was told to wait before).
func (s *Service) record(j *job, d *decision, v policy.Verdict, waited, again bool) {
	if s.cfg.Activity == nil {
		return
	}
	e := activity.Event{At: d.now, Tenant: j.tenant, Plan: d.plan, Fate: v.Fate, Weight: j.weight, Limit: d.limit,
		Wait: v.Wait, Code: v.Code, Again: again}
	if v.Fate.Forwarded() {
		e.Wait = 0
		if waited && !j.stored.IsZero() {
			e.Wait = max(e.At.Sub(j.stored), 0) // how long it waited
		}
	}
	s.cfg.Activity.Record(e)
}

// ownerOf is the limiter's name of a replica (bucket.OwnerID).
func ownerOf(replica string) int64 { return bucket.OwnerID(replica) }
