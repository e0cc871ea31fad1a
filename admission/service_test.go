package admission

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/bucket/buckettest"
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
}

func startRig(t *testing.T, plansYAML string, cfg Config) *rig {
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
	r := &rig{t: t, js: js, nc: nc, limiter: bucket.NewMemory(bucket.Options{}, nil)}
	r.run(plansYAML, cfg)
	return r
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
	wg.Go(func() {
		if err := svc.Run(runCtx); err != nil {
			t.Error(err)
		}
	})
	stopAndWait := func() { stop(); wg.Wait() }
	t.Cleanup(stopAndWait)
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
	// One process span per job taken from the input (one admitted, one moved to its lane), and one
	// per step of the lane that found the moved job (at least the one that admitted it).
	process := append(byName["process JOBS"], byName["process WAITING"]...)
	if len(byName["process JOBS"]) != 2 || len(byName["process WAITING"]) < 1 {
		t.Fatalf("process spans %v, want 2 of JOBS and at least 1 of WAITING", names(r.spans.GetSpans()))
	}
	decisions := map[string]int{}
	for _, s := range process {
		a := attrs(s.Attributes)
		if _, ok := a[AttrDecision]; !ok {
			continue // a lane step that found the job's weight not there yet
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
	if decisions[wire.DecisionAdmitted] != 2 || decisions[wire.DecisionDelayed] != 1 {
		t.Fatalf("decisions %v, want 2 admitted and 1 delayed", decisions)
	}
	if n := len(byName["limiter decide"]); n < 2 {
		t.Errorf("%d limiter spans, want at least 2 (ingest, lane)", n)
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

// TestLaneKeepsTheTenantsOrder: a tenant's jobs of mixed weights come out in the order they
// went in, whether they passed at once or waited in the lane.
func TestLaneKeepsTheTenantsOrder(t *testing.T) {
	r := startRig(t, "plans: {p: {limits: [{capacity: 3, rate: 100/s}]}}\ndefault_plan: p\n", Config{})
	const n = 30
	for i := range n {
		m := nats.NewMsg("jobs.submit.acme.x")
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

// TestWaitingJobsAreDeliveredOnce: a job waits in its lane, not in the input consumer: every
// input is delivered once, whatever the wait compared with the ack wait.
func TestWaitingJobsAreDeliveredOnce(t *testing.T) {
	r := startRig(t, "plans: {p: {limits: [{capacity: 1, rate: 24/m}]}}\ndefault_plan: p\n", // 2.5s a token
		Config{AckWait: time.Second})
	r.publish(2, "jobs.submit.acme.x")
	for _, m := range r.forwarded(2) {
		if a := m.Headers().Get(wire.HeaderAttempts); a != "1" {
			t.Fatalf("Admit-Attempts %q: the input was delivered again", a)
		}
	}
	for _, s := range r.spans.GetSpans() {
		if a, ok := attrs(s.Attributes)[AttrAttempt]; ok && a.AsInt64() != 1 {
			t.Fatalf("a %s span of delivery %d", s.Name, a.AsInt64())
		}
	}
	if n := r.streamMsgs("JOBS"); n != 0 {
		t.Fatalf("the input stream holds %d jobs, want none: the waiting job is in its lane", n)
	}
}

// TestStopLeavesWaitingJobsInTheirLane: stopped with jobs waiting, the service leaves them in
// the lane (the input is empty); started again, it forwards each once.
func TestStopLeavesWaitingJobsInTheirLane(t *testing.T) {
	const plans = "plans: {p: {limits: [{capacity: 1, rate: 2/s}]}}\ndefault_plan: p\n"
	r := startRig(t, plans, Config{})
	r.publish(4, "jobs.submit.acme.x")
	r.forwarded(1)
	waitFor(t, 10*time.Second, "three jobs in the lane", func() bool { return r.streamMsgs("WAITING") == 3 })
	r.stop()
	if in, lane := r.streamMsgs("JOBS"), r.streamMsgs("WAITING"); in != 0 || lane < 2 {
		t.Fatalf("after stop: %d jobs on the input, %d in the lane; want 0 and the waiting ones", in, lane)
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
	waitFor(t, 10*time.Second, "the lane to empty", func() bool { return r.streamMsgs("WAITING") == 0 })
}

// TestShutdownPastItsBoundSaysSo: jobs held (the limiter down, fail mode closed) keep the
// consumer from draining within the shutdown bound: the service aborts what is under way,
// stops, and says that it stopped after the bound (the bound's timer fires once: a second wait
// for it would never end, and the warning never came).
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
	flaky := &buckettest.Flaky{Memory: bucket.NewMemory(bucket.Options{}, nil)}
	flaky.Down.Store(true)
	var logs syncBuffer
	r := &rig{t: t, js: js, nc: nc, limiter: flaky.Memory, asks: flaky, failMode: policy.FailClosed, logs: &logs}
	// One job's payload fills what may be in hand: the consumer's buffer cannot drain while
	// the held job is not settled.
	r.run("plans: {p: {limits: [{capacity: 1, rate: 1/s}]}}\ndefault_plan: p\n", Config{ShutdownTimeout: 300 * time.Millisecond, InFlightBytes: 1})
	for i := range 3 {
		if _, err := js.Publish(context.Background(), "jobs.submit.acme.email", []byte(fmt.Sprint("job ", i))); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 5*time.Second, "a job held", func() bool {
		return bytes.Contains(logs.Bytes(), []byte("limiter")) || r.svc.tel != nil && inHand(r.svc) > 0
	})
	r.stop()
	if !bytes.Contains(logs.Bytes(), []byte("stopped after the shutdown bound")) {
		t.Errorf("no warning that the service stopped after its bound:\n%s", logs.Bytes())
	}
}

// inHand is the payload bytes the service's ingest holds.
func inHand(s *Service) int {
	s.ingest.bytes.mu.Lock()
	defer s.ingest.bytes.mu.Unlock()
	return s.ingest.bytes.used
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
