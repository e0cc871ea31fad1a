package admission

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/admitter/admitter/subjects"
	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"go.opentelemetry.io/otel/metric"
)

// Service takes jobs from the input stream and forwards each when its tenant's plan allows:
// ingest decides jobs as they arrive, lanes hold those that must wait, members shares the lanes
// among replicas. Create it with New, prepare the streams with Setup, then Run it. Any number of
// services (replicas) may share one input stream and one limiter.
type Service struct {
	cfg     Config
	out     subjects.Mapping
	dead    subjects.Mapping
	log     *slog.Logger
	tel     *telemetry
	pub     *publisher
	ingest  *ingest
	lanes   *lanes
	leases  *leases
	members *members
	cons    jetstream.Consumer
	kv      jetstream.KeyValue
	stopped chan struct{}
	running atomic.Bool
	gauges  metric.Registration
	// forwarding counts, per tenant, the batches whose forwards are decided and not yet stored
	// and charged (see unstored.go); seq names their fences.
	forwarding struct {
		mu  sync.Mutex
		n   map[string]int
		seq uint64
	}
}

// A pull (the ingest consumer's, the lanes feed's) lasts pullExpiry and asks the server for a
// heartbeat every pullHeartbeat while it waits; two heartbeats missed and the client pulls
// again. A pull lost with a NATS node (paused, killed, a consumer leader moving) is thus
// replaced within 2 × pullHeartbeat; with jetstream's defaults for Consume (30 s, 15 s) the
// jobs a replica would have pulled waited up to 30 s after the node came back (make soak,
// NATS faults only: a tenant within its plan waited 15.7–28.5 s for one job).
const (
	pullExpiry    = 10 * time.Second
	pullHeartbeat = 2 * time.Second
)

// New validates the configuration and returns a service.
func New(cfg Config) (*Service, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	out, dead, err := Mappings(cfg.In, cfg.Out, cfg.Dead, cfg.Wait)
	if err != nil {
		return nil, err
	}
	if err := leaseSubjects(cfg); err != nil {
		return nil, err
	}
	if cfg.Replica == "" {
		cfg.Replica = nuid.Next()
	}
	tel, err := newTelemetry(cfg)
	if err != nil {
		return nil, fmt.Errorf("admission: metrics: %w", err)
	}
	s := &Service{cfg: cfg, out: out, dead: dead, log: cfg.Logger, tel: tel, stopped: make(chan struct{}),
		pub: newPublisher(cfg.JetStream, cfg.Logger), members: newMembers(cfg.Replica, cfg.Heartbeat, cfg.Logger)}
	s.ingest = newIngest(s)
	s.lanes = newLanes(s)
	s.leases = newLeases(s)
	s.members.changed = s.lanes.rebalance
	return s, nil
}

// Mappings checks the subject templates together and returns the input→output and input→dead
// mappings: output and dead must carry the input's wildcards, the lanes' subject (wait) has
// none, and no two may overlap (published jobs would be consumed again, or land in the wrong
// stream).
func Mappings(in, out, dead, wait subjects.Template) (toOut, toDead subjects.Mapping, err error) {
	if toOut, err = subjects.NewMapping(in, out); err != nil {
		return toOut, toDead, fmt.Errorf("%w: output subject: %w", ErrConfig, err)
	}
	if toDead, err = subjects.NewMapping(in, dead); err != nil {
		return toOut, toDead, fmt.Errorf("%w: dead subject: %w", ErrConfig, err)
	}
	if wait.Wildcards() != 0 {
		return toOut, toDead, fmt.Errorf("%w: wait subject %q: a lane is one subject per tenant: use {tenant} and literal tokens only", ErrConfig, wait.String())
	}
	all := []subjects.Template{in, out, dead, wait}
	for i := range all {
		for j := i + 1; j < len(all); j++ {
			if subjects.Overlap(all[i].Filter(), all[j].Filter()) {
				return toOut, toDead, fmt.Errorf("%w: subjects %q and %q overlap: forwarded, dead-lettered or waiting jobs would be consumed again or mixed up; use disjoint subjects",
					ErrConfig, all[i].String(), all[j].String())
			}
		}
	}
	return toOut, toDead, nil
}

// Setup creates the streams when absent and checks them when present (see Layout), and creates
// or updates the ingest consumer and the replicas bucket. A set-up that would lose jobs is an
// error wrapping ErrSetup.
func (s *Service) Setup(ctx context.Context) error {
	l := NewLayout(s.cfg)
	if mp := s.cfg.JetStream.Conn().MaxPayload(); mp > 2*InputHeadroom {
		l.In.MaxMsgSize = int32(mp - InputHeadroom)
	}
	if err := l.Ensure(ctx, s.cfg.JetStream, s.log); err != nil {
		return err
	}
	for _, name := range []string{s.cfg.StreamOut, s.cfg.StreamDead, s.cfg.StreamWait} {
		st, err := s.cfg.JetStream.Stream(ctx, name)
		if err != nil {
			return fmt.Errorf("%w: stream %s: %w", ErrSetup, name, err)
		}
		s.pub.learn(name, st.CachedInfo().Config.MaxMsgSize)
	}
	if err := s.dropRoundOneConsumer(ctx); err != nil {
		return err
	}
	cons, err := s.cfg.JetStream.CreateOrUpdateConsumer(ctx, s.cfg.StreamIn, l.Ingest)
	if err != nil {
		return fmt.Errorf("%w: consumer %s on stream %s: %w", ErrSetup, s.cfg.Consumer, s.cfg.StreamIn, err)
	}
	s.cons = cons
	if s.kv, err = s.cfg.JetStream.CreateOrUpdateKeyValue(ctx, l.Replicas); err != nil {
		return fmt.Errorf("%w: replicas bucket %s: %w", ErrSetup, l.Replicas.Bucket, err)
	}
	if s.gauges == nil {
		if err := s.registerGauges(); err != nil {
			return fmt.Errorf("admission: metrics: %w", err)
		}
	}
	return nil
}

// dropRoundOneConsumer deletes an ingest consumer left by an admitter that parked delayed jobs
// unacknowledged in it (MaxAckPending 50,000, no lanes): its settings cannot be updated in
// place, and the jobs it held are redelivered to the new one.
func (s *Service) dropRoundOneConsumer(ctx context.Context) error {
	c, err := s.cfg.JetStream.Consumer(ctx, s.cfg.StreamIn, s.cfg.Consumer)
	if errors.Is(err, jetstream.ErrConsumerNotFound) || err != nil {
		return nil
	}
	if c.CachedInfo().Config.Description != "admitter: shared by all replicas" {
		return nil
	}
	if err := s.cfg.JetStream.DeleteConsumer(ctx, s.cfg.StreamIn, s.cfg.Consumer); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("%w: replace the consumer %s of an earlier admitter: %w", ErrSetup, s.cfg.Consumer, err)
	}
	s.log.Info("replaced the consumer of an earlier admitter: jobs it held unacknowledged are redelivered", "consumer", s.cfg.Consumer)
	return nil
}

// registerGauges reports the consumer's backlog, the lanes, the output's state and the
// replicas on every collection.
func (s *Service) registerGauges() error {
	m := s.cfg.MeterProvider.Meter(instrumentationName)
	pending, err1 := m.Int64ObservableGauge(wire.MetricPending.Name, metric.WithDescription("Jobs stored on the input and not yet delivered to the admitter."))
	ackPending, err2 := m.Int64ObservableGauge(wire.MetricAckPending.Name, metric.WithDescription("Jobs delivered and being decided or forwarded (never jobs waiting for their plan)."))
	redelivered, err3 := m.Int64ObservableGauge(wire.MetricRedelivered.Name, metric.WithDescription("Jobs delivered more than once and not yet acknowledged."))
	lanes, err4 := m.Int64ObservableGauge(wire.MetricLanes.Name, metric.WithDescription("Tenants' lanes this replica runs."))
	laneJobs, err5 := m.Int64ObservableGauge(wire.MetricLaneJobs.Name, metric.WithDescription("Jobs waiting in the tenants' lanes (all replicas)."))
	blocked, err6 := m.Int64ObservableGauge(wire.MetricOutputBlocked.Name, metric.WithDescription("1 while jobs are held because a stream the admitter publishes to is full."))
	replicas, err7 := m.Int64ObservableGauge(wire.MetricReplicas.Name, metric.WithDescription("Live replicas this one sees, itself included."))
	if err := errors.Join(err1, err2, err3, err4, err5, err6, err7); err != nil {
		return err
	}
	reg, err := m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		o.ObserveInt64(lanes, int64(s.lanes.count()))
		o.ObserveInt64(replicas, int64(s.members.count()))
		b := int64(0)
		if held, _ := s.pub.blocked(); held {
			b = 1
		}
		o.ObserveInt64(blocked, b)
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		info, err := s.cons.Info(ctx)
		if err != nil {
			return fmt.Errorf("consumer info: %w", err)
		}
		o.ObserveInt64(pending, int64(info.NumPending))
		o.ObserveInt64(ackPending, int64(info.NumAckPending))
		o.ObserveInt64(redelivered, int64(info.NumRedelivered))
		if st, err := s.cfg.JetStream.Stream(ctx, s.cfg.StreamWait); err == nil {
			o.ObserveInt64(laneJobs, int64(st.CachedInfo().State.Msgs))
		}
		return nil
	}, pending, ackPending, redelivered, lanes, laneJobs, blocked, replicas)
	s.gauges = reg
	return err
}

// Ready reports whether the service can admit jobs now: consuming, NATS connected, the limiter
// reachable (or the fail mode forwards without it), and no stream it publishes to full. The
// error says what is missing.
func (s *Service) Ready(ctx context.Context) error {
	select {
	case <-s.stopped:
		return errors.New("stopped")
	default:
	}
	if !s.running.Load() || s.cons == nil {
		return errors.New("not consuming yet")
	}
	if st := s.cfg.JetStream.Conn().Status(); st != nats.CONNECTED {
		return fmt.Errorf("nats %s", st)
	}
	if held, why := s.pub.blocked(); held {
		return errors.New(why)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := s.cfg.Policy.Ping(ctx); err != nil && s.cfg.Policy.FailMode() == "closed" {
		return fmt.Errorf("limiter unreachable and the fail mode is closed: %w", err)
	}
	return nil
}

// PlansChanged makes every lane ask again now: the plans, overrides or pauses changed, and the
// jobs waiting follow them (a faster plan speeds them up, a resume lets them go).
func (s *Service) PlansChanged() { s.lanes.wakeAll() }

// pause waits while a stream the admitter publishes to is full: no new batch is started, so
// pulling stops once the jobs in hand fill the window.
func (s *Service) pause(ctx context.Context) {
	for {
		if held, _ := s.pub.blocked(); !held {
			return
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// Run consumes until ctx ends, then stops pulling and settles the jobs in flight within
// ShutdownTimeout. It returns nil after a clean stop. Run may be called once.
func (s *Service) Run(ctx context.Context) error {
	if s.cons == nil {
		return fmt.Errorf("%w: Run before Setup", ErrConfig)
	}
	if !s.running.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: Run called twice", ErrConfig)
	}
	defer close(s.stopped)
	defer func() {
		if s.gauges != nil { // nothing is asked of the servers once the service has stopped
			_ = s.gauges.Unregister()
		}
	}()
	// Jobs in flight finish on their own context, so a stop signal does not abort them midway;
	// it is cancelled only if settling takes longer than ShutdownTimeout.
	work, abort := context.WithCancel(context.WithoutCancel(ctx))
	defer abort()
	memberCtx, leave := context.WithCancel(work)
	var members sync.WaitGroup
	members.Go(func() { s.members.run(memberCtx, s.kv) })
	defer func() { leave(); members.Wait() }()

	if err := s.lanes.start(ctx); err != nil {
		return err
	}
	defer s.lanes.stop()
	if err := s.leases.start(work); err != nil {
		return err
	}
	defer s.leases.stop() // before the lanes stop: the last releases may wake them
	schedCtx, stopScheduling := context.WithCancel(work)
	var laneWorkers sync.WaitGroup
	laneWorkers.Go(func() { s.lanes.schedule(schedCtx) })
	wakeOnRecovery := s.lanes.recoveryWaker()
	laneWorkers.Go(func() { wakeOnRecovery(schedCtx) })
	for range s.cfg.LaneWorkers {
		laneWorkers.Go(func() { s.lanes.work(schedCtx, work) })
	}
	defer func() { stopScheduling(); laneWorkers.Wait() }()

	var workers sync.WaitGroup
	for range s.cfg.Workers {
		workers.Go(func() { s.ingest.run(work) })
	}
	cc, err := s.cons.Consume(s.ingest.add,
		// Bytes bound every pull too, under the server's buffer for one client (64 MiB by default):
		// megabyte jobs must not ask for more than it can hold.
		jetstream.PullMaxMessagesWithBytesLimit(s.cfg.PullBuffer, max(s.cfg.InFlightBytes/2, 1<<20)),
		jetstream.PullExpiry(pullExpiry), jetstream.PullHeartbeat(pullHeartbeat),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			s.log.Warn("consume", "err", err)
		}))
	if err != nil {
		s.ingest.close()
		workers.Wait()
		return fmt.Errorf("admission: consume %s/%s: %w", s.cfg.StreamIn, s.cfg.Consumer, err)
	}
	s.log.Info("admitting", "stream", s.cfg.StreamIn, "consumer", s.cfg.Consumer, "in", s.cfg.In.String(),
		"out", s.cfg.Out.String(), "dead", s.cfg.Dead.String(), "lanes", s.cfg.Wait.String(), "replica", s.cfg.Replica,
		"workers", s.cfg.Workers, "fail_mode", string(s.cfg.Policy.FailMode()))
	<-ctx.Done()

	s.log.Info("stopping: settling jobs in flight", "bound", s.cfg.ShutdownTimeout.String())
	// One bound for the whole shutdown: its timer fires once, so a wait that saw it fire is
	// remembered in late, and the waits after it do not wait for it again.
	bound := time.NewTimer(s.cfg.ShutdownTimeout)
	defer bound.Stop()
	late := false
	cc.Drain() // stop pulling; what is buffered still reaches ingest
	select {
	case <-cc.Closed():
	case <-bound.C:
		late = true
		abort()
		cc.Stop()
		<-cc.Closed()
	}
	s.ingest.close()
	stopScheduling() // no new lane steps; steps under way finish
	done := make(chan struct{})
	go func() { workers.Wait(); laneWorkers.Wait(); close(done) }()
	if !late {
		select {
		case <-done:
			s.log.Info("stopped")
			return nil
		case <-bound.C:
			abort()
		}
	}
	<-done // every step of a job is bounded by the aborted context or its own timeout
	s.log.Warn("stopped after the shutdown bound; unsettled jobs are redelivered after the ack wait")
	return nil
}
