package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/admitter/admitter/subjects"
	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// doneTries is how many times a done message is sent while unanswered (see doneWait).
const doneTries = 13

// keepAlive keeps j's lease (renewals) and its delivery (InProgress) alive while its handler
// runs; the function it returns stops that and waits for it, a renewal in flight included, so
// that no renewal follows the done message. A renewal due at once (a job delivered before, or
// whose lease is past its middle) is sent before keepAlive returns, so before the handler runs.
//
// started says the job's start (see start) renewed its lease just now: the first renewal is due
// halfway through it.
func (w *Worker) keepAlive(base context.Context, m jetstream.Msg, j *Job, started bool) (stop func()) {
	k := keeper{job: j, progress: m.InProgress, every: w.progress, log: w.cfg.Logger}
	if j.Lease > 0 && j.LeaseLength > 0 {
		subject := w.leaseSubject(w.t.toRenew, w.t.renew, j)
		timeout := min(w.cfg.RequestTimeout, j.LeaseLength/2)
		k.renew = func(ctx context.Context) (wire.LeaseReply, error) {
			return w.request(ctx, timeout, subject, j, false, noCost, nil)
		}
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(base))
	first := time.Duration(-1)
	switch {
	case k.renew != nil && started:
		first = j.LeaseLength / 2
	case k.renew != nil:
		first = firstRenewal(time.Now(), j.LeaseDeadline(), j.LeaseLength, j.Attempt)
	}
	var wg sync.WaitGroup
	wg.Go(func() { k.run(ctx, first) })
	return func() { cancel(); wg.Wait() }
}

// start tells admitter that j is about to begin (a renew message with Admit-Start: true): its
// lease is renewed, or taken again if it ended while the job waited for a worker (the workers
// were away longer than a lease) and its slots are free. It reports whether the job may run; when
// it may not, wait is how long its slots stay taken (admitter's answer). When admitter does not
// answer, the job runs if the lease it was forwarded with has not ended, and otherwise goes back
// for a moment (wait); an admitter that does not know starts (it answers as to a renewal) lets
// it run.
func (w *Worker) start(ctx context.Context, j *Job) (ok bool, wait time.Duration) {
	subject := w.leaseSubject(w.t.toRenew, w.t.renew, j)
	sent := time.Now()
	rep, err := w.request(ctx, min(w.cfg.RequestTimeout, j.LeaseLength/2), subject, j, true, noCost, nil)
	switch {
	case err != nil:
		if d := j.LeaseDeadline(); !d.IsZero() && d.After(sent) {
			return true, 0
		}
		w.cfg.Logger.Warn("worker: the start of a job whose lease has ended is unanswered: it is put back", "tenant", j.Tenant, "lease", j.Lease, "err", err)
		return false, retryDelay(j.LeaseLength)
	case rep.Held:
		j.setDeadline(sent.Add(j.LeaseLength))
		return true, 0
	case rep.WaitMs > 0:
		return false, time.Duration(rep.WaitMs) * time.Millisecond
	}
	j.lost(sent)
	w.cfg.Logger.Warn("worker: the lease has ended and admitter does not take it again: the job runs outside its tenant's concurrency limit", "tenant", j.Tenant, "lease", j.Lease, "subject", j.Subject)
	return true, 0
}

// done ends j's lease with a done message carrying its cost and what o says of it, sent again
// while unanswered (doneTries in all, each try waiting doneWait): a repeat is harmless, admitter
// releasing and reconciling a lease once.
func (w *Worker) done(ctx context.Context, j *Job, o outcome) {
	subject := w.leaseSubject(w.t.toDone, w.t.done, j)
	var err error
	for try := 1; try <= doneTries; try++ {
		wait := doneWait(w.cfg.RequestTimeout, try)
		sent := time.Now()
		var rep wire.LeaseReply
		if rep, err = w.request(ctx, wait, subject, j, false, j.cost.Load(), &o); err == nil {
			// After a try unanswered, a lease not held may be one that try released.
			if !rep.Held && try == 1 {
				w.cfg.Logger.Info("worker: the lease had ended before the job was done", "tenant", j.Tenant, "lease", j.Lease, "subject", j.Subject)
			}
			return
		}
		select { // a try refused at once (no admitter answers the subject) is not sent again sooner
		case <-ctx.Done():
		case <-time.After(time.Until(sent.Add(wait))):
		}
	}
	w.cfg.Logger.Warn("worker: done message unanswered: the lease ends by itself", "tenant", j.Tenant, "lease", j.Lease, "subject", subject, "err", err)
}

// doneWait is how long the try-th done message waits for its answer: 100 ms for each of the
// first eight, then twice as long as the one before, at most timeout (5.8 s in all with the 2 s
// default). An answer takes a limiter call (milliseconds). One that does not come was most likely
// taken by a replica that stopped answering (paused, dying): the replicas take the tries of a
// message in turns drawn at random (a NATS queue group), so one sent again soon reaches another.
// The job's slot is held by nobody meanwhile, 100 ms for each try the silent replica takes (with
// one of three paused, six tries in a row once in 729 done messages). An admitter slow to answer
// gets a few repeats, each answered harmlessly.
func doneWait(timeout time.Duration, try int) time.Duration {
	return min(timeout, doneFirstWait<<max(try-doneQuickTries, 0))
}

// doneFirstWait and doneQuickTries: the first doneQuickTries tries of a done message wait
// doneFirstWait each (see doneWait).
const (
	doneFirstWait  = 100 * time.Millisecond
	doneQuickTries = 8
)

// request sends a done, renew or start message (start: Admit-Start) for j's lease, with its
// weight (which names the slots of a lease admitter lost: see README, Leases), Admit-Cost when
// cost ≥ 0 and, for a done message, what o says of the job, and reads admitter's answer,
// waiting at most timeout. An answer carrying an error is an error.
func (w *Worker) request(ctx context.Context, timeout time.Duration, subject string, j *Job, start bool, cost int64, o *outcome) (wire.LeaseReply, error) {
	var rep wire.LeaseReply
	if subject == "" {
		return rep, fmt.Errorf("worker: no lease subject for this job (its tenant cannot be a subject token)")
	}
	m := nats.NewMsg(subject)
	m.Header.Set(wire.HeaderLease, strconv.FormatInt(j.Lease, 10))
	m.Header.Set(wire.HeaderWeight, strconv.FormatInt(max(j.Weight, 1), 10))
	if start {
		m.Header.Set(wire.HeaderStart, "true")
	}
	if cost >= 0 {
		m.Header.Set(wire.HeaderCost, strconv.FormatInt(cost, 10))
	}
	if o != nil && o.report != "" && o.report != wire.OutcomeOK {
		m.Header.Set(wire.HeaderOutcome, o.report)
	}
	if o != nil && o.retryAfter > 0 {
		m.Header.Set(wire.HeaderDownstreamRetryAfter, wire.RetryAfterValue(min(o.retryAfter, wire.MaxRetryAfter)))
		if o.pool {
			m.Header.Set(wire.HeaderRetryScope, wire.RetryScopePool)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	r, err := w.cfg.Conn.RequestMsgWithContext(ctx, m)
	if err != nil {
		return rep, fmt.Errorf("worker: %s: %w", subject, err)
	}
	if err := json.Unmarshal(r.Data, &rep); err != nil {
		return rep, fmt.Errorf("worker: %s: answer %q: %w", subject, r.Data, err)
	}
	if rep.Error != "" {
		return rep, fmt.Errorf("worker: %s: admitter answered: %s", subject, rep.Error)
	}
	return rep, nil
}

// leaseSubject is j's done or renew subject under template t: its subject mapped by m (nil
// when Out's wildcards differ from t's), else t with j's tenant and every wildcard "job".
func (w *Worker) leaseSubject(m *subjects.Mapping, t subjects.Template, j *Job) string {
	if m != nil {
		if _, s, err := m.Map(j.Subject); err == nil {
			return s
		}
	}
	fill := make([]string, t.Wildcards())
	for i := range fill {
		fill[i] = "job"
	}
	s, _ := t.Subject(j.Tenant, fill...) // "" for a tenant no subject can carry: the message fails
	return s
}

// keeper keeps one running job's lease and delivery alive.
type keeper struct {
	job *Job
	// renew sends one renewal; nil: the job's lease is not renewed.
	renew func(context.Context) (wire.LeaseReply, error)
	// progress tells JetStream the delivery is still being worked on, every every (0: never).
	progress func() error
	every    time.Duration
	log      *slog.Logger
}

// run renews halfway through each lease, from first on; a renewal that fails is tried again
// after retryDelay; one answered that the lease is not held ends the renewals (the job's
// deadline is then in the past). It returns when ctx is done.
func (k *keeper) run(ctx context.Context, first time.Duration) {
	var t *time.Timer
	var renewC <-chan time.Time
	if k.renew != nil && first >= 0 {
		t = time.NewTimer(first)
		defer t.Stop()
		renewC = t.C
	}
	var progressC <-chan time.Time
	if k.every > 0 && k.progress != nil {
		p := time.NewTicker(k.every)
		defer p.Stop()
		progressC = p.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-progressC:
			if err := k.progress(); err != nil {
				k.log.Debug("worker: in progress", "subject", k.job.Subject, "err", err)
			}
		case <-renewC:
			next := k.renewOnce(ctx)
			switch {
			case ctx.Err() != nil:
				return
			case next < 0:
				renewC = nil
			default:
				t.Reset(next)
			}
		}
	}
}

// renewOnce sends one renewal and returns when the next is due: halfway through the renewed
// lease, or after retryDelay when it failed; -1 when the lease is no longer held (the job's
// deadline is then in the past) or ctx is done.
func (k *keeper) renewOnce(ctx context.Context) time.Duration {
	j := k.job
	sent := time.Now()
	rep, err := k.renew(ctx)
	switch {
	case ctx.Err() != nil:
		return -1
	case err != nil:
		k.log.Warn("worker: renew the lease", "tenant", j.Tenant, "lease", j.Lease, "err", err)
		return retryDelay(j.LeaseLength)
	case !rep.Held:
		j.lost(time.Now())
		k.log.Warn("worker: the lease has ended: the job runs outside its tenant's concurrency limit", "tenant", j.Tenant, "lease", j.Lease, "subject", j.Subject)
		return -1
	}
	j.setDeadline(sent.Add(j.LeaseLength))
	return max(time.Until(sent.Add(j.LeaseLength/2)), 0)
}

// firstRenewal is how long after now a job's first renewal is due: halfway through its lease,
// which ends at deadline (the forward's store time plus the lease's length), at once when that
// has passed; at once too for a job delivered before (attempt > 1), whose lease may have been
// renewed since, or have ended.
func firstRenewal(now, deadline time.Time, length time.Duration, attempt uint64) time.Duration {
	if attempt > 1 || deadline.IsZero() {
		return 0
	}
	return max(deadline.Add(-length/2).Sub(now), 0)
}

// retryDelay is how long after a failed renewal the next is tried: a tenth of the lease, from
// 10 ms to 1 s.
func retryDelay(length time.Duration) time.Duration {
	return min(max(length/10, 10*time.Millisecond), time.Second)
}
