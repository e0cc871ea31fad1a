package worker

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go/jetstream"
)

// A Worker runs a Handler over the jobs its consumer delivers. Build it with New, run it with
// Start, end it with Stop. Its methods are safe for concurrent use.
type Worker struct {
	cfg      Config
	t        templates
	progress time.Duration // how often a running job's delivery is kept alive (InProgress)

	slots   chan struct{} // one per running handler
	running atomic.Int64
	quit    chan struct{} // closed by halt: no more jobs are started
	stopped chan struct{} // closed when the dispatcher and every handler have returned

	mu      sync.Mutex
	state   int // idle, started or stopped
	it      jetstream.MessagesContext
	cancel  context.CancelFunc // cancels the handlers' contexts (a hard stop)
	halting sync.Once
}

const (
	idle = iota
	started
	stopped
)

// New checks c and returns a Worker that has not started. Errors wrap ErrConfig and name the
// field.
func New(c Config) (*Worker, error) {
	c = c.withDefaults()
	t, err := c.validate()
	if err != nil {
		return nil, err
	}
	return &Worker{cfg: c, t: t, progress: ackWait(c.Consumer) / 2,
		slots: make(chan struct{}, c.Concurrency), quit: make(chan struct{}), stopped: make(chan struct{})}, nil
}

// Start begins pulling jobs from the consumer and handing them to the handler; it returns at
// once. ctx is the parent of the handlers' contexts: when it is done, the Worker stops as after
// Stop's bound (no more jobs are started and the running handlers' contexts are cancelled).
// Pass a context that outlives the graceful stop (context.Background(), or
// context.WithoutCancel of your signal context) and call Stop to stop gracefully. A Worker
// starts once: again, Start returns ErrStarted, or ErrStopped after Stop.
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch w.state {
	case started:
		return ErrStarted
	case stopped:
		return ErrStopped
	}
	it, err := w.cfg.Consumer.Messages(jetstream.PullMaxMessages(w.cfg.Concurrency))
	if err != nil {
		return fmt.Errorf("worker: start: %w", err)
	}
	base, cancel := context.WithCancel(ctx)
	w.state, w.it, w.cancel = started, it, cancel
	unwatch := context.AfterFunc(base, w.halt)
	go w.dispatch(base, it, unwatch)
	return nil
}

// Stop stops taking jobs (those the consumer delivered ahead are Nak'd, to be delivered again
// at once) and waits for the running handlers to return and their deliveries to be settled,
// until ctx is done. Then it cancels the contexts of the handlers still running (a hard stop:
// one that returns an error now is Nak'd, keeping its lease) and returns an error wrapping
// ctx's; Stopped tells when they have returned. Stop is safe to call more than once and before
// Start (the Worker then never starts).
func (w *Worker) Stop(ctx context.Context) error {
	w.mu.Lock()
	if w.state == idle {
		w.state = stopped
		close(w.stopped)
	}
	w.state = stopped
	w.mu.Unlock()
	w.halt()
	select {
	case <-w.stopped:
		return nil
	case <-ctx.Done():
	}
	running := w.running.Load() // at the bound: once cancelled, they return
	w.cancel()
	return fmt.Errorf("worker: stop: %d handlers still running: %w", running, ctx.Err())
}

// Stopped is closed once the Worker has stopped: every handler has returned and its delivery
// is settled. It is closed as well when the consumer ends by itself (deleted, or the
// connection closed).
func (w *Worker) Stopped() <-chan struct{} { return w.stopped }

// halt stops taking jobs: the iterator is drained (what it holds is still returned by Next,
// then ErrMsgIteratorClosed), and the dispatcher Naks what it gets from now on.
func (w *Worker) halt() {
	w.mu.Lock()
	it := w.it
	w.mu.Unlock()
	if it == nil {
		return
	}
	w.halting.Do(func() {
		close(w.quit)
		it.Drain()
	})
}

func (w *Worker) halted() bool {
	select {
	case <-w.quit:
		return true
	default:
		return false
	}
}

// dispatch hands each delivery to a handler goroutine, at most Concurrency at once, until the
// iterator is closed; then it waits for the handlers and closes stopped. It owns the handler
// goroutines.
func (w *Worker) dispatch(base context.Context, it jetstream.MessagesContext, unwatch func() bool) {
	var handlers sync.WaitGroup
	defer func() {
		handlers.Wait()
		unwatch()
		w.cancel()
		close(w.stopped)
	}()
	for {
		slot := false
		select {
		case w.slots <- struct{}{}:
			slot = true
		case <-w.quit:
		}
		m, err := it.Next()
		if err != nil {
			if slot {
				<-w.slots
			}
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return
			}
			// A terminal error (the consumer deleted) stops the iterator: the next Next says so.
			w.cfg.Logger.Error("worker: next job", "err", err)
			select {
			case <-w.quit:
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		if !slot || w.halted() {
			_ = m.Nak() // delivered ahead while stopping: to another worker, at once
			if slot {
				<-w.slots
			}
			continue
		}
		w.running.Add(1)
		handlers.Go(func() {
			defer func() { w.running.Add(-1); <-w.slots }()
			w.run(base, m)
		})
	}
}

// run handles one delivery: the job's start (its slots taken again if its lease ended while it
// waited), its handler with the lease kept alive, then the outcome.
func (w *Worker) run(base context.Context, m jetstream.Msg) {
	j := w.newJob(m)
	started := false
	// A job delivered again, or whose lease is past its middle (it waited in the output: the
	// workers were busy or away), starts by asking for its slots (see start); one delivered
	// promptly holds the lease it was forwarded with, renewed halfway through as usual.
	if j.Lease > 0 && j.LeaseLength > 0 && firstRenewal(time.Now(), j.LeaseDeadline(), j.LeaseLength, j.Attempt) == 0 {
		var wait time.Duration
		if started, wait = w.start(base, j); !started && wait > 0 {
			// Its tenant's (or pool's) slots are taken by jobs running now: it goes back to the
			// consumer for as long as admitter says, without running.
			if err := m.NakWithDelay(wait); err != nil {
				w.cfg.Logger.Warn("worker: put back a job whose slots are taken", "tenant", j.Tenant, "subject", j.Subject, "err", err)
			}
			return
		}
	}
	ctx, cancel := context.WithCancel(base)
	defer cancel()
	stop := w.keepAlive(base, m, j, started)
	err := w.call(ctx, j)
	stop()
	o := outcomeOf(err, base.Err() != nil)
	w.apply(base, m, j, o)
}

// call runs the handler, a panic being an error.
func (w *Worker) call(ctx context.Context, j *Job) (err error) {
	defer func() {
		if p := recover(); p != nil {
			w.cfg.Logger.Error("worker: handler panicked", "tenant", j.Tenant, "subject", j.Subject, "panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("worker: handler panicked: %v", p)
		}
	}()
	return w.cfg.Handler(ctx, j)
}

// settle is how a delivery is settled.
type settle int

const (
	ack  settle = iota // done
	term               // failed for good: not delivered again
	nak                // delivered again (after outcome.delay), holding its lease
)

// outcome is what follows a handler's return: whether the lease is released by a done message,
// and how the delivery is settled.
type outcome struct {
	release bool
	settle  settle
	delay   time.Duration // nak
	reason  string        // term
	// report is what the done message says of the job (Admit-Outcome): ok, failed or
	// overloaded; retryAfter and pool its Admit-Retry-After (0: none) and its scope.
	report     string
	retryAfter time.Duration
	pool       bool
}

// says reports whether o tells admitter something beyond the end of a lease: a job that did not
// go well, or a Retry-After. A job without a lease sends a done message only then.
func (o outcome) says() bool {
	return (o.report != "" && o.report != wire.OutcomeOK) || o.retryAfter > 0
}

// outcomeOf is the outcome of a handler that returned err; hard says its context was
// cancelled by a hard stop.
func outcomeOf(err error, hard bool) outcome {
	var r *RetryError
	var o *OverloadedError
	switch {
	case err == nil:
		return outcome{release: true, settle: ack, report: wire.OutcomeOK}
	case errors.As(err, &r):
		return outcome{settle: nak, delay: r.After}
	case errors.As(err, &o):
		return outcome{release: true, settle: nak, delay: o.After, report: wire.OutcomeOverloaded, retryAfter: o.RetryAfter, pool: o.Pool}
	case hard:
		return outcome{settle: nak}
	}
	return outcome{release: true, settle: term, reason: termReason(err), report: wire.OutcomeFailed}
}

// maxReason bounds a termination's reason, which the server puts in its advisory.
const maxReason = 256

// termReason is err as one line of at most maxReason bytes.
func termReason(err error) string {
	s := strings.Join(strings.Fields(err.Error()), " ")
	if len(s) > maxReason {
		n := maxReason
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		s = s[:n]
	}
	return s
}

// apply sends the done message when o releases the lease (for a job without a lease, when o
// has something to say: see says), then settles the delivery.
func (w *Worker) apply(base context.Context, m jetstream.Msg, j *Job, o outcome) {
	if o.release && (j.Lease > 0 || o.says()) {
		w.done(context.WithoutCancel(base), j, o)
	}
	var err error
	switch o.settle {
	case ack:
		err = m.Ack()
	case term:
		err = m.TermWithReason(o.reason)
	case nak:
		err = m.NakWithDelay(o.delay)
	}
	if err != nil {
		w.cfg.Logger.Warn("worker: settle the delivery", "tenant", j.Tenant, "subject", j.Subject, "err", err)
	}
}

// newJob reads a delivery.
func (w *Worker) newJob(m jetstream.Msg) *Job {
	h := m.Headers()
	j := &Job{Subject: m.Subject(), Header: h, Data: m.Data(), Weight: 1, Attempt: 1}
	j.cost.Store(noCost)
	var stored time.Time
	if meta, err := m.Metadata(); err == nil {
		j.Attempt, stored = meta.NumDelivered, meta.Timestamp
	}
	var ok bool
	if j.Tenant, ok = w.t.out.Match(j.Subject); !ok {
		j.Tenant = h.Get(wire.HeaderTenant)
	}
	j.Plan = h.Get(wire.HeaderPlan)
	if wt, err := wire.ParseWeight(h); err == nil {
		j.Weight = wt
	}
	if h.Get(wire.HeaderLease) == "" || j.Tenant == "" {
		return j
	}
	lease, err := wire.ParseLease(h, "")
	if err != nil {
		w.cfg.Logger.Warn("worker: a forward's lease", "subject", j.Subject, "err", err)
		return j
	}
	j.Lease = lease
	if j.LeaseLength, err = wire.ParseLeaseLength(h); err != nil {
		w.cfg.Logger.Warn("worker: a forward's lease length", "subject", j.Subject, "err", err)
	}
	if j.LeaseLength == 0 {
		j.LeaseLength = w.cfg.Lease
	}
	if j.LeaseLength > 0 && !stored.IsZero() {
		j.deadline = stored.Add(j.LeaseLength)
	}
	return j
}
