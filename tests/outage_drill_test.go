//go:build drill

package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/admitter/admitter/subjects"
	"github.com/admitter/admitter/wire"
	"github.com/admitter/admitter/worker"
)

// The Redis outage drills (issue 38): Redis killed again and again under a pool whose workers
// report, and a replica cut off from Redis while its peer still reaches it.

// outageDrillPlans: a pool of 6 and four tenants with concurrency limits of 3 (leases 3 s) and
// buckets faster than their workers: the pool and the limits bind, and every job's done message
// is a lease call on the pool, during the outages too.
const outageDrillPlans = `
pools:
  workers: {concurrency: 6, lease: 3s}
plans:
  three: {pool: workers, limits: [{name: burst, capacity: 20, rate: 50/s}, {name: running, kind: concurrency, limit: 3, lease: 3s}]}
default_plan: three
`

// Each of the drill's outages: jobs published before it and during it, how long Redis is away.
// Jobs of 100 ms: the pool's 6 slots turn over 60 times a second, each a done message.
const (
	outages        = 10
	outageTenants  = 4
	outageConc     = 3
	outageJobs     = 8 // per tenant, before the kill and again during the outage
	outageJob      = 100 * time.Millisecond
	outagePool     = 6
	outageDown     = 1500 * time.Millisecond
	outageLease    = 3 * time.Second  // the plans' and the pool's
	outageDeciding = 2 * time.Second  // POST /v1/decide answers within it
	outageDrained  = 20 * time.Second // every job published runs within it after Redis returns
)

func TestRedisOutageDrill(t *testing.T) {
	t.Parallel()
	repeatDrill(t, redisOutageDrill)
}

// redisOutageDrill: two replicas over two partitions, Redis (append-only file) killed ten
// times, every other time with its data deleted, while jobs of the pool's tenants (two in each
// partition) run at the worker (100 ms each, done messages reported during the outages too) and
// a service asks each replica POST /v1/decide for every tenant, each every 100 ms (a tenant of
// the other replica's partition is routed to it during an outage). The replicas never stop
// deciding: each answer within 2 s, every job published before a return runs within 20 s of it;
// no slot is held by a job nobody runs for more than a lease (watchIdleSlots) while jobs wait;
// never more running than a limit or the pool. A replica that stops deciding is dumped (its
// goroutines) into the failure.
func redisOutageDrill(t *testing.T) {
	const parts = 2
	w := newDrillWorld(t, outageDrillPlans, parts)
	replicas := []*drillReplica{w.startReplica("r1"), w.startReplica("r2")}
	w.waitShared(replicas[0].metrics, replicas[1].metrics)
	var tenants []string
	for k, per := 0, map[int]int{}; len(tenants) < outageTenants; k++ {
		tn := fmt.Sprintf("out%02d", k)
		if p := subjects.Partition(tn, parts); per[p] < outageTenants/parts {
			per[p]++
			tenants = append(tenants, tn)
		}
	}
	run := newRunning(func(*worker.Job) time.Duration { return outageJob })
	run.over = func(_ string, n, all int) bool { return n > outageConc || all > outagePool }
	workerLog := w.startDrillWorker("outage-drill", 32, run.handle)
	var probers []*prober
	for _, r := range replicas {
		for _, tn := range tenants {
			pr := startProber(r.api, tn)
			defer pr.stop()
			probers = append(probers, pr)
		}
	}
	slowest := func() (longest time.Duration, at time.Time, asked int) {
		for _, pr := range probers {
			l, a, n := pr.figures()
			if l > longest {
				longest, at = l, a
			}
			asked += n
		}
		return longest, at, asked
	}
	dumps := func() (all, locks string) {
		for _, r := range replicas {
			d := r.goroutines()
			all += fmt.Sprintf("replica %s:\n%s\n", r.name, d)
			locks += fmt.Sprintf("replica %s:\n%s\n", r.name, lockWaits(d))
		}
		return all, locks
	}

	var pubMu sync.Mutex
	published := map[string]string{} // payload → tenant
	publish := func(round int, phase string) {
		for _, tn := range tenants {
			prefix := fmt.Sprintf("%s-%02d-%s", tn, round, phase)
			w.publishMany("jobs.submit."+tn+".work", prefix, outageJobs, 0)
			pubMu.Lock()
			for i := range outageJobs {
				published[fmt.Sprintf("%s-%d", prefix, i)] = tn
			}
			pubMu.Unlock()
		}
	}
	notRun := func() []string {
		runs, _, _ := run.runCounts()
		pubMu.Lock()
		defer pubMu.Unlock()
		var out []string
		for p := range published {
			if runs[p] == 0 {
				out = append(out, p)
			}
		}
		return out
	}
	// Slots held by nobody longer than a lease, while Redis answers (after each return): after
	// a loss Redis holds the slots of the jobs running then until they report, 60 % of a lease
	// at most (README, Faults); an outage's leases are charged back when it returns.
	conc := map[string]int{}
	for _, tn := range tenants {
		conc[tn] = outageConc
	}
	waiting := func(runs map[string]int) map[string]bool {
		out := map[string]bool{}
		pubMu.Lock()
		defer pubMu.Unlock()
		for p, tn := range published {
			if runs[p] == 0 {
				out[tn], out["pool"] = true, true
			}
		}
		return out
	}
	var away atomic.Bool // Redis is away: the limiter is not asked
	idle := watchIdleSlots(replicas, run, conc, waiting, outageLease, away.Load)
	type outage struct {
		killed, back time.Time
		what         string
	}
	var history []outage
	// outageAt says where at falls among the outages: during one, or how long after which.
	outageAt := func(at time.Time) string {
		where := "before the first outage"
		for i, o := range history {
			switch {
			case at.Before(o.killed):
				return where
			case at.Before(o.back):
				where = fmt.Sprintf("during outage %d (Redis %s)", i+1, o.what)
			default:
				where = fmt.Sprintf("%.1fs after outage %d (Redis %s) ended", at.Sub(o.back).Seconds(), i+1, o.what)
			}
		}
		return where
	}
	start := time.Now()
	for i := range outages {
		forget := i%2 == 0
		publish(i, "before")
		time.Sleep(500 * time.Millisecond) // jobs running, done messages under way
		away.Store(true)
		w.redis.Kill()
		killed := time.Now()
		if forget {
			if err := w.redis.Forget(); err != nil {
				t.Fatal(err)
			}
		}
		publish(i, "during")
		time.Sleep(time.Until(killed.Add(outageDown)))
		if err := w.redis.Start(); err != nil {
			t.Fatal(err)
		}
		back := time.Now()
		away.Store(false)
		what := "killed"
		if forget {
			what = "killed with its data deleted"
		}
		history = append(history, outage{killed: killed, back: back, what: what})
		if !poll(outageDrained, func() bool { return len(notRun()) == 0 }) {
			left := notRun()
			slices.Sort(left)
			all, locks := dumps()
			longest, at, _ := slowest()
			t.Logf("the replicas' goroutines:\n%s", all)
			t.Logf("the worker's log:\n%s", workerLog.String())
			var states []string
			for _, tn := range tenants {
				states = append(states, replicas[0].stateOf(tn))
			}
			t.Fatalf("outage %d (Redis %s): %d of %d jobs published not run %v after Redis came back: %s\n%s\nthe longest POST /v1/decide took %v (asked at +%.1fs); goroutines waiting on a lock:\n%s",
				i+1, what, len(left), len(published), outageDrained, w.whereAre(left[:min(len(left), 5)], start), strings.Join(states, "\n"),
				longest.Round(time.Millisecond), at.Sub(start).Seconds(), locks)
		}
		t.Logf("outage %d: Redis %s at +%.1fs, back at +%.1fs; every job run %.1fs later", i+1, what, killed.Sub(start).Seconds(),
			back.Sub(start).Seconds(), time.Since(back).Seconds())
	}
	for _, pr := range probers {
		pr.stop()
	}
	spans := idle.stop()
	longest, at, asked := slowest()
	most, all, _ := run.snapshot()
	runs, _, _ := run.runCounts()
	twice := 0
	for p := range published {
		if runs[p] > 1 {
			twice++
		}
	}
	var longestIdle time.Duration
	for _, s := range spans {
		longestIdle = max(longestIdle, s.to.Sub(s.from))
	}
	t.Logf("%d outages (half with Redis's data deleted): %d jobs, all run (%d more than once); POST /v1/decide asked %d times, the longest answer %v (asked at +%.1fs); most running at once %v (limit %d each), the pool %d of %d; slots held by nobody past a lease %d times (the longest %.1fs)",
		outages, len(published), twice, asked, longest.Round(time.Millisecond), at.Sub(start).Seconds(), most, outageConc, all, outagePool, len(spans), longestIdle.Seconds())
	if longest > outageDeciding {
		_, locks := dumps()
		t.Errorf("POST /v1/decide took %v (asked at +%.1fs), want every answer within %v; goroutines waiting on a lock now:\n%s", longest.Round(time.Millisecond), at.Sub(start).Seconds(), outageDeciding, locks)
	}
	for tn, n := range most {
		if n > outageConc {
			t.Errorf("tenant %s: %d jobs ran at once at the worker, its limit is %d", tn, n, outageConc)
		}
	}
	if all > outagePool {
		t.Errorf("%d jobs ran at once at the worker, the pool allows %d", all, outagePool)
	}
	if len(spans) > 0 {
		var lines []string
		for _, s := range spans[:min(len(spans), 8)] {
			lines = append(lines, fmt.Sprintf("%s: %d in flight at the limiter while the worker ran %d, +%.1fs to +%.1fs (%.1fs; %s)",
				s.key, s.inFlight, s.running, s.from.Sub(start).Seconds(), s.to.Sub(start).Seconds(), s.to.Sub(s.from).Seconds(), outageAt(s.from)))
		}
		t.Errorf("%d times slots were held by jobs nobody ran for more than a lease (%v) while jobs waited:\n  %s", len(spans), outageLease, strings.Join(lines, "\n  "))
	}
	for _, o := range run.overs {
		t.Logf("over a limit at the worker %s", o)
	}
}

// goroutines is the replica's goroutine dump: from /debug/pprof when it answers within 5 s,
// else from SIGQUIT (the Go runtime prints every goroutine and the process exits).
func (r *drillReplica) goroutines() string {
	c := http.Client{Timeout: 5 * time.Second}
	if resp, err := c.Get(r.http + "/debug/pprof/goroutine?debug=2"); err == nil {
		defer resp.Body.Close()
		if b, err := io.ReadAll(resp.Body); err == nil && resp.StatusCode == http.StatusOK {
			return string(b)
		}
	}
	before := len(r.proc.logs.String())
	_ = r.proc.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-r.proc.done:
	case <-time.After(10 * time.Second):
	}
	return "(from SIGQUIT: /debug/pprof did not answer)\n" + r.proc.logs.String()[before:]
}

// lockWaits is the goroutines of dump waiting for a mutex (their whole stacks), or a line
// saying there are none.
func lockWaits(dump string) string {
	var out []string
	for _, g := range strings.Split(dump, "\n\n") {
		head, _, _ := strings.Cut(g, "\n")
		if strings.Contains(head, "[sync.RWMutex") || strings.Contains(head, "[sync.Mutex") {
			out = append(out, g)
		}
	}
	if len(out) == 0 {
		return "(none)"
	}
	return strings.Join(out, "\n\n")
}

// prober asks a replica's POST /v1/decide for a tenant every 100 ms until stop: the longest an
// answer took (a request unanswered within 10 s counts 10 s) and when it was asked, and when each
// allowed answer came.
type prober struct {
	quit, done chan struct{}
	once       sync.Once

	mu      sync.Mutex
	longest time.Duration
	at      time.Time
	asked   int
	allowed []time.Time
}

// probeTimeout bounds each of the prober's requests.
const probeTimeout = 10 * time.Second

func startProber(api, tenant string) *prober {
	p := &prober{quit: make(chan struct{}), done: make(chan struct{})}
	client := http.Client{Timeout: probeTimeout}
	body := fmt.Sprintf(`{"tenant":%q}`, tenant)
	go func() {
		defer close(p.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-p.quit:
				return
			case <-tick.C:
			}
			asked := time.Now()
			var d wire.Decision
			resp, err := client.Post(api+"/v1/decide", "application/json", bytes.NewBufferString(body))
			if err == nil {
				err = json.NewDecoder(resp.Body).Decode(&d)
				resp.Body.Close()
			}
			took := time.Since(asked)
			p.mu.Lock()
			p.asked++
			if took > p.longest {
				p.longest, p.at = took, asked
			}
			if err == nil && d.Allowed {
				p.allowed = append(p.allowed, time.Now())
			}
			p.mu.Unlock()
		}
	}()
	return p
}

// stop ends the probing and waits for the request under way (bounded by probeTimeout). Safe to
// call twice.
func (p *prober) stop() {
	p.once.Do(func() { close(p.quit) })
	<-p.done
}

// figures is the longest answer, when it was asked, and how many requests were asked.
func (p *prober) figures() (longest time.Duration, at time.Time, asked int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.longest, p.at, p.asked
}

// allowedAt is when each allowed answer came.
func (p *prober) allowedAt() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Time(nil), p.allowed...)
}

func TestPartialOutageScene(t *testing.T) {
	t.Parallel()
	repeatDrill(t, partialOutageScene)
}

// partialOutageScene (issue 38 item 2): two replicas; one reaches Redis through a TCP proxy,
// which is cut. Tenant s, on a bucket of 10 refilling 1/s, has its jobs queued on the cut
// replica (it holds the input) while a service asks the other replica for synchronous
// decisions of s every 100 ms. In the 10 s from the cut, the forwards and the decisions allowed
// together stay within C + r·t = 20: what one replica decides on its copy, the other must not
// decide again on Redis.
func partialOutageScene(t *testing.T) {
	const capacity, rate, span = 10, 1.0, 10 * time.Second
	w := newDrillWorld(t, "plans: {s: {limits: [{capacity: 10, rate: 1/s}]}}\ntenants: {s: s}\n", 1)
	proxy := startProxy(t, w.redis.Addr)
	cut := w.startReplica("cut", "ADMITTER_REDIS_URL=redis://"+proxy.addr)
	waitFor(t, 10*time.Second, "the replica behind the proxy to hold the input", func() bool { return cut.partitions(t) == 1 })
	peer := w.startReplica("peer")
	// The cut replica decides one job of s on Redis (its copy knows s), and the bucket refills.
	w.publish("jobs.submit.s.work", "s-before")
	w.read("ADMITTED", 1, 10*time.Second)
	time.Sleep(1500 * time.Millisecond)

	proxy.cut()
	from := time.Now()
	pr := startProber(peer.api, "s")
	for i := range 30 {
		w.publish("jobs.submit.s.work", fmt.Sprintf("s-%02d", i))
	}
	time.Sleep(time.Until(from.Add(span)))
	pr.stop()
	to := time.Now()
	allowed := pr.allowedAt()
	var forwards, grants []time.Time
	for _, j := range w.readAll("ADMITTED") {
		grants = append(grants, j.stored)
		if !j.stored.Before(from) && !j.stored.After(to) {
			forwards = append(forwards, j.stored)
		}
	}
	decided := countBetween(allowed, from, to)
	grants = append(grants, allowed...)
	bound := capacity + rate*to.Sub(from).Seconds()
	excess, wfrom, wto := worstWindow(grants, capacity, rate)
	_, _, asked := pr.figures()
	t.Logf("in the %.1fs from the cut: %d forwards (decided by the cut replica) + %d of %d decisions allowed (by its peer) = %d, C + r·t = %.0f; worst interval %+.1f over C + r·t, [+%.1fs, +%.1fs] from the cut",
		to.Sub(from).Seconds(), len(forwards), decided, asked, len(forwards)+decided, bound, excess, wfrom.Sub(from).Seconds(), wto.Sub(from).Seconds())
	if float64(len(forwards)+decided) > bound {
		t.Errorf("tenant s got %d forwards (the cut replica, on its copy) + %d decisions allowed (its peer, on Redis) = %d in the %.1fs from the cut; its plan allows C + r·t = %.0f",
			len(forwards), decided, len(forwards)+decided, to.Sub(from).Seconds(), bound)
	}
}

// tcpProxy relays TCP connections from a loopback port to a target until cut: then it closes
// every connection it relays, and each new one at once (the process behind it finds the target
// unreachable; others still reach it). Its goroutines end when the test does.
type tcpProxy struct {
	addr, target string
	ln           net.Listener
	wg           sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]bool
	isCut bool
}

func startProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]bool{}}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		_ = ln.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

// accept relays each connection until the listener is closed.
func (p *tcpProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		if p.isCut {
			p.mu.Unlock()
			_ = c.Close()
			_ = up.Close()
			continue
		}
		p.conns[c], p.conns[up] = true, true
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			_, _ = io.Copy(dst, src)
			_ = dst.Close()
			_ = src.Close()
		}
		p.wg.Go(func() { pipe(up, c) })
		p.wg.Go(func() { pipe(c, up) })
	}
}

// cut closes every connection relayed and refuses the next ones. Safe to call twice.
func (p *tcpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.isCut = true
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

// whereAre says of each job (by payload) where it is: forwarded (stored in the output, when,
// with which lease), dead-lettered, or neither; and what its tenant's limits and pool hold now.
func (w *world) whereAre(payloads []string, start time.Time) string {
	stored := map[string][]job{}
	for _, j := range w.readAll("ADMITTED") {
		stored[j.payload] = append(stored[j.payload], j)
	}
	dead := map[string]bool{}
	for _, j := range w.readAll("DEAD") {
		dead[j.payload] = true
	}
	var out []string
	for _, p := range payloads {
		s := p + ": "
		switch {
		case len(stored[p]) > 0:
			for _, j := range stored[p] {
				s += fmt.Sprintf("forwarded at +%.1fs (lease %s, %s=%q) ", j.stored.Sub(start).Seconds(), j.header.Get(wire.HeaderLease),
					wire.HeaderDegraded, j.header.Get(wire.HeaderDegraded))
			}
		case dead[p]:
			s += "dead-lettered"
		default:
			s += "not forwarded"
		}
		out = append(out, s)
	}
	return strings.Join(out, "; ")
}
