package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/admitter/admitter/activity"
	"github.com/admitter/admitter/admission"
	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/policy"
	"github.com/admitter/admitter/wire"
	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"go.opentelemetry.io/otel/metric"
)

// stack is a connected, set-up admitter: what serve runs and the demo runs beside its load.
type stack struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	svc     *admission.Service
	policy  *policy.Policy
	limiter policy.Limiter
	redis   *bucket.Redis // the shared limiter's Redis (nil: in-process buckets)
	tel     *telemetry
	// activity records what this replica's queue decided, for the console.
	activity *activity.Index
	// replica is this replica's name (ADMITTER_REPLICA, else a random id).
	replica string
	natsURL string
	closers []func() // run in reverse order by close
}

// close releases everything start acquired, in reverse order.
func (s *stack) close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
}

// serve starts its HTTP server (health from the first second), then the stack, and runs the
// service until ctx ends.
func serve(ctx context.Context, c *config, log *slog.Logger) error {
	tel, err := newTelemetry(ctx, c.environ)
	if err != nil {
		return err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tel.shutdown(ctx); err != nil {
			log.Warn("telemetry shutdown", "err", err)
		}
	}()
	b := newBoot(log, c.ConnectTimeout)
	var inspector atomic.Pointer[tenantInspector]
	con, err := newConsole(c, b, log)
	if err != nil {
		return err
	}
	if c.HTTPAddr != "off" {
		degraded := func() string {
			ti := inspector.Load()
			if ti == nil {
				return ""
			}
			var out []string
			for _, d := range []string{degradedDetail(ti.st.policy), ti.st.svc.Detail()} {
				if d != "" {
					out = append(out, d)
				}
			}
			return strings.Join(out, "; ")
		}
		stop, err := startHTTP(c.HTTPAddr, tel.registry, b.Ready, degraded, map[string]http.Handler{
			"GET /inspect": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ti := inspector.Load()
				if ti == nil {
					http.Error(w, "not running yet: "+b.Ready(r.Context()).Error(), http.StatusServiceUnavailable)
					return
				}
				ti.ServeHTTP(w, r)
			}),
		}, con, c.HTTPToken, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	st, err := start(ctx, c, log, tel, b)
	if err != nil {
		return err
	}
	defer st.close()
	live, stopPlans, err := startLivePlans(ctx, st, c, log)
	if err != nil {
		return err
	}
	defer stopPlans()
	ready := st.svc.Ready
	if st.redis != nil {
		guard, stopGuard, err := startEvictionGuard(ctx, st.redis, c.RequireNoEvict, st.tel.meter, log)
		if err != nil {
			return err
		}
		defer stopGuard()
		ready = func(ctx context.Context) error { return errors.Join(guard.ready(), st.svc.Ready(ctx)) }
	}
	if c.APIAddr != "off" {
		stop, err := startAPI(c, st.policy, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	if c.APISubject != "off" {
		stop, err := startDecideService(c, st.nc, st.policy, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	if c.RLSAddr != "off" {
		stop, err := startRLS(c, st.policy, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	shares, err := startShares(st, c, log)
	if err != nil {
		return err
	}
	defer shares.Stop()
	ti := newTenantInspector(st, live, c)
	stopInspect, err := startInspectResponder(st.nc, ti, c.Consumer, log)
	if err != nil {
		return err
	}
	defer stopInspect()
	b.running(ready)
	inspector.Store(ti)
	attachConsole(ctx, con, st, shares, live, c, log)
	return st.svc.Run(ctx)
}

// start connects (starting the embedded server and buckets where the configuration leaves them
// unset) and prepares the streams and consumer, saying in b what it waits for. On error it
// releases what it acquired.
func start(ctx context.Context, c *config, log *slog.Logger, tel *telemetry, b *boot) (_ *stack, err error) {
	st := &stack{tel: tel, activity: activity.New(0), replica: c.Replica}
	if st.replica == "" {
		st.replica = nuid.Next()
	}
	defer func() {
		if err != nil {
			st.close()
		}
	}()
	for _, o := range obsolete(c.environ) {
		log.Warn(o)
	}
	if c.PlansFile == "" {
		log.Info("ADMITTER_PLANS_FILE is unset: using the built-in example plans (see README)", "plans", c.plans.Names())
	}
	st.natsURL = c.NATSURL
	if st.natsURL == "" {
		srv, err := startEmbeddedNATS(c.DataDir, c.EmbeddedNATSPort, c.partitions(), log)
		if err != nil {
			return nil, err
		}
		st.closers = append(st.closers, func() {
			srv.Shutdown()
			srv.WaitForShutdown()
			log.Info("embedded NATS server stopped")
		})
		st.natsURL = srv.ClientURL()
	}
	if line := c.partitions().MappingLine(); line != "" && c.NATSURL != "" {
		log.Info("the input is spread over partitions by the NATS server's account mapping: configure it on every server (jobs published without it are forwarded too, after a detour)",
			"partitions", c.Partitions, "mapping", line)
	}
	auth, err := c.natsOptions()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errConfig, err)
	}
	st.nc, err = await(ctx, b, "connect to NATS at "+redact(st.natsURL), func() (*nats.Conn, error) {
		nc, err := nats.Connect(st.natsURL, append(auth,
			nats.Name("admitter"),
			nats.MaxReconnects(-1),
			nats.ReconnectWait(500*time.Millisecond),
			nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
				if err != nil {
					log.Warn("nats disconnected", "err", err)
				}
			}),
			nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("nats reconnected", "url", redact(nc.ConnectedUrl())) }),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
				log.Warn("nats", "err", err) // a refused publish (permissions) is only seen here
			}),
		)...)
		if errors.Is(err, nats.ErrNoServers) {
			err = whyNoServers(ctx, st.natsURL, err)
		}
		return nc, err
	})
	if err != nil {
		return nil, err
	}
	st.closers = append(st.closers, func() { closeNATS(st.nc, log) })
	if st.js, err = jetstream.New(st.nc); err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	limiter, redis, closeLimiter, err := newLimiter(ctx, c, log, b, st.js, tel, bucket.FallbackHooks{
		// Decisions begin once the policy below exists: no hook runs before.
		Down: func(err error) { st.policy.Lost(err) },
		Up:   func(o bucket.Outage) { st.policy.Back(o) },
	})
	if err != nil {
		return nil, err
	}
	st.closers = append(st.closers, closeLimiter)
	st.limiter, st.redis = limiter, redis

	if st.policy, err = policy.New(policy.Config{Limiter: limiter, Plans: c.plans,
		FailMode: policy.FailMode(c.FailMode), Timeout: c.RedisTimeout, Logger: log,
		TracerProvider: tel.tracer, MeterProvider: tel.meter, TenantMetrics: c.TenantMetrics}); err != nil {
		return nil, fmt.Errorf("%w: %w", errConfig, err)
	}
	st.svc, err = admission.New(admission.Config{
		JetStream: st.js, Policy: st.policy,
		In: c.in, Out: c.out, Dead: c.dead, Wait: c.wait, Done: c.done, Renew: c.renew, LeaseAcks: c.LeaseAcks,
		StreamIn: c.StreamIn, StreamOut: c.StreamOut, StreamDead: c.StreamDead, StreamWait: c.StreamWait,
		Consumer: c.Consumer, Replica: st.replica, Replicas: c.StreamReplicas, Partitions: c.Partitions,
		DuplicateWindow: c.DuplicateWindow, Workers: c.Workers, Batch: c.Batch, Quantum: c.Quantum, DiscoveryInterval: c.Discovery,
		ShutdownTimeout: c.ShutdownTimeout, StallAfter: c.StallAfter, Logger: log,
		TracerProvider: tel.tracer, MeterProvider: tel.meter, TenantMetrics: c.TenantMetrics,
		Activity: st.activity, Fallback: fallbackOf(limiter),
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errConfig, err)
	}
	if _, err := await(ctx, b, "set up streams, consumer and replicas bucket on NATS", func() (struct{}, error) {
		err := st.svc.Setup(ctx)
		var api *jetstream.APIError
		if errors.As(err, &api) || (err != nil && !isTransient(err)) {
			return struct{}{}, backoff.Permanent(err)
		}
		return struct{}{}, err
	}); err != nil {
		return nil, err
	}
	if m, ok := limiter.(*bucket.Memory); ok {
		// In-process buckets forget at every start: what the output stream received last marks
		// when the buckets may have been emptied, so they are taken for empty then (no burst
		// after a restart). A new output stream has no such moment: they start full.
		out, err := st.js.Stream(ctx, c.StreamOut)
		if err != nil {
			return nil, fmt.Errorf("stream %s: %w", c.StreamOut, err)
		}
		if last := out.CachedInfo().State.LastTime; !last.IsZero() {
			m.Forgot(last)
			log.Info("in-process buckets start from the last forward of the previous run: empty then, refilled since", "last_forward", last.UTC().Format(time.RFC3339Nano))
		}
	}
	return st, nil
}

// newLimiter returns the Redis limiter, or the in-process one when ADMITTER_REDIS_URL is unset.
// The Redis limiter keeps its record of having marked a Redis (bucket.MemoryRecord) in the
// deployment's limiter bucket on NATS, and each loss of admitter's state it finds is logged
// with its cost and counted.
func newLimiter(ctx context.Context, c *config, log *slog.Logger, b *boot, js jetstream.JetStream, tel *telemetry, hooks bucket.FallbackHooks) (policy.Limiter, *bucket.Redis, func(), error) {
	opts := bucket.Options{}
	if c.RedisURL == "" {
		log.Warn("ADMITTER_REDIS_URL is unset: using in-process buckets, which are not shared between processes: run only one replica")
		return bucket.NewMemory(opts, nil), nil, func() {}, nil
	}
	ropt, err := c.redisClientOption()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w: %w", errConfig, err)
	}
	kv, err := await(ctx, b, "set up the limiter's record on NATS", func() (jetstream.KeyValue, error) {
		kv, err := js.CreateOrUpdateKeyValue(ctx, admission.LimiterRecord(c.Consumer, c.StreamReplicas))
		var api *jetstream.APIError
		if errors.As(err, &api) {
			return nil, backoff.Permanent(fmt.Errorf("limiter record bucket %s_limiter: %w", c.Consumer, err))
		}
		return kv, err
	})
	if err != nil {
		return nil, nil, nil, err
	}
	forgot, err := tel.meter.Meter("github.com/admitter/admitter/cmd/admitter").Int64Counter(wire.MetricRedisForgot.Name,
		metric.WithDescription("Losses of admitter's state found on a Redis server (restarted without its data, emptied, or restored from an old snapshot): limits without state are taken as used up to a bound per kind at the loss."))
	if err != nil {
		return nil, nil, nil, err
	}
	r, err := await(ctx, b, "connect to Redis at "+redactURL(c.RedisURL), func() (*bucket.Redis, error) {
		return bucket.DialRedisWith(ropt, c.RedisPrefix, opts)
	})
	if err != nil {
		return nil, nil, nil, err
	}
	r.Record(limiterRecord{kv: kv, replica: c.Replica})
	r.OnForget(func(f bucket.Forgetting) {
		forgot.Add(context.Background(), 1)
		log.Warn("redis forgot admitter's state: "+f.Why+"; tenants' limits without state are taken as used up at that time: buckets empty then and refilling, windows full for one window, quotas counting the share of their period elapsed then, concurrency and pool slots held until the running jobs report (README: Faults)",
			"node", f.Node, "lost_at", f.At.UTC().Format(time.RFC3339Nano))
	})
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := r.Prepare(pctx); err != nil {
		log.Warn("redis: could not load the scripts at start; the first decisions will", "err", err)
	}
	if c.FailMode != string(policy.FailLocal) {
		return r, r, r.Close, nil
	}
	f := bucket.NewFallback(r, opts, 4*c.RedisTimeout, hooks)
	f.Watch()
	return f, r, func() { f.Close(); r.Close() }, nil
}

// limiterRecord is the deployment's bucket.MemoryRecord: key recordKey of its limiter bucket
// exists once a replica has marked a Redis.
type limiterRecord struct {
	kv      jetstream.KeyValue
	replica string
}

const recordKey = "redis"

func (r limiterRecord) Marked(ctx context.Context) (bool, error) {
	_, err := r.kv.Get(ctx, recordKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	return err == nil, err
}

func (r limiterRecord) Mark(ctx context.Context) error {
	v, _ := json.Marshal(map[string]string{"marked_by": r.replica, "at": time.Now().UTC().Format(time.RFC3339)})
	_, err := r.kv.Create(ctx, recordKey, v)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return nil
	}
	return err
}

// fallbackOf is the limiter as admission routes for it in fail mode local (nil otherwise).
func fallbackOf(l policy.Limiter) admission.Fallback {
	if f, ok := l.(*bucket.Fallback); ok {
		return f
	}
	return nil
}

// degradedDetail says how decisions are made while the limiter is unreachable, for /readyz (""
// while it answers).
func degradedDetail(p *policy.Policy) string {
	since, down := p.Outage()
	if !down {
		return ""
	}
	at := since.UTC().Format(time.RFC3339)
	switch p.FailMode() {
	case policy.FailLocal:
		return "degraded: the limiter (Redis) is unreachable since " + at + "; every plan is kept on this replica's copy of the tenants' state (fail mode local)"
	case policy.FailOpen:
		return "degraded: the limiter (Redis) is unreachable since " + at + "; jobs are forwarded without a decision (fail mode open)"
	}
	return ""
}

// isTransient reports whether a set-up error may go away by itself (NATS not reachable yet).
func isTransient(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrDisconnected) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) || errors.Is(err, nats.ErrNoServers)
}

// closeNATS flushes acks and publishes, bounded, then closes the connection.
func closeNATS(nc *nats.Conn, log *slog.Logger) {
	if err := nc.FlushTimeout(2 * time.Second); err != nil && nc.IsConnected() {
		log.Warn("nats flush at exit", "err", err)
	}
	nc.Close()
}
