package admission

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/internal/testenv"
	"github.com/admitter/admitter/plans"
	"github.com/admitter/admitter/policy"
	"github.com/admitter/admitter/subjects"
	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// rig is a running service on an in-process JetStream server with in-process buckets.
type rig struct {
	t       *testing.T
	js      jetstream.JetStream
	nc      *nats.Conn
	svc     *Service
	limiter *bucket.Memory
	spans   *tracetest.InMemoryExporter
	tp      *sdktrace.TracerProvider
	stop    func() // stops the service and waits for Run to return; safe to call twice
	// For run, when set: the limiter the policy asks instead of limiter, its fail mode, and
	// where the service logs.
	asks     policy.Limiter
	failMode policy.FailMode
	logs     io.Writer
	// stopErr is what Run returned once stopped; failsToStop: the test expects an error.
	stopErr     error
	failsToStop bool
}

func startRig(t *testing.T, plansYAML string, cfg Config) *rig {
	t.Helper()
	r := newRig(t)
	r.run(plansYAML, cfg)
	return r
}

// newRig is a rig whose service is not started yet (see run).
func newRig(t *testing.T) *rig {
	t.Helper()
	srv := testenv.StartNATS(t)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &rig{t: t, js: js, nc: nc, limiter: bucket.NewMemory(bucket.Options{}, nil)}
}

// run starts a service on the rig's server and limiter (again, after stop).
func (r *rig) run(plansYAML string, cfg Config) {
	t := r.t
	t.Helper()
	ps, err := plans.Parse("plans.yaml", []byte(plansYAML))
	if err != nil {
		t.Fatal(err)
	}
	var lim policy.Limiter = r.limiter
	if r.asks != nil {
		lim = r.asks
	}
	pol, err := policy.New(policy.Config{Limiter: lim, Plans: ps, FailMode: r.failMode, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	r.spans = tracetest.NewInMemoryExporter()
	r.tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(r.spans))
	cfg.JetStream, cfg.Policy, cfg.TracerProvider = r.js, pol, r.tp
	cfg.In = subjects.MustParse("jobs.submit.{tenant}.>")
	cfg.Out = subjects.MustParse("jobs.admitted.{tenant}.>")
	cfg.Dead = subjects.MustParse("jobs.dead.{tenant}.>")
	cfg.Wait = subjects.MustParse("jobs.waiting.{tenant}")
	cfg.Logger = slog.New(slog.DiscardHandler)
	if r.logs != nil {
		cfg.Logger = slog.New(slog.NewTextHandler(r.logs, nil))
	}
	svc, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := svc.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { r.stopErr = svc.Run(runCtx) })
	stopAndWait := func() { stop(); wg.Wait() }
	t.Cleanup(func() {
		stopAndWait()
		if r.stopErr != nil && !r.failsToStop {
			t.Error(r.stopErr)
		}
	})
	r.svc, r.stop = svc, stopAndWait
}

// waitFor polls cond until it holds, failing after timeout.
var waitFor = testenv.WaitFor

// TestTraceRunsThroughTheQueue publishes two jobs in one producer trace; the second is delayed
// once. Every delivery's span, the limiter call, the forward and the downstream consumer's
// context all belong to the producer's trace, with the decision's attributes.
func TestTraceRunsThroughTheQueue(t *testing.T) {
	r := startRig(t, "plans: {p: {limits: [{name: burst, capacity: 1, rate: 20/s}]}}\ndefault_plan: p\n", Config{})
	prop := propagation.TraceContext{}
	ctx, producer := r.tp.Tracer("producer").Start(context.Background(), "publish jobs", trace.WithSpanKind(trace.SpanKindProducer))
	for _, payload := range []string{"one", "two"} {
		m := nats.NewMsg("jobs.submit.acme.email")
		m.Data = []byte(payload)
		m.Header.Set("Admit-Weight", "1")
		prop.Inject(ctx, wire.HeaderCarrier(m.Header))
		if _, err := r.js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	producer.End()
	traceID := producer.SpanContext().TraceID()

	// The downstream consumer continues the trace from the forwarded headers.
	var forwarded []jetstream.Msg
	cons, err := r.js.OrderedConsumer(context.Background(), "ADMITTED", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "two forwarded jobs", func() bool {
		batch, err := cons.FetchNoWait(10)
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			forwarded = append(forwarded, m)
		}
		return len(forwarded) == 2
	})
	for _, m := range forwarded {
		got := trace.SpanContextFromContext(prop.Extract(context.Background(), wire.HeaderCarrier(m.Headers())))
		if got.TraceID() != traceID {
			t.Fatalf("forwarded job %s carries trace %s, want the producer's %s", m.Data(), got.TraceID(), traceID)
		}
	}

	// Spans: every one of them in the producer's trace.
	byName := map[string][]tracetest.SpanStub{}
	for _, s := range r.spans.GetSpans() {
		if s.SpanContext.TraceID() != traceID {
			t.Errorf("span %q is in trace %s, not the producer's", s.Name, s.SpanContext.TraceID())
		}
		byName[s.Name] = append(byName[s.Name], s)
	}
	// One process span per step that read a job from its queue: the first job's, admitted at
	// once, and the second's, told to wait, then admitted.
	process := byName["process JOBS"]
	if len(process) < 3 || len(byName["process WAITING"]) != 0 {
		t.Fatalf("process spans %v, want at least 3 of JOBS and none of WAITING", names(r.spans.GetSpans()))
	}
	decisions := map[string]int{}
	for _, s := range process {
		a := attrs(s.Attributes)
		if _, ok := a[AttrDecision]; !ok {
			continue
		}
		for _, k := range []attribute.Key{"messaging.system", "messaging.destination.name", "messaging.message.id", AttrTenant, AttrPlan, AttrWeight, AttrDecision, AttrWaitMs, AttrLimit, AttrAttempt} {
			if _, ok := a[k]; !ok {
				t.Errorf("process span lacks %s: %v", k, s.Attributes)
			}
		}
		if a["messaging.system"].AsString() != "nats" || a[AttrTenant].AsString() != "acme" || a[AttrLimit].AsString() != "burst" {
			t.Errorf("process span attributes %v", s.Attributes)
		}
		d := a[AttrDecision].AsString()
		decisions[d]++
		if d == wire.DecisionDelayed && a[AttrWaitMs].AsFloat64() <= 0 {
			t.Errorf("delayed decision with wait %v", a[AttrWaitMs])
		}
	}
	if decisions[wire.DecisionAdmitted] != 2 || decisions[wire.DecisionDelayed] < 1 {
		t.Fatalf("decisions %v, want 2 admitted and at least 1 delayed", decisions)
	}
	if n := len(byName["limiter decide"]); n < 2 {
		t.Errorf("%d limiter spans, want at least 2", n)
	}
	sends := byName["send ADMITTED"]
	if len(sends) != 2 {
		t.Fatalf("%d send spans, want 2", len(sends))
	}
	for _, s := range sends {
		if s.SpanKind != trace.SpanKindProducer {
			t.Errorf("send span kind %v", s.SpanKind)
		}
	}
	// The downstream consumer's parent is admitter's send span.
	parent := trace.SpanContextFromContext(prop.Extract(context.Background(), wire.HeaderCarrier(forwarded[0].Headers())))
	found := false
	for _, s := range sends {
		found = found || s.SpanContext.SpanID() == parent.SpanID()
	}
	if !found {
		t.Fatal("the forwarded job's traceparent is not one of admitter's send spans")
	}
}

func attrs(kvs []attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

func names(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}

// forwarded reads every forwarded job (payload and headers), waiting (bounded) for n of them.
func (r *rig) forwarded(n int) []jetstream.Msg {
	r.t.Helper()
	cons, err := r.js.OrderedConsumer(context.Background(), "ADMITTED", jetstream.OrderedConsumerConfig{})
	if err != nil {
		r.t.Fatal(err)
	}
	var out []jetstream.Msg
	waitFor(r.t, 20*time.Second, fmt.Sprintf("%d forwarded jobs", n), func() bool {
		batch, err := cons.FetchNoWait(100)
		if err != nil {
			r.t.Fatal(err)
		}
		for m := range batch.Messages() {
			out = append(out, m)
		}
		return len(out) >= n
	})
	return out
}

func (r *rig) publish(n int, subject string, hdr ...string) {
	r.t.Helper()
	for i := range n {
		m := nats.NewMsg(subject)
		m.Data = []byte(fmt.Sprint(i))
		for k := 0; k+1 < len(hdr); k += 2 {
			m.Header.Set(hdr[k], hdr[k+1])
		}
		if _, err := r.js.PublishMsg(context.Background(), m); err != nil {
			r.t.Fatal(err)
		}
	}
}

func (r *rig) streamMsgs(name string) uint64 {
	r.t.Helper()
	st, err := r.js.Stream(context.Background(), name)
	if err != nil {
		r.t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		r.t.Fatal(err)
	}
	return info.State.Msgs
}

// TestQueueKeepsTheTenantsOrder: a tenant's jobs of mixed weights come out in the order they
// went in, whether they passed at once or waited.
func TestQueueKeepsTheTenantsOrder(t *testing.T) {
	r := startRig(t, "plans: {p: {limits: [{capacity: 3, rate: 100/s}]}}\ndefault_plan: p\n", Config{})
	const n = 30
	for i := range n {
		m := nats.NewMsg(fmt.Sprintf("jobs.submit.acme.x%d", i%4)) // one tenant, several subjects
		m.Data = []byte(fmt.Sprint(i))
		m.Header.Set(wire.HeaderWeight, fmt.Sprint(1+i%3))
		if _, err := r.js.PublishMsg(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	got := r.forwarded(n)
	for i, m := range got {
		if string(m.Data()) != fmt.Sprint(i) {
			var order []string
			for _, m := range got {
				order = append(order, string(m.Data()))
			}
			t.Fatalf("forwarded in the order %v, want 0..%d", order, n-1)
		}
	}
}

// TestAWaitingJobStaysWhereItArrived: a job that waits stays in the input, written once: no
// other stream holds a copy, and it leaves the input once forwarded; the job before it is
// removed meanwhile.
func TestAWaitingJobStaysWhereItArrived(t *testing.T) {
	r := startRig(t, "plans: {p: {limits: [{capacity: 1, rate: 24/m}]}}\ndefault_plan: p\n", Config{}) // 2.5s a token
	r.publish(2, "jobs.submit.acme.x")
	r.forwarded(1)
	// The first is removed by the compaction below the waiting one (the next heartbeat).
	waitFor(t, 2*time.Second, "the input to hold the waiting job alone", func() bool { return r.streamMsgs("JOBS") == 1 })
	names := r.js.StreamNames(context.Background())
	for name := range names.Name() {
		if name != "JOBS" && name != "ADMITTED" && name != "DEAD" && !strings.HasPrefix(name, "KV_") {
			t.Errorf("a stream %s besides the input and the output", name)
		}
	}
	r.forwarded(2)
	waitFor(t, 5*time.Second, "the input to be empty", func() bool { return r.streamMsgs("JOBS") == 0 })
}

// TestStopLeavesWaitingJobsInTheInput: stopped with jobs waiting, the service leaves them in the
// input; started again, it forwards each once.
func TestStopLeavesWaitingJobsInTheInput(t *testing.T) {
	const plans = "plans: {p: {limits: [{capacity: 1, rate: 2/s}]}}\ndefault_plan: p\n"
	r := startRig(t, plans, Config{})
	r.publish(4, "jobs.submit.acme.x")
	r.forwarded(1)
	r.stop()
	if in := r.streamMsgs("JOBS"); in < 2 {
		t.Fatalf("after stop: %d jobs on the input; want the waiting ones", in)
	}
	r.run(plans, Config{})
	got := r.forwarded(4)
	seen := map[string]bool{}
	for _, m := range got {
		if seen[string(m.Data())] {
			t.Fatalf("job %s forwarded twice", m.Data())
		}
		seen[string(m.Data())] = true
	}
	waitFor(t, 10*time.Second, "the input to empty", func() bool { return r.streamMsgs("JOBS") == 0 })
}

// TestShutdownPastItsBoundSaysSo: a step that cannot end (the output stream is full, and its
// forward is held) keeps the service from stopping within its bound: it cancels what is under
// way, stops, and says which step it cancelled, where it stood.
func TestShutdownPastItsBoundSaysSo(t *testing.T) {
	srv := testenv.StartNATS(t)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// An output that takes one message and refuses the next: a forward held, its step waits.
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "ADMITTED", Subjects: []string{"jobs.admitted.*.>"},
		MaxMsgs: 1, Discard: jetstream.DiscardNew, Duplicates: 2 * time.Minute, Description: "admitter: a full one"}); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	r := &rig{t: t, js: js, nc: nc, limiter: bucket.NewMemory(bucket.Options{}, nil), logs: &logs, failsToStop: true}
	r.run("plans: {p: {limits: [{capacity: 10, rate: 10/s}]}}\ndefault_plan: p\n", Config{ShutdownTimeout: 300 * time.Millisecond})
	r.publish(1, "jobs.submit.acme.email")
	r.forwarded(1)
	r.publish(1, "jobs.submit.acme.email")
	waitFor(t, 5*time.Second, "a forward held", func() bool { held, _ := r.svc.pub.blocked(); return held })
	r.stop()
	if !bytes.Contains(logs.Bytes(), []byte("stopped after the shutdown bound")) {
		t.Errorf("no warning that the service stopped after its bound:\n%s", logs.Bytes())
	}
	if r.stopErr == nil || !strings.Contains(r.stopErr.Error(), "acme (storing its forwards and dead letters") {
		t.Errorf("Run returned %v, want an error naming acme's step and where it stood", r.stopErr)
	}
}

// syncBuffer is a bytes.Buffer safe for the service's goroutines and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.b.Bytes())
}

// stuck is a limiter whose Admit never returns until released, whatever its context says (a
// lock cycle: issue 38's); entered is closed when a call is inside.
type stuck struct {
	*bucket.Memory
	entered, release chan struct{}
	once             sync.Once
}

func (l *stuck) Admit(ctx context.Context, b bucket.Batch) (bucket.BatchResult, error) {
	l.once.Do(func() { close(l.entered) })
	<-l.release
	return bucket.BatchResult{}, errors.New("released")
}

// TestAStuckStepDoesNotHoldTheStop: a step stuck for good in the limiter, deaf to its context,
// does not keep the service from stopping within its bound: Run returns an error naming the
// tenant's step and where it stood. Before, Run waited for the step for ever after cancelling
// it.
func TestAStuckStepDoesNotHoldTheStop(t *testing.T) {
	lim := &stuck{Memory: bucket.NewMemory(bucket.Options{}, nil), entered: make(chan struct{}), release: make(chan struct{})}
	defer close(lim.release)
	r := newRig(t)
	r.asks, r.failsToStop = lim, true
	r.run("plans: {p: {limits: [{capacity: 10, rate: 10/s}]}}\ndefault_plan: p\n", Config{ShutdownTimeout: 500 * time.Millisecond})
	r.publish(1, "jobs.submit.acme.email")
	select {
	case <-lim.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no step reached the limiter")
	}
	stopped := make(chan struct{})
	go func() { r.stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second): // twenty times the bound
		t.Fatal("Run did not return: it waits for a step that never ends")
	}
	if r.stopErr == nil || !strings.Contains(r.stopErr.Error(), "acme (asking the limiter") {
		t.Errorf("Run returned %v, want an error naming acme's step, stuck asking the limiter", r.stopErr)
	}
}

// TestAStuckStepMakesTheReplicaNotReady: a tenant's queue whose step is stuck in the limiter
// (deaf to its context) makes the replica not ready once StallAfter has passed without a
// decision, naming the tenant and where its step stands, and the status says so; once the step
// ends, the replica is ready again. Before, Ready answered nil throughout: the replica decided
// nothing and said it was ready.
func TestAStuckStepMakesTheReplicaNotReady(t *testing.T) {
	lim := &stuck{Memory: bucket.NewMemory(bucket.Options{}, nil), entered: make(chan struct{}), release: make(chan struct{})}
	release := sync.OnceFunc(func() { close(lim.release) })
	defer release()
	r := newRig(t)
	r.asks = lim
	r.run("plans: {p: {limits: [{capacity: 10, rate: 10/s}]}}\ndefault_plan: p\n", Config{StallAfter: 300 * time.Millisecond})
	r.publish(1, "jobs.submit.acme.email")
	select {
	case <-lim.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no step reached the limiter")
	}
	var err error
	waitFor(t, 10*time.Second, "the replica not ready", func() bool {
		err = r.svc.Ready(context.Background())
		return err != nil && strings.Contains(err.Error(), "no decision since")
	})
	if !strings.Contains(err.Error(), "acme (asking the limiter") {
		t.Errorf("Ready: %v, want it to name acme's step, asking the limiter", err)
	}
	if st := r.svc.Status(context.Background()); st.Stuck == nil {
		t.Error("the status does not say that the replica decides nothing")
	}
	release()
	waitFor(t, 10*time.Second, "the replica ready again", func() bool { return r.svc.Ready(context.Background()) == nil })
}
