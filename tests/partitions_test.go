package tests

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/admitter/admitter/internal/testenv"
	"github.com/admitter/admitter/subjects"
	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The tests of this file run replicas that divide the input by partitions (ADMITTER_PARTITIONS,
// admission/owners.go): each partition is read by one replica only, its jobs are forwarded once
// and in order through ownership changes, and a dead replica's partitions are taken over.

// openPlans admits everything at once: the jobs are forwarded as fast as they are read.
const openPlans = "plans: {open: {limits: [{capacity: 100000, rate: 100000/s}]}}\ndefault_plan: open\n"

// admitterConn is the name cmd/admitter gives its NATS connection (serve.go).
const admitterConn = "admitter"

// outMsgs is, per connection named name (open or closed), the messages the server delivered to
// it: its jobs read, its PubAcks, its API replies, its KV watch's updates.
func (w *world) outMsgs(name string) map[uint64]int64 {
	w.t.Helper()
	out := map[uint64]int64{}
	for _, state := range []server.ConnState{server.ConnOpen, server.ConnClosed} {
		cz, err := w.nats.Connz(&server.ConnzOptions{State: state, Limit: 100000})
		if err != nil {
			w.t.Fatal(err)
		}
		for _, c := range cz.Conns {
			if c.Name == name {
				out[c.Cid] = c.OutMsgs
			}
		}
	}
	return out
}

// deliveredSince is the messages the server delivered to connections named name since before
// (an outMsgs snapshot).
func (w *world) deliveredSince(name string, before map[uint64]int64) int64 {
	w.t.Helper()
	var n int64
	for cid, out := range w.outMsgs(name) {
		n += out - before[cid]
	}
	return n
}

// partitionsHeld is admitter_partitions on the replica whose /metrics is at url (-1 when it
// does not answer, or does not report it yet).
func partitionsHeld(t *testing.T, url string) float64 {
	t.Helper()
	code, body := httpGet(t, url)
	if code != 200 || !strings.Contains(body, "\n"+wire.MetricPartitions.Prom) {
		return -1
	}
	return metricValue(body, wire.MetricPartitions.Prom)
}

// metricsPort picks a free port for a replica's /metrics: the environment that sets it and the
// URL.
func metricsPort(t *testing.T) (env, url string) {
	t.Helper()
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("ADMITTER_HTTP_ADDR=127.0.0.1:%d", port), fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
}

// tenantJob is one job of a test's producer: tenant's i-th, payload <tenant>-<i>.
type tenantJob struct {
	tenant string
	i      int
}

func (j tenantJob) subject() string { return "jobs.submit." + j.tenant + ".work" }
func (j tenantJob) payload() string { return fmt.Sprintf("%s-%05d", j.tenant, j.i) }

// interleaved is each tenant's jobs 0..each-1, the tenants taking turns.
func interleaved(tenants []string, each int) []tenantJob {
	out := make([]tenantJob, 0, len(tenants)*each)
	for i := range each {
		for _, tn := range tenants {
			out = append(out, tenantJob{tn, i})
		}
	}
	return out
}

// publishJobs stores jobs in order over one connection (async, so each tenant's are stored in
// the order given), pausing every batch jobs for pause, and waits for every PubAck; it stops
// early once quit is closed (nil: never). It returns payload → tenant of the jobs published. Safe
// to call from another goroutine than the test's.
func (w *world) publishJobs(jobs []tenantJob, batch int, pause time.Duration, quit <-chan struct{}) map[string]string {
	published := make(map[string]string, len(jobs))
	js, err := jetstream.New(w.nc, jetstream.WithPublishAsyncMaxPending(1024))
	if err != nil {
		w.t.Error(err)
		return published
	}
	for k, j := range jobs {
		if k > 0 && batch > 0 && k%batch == 0 && pause > 0 {
			select {
			case <-quit:
				return published
			case <-time.After(pause):
			}
		}
		m := nats.NewMsg(j.subject())
		m.Data = []byte(j.payload())
		if _, err := js.PublishMsgAsync(m, jetstream.WithStallWait(10*time.Second)); err != nil {
			w.t.Errorf("publish %s: %v", j.payload(), err)
			return published
		}
		published[j.payload()] = j.tenant
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-quit:
	case <-time.After(30 * time.Second):
		w.t.Errorf("%d PubAcks missing after 30s", js.PublishAsyncPending())
	}
	return published
}

// waitForwarded waits (bounded) until ADMITTED stores at least n messages, and returns what it
// stores then, all of it (fewer when the wait timed out: the caller's checks say what is missing).
func (w *world) waitForwarded(n int, timeout time.Duration) []job {
	w.t.Helper()
	for deadline := time.Now().Add(timeout); ; time.Sleep(50 * time.Millisecond) {
		m, err := w.countMsgs("ADMITTED")
		if err == nil && m >= uint64(n) {
			break
		}
		if time.Now().After(deadline) {
			if err != nil {
				w.t.Errorf("count the jobs forwarded: %v", err)
			}
			w.t.Errorf("%d of %d jobs forwarded after %v", m, n, timeout)
			break
		}
	}
	return w.readAll("ADMITTED")
}

// checkOrder fails t for every tenant whose jobs ADMITTED stored out of their publish order
// (payload <tenant>-<i>), and returns how many tenants it checked.
func checkOrder(t *testing.T, got []job) int {
	t.Helper()
	last := map[string]int{}
	bad := 0
	for _, j := range got {
		tn := j.header.Get(wire.HeaderTenant)
		i, err := strconv.Atoi(strings.TrimPrefix(j.payload, tn+"-"))
		if err != nil {
			t.Errorf("forwarded %q of tenant %q: not a job of this test", j.payload, tn)
			continue
		}
		if prev, ok := last[tn]; ok && i <= prev {
			if bad++; bad <= 10 {
				t.Errorf("tenant %s: job %d stored after job %d", tn, i, prev)
			}
		}
		last[tn] = i
	}
	if bad > 10 {
		t.Errorf("... %d jobs out of order in all", bad)
	}
	return len(last)
}

// deliveriesPerJob forwards jobs through replicas admitters of a world with parts partitions and
// returns the messages the server delivered to the admitters, per job, while they did.
func deliveriesPerJob(t *testing.T, replicas, parts int, jobs []tenantJob) float64 {
	t.Helper()
	var w *world
	if parts > 1 {
		w = newPartitionedWorld(t, openPlans, parts)
	} else {
		w = newWorld(t, openPlans) // one stream, JOBS: no mapping
	}
	var metrics []string
	for range replicas {
		env, url := metricsPort(t)
		w.start(env, "ADMITTER_WORKERS=4")
		metrics = append(metrics, url)
	}
	if parts > 1 {
		w.waitShared(metrics...)
	} else {
		waitFor(t, 10*time.Second, "a replica to hold the input", func() bool {
			sum := 0.0
			for _, url := range metrics {
				sum += max(partitionsHeld(t, url), 0)
			}
			return sum == 1
		})
	}
	before := w.outMsgs(admitterConn)
	published := w.publishJobs(jobs, 0, 0, nil)
	got := w.waitForwarded(len(jobs), 30*time.Second)
	delivered := w.deliveredSince(admitterConn, before)
	c := checkInvariants(published, got, nil, nil)
	c.report(t, time.Now())
	if c.forwarded != len(jobs) {
		t.Errorf("%d forwards for %d jobs", c.forwarded, len(jobs))
	}
	per := float64(delivered) / float64(len(jobs))
	t.Logf("%d replicas, %d partitions: %d messages delivered to the admitters for %d jobs: %.2f per job", replicas, parts, delivered, len(jobs), per)
	return per
}

// TestFourReplicasReadEachJobOnce: four replicas over eight partitions read each job once
// between them (each only its partitions'), not once each: the server delivers the admitters
// about two messages per job (the job, its forward's PubAck), as it does to a replica alone,
// where replicas that each read the whole input took five. Every job is forwarded once.
func TestFourReplicasReadEachJobOnce(t *testing.T) {
	t.Parallel()
	const tenants, each = 200, 20
	var names []string
	for k := range tenants {
		names = append(names, fmt.Sprintf("t%03d", k))
	}
	jobs := interleaved(names, each)
	four := deliveriesPerJob(t, 4, 8, jobs)
	if four > 2.5 {
		t.Errorf("the four replicas were delivered %.2f messages per job, want at most 2.5 (each job read once: the job and its forward's PubAck, about 2)", four)
	}
	one := deliveriesPerJob(t, 1, 8, jobs)
	if four > 1.2*one {
		t.Errorf("four replicas were delivered %.2f messages per job, one alone %.2f: more than 20%% more", four, one)
	}
}

// TestOwnershipFlapsLoseNothing: while a producer publishes a little faster than the tenants'
// plan lets them go (so that every tenant has jobs waiting), one of two replicas over eight
// partitions is stopped (SIGTERM) and started again, again and again: half the partitions, with
// their tenants' queues, go to the other replica and come back each time. Every job is forwarded
// once, each tenant's in publish order and within its plan.
func TestOwnershipFlapsLoseNothing(t *testing.T) {
	t.Parallel()
	// 75 tenants publish 8 jobs/s each for 5 s, and may go at 6/s after a burst of 2: every
	// tenant has jobs waiting through the first flaps, and none after the last (a move costs its
	// tenants up to a heartbeat).
	const tenants, each, flaps, capacity, rate = 75, 40, 6, 2, 6.0
	w := newPartitionedWorld(t, fmt.Sprintf("plans: {p: {limits: [{capacity: %d, rate: %v/s}]}}\ndefault_plan: p\n", capacity, rate), 8)
	stayEnv, stayURL := metricsPort(t)
	w.start(stayEnv, "ADMITTER_WORKERS=4")
	flapEnv, flapURL := metricsPort(t)
	flapper := w.start(flapEnv, "ADMITTER_WORKERS=4")
	w.waitShared(stayURL, flapURL)
	// Forwards sent again (the output's duplicate window drops them): a job settled but not yet
	// removed when its partition moved, read again by the next holder.
	var sentMu sync.Mutex
	sent, again := map[string]bool{}, 0
	sub, err := w.nc.Subscribe("jobs.admitted.>", func(m *nats.Msg) {
		sentMu.Lock()
		defer sentMu.Unlock()
		id := m.Header.Get(nats.MsgIdHdr)
		if sent[id] {
			again++
		}
		sent[id] = true
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()

	var names []string
	for k := range tenants {
		names = append(names, fmt.Sprintf("f%02d", k))
	}
	jobs := interleaved(names, each)
	var published map[string]string
	var producing sync.WaitGroup
	quit := make(chan struct{})
	var produced time.Duration
	producing.Go(func() {
		at := time.Now()
		published = w.publishJobs(jobs, tenants, 125*time.Millisecond, quit)
		produced = time.Since(at)
	})
	t.Cleanup(func() { close(quit); producing.Wait() }) // before the world's connection closes

	start := time.Now()
	var stops, regains []time.Duration
	for f := range flaps {
		at := time.Now()
		if code := flapper.signal(syscall.SIGTERM, 15*time.Second); code != 0 {
			t.Fatalf("flap %d: the replica exited %d after SIGTERM:\n%s", f, code, flapper.logs.String())
		}
		waitFor(t, 10*time.Second, "the other replica to hold every partition", func() bool { return partitionsHeld(t, stayURL) == 8 })
		stops = append(stops, time.Since(at).Round(time.Millisecond))
		at = time.Now()
		flapEnv, flapURL = metricsPort(t)
		flapper = w.start(flapEnv, "ADMITTER_WORKERS=4")
		waitFor(t, 10*time.Second, "the restarted replica to hold partitions again", func() bool { return partitionsHeld(t, flapURL) >= 1 })
		regains = append(regains, time.Since(at).Round(time.Millisecond))
	}
	flapped := time.Since(start)
	producing.Wait()
	if t.Failed() {
		return
	}
	got := w.waitForwarded(len(jobs), 20*time.Second)
	var checked []checkedTenant
	for _, tn := range names {
		checked = append(checked, checkedTenant{name: tn, limits: []bucketLimit{{capacity, rate}}, slack: 1})
	}
	c := checkInvariants(published, got, nil, checked)
	c.report(t, start)
	if len(published) != len(jobs) || c.forwarded != len(jobs) {
		t.Errorf("%d forwards for %d jobs published of %d", c.forwarded, len(published), len(jobs))
	}
	n := checkOrder(t, got)
	held, all := c.pacingHeld()
	sentMu.Lock()
	t.Logf("forwards sent again after a move (dropped by the duplicate window): %d", again)
	sentMu.Unlock()
	t.Logf("%d flaps in %v (stop and take over: %v; start and take back: %v) while %d jobs of %d tenants were published over %v; all forwarded after %v: %d forwards, each tenant's (%d) in order, pacing held on %d of %d",
		flaps, flapped.Round(time.Millisecond), stops, regains, len(jobs), tenants, produced.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), c.forwarded, n, held, all)
}

// TestKilledReplicasPartitionsAreTakenOver: of two replicas over four partitions, one is killed
// (SIGKILL) while its partitions' tenants have jobs waiting on their plan. The survivor comes to
// hold all four partitions; every job is forwarded once, each tenant within C + r·t.
func TestKilledReplicasPartitionsAreTakenOver(t *testing.T) {
	t.Parallel()
	const capacity, rate, each, parts = 5, 20.0, 50, 4
	w := newPartitionedWorld(t, fmt.Sprintf("plans: {p: {limits: [{capacity: %d, rate: %v/s}]}}\ndefault_plan: p\n", capacity, rate), parts)
	var replicas []*proc
	var metrics []string
	for range 2 {
		env, url := metricsPort(t)
		replicas = append(replicas, w.start(env))
		metrics = append(metrics, url)
	}
	w.waitShared(metrics...)

	// Two tenants in each partition: whichever replica dies, tenants of its partitions wait.
	var names []string
	per := map[int]int{}
	for k := 0; len(names) < 2*parts; k++ {
		tn := fmt.Sprintf("k%03d", k)
		if p := subjects.Partition(tn, parts); per[p] < 2 {
			per[p]++
			names = append(names, tn)
		}
	}
	jobs := interleaved(names, each)
	start := time.Now()
	published := w.publishJobs(jobs, 0, 0, nil)
	// Killed once every tenant's burst is forwarded and its backlog paced: about a second in.
	if w.waitForwarded(len(names)*(capacity+5), 20*time.Second); t.Failed() {
		return
	}
	victim, survivor := 0, 1
	if partitionsHeld(t, metrics[0]) < 1 {
		victim, survivor = 1, 0
	}
	held := partitionsHeld(t, metrics[victim])
	replicas[victim].kill()
	killed := time.Now()
	if held < 1 {
		t.Fatalf("the replica killed held %v partitions", held)
	}
	waitFor(t, 15*time.Second, "the survivor to hold every partition", func() bool { return partitionsHeld(t, metrics[survivor]) == parts })
	took := time.Since(killed)
	got := w.waitForwarded(len(jobs), 20*time.Second)
	tenants := make([]checkedTenant, 0, len(names))
	for _, tn := range names {
		tenants = append(tenants, checkedTenant{name: tn, limits: []bucketLimit{{capacity, rate}}, slack: 1})
	}
	c := checkInvariants(published, got, nil, tenants)
	c.report(t, start)
	if c.forwarded != len(jobs) {
		t.Errorf("%d forwards for %d jobs", c.forwarded, len(jobs))
	}
	after := map[string]int{}
	for _, j := range got {
		if j.stored.After(killed) {
			after[j.header.Get(wire.HeaderTenant)]++
		}
	}
	for _, tn := range names {
		if after[tn] == 0 { // then its partition may not have had a job waiting at the kill
			t.Errorf("tenant %s (partition %d): no job forwarded after the kill, want its backlog forwarded after it", tn, subjects.Partition(tn, parts))
		}
	}
	okLimits, all := c.pacingHeld()
	t.Logf("killed the replica holding %v partitions; the survivor held all %d after %v; jobs forwarded after the kill per tenant: %v; pacing held on %d of %d",
		held, parts, took.Round(time.Millisecond), after, okLimits, all)
}
