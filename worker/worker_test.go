package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/admitter/admitter/internal/testenv"
	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// env is a test's in-process JetStream with admitter's output stream, a consumer of it, and a
// stand-in for admitter's lease handling that answers done and renew requests as admitter does
// and records them. (The real admitter's side is tested end to end in tests/worker_test.go.)
type env struct {
	t    *testing.T
	nc   *nats.Conn
	js   jetstream.JetStream
	cons jetstream.Consumer

	mu   sync.Mutex
	msgs []leaseMsg       // every done and renew message, in order
	held map[int64]bool   // leases held: renewals answer held while true, a done ends them
	acks map[int64]uint64 // the consumer's ack floor (stream sequence) when each done arrived
	// taken counts, per lease, the starts still to answer "not held, wait 300 ms" (its slots
	// are taken by jobs running elsewhere).
	taken map[int64]int
	// silent is how many done messages are still to go unanswered (a replica that stopped
	// answering took them).
	silent int
}

// leaseMsg is a done, renew or start message the stand-in received.
type leaseMsg struct {
	at      time.Time
	subject string
	lease   string
	cost    string // "" when absent
	weight  string
	start   bool
	outcome string // Admit-Outcome, "" when absent
	retry   string // Admit-Retry-After and Admit-Retry-Scope, "" when absent
	scope   string
}

func (m leaseMsg) done() bool { return strings.HasPrefix(m.subject, "jobs.done.") }

// setup starts the servers and a consumer with ackWait.
func setup(t *testing.T, ackWait time.Duration) *env {
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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ADMITTED", Subjects: []string{"jobs.admitted.>", "work.>"}})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "workers", AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, nc: nc, js: js, cons: cons, held: map[int64]bool{}, acks: map[int64]uint64{}, taken: map[int64]int{}}
	for _, subj := range []string{"jobs.done.>", "jobs.renew.>", "fin.>"} {
		sub, err := nc.Subscribe(subj, e.answer)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	return e
}

// answer is the stand-in's handling of a done or renew request.
func (e *env) answer(m *nats.Msg) {
	lease, _ := strconv.ParseInt(m.Header.Get(wire.HeaderLease), 10, 64)
	msg := leaseMsg{at: time.Now(), subject: m.Subject, lease: m.Header.Get(wire.HeaderLease), cost: m.Header.Get(wire.HeaderCost),
		weight: m.Header.Get(wire.HeaderWeight), start: m.Header.Get(wire.HeaderStart) == "true", outcome: m.Header.Get(wire.HeaderOutcome),
		retry: m.Header.Get(wire.HeaderDownstreamRetryAfter), scope: m.Header.Get(wire.HeaderRetryScope)}
	var floor uint64
	if !strings.Contains(m.Subject, "renew") {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if info, err := e.cons.Info(ctx); err == nil {
			floor = info.AckFloor.Stream
		}
		cancel()
	}
	e.mu.Lock()
	e.msgs = append(e.msgs, msg)
	if msg.done() && e.silent > 0 {
		e.silent--
		e.mu.Unlock()
		return
	}
	held := e.held[lease]
	if !strings.Contains(m.Subject, "renew") {
		e.held[lease] = false
		e.acks[lease] = floor
	}
	reply := wire.LeaseReply{Lease: lease, Held: held, Weight: 1}
	if msg.start && e.taken[lease] > 0 {
		e.taken[lease]--
		reply = wire.LeaseReply{Lease: lease, WaitMs: 300}
	}
	e.mu.Unlock()
	b, _ := json.Marshal(reply)
	_ = m.Respond(b)
}

func (e *env) leaseMsgs() []leaseMsg {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.msgs)
}

// forward publishes a job as admitter forwards it, holding lease (0: none) of length leaseMs
// (0: no Admit-Lease-Ms), and returns its stream sequence.
func (e *env) forward(subject string, lease, leaseMs int64, hdr ...string) uint64 {
	e.t.Helper()
	m := nats.NewMsg(subject)
	m.Data = []byte("payload of " + subject)
	tenant := strings.Split(subject, ".")[2]
	m.Header.Set(wire.HeaderTenant, tenant)
	m.Header.Set(wire.HeaderPlan, "plan-"+tenant)
	if lease > 0 {
		m.Header.Set(wire.HeaderLease, strconv.FormatInt(lease, 10))
		e.mu.Lock()
		e.held[lease] = true
		e.mu.Unlock()
	}
	if leaseMs > 0 {
		m.Header.Set(wire.HeaderLeaseLength, strconv.FormatInt(leaseMs, 10))
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		m.Header.Set(hdr[i], hdr[i+1])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ack, err := e.js.PublishMsg(ctx, m)
	if err != nil {
		e.t.Fatal(err)
	}
	return ack.Sequence
}

// start builds and starts a worker on the env's consumer, stopped (bounded) when the test ends.
func (e *env) start(c Config) *Worker {
	e.t.Helper()
	c.Consumer, c.Conn = e.cons, e.nc
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	w, err := New(c)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
		noWorkerGoroutines(e.t, w)
	})
	return w
}

// noWorkerGoroutines fails when a goroutine of this package outlives its stopped Worker.
func noWorkerGoroutines(t *testing.T, w *Worker) {
	t.Helper()
	select {
	case <-w.Stopped():
	case <-time.After(5 * time.Second):
		t.Errorf("the worker did not stop within 5 s")
		return
	}
	var left string
	testenv.WaitFor(t, 5*time.Second, "the worker's goroutines to end", func() bool {
		var b strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
		left = ""
		for _, g := range strings.Split(b.String(), "\n\n") {
			if strings.Contains(g, "admitter/worker.(*") && !strings.Contains(g, "_test.go") {
				left += g + "\n\n"
			}
		}
		return left == ""
	})
}

// consumerState is the consumer's ack floor and acks pending.
func (e *env) consumerState() (floor uint64, pending int) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := e.cons.Info(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return info.AckFloor.Stream, info.NumAckPending
}

// TestDoneMessageEndsTheLease: a job holding a lease is ended, once its handler returns, by a
// done request on the subject mapped from its own, naming its lease and the cost the handler
// set; the forward is acked after that, not before. The handler saw the forward as admitter
// sent it.
func TestDoneMessageEndsTheLease(t *testing.T) {
	e := setup(t, time.Minute)
	type seen struct {
		Tenant, Plan  string
		Weight, Lease int64
		LeaseLength   time.Duration
		Attempt       uint64
		Subject, Data string
		deadline      time.Time
	}
	got := make(chan seen, 1)
	e.start(Config{Handler: func(ctx context.Context, j *Job) error {
		j.SetCost(5)
		got <- seen{j.Tenant, j.Plan, j.Weight, j.Lease, j.LeaseLength, j.Attempt, j.Subject, string(j.Data), j.LeaseDeadline()}
		return nil
	}})
	before := time.Now()
	seq := e.forward("jobs.admitted.acme.email.send", 7, 60000, wire.HeaderWeight, "3")
	j := <-got
	want := seen{"acme", "plan-acme", 3, 7, time.Minute, 1, "jobs.admitted.acme.email.send", "payload of jobs.admitted.acme.email.send", time.Time{}}
	if d := j.deadline.Sub(before); d < 59*time.Second || d > 61*time.Second {
		t.Errorf("LeaseDeadline %v after the forward, want about its store time + 1m", d)
	}
	j.deadline = time.Time{}
	if j != want {
		t.Errorf("job %+v\nwant %+v", j, want)
	}
	testenv.WaitFor(t, 5*time.Second, "the forward acked", func() bool { floor, _ := e.consumerState(); return floor == seq })
	msgs := e.leaseMsgs()
	if len(msgs) != 1 || msgs[0] != (leaseMsg{at: msgs[0].at, subject: "jobs.done.acme.email.send", lease: "7", cost: "5", weight: "3"}) {
		t.Fatalf("lease messages %+v, want one done of lease 7 (weight 3) with cost 5 on jobs.done.acme.email.send: a job delivered promptly needs no start", msgs)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.acks[7] >= seq {
		t.Errorf("the forward was acked before its done message")
	}
}

// TestADoneMessageOutlastsAPausedReplica: a replica that stopped answering (paused) takes its
// share of the done messages, each try drawn at random; here it takes the first six tries of a
// job's. The seventh ends the lease. Before, a try waited 500 ms more than the one before, four
// in all: the four lost, the lease ended by itself (in the takeover drill, a done message lost
// twice held its slot 1.8 s, once 0.6 s).
func TestADoneMessageOutlastsAPausedReplica(t *testing.T) {
	e := setup(t, time.Minute)
	e.silent = 6
	ran := make(chan struct{}, 1)
	e.start(Config{Handler: func(ctx context.Context, j *Job) error { ran <- struct{}{}; return nil }})
	e.forward("jobs.admitted.acme.email.send", 7, 60000)
	<-ran
	testenv.WaitFor(t, 10*time.Second, "the lease ended by a done message", func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return !e.held[7]
	})
	if n := len(e.leaseMsgs()); n != 7 {
		t.Fatalf("%d done messages, want 7: six unanswered, the seventh answered", n)
	}
}

// TestDoneTriesComeSoonThenSlowly: the first eight tries of a done message wait 100 ms each (a
// replica taking six in a row holds the slot 0.6 s), the later ones longer, about six seconds in
// all with the default timeout, and none longer than the timeout.
func TestDoneTriesComeSoonThenSlowly(t *testing.T) {
	var all time.Duration
	for try := 1; try <= doneTries; try++ {
		w := doneWait(defaultRequestTimeout, try)
		if try <= 8 && w != 100*time.Millisecond || w > defaultRequestTimeout {
			t.Errorf("try %d waits %v, want 100 ms for the first eight, at most %v", try, w, defaultRequestTimeout)
		}
		all += w
	}
	if all < 5*time.Second {
		t.Errorf("the tries wait %v in all, want at least 5 s: an admitter slow to answer (Redis failing over) still ends the lease", all)
	}
	if w := doneWait(50*time.Millisecond, 1); w != 50*time.Millisecond {
		t.Errorf("a try under a 50 ms timeout waits %v, want 50 ms", w)
	}
}

// TestRenewsWhileTheHandlerRuns: a lease of 400 ms is renewed about every 200 ms (halfway
// through each lease) while the handler runs, never after it returned; the job's deadline moves
// with each renewal.
func TestRenewsWhileTheHandlerRuns(t *testing.T) {
	e := setup(t, time.Minute)
	deadlines := make(chan [2]time.Time, 1)
	e.start(Config{Handler: func(ctx context.Context, j *Job) error {
		first := j.LeaseDeadline()
		time.Sleep(1100 * time.Millisecond) // the job's work
		deadlines <- [2]time.Time{first, j.LeaseDeadline()}
		return nil
	}})
	e.forward("jobs.admitted.acme.export", 9, 400)
	d := <-deadlines
	testenv.WaitFor(t, 5*time.Second, "the done message", func() bool {
		m := e.leaseMsgs()
		return len(m) > 0 && m[len(m)-1].done()
	})
	time.Sleep(500 * time.Millisecond) // a renewal after the done would come within this
	msgs := e.leaseMsgs()
	renewals := msgs[:len(msgs)-1]
	for i, m := range msgs {
		if m.lease != "9" || (i < len(renewals)) != (m.subject == "jobs.renew.acme.export") || (i == len(renewals)) != (m.subject == "jobs.done.acme.export") {
			t.Fatalf("lease messages %+v: want renewals of lease 9 on jobs.renew.acme.export, then one done", msgs)
		}
	}
	if len(renewals) < 3 || len(renewals) > 7 {
		t.Errorf("%d renewals in 1.1 s of a 400 ms lease, want 5 (every 200 ms)", len(renewals))
	}
	for i := 1; i < len(renewals); i++ { // the exact schedule: TestKeeperSchedule
		if gap := renewals[i].at.Sub(renewals[i-1].at); gap < 100*time.Millisecond || gap > 400*time.Millisecond {
			t.Errorf("renewal %d came %v after the one before, want about 200 ms", i, gap)
		}
	}
	if !d[1].After(d[0].Add(600 * time.Millisecond)) {
		t.Errorf("deadline %v at the start, %v at the end: not moved by the renewals", d[0], d[1])
	}
}

// TestHandlerErrorFreesTheSlotAndTerminates: a handler that fails (an error or a panic) ends
// its lease with a done message, then terminates the delivery with the error as reason: it is
// not delivered again.
func TestHandlerErrorFreesTheSlotAndTerminates(t *testing.T) {
	e := setup(t, time.Second)
	reasons := make(chan string, 4)
	sub, err := e.nc.Subscribe("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.ADMITTED.workers", func(m *nats.Msg) {
		var a struct {
			Reason string `json:"reason"`
		}
		_ = json.Unmarshal(m.Data, &a)
		reasons <- a.Reason
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	var calls atomic.Int32
	e.start(Config{Handler: func(ctx context.Context, j *Job) error {
		calls.Add(1)
		if j.Lease == 2 {
			panic("boom")
		}
		return errors.New("the model\nis down")
	}})
	e.forward("jobs.admitted.acme.llm", 1, 60000)
	e.forward("jobs.admitted.acme.llm", 2, 60000)
	got := []string{<-reasons, <-reasons}
	slices.Sort(got)
	if want := []string{"the model is down", "worker: handler panicked: boom"}; !slices.Equal(got, want) {
		t.Errorf("terminated with reasons %q, want %q", got, want)
	}
	time.Sleep(1500 * time.Millisecond) // past AckWait: a delivery not settled would come again
	if n := calls.Load(); n != 2 {
		t.Errorf("handler called %d times, want 2: a failed job was delivered again", n)
	}
	var done []string
	for _, m := range e.leaseMsgs() {
		if m.done() {
			done = append(done, m.lease)
		}
	}
	slices.Sort(done)
	if !slices.Equal(done, []string{"1", "2"}) {
		t.Errorf("done messages for leases %v, want 1 and 2", done)
	}
}

// TestRetryKeepsTheLease: Retry sends no done message and has the job delivered again; the
// second delivery's lease is renewed before its handler runs (to learn it is still held), and
// its done message ends it.
func TestRetryKeepsTheLease(t *testing.T) {
	e := setup(t, time.Minute)
	attempts := make(chan uint64, 2)
	e.start(Config{Handler: func(ctx context.Context, j *Job) error {
		attempts <- j.Attempt
		if j.Attempt == 1 {
			return Retry(errors.New("busy"), 50*time.Millisecond)
		}
		return nil
	}})
	e.forward("jobs.admitted.acme.llm", 4, 60000)
	if a, b := <-attempts, <-attempts; a != 1 || b != 2 {
		t.Fatalf("attempts %d, %d", a, b)
	}
	testenv.WaitFor(t, 5*time.Second, "the done message", func() bool {
		m := e.leaseMsgs()
		return len(m) > 0 && m[len(m)-1].done()
	})
	var kinds []string
	for _, m := range e.leaseMsgs() {
		k := strings.Split(m.subject, ".")[1]
		if m.start {
			k = "start"
		}
		kinds = append(kinds, k)
	}
	if !slices.Equal(kinds, []string{"start", "done"}) {
		t.Errorf("lease messages %v, want a start before the second delivery's handler (it renews the lease), then done", kinds)
	}
}

// TestStartPutsBackAJobWhoseSlotsAreTaken: a job that waited in the output past the middle of
// its lease (the workers were away) starts by asking for its slots; admitter answers they are
// taken (its lease ended and other jobs run now) and for how long: the job goes back to the
// consumer for that long without running, and runs once a start is answered held.
func TestStartPutsBackAJobWhoseSlotsAreTaken(t *testing.T) {
	e := setup(t, time.Minute)
	e.mu.Lock()
	e.taken[9] = 2
	e.mu.Unlock()
	ran := make(chan uint64, 3)
	e.forward("jobs.admitted.acme.x", 9, 1000)
	time.Sleep(600 * time.Millisecond) // past the middle of its 1 s lease: no worker ran
	begin := time.Now()
	e.start(Config{Handler: func(ctx context.Context, j *Job) error { ran <- j.Attempt; return nil }})
	if a := <-ran; a != 3 {
		t.Fatalf("the handler ran at delivery %d, want 3 (two starts refused)", a)
	}
	if d := time.Since(begin); d < 600*time.Millisecond {
		t.Errorf("the job ran %v after the worker started: it was not put back for the 2 × 300 ms admitter said", d)
	}
	select {
	case a := <-ran:
		t.Fatalf("the handler ran again (delivery %d)", a)
	case <-time.After(200 * time.Millisecond):
	}
	var starts int
	for _, m := range e.leaseMsgs() {
		if m.start {
			starts++
		}
	}
	if starts != 3 {
		t.Errorf("%d starts sent, want 3", starts)
	}
}

// TestConcurrencyIsBounded: with Concurrency 3, never more than 3 handlers run at once, and 3
// do.
func TestConcurrencyIsBounded(t *testing.T) {
	e := setup(t, time.Minute)
	var in, most atomic.Int32
	var handled atomic.Int32
	e.start(Config{Concurrency: 3, Handler: func(ctx context.Context, j *Job) error {
		n := in.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(50 * time.Millisecond) // the job's work
		in.Add(-1)
		handled.Add(1)
		return nil
	}})
	for i := range 12 {
		e.forward(fmt.Sprintf("jobs.admitted.t%d.x", i%4), 0, 0)
	}
	testenv.WaitFor(t, 10*time.Second, "12 jobs handled", func() bool { return handled.Load() == 12 })
	if m := most.Load(); m != 3 {
		t.Errorf("%d handlers at once, want 3", m)
	}
	if msgs := e.leaseMsgs(); len(msgs) != 0 {
		t.Errorf("lease messages %+v for jobs without a lease", msgs)
	}
}

// TestStopWaitsThenCancels: Stop waits for a running handler; past its bound it cancels the
// handler's context and says so; the handler's error then is a hard stop's: the delivery is
// Nak'd (delivered again) and the lease kept (no done message). Stop twice is fine, and a
// stopped worker does not start again.
func TestStopWaitsThenCancels(t *testing.T) {
	e := setup(t, time.Minute)
	started := make(chan string, 2)
	release := make(chan struct{})
	w := e.start(Config{Concurrency: 2, Handler: func(ctx context.Context, j *Job) error {
		started <- j.Subject
		if j.Subject == "jobs.admitted.acme.quick" {
			<-release
			return nil
		}
		<-ctx.Done()
		return ctx.Err()
	}})
	e.forward("jobs.admitted.acme.quick", 1, 60000)
	e.forward("jobs.admitted.acme.stuck", 2, 60000)
	<-started
	<-started
	go func() { time.Sleep(100 * time.Millisecond); close(release) }()
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	begin := time.Now()
	err := w.Stop(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "1 handlers still running") {
		t.Fatalf("Stop = %v, want the deadline with 1 handler running", err)
	}
	if took := time.Since(begin); took < 350*time.Millisecond || took > 2*time.Second {
		t.Errorf("Stop returned after %v, want its 400 ms bound", took)
	}
	select {
	case <-w.Stopped():
	case <-time.After(5 * time.Second):
		t.Fatal("the cancelled handler's worker did not stop")
	}
	if err := w.Stop(context.Background()); err != nil {
		t.Errorf("Stop again = %v", err)
	}
	if err := w.Start(context.Background()); !errors.Is(err, ErrStopped) {
		t.Errorf("Start after Stop = %v, want ErrStopped", err)
	}
	var done []string
	for _, m := range e.leaseMsgs() {
		if m.done() {
			done = append(done, m.lease)
		}
	}
	if !slices.Equal(done, []string{"1"}) {
		t.Errorf("done messages for leases %v, want only the quick job's (1): the stopped one keeps its lease", done)
	}
	if floor, _ := e.consumerState(); floor != 1 {
		t.Errorf("ack floor %d, want the quick job acked", floor)
	}
	// Nak'd, the stuck job is delivered again at once (AckWait is a minute).
	batch, err := e.cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	m, ok := <-batch.Messages()
	if !ok {
		t.Fatalf("the stuck job was not delivered again within 1 s: not Nak'd")
	}
	meta, _ := m.Metadata()
	if m.Subject() != "jobs.admitted.acme.stuck" || meta.NumDelivered != 2 {
		t.Errorf("delivered %s for the %d time, want the stuck job's second delivery", m.Subject(), meta.NumDelivered)
	}
	_ = m.Ack()
}

// TestStopBeforeStart: Stop before Start is a stop; the worker then never starts.
func TestStopBeforeStart(t *testing.T) {
	e := setup(t, time.Minute)
	w, err := New(Config{Consumer: e.cons, Conn: e.nc, Handler: func(context.Context, *Job) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-w.Stopped()
	if err := w.Start(context.Background()); !errors.Is(err, ErrStopped) {
		t.Errorf("Start after Stop = %v, want ErrStopped", err)
	}
}

// TestSubjectsFollowTheTemplates: done and renew subjects come from the forward's under the
// user's templates: mapped when they carry the same wildcards, filled with "job" otherwise.
func TestSubjectsFollowTheTemplates(t *testing.T) {
	e := setup(t, time.Minute)
	handled := make(chan struct{}, 2)
	e.start(Config{Out: "work.{tenant}.*.>", Done: "fin.{tenant}.*.>", Renew: "jobs.renew.{tenant}",
		Handler: func(ctx context.Context, j *Job) error { handled <- struct{}{}; return nil }})
	e.forward("work.acme.eu.a.b", 3, 60000)
	<-handled
	testenv.WaitFor(t, 5*time.Second, "the done message", func() bool { return len(e.leaseMsgs()) == 1 })
	if m := e.leaseMsgs()[0]; m.subject != "fin.acme.eu.a.b" {
		t.Errorf("done on %s, want fin.acme.eu.a.b", m.subject)
	}

	w, err := New(Config{Consumer: e.cons, Conn: e.nc, Out: "work.{tenant}.*.>", Done: "fin.{tenant}.>", Renew: "jobs.renew.{tenant}",
		Handler: func(context.Context, *Job) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	j := &Job{Tenant: "acme", Subject: "work.acme.eu.a.b"}
	for _, tc := range []struct{ got, want string }{
		{w.leaseSubject(w.t.toDone, w.t.done, j), "fin.acme.job"},
		{w.leaseSubject(w.t.toRenew, w.t.renew, j), "jobs.renew.acme"},
	} {
		if tc.got != tc.want {
			t.Errorf("lease subject %q, want %q", tc.got, tc.want)
		}
	}
}

func TestNewRefusesWhatCannotWork(t *testing.T) {
	e := setup(t, time.Minute)
	h := func(context.Context, *Job) error { return nil }
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := e.js.Stream(ctx, "ADMITTED")
	if err != nil {
		t.Fatal(err)
	}
	ackAll, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "all", AckPolicy: jetstream.AckAllPolicy})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{Config{Conn: e.nc, Handler: h}, "Consumer is nil"},
		{Config{Consumer: e.cons, Handler: h}, "Conn is nil"},
		{Config{Consumer: e.cons, Conn: e.nc}, "Handler is nil"},
		{Config{Consumer: e.cons, Conn: e.nc, Handler: h, Concurrency: -1}, "Concurrency must be 1 or more"},
		{Config{Consumer: ackAll, Conn: e.nc, Handler: h}, "want jetstream.AckExplicitPolicy"},
		{Config{Consumer: e.cons, Conn: e.nc, Handler: h, Done: "jobs.done.>"}, `Done: subjects: invalid template "jobs.done.>": no {tenant} token`},
		{Config{Consumer: e.cons, Conn: e.nc, Handler: h, Lease: -time.Second}, "Lease must not be negative"},
	} {
		if _, err := New(tc.c); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New = %v, want ErrConfig saying %q", err, tc.want)
		}
	}
}

func TestOutcome(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		hard bool
		want outcome
	}{
		{"done", nil, false, outcome{release: true, settle: ack, report: "ok"}},
		{"done despite a hard stop", nil, true, outcome{release: true, settle: ack, report: "ok"}},
		{"failed", errors.New("no"), false, outcome{release: true, settle: term, reason: "no", report: "failed"}},
		{"overloaded", Overloaded(errors.New("503")), false, outcome{release: true, settle: nak, delay: time.Second, report: "overloaded"}},
		{"overloaded, wrapped, at a hard stop", fmt.Errorf("x: %w", Overloaded(errors.New("503"))), true, outcome{release: true, settle: nak, delay: time.Second, report: "overloaded"}},
		{"retry after", RetryAfter(5*time.Second, errors.New("429")), false, outcome{release: true, settle: nak, delay: 5 * time.Second, report: "overloaded", retryAfter: 5 * time.Second}},
		{"retry after, the pool's", RetryAfterPool(time.Minute, errors.New("429")), false, outcome{release: true, settle: nak, delay: time.Minute, report: "overloaded", retryAfter: time.Minute, pool: true}},
		{"retry", Retry(errors.New("busy"), time.Second), false, outcome{settle: nak, delay: time.Second}},
		{"retry, wrapped", fmt.Errorf("x: %w", Retry(errors.New("busy"), -time.Second)), false, outcome{settle: nak}},
		{"interrupted by a hard stop", context.Canceled, true, outcome{settle: nak}},
		{"long reason", errors.New(strings.Repeat("é", 200)), false, outcome{release: true, settle: term, reason: strings.Repeat("é", 128), report: "failed"}},
	} {
		if got := outcomeOf(tc.err, tc.hard); got != tc.want {
			t.Errorf("%s: outcomeOf = %+v, want %+v", tc.name, got, tc.want)
		}
	}
	if Retry(nil, time.Second) != nil || Overloaded(nil) != nil || RetryAfter(time.Second, nil) != nil || RetryAfterPool(time.Second, nil) != nil {
		t.Error("Retry, Overloaded, RetryAfter or RetryAfterPool of nil is not nil")
	}
}

// TestLongJobIsNotDeliveredAgain: a handler running past the consumer's AckWait keeps its
// delivery (InProgress every half AckWait): it is not delivered to a second handler meanwhile.
func TestLongJobIsNotDeliveredAgain(t *testing.T) {
	e := setup(t, time.Second)
	var calls atomic.Int32
	done := make(chan struct{})
	e.start(Config{Concurrency: 2, Handler: func(ctx context.Context, j *Job) error {
		if calls.Add(1) == 1 {
			time.Sleep(2500 * time.Millisecond) // the job's work: 2.5 AckWaits
			close(done)
		}
		return nil
	}})
	seq := e.forward("jobs.admitted.acme.export", 0, 0)
	<-done
	testenv.WaitFor(t, 5*time.Second, "the job acked", func() bool { floor, _ := e.consumerState(); return floor == seq })
	if n := calls.Load(); n != 1 {
		t.Errorf("handler called %d times, want 1: delivered again while it ran", n)
	}
}

// TestDoneMessageSaysTheOutcome: the done message says how the job went (Admit-Outcome): nothing
// for a job done (ok is the default), failed for an error, overloaded for Overloaded; an
// overloaded job is delivered again, starting with a start (its slots taken again).
func TestDoneMessageSaysTheOutcome(t *testing.T) {
	e := setup(t, time.Minute)
	var calls atomic.Int32
	e.start(Config{Concurrency: 3, Handler: func(ctx context.Context, j *Job) error {
		switch {
		case j.Lease == 2:
			return errors.New("bad input")
		case j.Lease == 3 && calls.Add(1) == 1:
			return Overloaded(errors.New("503 Service Unavailable"))
		}
		return nil
	}})
	for lease := int64(1); lease <= 3; lease++ {
		e.forward("jobs.admitted.acme.llm", lease, 60000)
	}
	testenv.WaitFor(t, 10*time.Second, "four done messages", func() bool {
		n := 0
		for _, m := range e.leaseMsgs() {
			if m.done() {
				n++
			}
		}
		return n == 4
	})
	var got []string
	for _, m := range e.leaseMsgs() {
		k := "done"
		if m.start {
			k = "start"
		} else if !m.done() {
			k = "renew"
		}
		got = append(got, fmt.Sprintf("%s %s %s", m.lease, k, m.outcome))
	}
	slices.Sort(got)
	if want := []string{"1 done ", "2 done failed", "3 done ", "3 done overloaded", "3 start "}; !slices.Equal(got, want) {
		t.Errorf("lease messages %q, want %q", got, want)
	}
}

// TestRetryAfterHoldsAndPutsBack: a handler returning RetryAfter sends its done message with
// Admit-Retry-After (and Admit-Retry-Scope: pool for RetryAfterPool), and its job is delivered
// again no sooner than the delay.
func TestRetryAfterHoldsAndPutsBack(t *testing.T) {
	e := setup(t, time.Minute)
	attempts := make(chan time.Time, 4)
	e.start(Config{Concurrency: 2, Handler: func(ctx context.Context, j *Job) error {
		attempts <- time.Now()
		if j.Attempt > 1 {
			return nil
		}
		if j.Lease == 1 {
			return RetryAfter(1200*time.Millisecond, errors.New("429 Too Many Requests"))
		}
		return RetryAfterPool(300*time.Millisecond, errors.New("429 Too Many Requests"))
	}})
	e.forward("jobs.admitted.acme.llm", 1, 60000)
	first := <-attempts
	e.forward("jobs.admitted.acme.llm", 2, 60000)
	<-attempts
	<-attempts
	if second := <-attempts; second.Sub(first) < 1200*time.Millisecond {
		t.Errorf("delivered again %v after the first attempt, want at least 1.2s", second.Sub(first))
	}
	testenv.WaitFor(t, 5*time.Second, "four done messages", func() bool {
		n := 0
		for _, m := range e.leaseMsgs() {
			if m.done() {
				n++
			}
		}
		return n == 4
	})
	var got []string
	for _, m := range e.leaseMsgs() {
		if m.done() {
			got = append(got, fmt.Sprintf("%s %s %s %s", m.lease, m.outcome, m.retry, m.scope))
		}
	}
	slices.Sort(got)
	if want := []string{"1   ", "1 overloaded 2 ", "2   ", "2 overloaded 1 pool"}; !slices.Equal(got, want) {
		t.Errorf("done messages %q, want %q", got, want)
	}
}

func TestResponseError(t *testing.T) {
	now := time.Now()
	req, _ := http.NewRequest("POST", "https://user:secret@api.example.com/v1/chat", nil)
	resp := func(code int, retry string) *http.Response {
		r := &http.Response{StatusCode: code, Status: fmt.Sprintf("%d %s", code, http.StatusText(code)), Header: http.Header{}, Request: req}
		if retry != "" {
			r.Header.Set("Retry-After", retry)
		}
		return r
	}
	for _, tc := range []struct {
		name string
		resp *http.Response
		err  error
		want outcome
		msg  string
	}{
		{"200", resp(200, ""), nil, outcome{release: true, settle: ack, report: "ok"}, ""},
		{"302", resp(302, ""), nil, outcome{release: true, settle: ack, report: "ok"}, ""},
		{"400", resp(400, ""), nil, outcome{release: true, settle: term, reason: "worker: POST https://user:xxxxx@api.example.com/v1/chat: 400 Bad Request", report: "failed"}, ""},
		{"500", resp(500, ""), nil, outcome{release: true, settle: term, reason: "worker: POST https://user:xxxxx@api.example.com/v1/chat: 500 Internal Server Error", report: "failed"}, ""},
		{"429 with seconds", resp(429, "30"), nil, outcome{release: true, settle: nak, delay: 30 * time.Second, report: "overloaded", retryAfter: 30 * time.Second}, ""},
		{"503 with a date", resp(503, now.Add(90*time.Second).UTC().Format(http.TimeFormat)), nil, outcome{}, "date"},
		{"503 without Retry-After", resp(503, ""), nil, outcome{release: true, settle: nak, delay: time.Second, report: "overloaded"}, ""},
		{"429 with a Retry-After that does not parse", resp(429, "soon"), nil, outcome{release: true, settle: nak, delay: time.Second, report: "overloaded"}, ""},
		{"a timeout", nil, context.DeadlineExceeded, outcome{release: true, settle: nak, delay: time.Second, report: "overloaded"}, ""},
		{"refused", nil, errors.New("connection refused"), outcome{release: true, settle: term, reason: "connection refused", report: "failed"}, ""},
	} {
		got := outcomeOf(ResponseError(tc.resp, tc.err), false)
		if tc.msg == "date" {
			if got.retryAfter < 88*time.Second || got.retryAfter > 90*time.Second || got.report != "overloaded" || got.settle != nak {
				t.Errorf("%s: %+v, want a retry after about 90s", tc.name, got)
			}
			continue
		}
		if got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
