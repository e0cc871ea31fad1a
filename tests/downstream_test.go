package tests

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/admitter/admitter/wire"
	"github.com/admitter/admitter/worker"
	"github.com/nats-io/nats.go"
)

// doneWith sends a done request for lease of tenant with the given headers and returns the
// admitter's answer.
func (w *world) doneWith(tenant string, lease int64, hdr ...string) wire.LeaseReply {
	w.t.Helper()
	m := nats.NewMsg("jobs.done." + tenant + ".job")
	m.Header.Set(wire.HeaderLease, strconv.FormatInt(lease, 10))
	for i := 0; i+1 < len(hdr); i += 2 {
		m.Header.Set(hdr[i], hdr[i+1])
	}
	r, err := w.nc.RequestMsg(m, 5*time.Second)
	if err != nil {
		w.t.Fatalf("done %s/%d: %v", tenant, lease, err)
	}
	var rep wire.LeaseReply
	if err := json.Unmarshal(r.Data, &rep); err != nil {
		w.t.Fatalf("done %s/%d: answer %s: %v", tenant, lease, r.Data, err)
	}
	return rep
}

// leaseOf is a forwarded job's lease (0: none).
func leaseOf(j job) int64 {
	n, _ := strconv.ParseInt(j.header.Get(wire.HeaderLease), 10, 64)
	return n
}

// TestDoneMessagesReportOutcomes: the worker library says how each job went (ok, failed, or
// overloaded: delivered again, its retry ok); the admitter counts the outcomes per pool and the
// jobs' time downstream; a done message with an outcome it does not know is answered with an
// error naming the header, and releases nothing.
func TestDoneMessagesReportOutcomes(t *testing.T) {
	w := newWorld(t, "pools:\n  workers: {concurrency: 4, lease: 30s}\nplans:\n  p: {pool: workers, limits: [{capacity: 100, rate: 100/s}]}\ntenants: {acme: p, bob: p}\n")
	env, metrics, _ := servePorts(t)
	w.start(env...)
	var retried atomic.Bool
	w.startWorker("acme", 4, func(ctx context.Context, j *worker.Job) error {
		time.Sleep(50 * time.Millisecond)
		switch string(j.Data) {
		case "fail":
			return errors.New("bad input")
		case "overload":
			if j.Attempt == 1 {
				return worker.Overloaded(errors.New("503 Service Unavailable"))
			}
			retried.Store(true)
		}
		return nil
	})
	for _, p := range []string{"ok", "ok", "fail", "overload"} {
		w.publish("jobs.submit.acme.work", p)
	}
	count := func(outcome string) float64 {
		_, body := httpGet(t, metrics)
		return metricValue(body, wire.MetricJobOutcomes.Prom, `pool="workers"`, `outcome="`+outcome+`"`)
	}
	waitFor(t, 20*time.Second, "3 ok (one a retry), 1 failed, 1 overloaded", func() bool {
		return count("ok") == 3 && count("failed") == 1 && count("overloaded") == 1
	})
	if !retried.Load() {
		t.Error("the overloaded job was not delivered again")
	}
	_, body := httpGet(t, metrics)
	if n := metricValue(body, wire.MetricJobTime.Prom+"_count", `pool="workers"`); n != 5 {
		t.Errorf("%s_count = %v, want 5", wire.MetricJobTime.Prom, n)
	}
	if s := metricValue(body, wire.MetricJobTime.Prom+"_sum", `pool="workers"`); s < 0.25 || s > 5 {
		t.Errorf("%s_sum = %vs for five jobs of 50 ms", wire.MetricJobTime.Prom, s)
	}
	// An outcome it does not know: an error naming the header; the lease is not released.
	w.publish("jobs.submit.bob.raw", "raw") // bob has no workers: the test is its worker
	var lease int64
	waitFor(t, 20*time.Second, "the raw job forwarded", func() bool {
		for _, j := range w.readHeaders("ADMITTED") {
			if j.subject == "jobs.admitted.bob.raw" {
				lease = leaseOf(j)
			}
		}
		return lease > 0
	})
	rep := w.doneWith("bob", lease, wire.HeaderOutcome, "timeout")
	if want := `header Admit-Outcome is "timeout", want ok, failed or overloaded`; rep.Error != want || rep.Held {
		t.Errorf("done with Admit-Outcome: timeout answered %+v, want the error %q", rep, want)
	}
	if rep := w.doneWith("bob", lease, wire.HeaderOutcome, "overloaded"); !rep.Held {
		t.Errorf("done with Admit-Outcome: overloaded answered %+v, want held", rep)
	}
}

// retryPlans: a pool of 4 shared by two tenants whose own plans never bind.
const retryPlans = `
pools:
  api: {concurrency: 4, lease: 30s}
plans:
  p: {pool: api, limits: [{capacity: 100000, rate: 100000/s}]}
tenants: {acme: p, bob: p}
`

// within counts the times in [from, to].
func within(times []time.Time, from, to time.Time) int {
	n := 0
	for _, t := range times {
		if !t.Before(from) && !t.After(to) {
			n++
		}
	}
	return n
}

// retryAfterRun gives two tenants a backlog on retryPlans's pool, workers of 50 ms a job, and
// has acme's fifth job answered RetryAfter(5s) (of the pool's scope with pool); it returns when
// that was, and every forward's store time of each tenant once the hold is well over.
func retryAfterRun(t *testing.T, pool bool) (held time.Time, acme, bob []time.Time) {
	w := newWorld(t, retryPlans)
	w.start()
	var heldAt atomic.Int64
	for _, tenant := range []string{"acme", "bob"} {
		w.startWorker(tenant, 4, func(ctx context.Context, j *worker.Job) error {
			time.Sleep(50 * time.Millisecond)
			if j.Tenant == "acme" && string(j.Data) == "acme-4" && j.Attempt == 1 {
				heldAt.Store(time.Now().UnixNano())
				if pool {
					return worker.RetryAfterPool(5*time.Second, errors.New("429 Too Many Requests"))
				}
				return worker.RetryAfter(5*time.Second, errors.New("429 Too Many Requests"))
			}
			return nil
		})
	}
	for _, tenant := range []string{"acme", "bob"} {
		w.publishMany("jobs.submit."+tenant+".call", tenant, 200, 0)
	}
	waitFor(t, 20*time.Second, "the downstream's Retry-After", func() bool { return heldAt.Load() > 0 })
	held = time.Unix(0, heldAt.Load())
	time.Sleep(time.Until(held.Add(6500 * time.Millisecond)))
	all := w.readAll("ADMITTED")
	return held, arrivals(t, all, "acme"), arrivals(t, all, "bob")
}

// TestRetryAfterHoldsTheTenant: a done message with Admit-Retry-After: 5 (worker.RetryAfter)
// holds that tenant's forwards for 5 s, while another tenant of the same pool goes on; then the
// tenant goes on too.
func TestRetryAfterHoldsTheTenant(t *testing.T) {
	t.Parallel()
	held, acme, bob := retryAfterRun(t, false)
	// The hold begins when the admitter handles the done message, a moment after the handler
	// returned; forwards decided just before it may be stored just after.
	from, to := held.Add(300*time.Millisecond), held.Add(5*time.Second)
	if n := within(acme, from, to); n != 0 {
		t.Errorf("acme: %d forwards within the 5 s the downstream asked it to wait", n)
	}
	if n := within(bob, from, to); n < 20 {
		t.Errorf("bob: %d forwards while acme was held, want it to go on (about 80 in 5 s of a pool of 4 at 50 ms)", n)
	}
	if n := within(acme, to, held.Add(6500*time.Millisecond)); n == 0 {
		t.Errorf("acme: no forward after the hold")
	}
	t.Logf("while acme was held: acme %d, bob %d forwards", within(acme, from, to), within(bob, from, to))
}

// TestRetryAfterOfThePoolHoldsEveryTenant: with Admit-Retry-Scope: pool (worker.RetryAfterPool)
// no tenant of the pool gets a forward for the 5 s.
func TestRetryAfterOfThePoolHoldsEveryTenant(t *testing.T) {
	t.Parallel()
	held, acme, bob := retryAfterRun(t, true)
	from, to := held.Add(300*time.Millisecond), held.Add(5*time.Second)
	if a, b := within(acme, from, to), within(bob, from, to); a+b != 0 {
		t.Errorf("%d forwards of acme and %d of bob within the 5 s the downstream asked the pool to wait", a, b)
	}
	if a, b := within(acme, to, held.Add(6500*time.Millisecond)), within(bob, to, held.Add(6500*time.Millisecond)); a == 0 || b == 0 {
		t.Errorf("after the hold: %d forwards of acme, %d of bob, want both to go on", a, b)
	}
}

// tenantPool is the pool section of a tenant's state, read from the decision API.
func tenantPool(t *testing.T, api, tenant string) wire.PoolState {
	t.Helper()
	code, body := httpGet(t, api+"/v1/tenants/"+tenant)
	var st wire.TenantState
	if err := json.Unmarshal([]byte(body), &st); err != nil || code != 200 || st.Pool == nil {
		t.Fatalf("GET /v1/tenants/%s: %d %s (%v)", tenant, code, body, err)
	}
	return *st.Pool
}

// TestBreakerOpensAndCloses: a downstream that fails every job opens the pool's breaker (seen in
// the API and the log): nothing is forwarded during the cool-down; then, the downstream
// recovered, the probe jobs succeed and the breaker closes, and the jobs flow again.
func TestBreakerOpensAndCloses(t *testing.T) {
	t.Parallel()
	w := newWorld(t, `
pools:
  api: {concurrency: 4, lease: 30s, breaker: {failures: 50%, window: 10s, cooldown: 3s, probes: 2, min_jobs: 4}}
plans:
  p: {pool: api, limits: [{capacity: 100000, rate: 100000/s}]}
tenants: {acme: p}
`)
	env, _, api := servePorts(t)
	p := w.start(env...)
	var failing atomic.Bool
	failing.Store(true)
	w.startWorker("acme", 4, func(ctx context.Context, j *worker.Job) error {
		time.Sleep(30 * time.Millisecond)
		if failing.Load() {
			return errors.New("the database is down")
		}
		return nil
	})
	w.publishMany("jobs.submit.acme.call", "acme", 300, 0)
	var open wire.PoolState
	waitFor(t, 15*time.Second, "the breaker to open", func() bool {
		open = tenantPool(t, api, "acme")
		return open.Breaker == "open"
	})
	failing.Store(false)
	until := *open.BreakerUntil
	waitFor(t, 15*time.Second, "the breaker to close", func() bool { return tenantPool(t, api, "acme").Breaker == "closed" })
	closed := time.Now()
	time.Sleep(2 * time.Second)
	acme := arrivals(t, w.readAll("ADMITTED"), "acme")
	openedAt := until.Add(-3 * time.Second)
	if n := within(acme, openedAt.Add(300*time.Millisecond), until.Add(-100*time.Millisecond)); n != 0 {
		t.Errorf("%d forwards during the cool-down (%v to %v)", n, openedAt.Format(time.StampMilli), until.Format(time.StampMilli))
	}
	if n := within(acme, closed, closed.Add(2*time.Second)); n < 20 {
		t.Errorf("%d forwards in the 2 s after the breaker closed, want the jobs to flow again", n)
	}
	logs := p.logs.String()
	for _, want := range []string{"pool breaker open", "pool breaker half-open", "pool breaker closed"} {
		if n := strings.Count(logs, want); n != 1 {
			t.Errorf("the log says %q %d times, want once", want, n)
		}
	}
}

// simDownstream is a downstream for the workers of a test: a job takes base while at most knee
// run at once, base × (1 + (n − knee)² / knee) with n running above, and is refused as overloaded
// (in 5 ms) above 2 × knee. It counts the jobs done and samples how many run.
type simDownstream struct {
	knee int
	base time.Duration
	mu   sync.Mutex
	n    int
	done int
}

func (d *simDownstream) handle(ctx context.Context, j *worker.Job) error {
	d.mu.Lock()
	d.n++
	n := d.n
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		d.n--
		d.mu.Unlock()
	}()
	if n > 2*d.knee {
		time.Sleep(5 * time.Millisecond)
		return worker.Overloaded(errors.New("503 Service Unavailable"))
	}
	took := d.base
	if x := n - d.knee; x > 0 {
		took = time.Duration(float64(d.base) * (1 + float64(x*x)/float64(d.knee)))
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(took):
	}
	d.mu.Lock()
	d.done++
	d.mu.Unlock()
	return nil
}

func (d *simDownstream) now() (running, done int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n, d.done
}

// TestAdaptivePoolFindsTheCapacity: an adaptive pool (ceiling 32, min 2) in front of a
// downstream that does 4 jobs at once in 40 ms each (100 jobs/s), slows down with the square of
// the excess and refuses above 8, with two tenants' backlogs and workers with room for 32: the
// jobs running settle near the downstream's capacity (the median between half and twice it) and
// the pool keeps at least 70 % of its throughput. A pool fixed at 32 would keep 32 running,
// most of them refused.
func TestAdaptivePoolFindsTheCapacity(t *testing.T) {
	w := newWorld(t, `
pools:
  api: {concurrency: 32, lease: 30s, adaptive: {min: 2}}
plans:
  p: {pool: api, limits: [{capacity: 100000, rate: 100000/s}]}
tenants: {acme: p, bob: p}
`)
	env, _, api := servePorts(t)
	w.start(env...)
	d := &simDownstream{knee: 4, base: 40 * time.Millisecond}
	for _, tenant := range []string{"acme", "bob"} {
		w.startWorker(tenant, 32, d.handle)
	}
	for _, tenant := range []string{"acme", "bob"} {
		w.publishMany("jobs.submit."+tenant+".call", tenant, 1500, 0)
	}
	time.Sleep(4 * time.Second) // the floor measured, the limit found
	const measured = 8 * time.Second
	_, before := d.now()
	var samples []int
	for end := time.Now().Add(measured); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		n, _ := d.now()
		samples = append(samples, n)
	}
	_, after := d.now()
	slices.Sort(samples)
	median := samples[len(samples)/2]
	rate := float64(after-before) / measured.Seconds()
	pool := tenantPool(t, api, "acme")
	t.Logf("running: median %d (p10 %d, p90 %d); %.0f jobs/s of 100; the pool: limit %d (%s), floor %.0fms, time per job %.0fms",
		median, samples[len(samples)/10], samples[len(samples)*9/10], rate, pool.Limit, pool.LimitReason, pool.FloorMs, pool.TimePerJobMs)
	t.Logf("received by tenant: %+v", pool.Tenants)
	if median < 2 || median > 8 {
		t.Errorf("median running %d, want between half and twice the downstream's 4", median)
	}
	if rate < 70 {
		t.Errorf("%.0f jobs/s done, want at least 70 %% of the downstream's 100", rate)
	}
	if pool.Limit < 2 || pool.Limit > 16 || pool.FloorMs < 40 {
		t.Errorf("the pool as the API shows it: %+v, want a limit in force near 4 and a floor of 40ms or more", pool)
	}
}
