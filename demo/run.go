package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/subjects"
	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A Tenant is one simulated customer: its name (the {tenant} subject token), the plan the
// plans file assigns it, and how it publishes.
type Tenant struct {
	Name, Plan string
	Profile    Profile
}

// Config is what Run needs. Conn, Plans, Tenants, Duration and Out are required.
type Config struct {
	// Conn is the NATS connection to publish and consume on; the streams must exist (the
	// admission service's Setup creates them).
	Conn *nats.Conn
	// Plans is the plans file the admission service uses: each tenant's plan must be the one
	// it assigns to the tenant.
	Plans *bucket.Plans
	// Tenants are published for, in this order in the table.
	Tenants []Tenant
	// Duration is how long the load runs, unless ctx ends first.
	Duration time.Duration
	// Out receives the live view and the summary.
	Out io.Writer
	// TTY redraws the table in place with ANSI escape codes; otherwise plain lines are printed.
	TTY bool
	// Clock paces the demo (default RealClock).
	Clock Clock
	// SubjectIn, SubjectOut and SubjectDead are the service's subject templates (defaults
	// jobs.submit.{tenant}.>, jobs.admitted.{tenant}.> and jobs.dead.{tenant}.>). The input
	// template must have exactly one wildcard: the job's type goes there.
	SubjectIn, SubjectOut, SubjectDead subjects.Template
	// StreamIn, StreamOut and StreamDead name the streams (defaults JOBS, ADMITTED, DEAD); jobs
	// that must wait wait in StreamIn, where they arrived.
	StreamIn, StreamOut, StreamDead string
	// Settle is how long the pipeline is given after the load stops, before counting (default
	// 1s).
	Settle time.Duration
	// MaxInFlight bounds each tenant's publishes awaiting their PubAck (default 256).
	MaxInFlight int
	// Seed makes the weights and types of the jobs reproducible (0 is a valid seed).
	Seed uint64
	// Types are the job types, the subject token after the tenant (default email, report,
	// webhook, export).
	Types []string
}

// Bounds on network calls, in real time.
const (
	apiTimeout    = 5 * time.Second  // one JetStream API call
	pubAckTimeout = 5 * time.Second  // one asynchronous publish
	countTimeout  = 20 * time.Second // the final count, lookups and catching up together
	lookupWorkers = 8
	publishTick   = 20 * time.Millisecond
)

// withDefaults fills the zero fields and checks the rest.
func (c Config) withDefaults() (Config, error) {
	var err error
	tmpl := func(t *subjects.Template, def string) {
		if t.String() == "" && err == nil {
			*t, err = subjects.Parse(def)
		}
	}
	tmpl(&c.SubjectIn, "jobs.submit.{tenant}.>")
	tmpl(&c.SubjectOut, "jobs.admitted.{tenant}.>")
	tmpl(&c.SubjectDead, "jobs.dead.{tenant}.>")
	if err != nil {
		return c, err
	}
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.StreamIn, "JOBS")
	def(&c.StreamOut, "ADMITTED")
	def(&c.StreamDead, "DEAD")
	if c.Clock == nil {
		c.Clock = RealClock{}
	}
	if c.Settle <= 0 {
		c.Settle = time.Second
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = 256
	}
	if len(c.Types) == 0 {
		c.Types = []string{"email", "report", "webhook", "export"}
	}
	switch {
	case c.Conn == nil:
		return c, errors.New("demo: no NATS connection")
	case c.Plans == nil:
		return c, errors.New("demo: no plans")
	case len(c.Tenants) == 0:
		return c, errors.New("demo: no tenants")
	case c.Duration <= 0:
		return c, fmt.Errorf("demo: duration must be positive, got %v", c.Duration)
	case c.Out == nil:
		return c, errors.New("demo: no output writer")
	case c.SubjectIn.Wildcards() != 1:
		return c, fmt.Errorf("demo: input subject template %q must have exactly one wildcard (for the job type)", c.SubjectIn.String())
	}
	return c, nil
}

// resolve looks up each tenant's plan and checks the plans file assigns it.
func (c Config) resolve() ([]tenantInfo, error) {
	out := make([]tenantInfo, 0, len(c.Tenants))
	seen := map[string]bool{}
	for _, t := range c.Tenants {
		if seen[t.Name] {
			return nil, fmt.Errorf("demo: tenant %q listed twice", t.Name)
		}
		seen[t.Name] = true
		if !t.Profile.valid() {
			return nil, fmt.Errorf("demo: tenant %q: unknown profile %d", t.Name, int(t.Profile))
		}
		if _, err := c.SubjectIn.Subject(t.Name, c.Types[0]); err != nil {
			return nil, fmt.Errorf("demo: tenant %q: %w", t.Name, err)
		}
		plan, ok := c.Plans.Plan(t.Plan)
		if !ok {
			return nil, fmt.Errorf("demo: tenant %q: the plans file has no plan %q", t.Name, t.Plan)
		}
		if got, err := c.Plans.Lookup(t.Name); err != nil || got != plan {
			return nil, fmt.Errorf("demo: tenant %q: the plans file does not assign it plan %q", t.Name, t.Plan)
		}
		out = append(out, newTenantInfo(t, plan, c.Duration))
	}
	return out, nil
}

// runner is one Run.
type runner struct {
	cfg     Config
	tenants []tenantInfo
	js      jetstream.JetStream
	stats   *Stats
	start   time.Time
}

// Run publishes the tenants' load for cfg.Duration (or until ctx ends: the summary is still
// computed and printed), shows the live table on cfg.Out, and returns the summary. Every
// goroutine it starts has ended when it returns. An error after the load means the summary
// may be incomplete (the counts could not all be made), and says why.
func Run(ctx context.Context, cfg Config) (Summary, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Summary{}, err
	}
	tenants, err := cfg.resolve()
	if err != nil {
		return Summary{}, err
	}
	js, err := jetstream.New(cfg.Conn,
		jetstream.WithPublishAsyncMaxPending(cfg.MaxInFlight*len(tenants)+1),
		jetstream.WithPublishAsyncTimeout(pubAckTimeout))
	if err != nil {
		return Summary{}, fmt.Errorf("demo: jetstream: %w", err)
	}
	defer js.CleanupPublisher() // its reply subscription; every publish is settled by then
	r := &runner{cfg: cfg, tenants: tenants, js: js, stats: newStats(tenants)}

	streams := map[string]jetstream.Stream{}
	for _, name := range []string{cfg.StreamIn, cfg.StreamOut, cfg.StreamDead} {
		actx, cancel := context.WithTimeout(ctx, apiTimeout)
		s, err := js.Stream(actx, name)
		cancel()
		if err != nil {
			return Summary{}, fmt.Errorf("demo: stream %s: %w (the admission service creates it: start it first)", name, err)
		}
		streams[name] = s
	}
	admitted, err := startTail(ctx, js, streams[cfg.StreamOut], r.onAdmitted)
	if err != nil {
		return Summary{}, err
	}
	defer admitted.stop()
	dead, err := startTail(ctx, js, streams[cfg.StreamDead], r.onDead)
	if err != nil {
		return Summary{}, err
	}
	defer dead.stop()

	scr := &screen{w: cfg.Out, tty: cfg.TTY, width: func() int { return termWidth(cfg.Out) }}
	defer scr.done()
	scr.printf("%s", r.intro())

	// The load: one publisher per tenant, stopped by the duration or by ctx.
	clock := cfg.Clock
	r.start = clock.Now()
	load, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var publishers sync.WaitGroup
	for i, t := range tenants {
		publishers.Go(func() { r.publish(load, t, i) })
	}
	loadDone := make(chan struct{})
	go func() { publishers.Wait(); close(loadDone) }()

	refresh := clock.NewTicker(time.Second)
	defer refresh.Stop()
	// show draws a frame: on every refresh tick, and on a terminal also when the phase changes.
	// After the load, the elapsed time stays at its end.
	var interrupted, loadOver bool
	loadEnd := r.start.Add(cfg.Duration)
	show := func(phase string, tick bool) {
		if !tick && !cfg.TTY {
			return
		}
		now := clock.Now()
		el := min(now.Sub(r.start), cfg.Duration)
		if loadOver {
			el = loadEnd.Sub(r.start)
		}
		scr.show(frame{Elapsed: el, Duration: cfg.Duration, Phase: phase, Rows: r.stats.rows(now)})
	}
	show("publishing", false)
	stopped := ctx.Done()
wait:
	for {
		select {
		case <-refresh.C():
			if interrupted {
				show("interrupted: waiting for the last PubAcks", true)
			} else {
				show("publishing", true)
			}
		case <-stopped:
			interrupted, stopped = true, nil
			if now := clock.Now(); now.Before(loadEnd) {
				loadEnd = now
			}
			stopLoad()
		case <-loadDone:
			break wait
		}
	}
	loadOver = true

	// Give the pipeline a moment: jobs just published are being decided and forwarded.
	settle := clock.NewTicker(cfg.Settle)
	settling := fmt.Sprintf("load stopped: settling for %v, then counting", cfg.Settle)
	if !cfg.TTY {
		scr.printf("%s %s\n", formatElapsed(loadEnd.Sub(r.start)), settling)
	}
	show(settling, false)
wait2:
	for {
		select {
		case <-settle.C():
			break wait2
		case <-refresh.C():
			show(settling, true)
		}
	}
	settle.Stop()
	show("counting", false)

	// Count: first look up every job not seen downstream in the input stream, where jobs wait,
	// then catch the downstream consumers up to the end of their streams as they are after the
	// lookup. A job missing from the input stream was removed there after it was forwarded or
	// dead-lettered: so it is seen downstream by then, and nothing is counted lost for being in
	// flight.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), countTimeout)
	defer cancel()
	unresolved := r.stats.unresolved()
	waiting, unchecked, lookErr := lookup(cctx, streams[cfg.StreamIn], unresolved)
	catchErr := errors.Join(admitted.catchUp(cctx), dead.catchUp(cctx))
	admitted.stop()
	dead.stop()

	sum := Summary{
		LoadSeconds: loadEnd.Sub(r.start).Seconds(), Interrupted: interrupted, SettleSeconds: cfg.Settle.Seconds(),
		Tenants: r.stats.summary(loadEnd, waiting, unchecked),
	}
	for _, t := range sum.Tenants {
		sum.Published += t.Published
		sum.Admitted += t.Admitted
		sum.Dead += t.Dead
		sum.Waiting += t.Waiting
		sum.Unchecked += t.Unchecked
		sum.Lost += t.Lost
	}
	if interrupted {
		show("interrupted", false)
	} else {
		show("done", false)
	}
	scr.done()
	scr.printf("\n%s\n", strings.Join(summaryLines(sum, cfg.StreamIn), "\n"))
	if lookErr != nil {
		lookErr = fmt.Errorf("demo: looking up waiting jobs in stream %s: %w", cfg.StreamIn, lookErr)
	}
	if catchErr != nil {
		catchErr = fmt.Errorf("demo: the downstream count may be incomplete: %w", catchErr)
	}
	return sum, errors.Join(lookErr, catchErr)
}

// intro describes the run once, above the table. Its lines fit in 80 columns for the demo's
// own tenants.
func (r *runner) intro() string {
	var b strings.Builder
	c := r.cfg
	in := strings.Replace(c.SubjectIn.String(), ">", "<type>", 1)
	in = strings.Replace(in, "*", "<type>", 1)
	in = strings.Replace(in, "{tenant}", "<tenant>", 1)
	fmt.Fprintf(&b, "%d tenants publish jobs of weight 1 to 3 to %s for %v;\n", len(r.tenants), in, c.Duration)
	fmt.Fprintf(&b, "admitted jobs are counted on stream %s. Rates are in tokens/s.\n", c.StreamOut)
	rows := make([][]string, 0, len(r.tenants))
	var others []string
	for _, t := range r.tenants {
		var does string
		switch t.Profile {
		case Burst:
			does = fmt.Sprintf("publishes %d× its rate: %s/s", burstFactor, formatRate(burstFactor*t.rate))
		case Steady:
			does = fmt.Sprintf("publishes %d%% of its rate: %s/s", int(steadyFactor*100), formatRate(steadyFactor*t.rate))
		case IdleThenBurst:
			does = fmt.Sprintf("idle %v, %d at once, then %s/s",
				(c.Duration / idleFraction).Round(100*time.Millisecond), burstOfCaps*t.capacity, formatRate(t.rate))
		}
		rows = append(rows, []string{" ", t.Name, t.plan.Name, fmt.Sprintf("rate %s/s, burst %d", formatRate(t.rate), t.capacity), does})
		for i, l := range t.plan.Limits {
			if i != t.limit {
				others = append(others, fmt.Sprintf("  (%s also has limit %s: burst %d, %s, which binds less over %v)",
					t.plan.Name, limitLabel(t.plan, i), l.Capacity, l.Rate, c.Duration))
			}
		}
	}
	for _, l := range layout([]column{{}, {}, {}, {}, {}}, rows)[1:] {
		b.WriteString(l + "\n")
	}
	for _, l := range others {
		b.WriteString(l + "\n")
	}
	b.WriteString("Table: jobs and tokens admitted in the last second against the plan's rate;\n")
	b.WriteString("waiting = published - admitted - dead; attempts per job = mean Admit-Attempts of\n")
	b.WriteString("the admitted jobs (1, and 1 more each time a job was left waiting at the head of\n")
	b.WriteString("its queue; admitter_decisions_total counts a job once delayed, once admitted);\n")
	b.WriteString("time waited from stored to forwarded (Admit-Delay-Ms). Ctrl-C ends early.\n\n")
	return b.String()
}

// inflight is a publish awaiting its PubAck.
type inflight struct {
	f      jetstream.PubAckFuture
	weight int64
}

// publish runs tenant t's publisher until the duration has elapsed or ctx ends, then waits
// (bounded) for the PubAcks of its jobs.
func (r *runner) publish(ctx context.Context, t tenantInfo, idx int) {
	c := r.cfg
	pending := make(chan inflight, c.MaxInFlight) // its capacity bounds the publishes in flight
	var acks sync.WaitGroup
	acks.Go(func() {
		for p := range pending {
			r.await(t.Name, p)
		}
	})
	defer func() {
		close(pending)
		acks.Wait()
	}()
	rng := rand.New(rand.NewPCG(c.Seed, uint64(idx)))
	maxWeight := t.plan.MaxWeight()
	nextWeight := func() int64 {
		var w int64 = 1
		switch x := rng.IntN(10); {
		case x == 9:
			w = 3
		case x >= 7:
			w = 2
		}
		return min(w, maxWeight)
	}
	tk := c.Clock.NewTicker(publishTick)
	defer tk.Stop()
	var sent float64 // tokens sent so far
	var n int
	w := nextWeight()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C():
		}
		now := c.Clock.Now()
		el := now.Sub(r.start)
		if el >= c.Duration {
			return
		}
		target := t.Profile.demand(el, c.Duration, t.rate, t.capacity)
		for sent+float64(w) <= target+1e-9 && ctx.Err() == nil {
			typ := c.Types[rng.IntN(len(c.Types))]
			subject, err := c.SubjectIn.Subject(t.Name, typ)
			if err != nil {
				r.stats.publishFailed(t.Name)
				return
			}
			n++
			m := nats.NewMsg(subject)
			m.Header.Set("Admit-Weight", strconv.FormatInt(w, 10))
			m.Data = fmt.Appendf(nil, `{"tenant":%q,"type":%q,"n":%d}`, t.Name, typ, n)
			r.stats.sent(t.Name, now)
			f, err := r.js.PublishMsgAsync(m, jetstream.WithExpectStream(c.StreamIn))
			if err != nil {
				r.stats.publishFailed(t.Name)
			} else {
				pending <- inflight{f: f, weight: w} // blocks while MaxInFlight await their PubAck
			}
			sent += float64(w)
			w = nextWeight()
		}
	}
}

// await records the outcome of one publish, waiting at most a little past the publish timeout.
func (r *runner) await(tenant string, p inflight) {
	bound := time.NewTimer(pubAckTimeout + time.Second)
	defer bound.Stop()
	select {
	case ack := <-p.f.Ok():
		if ack.Stream != r.cfg.StreamIn {
			r.stats.publishFailed(tenant)
			return
		}
		r.stats.published(tenant, ack.Sequence, p.weight)
	case <-p.f.Err():
		r.stats.publishFailed(tenant)
	case <-bound.C:
		r.stats.publishFailed(tenant)
	}
}

// onAdmitted counts one message of the output stream.
func (r *runner) onAdmitted(m jetstream.Msg) {
	h := m.Headers()
	seq, ok := inputSeq(h.Get(nats.MsgIdHdr), wire.KindForward, r.cfg.StreamIn)
	if !ok {
		return // not forwarded by admitter from our input stream
	}
	tenant := h.Get(wire.HeaderTenant)
	weight := headerInt(h, wire.HeaderWeight, 1)
	r.stats.admittedJob(tenant, seq, arrival{
		at:       r.cfg.Clock.Now(),
		weight:   weight,
		attempts: headerInt(h, wire.HeaderAttempts, 1),
		delay:    time.Duration(headerInt(h, wire.HeaderDelayMs, 0)) * time.Millisecond,
	})
}

// onDead counts one message of the dead-letter stream.
func (r *runner) onDead(m jetstream.Msg) {
	seq, ok := inputSeq(m.Headers().Get(nats.MsgIdHdr), wire.KindDead, r.cfg.StreamIn)
	if !ok {
		return
	}
	tenant, ok := r.cfg.SubjectDead.Match(m.Subject())
	if !ok {
		return
	}
	r.stats.deadJob(tenant, seq, m.Headers().Get(wire.HeaderError))
}

// inputSeq is the input stream sequence named by admitter's Nats-Msg-Id of the given kind.
func inputSeq(id string, kind wire.Kind, stream string) (uint64, bool) {
	k, st, seq, ok := wire.ParseMsgID(id)
	if !ok || k != kind || st != stream || seq == 0 {
		return 0, false
	}
	return seq, true
}

// headerInt reads a non-negative integer header, def when absent or malformed.
func headerInt(h nats.Header, key string, def int64) int64 {
	v, err := strconv.ParseInt(h.Get(key), 10, 64)
	if err != nil || v < 0 {
		return def
	}
	return v
}

// tail is an ordered consumer of a whole stream from the demo's start, headers only.
type tail struct {
	js     jetstream.JetStream
	stream jetstream.Stream
	cons   jetstream.Consumer
	cc     jetstream.ConsumeContext
	last   atomic.Uint64 // stream sequence of the last message handled
	once   sync.Once
}

// startTail consumes stream from its next message on, calling handle for each (one at a time).
func startTail(ctx context.Context, js jetstream.JetStream, stream jetstream.Stream, handle func(jetstream.Msg)) (*tail, error) {
	actx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	name := stream.CachedInfo().Config.Name
	info, err := stream.Info(actx)
	if err != nil {
		return nil, fmt.Errorf("demo: stream %s: %w", name, err)
	}
	t := &tail{js: js, stream: stream}
	t.last.Store(info.State.LastSeq)
	cons, err := js.OrderedConsumer(actx, name, jetstream.OrderedConsumerConfig{
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       info.State.LastSeq + 1,
		HeadersOnly:       true,
		InactiveThreshold: time.Minute,
	})
	if err != nil {
		return nil, fmt.Errorf("demo: consumer of stream %s: %w", name, err)
	}
	t.cons = cons
	t.cc, err = cons.Consume(func(m jetstream.Msg) {
		handle(m)
		if md, err := m.Metadata(); err == nil {
			t.last.Store(md.Sequence.Stream)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("demo: consume stream %s: %w", name, err)
	}
	return t, nil
}

// catchUp waits until every message stored on the stream now has been handled.
func (t *tail) catchUp(ctx context.Context) error {
	info, err := t.stream.Info(ctx)
	if err != nil {
		return err
	}
	target := info.State.LastSeq
	for t.last.Load() < target {
		select {
		case <-ctx.Done():
			return fmt.Errorf("stream %s: handled up to sequence %d of %d: %w", info.Config.Name, t.last.Load(), target, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// stop stops consuming, waits (bounded) for the consumer to close and deletes it from the
// server (which would otherwise keep it until its inactive threshold). Safe to call twice.
func (t *tail) stop() {
	t.once.Do(func() {
		t.cc.Stop()
		select {
		case <-t.cc.Closed():
		case <-time.After(apiTimeout):
		}
		if info := t.cons.CachedInfo(); info != nil {
			ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
			_ = t.js.DeleteConsumer(ctx, info.Stream, info.Name)
			cancel()
		}
	})
}

// lookup looks up, in the input stream, each job not seen downstream: waiting holds those
// stored there, unchecked those whose lookup failed (the first error is returned).
func lookup(ctx context.Context, stream jetstream.Stream, unresolved map[string][]uint64) (waiting, unchecked map[string]map[uint64]bool, err error) {
	type job struct {
		tenant string
		seq    uint64
	}
	waiting, unchecked = map[string]map[uint64]bool{}, map[string]map[uint64]bool{}
	for tenant := range unresolved {
		waiting[tenant], unchecked[tenant] = map[uint64]bool{}, map[uint64]bool{}
	}
	var mu sync.Mutex
	var firstErr error
	jobs := make(chan job)
	var workers sync.WaitGroup
	for range lookupWorkers {
		workers.Go(func() {
			for j := range jobs {
				actx, cancel := context.WithTimeout(ctx, apiTimeout)
				_, err := stream.GetMsg(actx, j.seq)
				cancel()
				mu.Lock()
				switch {
				case err == nil:
					waiting[j.tenant][j.seq] = true
				case errors.Is(err, jetstream.ErrMsgNotFound):
				default:
					unchecked[j.tenant][j.seq] = true
					if firstErr == nil {
						firstErr = err
					}
				}
				mu.Unlock()
			}
		})
	}
	for tenant, seqs := range unresolved {
		for _, seq := range seqs {
			jobs <- job{tenant, seq}
		}
	}
	close(jobs)
	workers.Wait()
	return waiting, unchecked, firstErr
}
