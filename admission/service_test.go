package admission

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/internal/testenv"
	"github.com/admitter/admitter/subjects"
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
	t     *testing.T
	js    jetstream.JetStream
	nc    *nats.Conn
	svc   *Service
	spans *tracetest.InMemoryExporter
	tp    *sdktrace.TracerProvider
	stop  func() // stops the service and waits for Run to return; safe to call twice
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
	plans, err := bucket.ParsePlans("plans.yaml", []byte(plansYAML))
	if err != nil {
		t.Fatal(err)
	}
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	cfg.JetStream, cfg.Plans, cfg.TracerProvider = js, plans, tp
	cfg.Limiter = bucket.NewMemory(bucket.Options{}, nil)
	cfg.In = subjects.MustParse("jobs.submit.{tenant}.>")
	cfg.Out = subjects.MustParse("jobs.admitted.{tenant}.>")
	cfg.Dead = subjects.MustParse("jobs.dead.{tenant}.>")
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
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
	return &rig{t: t, js: js, nc: nc, svc: svc, spans: spans, tp: tp, stop: stopAndWait}
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
		prop.Inject(ctx, headerCarrier(m.Header))
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
		got := trace.SpanContextFromContext(prop.Extract(context.Background(), headerCarrier(m.Headers())))
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
	process := byName["process JOBS"]
	if len(process) != 3 {
		t.Fatalf("%d process spans, want 3 (one job admitted at once, one delayed then admitted): %v", len(process), names(r.spans.GetSpans()))
	}
	decisions := map[string]int{}
	for _, s := range process {
		a := attrs(s.Attributes)
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
		if d == DecisionDelayed && a[AttrWaitMs].AsFloat64() <= 0 {
			t.Errorf("delayed decision with wait %v", a[AttrWaitMs])
		}
	}
	if decisions[DecisionAdmitted] != 2 || decisions[DecisionDelayed] != 1 {
		t.Fatalf("decisions %v, want 2 admitted and 1 delayed", decisions)
	}
	if n := len(byName["limiter decide"]); n != 3 {
		t.Errorf("%d limiter spans, want 3", n)
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
	parent := trace.SpanContextFromContext(prop.Extract(context.Background(), headerCarrier(forwarded[0].Headers())))
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

// forwardedAttempts reads every forwarded job's Admit-Attempts, waiting (bounded) for n of them.
func (r *rig) forwardedAttempts(n int) []string {
	r.t.Helper()
	cons, err := r.js.OrderedConsumer(context.Background(), "ADMITTED", jetstream.OrderedConsumerConfig{})
	if err != nil {
		r.t.Fatal(err)
	}
	var attempts []string
	waitFor(r.t, 20*time.Second, fmt.Sprintf("%d forwarded jobs", n), func() bool {
		batch, err := cons.FetchNoWait(100)
		if err != nil {
			r.t.Fatal(err)
		}
		for m := range batch.Messages() {
			attempts = append(attempts, m.Headers().Get(HeaderAttempts))
		}
		return len(attempts) >= n
	})
	return attempts
}

func (r *rig) publish(n int, subject string) {
	r.t.Helper()
	for i := range n {
		if _, err := r.js.Publish(context.Background(), subject, []byte(fmt.Sprint(i))); err != nil {
			r.t.Fatal(err)
		}
	}
}

func (r *rig) consumerInfo() *jetstream.ConsumerInfo {
	r.t.Helper()
	c, err := r.js.Consumer(context.Background(), "JOBS", "admitter")
	if err != nil {
		r.t.Fatal(err)
	}
	info, err := c.Info(context.Background())
	if err != nil {
		r.t.Fatal(err)
	}
	return info
}

// TestParkedJobsAreDeliveredOnce: delayed jobs wait in process for their slot, so each is
// delivered once and JetStream redelivers nothing; with parking off each delayed job is
// delivered twice (the delay, then the admission).
func TestParkedJobsAreDeliveredOnce(t *testing.T) {
	const plans = "plans: {p: {limits: [{capacity: 2, rate: 50/s}]}}\ndefault_plan: p\n"
	for _, tc := range []struct {
		name    string
		parkMax time.Duration
		twice   int
	}{{"parked", time.Minute, 0}, {"nak", 0, 4}} {
		t.Run(tc.name, func(t *testing.T) {
			r := startRig(t, plans, Config{ParkMax: tc.parkMax})
			r.publish(6, "jobs.submit.acme.x")
			attempts := r.forwardedAttempts(6)
			twice := 0
			for _, a := range attempts {
				if a == "2" {
					twice++
				} else if a != "1" {
					t.Fatalf("Admit-Attempts %q", a)
				}
			}
			if twice != tc.twice {
				t.Fatalf("%d of 6 jobs delivered twice, want %d (attempts %v)", twice, tc.twice, attempts)
			}
			if got := r.consumerInfo().NumRedelivered; tc.twice == 0 && got != 0 {
				t.Fatalf("%d jobs redelivered while parked", got)
			}
		})
	}
}

// TestParkedJobOutlivesTheAckWait parks a job for three ack-wait halves: progress acks keep
// JetStream from redelivering it, and it is forwarded once, at its slot.
func TestParkedJobOutlivesTheAckWait(t *testing.T) {
	r := startRig(t, "plans: {p: {limits: [{capacity: 1, rate: 24/m}]}}\ndefault_plan: p\n", // 2.5s a token
		Config{ParkMax: time.Minute, AckWait: time.Second})
	r.publish(2, "jobs.submit.acme.x")
	attempts := r.forwardedAttempts(2)
	if attempts[0] != "1" || attempts[1] != "1" {
		t.Fatalf("attempts %v, want both delivered once", attempts)
	}
	// Every delivery is a process span carrying its delivery count: none may be a redelivery.
	// (The consumer's NumRedelivered cannot tell: it forgets a job once it is acked.)
	for _, s := range r.spans.GetSpans() {
		if a, ok := attrs(s.Attributes)[AttrAttempt]; ok && a.AsInt64() != 1 {
			t.Fatalf("a %s span of delivery %d: the parked job was redelivered", s.Name, a.AsInt64())
		}
	}
}

// TestStopHandsParkedJobsBack stops the service with a job parked: it goes back to JetStream
// with the rest of its wait, not dropped, not forwarded early.
func TestStopHandsParkedJobsBack(t *testing.T) {
	r := startRig(t, "plans: {p: {limits: [{capacity: 1, rate: 1/m}]}}\ndefault_plan: p\n", Config{ParkMax: time.Minute})
	r.publish(2, "jobs.submit.acme.x")
	r.forwardedAttempts(1)
	waitFor(t, 10*time.Second, "the second job to be parked", func() bool { return r.svc.parking.len() == 1 })
	r.stop()
	info := r.consumerInfo()
	if info.NumAckPending != 1 || info.NumRedelivered != 0 {
		t.Fatalf("after stop: ack pending %d, redelivered %d; want the parked job pending with its delay", info.NumAckPending, info.NumRedelivered)
	}
}
