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

	"github.com/admitter/admitter/internal/testenv"
	"github.com/admitter/admitter/wire"
	"github.com/admitter/admitter/worker"
	"github.com/nats-io/nats.go/jetstream"
)

// handlers records what a worker's handlers did: how many ran at once, which jobs, and what
// each was told of its lease.
type handlers struct {
	mu       sync.Mutex
	running  int
	most     int
	payloads []string
	lengths  []time.Duration
}

// run is a handler taking took per job, or the duration its payload names after "took=".
func (h *handlers) run(took time.Duration) worker.Handler {
	return func(ctx context.Context, j *worker.Job) error {
		h.mu.Lock()
		h.running++
		h.most = max(h.most, h.running)
		h.payloads = append(h.payloads, string(j.Data))
		h.lengths = append(h.lengths, j.LeaseLength)
		h.mu.Unlock()
		d := took
		if v, ok := strings.CutPrefix(string(j.Data), "took="); ok {
			d, _ = time.ParseDuration(strings.Fields(v)[0])
		}
		select {
		case <-ctx.Done():
		case <-time.After(d): // the job's work
		}
		h.mu.Lock()
		h.running-- // done from here on: its done message may admit the next at once
		h.mu.Unlock()
		return ctx.Err()
	}
}

func (h *handlers) snapshot() (most int, payloads []string, lengths []time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.most, slices.Clone(h.payloads), slices.Clone(h.lengths)
}

// startWorker runs a worker.Worker with Concurrency n over tenant's forwards, through a durable
// consumer the test creates (the library creates none); stopped, bounded, when the test ends.
func (w *world) startWorker(tenant string, n int, h worker.Handler) *worker.Worker {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := w.js.CreateOrUpdateConsumer(ctx, "ADMITTED", jetstream.ConsumerConfig{Durable: "workers-" + tenant,
		FilterSubject: "jobs.admitted." + tenant + ".>", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second})
	if err != nil {
		w.t.Fatal(err)
	}
	wk, err := worker.New(worker.Config{Consumer: cons, Conn: w.nc, Handler: h, Concurrency: n, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		w.t.Fatal(err)
	}
	if err := wk.Start(context.Background()); err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := wk.Stop(ctx); err != nil {
			w.t.Errorf("stop the worker: %v", err)
		}
	})
	return wk
}

// servePorts picks free ports for the admitter's metrics and decision API and returns the
// environment that sets them and their base URLs.
func servePorts(t *testing.T) (env []string, metrics, api string) {
	t.Helper()
	var ports [2]int
	for i := range ports {
		p, err := testenv.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = p
	}
	return []string{fmt.Sprintf("ADMITTER_HTTP_ADDR=127.0.0.1:%d", ports[0]), fmt.Sprintf("ADMITTER_API_ADDR=127.0.0.1:%d", ports[1])},
		fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[0]), fmt.Sprintf("http://127.0.0.1:%d", ports[1])
}

// leaseMetric is admitter_lease_messages_total for a path and result.
func leaseMetric(t *testing.T, metrics, path, result string) float64 {
	t.Helper()
	_, body := httpGet(t, metrics)
	return metricValue(body, wire.MetricLeaseMessages.Prom, `path="`+path+`"`, `result="`+result+`"`)
}

// tenantLimit is one limit of a tenant's state read from the decision API.
func tenantLimit(t *testing.T, api, tenant, limit string) wire.LimitState {
	t.Helper()
	resp, err := http.Get(api + "/v1/tenants/" + tenant)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st wire.TenantState
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	for _, l := range st.Limits {
		if l.Limit == limit {
			return l
		}
	}
	t.Fatalf("tenant %s has no limit %s: %+v", tenant, limit, st)
	return wire.LimitState{}
}

// TestWorkerKeepsTheConcurrencyLimit: ten 200 ms jobs on limit 2, handled by the library with
// room for 4 handlers: never more than 2 run at once, each is handled once, and each lease is
// released by the library's done message (none expires), so the ten take about 1 s.
func TestWorkerKeepsTheConcurrencyLimit(t *testing.T) {
	w := newWorld(t, "plans:\n  two:\n    limits:\n      - {name: running, kind: concurrency, limit: 2, lease: 1m}\ntenants:\n  acme: two\n")
	env, metrics, api := servePorts(t)
	w.start(env...)
	h := &handlers{}
	w.startWorker("acme", 4, h.run(200*time.Millisecond))
	begin := time.Now()
	var want []string
	for i := range 10 {
		want = append(want, fmt.Sprint("job ", i))
		w.publish("jobs.submit.acme.export", want[i])
	}
	waitFor(t, 30*time.Second, "10 leases released by done messages", func() bool {
		return leaseMetric(t, metrics, "done", "released") >= 10
	})
	took := time.Since(begin)
	most, payloads, lengths := h.snapshot()
	if most != 2 {
		t.Errorf("%d handlers ran at once, want 2 (the limit, reached)", most)
	}
	slices.Sort(payloads)
	if !slices.Equal(payloads, want) {
		t.Errorf("handled %q, want each of the 10 jobs once", payloads)
	}
	if lengths[0] != time.Minute {
		t.Errorf("the job was told its lease lasts %v, want the plan's 1m (Admit-Lease-Ms)", lengths[0])
	}
	_, body := httpGet(t, metrics)
	if n := metricValue(body, wire.MetricLeasesExpired.Prom); n != 0 {
		t.Errorf("%v leases expired, want none: every job's was released", n)
	}
	if l := tenantLimit(t, api, "acme", "running"); l.Used != 0 {
		t.Errorf("limit running: %d in flight after every job was done, want 0", l.Used)
	}
	t.Logf("10 jobs of 200 ms on limit 2 through the worker library: %v (ideal 1 s)", took.Round(time.Millisecond))
}

// TestWorkerRenewsLongJobs: on limit 1 with a 1 s lease, a job of 2.5 s is renewed by the library
// while it runs, so the next job is not admitted beside it when its lease would have ended;
// the short jobs after it go one at a time.
func TestWorkerRenewsLongJobs(t *testing.T) {
	w := newWorld(t, "plans:\n  one:\n    limits:\n      - {name: running, kind: concurrency, limit: 1, lease: 1s}\ntenants:\n  acme: one\n")
	env, metrics, _ := servePorts(t)
	w.start(env...)
	h := &handlers{}
	w.startWorker("acme", 2, h.run(100*time.Millisecond))
	w.publish("jobs.submit.acme.export", "took=2.5s long")
	for i := range 3 {
		w.publish("jobs.submit.acme.export", fmt.Sprint("took=100ms short ", i))
	}
	waitFor(t, 30*time.Second, "4 done messages", func() bool {
		_, body := httpGet(t, metrics)
		return metricValue(body, wire.MetricLeaseMessages.Prom, `path="done"`) >= 4
	})
	most, payloads, lengths := h.snapshot()
	if most != 1 {
		t.Errorf("%d handlers ran at once, want 1: the long job's lease ended while it ran", most)
	}
	if len(payloads) != 4 || payloads[0] != "took=2.5s long" || lengths[0] != time.Second {
		t.Errorf("handled %q with leases of %v, want the long job first, told its lease lasts 1s, then the 3 short ones", payloads, lengths)
	}
	_, body := httpGet(t, metrics)
	if n := metricValue(body, wire.MetricLeaseMessages.Prom, `path="done"`, `result="released"`); n != 4 {
		t.Errorf("%v leases released by done messages, want 4", n)
	}
	renewed := metricValue(body, wire.MetricLeaseMessages.Prom, `path="renew"`, `result="renewed"`)
	if renewed < 4 {
		t.Errorf("%v renewals, want about 5 (every 500 ms of the 2.5 s job)", renewed)
	}
	if n := metricValue(body, wire.MetricLeasesExpired.Prom); n != 0 {
		t.Errorf("%v leases expired, want none", n)
	}
	t.Logf("a 2.5 s job on a 1 s lease: %v renewals", renewed)
}

// TestWorkerReconcilesCost: a job admitted with weight 2 whose handler reports a cost of 5
// takes 3 more from the plan's bucket; one of weight 3 that cost 0 gives its 3 back. Read
// through the decision API.
func TestWorkerReconcilesCost(t *testing.T) {
	w := newWorld(t, "plans:\n  metered:\n    limits:\n      - {name: running, kind: concurrency, limit: 50, lease: 1m}\n      - {name: tokens, capacity: 10, rate: 1/h}\ntenants:\n  acme: metered\n")
	env, metrics, api := servePorts(t)
	w.start(env...)
	w.startWorker("acme", 1, func(ctx context.Context, j *worker.Job) error {
		cost, err := strconv.ParseInt(strings.TrimPrefix(string(j.Data), "cost="), 10, 64)
		if err != nil {
			return err
		}
		j.SetCost(cost)
		return nil
	})
	w.publish("jobs.submit.acme.llm", "cost=5", wire.HeaderWeight, "2")
	waitFor(t, 20*time.Second, "the first job done", func() bool { return leaseMetric(t, metrics, "done", "released") >= 1 })
	if l := tenantLimit(t, api, "acme", "tokens"); l.Tokens != 5 {
		t.Errorf("bucket tokens: %d tokens after a job of weight 2 that cost 5, want 10 - 5 = 5", l.Tokens)
	}
	w.publish("jobs.submit.acme.llm", "cost=0", wire.HeaderWeight, "3")
	waitFor(t, 20*time.Second, "the second job done", func() bool { return leaseMetric(t, metrics, "done", "released") >= 2 })
	if l := tenantLimit(t, api, "acme", "tokens"); l.Tokens != 5 {
		t.Errorf("bucket tokens: %d after a job of weight 3 that cost 0, want its 3 back: 5", l.Tokens)
	}
}
