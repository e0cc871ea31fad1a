//go:build drill

package tests

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/admitter/admitter/internal/testenv"
	"github.com/admitter/admitter/wire"
	"github.com/admitter/admitter/worker"
	"github.com/nats-io/nats.go"
)

// The failure drills (issues 38 and 39): the built binary beside a nats-server process and a
// redis-server process; replicas killed, paused and restarted, Redis killed, emptied or cut off
// from one replica; a worker on the worker package that records every run of every job. Each
// drill runs ADMITTER_DRILL_RUNS times in a row (default 1), every run on servers of its own, so
// that a fix can be held to 20 runs in a row:
//
//	ADMITTER_DRILL_RUNS=20 go test -race -run 'Drill|Scene' -timeout 2h ./tests/

// drillRuns is ADMITTER_DRILL_RUNS: how many times each drill runs.
func drillRuns(t *testing.T) int {
	t.Helper()
	s := os.Getenv("ADMITTER_DRILL_RUNS")
	if s == "" {
		return 1
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("ADMITTER_DRILL_RUNS=%q: want a count of runs, 1 or more", s)
	}
	return n
}

// repeatDrill runs drill ADMITTER_DRILL_RUNS times, one subtest each (run-01, run-02, ...), and
// stops at the first run that fails: its logs are the ones to read.
func repeatDrill(t *testing.T, drill func(t *testing.T)) {
	for i := range drillRuns(t) {
		if !t.Run(fmt.Sprintf("run-%02d", i+1), drill) {
			return
		}
	}
}

// loggedMapping is the account mapping an admitter told to spread the input over parts
// partitions logs at its start for an external server (README, Sizing), as a new user copies
// it into the server's configuration: the binary is started against a NATS URL nobody serves
// and gives up after ADMITTER_CONNECT_TIMEOUT, having logged the line.
func loggedMapping(t *testing.T, parts int) string {
	t.Helper()
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), fmt.Sprintf("ADMITTER_NATS_URL=nats://127.0.0.1:%d", port),
		"ADMITTER_CONNECT_TIMEOUT=1s", fmt.Sprintf("ADMITTER_PARTITIONS=%d", parts), "ADMITTER_LOG_FORMAT=text",
		"ADMITTER_HTTP_ADDR=off", "ADMITTER_API_ADDR=off", "ADMITTER_DATA_DIR=" + t.TempDir()}
	out, _ := cmd.CombinedOutput() // exits 1: nothing serves NATS there
	m := regexp.MustCompile(`mapping=("(?:[^"\\]|\\.)*")`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("the admitter's start logged no mapping for ADMITTER_PARTITIONS=%d:\n%s", parts, out)
	}
	line, err := strconv.Unquote(string(m[1]))
	if err != nil {
		t.Fatalf("the mapping the admitter logged, %s: %v", m[1], err)
	}
	return line
}

// newDrillWorld is a world on a nats-server process configured with the mapping an admitter
// logs for parts partitions (parts 1: none) and a redis-server with an append-only file.
func newDrillWorld(t *testing.T, plans string, parts int) *world {
	t.Helper()
	var mapping string
	if parts > 1 {
		mapping = loggedMapping(t, parts) + "\n"
	}
	node := testenv.StartNATSProcess(t, natsServer(t), mapping)
	redis := testenv.StartPersistentRedis(t)
	w := newWorldOn(t, plans, node.URL(), redis.URL())
	w.redis, w.parts = redis, parts
	return w
}

// drillReplica is one admitter replica of a drill: its name, its ports, its process now.
type drillReplica struct {
	name         string
	env          []string // its name and ports, and the drill's variables
	metrics, api string   // its /metrics URL and its decision API's base URL
	http         string   // its ADMITTER_HTTP_ADDR base URL (/debug/pprof)
	proc         *proc
	// away is set while the replica is killed or paused: it is not asked then.
	away atomic.Bool
}

// startReplica starts a replica named name with the drill's variables over.
func (w *world) startReplica(name string, over ...string) *drillReplica {
	w.t.Helper()
	env, metrics, api := servePorts(w.t)
	r := &drillReplica{name: name, env: append(append(env, "ADMITTER_REPLICA="+name), over...), metrics: metrics, api: api,
		http: strings.TrimSuffix(metrics, "/metrics")}
	r.proc = w.start(r.env...)
	return r
}

// restart starts the replica's process again (after it was killed or stopped), on its ports.
func (r *drillReplica) restart(w *world) {
	w.t.Helper()
	r.proc = w.start(r.env...)
	r.away.Store(false)
}

// partitions is how many partitions the replica holds (-1: it does not answer).
func (r *drillReplica) partitions(t *testing.T) int {
	return int(partitionsHeld(t, r.metrics))
}

// deadLetters records the dead letters as they are published (a core NATS subscription on the
// dead subject: it sees each publish, stored or dropped as a duplicate): payload → codes.
type deadLetters struct {
	mu  sync.Mutex
	got map[string][]string
}

// subscribeDead starts recording the dead letters of every tenant.
func (w *world) subscribeDead() *deadLetters {
	w.t.Helper()
	d := &deadLetters{got: map[string][]string{}}
	sub, err := w.nc.Subscribe("jobs.dead.>", func(m *nats.Msg) {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.got[string(m.Data)] = append(d.got[string(m.Data)], m.Header.Get(wire.HeaderError))
	})
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = sub.Unsubscribe() })
	return d
}

// has reports whether the job whose payload is p was dead-lettered.
func (d *deadLetters) has(p string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.got[p]) > 0
}

// seenMsgs records the messages published on a subject, by a header naming the job (a
// core NATS subscription sees every publish: on the output subject, those it drops as
// duplicates too): the header's value → when each was published.
type seenMsgs struct {
	mu  sync.Mutex
	got map[string][]time.Time
}

// subscribeForwards records every forward, by its Nats-Msg-Id.
func (w *world) subscribeForwards() *seenMsgs { return w.subscribeBy("jobs.admitted.>", nats.MsgIdHdr) }

// subscribeDones records every done message, by its tenant and Admit-Lease: a lease's done
// message seen twice was sent again, its first unanswered (the worker package waits 2 s).
func (w *world) subscribeDones() *seenMsgs { return w.subscribeBy("jobs.done.>", wire.HeaderLease) }

// subscribeBy records the messages on subject by their subject's tenant and header.
func (w *world) subscribeBy(subject, header string) *seenMsgs {
	w.t.Helper()
	f := &seenMsgs{got: map[string][]time.Time{}}
	sub, err := w.nc.Subscribe(subject, func(m *nats.Msg) {
		f.mu.Lock()
		defer f.mu.Unlock()
		tenant, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(m.Subject, "jobs.admitted."), "jobs.done."), ".")
		id := tenant + " " + m.Header.Get(header)
		f.got[id] = append(f.got[id], time.Now())
	})
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = sub.Unsubscribe() })
	return f
}

// againBetween is how many messages of tenant ("": of every tenant) were seen again, each
// after the first of its key, between from and to.
func (f *seenMsgs) againBetween(tenant string, from, to time.Time) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for key, ts := range f.got {
		if tenant != "" && !strings.HasPrefix(key, tenant+" ") {
			continue
		}
		for _, at := range ts[1:] {
			if !at.Before(from) && !at.After(to) {
				n++
			}
		}
	}
	return n
}

// again is every message seen more than once: its key → the times.
func (f *seenMsgs) again() map[string][]time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string][]time.Time{}
	for id, ts := range f.got {
		if len(ts) > 1 {
			out[id] = append([]time.Time(nil), ts...)
		}
	}
	return out
}

// startDrillWorker is startPoolWorker whose log (the worker library's warnings: lease messages
// unanswered, leases found ended, jobs put back) is kept, for a drill's failure.
func (w *world) startDrillWorker(name string, n int, h worker.Handler, filter ...string) *syncBuffer {
	w.t.Helper()
	log := &syncBuffer{}
	w.startLoggedWorker(name, n, h, slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelInfo})), filter...)
	return log
}

// stateOf is the tenant's state as the replica reads it now (GET /v1/tenants/{tenant}), in a
// line: each limit's use, the pool's in flight, the hold.
func (r *drillReplica) stateOf(tenant string) string {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(r.api + "/v1/tenants/" + tenant)
	if err != nil {
		return fmt.Sprintf("tenant %s: %v", tenant, err)
	}
	defer resp.Body.Close()
	var st wire.TenantState
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return fmt.Sprintf("tenant %s: %s: %v", tenant, resp.Status, err)
	}
	b := fmt.Sprintf("tenant %s (read by %s):", tenant, r.name)
	for _, l := range st.Limits {
		b += fmt.Sprintf(" %s %d used of %d, wait %dms;", l.Limit, l.Used, l.Capacity, l.WaitMs)
	}
	if st.Pool != nil {
		b += fmt.Sprintf(" pool %s %d in flight of %d;", st.Pool.Name, st.Pool.InFlight, st.Pool.Concurrency)
	}
	if st.HeldUntil != nil {
		b += fmt.Sprintf(" held until %s", st.HeldUntil.Format("15:04:05.000"))
	}
	return b
}

// idleSpan is a time a slot was held by nobody: key is "pool" or a tenant (its concurrency
// limit); inFlight and running the figures of its worst sample.
type idleSpan struct {
	key               string
	from, to          time.Time
	inFlight, running int64
}

// idleWatch samples the limiter against the worker until stop (see watchIdleSlots); stop is
// called once.
type idleWatch struct {
	quit  chan struct{}
	done  chan struct{}
	spans []idleSpan
}

// idleSample is how long apart the samples are; idleGap the longest time between two samples
// a span may bridge.
const (
	idleSample = 250 * time.Millisecond
	idleGap    = time.Second
)

// watchIdleSlots measures the slots held by nobody, until stop. Every 250 ms it reads, through
// the decision API of a replica that is up (GET /v1/tenants/{tenant}: the limiter's state now),
// the concurrency limit in use of each tenant of conc (tenant → its limit) and their pool's
// weight in flight; and, from the worker's own records (run) just before and just after, what
// ran of each tenant and in all. A limit has idle slots at a sample when the limiter counts
// more in flight than the most the worker ran across the two readings: slots held by jobs no
// handler runs. A forward in transit (stored, not yet handed to a handler) or a done message in
// transit makes a slot idle for some milliseconds. A slot held by nobody past bound is a span of
// samples, none more than idleGap apart, each with an idle slot while jobs waited for it
// (waiting, given how many times each job ran, names the tenants with jobs waiting, and "pool"
// when any has), lasting more than bound from its first sample to its last. A sample without
// an idle slot ends a span, and so does a time the limiter is not asked (skip reports true:
// while Redis is away, each replica's answer is its own copy's, not the limiter's).
func watchIdleSlots(replicas []*drillReplica, run *running, conc map[string]int, waiting func(runs map[string]int) map[string]bool,
	bound time.Duration, skip func() bool) *idleWatch {
	w := &idleWatch{quit: make(chan struct{}), done: make(chan struct{})}
	var names []string
	for tn := range conc {
		names = append(names, tn)
	}
	slices.Sort(names)
	type open struct {
		from, last        time.Time
		inFlight, running int64
	}
	spans := map[string]*open{}
	closeSpan := func(key string) {
		if o := spans[key]; o != nil && o.last.Sub(o.from) > bound {
			w.spans = append(w.spans, idleSpan{key: key, from: o.from, to: o.last, inFlight: o.inFlight, running: o.running})
		}
		delete(spans, key)
	}
	client := http.Client{Timeout: 500 * time.Millisecond}
	read := func(tenant string) (wire.TenantState, bool) {
		for _, r := range replicas {
			if r.away.Load() {
				continue
			}
			resp, err := client.Get(r.api + "/v1/tenants/" + tenant)
			if err != nil {
				continue
			}
			var st wire.TenantState
			err = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
			if err == nil && resp.StatusCode == http.StatusOK && st.Pool != nil {
				return st, true
			}
		}
		return wire.TenantState{}, false
	}
	var last time.Time
	go func() {
		defer close(w.done)
		tick := time.NewTicker(idleSample)
		defer tick.Stop()
		for {
			select {
			case <-w.quit:
				for key := range spans {
					closeSpan(key)
				}
				return
			case <-tick.C:
			}
			if skip() {
				for key := range spans {
					closeSpan(key)
				}
				continue
			}
			_, before, beforeAll := run.runCounts()
			used := map[string]int64{}
			pool := int64(-1)
			ok := true
			for _, tn := range names {
				st, answered := read(tn)
				if !answered {
					ok = false
					break
				}
				for _, ls := range st.Limits {
					if ls.Kind == "concurrency" {
						used[tn] = ls.Used
					}
				}
				if pool < 0 || st.Pool.InFlight < pool {
					pool = st.Pool.InFlight
				}
			}
			runs, after, afterAll := run.runCounts()
			now := time.Now()
			if !ok || now.Sub(last) > idleGap {
				for key := range spans {
					closeSpan(key)
				}
			}
			if !ok {
				continue
			}
			last = now
			wait := waiting(runs)
			figures := map[string][2]int64{"pool": {pool, int64(max(beforeAll, afterAll))}}
			for _, tn := range names {
				figures[tn] = [2]int64{used[tn], int64(max(before[tn], after[tn]))}
			}
			for key, f := range figures {
				if f[0] <= f[1] || !wait[key] {
					closeSpan(key)
					continue
				}
				o := spans[key]
				if o == nil {
					o = &open{from: now}
					spans[key] = o
				}
				o.last = now
				if f[0]-f[1] > o.inFlight-o.running {
					o.inFlight, o.running = f[0], f[1]
				}
			}
		}
	}()
	return w
}

// stop ends the watch and returns the spans it found, in order.
func (w *idleWatch) stop() []idleSpan {
	close(w.quit)
	<-w.done
	slices.SortFunc(w.spans, func(a, b idleSpan) int { return a.from.Compare(b.from) })
	return w.spans
}
