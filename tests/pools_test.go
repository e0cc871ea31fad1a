package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/admitter/admitter/wire"
	"github.com/admitter/admitter/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// poolPlans: a pool of 8 workers shared by two heavy tenants (shares 3 and 1) and a quiet one,
// each on a plan far faster than the pool.
const poolPlans = `
pools:
  workers: {concurrency: 8, lease: 30s}
plans:
  big3:
    pool: workers
    share: 3
    limits: [{capacity: 100000, rate: 100000/s}]
  big1:
    pool: workers
    limits: [{capacity: 100000, rate: 100000/s}]
  quiet:
    pool: workers
    limits: [{capacity: 100000, rate: 100000/s}]
tenants: {heavy3: big3, heavy1: big1, calm: quiet}
`

// poolWork is what the workers saw: when each job started and ended, per tenant, the most that
// ran at once, and the quiet tenant's delays from publish to start.
type poolWork struct {
	mu      sync.Mutex
	running int
	most    int
	starts  map[string][]time.Time
	spans   [][2]time.Time // every job's start and end
	delays  []time.Duration
	handled int
}

func (p *poolWork) handle(ctx context.Context, j *worker.Job) error {
	now := time.Now()
	p.mu.Lock()
	p.running++
	p.most = max(p.most, p.running)
	p.starts[j.Tenant] = append(p.starts[j.Tenant], now)
	if sent, err := strconv.ParseInt(j.Header.Get("X-Sent"), 10, 64); err == nil && j.Tenant == "calm" {
		p.delays = append(p.delays, now.Sub(time.Unix(0, sent)))
	}
	p.mu.Unlock()
	select {
	case <-ctx.Done():
	case <-time.After(100 * time.Millisecond):
	}
	p.mu.Lock()
	p.running--
	p.handled++
	p.spans = append(p.spans, [2]time.Time{now, time.Now()})
	p.mu.Unlock()
	return nil
}

// TestPoolSharesTheWorkers: a pool of 8 workers taking 100 ms a job; two heavy tenants with
// shares 3 and 1 and a backlog each, a quiet tenant at 2 jobs/s. Never more than 8 run at once;
// the heavy tenants get the workers 3:1 (±20 %); the quiet tenant's jobs start within 1 s of
// their publishing (p99); the workers are busy ≥ 85 % of the time.
func TestPoolSharesTheWorkers(t *testing.T) {
	w := newWorld(t, poolPlans)
	env, metrics, api := servePorts(t)
	w.start(env...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := w.js.CreateOrUpdateConsumer(ctx, "ADMITTED", jetstream.ConsumerConfig{Durable: "workers",
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	work := &poolWork{starts: map[string][]time.Time{}}
	// Room for 16 handlers: the pool, not the worker, is what holds them to 8.
	wk, err := worker.New(worker.Config{Consumer: cons, Conn: w.nc, Handler: work.handle, Concurrency: 16, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := wk.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = wk.Stop(ctx)
	})

	const backlog = 1500
	for _, tenant := range []string{"heavy3", "heavy1"} {
		w.publishMany("jobs.submit."+tenant+".work", tenant, backlog, 0)
	}
	begin := time.Now()
	const measured = 12 * time.Second
	quiet := make(chan struct{})
	go func() { // 2 jobs/s for the whole run
		defer close(quiet)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for i := 0; time.Since(begin) < measured; i++ {
			m := nats.NewMsg("jobs.submit.calm.work")
			m.Data = []byte(fmt.Sprint("calm-", i))
			m.Header.Set("X-Sent", strconv.FormatInt(time.Now().UnixNano(), 10))
			pctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if _, err := w.js.PublishMsg(pctx, m); err != nil {
				t.Errorf("publish a quiet job: %v", err)
			}
			cancel()
			<-tick.C
		}
	}()
	<-quiet
	// While the heavy tenants still wait: the pool as the decision API, the console and the
	// metrics show it.
	resp, err := http.Get(api + "/v1/tenants/heavy3")
	if err != nil {
		t.Fatal(err)
	}
	var st wire.TenantState
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || st.Pool == nil || st.Pool.Name != "workers" || st.Pool.Share != 3 || st.Pool.InFlight > 8 || st.Pool.Waiting < 1 {
		t.Errorf("GET /v1/tenants/heavy3: pool %+v (%v), want workers, share 3, at most 8 in flight, tenants waiting", st.Pool, err)
	}
	console := strings.TrimSuffix(metrics, "/metrics") + "/console/"
	if _, body := httpGet(t, console); !strings.Contains(body, `data-pool="workers"`) {
		t.Errorf("the console's overview lists no pool workers")
	}
	if _, body := httpGet(t, console+"tenants/heavy1"); !strings.Contains(body, "Pool workers") || !strings.Contains(body, "heavy1&#39;s share 1") {
		t.Errorf("the console's page of heavy1 does not show its pool and share")
	}
	time.Sleep(time.Second) // the last quiet job's turn
	end := time.Now()

	work.mu.Lock()
	defer work.mu.Unlock()
	if work.most > 8 {
		t.Errorf("%d jobs ran at once, want at most 8 (the pool)", work.most)
	}
	// Shares, over the window where both heavy tenants have a backlog (after the first second).
	from, to := begin.Add(time.Second), begin.Add(measured)
	count := func(tenant string) int {
		n := 0
		for _, s := range work.starts[tenant] {
			if s.After(from) && s.Before(to) {
				n++
			}
		}
		return n
	}
	h3, h1 := count("heavy3"), count("heavy1")
	if h1 == 0 || float64(h3)/float64(h1) < 2.4 || float64(h3)/float64(h1) > 3.6 {
		t.Errorf("heavy3 started %d jobs and heavy1 %d in %v: ratio %.2f, want 3 (±20%%) by their shares", h3, h1, to.Sub(from), float64(h3)/float64(max(h1, 1)))
	}
	if len(work.starts["heavy1"]) >= backlog || len(work.starts["heavy3"]) >= backlog {
		t.Fatalf("a heavy tenant ran out of backlog during the measure: the shares were not tested")
	}
	// Busy: the workers' time spent on jobs over the window, out of 8 × the window.
	var busy time.Duration
	for _, s := range work.spans {
		a, b := max(s[0].UnixNano(), from.UnixNano()), min(s[1].UnixNano(), to.UnixNano())
		if b > a {
			busy += time.Duration(b - a)
		}
	}
	if used := float64(busy) / float64(8*to.Sub(from)); used < 0.85 {
		t.Errorf("the pool was busy %.0f %% of the window, want ≥ 85 %%", 100*used)
	}
	// The quiet tenant: each of its jobs starts within a second (p99 of ~24).
	delays := slices.Clone(work.delays)
	slices.Sort(delays)
	if len(delays) < 20 {
		t.Fatalf("%d quiet jobs started, want about 24", len(delays))
	}
	if p99 := delays[len(delays)*99/100]; p99 > time.Second {
		t.Errorf("the quiet tenant's p99 from publish to start is %v, want ≤ 1s (delays %v)", p99, delays)
	}
	_, body := httpGet(t, metrics)
	if v := metricValue(body, "admitter_pool_in_flight", `pool="workers"`); v < 0 || v > 8 {
		t.Errorf("admitter_pool_in_flight{pool=\"workers\"} = %v, want 0 to 8", v)
	}
	t.Logf("pool of 8, 100 ms jobs, %v: heavy3 %d, heavy1 %d (%.2f:1); busy %.0f %%; quiet p50 %v p99 %v; most at once %d; ended %v",
		to.Sub(from), h3, h1, float64(h3)/float64(max(h1, 1)), 100*float64(busy)/float64(8*to.Sub(from)),
		delays[len(delays)/2].Round(time.Millisecond), delays[len(delays)*99/100].Round(time.Millisecond), work.most, end.Sub(begin).Round(time.Millisecond))
}
