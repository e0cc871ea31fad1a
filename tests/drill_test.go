package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/admitter/admitter/internal/testenv"
	"github.com/admitter/admitter/wire"
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

// natsServerBinary is the nats-server of the module's dependency, built once for the drills.
var natsServerBinary struct {
	once sync.Once
	path string
	err  error
}

// natsServer builds (once) the nats-server the drills run as a process.
func natsServer(t *testing.T) string {
	t.Helper()
	natsServerBinary.once.Do(func() {
		natsServerBinary.path, natsServerBinary.err = testenv.BuildNATSServer(filepath.Dir(binary))
	})
	if natsServerBinary.err != nil {
		t.Fatal(natsServerBinary.err)
	}
	return natsServerBinary.path
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
