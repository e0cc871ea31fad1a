package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Replicas is the replicas scenario (issue 30): admitter replicas dividing the input by its
// partitions (ADMITTER_PARTITIONS), against one replica and a relay. Every run has a fresh
// nats-server process of its own (carrying the partitions' mapping), and the admitters are
// processes too, so that each one's CPU and connections are its own. The replicas run first,
// on an empty input, until they share the partitions (each its share); then Jobs jobs over
// Tenants tenants are published at once, as fast as an async publisher goes, and the drain is
// timed from the first publish until the output stream stores the last job. A backlog forms
// (the publisher is faster than any forwarder here): what is measured is how fast the
// replicas that share the partitions go through it, without their start-up (see Backlog).
type Replicas struct {
	Jobs       int `json:"jobs"`
	Tenants    int `json:"tenants"`
	Partitions int `json:"partitions"`
	// Relay is the plain relay draining the same burst (its input one work-queue stream).
	Relay ReplicaRun `json:"relay"`
	// Runs are one replica on one partition (the input as it was before partitions), then 1, 2
	// and 4 replicas on Partitions.
	Runs []ReplicaRun `json:"runs"`
	// Against one replica on Partitions: jobs/s of two and of four replicas; the messages the
	// server delivered per job, and the CPU per job of nats-server and of the admitters, at
	// four replicas (ratios: 1 is flat).
	TwoVsOne             float64 `json:"two_vs_one"`
	FourVsOne            float64 `json:"four_vs_one"`
	MsgsFourVsOne        float64 `json:"server_msgs_per_job_four_vs_one"`
	NATSCPUFourVsOne     float64 `json:"nats_server_cpu_per_job_four_vs_one"`
	AdmitterCPUFourVsOne float64 `json:"admitter_cpu_per_job_four_vs_one"`
}

// ReplicaRun is one forwarder (the relay, or some admitter replicas) draining the burst.
type ReplicaRun struct {
	Name       string `json:"name"`
	Replicas   int    `json:"replicas"` // 0 for the relay
	Partitions int    `json:"partitions"`
	// SharedS is how long after their start the replicas shared the partitions, each its share
	// (their /metrics); Held is how many each held then.
	SharedS float64 `json:"shared_s,omitempty"`
	Held    []int   `json:"partitions_held,omitempty"`
	// PublishS is the first publish → the last PubAck; Throughput's Seconds the first publish
	// → the last job stored in ADMITTED.
	PublishS float64 `json:"publish_s"`
	Throughput
	// VsOne is PerSecond over one replica's on Partitions.
	VsOne float64 `json:"vs_one_replica"`
	// Per job, from the first publish to the last job stored: messages the server delivered to
	// the forwarder's connections (their out_msgs in /connz: the feeds' deliveries, PubAcks,
	// replies, heartbeats, KV watches) and messages those sent the server (in_msgs).
	ServerMsgsPerJob    float64 `json:"server_msgs_per_job"`
	ForwarderMsgsPerJob float64 `json:"forwarder_msgs_per_job"`
	// CPU per job in µs over the same span: nats-server's, and the admitters' processes' (summed;
	// 0 for the relay, which runs in the bench's own process beside the publisher).
	NATSCPUMicrosPerJob     float64 `json:"nats_server_cpu_us_per_job"`
	AdmitterCPUMicrosPerJob float64 `json:"admitter_cpu_us_per_job,omitempty"`
	// RedisCallsPerJob is the commands Redis ran per job (the admitters' limiter calls).
	RedisCallsPerJob float64 `json:"redis_calls_per_job,omitempty"`
	// Idle: CPU the admitters' processes (summed) and nats-server used per second over
	// replicasIdle once the partitions were shared, before the burst: what the replicas cost
	// with nothing to do (heartbeats, leases, listings), in ms per second.
	AdmitterIdleMsPerS float64 `json:"admitter_idle_cpu_ms_per_s,omitempty"`
	NATSIdleMsPerS     float64 `json:"nats_server_idle_cpu_ms_per_s,omitempty"`
}

// replicasWarmUp is the warm-up burst before the measured one of jobs.
func replicasWarmUp(jobs int) int { return max(1, jobs/5) }

// replicasIdle is how long the replicas' idle CPU is measured before the burst.
const replicasIdle = time.Second

// ReplicaFigures fills the ratios of r from its runs: each run's jobs/s over the one replica's
// on r.Partitions, and two and four replicas' figures over it. A ratio whose runs are missing is
// 0.
func (r *Replicas) ReplicaFigures() {
	var one, two, four *ReplicaRun
	for i := range r.Runs {
		run := &r.Runs[i]
		if run.Partitions != r.Partitions {
			continue
		}
		switch run.Replicas {
		case 1:
			one = run
		case 2:
			two = run
		case 4:
			four = run
		}
	}
	r.TwoVsOne, r.FourVsOne, r.MsgsFourVsOne, r.NATSCPUFourVsOne, r.AdmitterCPUFourVsOne = 0, 0, 0, 0, 0
	if one == nil {
		return
	}
	for i := range r.Runs {
		r.Runs[i].VsOne = round(Ratio(r.Runs[i].PerSecond, one.PerSecond), 4)
	}
	r.Relay.VsOne = round(Ratio(r.Relay.PerSecond, one.PerSecond), 4)
	if two != nil {
		r.TwoVsOne = two.VsOne
	}
	if four != nil {
		r.FourVsOne = four.VsOne
		r.MsgsFourVsOne = round(Ratio(four.ServerMsgsPerJob, one.ServerMsgsPerJob), 4)
		r.NATSCPUFourVsOne = round(Ratio(four.NATSCPUMicrosPerJob, one.NATSCPUMicrosPerJob), 4)
		r.AdmitterCPUFourVsOne = round(Ratio(four.AdmitterCPUMicrosPerJob, one.AdmitterCPUMicrosPerJob), 4)
	}
}

// run finds the run of n replicas on p partitions.
func (r *Replicas) run(n, p int) (ReplicaRun, bool) {
	for _, run := range r.Runs {
		if run.Replicas == n && run.Partitions == p {
			return run, true
		}
	}
	return ReplicaRun{}, false
}

// fastPlans lets every job go at once.
const fastPlans = "plans:\n  fast: {limits: [{capacity: 1000000, rate: 1000000/s}]}\ndefault_plan: fast\n"

// replicas runs the replicas scenario: the relay, then admitter replicas.
func (e *env) replicas(ctx context.Context, p *progress) (*Replicas, error) {
	o := e.o
	r := &Replicas{Jobs: o.ReplicasJobs, Tenants: o.ReplicasTenants, Partitions: o.Partitions}
	admitterBin, natsBin, err := e.bins.build()
	if err != nil {
		return nil, err
	}
	what := fmt.Sprintf("%s jobs of %s tenants published at once", count(float64(r.Jobs)), count(float64(r.Tenants)))
	if err := p.phase("replicas: relay drains "+what, func() (string, error) {
		r.Relay, err = e.replicaRun(ctx, natsBin, "", 0, 1)
		return replicaSummary(r.Relay), err
	}); err != nil {
		return nil, err
	}
	for _, c := range []struct{ n, parts int }{{1, 1}, {1, o.Partitions}, {2, o.Partitions}, {4, o.Partitions}} {
		var run ReplicaRun
		if err := p.phase(fmt.Sprintf("replicas: %s drain %s", replicaName(c.n, c.parts), what), func() (string, error) {
			run, err = e.replicaRun(ctx, natsBin, admitterBin, c.n, c.parts)
			return replicaSummary(run), err
		}); err != nil {
			return nil, err
		}
		r.Runs = append(r.Runs, run)
	}
	r.ReplicaFigures()
	return r, nil
}

// replicaName names n admitter replicas on parts partitions.
func replicaName(n, parts int) string {
	s := "1 admitter"
	if n > 1 {
		s = fmt.Sprintf("%d admitter replicas", n)
	}
	return fmt.Sprintf("%s, %d partition%s", s, parts, map[bool]string{true: "s"}[parts > 1])
}

func replicaSummary(r ReplicaRun) string {
	s := fmt.Sprintf("%s jobs/s (published in %.2fs), server msgs/job %.2f, nats-server %.1f µs/job", count(r.PerSecond), r.PublishS, r.ServerMsgsPerJob, r.NATSCPUMicrosPerJob)
	if r.Replicas > 0 {
		s += fmt.Sprintf(", admitters %.1f µs/job, redis %.3f calls/job; shared after %.2fs %v; idle CPU admitters %.0f ms/s, nats-server %.0f ms/s",
			r.AdmitterCPUMicrosPerJob, r.RedisCallsPerJob, r.SharedS, r.Held, r.AdmitterIdleMsPerS, r.NATSIdleMsPerS)
	}
	return s
}

// replicaRun drains the burst with n admitter replicas on parts partitions (n = 0: the relay).
func (e *env) replicaRun(ctx context.Context, natsBin, admitterBin string, n, parts int) (ReplicaRun, error) {
	o := e.o
	kind, run := "relay", ReplicaRun{Name: "relay", Replicas: n, Partitions: parts}
	if n > 0 {
		kind, run.Name = "admitter", replicaName(n, parts)
	}
	srv, err := e.startNATSProcOf(ctx, natsBin, 0, kind, parts)
	if err != nil {
		return run, err
	}
	defer srv.proc.stop()
	nc, js, err := connect(srv.url, "bench-watch")
	if err != nil {
		return run, err
	}
	defer nc.Close()
	var (
		procs  []*admitterProc
		failed <-chan error
		conn   = "bench-relay"
	)
	if n == 0 {
		fw, err := prepareRelay(ctx, srv.url, o.RelayPipelines, false, jetstream.PullMaxMessages(512))
		if err != nil {
			return run, err
		}
		defer fw.stop()
		if err := fw.start(); err != nil {
			return run, err
		}
	} else {
		conn = "admitter"
		if err := e.admin.flush(ctx); err != nil {
			return run, err
		}
		begin := time.Now()
		fail := make(chan error, n)
		failed = fail
		for range n {
			a, err := e.startAdmitterProc(admitterBin, srv.url, fastPlans, append(admitterSettings(o, 0), "ADMITTER_PARTITIONS="+strconv.Itoa(parts))...)
			if err != nil {
				return run, err
			}
			defer a.stop()
			procs = append(procs, a)
			go func() {
				if err, ok := <-a.exited; ok {
					fail <- err
				}
			}()
		}
		if run.Held, err = waitShared(ctx, procs, parts, 30*time.Second); err != nil {
			return run, err
		}
		run.SharedS = round(time.Since(begin).Seconds(), 3)
	}
	pids := make([]int, len(procs))
	for i, a := range procs {
		pids[i] = a.proc.cmd.Process.Pid
	}
	// A first, smaller burst warms the forwarders up (their heaps grown, their connections'
	// buffers sized, every tenant's first job seen), as a replica that has run for a while is.
	warm := replicasWarmUp(o.ReplicasJobs)
	if _, _, err := burst(ctx, srv.url, warm, o.ReplicasTenants); err != nil {
		return run, err
	}
	if _, err := waitForMessages(ctx, js, streamOut, warm, time.Minute+time.Duration(warm)*time.Millisecond, failed); err != nil {
		return run, fmt.Errorf("%s: warming up: %w", run.Name, err)
	}
	if n > 0 {
		idle0, natsIdle0, t0 := sumCPU(pids), cpuTime(srv.proc.cmd.Process.Pid), time.Now()
		select {
		case <-ctx.Done():
			return run, ctx.Err()
		case <-time.After(replicasIdle):
		}
		secs := time.Since(t0).Seconds()
		run.AdmitterIdleMsPerS = round((sumCPU(pids)-idle0)*1e3/secs, 1)
		run.NATSIdleMsPerS = round((cpuTime(srv.proc.cmd.Process.Pid)-natsIdle0)*1e3/secs, 1)
	}
	calls0, err := e.admin.calls(ctx)
	if err != nil {
		return run, err
	}
	msgs0, err := srv.mon.msgsOf(conn)
	if err != nil {
		return run, err
	}
	natsCPU0, admCPU0 := cpuTime(srv.proc.cmd.Process.Pid), sumCPU(pids)
	if o.ReplicasProfile != "" {
		var profiled sync.WaitGroup
		defer profiled.Wait()
		for i, a := range procs {
			profiled.Go(func() {
				path := fmt.Sprintf("%s-%dx%d-%d.pprof", o.ReplicasProfile, n, parts, i)
				if err := cpuProfile(a.http, replicasProfileS(o.ReplicasJobs), path); err != nil {
					e.o.logger().Warn("replicas: CPU profile", "path", path, "err", err)
				}
			})
		}
	}
	begin, publish, err := burst(ctx, srv.url, o.ReplicasJobs, o.ReplicasTenants)
	if err != nil {
		return run, err
	}
	bound := time.Minute + time.Duration(o.ReplicasJobs)*time.Millisecond // at least 1000 jobs/s
	last, err := waitForMessages(ctx, js, streamOut, warm+o.ReplicasJobs, bound, failed)
	if err != nil {
		return run, fmt.Errorf("%s: %w", run.Name, err)
	}
	natsCPU, admCPU := cpuTime(srv.proc.cmd.Process.Pid)-natsCPU0, sumCPU(pids)-admCPU0
	msgs1, err := srv.mon.msgsOf(conn)
	if err != nil {
		return run, err
	}
	calls1, err := e.admin.calls(ctx)
	if err != nil {
		return run, err
	}
	jobs := float64(o.ReplicasJobs)
	d := last.Sub(begin)
	run.PublishS = round(publish.Seconds(), 3)
	run.Throughput = Throughput{Jobs: o.ReplicasJobs, Seconds: round(d.Seconds(), 4), PerSecond: round(PerSecond(int64(o.ReplicasJobs), d), 1)}
	run.ServerMsgsPerJob = round(float64(msgs1.out-msgs0.out)/jobs, 3)
	run.ForwarderMsgsPerJob = round(float64(msgs1.in-msgs0.in)/jobs, 3)
	run.NATSCPUMicrosPerJob = round(natsCPU*1e6/jobs, 2)
	if n > 0 {
		run.AdmitterCPUMicrosPerJob = round(admCPU*1e6/jobs, 2)
		run.RedisCallsPerJob = round(float64(calls1-calls0-1)/jobs, 3) // less the INFO that read it
	}
	return run, nil
}

// replicasProfileS is how long the replicas' CPU profiles last from the burst's start: about
// its drain at 20,000 jobs/s, at least 2 s.
func replicasProfileS(jobs int) int { return max(2, (jobs+19_999)/20_000) }

// cpuProfile writes a CPU profile of seconds of the admitter serving HTTP on addr to path.
func cpuProfile(addr string, seconds int, path string) error {
	c := http.Client{Timeout: time.Duration(seconds+10) * time.Second}
	resp, err := c.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, seconds))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errors.New(resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// burst publishes n jobs over tenants tenants (round robin) as fast as an async publisher goes,
// and returns when the first was sent and how long until the last PubAck.
func burst(ctx context.Context, url string, n, tenants int) (time.Time, time.Duration, error) {
	subj := make([]string, tenants)
	for i := range subj {
		subj[i] = prefixIn + tenantName(i) + ".work"
	}
	pub, err := newAsyncPublisher(url, "bench-producer")
	if err != nil {
		return time.Time{}, 0, err
	}
	defer pub.close()
	begin := time.Now()
	for i := range n {
		if err := ctx.Err(); err != nil {
			return begin, 0, err
		}
		if err := pub.publish(&nats.Msg{Subject: subj[i%tenants], Data: payload}); err != nil {
			return begin, 0, err
		}
	}
	if err := pub.complete(ctx); err != nil {
		return begin, 0, err
	}
	return begin, time.Since(begin), nil
}

// sumCPU is the CPU seconds the processes used (cpuTime).
func sumCPU(pids []int) float64 {
	s := 0.0
	for _, pid := range pids {
		s += cpuTime(pid)
	}
	return s
}

// connMsgs is what the server counted of some connections: messages it delivered to them (out)
// and messages they sent it (in).
type connMsgs struct{ in, out int64 }

// msgsOf sums the messages of the open connections named name.
func (m monitor) msgsOf(name string) (connMsgs, error) {
	var connz struct {
		Connections []struct {
			Name    string `json:"name"`
			InMsgs  int64  `json:"in_msgs"`
			OutMsgs int64  `json:"out_msgs"`
		} `json:"connections"`
	}
	if err := m.get("/connz?limit=4096", &connz); err != nil {
		return connMsgs{}, err
	}
	var c connMsgs
	for _, conn := range connz.Connections {
		if conn.Name == name {
			c.in += conn.InMsgs
			c.out += conn.OutMsgs
		}
	}
	return c, nil
}

// waitShared waits until the admitters hold every one of parts partitions between them, each
// its share (at most ⌈parts/n⌉, and every one at least one when there are enough), as their
// /metrics say; it returns how many each holds.
func waitShared(ctx context.Context, procs []*admitterProc, parts int, within time.Duration) ([]int, error) {
	deadline := time.Now().Add(within)
	for _, a := range procs {
		if err := a.waitReady(ctx, within); err != nil {
			return nil, err
		}
	}
	for {
		held, ok, err := shared(procs, parts)
		if ok {
			return held, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the %d admitters did not share the %d partitions within %v: they hold %v (%v)", len(procs), parts, within, held, err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// shared reads how many partitions each admitter holds (their /metrics), and whether they hold
// the parts partitions between them, each its share (at most ⌈parts/n⌉, and at least one when
// there are enough). An admitter that does not answer holds none, and err says why.
func shared(procs []*admitterProc, parts int) (held []int, ok bool, err error) {
	share := int(math.Ceil(float64(parts) / float64(len(procs))))
	held = make([]int, len(procs))
	sum := 0
	ok = true
	for i, a := range procs {
		v, e := metricOf(a.http, wire.MetricPartitions.Prom)
		if e != nil {
			err, ok = e, false
			continue
		}
		held[i] = int(v)
		sum += held[i]
		ok = ok && held[i] <= share && (held[i] >= 1 || parts < len(procs))
	}
	return held, ok && sum == parts, err
}

// metricOf reads a gauge from an admitter's /metrics (the sum over its labels).
func metricOf(addr, name string) (float64, error) {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return 0, err
	}
	return metricValue(string(body), name)
}

// metricValue sums the samples of a metric in a Prometheus text exposition; an error if there
// is none.
func metricValue(body, name string) (float64, error) {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `(\{[^}]*\})? ([0-9.e+-]+)$`)
	ms := re.FindAllStringSubmatch(body, -1)
	if len(ms) == 0 {
		return 0, errors.New("no metric " + name)
	}
	sum := 0.0
	for _, m := range ms {
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			return 0, fmt.Errorf("metric %s: %w", strings.TrimSpace(m[0]), err)
		}
		sum += v
	}
	return sum, nil
}

// cpuTime is the CPU time a process's threads have run, in seconds, to the nanosecond: the sum
// of their /proc schedstat (cpuSeconds counts in ticks of 10 ms, too coarse for the
// microseconds per job of a drain of a second summed over four processes). It falls back on
// cpuSeconds when the threads cannot be read. A thread that ends takes its time with it: the
// admitters and nats-server keep theirs.
func cpuTime(pid int) float64 {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil || len(tasks) == 0 {
		return cpuSeconds(pid)
	}
	var ns int64
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/schedstat")
		if err != nil {
			continue // ended meanwhile
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return cpuSeconds(pid)
		}
		ns += v
	}
	return float64(ns) / 1e9
}
