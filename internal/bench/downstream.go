package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/admitter/admitter/internal/testenv"
	"github.com/admitter/admitter/wire"
	"github.com/admitter/admitter/worker"
)

// Downstream is the downstream scenario (issue 31): Tenants tenants with backlogs, spread in
// turn over plans of shares 1, 2 and 4, share one pool in front of a simulated downstream that
// does not say its capacity. A job takes the downstream JobMs while at most Knee run at once,
// JobMs × (1 + (n − Knee)² / Knee) with n running (itself included) above, and is refused as
// overloaded (in RefusalMs, not counted as running) above RefusesAbove: at most
// CapacityPerSecond jobs a second, at Knee at once. After a phase of PhaseS its capacity halves
// (Knee/2 at once, refused above RefusesAbove/2) for PhaseS, then comes back for PhaseS more;
// phases are counted from the first job the downstream sees. The workers are the worker library
// over a durable consumer of ADMITTED with room for Handlers handlers (more than the ceiling: the
// pool, not the workers, binds); a refused job returns worker.Overloaded (the done message says
// overloaded, and the job is delivered again a second later). The same run is made twice: the
// pool adaptive (concurrency Ceiling as its ceiling, adaptive: {min: Min}), and fixed at
// Ceiling, the figures to beat. The admitter and nats-server run as processes of their own.
type Downstream struct {
	Tenants      int     `json:"tenants"`
	Shares       []int64 `json:"shares"`
	JobsPerShare int     `json:"jobs_per_share"`
	Backlog      int     `json:"backlog"`
	Ceiling      int     `json:"ceiling"`
	Min          int     `json:"adaptive_min"`
	Handlers     int     `json:"handlers"`
	// The downstream.
	JobMs             float64 `json:"job_ms"`
	Knee              int     `json:"knee"`
	RefusesAbove      int     `json:"refuses_above"`
	RefusalMs         float64 `json:"refusal_ms"`
	CapacityPerSecond float64 `json:"capacity_per_second"`
	PhaseS            float64 `json:"phase_s"`
	// Throughput is counted in bins of BinS (jobs done, by the time they ended); back within
	// 30 % means every bin for SpanS, within the phase, is within 30 % of the capacity.
	BinS     float64       `json:"bin_s"`
	SpanS    float64       `json:"span_s"`
	Adaptive DownstreamRun `json:"adaptive"`
	Fixed    DownstreamRun `json:"fixed"`
}

// DownstreamRun is one run of the downstream scenario: the pool adaptive, or fixed.
type DownstreamRun struct {
	// Pool is the pool as the plans file has it.
	Pool     string  `json:"pool"`
	PublishS float64 `json:"publish_s"`
	// Phases are the downstream's: full, halved, full again.
	Phases []DownstreamPhase `json:"phases"`
	// BackS is how long after each change of capacity (the first job, the halving, the
	// recovery) the throughput was back within 30 % of the capacity: the start of the first bin
	// from which every bin for SpanS, within the phase, is; −1 when none is.
	BackS []float64 `json:"back_within_30pct_s"`
	// Jain is Jain's fairness index of the tenants' jobs done over their shares, from JainFromS
	// (when every tenant had had a job done; 0 if some never had) to the end; MinRatio and
	// MaxRatio the least and the most done/share over their mean.
	Jain      float64 `json:"jain_index"`
	JainFromS float64 `json:"jain_from_s"`
	MinRatio  float64 `json:"min_vs_mean"`
	MaxRatio  float64 `json:"max_vs_mean"`
	// Done and Refused are the downstream's calls that did the job and that it refused as
	// overloaded, over the run; TimePerJob is the time of the jobs done (the downstream's own,
	// the handler's call), and WorstP99Ms the highest of the phases' p99.
	Done    int64 `json:"done"`
	Refused int64 `json:"refused"`
	// DoneAgain is how many of the jobs done had been delivered before (refused, or put back by
	// a start that found the pool full): a refused job that is never done again starves.
	DoneAgain  int64   `json:"done_again"`
	TimePerJob Latency `json:"time_per_job"`
	WorstP99Ms float64 `json:"worst_phase_p99_ms"`
	// RanOut is how many tenants had their whole backlog done before the end (their share then
	// no longer holds: expect 0).
	RanOut int `json:"ran_out"`
	// DonePerBin is the jobs done in each bin of BinS from the first job.
	DonePerBin []int `json:"done_per_bin"`
	// Limits is the pool as the decision API told it (GET /v1/tenants/{tenant}'s pool section),
	// sampled every dsSampleEvery.
	Limits []LimitSample `json:"limit_trace"`
	// CPU seconds used from the admitter's start to the end of the run: the admitter, nats-server
	// and the bench's own process (the workers and the simulated downstream).
	AdmitterCPUS float64 `json:"admitter_cpu_s"`
	NATSCPUS     float64 `json:"nats_server_cpu_s"`
	BenchCPUS    float64 `json:"bench_cpu_s"`
}

// DownstreamPhase is one phase of the downstream's capacity in a run.
type DownstreamPhase struct {
	Name              string  `json:"name"`
	FromS             float64 `json:"from_s"`
	ToS               float64 `json:"to_s"`
	CapacityPerSecond float64 `json:"capacity_per_second"`
	// PerSecond is the jobs done a second over the phase's second half (its steady state), and
	// VsCapacity that over CapacityPerSecond.
	PerSecond  float64 `json:"steady_per_second"`
	VsCapacity float64 `json:"steady_vs_capacity"`
	// TimePerJob is the time of the jobs done that started in the phase; Refused the calls
	// refused that started in it.
	TimePerJob Latency `json:"time_per_job"`
	Refused    int64   `json:"refused"`
	// Limit is the median limit in force sampled over the phase's second half; InFlight,
	// Running, AckPending and Undelivered the medians of the samples' (see LimitSample).
	Limit       int64  `json:"steady_limit"`
	InFlight    int64  `json:"steady_in_flight"`
	Running     int    `json:"steady_running"`
	AckPending  int    `json:"steady_ack_pending"`
	Undelivered uint64 `json:"steady_undelivered"`
}

// LimitSample is the pool's limit in force at AtS seconds after the first job, what it held
// (InFlight), and for an adaptive pool its floor, the last window's time per job (from a job's
// forward to its done message) and why the limit last moved; beside it, where the jobs holding
// its slots were: running at the downstream (Running), delivered to the workers and not yet
// acknowledged (AckPending: running, or put back after a refusal, or after a start that found the
// pool full, to be delivered again), and forwarded but not yet delivered (Undelivered: the
// consumer delivers no more while MaxAckPending are pending).
type LimitSample struct {
	AtS          float64 `json:"t_s"`
	Limit        int64   `json:"limit"`
	InFlight     int64   `json:"in_flight"`
	FloorMs      float64 `json:"floor_ms,omitempty"`
	TimePerJobMs float64 `json:"time_per_job_ms,omitempty"`
	Reason       string  `json:"reason,omitempty"`
	Running      int     `json:"downstream_running"`
	AckPending   int     `json:"ack_pending"`
	Undelivered  uint64  `json:"undelivered"`
}

// The downstream scenario's fixed settings: issue 31's downstream and pool.
const (
	dsJob         = 20 * time.Millisecond
	dsKnee        = 8
	dsRefuse      = 16
	dsRefusal     = 10 * time.Millisecond // as the simulation of bucket/adaptsim_test.go
	dsCeiling     = 64
	dsMin         = 2
	dsBin         = 500 * time.Millisecond
	dsMaxSpan     = 5 * time.Second
	dsBand        = 0.3
	dsSampleEvery = 500 * time.Millisecond
	dsLease       = 30 * time.Second
)

// dsPhases are the downstream's phases of length phase: full, halved, full again.
func dsPhases(phase time.Duration) []dsPhase {
	return []dsPhase{{"full", 0, dsKnee, dsRefuse}, {"halved", phase, dsKnee / 2, dsRefuse / 2}, {"full again", 2 * phase, dsKnee, dsRefuse}}
}

// dsSpan is how long the throughput must stay within the band to be back: 5 s, or a quarter
// of a shorter phase (a -quick run).
func dsSpan(phase time.Duration) time.Duration {
	return max(dsBin, min(dsMaxSpan, (phase/4).Truncate(dsBin)))
}

// dsJobsPerShare is a backlog per unit of share that lasts the run: twice what the downstream
// could do at its full capacity all along, spread by shares.
func dsJobsPerShare(shares []int64, phase time.Duration) int {
	var total int64
	for _, s := range shares {
		total += s
	}
	capacity := float64(dsKnee) / dsJob.Seconds()
	return int(math.Ceil(2*capacity*3*phase.Seconds()/float64(max(total, 1)))) + 5
}

// dsPhase is one phase of the simulated downstream: from a time after its first job, flat up
// to knee at once, refused above refuse.
type dsPhase struct {
	name         string
	from         time.Duration
	knee, refuse int
}

// capacity is the jobs a second the phase does at most, knee at once.
func (p dsPhase) capacity() float64 { return float64(p.knee) / dsJob.Seconds() }

// dsCall is one call of the simulated downstream: its tenant, when it started and ended after
// the first, and whether it was refused as overloaded.
type dsCall struct {
	tenant     int32
	start, end time.Duration
	refused    bool
	again      bool // the job's delivery was not its first
}

// downstreamRun is what a run of the downstream scenario saw, for DownstreamFigures.
type downstreamRun struct {
	shares []int64 // per tenant
	jobs   []int   // per tenant: its backlog
	phases []dsPhase
	end    time.Duration // the run's end, after the first job
	calls  []dsCall
	limits []LimitSample
}

// DownstreamFigures computes a run's figures (not its settings, its publishing or its CPU)
// from what it saw.
func DownstreamFigures(r downstreamRun) DownstreamRun {
	var f DownstreamRun
	if len(r.phases) == 0 || r.end <= 0 {
		return f
	}
	var ends []time.Duration
	done := make([]int64, len(r.shares))
	first := make([]time.Duration, len(r.shares))
	for i := range first {
		first[i] = -1
	}
	var times []time.Duration
	for _, c := range r.calls {
		if c.end > r.end {
			continue
		}
		if c.refused {
			f.Refused++
			continue
		}
		f.Done++
		if c.again {
			f.DoneAgain++
		}
		ends = append(ends, c.end)
		times = append(times, c.end-c.start)
		if c.tenant >= 0 && int(c.tenant) < len(done) {
			done[c.tenant]++
			if first[c.tenant] < 0 || c.end < first[c.tenant] {
				first[c.tenant] = c.end
			}
		}
	}
	bins := binCounts(ends, dsBin, r.end)
	f.DonePerBin = bins
	f.TimePerJob = Summarize(times)
	phase := r.phases[len(r.phases)-1].from - r.phases[len(r.phases)-2].from
	span := dsSpan(phase)
	for i, p := range r.phases {
		to := r.end
		if i+1 < len(r.phases) {
			to = r.phases[i+1].from
		}
		half := p.from + (to-p.from)/2
		ph := DownstreamPhase{Name: p.name, FromS: round(p.from.Seconds(), 3), ToS: round(to.Seconds(), 3), CapacityPerSecond: round(p.capacity(), 1)}
		ph.PerSecond = round(steadyRate(bins, dsBin, half, to), 1)
		ph.VsCapacity = round(Ratio(ph.PerSecond, p.capacity()), 4)
		var pt []time.Duration
		for _, c := range r.calls {
			if c.start < p.from || c.start >= to || c.end > r.end {
				continue
			}
			if c.refused {
				ph.Refused++
			} else {
				pt = append(pt, c.end-c.start)
			}
		}
		ph.TimePerJob = Summarize(pt)
		f.WorstP99Ms = max(f.WorstP99Ms, ph.TimePerJob.P99Ms)
		var steady []LimitSample
		for _, l := range r.limits {
			if at := time.Duration(l.AtS * float64(time.Second)); at >= half && at < to {
				steady = append(steady, l)
			}
		}
		ph.Limit = median(steady, func(l LimitSample) int64 { return l.Limit })
		ph.InFlight = median(steady, func(l LimitSample) int64 { return l.InFlight })
		ph.Running = median(steady, func(l LimitSample) int { return l.Running })
		ph.AckPending = median(steady, func(l LimitSample) int { return l.AckPending })
		ph.Undelivered = median(steady, func(l LimitSample) uint64 { return l.Undelivered })
		f.Phases = append(f.Phases, ph)
		back := backWithin(bins, dsBin, p.from, to, span, p.capacity(), dsBand)
		f.BackS = append(f.BackS, round(back.Seconds(), 3))
		if back < 0 {
			f.BackS[i] = -1
		}
	}

	// Fairness: each tenant's jobs done over its share, from when every tenant had had one.
	from := time.Duration(0)
	for _, t := range first {
		if t < 0 {
			from = 0
			break
		}
		from = max(from, t)
	}
	f.JainFromS = round(from.Seconds(), 3)
	counts := make([]int64, len(r.shares))
	for _, c := range r.calls {
		if !c.refused && c.end >= from && c.end <= r.end && c.tenant >= 0 && int(c.tenant) < len(counts) {
			counts[c.tenant]++
		}
	}
	x := make([]float64, len(counts))
	for i, n := range counts {
		x[i] = float64(n) / float64(max(r.shares[i], 1))
	}
	f.Jain = round(jain(x), 4)
	if len(x) > 0 {
		var sum float64
		for _, v := range x {
			sum += v
		}
		m := sum / float64(len(x))
		f.MinRatio, f.MaxRatio = round(Ratio(slices.Min(x), m), 3), round(Ratio(slices.Max(x), m), 3)
	}
	for i, n := range done {
		if i < len(r.jobs) && n >= int64(r.jobs[i]) {
			f.RanOut++
		}
	}
	f.Limits = r.limits
	return f
}

// median is the median (the upper one of an even count) of what of xs; 0 for none.
func median[T any, V int | int64 | uint64](xs []T, of func(T) V) V {
	vs := make([]V, len(xs))
	for i, x := range xs {
		vs[i] = of(x)
	}
	if len(vs) == 0 {
		return 0
	}
	slices.Sort(vs)
	return vs[len(vs)/2]
}

// binCounts counts the times in [0, end) in bins of bin (the last may be partial).
func binCounts(times []time.Duration, bin, end time.Duration) []int {
	if bin <= 0 || end <= 0 {
		return nil
	}
	out := make([]int, int((end+bin-1)/bin))
	for _, t := range times {
		if t >= 0 && t < end {
			out[t/bin]++
		}
	}
	return out
}

// steadyRate is the mean per second of the bins (of bin, counted from 0) that lie wholly in
// [from, to); 0 when none does.
func steadyRate(bins []int, bin, from, to time.Duration) float64 {
	a, b := int((from+bin-1)/bin), min(int(to/bin), len(bins))
	if b <= a {
		return 0
	}
	var n int
	for _, c := range bins[a:b] {
		n += c
	}
	return float64(n) / (float64(b-a) * bin.Seconds())
}

// backWithin is how long after from the throughput was back within band of capacity (a
// second): the start of the first bin at or after from such that every bin of the next span,
// all of it before to, is; −1 when there is none.
func backWithin(bins []int, bin, from, to, span time.Duration, capacity, band float64) time.Duration {
	k := max(int(span/bin), 1)
	lo, hi := (1-band)*capacity*bin.Seconds(), (1+band)*capacity*bin.Seconds()
	last := min(int(to/bin), len(bins)) // bins before last lie wholly before to
	for b := int((from + bin - 1) / bin); b+k <= last; b++ {
		ok := true
		for _, c := range bins[b : b+k] {
			if float64(c) < lo || float64(c) > hi {
				ok = false
				break
			}
		}
		if ok {
			return time.Duration(b)*bin - from
		}
	}
	return -1
}

// jain is Jain's fairness index of xs, (Σx)²/(n·Σx²): 1 when all are equal, 1/n when one has
// everything; 0 for none, or all zero.
func jain(xs []float64) float64 {
	var sum, squares float64
	for _, x := range xs {
		sum += x
		squares += x * x
	}
	if squares == 0 {
		return 0
	}
	return sum * sum / (float64(len(xs)) * squares)
}

// dsPlansFile is the downstream scenario's plans file: the pool (adaptive or fixed), a plan per
// share far faster than the pool, and every tenant's plan.
func dsPlansFile(pool string, names []string, shares []int64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "pools:\n  api: %s\nplans:\n", pool)
	for _, s := range distinct(shares) {
		fmt.Fprintf(&b, "  share%d: {pool: api, share: %d, limits: [{capacity: 1000000, rate: 1000000/s}]}\n", s, s)
	}
	b.WriteString("tenants:\n")
	for i, name := range names {
		fmt.Fprintf(&b, "  %s: share%d\n", name, shares[i])
	}
	return b.String()
}

// simDownstream is the scenario's downstream, driven by the workers' handlers.
type simDownstream struct {
	phases []dsPhase
	index  map[string]int32 // tenant → its index (read only)
	t0     atomic.Int64     // the first call's time, Unix ns (0: none yet)
	first  chan struct{}    // closed at the first call
	once   sync.Once

	mu      sync.Mutex
	running int
	calls   []dsCall
}

func newSimDownstream(phases []dsPhase, names []string) *simDownstream {
	d := &simDownstream{phases: phases, index: make(map[string]int32, len(names)), first: make(chan struct{})}
	for i, n := range names {
		d.index[n] = int32(i)
	}
	return d
}

// phaseAt is the phase at since the first call.
func (d *simDownstream) phaseAt(since time.Duration) dsPhase {
	p := d.phases[0]
	for _, q := range d.phases {
		if since >= q.from {
			p = q
		}
	}
	return p
}

// handle is the workers' handler: the downstream's call for one job.
func (d *simDownstream) handle(ctx context.Context, j *worker.Job) error {
	now := time.Now()
	d.t0.CompareAndSwap(0, now.UnixNano())
	d.once.Do(func() { close(d.first) })
	t0 := time.Unix(0, d.t0.Load())
	ph := d.phaseAt(now.Sub(t0))
	tenant, ok := d.index[j.Tenant]
	if !ok {
		tenant = -1
	}
	d.mu.Lock()
	n := d.running + 1
	refused := n > ph.refuse
	if !refused {
		d.running++
	}
	d.mu.Unlock()
	took := dsRefusal
	if !refused {
		took = dsJob
		if x := float64(n - ph.knee); x > 0 {
			took = time.Duration(float64(dsJob) * (1 + x*x/float64(ph.knee)))
		}
	}
	t := time.NewTimer(took)
	var err error
	select {
	case <-ctx.Done():
		err = ctx.Err()
	case <-t.C:
	}
	t.Stop()
	end := time.Now()
	d.mu.Lock()
	if !refused {
		d.running--
	}
	if err == nil {
		d.calls = append(d.calls, dsCall{tenant: tenant, start: now.Sub(t0), end: end.Sub(t0), refused: refused, again: j.Attempt > 1})
	}
	d.mu.Unlock()
	switch {
	case err != nil:
		return err // a hard stop: delivered again, its lease kept
	case refused:
		return worker.Overloaded(errors.New("503 Service Unavailable: overloaded"))
	}
	return nil
}

// runningNow is how many jobs the downstream runs now.
func (d *simDownstream) runningNow() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.running
}

// result is the calls so far and the first call's time.
func (d *simDownstream) result() ([]dsCall, time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.calls), time.Unix(0, d.t0.Load())
}

// downstream runs the downstream scenario: the adaptive pool, then the fixed one.
func (e *env) downstream(ctx context.Context, p *progress) (*Downstream, error) {
	o := e.o
	names := tenantNames(o.DownstreamTenants)
	shares := make([]int64, len(names))
	for i := range names {
		shares[i] = poolShares[i%len(poolShares)]
	}
	perShare := dsJobsPerShare(shares, o.DownstreamPhase)
	d := &Downstream{Tenants: len(names), Shares: poolShares, JobsPerShare: perShare, Ceiling: dsCeiling, Min: dsMin,
		Handlers: 2 * dsCeiling, JobMs: ms(dsJob), Knee: dsKnee, RefusesAbove: dsRefuse, RefusalMs: ms(dsRefusal),
		CapacityPerSecond: round(dsPhases(0)[0].capacity(), 1), PhaseS: o.DownstreamPhase.Seconds(),
		BinS: dsBin.Seconds(), SpanS: dsSpan(o.DownstreamPhase).Seconds()}
	for _, s := range shares {
		d.Backlog += perShare * int(s)
	}
	for _, v := range []struct {
		name string
		pool string
		into *DownstreamRun
	}{
		{"adaptive", fmt.Sprintf("{concurrency: %d, lease: %v, adaptive: {min: %d}}", dsCeiling, dsLease, dsMin), &d.Adaptive},
		{fmt.Sprintf("fixed %d", dsCeiling), fmt.Sprintf("{concurrency: %d, lease: %v}", dsCeiling, dsLease), &d.Fixed},
	} {
		r, err := e.downstreamRun(ctx, p, v.name, v.pool, names, shares, perShare)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", v.name, err)
		}
		*v.into = r
	}
	return d, nil
}

// downstreamRun runs one variant of the downstream scenario with pool (a pool's YAML).
func (e *env) downstreamRun(ctx context.Context, p *progress, variant, pool string, names []string, shares []int64, perShare int) (DownstreamRun, error) {
	o := e.o
	var f DownstreamRun
	admitterBin, srv, err := e.processWorld(ctx)
	if err != nil {
		return f, err
	}
	defer srv.proc.stop()

	jobs := make([]int, len(names))
	start := make([]int, len(names)+1) // tenant i's jobs are the start[i]-th to before start[i+1]-th
	for i := range names {
		jobs[i] = perShare * int(shares[i])
		start[i+1] = start[i] + jobs[i]
	}
	total := start[len(names)]
	what := fmt.Sprintf("downstream (%s): publish %s jobs tenant by tenant (%s tenants, %d jobs per unit of share, shares %s)",
		variant, count(float64(total)), count(float64(len(names))), perShare, sharesText(poolShares))
	if err := p.phase(what, func() (string, error) {
		took, err := publishByTenant(ctx, srv.url, names, start, "call")
		if err != nil {
			return "", err
		}
		f.PublishS = round(took.Seconds(), 3)
		return fmt.Sprintf("%s jobs/s", count(PerSecond(int64(total), took))), nil
	}); err != nil {
		return f, err
	}

	nc, js, err := connect(srv.url, "bench-downstream")
	if err != nil {
		return f, err
	}
	defer nc.Close()
	phases := dsPhases(o.DownstreamPhase)
	sim := newSimDownstream(phases, names)
	handlers := 2 * dsCeiling
	wk, err := e.startWorkers(ctx, js, nc, "bench-downstream", handlers, sim.handle)
	if err != nil {
		return f, err
	}
	stopWorkers := func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = wk.Stop(sctx)
	}
	defer stopWorkers() // a second Stop does nothing
	cons, err := js.Consumer(ctx, streamOut, "bench-downstream")
	if err != nil {
		return f, fmt.Errorf("the workers' consumer: %w", err)
	}

	port, err := freeLoopback()
	if err != nil {
		return f, err
	}
	settings := append(admitterSettings(o, 0), "ADMITTER_API_ADDR="+port)
	adm, err := e.startAdmitterProc(admitterBin, srv.url, dsPlansFile(pool, names, shares), settings...)
	if err != nil {
		return f, err
	}
	defer adm.stop()
	admCPU0, natsCPU0, benchCPU0 := cpuSeconds(adm.proc.cmd.Process.Pid), cpuSeconds(srv.proc.cmd.Process.Pid), cpuSeconds(os.Getpid())

	end := time.Duration(len(phases)) * o.DownstreamPhase
	what = fmt.Sprintf("downstream (%s): %s tenants on a pool %s in front of a downstream of %g jobs/s (%d at once in %v), halved from %v to %v, until %v",
		variant, count(float64(len(names))), pool, phases[0].capacity(), dsKnee, dsJob, phases[1].from, phases[2].from, end)
	var limits []LimitSample
	if err := p.phase(what, func() (string, error) {
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case err := <-adm.exited:
			return "", err
		case <-time.After(30 * time.Second):
			return "", adm.annotate(ctx, errors.New("the downstream had no job within 30s of the admitter's start"))
		case <-sim.first:
		}
		_, t0 := sim.result()
		// The pool's limit in force, sampled from the decision API until the end.
		side, stopSide := context.WithCancel(ctx)
		var sampler sync.WaitGroup
		sampler.Go(func() {
			limits = sampleLimits(side, "http://"+port, names[0], t0, func(s *LimitSample) {
				s.Running = sim.runningNow()
				if info, err := cons.Info(side); err == nil {
					s.AckPending, s.Undelivered = info.NumAckPending, info.NumPending
				}
			})
		})
		defer func() { stopSide(); sampler.Wait() }()
		if o.DownstreamProfile != "" && variant == "adaptive" {
			sampler.Go(func() { profileAdmitter(side, adm, o.DownstreamProfile, 15*time.Second) })
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case err := <-adm.exited:
			return "", err
		case <-time.After(time.Until(t0.Add(end))):
		}
		_, n := sim.counts()
		return fmt.Sprintf("%s jobs done", count(float64(n))), nil
	}); err != nil {
		return f, err
	}
	f.AdmitterCPUS = round(cpuSeconds(adm.proc.cmd.Process.Pid)-admCPU0, 2)
	f.NATSCPUS = round(cpuSeconds(srv.proc.cmd.Process.Pid)-natsCPU0, 2)
	f.BenchCPUS = round(cpuSeconds(os.Getpid())-benchCPU0, 2)
	stopWorkers() // before the admitter stops: their last done messages are answered
	calls, _ := sim.result()

	fig := DownstreamFigures(downstreamRun{shares: shares, jobs: jobs, phases: phases, end: end, calls: calls, limits: limits})
	fig.Pool, fig.PublishS = pool, f.PublishS
	fig.AdmitterCPUS, fig.NATSCPUS, fig.BenchCPUS = f.AdmitterCPUS, f.NATSCPUS, f.BenchCPUS
	f = fig
	for _, ph := range f.Phases {
		p.say(fmt.Sprintf("downstream (%s): %s (%s s to %s s): %s jobs/s of %s (%.0f%%) in its second half, limit %d (in flight %d: %d running, %d delivered and not acked, %d not delivered); time per job p50 %.1fms p99 %.1fms; %s refused",
			variant, ph.Name, trimFloat(ph.FromS), trimFloat(ph.ToS), count(ph.PerSecond), count(ph.CapacityPerSecond), 100*ph.VsCapacity, ph.Limit,
			ph.InFlight, ph.Running, ph.AckPending, ph.Undelivered, ph.TimePerJob.P50Ms, ph.TimePerJob.P99Ms, count(float64(ph.Refused))))
	}
	p.say(fmt.Sprintf("downstream (%s): within 30%% of capacity %s after the start, %s after the halving, %s after the recovery; Jain %.4f of done/share from %.1fs (min %.2f×, max %.2f× the mean)",
		variant, backText(f.BackS, 0), backText(f.BackS, 1), backText(f.BackS, 2), f.Jain, f.JainFromS, f.MinRatio, f.MaxRatio))
	p.say(fmt.Sprintf("downstream (%s): limit in force by second: %s", variant, limitTrace(f.Limits)))
	p.say(fmt.Sprintf("downstream (%s): jobs done by second: %s", variant, perSecondTrace(f.DonePerBin, dsBin)))
	p.say(fmt.Sprintf("downstream (%s): %s done (%s of them delivered before), %s refused; CPU admitter %.1fs, nats-server %.1fs, bench (workers, downstream) %.1fs",
		variant, count(float64(f.Done)), count(float64(f.DoneAgain)), count(float64(f.Refused)), f.AdmitterCPUS, f.NATSCPUS, f.BenchCPUS))
	return f, nil
}

// counts is the calls done and refused so far.
func (d *simDownstream) counts() (refused, done int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.calls {
		if c.refused {
			refused++
		} else {
			done++
		}
	}
	return refused, done
}

// sampleLimits reads the pool section of tenant's state from the decision API at base every
// dsSampleEvery until ctx ends; a sample that fails is skipped.
func sampleLimits(ctx context.Context, base, tenant string, t0 time.Time, also func(*LimitSample)) []LimitSample {
	c := http.Client{Timeout: time.Second}
	t := time.NewTicker(dsSampleEvery)
	defer t.Stop()
	var out []LimitSample
	for {
		if s, ok := sampleLimit(ctx, &c, base, tenant); ok {
			s.AtS = round(time.Since(t0).Seconds(), 3)
			also(&s)
			out = append(out, s)
		}
		select {
		case <-ctx.Done():
			return out
		case <-t.C:
		}
	}
}

func sampleLimit(ctx context.Context, c *http.Client, base, tenant string) (LimitSample, bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/tenants/"+tenant, nil)
	if err != nil {
		return LimitSample{}, false
	}
	resp, err := c.Do(req)
	if err != nil {
		return LimitSample{}, false
	}
	defer resp.Body.Close()
	var st wire.TenantState
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&st) != nil || st.Pool == nil {
		return LimitSample{}, false
	}
	ps := st.Pool
	s := LimitSample{Limit: ps.Limit, InFlight: ps.InFlight, FloorMs: ps.FloorMs, TimePerJobMs: ps.TimePerJobMs}
	if s.Limit == 0 {
		s.Limit = ps.Concurrency
	}
	s.Reason, _, _ = strings.Cut(ps.LimitReason, ":")
	return s, true
}

// freeLoopback is a free address on 127.0.0.1.
func freeLoopback() (string, error) {
	port, err := testenv.FreePort()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("127.0.0.1:%d", port), nil
}

// backText is the i-th of back (seconds, −1: never) in words.
func backText(back []float64, i int) string {
	if i >= len(back) || back[i] < 0 {
		return "never"
	}
	return fmt.Sprintf("%.1fs", back[i])
}

// limitTrace writes the limit in force of the first sample of each second: "2 2 4 8 9 …".
func limitTrace(samples []LimitSample) string {
	var parts []string
	next := 0.0
	for _, s := range samples {
		if s.AtS >= next {
			parts = append(parts, fmt.Sprint(s.Limit))
			next = math.Floor(s.AtS) + 1
		}
	}
	return strings.Join(parts, " ")
}

// perSecondTrace writes bins of bin as counts a second: "380 396 …".
func perSecondTrace(bins []int, bin time.Duration) string {
	per := max(int(time.Second/bin), 1)
	var parts []string
	for i := 0; i < len(bins); i += per {
		n := 0
		for _, c := range bins[i:min(i+per, len(bins))] {
			n += c
		}
		parts = append(parts, fmt.Sprint(n))
	}
	return strings.Join(parts, " ")
}
