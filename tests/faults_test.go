package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/admitter/admitter/internal/testenv"
	"github.com/admitter/admitter/wire"
	"github.com/admitter/admitter/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The limits hold through every fault (README: "Faults"): the tests of the rows of its table that
// concern Redis and the workers, with the built binary, a real redis-server and the worker
// library.

// running counts what a worker's handlers run at once: per tenant and in all, the most seen, and
// when each job started.
type running struct {
	mu      sync.Mutex
	now     map[string]int
	most    map[string]int
	all     int
	mostAll int
	starts  map[string][]time.Time
	ends    map[string][]time.Time
	took    func(j *worker.Job) time.Duration
	// over, when set, says whether a tenant's n running, all in all, pass a limit: the first few
	// times they do, what runs then is kept in overs.
	over  func(tenant string, n, all int) bool
	jobs  map[*worker.Job]time.Time
	overs []string
	// runs is every run of every job (its payload names it), in the order they began.
	runs map[string][]jobRun
}

// jobRun is one run of a job at the worker: the forward it was delivered from (its
// Nats-Msg-Id), the lease it held, the delivery's attempt, and when its handler began.
type jobRun struct {
	msgID   string
	lease   int64
	attempt uint64
	at      time.Time
}

func newRunning(took func(j *worker.Job) time.Duration) *running {
	return &running{now: map[string]int{}, most: map[string]int{}, starts: map[string][]time.Time{}, ends: map[string][]time.Time{}, took: took,
		runs: map[string][]jobRun{}}
}

func (r *running) handle(ctx context.Context, j *worker.Job) error {
	r.mu.Lock()
	r.now[j.Tenant] += int(j.Weight)
	r.all += int(j.Weight)
	r.most[j.Tenant] = max(r.most[j.Tenant], r.now[j.Tenant])
	r.mostAll = max(r.mostAll, r.all)
	r.starts[j.Tenant] = append(r.starts[j.Tenant], time.Now())
	r.runs[string(j.Data)] = append(r.runs[string(j.Data)], jobRun{msgID: j.Header.Get(nats.MsgIdHdr), lease: j.Lease, attempt: j.Attempt, at: time.Now()})
	if r.over != nil {
		if r.jobs == nil {
			r.jobs = map[*worker.Job]time.Time{}
		}
		r.jobs[j] = time.Now()
		if r.over(j.Tenant, r.now[j.Tenant], r.all) && len(r.overs) < 5 {
			var b strings.Builder
			fmt.Fprintf(&b, "at %s, %d of %s running, %d in all:", time.Now().Format("15:04:05.000"), r.now[j.Tenant], j.Tenant, r.all)
			for rj, at := range r.jobs {
				fmt.Fprintf(&b, "\n  %s lease %d attempt %d began %s, deadline %s, %s=%q delay %sms", rj.Tenant, rj.Lease, rj.Attempt,
					at.Format("15:04:05.000"), rj.LeaseDeadline().Format("15:04:05.000"), wire.HeaderDegraded, rj.Header.Get(wire.HeaderDegraded), rj.Header.Get(wire.HeaderDelayMs))
			}
			r.overs = append(r.overs, b.String())
		}
	}
	r.mu.Unlock()
	select {
	case <-ctx.Done():
	case <-time.After(r.took(j)):
	}
	r.mu.Lock()
	delete(r.jobs, j)
	r.now[j.Tenant] -= int(j.Weight)
	r.all -= int(j.Weight)
	r.ends[j.Tenant] = append(r.ends[j.Tenant], time.Now())
	r.mu.Unlock()
	return ctx.Err()
}

// snapshot is the most run at once per tenant and in all, and how many jobs started.
func (r *running) snapshot() (most map[string]int, all int, started int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	most = map[string]int{}
	for k, v := range r.most {
		most[k] = v
		started += len(r.starts[k])
	}
	return most, r.mostAll, started
}

// startPoolWorker runs the worker library over every forward (one durable consumer), or only
// over the subjects filter names, with room for n handlers: the plans, not the worker, hold the
// jobs to their limits.
func (w *world) startPoolWorker(name string, n int, h worker.Handler, filter ...string) *worker.Worker {
	w.t.Helper()
	return w.startLoggedWorker(name, n, h, slog.New(slog.DiscardHandler), filter...)
}

// startLoggedWorker is startPoolWorker with the worker library's log going to log.
func (w *world) startLoggedWorker(name string, n int, h worker.Handler, log *slog.Logger, filter ...string) *worker.Worker {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := w.js.CreateOrUpdateConsumer(ctx, "ADMITTED", jetstream.ConsumerConfig{Durable: name, FilterSubjects: filter,
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxDeliver: -1})
	if err != nil {
		w.t.Fatal(err)
	}
	wk, err := worker.New(worker.Config{Consumer: cons, Conn: w.nc, Handler: h, Concurrency: n, Logger: log})
	if err != nil {
		w.t.Fatal(err)
	}
	if err := wk.Start(context.Background()); err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = wk.Stop(ctx)
	})
	return wk
}

// outagePlans: the first row (a tenant on a plan with concurrency 4, one on a free plan
// with concurrency 1, a pool of 6) and a third tenant with concurrency 3, so that the pool binds;
// buckets faster than the workers (the concurrency limits and the pool bind); leases of 2 s, so
// that slots forgotten at the switch are known again within the outage.
const outagePlans = `
pools:
  workers: {concurrency: 6, lease: 2s}
plans:
  startup:
    pool: workers
    limits:
      - {name: burst, capacity: 8, rate: 20/s}
      - {name: running, kind: concurrency, limit: 4, lease: 2s}
  free:
    pool: workers
    limits:
      - {name: burst, capacity: 3, rate: 2/s}
      - {name: running, kind: concurrency, limit: 1, lease: 2s}
  team:
    pool: workers
    limits:
      - {name: burst, capacity: 6, rate: 30/s}
      - {name: running, kind: concurrency, limit: 3, lease: 2s}
tenants: {startup: startup, hobby: free, crew: team}
`

// TestRedisOutageKeepsThePlans: Redis killed while 60, 20 and 60 jobs of three tenants wait,
// in the default fail mode, with two replicas and the worker library running 300 ms jobs. Every
// limit holds while Redis is away: the workers never run more than a tenant's concurrency or the
// pool's (its slots decided by one replica for both, a done message reaching either replica
// decided by the one running its tenant's queue), each tenant's forwards stay within C + r·t and
// one capacity more (the switch), the forwards decided without Redis say so, and the service
// says it is degraded; when Redis returns, nothing follows in a second burst and every job is
// forwarded once.
func TestRedisOutageKeepsThePlans(t *testing.T) {
	t.Parallel()
	w := newWorld(t, outagePlans)
	env, metrics, _ := servePorts(t)
	p := w.start(env...) // the default fail mode
	w.start()
	run := newRunning(func(*worker.Job) time.Duration { return 300 * time.Millisecond })
	w.startPoolWorker("outage", 32, run.handle)
	w.publishMany("jobs.submit.startup.work", "startup", 60, 0)
	w.publishMany("jobs.submit.hobby.work", "hobby", 20, 0)
	w.publishMany("jobs.submit.crew.work", "crew", 60, 0)
	w.read("ADMITTED", 10, 20*time.Second)

	w.redis.Kill()
	killed := time.Now()
	time.Sleep(4 * time.Second)
	ready := strings.TrimPrefix(metrics, "http://")
	ready = "http://" + strings.TrimSuffix(ready, "/metrics") + "/readyz"
	code, body := httpGet(t, ready)
	if err := w.redis.Start(); err != nil {
		t.Fatal(err)
	}
	got := w.read("ADMITTED", 140, 90*time.Second)
	uniquePayloads(t, got)

	most, all, _ := run.snapshot()
	t.Logf("most running at once: startup %d (limit 4), hobby %d (1), crew %d (3), all %d (pool 6)", most["startup"], most["hobby"], most["crew"], all)
	if most["startup"] > 4 || most["hobby"] > 1 || most["crew"] > 3 || all > 6 {
		t.Errorf("the workers ran %d of startup (limit 4), %d of hobby (limit 1), %d of crew (limit 3), %d in all (pool 6)", most["startup"], most["hobby"], most["crew"], all)
	}
	degraded, wrong := 0, map[string]int{}
	byTenant := map[string][]time.Time{}
	for _, j := range got {
		if v := j.header.Get(wire.HeaderDegraded); v == wire.DegradedLocal {
			degraded++
		} else if v != "" {
			wrong[v]++
		}
		tn := j.header.Get(wire.HeaderTenant)
		byTenant[tn] = append(byTenant[tn], j.stored)
	}
	if len(wrong) > 0 {
		t.Errorf("forwards marked %s with other values than %q: %v", wire.HeaderDegraded, wire.DegradedLocal, wrong)
	}
	if degraded == 0 {
		t.Errorf("no forward marked %s: %s while Redis was away for 4 s", wire.HeaderDegraded, wire.DegradedLocal)
	}
	for _, l := range []struct {
		tenant   string
		capacity float64
		rate     float64
	}{{"startup", 8, 20}, {"hobby", 3, 2}, {"crew", 6, 30}} {
		// One capacity more than C + r·t: the switch to the local copy (README, Faults).
		e, from, to := worstWindow(byTenant[l.tenant], 2*l.capacity, l.rate)
		ec, _, _ := worstWindow(byTenant[l.tenant], l.capacity, l.rate)
		t.Logf("tenant %s: worst interval %+.1f over 2C + r·t (%+.1f over C + r·t); %d forwards marked local of %d in all", l.tenant, e, ec, degraded, len(got))
		if e > 1 {
			t.Errorf("tenant %s: %.1f forwards over 2C + r·t in [%v, %v] after Redis was killed", l.tenant, e,
				from.Sub(killed).Round(time.Millisecond), to.Sub(killed).Round(time.Millisecond))
		}
	}
	if code != http.StatusOK || !strings.Contains(body, "degraded") {
		t.Errorf("/readyz while Redis was away: %d %q, want 200 and a detail saying the decisions are degraded", code, body)
	}
	logs := p.logs.String()
	for _, want := range []string{"limiter unavailable", "limiter available again", "decided_on_the_copy"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log does not say %q", want)
		}
	}
}

// TestRedisRestartedEmptyRebuildsLeases: Redis restarted without its data while two long jobs
// hold a tenant's two slots (lease 8 s: the worker renews every 4 s). The workers' renewals
// rebuild the slots Redis forgot: no third job runs while they do; and when they are done, their
// done messages free the slots at once: the next jobs go without waiting out a lease.
func TestRedisRestartedEmptyRebuildsLeases(t *testing.T) {
	t.Parallel()
	const plans = `
plans:
  slots:
    limits:
      - {name: running, kind: concurrency, limit: 2, lease: 8s}
tenants: {acme: slots}
`
	w := newWorldWith(t, plans, testenv.StartRedis(t)) // no append-only file: a restart forgets
	w.start()
	run := newRunning(func(j *worker.Job) time.Duration {
		if strings.HasPrefix(string(j.Data), "long") {
			return 12 * time.Second
		}
		return 100 * time.Millisecond
	})
	w.startPoolWorker("slots", 8, run.handle)
	w.publishMany("jobs.submit.acme.work", "long", 2, 0)
	w.publishMany("jobs.submit.acme.work", "short", 4, 0)
	waitFor(t, 10*time.Second, "the two long jobs to run", func() bool { _, _, n := run.snapshot(); return n >= 2 })
	w.redis.Kill()
	if err := w.redis.Start(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	got := w.read("ADMITTED", 6, 60*time.Second)
	uniquePayloads(t, got)
	most, _, _ := run.snapshot()
	if most["acme"] > 2 {
		t.Errorf("%d jobs ran at once after Redis forgot the leases, limit 2", most["acme"])
	}
	run.mu.Lock()
	longEnd := run.ends["acme"]
	run.mu.Unlock()
	var short []time.Time
	for _, j := range got {
		if strings.HasPrefix(j.payload, "short") {
			short = append(short, j.stored)
		}
	}
	if len(longEnd) == 0 || len(short) == 0 {
		t.Fatalf("long jobs ended %v, short forwarded %v", longEnd, short)
	}
	first := short[0]
	for _, s := range short {
		if s.Before(first) {
			first = s
		}
	}
	t.Logf("most running %d (limit 2); first short job %v after the long jobs' done messages; Redis restarted %v before they ended (lease 8 s)",
		most["acme"], first.Sub(longEnd[0]).Round(time.Millisecond), longEnd[0].Sub(restarted).Round(time.Millisecond))
	// The long jobs end 12 s after they started; the first short job follows their done messages,
	// not a whole lease after Redis came back.
	if first.Before(longEnd[0].Add(-time.Second)) {
		t.Errorf("a short job was forwarded %v before the long jobs ended: the rebuilt slots were not held", longEnd[0].Sub(first))
	}
	if d := first.Sub(longEnd[0]); d > 3*time.Second {
		t.Errorf("the first short job was forwarded %v after the long jobs' done messages (Redis restarted %v before): the slots were waited out",
			d, longEnd[0].Sub(restarted).Round(time.Millisecond))
	}
}

// TestWorkersAwayCannotCauseABurst: jobs forwarded while no worker runs (their leases end while
// they sit in the output), for three leases; then the worker starts, with room for 32 handlers.
// The worker library takes each job's slot again before running it: never more than a tenant's
// limit, or the pool's, run at once.
func TestWorkersAwayCannotCauseABurst(t *testing.T) {
	const plans = `
pools:
  workers: {concurrency: 6, lease: 1s}
plans:
  one:
    pool: workers
    limits: [{name: running, kind: concurrency, limit: 1, lease: 1s}]
  five:
    pool: workers
    limits: [{name: running, kind: concurrency, limit: 5, lease: 1s}]
  four:
    pool: workers
    limits: [{name: running, kind: concurrency, limit: 4, lease: 1s}]
tenants: {a: one, b: five, c: four}
`
	w := newWorld(t, plans)
	w.start()
	for _, tn := range []string{"a", "b", "c"} {
		w.publishMany("jobs.submit."+tn+".work", tn, 20, 0)
	}
	time.Sleep(3500 * time.Millisecond) // three leases: forwarded, ended, forwarded again
	if n := w.streamMsgs("ADMITTED"); n <= 6 {
		t.Fatalf("%d jobs forwarded while no worker ran: the test needs the leases to have ended", n)
	}
	run := newRunning(func(*worker.Job) time.Duration { return 300 * time.Millisecond })
	w.startPoolWorker("away", 32, run.handle)
	waitFor(t, 60*time.Second, "every job to run", func() bool { _, _, n := run.snapshot(); return n >= 60 })
	most, all, _ := run.snapshot()
	t.Logf("after three leases without workers: most running a %d (limit 1), b %d (5), c %d (4), all %d (pool 6)", most["a"], most["b"], most["c"], all)
	if most["a"] > 1 || most["b"] > 5 || most["c"] > 4 || all > 6 {
		t.Errorf("the worker ran at once %d of a (limit 1), %d of b (limit 5), %d of c (limit 4), %d in all (pool 6)", most["a"], most["b"], most["c"], all)
	}
}

// TestDecisionsDuringAnOutage: the decision API while Redis is away answers from the plan's
// limits (429 with Retry-After when over), marked degraded, not "allowed, unlimited".
func TestDecisionsDuringAnOutage(t *testing.T) {
	const plans = `
plans:
  api:
    limits: [{name: burst, capacity: 3, rate: 1/s}]
tenants: {acme: api}
`
	w := newWorld(t, plans)
	env, _, api := servePorts(t)
	w.start(env...)
	decide := func() (int, wire.Decision, http.Header) {
		resp, err := http.Post(api+"/v1/decide", "application/json", bytes.NewBufferString(`{"tenant":"acme"}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var d wire.Decision
		_ = json.NewDecoder(resp.Body).Decode(&d)
		return resp.StatusCode, d, resp.Header
	}
	if code, d, _ := decide(); code != http.StatusOK || d.Degraded {
		t.Fatalf("before the outage: %d %+v", code, d)
	}
	w.redis.Kill()
	allowed, refused := 0, 0
	begin := time.Now()
	for range 10 {
		code, d, h := decide()
		switch code {
		case http.StatusOK:
			allowed++
			if !d.Degraded {
				t.Errorf("allowed while Redis was away without \"degraded\": %+v", d)
			}
		case http.StatusTooManyRequests:
			refused++
			if s, err := strconv.Atoi(h.Get("Retry-After")); err != nil || s < 1 {
				t.Errorf("refused with Retry-After %q", h.Get("Retry-After"))
			}
		default:
			t.Errorf("answered %d: %+v", code, d)
		}
	}
	// The plan lets 3 through at once and 1 a second: 2 are left after the one before the outage,
	// and at most one more refills while the ten are asked.
	t.Logf("while Redis was away: %d of 10 allowed, %d refused with Retry-After", allowed, refused)
	if bound := 2 + int(time.Since(begin).Seconds()) + 1; allowed > bound || refused == 0 {
		t.Errorf("%d of 10 allowed while Redis was away (%d refused); the plan allows at most %d", allowed, refused, bound)
	}
}

// TestForwardStoredLateKeepsItsSlot: the output stream is away when a leased job is admitted
// (a stream electing a leader, a node that stops answering), and takes its forward only after
// the lease has ended at Redis. The slot stays the job's: a second job of the tenant, decided
// at once after it, waits for the first's done message instead of running beside it.
func TestForwardStoredLateKeepsItsSlot(t *testing.T) {
	t.Parallel()
	w := newWorld(t, `
plans:
  one:
    limits: [{name: running, kind: concurrency, limit: 1, lease: 1s}]
tenants: {acme: one}
`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := jetstream.StreamConfig{Name: "ADMITTED", Subjects: []string{"jobs.admitted.>"}, Retention: jetstream.WorkQueuePolicy}
	if _, err := w.js.CreateStream(ctx, out); err != nil {
		t.Fatal(err)
	}
	w.start()
	if err := w.js.DeleteStream(ctx, "ADMITTED"); err != nil {
		t.Fatal(err)
	}
	w.publish("jobs.submit.acme.work", "first")
	w.publish("jobs.submit.acme.work", "second")
	time.Sleep(2500 * time.Millisecond) // the lease granted with the first forward ends at Redis
	if _, err := w.js.CreateStream(ctx, out); err != nil {
		t.Fatal(err)
	}
	run := newRunning(func(j *worker.Job) time.Duration {
		if string(j.Data) == "first" {
			return 3 * time.Second
		}
		return 100 * time.Millisecond
	})
	w.startPoolWorker("late", 4, run.handle, "jobs.admitted.acme.>")
	waitFor(t, 30*time.Second, "both jobs to run", func() bool {
		run.mu.Lock()
		defer run.mu.Unlock()
		return len(run.ends["acme"]) == 2
	})
	if most, _, _ := run.snapshot(); most["acme"] > 1 {
		t.Errorf("%d jobs of acme ran at once, its limit is 1: the forward stored after its lease ended lost its slot", most["acme"])
	}
}
