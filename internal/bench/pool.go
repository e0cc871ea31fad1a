package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/admitter/admitter/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Pool is the pool scenario: capacity downstream shared by many tenants by their shares. A pool
// of Concurrency workers (a lease of LeaseS) is named by every plan; Tenants contending tenants,
// spread in turn over plans of the shares in Shares (tenant i has Shares[i mod len]), each have
// a backlog of JobsPerShare × their share, published tenant by tenant before the admitter starts,
// on plans far faster than the pool. The workers are the worker library over a durable consumer
// of ADMITTED, with room for WorkerConcurrency handlers (more than the pool: the pool, not the
// workers, is what binds), each job taking JobMs; the library sends the done messages. Beside
// them QuietTenants tenants publish QuietRate jobs a second each, on a plan of share 1. The
// admitter and nats-server run as processes of their own; the workers run in the bench.
//
// The window is from when every contending tenant has had a forward until the first of them
// has had its last: all along, every one of them has jobs waiting. Served by their shares, each
// tenant's forwards in the window over its share are equal, and with backlogs proportional to
// the shares every tenant would run out at about the same time.
type Pool struct {
	Tenants           int     `json:"tenants"`
	Shares            []int64 `json:"shares"`
	JobsPerShare      int     `json:"jobs_per_share"`
	Concurrency       int     `json:"concurrency"`
	LeaseS            float64 `json:"lease_s"`
	JobMs             float64 `json:"job_ms"`
	WorkerConcurrency int     `json:"worker_concurrency"`
	QuietTenants      int     `json:"quiet_tenants"`
	QuietRate         float64 `json:"quiet_rate_per_tenant"`
	// Backlog is every contending tenant's jobs together; PublishS how long storing them took.
	Backlog  int     `json:"backlog"`
	PublishS float64 `json:"publish_s"`
	// Start-up: every contending tenant had had a forward once AllServed of them were received
	// (0: never, some tenant ran out first), AllServedS after the admitter's start.
	AllServed  int     `json:"all_served_after"`
	AllServedS float64 `json:"all_served_s"`
	// RanOutEarly is how many contending tenants received their whole backlog before every one
	// had been served (the first queues found have the pool to themselves): they are left out
	// of the window's figures.
	RanOutEarly int `json:"ran_out_early"`
	// The window: the contending tenants' forwards from the WindowFrom-th to before the
	// WindowTo-th (counting from 0), over WindowS seconds; PerSecond is their throughput, and
	// CeilingPerSecond the pool's (Concurrency jobs every JobMs).
	WindowFrom       int     `json:"window_from"`
	WindowTo         int     `json:"window_to"`
	WindowS          float64 `json:"window_s"`
	PerSecond        float64 `json:"window_per_second"`
	CeilingPerSecond float64 `json:"ceiling_per_second"`
	// Jain is Jain's fairness index of every contending tenant's forwards in the window over its
	// share, (Σx)²/(n·Σx²): 1 when each tenant received in proportion to its share. MinRatio and
	// MaxRatio are the least and the most received/share, over their mean.
	Jain     float64 `json:"jain_index"`
	MinRatio float64 `json:"min_vs_mean"`
	MaxRatio float64 `json:"max_vs_mean"`
	// ByShare is each share's tenants: their mean forwards in the window, and their mean
	// received/share over that of every tenant (1 when the shares are kept).
	ByShare []PoolShare `json:"by_share"`
	// Lowest and Highest are the tenants with the least and the most received/share.
	Lowest  []TenantShare `json:"lowest"`
	Highest []TenantShare `json:"highest"`
	// Utilisation is the handlers' busy time in the window over Concurrency × the window;
	// MostInFlight the most handlers that ever ran at once (the pool's slots are held from
	// before a job's handler starts until after it returns: at most Concurrency).
	Utilisation  float64 `json:"utilisation"`
	MostInFlight int     `json:"most_in_flight"`
	Handled      int64   `json:"handled"`
	// Quiet is publish → forward of the quiet tenants' jobs published in the window; a job not
	// forwarded by the end counts with its wait so far (QuietMissing of them).
	Quiet        Latency `json:"quiet"`
	QuietMissing int     `json:"quiet_missing"`
	// RedisCallsPerJob is the commands Redis ran for the admitter (EVALSHA, FCALL, EVAL, INFO,
	// PING) per job forwarded (contending and quiet), between samples taken in the window.
	RedisCallsPerJob float64 `json:"redis_calls_per_job"`
	// CPU seconds the two processes used from the admitter's start to the end of the window.
	AdmitterCPUS float64 `json:"admitter_cpu_s"`
	NATSCPUS     float64 `json:"nats_server_cpu_s"`
}

// PoolShare is the pool scenario's figures of one share.
type PoolShare struct {
	Share        int64   `json:"share"`
	Tenants      int     `json:"tenants"`
	MeanReceived float64 `json:"mean_received"`
	// PerShareVsMean is the mean of these tenants' received/share over that of every tenant.
	PerShareVsMean float64 `json:"per_share_vs_mean"`
}

// TenantShare is one contending tenant's forwards in the pool scenario's window.
type TenantShare struct {
	Tenant   string `json:"tenant"`
	Share    int64  `json:"share"`
	Received int64  `json:"received"`
}

// The pool scenario's fixed settings: the shares the contending tenants are spread over, the
// pool's lease, the quiet tenants' rate (a share of 1 among the default 1,000 tenants' 2,333 and
// the quiet ones' is about 1.3 jobs/s of a pool of 64 × 20 ms: a quiet tenant at 0.25/s is well
// under it, as the quiet tenant is), how long a quiet job may still come once the window
// ends, and how often Redis's command counts are read.
var poolShares = []int64{1, 2, 4}

const (
	poolLease      = 30 * time.Second
	poolQuietRate  = 0.25
	poolQuietGrace = 10 * time.Second
	poolSampleTick = 250 * time.Millisecond
)

// poolForward is one forward the subscriber received: of contending tenant tenant (an index),
// or, tenant −1, the quiet job seq, published at sent.
type poolForward struct {
	tenant int32
	seq    int32
	at     time.Time
	sent   time.Time
}

// callSample is Redis's count of the admitter's commands (redisCalls) at a time.
type callSample struct {
	at    time.Time
	calls int64
}

// poolRun is what a run of the pool scenario saw, for PoolFigures.
type poolRun struct {
	names  []string
	shares []int64 // per tenant
	jobs   []int   // per tenant: its backlog
	// forwards in the order received, contending and quiet; spans every handler's start and end.
	forwards []poolForward
	spans    [][2]time.Time
	// quietSent is when each quiet job was published (by seq); quietEnd when the wait for them
	// ended.
	quietSent []time.Time
	quietEnd  time.Time
	calls     []callSample
	pool      int
}

// poolExtremes is how many of the lowest and of the highest tenants Pool lists.
const poolExtremes = 5

// PoolFigures computes the pool scenario's figures (the fields a run measures, not its
// settings) from what a run saw.
func PoolFigures(r poolRun) Pool {
	var f Pool
	n := len(r.names)
	var contending []poolForward
	for _, fw := range r.forwards {
		if fw.tenant >= 0 {
			contending = append(contending, fw)
		}
	}
	if n == 0 || len(contending) == 0 {
		return f
	}
	seen, last := make([]int, n), make([]int, n) // last: the index of a tenant's last job (-1: not received)
	from, to, served := 0, len(contending), 0
	for i := range last {
		last[i] = -1
	}
	for i, fw := range contending {
		seen[fw.tenant]++
		if seen[fw.tenant] == 1 {
			if served++; served == n {
				f.AllServed = i + 1
				from = i + 1
			}
		}
		if seen[fw.tenant] == r.jobs[fw.tenant] {
			last[fw.tenant] = i
		}
	}
	// A tenant whose whole backlog went before every tenant had been served (the first queues
	// found at the start have the pool to themselves) does not contend in the window: it is left
	// out. The window ends at the first of the others to run out.
	in := make([]int, 0, n)
	for i := range n {
		if last[i] >= 0 && last[i] < from {
			f.RanOutEarly++
			continue
		}
		in = append(in, i)
		if last[i] >= 0 {
			to = min(to, last[i])
		}
	}
	if len(in) == 0 {
		return f
	}
	f.WindowFrom, f.WindowTo = from, to
	// The window in time: from the forward that made every tenant served (or the first) to the
	// forward of the first tenant's last job (or the last received).
	begin := contending[max(from-1, 0)].at
	end := contending[min(to, len(contending)-1)].at
	d := end.Sub(begin)
	f.WindowS = round(d.Seconds(), 3)
	f.PerSecond = round(PerSecond(int64(to-from), d), 1)

	counts := make([]int64, n)
	for _, fw := range contending[from:to] {
		counts[fw.tenant]++
	}
	x := make([]float64, n)
	var sum, squares float64
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, i := range in {
		x[i] = float64(counts[i]) / float64(r.shares[i])
		sum += x[i]
		squares += x[i] * x[i]
		lo, hi = min(lo, x[i]), max(hi, x[i])
	}
	m := sum / float64(len(in))
	if squares > 0 {
		f.Jain = round(sum*sum/(float64(len(in))*squares), 4)
	}
	f.MinRatio = round(Ratio(lo, m), 3)
	f.MaxRatio = round(Ratio(hi, m), 3)
	for _, s := range distinct(r.shares) {
		var k int
		var received, per float64
		for _, i := range in {
			if r.shares[i] == s {
				k++
				received += float64(counts[i])
				per += x[i]
			}
		}
		if k == 0 {
			continue
		}
		f.ByShare = append(f.ByShare, PoolShare{Share: s, Tenants: k, MeanReceived: round(received/float64(k), 2),
			PerShareVsMean: round(Ratio(per/float64(k), m), 3)})
	}
	order := slices.Clone(in)
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case x[a] < x[b]:
			return -1
		case x[a] > x[b]:
			return 1
		}
		return 0
	})
	k := min(poolExtremes, len(order))
	ts := func(i int) TenantShare {
		return TenantShare{Tenant: r.names[i], Share: r.shares[i], Received: counts[i]}
	}
	for _, i := range order[:k] {
		f.Lowest = append(f.Lowest, ts(i))
	}
	for _, i := range slices.Backward(order[len(order)-k:]) {
		f.Highest = append(f.Highest, ts(i))
	}

	// The handlers' busy time within the window.
	if d > 0 && r.pool > 0 {
		var busy time.Duration
		for _, s := range r.spans {
			a, b := maxTime(s[0], begin), minTime(s[1], end)
			if b.After(a) {
				busy += b.Sub(a)
			}
		}
		f.Utilisation = round(float64(busy)/(float64(r.pool)*float64(d)), 4)
	}

	// The quiet tenants' jobs published in the window, forwarded or not.
	got := make(map[int32]time.Time, len(r.quietSent))
	for _, fw := range r.forwards {
		if fw.tenant < 0 {
			if _, dup := got[fw.seq]; !dup {
				got[fw.seq] = fw.at
			}
		}
	}
	var delays []time.Duration
	for seq, sent := range r.quietSent {
		if sent.Before(begin) || sent.After(end) {
			continue
		}
		at, ok := got[int32(seq)]
		if !ok {
			f.QuietMissing++
			at = r.quietEnd
		}
		delays = append(delays, at.Sub(sent))
	}
	f.Quiet = Summarize(delays)

	// Redis: the commands between the first and the last sample in the window, less the
	// samples' own INFO, per job forwarded between them.
	i := slices.IndexFunc(r.calls, func(c callSample) bool { return !c.at.Before(begin) })
	j := -1
	for k := len(r.calls) - 1; k >= 0; k-- {
		if !r.calls[k].at.After(end) {
			j = k
			break
		}
	}
	if i >= 0 && j > i {
		var jobs int64
		for _, fw := range r.forwards {
			if fw.at.After(r.calls[i].at) && !fw.at.After(r.calls[j].at) {
				jobs++
			}
		}
		calls := r.calls[j].calls - r.calls[i].calls - int64(j-i)
		f.RedisCallsPerJob = round(float64(calls)/float64(max(jobs, 1)), 3)
	}
	return f
}

// distinct is vs's distinct values in ascending order.
func distinct(vs []int64) []int64 {
	out := slices.Clone(vs)
	slices.Sort(out)
	return slices.Compact(out)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// poolPlansFile is the pool scenario's plans file: the pool, a plan per share (and quiet, share
// 1, the default plan), each far faster than the pool, and every contending tenant's plan.
func poolPlansFile(concurrency int, names []string, shares []int64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "pools:\n  workers: {concurrency: %d, lease: %v}\nplans:\n", concurrency, poolLease)
	for _, s := range distinct(shares) {
		fmt.Fprintf(&b, "  share%d: {pool: workers, share: %d, limits: [{capacity: 1000000, rate: 1000000/s}]}\n", s, s)
	}
	b.WriteString("  quiet: {pool: workers, share: 1, limits: [{capacity: 1000000, rate: 1000000/s}]}\ntenants:\n")
	for i, name := range names {
		fmt.Fprintf(&b, "  %s: share%d\n", name, shares[i])
	}
	b.WriteString("default_plan: quiet\n")
	return b.String()
}

// quietName is the i-th quiet tenant of the pool scenario.
func quietName(i int) string { return fmt.Sprintf("q%03d", i+1) }

// headerSeq numbers the quiet jobs of the pool scenario.
const headerSeq = "Bench-Seq"

// publishByTenant publishes the jobs of names to the server at url, tenant by tenant: tenant i's
// are the start[i]-th to before the start[i+1]-th, on prefixIn + names[i] + "." + kind. It
// returns how long that took.
func publishByTenant(ctx context.Context, url string, names []string, start []int, kind string) (time.Duration, error) {
	subj := make([]string, len(names))
	for i, name := range names {
		subj[i] = prefixIn + name + "." + kind
	}
	tenant := 0
	begin := time.Now()
	err := prepublishTo(ctx, url, start[len(names)], func(i int) string {
		for i >= start[tenant+1] {
			tenant++
		}
		return subj[tenant]
	})
	return time.Since(begin), err
}

// pool runs the pool scenario.
func (e *env) pool(ctx context.Context, p *progress) (*Pool, error) {
	o := e.o
	admitterBin, srv, err := e.processWorld(ctx)
	if err != nil {
		return nil, err
	}
	defer srv.proc.stop()

	names := tenantNames(o.PoolTenants)
	run := poolRun{names: names, shares: make([]int64, len(names)), jobs: make([]int, len(names)), pool: o.PoolConcurrency}
	start := make([]int, len(names)+1) // tenant i's jobs are the start[i]-th to before start[i+1]-th
	for i := range names {
		run.shares[i] = poolShares[i%len(poolShares)]
		run.jobs[i] = o.PoolJobs * int(run.shares[i])
		start[i+1] = start[i] + run.jobs[i]
	}
	total := start[len(names)]
	f := Pool{Tenants: o.PoolTenants, Shares: poolShares, JobsPerShare: o.PoolJobs, Concurrency: o.PoolConcurrency,
		LeaseS: poolLease.Seconds(), JobMs: ms(o.PoolJobTime), WorkerConcurrency: 2 * o.PoolConcurrency,
		QuietTenants: o.PoolQuietTenants, QuietRate: poolQuietRate, Backlog: total,
		CeilingPerSecond: round(float64(o.PoolConcurrency)/o.PoolJobTime.Seconds(), 1)}

	what := fmt.Sprintf("pool: publish %s jobs tenant by tenant (%s tenants, %d jobs per unit of share, shares %s)",
		count(float64(total)), count(float64(o.PoolTenants)), o.PoolJobs, sharesText(poolShares))
	if err := p.phase(what, func() (string, error) {
		took, err := publishByTenant(ctx, srv.url, names, start, "work")
		if err != nil {
			return "", err
		}
		f.PublishS = round(took.Seconds(), 3)
		return fmt.Sprintf("%s jobs/s", count(PerSecond(int64(total), took))), nil
	}); err != nil {
		return nil, err
	}

	nc, js, err := connect(srv.url, "bench-pool")
	if err != nil {
		return nil, err
	}
	defer nc.Close()

	// The forwards: each contending tenant's count (the subscription's callback is the only
	// writer), ranOut closed at the first tenant's last job.
	counts, served := make([]int, len(names)), 0
	ranOut := make(chan struct{})
	index := make(map[string]int32, len(names))
	for i, name := range names {
		index[name] = int32(i)
	}
	col, err := collect(nc, prefixOut+">", func(m *nats.Msg, now time.Time) (poolForward, bool) {
		tenant, _, _ := strings.Cut(strings.TrimPrefix(m.Subject, prefixOut), ".")
		if i, ok := index[tenant]; ok {
			if counts[i]++; counts[i] == 1 {
				served++
			}
			// The run ends when a tenant runs out once every tenant has been served (one that
			// ran out before is left out of the figures).
			if counts[i] == run.jobs[i] && served == len(names) && !isClosed(ranOut) {
				close(ranOut)
			}
			return poolForward{tenant: i, at: now}, true
		}
		seq, err := strconv.ParseInt(m.Header.Get(headerSeq), 10, 32)
		sent, ok := sentAt(m)
		if err != nil || !ok {
			return poolForward{}, false
		}
		return poolForward{tenant: -1, seq: int32(seq), at: now, sent: sent}, true
	})
	if err != nil {
		return nil, err
	}
	defer col.stop()

	// The workers: the library over a durable consumer of ADMITTED, room for twice the pool.
	work := &poolWork{}
	wk, err := e.startPoolWorkers(ctx, js, nc, work, f.WorkerConcurrency, o.PoolJobTime)
	if err != nil {
		return nil, err
	}
	stopWorkers := func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = wk.Stop(sctx)
	}
	defer stopWorkers() // a second Stop does nothing

	calls0, err := e.admin.calls(ctx)
	if err != nil {
		return nil, fmt.Errorf("redis INFO commandstats: %w", err)
	}

	settings := admitterSettings(o, 0)
	adm, err := e.startAdmitterProc(admitterBin, srv.url, poolPlansFile(o.PoolConcurrency, names, run.shares), settings...)
	if err != nil {
		return nil, err
	}
	defer adm.stop()
	begin := time.Now()
	admCPU0, natsCPU0 := cpuSeconds(adm.proc.cmd.Process.Pid), cpuSeconds(srv.proc.cmd.Process.Pid)

	// Beside the run: Redis's command count sampled, the quiet tenants publishing, and a CPU
	// profile of the admitter if asked. Each stops when stopSide is called.
	side, stopSide := context.WithCancel(ctx)
	defer stopSide()
	var sides sync.WaitGroup
	defer sides.Wait()
	var calls []callSample
	sides.Go(func() {
		calls = append(calls, callSample{at: time.Now(), calls: calls0})
		t := time.NewTicker(poolSampleTick)
		defer t.Stop()
		for {
			select {
			case <-side.Done():
				return
			case <-t.C:
			}
			if n, err := e.admin.calls(side); err == nil {
				calls = append(calls, callSample{at: time.Now(), calls: n})
			}
		}
	})
	qpub, err := newAsyncPublisher(srv.url, "bench-quiet")
	if err != nil {
		return nil, err
	}
	defer qpub.close()
	var quietSent []time.Time
	quietCtx, stopQuiet := context.WithCancel(side)
	defer stopQuiet()
	var quiet sync.WaitGroup
	quiet.Go(func() {
		subj := make([]string, o.PoolQuietTenants)
		for i := range subj {
			subj[i] = prefixIn + quietName(i) + ".work"
		}
		_, _, _ = pace(quietCtx, qpub, poolQuietRate*float64(len(subj)), 24*time.Hour, func(i int64) *nats.Msg {
			now := time.Now()
			quietSent = append(quietSent, now)
			h := nats.Header{}
			h.Set(headerSent, strconv.FormatInt(now.UnixNano(), 10))
			h.Set(headerSeq, strconv.FormatInt(i, 10))
			return &nats.Msg{Subject: subj[int(i%int64(len(subj)))], Data: payload, Header: h}
		})
	})
	if o.PoolProfile != "" {
		sides.Go(func() { profileAdmitter(side, adm, o.PoolProfile, 15*time.Second) })
	}

	ceiling := time.Duration(float64(total) / f.CeilingPerSecond * float64(time.Second))
	bound := time.Minute + 3*ceiling
	what = fmt.Sprintf("pool: %s tenants share a pool of %d (jobs of %v, workers for %d) until the first runs out, %d quiet tenants at %g/s beside",
		count(float64(o.PoolTenants)), o.PoolConcurrency, o.PoolJobTime, f.WorkerConcurrency, o.PoolQuietTenants, poolQuietRate)
	var admCPU, natsCPU float64
	if err := p.phase(what, func() (string, error) {
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case err := <-adm.exited:
			return "", err
		case <-time.After(bound):
			return "", adm.annotate(ctx, fmt.Errorf("no tenant received its whole backlog within %v", bound))
		case <-ranOut:
		}
		admCPU, natsCPU = cpuSeconds(adm.proc.cmd.Process.Pid)-admCPU0, cpuSeconds(srv.proc.cmd.Process.Pid)-natsCPU0
		stopQuiet()
		quiet.Wait()
		// The quiet jobs published: wait until each is forwarded, or poolQuietGrace.
		deadline := time.Now().Add(poolQuietGrace)
		for time.Now().Before(deadline) && quietReceived(col) < len(quietSent) {
			select {
			case <-ctx.Done():
				return "", ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
		run.quietEnd, run.quietSent = time.Now(), quietSent
		return fmt.Sprintf("a tenant ran out after %.1fs", time.Since(begin).Seconds()), nil
	}); err != nil {
		return nil, err
	}
	stopSide()
	sides.Wait()
	stopWorkers() // before the admitter stops: their last done messages are answered
	run.calls = calls
	run.forwards = col.stop()
	run.spans, f.MostInFlight, f.Handled = work.result()

	fig := PoolFigures(run)
	f.AllServed, f.RanOutEarly, f.WindowFrom, f.WindowTo, f.WindowS, f.PerSecond = fig.AllServed, fig.RanOutEarly, fig.WindowFrom, fig.WindowTo, fig.WindowS, fig.PerSecond
	f.Jain, f.MinRatio, f.MaxRatio, f.ByShare, f.Lowest, f.Highest = fig.Jain, fig.MinRatio, fig.MaxRatio, fig.ByShare, fig.Lowest, fig.Highest
	f.Utilisation, f.Quiet, f.QuietMissing, f.RedisCallsPerJob = fig.Utilisation, fig.Quiet, fig.QuietMissing, fig.RedisCallsPerJob
	if f.AllServed > 0 {
		var k int
		for _, fw := range run.forwards {
			if fw.tenant >= 0 {
				if k++; k == f.AllServed {
					f.AllServedS = round(fw.at.Sub(begin).Seconds(), 3)
					break
				}
			}
		}
	}
	f.AdmitterCPUS, f.NATSCPUS = round(admCPU, 2), round(natsCPU, 2)
	p.say(fmt.Sprintf("pool: window %.1fs from %.2fs (every tenant served after %s forwards): %s jobs/s (ceiling %s), utilisation %.1f%%, most in flight %d of %d",
		f.WindowS, f.AllServedS, count(float64(f.AllServed)), count(f.PerSecond), count(f.CeilingPerSecond), 100*f.Utilisation, f.MostInFlight, f.Concurrency))
	p.say(fmt.Sprintf("pool: Jain %.4f of received/share, min %.2f× and max %.2f× the mean; %s; fewest %s, most %s",
		f.Jain, f.MinRatio, f.MaxRatio, byShareText(f.ByShare), tenantShares(f.Lowest), tenantShares(f.Highest)))
	p.say(fmt.Sprintf("pool: quiet p50 %.1fms p99 %.1fms max %.1fms (%d jobs, %d not forwarded); %.2f redis calls/job; CPU admitter %.1fs, nats-server %.1fs",
		f.Quiet.P50Ms, f.Quiet.P99Ms, f.Quiet.MaxMs, f.Quiet.Samples, f.QuietMissing, f.RedisCallsPerJob, f.AdmitterCPUS, f.NATSCPUS))
	return &f, nil
}

// quietReceived is how many quiet forwards col has kept.
func quietReceived(col *collector[poolForward]) int {
	col.mu.Lock()
	defer col.mu.Unlock()
	n := 0
	for _, fw := range col.items {
		if fw.tenant < 0 {
			n++
		}
	}
	return n
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// poolWork is what the workers did: every handler's start and end, and the most at once.
type poolWork struct {
	mu      sync.Mutex
	running int
	most    int
	spans   [][2]time.Time
}

func (w *poolWork) handle(ctx context.Context, took time.Duration) {
	begin := time.Now()
	w.mu.Lock()
	w.running++
	w.most = max(w.most, w.running)
	w.mu.Unlock()
	t := time.NewTimer(took)
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	t.Stop()
	w.mu.Lock()
	w.running--
	w.spans = append(w.spans, [2]time.Time{begin, time.Now()})
	w.mu.Unlock()
}

// result is the spans so far, the most at once and how many handlers returned.
func (w *poolWork) result() ([][2]time.Time, int, int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.spans), w.most, int64(len(w.spans))
}

// startPoolWorkers starts the worker library on a durable consumer of ADMITTED with room for
// concurrency handlers, each taking took.
func (e *env) startPoolWorkers(ctx context.Context, js jetstream.JetStream, nc *nats.Conn, work *poolWork, concurrency int, took time.Duration) (*worker.Worker, error) {
	return e.startWorkers(ctx, js, nc, "bench-workers", concurrency, func(ctx context.Context, j *worker.Job) error {
		work.handle(ctx, took)
		return nil
	})
}

// startWorkers starts the worker library on a durable consumer of ADMITTED named durable, with
// room for concurrency handlers running handler (and four times as many deliveries pending).
func (e *env) startWorkers(ctx context.Context, js jetstream.JetStream, nc *nats.Conn, durable string, concurrency int, handler worker.Handler) (*worker.Worker, error) {
	var cons jetstream.Consumer
	if err := retry(ctx, "the workers' consumer of "+streamOut, setUpWithin, func(ctx context.Context) (err error) {
		cons, err = js.CreateOrUpdateConsumer(ctx, streamOut, jetstream.ConsumerConfig{Durable: durable,
			AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxAckPending: 4 * concurrency})
		return err
	}); err != nil {
		return nil, err
	}
	wk, err := worker.New(worker.Config{Consumer: cons, Conn: nc, Concurrency: concurrency, Logger: e.o.logger(), Handler: handler})
	if err != nil {
		return nil, err
	}
	if err := wk.Start(context.WithoutCancel(ctx)); err != nil {
		return nil, err
	}
	return wk, nil
}

// profileAdmitter writes a CPU profile of the admitter process over seconds (or until ctx
// ends) to path; a profile that cannot be taken is not written (it is an aid, not a figure).
func profileAdmitter(ctx context.Context, adm *admitterProc, path string, seconds time.Duration) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", adm.http, int(seconds.Seconds())), nil)
	if err != nil {
		return
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	out, err := os.Create(path)
	if err != nil {
		return
	}
	_, _ = io.Copy(out, resp.Body)
	_ = out.Close()
}

// sharesText writes shares as 1, 2, 4.
func sharesText(shares []int64) string {
	parts := make([]string, len(shares))
	for i, s := range shares {
		parts[i] = strconv.FormatInt(s, 10)
	}
	return strings.Join(parts, ", ")
}

// byShareText writes each share's figures as share 1: 12.0 (1.00×).
func byShareText(bs []PoolShare) string {
	parts := make([]string, len(bs))
	for i, s := range bs {
		parts[i] = fmt.Sprintf("share %d: %.1f (%.3f×)", s.Share, s.MeanReceived, s.PerShareVsMean)
	}
	return strings.Join(parts, ", ")
}

// tenantShares writes tenants' forwards as t0001:12/1.
func tenantShares(ts []TenantShare) string {
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = fmt.Sprintf("%s:%d/%d", t.Tenant, t.Received, t.Share)
	}
	return strings.Join(parts, " ")
}
