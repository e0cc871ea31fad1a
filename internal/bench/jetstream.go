package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/admitter/admitter/admission"
	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/policy"
	"github.com/admitter/admitter/subjects"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The streams and subjects every end-to-end run uses: admitter's defaults.
const (
	streamIn     = "JOBS"
	streamOut    = "ADMITTED"
	streamDead   = "DEAD"
	templateIn   = "jobs.submit.{tenant}.>"
	templateOut  = "jobs.admitted.{tenant}.>"
	templateDed  = "jobs.dead.{tenant}.>"
	templateWait = "jobs.waiting.{tenant}"
	prefixIn     = "jobs.submit."
	prefixOut    = "jobs.admitted."
	// headerSent carries the publish time (Unix ns) of a job in the latency runs.
	headerSent = "Bench-Sent-Ns"
	// payloadSize is the body of every job.
	payloadSize = 128
	// maxAsyncPending bounds the publishes in flight of every async publisher.
	maxAsyncPending = 4096
)

var payload = []byte(strings.Repeat("j", payloadSize))

// connect opens a NATS connection and a JetStream context on it.
func connect(url, name string, jsOpts ...jetstream.JetStreamOpt) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(url, nats.Name(name), nats.MaxReconnects(0))
	if err != nil {
		return nil, nil, fmt.Errorf("nats connect: %w", err)
	}
	js, err := jetstream.New(nc, jsOpts...)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	return nc, js, nil
}

// layout is admitter's stream layout as the bench runs it (admitter's defaults), which the relay
// shares: same streams, same consumer settings.
func layout() admission.Layout { return layoutOf(1) }

// layoutOf is admitter's stream layout with the input spread over partitions streams
// (ADMITTER_PARTITIONS; 1: JOBS alone).
func layoutOf(partitions int) admission.Layout {
	return admission.NewLayout(admission.Config{
		In: subjects.MustParse(templateIn), Out: subjects.MustParse(templateOut), Dead: subjects.MustParse(templateDed), Wait: subjects.MustParse(templateWait),
		Partitions: partitions,
	})
}

// partitionMapping is the account mapping a server needs for an input over partitions streams:
// the subjects producers publish on to their tenants' partitions (empty for one).
func partitionMapping(partitions int) (source, destination string) {
	return admission.Partitions(subjects.MustParse(templateIn), streamIn, partitions).Mapping()
}

// inputStreams are the streams the jobs of an input over partitions streams are stored in.
func inputStreams(partitions int) []string {
	l := layoutOf(partitions)
	if len(l.Partitions) == 0 {
		return []string{l.In.Name}
	}
	names := make([]string, len(l.Partitions))
	for i, st := range l.Partitions {
		names[i] = st.Name
	}
	return names
}

// inputJobs is how many jobs the input over partitions streams holds.
func inputJobs(ctx context.Context, js jetstream.JetStream, partitions int) (uint64, error) {
	var n uint64
	for _, name := range inputStreams(partitions) {
		msgs, _, err := streamState(ctx, js, name)
		if err != nil {
			return 0, err
		}
		n += msgs
	}
	return n, nil
}

// createStreams creates admitter's streams as admission.Service.Setup would, so that the relay
// and admitter use the same streams; for the relay (kind "relay") the input is a work queue, as
// a plain relay has it: its acknowledgements remove what it forwarded, as admitter's purges do.
func createStreams(ctx context.Context, js jetstream.JetStream, kind string) error {
	return createStreamsOf(ctx, js, kind, 1)
}

// createStreamsOf is createStreams with admitter's input over partitions streams (the relay's
// input is JOBS whatever partitions says).
func createStreamsOf(ctx context.Context, js jetstream.JetStream, kind string, partitions int) error {
	l := layoutOf(partitions)
	if kind == "relay" || kind == "relay+msgid" {
		l = layout()
		l.In.Retention, l.In.Discard, l.In.AllowDirect = jetstream.WorkQueuePolicy, jetstream.DiscardOld, false
	}
	return l.Ensure(ctx, js, slog.New(slog.DiscardHandler))
}

// consumerConfig is the relay's consumer: a durable pull consumer on the input taking every job
// as it comes, acknowledged explicitly once forwarded (what a plain relay does; admitter reads
// its tenants' queues without one).
func consumerConfig(name string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       name,
		FilterSubject: layout().In.Subjects[0],
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxDeliver:    -1,
		MaxAckPending: 10_000,
	}
}

// asyncPublisher publishes with bounded async publishes in flight and counts failed PubAcks.
type asyncPublisher struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	failed atomic.Int64
	first  atomic.Value // error
}

func newAsyncPublisher(url, name string) (*asyncPublisher, error) {
	p := &asyncPublisher{}
	nc, js, err := connect(url, name, jetstream.WithPublishAsyncMaxPending(maxAsyncPending),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, _ *nats.Msg, err error) {
			p.failed.Add(1)
			p.first.CompareAndSwap(nil, err)
		}))
	if err != nil {
		return nil, err
	}
	p.nc, p.js = nc, js
	return p, nil
}

func (p *asyncPublisher) publish(m *nats.Msg) error {
	if _, err := p.js.PublishMsgAsync(m, jetstream.WithStallWait(10*time.Second)); err != nil {
		return fmt.Errorf("publish %s: %w", m.Subject, err)
	}
	return nil
}

// complete waits (bounded) until every publish has its PubAck, and fails if any was refused.
func (p *asyncPublisher) complete(ctx context.Context) error {
	select {
	case <-p.js.PublishAsyncComplete():
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(30 * time.Second):
		return fmt.Errorf("publish: %d PubAcks still missing after 30s", p.js.PublishAsyncPending())
	}
	if n := p.failed.Load(); n > 0 {
		return fmt.Errorf("publish: %d publishes failed, the first with: %v", n, p.first.Load())
	}
	return nil
}

func (p *asyncPublisher) close() { p.nc.Close() }

// prepublish stores n jobs spread round-robin over tenants in JOBS and checks they are there.
func prepublish(ctx context.Context, url string, n, tenants int) error {
	subj := make([]string, tenants)
	for i := range subj {
		subj[i] = prefixIn + tenantName(i) + ".work"
	}
	return prepublishTo(ctx, url, n, func(i int) string { return subj[i%tenants] })
}

// prepublishTo stores n jobs in JOBS, the i-th on subject(i), and checks they are there.
func prepublishTo(ctx context.Context, url string, n int, subject func(i int) string) error {
	return prepublishOver(ctx, url, n, 1, subject)
}

// prepublishOver stores n jobs in an input over partitions streams (the server maps them), the
// i-th on subject(i), and checks they are there.
func prepublishOver(ctx context.Context, url string, n, partitions int, subject func(i int) string) error {
	p, err := newAsyncPublisher(url, "bench-prepublish")
	if err != nil {
		return err
	}
	defer p.close()
	for i := range n {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := p.publish(&nats.Msg{Subject: subject(i), Data: payload}); err != nil {
			return err
		}
	}
	if err := p.complete(ctx); err != nil {
		return err
	}
	msgs, err := inputJobs(ctx, p.js, partitions)
	if err != nil {
		return err
	}
	if msgs != uint64(n) {
		return fmt.Errorf("the input (%s) holds %d jobs after publishing %d", strings.Join(inputStreams(partitions), ", "), msgs, n)
	}
	return nil
}

// streamState is the number of messages in a stream and the time the last was stored.
func streamState(ctx context.Context, js jetstream.JetStream, name string) (uint64, time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, name)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("stream %s: %w", name, err)
	}
	st := s.CachedInfo().State
	return st.Msgs, st.LastTime, nil
}

// waitForMessages polls the stream until it holds n messages and returns when the last was
// stored; it gives up after timeout, or when fail delivers an error (the forwarder stopped).
func waitForMessages(ctx context.Context, js jetstream.JetStream, name string, n int, timeout time.Duration, fail <-chan error) (time.Time, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var have uint64
	for {
		msgs, last, err := streamState(ctx, js, name)
		if err != nil {
			return time.Time{}, err
		}
		have = msgs
		if msgs >= uint64(n) {
			return last, nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case err := <-fail:
			return time.Time{}, fmt.Errorf("the forwarder stopped with %d of %d jobs forwarded: %v", have, n, err)
		case <-deadline.C:
			return time.Time{}, fmt.Errorf("only %d of %d jobs forwarded to %s within %v", have, n, name, timeout)
		case <-tick.C:
		}
	}
}

// waitForEmpty polls the stream until it holds no message (every job acknowledged, on a
// work-queue stream), bounded by timeout.
func waitForEmpty(ctx context.Context, js jetstream.JetStream, name string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		msgs, _, err := streamState(ctx, js, name)
		if err != nil {
			return err
		}
		if msgs == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d jobs still unacknowledged in %s %v after the last was forwarded", msgs, name, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// forwarder is the relay or admitter, prepared (consumer created) but not yet consuming.
type forwarder struct {
	name string
	// start begins consuming.
	start func() error
	// failed delivers an error if the forwarder stops by itself.
	failed <-chan error
	// stop stops consuming and releases everything (bounded); safe to call twice.
	stop func()
}

// prepareRelay is the baseline: a durable pull consumer with explicit acks (admitter's consumer
// config), pipelines × (Consume with pull → async JetStream publish to jobs.admitted.<same
// tokens>, with a Nats-Msg-Id when msgID → ack when the PubAck arrives), with no limiter and no
// per-message bookkeeping beyond that.
func prepareRelay(ctx context.Context, url string, pipelines int, msgID bool, pull jetstream.PullConsumeOpt) (*forwarder, error) {
	nc, js, err := connect(url, "bench-relay")
	if err != nil {
		return nil, err
	}
	var cons jetstream.Consumer
	if err := retry(ctx, "the relay's consumer of "+streamIn, setUpWithin, func(ctx context.Context) (err error) {
		cons, err = js.CreateOrUpdateConsumer(ctx, streamIn, consumerConfig("relay"))
		return err
	}); err != nil {
		nc.Close()
		return nil, err
	}
	type pending struct {
		in  jetstream.Msg
		ack jetstream.PubAckFuture
	}
	quit := make(chan struct{})
	var (
		wg   sync.WaitGroup
		ccs  []jetstream.ConsumeContext
		once sync.Once
	)
	stop := func() {
		once.Do(func() {
			close(quit)
			for _, cc := range ccs {
				cc.Stop()
			}
			for _, cc := range ccs {
				select {
				case <-cc.Closed():
				case <-time.After(5 * time.Second):
				}
			}
			wg.Wait()
			nc.Close()
		})
	}
	start := func() error {
		for range pipelines {
			pjs, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(maxAsyncPending))
			if err != nil {
				return err
			}
			inflight := make(chan pending, maxAsyncPending)
			wg.Go(func() {
				for {
					var p pending
					select {
					case p = <-inflight:
					case <-quit:
						return
					}
					select {
					case <-p.ack.Ok():
						_ = p.in.Ack()
					case <-p.ack.Err():
						_ = p.in.Nak()
					case <-quit:
						return
					}
				}
			})
			cc, err := cons.Consume(func(m jetstream.Msg) {
				out := &nats.Msg{Subject: prefixOut + strings.TrimPrefix(m.Subject(), prefixIn), Data: m.Data(), Header: m.Headers()}
				if msgID { // what exactly once costs the server: a duplicate window to keep
					if meta, err := m.Metadata(); err == nil {
						h := make(nats.Header, len(out.Header)+1)
						maps.Copy(h, out.Header)
						h.Set(nats.MsgIdHdr, "relay:"+strconv.FormatUint(meta.Sequence.Stream, 10))
						out.Header = h
					}
				}
				f, err := pjs.PublishMsgAsync(out)
				if err != nil {
					_ = m.Nak()
					return
				}
				select {
				case inflight <- pending{m, f}:
				case <-quit:
				}
			}, pull)
			if err != nil {
				return fmt.Errorf("relay consume: %w", err)
			}
			ccs = append(ccs, cc)
		}
		return nil
	}
	return &forwarder{name: "relay", start: start, stop: stop}, nil
}

// prepareReplicas is n admitters (prepareAdmitterFailing) sharing the NATS server and Redis, each
// with its own connections, as n replicas of the service would run: started and stopped together.
func prepareReplicas(ctx context.Context, n int, url, redisURL string, plans *bucket.Plans, o Options) (*forwarder, error) {
	if n == 1 {
		return prepareAdmitterFailing(ctx, url, redisURL, plans, o, make(chan error, 1))
	}
	var fws []*forwarder
	stopAll := func() {
		for _, f := range fws {
			f.stop()
		}
	}
	failed := make(chan error, n)
	for range n {
		f, err := prepareAdmitterFailing(ctx, url, redisURL, plans, o, failed)
		if err != nil {
			stopAll()
			return nil, err
		}
		fws = append(fws, f)
	}
	start := func() error {
		for _, f := range fws {
			if err := f.start(); err != nil {
				return err
			}
		}
		return nil
	}
	return &forwarder{name: fmt.Sprintf("admitter x%d", n), start: start, failed: failed, stop: stopAll}, nil
}

// prepareAdmitterFailing is admission.Service with the Redis limiter, set up (streams checked,
// consumer created) but not yet running. If it stops by itself, the error goes to failed (which
// must have room for it).
func prepareAdmitterFailing(ctx context.Context, url, redisURL string, plans *bucket.Plans, o Options, failed chan error) (*forwarder, error) {
	nc, js, err := connect(url, "bench-admitter")
	if err != nil {
		return nil, err
	}
	client, err := newRueidis(redisURL)
	if err != nil {
		nc.Close()
		return nil, err
	}
	release := func() { client.Close(); nc.Close() }
	pol, err := policy.New(policy.Config{Limiter: bucket.NewRedis(client, "", bucket.Options{}), Plans: plans, Logger: o.logger()})
	if err != nil {
		release()
		return nil, err
	}
	svc, err := admission.New(admission.Config{
		JetStream: js, Policy: pol,
		In: subjects.MustParse(templateIn), Out: subjects.MustParse(templateOut), Dead: subjects.MustParse(templateDed), Wait: subjects.MustParse(templateWait),
		Workers: o.Workers, ShutdownTimeout: 5 * time.Second, Logger: o.logger(),
	})
	if err != nil {
		release()
		return nil, err
	}
	if err := retry(ctx, "the admitter's set-up", setUpWithin, svc.Setup); err != nil {
		release()
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	started := false
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if started {
				select {
				case err := <-done:
					if err != nil {
						o.logger().Warn("admitter stopped", "err", err)
					}
				case <-time.After(15 * time.Second):
					o.logger().Warn("admitter did not stop within 15s")
				}
			}
			release()
		})
	}
	start := func() error {
		started = true
		go func() {
			err := svc.Run(runCtx)
			if err == nil && runCtx.Err() == nil {
				err = errors.New("Run returned")
			}
			if runCtx.Err() == nil {
				failed <- err
			}
			done <- err
		}()
		return nil
	}
	return &forwarder{name: "admitter", start: start, failed: failed, stop: stop}, nil
}

// collector counts the messages a core subscription receives and keeps what record extracts.
type collector[T any] struct {
	mu    sync.Mutex
	items []T
	n     atomic.Int64
	sub   *nats.Subscription
}

func collect[T any](nc *nats.Conn, subject string, record func(m *nats.Msg, now time.Time) (T, bool)) (*collector[T], error) {
	c := &collector[T]{}
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		now := time.Now()
		if v, ok := record(m, now); ok {
			c.mu.Lock()
			c.items = append(c.items, v)
			c.mu.Unlock()
		}
		c.n.Add(1)
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", subject, err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	if err := nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	c.sub = sub
	return c, nil
}

// stop unsubscribes and returns what was collected.
func (c *collector[T]) stop() []T {
	_ = c.sub.Unsubscribe()
	c.mu.Lock()
	defer c.mu.Unlock()
	items := c.items
	c.items = nil
	return items
}

// waitCount waits until the collector has seen n messages, bounded by timeout; it gives up
// when fail delivers an error (the forwarder stopped; nil: never).
func (c *collector[T]) waitCount(ctx context.Context, n int64, timeout time.Duration, fail <-chan error) error {
	deadline := time.Now().Add(timeout)
	for c.n.Load() < n {
		if time.Now().After(deadline) {
			return fmt.Errorf("received %d of %d forwarded jobs within %v", c.n.Load(), n, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-fail:
			return fmt.Errorf("the forwarder stopped with %d of %d jobs received: %w", c.n.Load(), n, err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// pace publishes rate jobs per second for duration (the i-th built by msg), spreading them
// evenly at millisecond resolution. It returns how many it published and when it finished.
func pace(ctx context.Context, p *asyncPublisher, rate float64, duration time.Duration, msg func(i int64) *nats.Msg) (int64, time.Time, error) {
	total := int64(rate * duration.Seconds())
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	var sent int64
	for sent < total {
		due := min(total, int64(rate*time.Since(start).Seconds()))
		for ; sent < due; sent++ {
			if err := p.publish(msg(sent)); err != nil {
				return sent, time.Now(), err
			}
		}
		if sent >= total {
			break
		}
		select {
		case <-ctx.Done():
			return sent, time.Now(), ctx.Err()
		case <-tick.C:
		}
	}
	return sent, time.Now(), nil
}

// sentAt reads headerSent.
func sentAt(m *nats.Msg) (time.Time, bool) {
	ns, err := strconv.ParseInt(m.Header.Get(headerSent), 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(0, ns), true
}
