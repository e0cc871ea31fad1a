package tests

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/admitter/admitter/admission"
	"github.com/admitter/admitter/internal/testenv"
	"github.com/admitter/admitter/subjects"
	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// repartitionPlans paces every tenant well below what the producer publishes: its jobs wait in
// the input, so that some are left in the streams of a partitioning when it changes.
const repartitionPlans = "plans: {slow: {limits: [{capacity: 1, rate: 3/s}]}}\ndefault_plan: slow\n"

// TestRepartitionKeepsOrder changes the input's partitions twice while jobs wait and a producer
// publishes: 1 → 4 (the admitter stopped with SIGTERM, the server's mapping reloaded, the admitter
// started with ADMITTER_PARTITIONS=4), then 4 → 2 (the admitter killed). Every third job a
// producer publishes while there are partitions goes to the subject it computes itself
// (subjects.Partitions.Subject), as a producer does whose server has no mapping. Every job is
// forwarded exactly once, each tenant's in the order published, on the subject it was published
// on whichever way it was stored, and the streams of the older partitionings end empty.
func TestRepartitionKeepsOrder(t *testing.T) {
	t.Parallel()
	redis := testenv.StartPersistentRedis(t)
	nsrv := testenv.StartNATSWith(t, nil) // one partition: no mapping
	w := newWorldOn(t, repartitionPlans, nsrv.URL(), redis.URL())
	w.nats, w.redis = nsrv, redis
	tenants := make([]string, 30)
	for k := range tenants {
		tenants[k] = fmt.Sprintf("t%02d", k)
	}
	for _, n := range []int{2, 4} { // the scenario needs tenants in every partition
		if parts := partitionsOf(tenants, n); len(parts) != n {
			t.Fatalf("the tenants fall in partitions %v of %d", parts, n)
		}
	}
	start := time.Now()

	p1 := w.start()
	pr := startOrderedProducer(t, w.natsURL, tenants, 200*time.Millisecond)
	waitFor(t, 20*time.Second, "jobs forwarded with one partition, and a backlog in JOBS", func() bool {
		return w.streamMsgs("ADMITTED") >= 60 && w.streamMsgs("JOBS") >= 60
	})
	if code := p1.signal(syscall.SIGTERM, 15*time.Second); code != 0 {
		t.Fatalf("the admitter exited %d after SIGTERM", code)
	}
	left1 := w.streamMsgs("JOBS")
	t.Logf("%v: one partition stopped", time.Since(start).Round(time.Millisecond))

	pr.repartition(t, 4, func() error { return w.nats.Reload(partitionMapping(t, 4)) })
	w.parts = 4
	p4 := w.start()
	at4 := w.streamMsgs("ADMITTED")
	t.Logf("%v: four partitions started", time.Since(start).Round(time.Millisecond))
	waitFor(t, 20*time.Second, "jobs forwarded with four partitions, and a backlog in JOBS_4_*", func() bool {
		return w.streamMsgs("ADMITTED") >= at4+60 && w.inputMsgs(4) >= 60
	})
	p4.kill() // a crash this time
	left4, leftJobs := w.inputMsgs(4), w.streamMsgs("JOBS")

	pr.repartition(t, 2, func() error { return w.nats.Reload(partitionMapping(t, 2)) })
	w.parts = 2
	p2 := w.start()
	t.Logf("%v: two partitions started", time.Since(start).Round(time.Millisecond))
	waitFor(t, 20*time.Second, "jobs published to JOBS_2_*", func() bool { return w.inputMsgs(2) >= 90 })
	sent, direct := pr.finish(t)
	total := 0
	for _, n := range sent {
		total += n
	}
	t.Logf("%d jobs published (%d on subjects the producer computed) in %v; left waiting at the changes: %d in JOBS (1 → 4), %d in JOBS_4_* and %d in JOBS (4 → 2)",
		total, direct, time.Since(start).Round(time.Millisecond), left1, left4, leftJobs)
	if left1 == 0 || left4 == 0 || direct == 0 {
		t.Fatalf("the scenario did not happen: %d jobs left in JOBS, %d in JOBS_4_*, %d published on computed subjects", left1, left4, direct)
	}

	var got []job
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if got = w.readAll("ADMITTED"); len(got) >= total || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("%v: %d of %d jobs forwarded", time.Since(start).Round(time.Millisecond), len(got), total)
	checkPublishOrder(t, got, sent)
	noDataRace(t, p1, p4, p2)
	if t.Failed() {
		return
	}
	old := []string{"JOBS"}
	for p := range 4 {
		old = append(old, wire.InputStream("JOBS", 4, p))
	}
	waitFor(t, 15*time.Second, "the older streams and the partitions to be emptied", func() bool {
		for _, name := range old {
			if w.streamMsgs(name) > 0 {
				return false
			}
		}
		return w.inputMsgs(2) == 0
	})
	t.Logf("every job forwarded once and in order, the older streams empty, %v in", time.Since(start).Round(time.Millisecond))
}

// noDataRace fails t if an admitter (built with -race) reported a data race.
func noDataRace(t *testing.T, procs ...*proc) {
	t.Helper()
	for i, p := range procs {
		if logs := p.logs.String(); strings.Contains(logs, "WARNING: DATA RACE") {
			t.Errorf("admitter %d reported a data race:\n%s", i+1, logs)
		}
	}
}

// inputMsgs is the number of jobs stored in the streams of partitioning n (0 for a stream that
// does not exist).
func (w *world) inputMsgs(n int) uint64 {
	w.t.Helper()
	sum := uint64(0)
	for p := range n {
		m, err := w.countMsgs(wire.InputStream("JOBS", n, p))
		if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			w.t.Fatal(err)
		}
		sum += m
	}
	return sum
}

// partitionsOf is the partitions of n the tenants fall in, sorted.
func partitionsOf(tenants []string, n int) []int {
	var out []int
	for _, tn := range tenants {
		if p := subjects.Partition(tn, n); !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// checkPublishOrder fails t unless got (the output stream's messages, in stream order) is every
// job published once, each tenant's in the order published: the payloads <tenant>-<i> of tenant
// with i from 0 to sent[tenant]−1, in that order, forwarded on jobs.admitted.<tenant>.work.
func checkPublishOrder(t *testing.T, got []job, sent map[string]int) {
	t.Helper()
	next := map[string]int{}
	order := map[string][]int{}
	var badTenants []string
	bad := 0
	for _, j := range got {
		tenant, num, ok := strings.Cut(j.payload, "-")
		i, err := strconv.Atoi(num)
		if !ok || err != nil {
			t.Errorf("a forward of a job never published: %q", j.payload)
			continue
		}
		if want := "jobs.admitted." + tenant + ".work"; j.subject != want || j.header.Get(wire.HeaderTenant) != tenant {
			t.Errorf("job %s forwarded on %s for tenant %q, want %s for %s", j.payload, j.subject, j.header.Get(wire.HeaderTenant), want, tenant)
		}
		order[tenant] = append(order[tenant], i)
		if i != next[tenant] {
			if !slices.Contains(badTenants, tenant) {
				badTenants = append(badTenants, tenant)
			}
			if bad++; bad <= 10 {
				t.Errorf("tenant %s: job %d forwarded after job %d (each job once, in the order published)", tenant, i, next[tenant]-1)
			}
		}
		next[tenant] = max(next[tenant], i+1)
	}
	for tenant, n := range sent {
		if next[tenant] != n {
			t.Errorf("tenant %s: %d jobs published, forwarded through job %d", tenant, n, next[tenant]-1)
		}
	}
	if bad > 10 {
		t.Errorf("… %d forwards out of order in all", bad)
	}
	for _, tenant := range badTenants[:min(len(badTenants), 3)] {
		t.Logf("tenant %s's jobs in the order forwarded: %v", tenant, order[tenant])
	}
}

// orderedProducer publishes one job per tenant per round, each tenant's numbered in order
// (payload and Msg-Id <tenant>-<i>), each once its previous is stored: a tenant's publish order
// is its numbering. While there are partitions, every third job of a tenant is published on
// the subject the producer computes for it (subjects.Partitions.Subject) instead of the one the
// server maps. The partitioning it computes with changes with the server's mapping, at once
// (repartition).
type orderedProducer struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	tenants []string
	every   time.Duration
	stop    chan struct{}
	done    chan struct{}

	mu     sync.Mutex // held by a publish, and while the mapping changes
	ps     subjects.Partitions
	sent   map[string]int
	direct int
	err    error
}

func startOrderedProducer(t *testing.T, natsURL string, tenants []string, every time.Duration) *orderedProducer {
	t.Helper()
	nc, err := nats.Connect(natsURL, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	pr := &orderedProducer{nc: nc, js: js, tenants: tenants, every: every, stop: make(chan struct{}), done: make(chan struct{}),
		ps: admission.Partitions(subjects.MustParse("jobs.submit.{tenant}.>"), "JOBS", 1), sent: map[string]int{}}
	go pr.run()
	t.Cleanup(func() { pr.halt() })
	return pr
}

func (pr *orderedProducer) run() {
	defer close(pr.done)
	for {
		round := time.Now()
		for _, tn := range pr.tenants {
			select {
			case <-pr.stop:
				return
			default:
			}
			if err := pr.publish(tn); err != nil {
				pr.mu.Lock()
				pr.err = err
				pr.mu.Unlock()
				return
			}
		}
		select {
		case <-pr.stop:
			return
		case <-time.After(time.Until(round.Add(pr.every))):
		}
	}
}

// publish stores tenant's next job, retrying (the streams of a new partitioning are made by the
// admitter that starts after the mapping changed).
func (pr *orderedProducer) publish(tenant string) error {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	i := pr.sent[tenant]
	payload := fmt.Sprintf("%s-%d", tenant, i)
	subject := "jobs.submit." + tenant + ".work"
	direct := !pr.ps.One() && i%3 == 2
	if direct {
		var err error
		if subject, err = pr.ps.Subject(subject); err != nil {
			return err
		}
	}
	m := nats.NewMsg(subject)
	m.Data = []byte(payload)
	if err := publishRetrying(pr.js, m, payload); err != nil {
		return fmt.Errorf("job %s on %s: %w", payload, subject, err)
	}
	pr.sent[tenant]++
	if direct {
		pr.direct++
	}
	return nil
}

// repartition changes the server's mapping with reload, between two publishes, and computes the
// subjects of n partitions from then on.
func (pr *orderedProducer) repartition(t *testing.T, n int, reload func() error) {
	t.Helper()
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if err := reload(); err != nil {
		t.Fatalf("reload the server's mapping for %d partitions: %v", n, err)
	}
	pr.ps = admission.Partitions(subjects.MustParse("jobs.submit.{tenant}.>"), "JOBS", n)
}

func (pr *orderedProducer) halt() {
	select {
	case <-pr.stop:
	default:
		close(pr.stop)
	}
	select {
	case <-pr.done:
	case <-time.After(publishRetryFor + 10*time.Second):
	}
	pr.nc.Close()
}

// finish stops the producer and returns how many jobs each tenant published, and how many of
// them went to a computed subject; it fails t if a publish failed.
func (pr *orderedProducer) finish(t *testing.T) (map[string]int, int) {
	t.Helper()
	pr.halt()
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.err != nil {
		t.Fatalf("producer: %v", pr.err)
	}
	return maps.Clone(pr.sent), pr.direct
}

// TestPartitionsOnAClusterSurviveANodeLoss: on a 3-node JetStream cluster whose nodes all map the
// input over 6 partitions, two admitters with ADMITTER_STREAM_REPLICAS=3 share the partitions,
// whose streams (R3) are led from more than one server; the server leading the most of them is
// shut down while jobs of 18 tenants flow. Every job is forwarded exactly once.
func TestPartitionsOnAClusterSurviveANodeLoss(t *testing.T) {
	t.Parallel()
	const parts = 6
	tenants := make([]string, 18)
	for k := range tenants {
		tenants[k] = fmt.Sprintf("c%02d", k)
	}
	if got := partitionsOf(tenants, parts); len(got) != parts {
		t.Fatalf("the tenants fall in partitions %v of %d", got, parts)
	}
	cluster := startMappedCluster(t, 3, partitionMapping(t, parts))
	w := newWorldOn(t, "plans: {p: {limits: [{capacity: 20, rate: 100/s}]}}\ndefault_plan: p\n", cluster.URLs(), testenv.StartPersistentRedis(t).URL())
	w.parts = parts
	var procs []*proc
	var metrics []string
	for range 2 {
		port, err := testenv.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		procs = append(procs, w.start("ADMITTER_STREAM_REPLICAS=3", fmt.Sprintf("ADMITTER_HTTP_ADDR=127.0.0.1:%d", port)))
		metrics = append(metrics, fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	}
	w.waitShared(metrics...)

	leaders := partitionLeaders(t, w.js, parts)
	if byServer := countLeaders(leaders); len(byServer) < 2 {
		// NATS picks each new stream's preferred leader at random among its online peers
		// (raftGroup.setPreferredMember): all six on one server happens now and then. One
		// moved, the loss below is that of some partitions' leaders, not of all.
		t.Logf("every partition led by one server (%v): stepping one down", byServer)
		stepDown(t, w.nc, wire.InputStream("JOBS", parts, 0))
		waitFor(t, 20*time.Second, "a new leader for partition 0", func() bool {
			leaders = partitionLeaders(t, w.js, parts)
			return len(countLeaders(leaders)) >= 2
		})
	}
	byServer := countLeaders(leaders)
	if len(byServer) < 2 {
		t.Fatalf("the partitions' streams are led by %v, want at least 2 servers", byServer)
	}
	victim := ""
	for name, n := range byServer {
		if victim == "" || n > byServer[victim] {
			victim = name
		}
	}
	t.Logf("the partitions' leaders: %v", leaders)

	var lt []loadTenant
	for _, tn := range tenants {
		lt = append(lt, loadTenant{name: tn, rate: 15, maxW: 1})
	}
	start := time.Now()
	ld := startLoad(t, w.natsURL, uint64(start.UnixNano()), lt, 2)
	// Counted from the stream's state, not read: a read through the loss waits out the election.
	admitted := func() int {
		n, err := w.countMsgs("ADMITTED")
		if err != nil {
			return -1
		}
		return int(n)
	}
	waitFor(t, 20*time.Second, "jobs forwarded before the loss", func() bool { return admitted() >= 300 })
	before := admitted()
	cluster.Server(victim).Shutdown()
	lost := time.Now()
	t.Logf("%v: shut down %s, leader of %d of the %d partitions' streams, after %d forwards", lost.Sub(start).Round(time.Millisecond), victim, byServer[victim], parts, before)
	waitFor(t, 30*time.Second, "jobs forwarded after the loss", func() bool { return admitted() >= before+300 })
	resumed := time.Since(lost)
	published := ld.finish(t)
	t.Logf("%v: %d jobs published; %d more forwarded %v after the loss", time.Since(start).Round(time.Millisecond), len(published), 300, resumed.Round(time.Millisecond))
	waitFor(t, 60*time.Second, "every job forwarded", func() bool { return admitted() >= len(published) })

	got := w.readAll("ADMITTED")
	c := checkInvariants(published, got, w.readAll("DEAD"), nil)
	c.report(t, start)
	noDataRace(t, procs...)
	t.Logf("%v: %d jobs forwarded once each", time.Since(start).Round(time.Millisecond), c.forwarded)
}

// startMappedCluster is testenv.StartNATSCluster with every server's options tuned by tune (the
// partitions' mapping, which each server of a cluster needs): n JetStream servers n1…nN on
// loopback forming one cluster, shut down when the test ends.
func startMappedCluster(t *testing.T, n int, tune func(*server.Options)) *testenv.NATSCluster {
	t.Helper()
	routes := make([]int, n)
	var urls []string
	for i := range routes {
		p, err := testenv.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		routes[i] = p
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	c := &testenv.NATSCluster{}
	t.Cleanup(c.Stop)
	for i := range n {
		opts := &server.Options{
			ServerName: fmt.Sprintf("n%d", i+1), Host: "127.0.0.1", Port: -1,
			JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
			Cluster: server.ClusterOpts{Name: "admitter-test", Host: "127.0.0.1", Port: routes[i]},
			Routes:  server.RoutesFromStr(strings.Join(urls, ",")),
		}
		tune(opts)
		s, err := server.NewServer(opts)
		if err != nil {
			t.Fatalf("cluster server %d: %v", i+1, err)
		}
		s.Start()
		c.Servers = append(c.Servers, s)
	}
	for _, s := range c.Servers {
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatalf("cluster server %s not ready", s.Name())
		}
	}
	waitFor(t, 20*time.Second, "a JetStream meta leader", func() bool {
		return slices.ContainsFunc(c.Servers, func(s *server.Server) bool { return s.Running() && s.JetStreamIsLeader() })
	})
	return c
}

// partitionLeaders is the server leading each of the n partitions' streams, which must be
// replicated on three servers.
func partitionLeaders(t *testing.T, js jetstream.JetStream, n int) map[string]string {
	t.Helper()
	out := map[string]string{}
	for p := range n {
		name := wire.InputStream("JOBS", n, p)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := js.Stream(ctx, name)
		var info *jetstream.StreamInfo
		if err == nil {
			info, err = st.Info(ctx)
		}
		cancel()
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		if info.Config.Replicas != 3 || info.Cluster == nil {
			t.Fatalf("stream %s has %d replicas (cluster %v), want 3", name, info.Config.Replicas, info.Cluster)
		}
		out[name] = info.Cluster.Leader
	}
	return out
}

// countLeaders is how many streams each server leads.
func countLeaders(leaders map[string]string) map[string]int {
	out := map[string]int{}
	for _, l := range leaders {
		if l != "" {
			out[l]++
		}
	}
	return out
}

// stepDown asks the leader of stream to step down: another of its servers is elected.
func stepDown(t *testing.T, nc *nats.Conn, stream string) {
	t.Helper()
	if _, err := nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+stream, nil, 5*time.Second); err != nil {
		t.Fatalf("step down the leader of %s: %v", stream, err)
	}
}
