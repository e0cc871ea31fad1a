package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/internal/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// env is what the scenarios share: the servers' starter, Redis, the plans and the options.
type env struct {
	// tb starts the scenario's servers and owns them: its clean-up stops them when the scenario
	// ends (see runScenarios).
	tb testenv.TB
	// bins are the binaries of the scenarios that run admitter and nats-server as processes.
	bins     *binaries
	redisURL string
	// admin is the bench's own client of that Redis: it empties it between runs, and reads
	// what the runs cost it.
	admin *redisAdmin
	plans *bucket.Plans
	o     Options
}

// prepare starts the forwarder of the given kind against a NATS server.
func (e *env) prepare(ctx context.Context, kind, url string) (*forwarder, error) {
	switch kind {
	case "relay":
		return prepareRelay(ctx, url, e.o.RelayPipelines, false, jetstream.PullMaxMessages(512))
	case "relay+msgid":
		return prepareRelay(ctx, url, e.o.RelayPipelines, true, jetstream.PullMaxMessages(512))
	}
	if kind == kindCluster {
		// A cluster of its own, started for this one run: empty, and stopped with the forwarder
		// (its servers would otherwise gossip through the scenarios after it).
		clusterURL, nodes := testenv.StartRedisCluster(e.tb, 3)
		fw, err := prepareReplicas(ctx, 1, url, clusterURL, e.plans, e.o)
		if err != nil {
			for _, n := range nodes {
				n.Kill()
			}
			return nil, err
		}
		stop := fw.stop
		fw.stop = func() {
			stop()
			for _, n := range nodes {
				n.Kill()
			}
		}
		return fw, nil
	}
	if err := e.admin.flush(ctx); err != nil {
		return nil, err
	}
	n := 1
	if kind == kindReplicas {
		n = 2
	}
	return prepareReplicas(ctx, n, url, e.redisURL, e.plans, e.o)
}

// The admitter's end-to-end runs besides the one replica on one Redis.
const (
	kindReplicas = "admitter x2"      // two replicas on one NATS server and one Redis
	kindCluster  = "admitter cluster" // one replica on a Redis Cluster of 3 masters
)

// freshNATS starts a new JetStream server (an empty store) with admitter's three streams.
func (e *env) freshNATS(ctx context.Context, kind string) (*testenv.NATSServer, error) {
	srv := testenv.StartNATS(e.tb)
	if err := retry(ctx, "the "+kind+" streams on "+srv.URL(), readyWithin, func(ctx context.Context) error {
		nc, js, err := connect(srv.URL(), "bench-setup")
		if err != nil {
			return err
		}
		defer nc.Close()
		return createStreams(ctx, js, kind)
	}); err != nil {
		srv.Stop()
		return nil, err
	}
	return srv, nil
}

// throughput pre-publishes Jobs jobs over Tenants tenants, then measures how fast the forwarder
// of the given kind moves them to ADMITTED: from the moment it starts consuming until the
// output stream stores the last one (the stream's own timestamp of its last message). With
// profile set, the process is CPU-profiled for the duration.
func (e *env) throughput(ctx context.Context, kind, profile string) (Throughput, error) {
	srv, err := e.freshNATS(ctx, kind)
	if err != nil {
		return Throughput{}, err
	}
	defer srv.Stop()
	if err := prepublish(ctx, srv.URL(), e.o.Jobs, e.o.Tenants); err != nil {
		return Throughput{}, err
	}
	nc, js, err := connect(srv.URL(), "bench-watch")
	if err != nil {
		return Throughput{}, err
	}
	defer nc.Close()
	fw, err := e.prepare(ctx, kind, srv.URL())
	if err != nil {
		return Throughput{}, fmt.Errorf("%s: %w", kind, err)
	}
	defer fw.stop()
	runtime.GC()
	stopProfile, err := startCPUProfile(profile)
	if err != nil {
		return Throughput{}, err
	}
	defer stopProfile()
	var before redisState
	if kind == "admitter" {
		if before, err = e.admin.state(ctx); err != nil {
			return Throughput{}, err
		}
	}
	start := time.Now()
	if err := fw.start(); err != nil {
		return Throughput{}, fmt.Errorf("%s: %w", kind, err)
	}
	bound := time.Minute + time.Duration(e.o.Jobs)*time.Millisecond // at least 1000 jobs/s
	last, err := waitForMessages(ctx, js, streamOut, e.o.Jobs, bound, fw.failed)
	if err != nil {
		return Throughput{}, fmt.Errorf("%s: %w", kind, err)
	}
	var cost RedisCost
	if kind == "admitter" {
		after, err := e.admin.state(ctx)
		if err != nil {
			return Throughput{}, err
		}
		jobs, rate := float64(e.o.Jobs), PerSecond(int64(e.o.Jobs), last.Sub(start))
		cost = RedisCost{
			CallsPerJob:      round(float64(after.calls-before.calls-1)/jobs, 3), // less the INFO that read it
			CPUMicrosPerJob:  round(float64(after.cpuMicros-before.cpuMicros)/jobs, 2),
			Keys:             after.keys,
			BytesPerTenant:   round(float64(after.memory-before.memory)/float64(e.o.Tenants), 1),
			BytesPerJobPerS:  round(float64(after.memory-before.memory)/rate, 3),
			KeysPerJobPerSec: round(float64(after.keys)/rate, 4),
		}
	}
	stopProfile()
	// Not timed, but checked: a forwarder that does not acknowledge what it forwarded would be
	// measured unfairly fast.
	if err := waitForEmpty(ctx, js, streamIn, 10*time.Second+time.Duration(e.o.Jobs)*100*time.Microsecond); err != nil {
		return Throughput{}, fmt.Errorf("%s: %w", kind, err)
	}
	d := last.Sub(start)
	return Throughput{Jobs: e.o.Jobs, Seconds: round(d.Seconds(), 4), PerSecond: round(PerSecond(int64(e.o.Jobs), d), 1), redis: cost}, nil
}

// latency publishes at rate jobs/s for LatencyDuration through the forwarder of the given kind,
// each job stamped with its publish time, and measures publish → forwarded message received by
// a core subscriber on jobs.admitted.>. Jobs published in the first fifth of the run (at most
// 1s) warm up and are not counted.
func (e *env) latency(ctx context.Context, kind string, rate float64) (Latency, error) {
	srv, err := e.freshNATS(ctx, kind)
	if err != nil {
		return Latency{}, err
	}
	defer srv.Stop()
	fw, err := e.prepare(ctx, kind, srv.URL())
	if err != nil {
		return Latency{}, fmt.Errorf("%s: %w", kind, err)
	}
	defer fw.stop()
	if err := fw.start(); err != nil {
		return Latency{}, fmt.Errorf("%s: %w", kind, err)
	}
	subNC, _, err := connect(srv.URL(), "bench-downstream")
	if err != nil {
		return Latency{}, err
	}
	defer subNC.Close()
	cut := time.Now().Add(min(time.Second, e.o.LatencyDuration/5))
	col, err := collect(subNC, prefixOut+">", func(m *nats.Msg, now time.Time) (time.Duration, bool) {
		sent, ok := sentAt(m)
		if !ok || sent.Before(cut) {
			return 0, false
		}
		return now.Sub(sent), true
	})
	if err != nil {
		return Latency{}, err
	}
	defer col.stop()
	pub, err := newAsyncPublisher(srv.URL(), "bench-producer")
	if err != nil {
		return Latency{}, err
	}
	defer pub.close()
	subj := make([]string, e.o.Tenants)
	for i := range subj {
		subj[i] = prefixIn + tenantName(i) + ".work"
	}
	runtime.GC()
	if kind == "admitter" {
		// The profile is the bench's whole process at the paced rate: the in-process admitter,
		// nats-server, the producer and the subscriber (Redis runs apart).
		stopProfile, err := startCPUProfile(e.o.LatencyProfile)
		if err != nil {
			return Latency{}, err
		}
		defer stopProfile()
	}
	sent, _, err := pace(ctx, pub, rate, e.o.LatencyDuration, func(i int64) *nats.Msg {
		h := nats.Header{}
		h.Set(headerSent, strconv.FormatInt(time.Now().UnixNano(), 10))
		return &nats.Msg{Subject: subj[int(i%int64(len(subj)))], Data: payload, Header: h}
	})
	if err != nil {
		return Latency{}, err
	}
	if err := pub.complete(ctx); err != nil {
		return Latency{}, err
	}
	// Bounded, but long enough for a forwarder slower than the paced rate to drain its backlog
	// at 1000 jobs/s.
	if err := col.waitCount(ctx, sent, 30*time.Second+time.Duration(sent)*time.Millisecond, fw.failed); err != nil {
		return Latency{}, fmt.Errorf("%s: %w", kind, err)
	}
	return Summarize(col.stop()), nil
}

// endToEnd is scenario 2.
func (e *env) endToEnd(ctx context.Context, p *progress) (*EndToEnd, error) {
	r := &EndToEnd{Tenants: e.o.Tenants}
	var err error
	if err = p.phase(fmt.Sprintf("end to end: relay drains %s jobs", count(float64(e.o.Jobs))), func() (string, error) {
		r.Relay, err = e.throughput(ctx, "relay", "")
		return fmt.Sprintf("%s jobs/s", count(r.Relay.PerSecond)), err
	}); err != nil {
		return nil, err
	}
	if err = p.phase(fmt.Sprintf("end to end: admitter drains %s jobs", count(float64(e.o.Jobs))), func() (string, error) {
		r.Admitter, err = e.throughput(ctx, "admitter", e.o.CPUProfile)
		r.Redis = r.Admitter.redis
		s := fmt.Sprintf("%s jobs/s", count(r.Admitter.PerSecond))
		if e.o.CPUProfile != "" {
			s += ", CPU profile in " + e.o.CPUProfile
		}
		return s, err
	}); err != nil {
		return nil, err
	}
	if err = p.phase(fmt.Sprintf("end to end: relay with Nats-Msg-Id drains %s jobs", count(float64(e.o.Jobs))), func() (string, error) {
		r.RelayMsgID, err = e.throughput(ctx, "relay+msgid", "")
		return fmt.Sprintf("%s jobs/s", count(r.RelayMsgID.PerSecond)), err
	}); err != nil {
		return nil, err
	}
	if err = p.phase(fmt.Sprintf("end to end: 2 admitter replicas drain %s jobs", count(float64(e.o.Jobs))), func() (string, error) {
		r.Replicas, err = e.throughput(ctx, kindReplicas, "")
		return fmt.Sprintf("%s jobs/s", count(r.Replicas.PerSecond)), err
	}); err != nil {
		return nil, err
	}
	if err = p.phase(fmt.Sprintf("end to end: admitter on a Redis Cluster (3 masters) drains %s jobs", count(float64(e.o.Jobs))), func() (string, error) {
		r.Cluster, err = e.throughput(ctx, kindCluster, "")
		return fmt.Sprintf("%s jobs/s", count(r.Cluster.PerSecond)), err
	}); err != nil {
		return nil, err
	}
	r.Ratio = round(Ratio(r.Admitter.PerSecond, r.Relay.PerSecond), 4)
	rate := e.o.LatencyRate
	if rate == 0 {
		rate = max(1, r.Relay.PerSecond/2)
	}
	r.Latency.RatePerSecond = round(rate, 1)
	r.Latency.DurationS = e.o.LatencyDuration.Seconds()
	for _, kind := range []string{"relay", "admitter"} {
		var l Latency
		if err = p.phase(fmt.Sprintf("end to end: latency through %s at %s jobs/s for %v", kind, count(rate), e.o.LatencyDuration), func() (string, error) {
			l, err = e.latency(ctx, kind, rate)
			return fmt.Sprintf("p50 %.2fms p99 %.2fms over %s jobs", l.P50Ms, l.P99Ms, count(float64(l.Samples))), err
		}); err != nil {
			return nil, err
		}
		if kind == "relay" {
			r.Latency.Relay = l
		} else {
			r.Latency.Admitter = l
		}
	}
	if rate > r.Admitter.PerSecond {
		r.Notes = append(r.Notes, fmt.Sprintf("the paced rate (%s/s) is above admitter's measured throughput (%s/s): a backlog builds, and its latency is mostly time queued in JOBS",
			count(rate), count(r.Admitter.PerSecond)))
	}
	r.Latency.AddedP99Ms = round(r.Latency.Admitter.P99Ms-r.Latency.Relay.P99Ms, 3)
	r.Latency.AddedP50Ms = round(r.Latency.Admitter.P50Ms-r.Latency.Relay.P50Ms, 3)
	return r, nil
}

// startCPUProfile starts a CPU profile of the bench process into path, until the returned stop
// is called (stopping twice is safe); with path empty it does nothing.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return sync.OnceFunc(func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}), nil
}
