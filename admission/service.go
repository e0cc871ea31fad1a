package admission

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/subjects"
	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Service forwards each tenant's jobs from the input stream when its plan allows: the input's
// partitions (input.go) are shared among replicas (owners.go), the tenants' queues (queues.go)
// of a partition are read in place by its holder and stepped by workers in turn (step.go).
// Create it with New, prepare the streams with Setup, then Run it. Any number of services
// (replicas) may share one input and one limiter.
type Service struct {
	cfg     Config
	in      input
	out     subjects.Mapping
	dead    subjects.Mapping
	log     *slog.Logger
	tel     *telemetry
	pub     *publisher
	queues  *queues
	leases  *leases
	owners  *owners
	reader  *reader
	streams streams
	olds    olds
	owner   int64   // this replica's name in the limiter (bucket.OwnerID)
	router  *router // fail mode local's routes between replicas (nil: none)
	// moves are the partitions being taken or given up (see startPart, stopPart).
	moves sync.WaitGroup
	// legacyLanes: the lanes stream of an earlier version holds jobs, read first per tenant.
	legacyLanes atomic.Bool
	// noDeletes: the input denies deletes; settled jobs are purged by subject only.
	noDeletes atomic.Bool
	setUp     bool
	stopped   chan struct{}
	running   atomic.Bool
	gauges    metric.Registration

	// unmapped: jobs stored in an older input stream while this replica runs (unmapped.go).
	unmapped unmapped
}

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
	ps := Partitions(cfg.In, cfg.StreamIn, cfg.Partitions)
	if _, err := subjects.NewPartitions(ps.In, ps.Prefix, ps.N); err != nil {
		return nil, fmt.Errorf("%w: partitions: %w", ErrConfig, err)
	}
	s := &Service{cfg: cfg, in: input{ps: ps, in: cfg.StreamIn}, out: out, dead: dead, log: cfg.Logger, tel: tel, stopped: make(chan struct{}),
		pub: newPublisher(cfg.JetStream, cfg.Logger), owners: newOwners(cfg.Replica, cfg.Partitions, cfg.Heartbeat, cfg.Logger),
		owner: ownerOf(cfg.Replica), streams: streams{js: cfg.JetStream}}
	s.queues = newQueues(s)
	s.leases = newLeases(s)
	if cfg.Fallback != nil {
		s.router = newRouter(s)
		cfg.Fallback.Route(s.router, cfg.Policy.Plans)
	}
	return s, nil
}

// Mappings checks the subject templates together and returns the input→output and input→dead
// mappings: output and dead must carry the input's wildcards, the legacy lanes' subject (wait)
// has none, and no two may overlap (published jobs would be read again, or land in the wrong
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

// Setup creates the streams when absent and checks them when present (see Layout), creates or
// updates the replicas bucket, deletes the input consumer of an earlier version, and finds
// whether that version left jobs in its lanes stream. A set-up that would lose jobs is an error
// wrapping ErrSetup.
func (s *Service) Setup(ctx context.Context) error {
	l := NewLayout(s.cfg)
	if mp := s.cfg.JetStream.Conn().MaxPayload(); mp > 2*InputHeadroom {
		l.In.MaxMsgSize = int32(mp - InputHeadroom)
		for i := range l.Partitions {
			l.Partitions[i].MaxMsgSize = l.In.MaxMsgSize
		}
	}
	if err := l.Ensure(ctx, s.cfg.JetStream, s.log); err != nil {
		return err
	}
	if s.in.n() > 1 { // what the configured stream holds now was stored before: not unmapped
		st, err := s.streams.get(ctx, s.cfg.StreamIn)
		if err != nil {
			return fmt.Errorf("%w: stream %s: %w", ErrSetup, s.cfg.StreamIn, err)
		}
		s.unmapped.from(s.cfg.StreamIn, st.CachedInfo().State.LastSeq)
	}
	for _, name := range []string{s.cfg.StreamOut, s.cfg.StreamDead} {
		st, err := s.streams.get(ctx, name)
		if err != nil {
			return fmt.Errorf("%w: stream %s: %w", ErrSetup, name, err)
		}
		s.pub.learn(name, st.CachedInfo().Config.MaxMsgSize)
	}
	if err := s.dropEarlierConsumer(ctx); err != nil {
		return err
	}
	ws, err := s.cfg.JetStream.Stream(ctx, s.cfg.StreamWait)
	switch {
	case err == nil && ws.CachedInfo().State.Msgs > 0:
		s.legacyLanes.Store(true)
		s.log.Info("the lanes stream of an earlier admitter holds jobs: each tenant's are forwarded first, in order",
			"stream", s.cfg.StreamWait, "jobs", ws.CachedInfo().State.Msgs)
	case err != nil && !errors.Is(err, jetstream.ErrStreamNotFound):
		return fmt.Errorf("%w: look up the lanes stream %s of an earlier version: %w", ErrSetup, s.cfg.StreamWait, err)
	}
	if s.owners.kv, err = s.cfg.JetStream.CreateOrUpdateKeyValue(ctx, l.Owners); err != nil {
		return fmt.Errorf("%w: owners bucket %s: %w", ErrSetup, l.Owners.Bucket, err)
	}
	if s.reader == nil {
		if s.reader, err = newReader(s.cfg.JetStream); err != nil {
			return err
		}
	}
	if s.gauges == nil {
		if err := s.registerGauges(); err != nil {
			return fmt.Errorf("admission: metrics: %w", err)
		}
	}
	s.setUp = true
	return nil
}

// dropEarlierConsumer deletes the input consumer an earlier version shared among its replicas:
// jobs are read without one now. The jobs it held unacknowledged stay in the input, and their
// tenants' queues forward them.
func (s *Service) dropEarlierConsumer(ctx context.Context) error {
	c, err := s.cfg.JetStream.Consumer(ctx, s.cfg.StreamIn, s.cfg.Consumer)
	if errors.Is(err, jetstream.ErrConsumerNotFound) || err != nil {
		return nil
	}
	if !strings.HasPrefix(c.CachedInfo().Config.Description, "admitter:") {
		return nil
	}
	if err := s.cfg.JetStream.DeleteConsumer(ctx, s.cfg.StreamIn, s.cfg.Consumer); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("%w: delete the input consumer %s of an earlier admitter: %w", ErrSetup, s.cfg.Consumer, err)
	}
	s.log.Info("deleted the input consumer of an earlier admitter: jobs are read per tenant now", "consumer", s.cfg.Consumer)
	return nil
}

// registerGauges reports the queues, the jobs waiting, the output's state and the replicas on
// every collection.
func (s *Service) registerGauges() error {
	m := s.cfg.MeterProvider.Meter(instrumentationName)
	queues, err1 := m.Int64ObservableGauge(wire.MetricQueues.Name, metric.WithDescription("Tenants' queues this replica runs."))
	waiting, err2 := m.Int64ObservableGauge(wire.MetricJobsWaiting.Name, metric.WithDescription("Jobs waiting in every tenant's queue (every replica's), as the last listing of the input counted them."))
	blocked, err3 := m.Int64ObservableGauge(wire.MetricOutputBlocked.Name, metric.WithDescription("1 while jobs are held because a stream the admitter publishes to is full."))
	replicas, err4 := m.Int64ObservableGauge(wire.MetricReplicas.Name, metric.WithDescription("Live replicas this one sees, itself included."))
	partitions, err9 := m.Int64ObservableGauge(wire.MetricPartitions.Name, metric.WithDescription("Partitions of the input this replica reads (holds the lease of)."))
	poolFlight, err5 := m.Int64ObservableGauge(wire.MetricPoolInFlight.Name, metric.WithDescription("Weight in flight in each pool (label pool), as this replica's last call to it found it."))
	poolWaiting, err6 := m.Int64ObservableGauge(wire.MetricPoolWaiting.Name, metric.WithDescription("Tenants waiting for each pool (label pool), as this replica's last call to it found it."))
	poolBreaker, err7 := m.Int64ObservableGauge(wire.MetricPoolBreaker.Name, metric.WithDescription("Each pool's breaker (label pool): 0 closed, 1 open, 2 half-open, as this replica's last call to it found it."))
	poolLimit, err8 := m.Int64ObservableGauge(wire.MetricPoolLimit.Name, metric.WithDescription("Each pool's limit in force (label pool): an adaptive pool's, between its minimum and its concurrency; another's, its concurrency; as this replica's last call to it found it."))
	oldest, err10 := m.Float64ObservableGauge(wire.MetricOldestWaiting.Name, metric.WithUnit("s"), metric.WithDescription("Age of the oldest job waiting in the queues this replica runs (from its store in the input), by plan, the largest of its tenants' (label tenant with ADMITTER_METRICS_TENANT_LABEL: each tenant's), as each queue's last step left it."))
	if err := errors.Join(err1, err2, err3, err4, err5, err6, err7, err8, err9, err10); err != nil {
		return err
	}
	reg, err := m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		o.ObserveInt64(queues, int64(s.queues.count()))
		o.ObserveInt64(replicas, int64(s.owners.count()))
		o.ObserveInt64(partitions, int64(len(s.owners.heldNow())))
		b := int64(0)
		if held, _ := s.pub.blocked(); held {
			b = 1
		}
		o.ObserveInt64(blocked, b)
		w, _ := s.queues.waitingNow()
		var n uint64
		for _, k := range w {
			n += k
		}
		o.ObserveInt64(waiting, int64(n))
		s.observeOldest(o, oldest)
		for name, st := range s.tel.poolStates() {
			attrs := metric.WithAttributes(attribute.String("pool", name))
			o.ObserveInt64(poolFlight, st.InFlight, attrs)
			o.ObserveInt64(poolWaiting, st.Waiting, attrs)
			o.ObserveInt64(poolBreaker, st.Breaker, attrs)
			if st.Concurrency > 0 {
				o.ObserveInt64(poolLimit, st.Limit, attrs)
			}
		}
		return nil
	}, queues, waiting, blocked, replicas, partitions, poolFlight, poolWaiting, poolBreaker, poolLimit, oldest)
	s.gauges = reg
	return err
}

// observeOldest reports the age of the oldest job waiting: per plan, the largest over its
// tenants; per tenant with the tenant label.
func (s *Service) observeOldest(o metric.Observer, g metric.Float64Observable) {
	type key struct{ plan, tenant string }
	ages := map[key]time.Duration{}
	s.queues.oldestWaiting(time.Now(), func(tenant, plan string, age time.Duration) {
		k := key{plan: plan}
		if s.tel.tenantLabel {
			k.tenant = tenant
		}
		ages[k] = max(ages[k], age)
	})
	for k, age := range ages {
		attrs := []attribute.KeyValue{attribute.String("plan", k.plan)}
		if s.tel.tenantLabel {
			attrs = append(attrs, attribute.String("tenant", k.tenant))
		}
		o.ObserveFloat64(g, age.Seconds(), metric.WithAttributes(attrs...))
	}
}

// Ready reports whether the service can admit jobs now: consuming, NATS connected, the limiter
// reachable (or the fail mode forwards without it), no stream it publishes to full, every feed
// delivering, and nothing that keeps it from deciding (see stuck). The error says what is
// missing.
func (s *Service) Ready(ctx context.Context) error {
	select {
	case <-s.stopped:
		return errors.New("stopped")
	default:
	}
	if !s.running.Load() || !s.setUp {
		return errors.New("not admitting yet")
	}
	if st := s.cfg.JetStream.Conn().Status(); st != nats.CONNECTED {
		return fmt.Errorf("nats %s", st)
	}
	var blocked error
	if held, why := s.pub.blocked(); held {
		blocked = errors.New(why)
	}
	now := time.Now()
	if err := errors.Join(blocked, s.feedBroken(now), s.stuck(now)); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := s.cfg.Policy.Ping(ctx); err != nil && s.cfg.Policy.FailMode() == "closed" {
		return fmt.Errorf("limiter unreachable and the fail mode is closed: %w", err)
	}
	return nil
}

// stuck says what keeps this replica from deciding at now: tenants' queues with jobs and no
// step ended for StallAfter (a step stuck, or no worker free to take them), and partitions held
// whose leases the owners bucket has not confirmed; nil when nothing does.
func (s *Service) stuck(now time.Time) error {
	return errors.Join(s.queues.stalled(now, s.cfg.StallAfter), s.owners.waits())
}

// PlansChanged makes every queue that waits ask again now: the plans, overrides or pauses
// changed, and the jobs waiting follow them (a faster plan speeds them up, a resume lets them
// go).
func (s *Service) PlansChanged() { s.queues.wakeAll() }

// Run admits until ctx ends, then stops within ShutdownTimeout: the steps under way end (those
// that do not by then are cancelled), its partitions' queues are handed over and their keys
// given up. It returns nil after a clean stop, and an error naming what did not stop within the
// bound otherwise. Run may be called once.
//
// The service's parts start in order and stop in reverse (see component): the lease messages,
// the fail mode's routes, the partitions (their tenures and parts: the queues they feed), the
// workers stepping the queues, and the loops beside them (discovery, timers, compaction).
func (s *Service) Run(ctx context.Context) error {
	if !s.setUp {
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
	defer s.reader.close()
	// Steps under way finish on their own context, so a stop signal does not abort them midway;
	// it is cancelled only if they take longer than the shutdown's bound.
	work, abort := context.WithCancel(context.WithoutCancel(ctx))
	defer abort()
	parts := s.components(work, abort)
	for i, c := range parts {
		if err := c.start(); err != nil {
			s.stopAll(parts[:i])
			return err
		}
	}
	s.log.Info("admitting", "stream", s.cfg.StreamIn, "partitions", s.in.n(), "in", s.cfg.In.String(), "out", s.cfg.Out.String(), "dead", s.cfg.Dead.String(),
		"replica", s.cfg.Replica, "workers", s.cfg.Workers, "fail_mode", string(s.cfg.Policy.FailMode()))
	<-ctx.Done()
	s.log.Info("stopping: letting the steps under way end", "bound", s.cfg.ShutdownTimeout.String())
	if err := s.stopAll(parts); err != nil {
		s.log.Error("stopped after the shutdown bound: what did not stop was left running; jobs not yet removed from the input are read again by their partitions' next holder", "err", err)
		return fmt.Errorf("admission: stop: %w", err)
	}
	s.log.Info("stopped")
	return nil
}

// component is a part of a running service: start returns once it runs (or fails), stop once it
// has stopped or its ctx (the shutdown's bound) ended: then it says what did not stop.
type component struct {
	name  string
	start func() error
	stop  func(ctx context.Context) error
}

// stopAll stops parts in reverse order, within the shutdown's bound, and says what did not stop.
func (s *Service) stopAll(parts []component) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	var errs []error
	for i := len(parts) - 1; i >= 0; i-- {
		if err := parts[i].stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", parts[i].name, err))
		}
	}
	return errors.Join(errs...)
}

// components are the service's parts, in the order they start (see Run), on the work context
// (abort cancels it: the steps still running when the bound nears).
func (s *Service) components(work context.Context, abort context.CancelFunc) []component {
	var unroute func()
	bg, stopBG := context.WithCancel(work)
	var loops, workers, owning sync.WaitGroup
	ownersCtx, stopOwners := context.WithCancel(work)
	return []component{
		{name: "lease messages", start: func() error { return s.leases.start(work) },
			stop: func(context.Context) error { s.leases.stop(); return nil }},
		{name: "fail mode routes", start: func() error {
			if s.router == nil {
				return nil
			}
			var err error
			if unroute, err = s.router.serve(work, s.cfg.Fallback); err != nil {
				return fmt.Errorf("admission: serve the fallback's routed questions: %w", err)
			}
			return nil
		}, stop: func(context.Context) error {
			if unroute != nil {
				unroute()
			}
			return nil
		}},
		{name: "partitions", start: func() error {
			// Taken and given up by the owners' loop, which goes on renewing the leases until the
			// workers have stopped (the component after this one).
			s.owners.start = func(p int) { s.moves.Go(func() { s.startPart(work, p) }) }
			s.owners.stop = s.stopPart
			owning.Go(func() { s.owners.run(ownersCtx) })
			return nil
		}, stop: func(ctx context.Context) error {
			stopOwners()
			owning.Wait()
			s.moves.Wait()
			err := s.stopParts(ctx)
			s.owners.leave(ctx)
			return err
		}},
		{name: "workers", start: func() error {
			for range s.cfg.Workers {
				workers.Go(func() { s.queues.work(work) })
			}
			return nil
		}, stop: func(ctx context.Context) error {
			s.queues.close()
			return s.waitSteps(ctx, &workers, abort)
		}},
		{name: "loops", start: func() error {
			loops.Go(func() { s.queues.discover(bg) })
			loops.Go(func() { s.queues.timers(bg) })
			loops.Go(func() { s.wakeOnRecovery(bg) })
			loops.Go(func() { s.compactor(bg) })
			return nil
		}, stop: func(context.Context) error { stopBG(); loops.Wait(); return nil }},
	}
}

// waitSteps waits for the workers' steps under way to end. Short of the shutdown's bound (ctx),
// it cancels them (abort: their jobs not yet settled are read again by the next holder) and
// waits a little more; those that still run are left running (a step stuck for good, ignoring
// its context). The error names the steps cancelled, and those left running, with where each
// stood.
func (s *Service) waitSteps(ctx context.Context, workers *sync.WaitGroup, abort context.CancelFunc) error {
	done := make(chan struct{})
	go func() { workers.Wait(); close(done) }()
	deadline, _ := ctx.Deadline()
	reserve := stopReserve(s.cfg.ShutdownTimeout)
	cut := time.NewTimer(time.Until(deadline) - reserve) // what follows (the hand-overs) keeps the reserve
	defer cut.Stop()
	select {
	case <-done:
		return nil
	case <-cut.C:
	}
	cancelled := s.queues.describeRunning(time.Now())
	abort()
	grace := time.NewTimer(reserve / 2)
	defer grace.Stop()
	select {
	case <-done:
		return fmt.Errorf("steps cancelled at the bound: %s", cancelled)
	case <-grace.C:
	}
	return fmt.Errorf("steps cancelled at the bound: %s; left running, stuck: %s", cancelled, s.queues.describeRunning(time.Now()))
}

// stopReserve is the part of the shutdown's bound kept for what follows the steps (the
// partitions' compaction and hand-over, the keys given up): a quarter, at most 2 s.
func stopReserve(bound time.Duration) time.Duration { return min(bound/4, handOverBound) }

// stopParts stops every partition's part, side by side, within ctx.
func (s *Service) stopParts(ctx context.Context) error {
	parts := s.queues.partsNow()
	errs := make([]error, len(parts))
	var stopping sync.WaitGroup
	for i, pt := range parts {
		stopping.Go(func() { errs[i] = pt.Stop(ctx) })
	}
	stopping.Wait()
	return errors.Join(errs...)
}

// recoveryWakeEvery bounds how often wakeOnRecovery wakes the queues: with one server of a
// Redis Cluster down, the limiter recovers many times a second (see policy.Recovered).
const recoveryWakeEvery = time.Second

// wakeOnRecovery wakes the queues that wait out a backoff when the limiter answers again after
// an outage, so that they do not sleep out up to 5 s after it; at most once per
// recoveryWakeEvery, until ctx ends.
func (s *Service) wakeOnRecovery(ctx context.Context) {
	for {
		ch := s.cfg.Policy.Recovered()
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
		s.queues.wakeAll()
		t := time.NewTimer(recoveryWakeEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// handOver gives up this replica's hold on the queues (bucket.Batch.Release), so that their
// tenants' next owner takes them at once rather than when the hold ends; bounded, best effort.
func (s *Service) handOver(ctx context.Context, qs []*queue) {
	if len(qs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, handOverBound)
	defer cancel()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, q := range qs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			// Its settled jobs not yet removed (purgeAge) go first: the next holder would read
			// them again. A removal that fails leaves them owed as stored, said by the call below.
			_, _ = s.removeSettled(ctx, q, true)
			pq := q.claim(s.owner)
			pq.Release = true
			s.cfg.Policy.Step(ctx, q.tenant, nil, pq)
		})
	}
	wg.Wait()
}

// streams keeps the jetstream handles of the streams the service uses.
type streams struct {
	js jetstream.JetStream
	mu sync.Mutex
	by map[string]jetstream.Stream
}

// get returns stream name's handle (looked up once).
func (ss *streams) get(ctx context.Context, name string) (jetstream.Stream, error) {
	ss.mu.Lock()
	st := ss.by[name]
	ss.mu.Unlock()
	if st != nil {
		return st, nil
	}
	if ss.js == nil {
		return nil, fmt.Errorf("stream %s: no JetStream context (Config.JetStream)", name)
	}
	st, err := ss.js.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	ss.mu.Lock()
	if ss.by == nil {
		ss.by = map[string]jetstream.Stream{}
	}
	ss.by[name] = st
	ss.mu.Unlock()
	return st, nil
}

// PoolHistory is what this replica saw of pool over the last minutes, a state a second at most
// (oldest first): its limit in force, weight in flight and time per job (the console's chart).
// A second in which this replica did not call the pool has no state.
func (s *Service) PoolHistory(pool string) (at []time.Time, states []bucket.PoolState) {
	return s.tel.poolHistory(pool)
}
