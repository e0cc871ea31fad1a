package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/policy"
	"github.com/admitter/admitter/subjects"
	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// leases ends and extends the leases of forwarded jobs whose plan has a concurrency limit (see
// bucket.KindConcurrency), and applies what a done message says of any job, leased or not (its
// Admit-Retry-After and Admit-Outcome: see policy.Policy.Lease). A lease is released when the
// job is done, by any of:
//
//   - a message on the done subject (Config.Done, e.g. jobs.done.<tenant>.<anything>) carrying
//     the forwarded job's Admit-Lease or Nats-Msg-Id header, and optionally Admit-Cost;
//   - with Config.LeaseAcks, a consumer of the output stream acking the forwarded job, seen in
//     the server's ack metric ($JS.EVENT.METRIC.CONSUMER.ACK.<stream>.<consumer>, sent for
//     every explicit ack when the consumer's SampleFrequency is "100%": the event names the
//     stream sequence, whose message's headers name the tenant and the lease), or terminating
//     it ($JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.<stream>.<consumer>);
//
// and renewed by a message on the renew subject (Config.Renew). The server sends no event for
// an in-progress ack (+WPI: consumer.go progressUpdate samples nothing), so renewal needs that
// message. Every replica listens in one queue group: each message is handled once. Messages are
// core NATS: one lost (no replica up, a full buffer) leaves the lease to end by itself. A
// release that frees a slot is broadcast on the wake subject, so that the replica running the
// tenant's queue asks again at once instead of at the lease's end; a pool slot freed wakes the
// tenants whose turn it is (bucket.LeaseResult.Wakes), marked as a wake for the pool (wakeFor):
// only a queue whose head waits for its pool asks again for it.
type leases struct {
	s    *Service
	msgs chan *nats.Msg
	subs []*nats.Subscription
	out  jetstream.Stream
	wake string // the wake subject: every replica, no queue group
	ack  string // prefixes of the output stream's ack metrics and terminations
	term string
	quit chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

func newLeases(s *Service) *leases {
	return &leases{s: s, quit: make(chan struct{}),
		wake: "_ADMITTER." + s.cfg.Consumer + ".wake",
		ack:  "$JS.EVENT.METRIC.CONSUMER.ACK." + s.cfg.StreamOut + ".",
		term: "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED." + s.cfg.StreamOut + "."}
}

// leaseSubjects checks the done and renew subjects against the others: a lease message must not
// be stored as a job, forwarded or dead-lettered.
func leaseSubjects(c Config) error {
	for _, l := range []struct {
		name string
		t    subjects.Template
	}{{"done", c.Done}, {"renew", c.Renew}} {
		if l.t.String() == "" {
			continue
		}
		for _, o := range []struct {
			name string
			t    subjects.Template
		}{{"in", c.In}, {"out", c.Out}, {"dead", c.Dead}, {"wait", c.Wait}, {"done", c.Done}} {
			if o.name == l.name || o.t.String() == "" {
				continue
			}
			if subjects.Overlap(l.t.Filter(), o.t.Filter()) {
				return fmt.Errorf("%w: %s subject %q overlaps the %s subject %q: use disjoint subjects", ErrConfig, l.name, l.t.String(), o.name, o.t.String())
			}
		}
	}
	return nil
}

// start subscribes and starts the workers; stop undoes it.
func (l *leases) start(ctx context.Context) error {
	c := l.s.cfg
	nc := c.JetStream.Conn()
	l.msgs = make(chan *nats.Msg, c.LeaseBuffer)
	queue := c.Consumer + "-leases"
	var filters []string
	for _, t := range []subjects.Template{c.Done, c.Renew} {
		if t.String() != "" {
			filters = append(filters, t.Filter())
		}
	}
	if c.LeaseAcks {
		out, err := c.JetStream.Stream(ctx, c.StreamOut)
		if err != nil {
			return fmt.Errorf("admission: leases: stream %s: %w", c.StreamOut, err)
		}
		l.out = out
		filters = append(filters, l.ack+"*", l.term+"*")
	}
	for _, f := range filters {
		sub, err := nc.ChanQueueSubscribe(f, queue, l.msgs)
		if err != nil {
			l.stop()
			return fmt.Errorf("admission: leases: subscribe %s: %w", f, err)
		}
		l.subs = append(l.subs, sub)
	}
	sub, err := nc.Subscribe(l.wake, func(m *nats.Msg) {
		l.s.queues.wakeTenant(string(m.Data), m.Header.Get(wakeFor) == wakeForPool)
	})
	if err != nil {
		l.stop()
		return fmt.Errorf("admission: leases: subscribe %s: %w", l.wake, err)
	}
	l.subs = append(l.subs, sub)
	for range c.LeaseWorkers {
		l.wg.Go(func() {
			for {
				select {
				case <-l.quit:
					return
				case m := <-l.msgs:
					l.handle(ctx, m)
				}
			}
		})
	}
	return nil
}

// stop unsubscribes and waits for the messages being handled (each bounded by the limiter's
// timeout and a read of the output stream). Messages still buffered are dropped: their leases
// end by themselves. Safe to call twice.
func (l *leases) stop() {
	l.once.Do(func() {
		for _, s := range l.subs {
			_ = s.Unsubscribe()
		}
		close(l.quit)
		l.wg.Wait()
	})
}

// handle releases or renews the lease one message names.
func (l *leases) handle(ctx context.Context, m *nats.Msg) {
	c := l.s.cfg
	var path, tenant string
	var lease, cost, weight int64 = 0, bucket.NoCost, 1
	var rep bucket.Report
	op := policy.LeaseRelease
	var err error
	switch {
	case strings.HasPrefix(m.Subject, l.ack) || strings.HasPrefix(m.Subject, l.term):
		path = wire.LeasePathAck
		if strings.HasPrefix(m.Subject, l.term) {
			path = wire.LeasePathTerm
			rep.Outcome = bucket.DownstreamFailed // a consumer that terminates a job gives up on it
		}
		var ok bool
		if tenant, lease, ok, err = l.forwarded(ctx, m.Data); err == nil && !ok {
			return // not a job holding a lease: nothing to count
		}
	default:
		var ok bool
		if tenant, ok = c.Done.Match(m.Subject); ok && c.Done.String() != "" {
			path = wire.LeasePathDone
			lease, err = wire.ParseLease(m.Header, c.StreamIn)
			if err == nil {
				cost, err = wire.ParseCost(m.Header)
			}
			if err == nil {
				rep, err = parseReport(m.Header, time.Now())
			}
		} else if tenant, ok = c.Renew.Match(m.Subject); ok && c.Renew.String() != "" {
			path, op = wire.LeasePathRenew, policy.LeaseRenew
			lease, err = wire.ParseLease(m.Header, c.StreamIn)
			var start bool
			if err == nil {
				start, err = wire.ParseStart(m.Header)
			}
			if start {
				path, op = wire.LeasePathStart, policy.LeaseStart
			}
		} else {
			return
		}
		if err == nil {
			// The job's weight names the slots of a lease the limiter does not hold (see
			// bucket.LeaseRequest.Weight); the worker library sends the forward's.
			weight, err = wire.ParseWeight(m.Header)
		}
	}
	reply := wire.LeaseReply{Tenant: tenant, Lease: lease}
	result := "invalid"
	if err == nil {
		var res bucket.LeaseResult
		var plan *bucket.Plan
		res, plan, err = c.Policy.Lease(ctx, op, tenant, lease, weight, cost, rep)
		l.s.tel.leasesExpired(ctx, res.LeasesExpired)
		if err == nil && op == policy.LeaseRelease && (res.Held || !plan.Leases()) {
			// A job without a lease is counted by its done message, untimed (nothing says when
			// it began downstream); one with a lease by the release of the lease, once.
			l.s.tel.jobDone(ctx, plan, tenant, rep.Outcome, res.Held, res.Ran)
		}
		if res.Pool != nil {
			if l.s.tel.poolSeen(*res.Pool) {
				l.s.wake(tenant) // its probe closed the breaker: its queue, held back by it, goes on
			}
		}
		switch {
		case errors.Is(err, policy.ErrNoLeases), errors.Is(err, bucket.ErrUnknownTenant), errors.Is(err, bucket.ErrInvalidTenant):
			result = "no-lease"
		case err != nil:
			result = "error"
			l.s.log.Warn("lease", "path", path, "tenant", tenant, "lease", lease, "err", err)
		case !plan.Leases():
			result = "no-lease" // a done message of a job without a lease: what it said is applied
		case !res.Held && op == policy.LeaseStart:
			result = "wait"
		case !res.Held:
			result = "not-held"
		case op == policy.LeaseRenew:
			result = "renewed"
		case op == policy.LeaseStart:
			result = "started"
		default:
			result = "released"
		}
		reply.Held, reply.Weight = res.Held, res.Weight
		if !res.Ends.IsZero() {
			reply.Ends = res.Ends.UTC().Format(time.RFC3339Nano)
		}
		if !res.Held && op == policy.LeaseStart {
			reply.WaitMs = max(wire.Millis(res.Wait), minStartWait)
		}
		woken := false
		if (res.Held && !res.PoolOnly && op == policy.LeaseRelease) || res.LeasesExpired > 0 {
			l.s.wake(tenant) // the tenant's queue may go on now
			woken = true
		}
		for _, t := range res.Wakes {
			if t != tenant || !woken {
				l.s.wakeForPool(t) // the capacity freed in the pool is that tenant's turn (its own too)
			}
		}
	}
	if err != nil {
		reply.Error = err.Error()
	}
	l.s.tel.leaseMessage(ctx, path, result)
	if m.Reply != "" && path != wire.LeasePathAck && path != wire.LeasePathTerm {
		if b, jerr := json.Marshal(reply); jerr == nil {
			_ = m.Respond(b)
		}
	}
}

// parseReport reads what a done message says of its job at now: Admit-Outcome,
// Admit-Retry-After and Admit-Retry-Scope.
func parseReport(h nats.Header, now time.Time) (bucket.Report, error) {
	var rep bucket.Report
	o, err := wire.ParseOutcome(h)
	if err != nil {
		return rep, err
	}
	if rep.Outcome, err = bucket.ParseDownstreamOutcome(o); err != nil {
		return rep, err
	}
	rep.RetryAfter, rep.PoolScope, err = wire.ParseRetryAfter(h, now)
	rep.RetryAfter = rep.RetryAfter.Truncate(time.Microsecond)
	return rep, err
}

// minStartWait is the shortest wait a start not held is told (ms): a job whose slots will not
// be free soon is not asked about again in a loop.
const minStartWait = 100

// forwarded reads an ack metric or a termination advisory of the output stream and the
// forwarded job it names: its tenant and lease. ok is false for a message without a lease.
func (l *leases) forwarded(ctx context.Context, event []byte) (tenant string, lease int64, ok bool, err error) {
	var e struct {
		StreamSeq uint64 `json:"stream_seq"`
	}
	if err := json.Unmarshal(event, &e); err != nil || e.StreamSeq == 0 {
		return "", 0, false, fmt.Errorf("an event without a stream sequence: %q", event)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	msg, err := l.out.GetMsg(ctx, e.StreamSeq)
	if err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return "", 0, false, nil // gone (its age): its lease ended long ago
		}
		return "", 0, false, fmt.Errorf("read %s sequence %d: %w", l.s.cfg.StreamOut, e.StreamSeq, err)
	}
	if msg.Header.Get(wire.HeaderLease) == "" {
		return "", 0, false, nil
	}
	lease, err = wire.ParseLease(msg.Header, l.s.cfg.StreamIn)
	return msg.Header.Get(wire.HeaderTenant), lease, err == nil, err
}

// leaseAttrs are the attributes of the lease messages metric.
func leaseAttrs(path, result string) metric.MeasurementOption {
	return metric.WithAttributes(attribute.String("path", path), attribute.String("result", result))
}

// A wake message's payload is the tenant; its header wakeFor says what capacity freed: absent,
// the tenant's own (a lease of its own ended: whatever its head waits for may fit now);
// wakeForPool, its pool's (only a queue whose head waits for the pool asks again).
const (
	wakeFor     = "Wake-For"
	wakeForPool = "pool"
)

// wake tells every replica that tenant's queue may go now: capacity of its own freed (the
// replica that owns it asks again).
func (s *Service) wake(tenant string) {
	_ = s.cfg.JetStream.Conn().Publish(s.leases.wake, []byte(tenant))
}

// wakeForPool tells every replica that the capacity its pool freed is tenant's turn: its
// queue asks again if its head waits for the pool (not if its own limits bind).
func (s *Service) wakeForPool(tenant string) {
	_ = s.cfg.JetStream.Conn().PublishMsg(&nats.Msg{Subject: s.leases.wake, Data: []byte(tenant), Header: nats.Header{wakeFor: []string{wakeForPool}}})
}
