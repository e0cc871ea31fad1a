package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Backlog is the backlog-at-start scenario (issue 30): Jobs jobs of Tenants tenants (as many
// each, plans that let them all go at once) are published while no forwarder runs; then the
// forwarder starts while a new tenant, NewTenant, publishes NewRate jobs/s. Each run has a fresh
// nats-server process of its own (carrying the partitions' mapping) and the admitters are
// processes: the drain is timed from the forwarder's start (the admitters' processes started,
// the relay's consumer created) until the last job of the backlog is received downstream.
type Backlog struct {
	Jobs       int     `json:"jobs"`
	Tenants    int     `json:"tenants"`
	NewTenant  string  `json:"new_tenant"`
	NewRate    float64 `json:"new_tenant_rate_per_second"`
	Partitions int     `json:"partitions"`
	// Relay is the plain relay (its input a work queue, read in the order published: the new
	// tenant's jobs wait behind the whole backlog); Runs are one admitter on one partition, one
	// on Partitions, and two replicas on Partitions.
	Relay BacklogRun   `json:"relay"`
	Runs  []BacklogRun `json:"runs"`
}

// BacklogRun is one forwarder starting on the backlog.
type BacklogRun struct {
	Name       string `json:"name"`
	Replicas   int    `json:"replicas"` // 0 for the relay
	Partitions int    `json:"partitions"`
	// PublishS is how long the backlog took to publish (before the start, not timed).
	PublishS float64 `json:"publish_s"`
	// From the start: the first job of the backlog received, and the last (DrainS); PerSecond is
	// the backlog over DrainS, VsRelay over the relay's.
	FirstS   float64 `json:"first_s"`
	DrainS   float64 `json:"drain_s"`
	Received int     `json:"received"`
	// Duplicates counts the backlog's forwards received again (the same Nats-Msg-Id; the relay
	// sets none): not counted in Received. Expect 0. Stored is what ADMITTED holds at the end
	// (its duplicate window drops a publish with a Msg-Id it has): the backlog and the new
	// tenant's jobs received, if none was stored twice.
	Duplicates int     `json:"duplicates"`
	Stored     uint64  `json:"output_stored"`
	PerSecond  float64 `json:"per_second"`
	VsRelay    float64 `json:"vs_relay"`
	// New is the new tenant's jobs' publish → received, of those published from the start until
	// the backlog was drained; NewMissing counts those not received within backlogNewGrace after
	// the drain (not in New).
	New        Latency `json:"new_tenant"`
	NewMissing int     `json:"new_tenant_missing"`
	// NewWaitsMs is each of those jobs' wait in the order published (−1: never received).
	NewWaitsMs []float64 `json:"new_tenant_waits_ms"`
	// Held is each change of how many partitions the replicas held (their /metrics,
	// read every backlogPoll) from the start to the drain's end; SharedS when they first held
	// them all, each its share (−1: not before the drain's end).
	Held    []PartitionsHeld `json:"partitions_held,omitempty"`
	SharedS float64          `json:"shared_s,omitempty"`
	// CPU seconds from the start to the drain's end: the admitters' processes (summed) and
	// nats-server's.
	AdmitterCPUS float64 `json:"admitter_cpu_s,omitempty"`
	NATSCPUS     float64 `json:"nats_server_cpu_s"`
}

// PartitionsHeld is how many partitions each replica held from AtS after the start.
type PartitionsHeld struct {
	AtS  float64 `json:"at_s"`
	Held []int   `json:"held"`
}

// backlogPoll is how often the backlog scenario reads the partitions the replicas hold.
const backlogPoll = 50 * time.Millisecond

// backlogNewTenant publishes beside the backlog; backlogNewGrace is how long after the drain its
// last jobs may take.
const (
	backlogNewTenant = "newcomer"
	backlogNewGrace  = 10 * time.Second
)

// newJob is one job of the new tenant: when it was published and when it was received (zero:
// not yet).
type newJob struct{ sent, got time.Time }

// BacklogFigures computes a run's figures from its start, the times the backlog's jobs were
// received (in any order), the new tenant's jobs, and the backlog's size: the new tenant's
// waits count the jobs published before the backlog was drained, those never received apart.
func BacklogFigures(start time.Time, got []time.Time, news []newJob, jobs int) BacklogRun {
	var r BacklogRun
	r.Received = len(got)
	if len(got) == 0 {
		return r
	}
	first, last := slices.MinFunc(got, time.Time.Compare), slices.MaxFunc(got, time.Time.Compare)
	r.FirstS = round(first.Sub(start).Seconds(), 3)
	r.DrainS = round(last.Sub(start).Seconds(), 3)
	r.PerSecond = round(PerSecond(int64(min(jobs, len(got))), last.Sub(start)), 1)
	var waits []time.Duration
	for _, j := range news {
		switch {
		case j.sent.After(last):
		case j.got.IsZero():
			r.NewMissing++
			r.NewWaitsMs = append(r.NewWaitsMs, -1)
		default:
			waits = append(waits, j.got.Sub(j.sent))
			r.NewWaitsMs = append(r.NewWaitsMs, round(ms(j.got.Sub(j.sent)), 1))
		}
	}
	r.New = Summarize(waits)
	return r
}

// BacklogRatios sets each run's jobs/s over the relay's.
func (b *Backlog) BacklogRatios() {
	b.Relay.VsRelay = round(Ratio(b.Relay.PerSecond, b.Relay.PerSecond), 4)
	for i := range b.Runs {
		b.Runs[i].VsRelay = round(Ratio(b.Runs[i].PerSecond, b.Relay.PerSecond), 4)
	}
}

// backlog runs the backlog-at-start scenario: the relay, then the admitters.
func (e *env) backlog(ctx context.Context, p *progress) (*Backlog, error) {
	o := e.o
	b := &Backlog{Jobs: o.BacklogJobs, Tenants: o.BacklogTenants, NewTenant: backlogNewTenant, NewRate: o.BacklogNewRate, Partitions: o.Partitions}
	admitterBin, natsBin, err := e.bins.build()
	if err != nil {
		return nil, err
	}
	what := fmt.Sprintf("%s jobs of %s tenants queued while none ran, a new tenant at %g/s", count(float64(b.Jobs)), count(float64(b.Tenants)), b.NewRate)
	if err := p.phase("backlog at start: relay drains "+what, func() (string, error) {
		b.Relay, err = e.backlogRun(ctx, natsBin, "", 0, 1)
		return backlogSummary(b.Relay), err
	}); err != nil {
		return nil, err
	}
	for _, c := range []struct{ n, parts int }{{1, 1}, {1, o.Partitions}, {2, o.Partitions}} {
		var run BacklogRun
		if err := p.phase(fmt.Sprintf("backlog at start: %s drain %s", replicaName(c.n, c.parts), what), func() (string, error) {
			run, err = e.backlogRun(ctx, natsBin, admitterBin, c.n, c.parts)
			return backlogSummary(run), err
		}); err != nil {
			return nil, err
		}
		b.Runs = append(b.Runs, run)
	}
	b.BacklogRatios()
	return b, nil
}

func backlogSummary(r BacklogRun) string {
	waits := make([]string, len(r.NewWaitsMs))
	for i, w := range r.NewWaitsMs {
		waits[i] = fixed(w, 0)
	}
	s := fmt.Sprintf("drained in %.2fs (first after %.2fs), %s jobs/s, %d duplicates (%s stored); new tenant p50 %.0fms p99 %.0fms over %d jobs, %d missing (waits ms in order: %s)",
		r.DrainS, r.FirstS, count(r.PerSecond), r.Duplicates, count(float64(r.Stored)), r.New.P50Ms, r.New.P99Ms, r.New.Samples, r.NewMissing, strings.Join(waits, " "))
	if r.Replicas > 0 {
		s += fmt.Sprintf("; CPU admitters %.2fs, nats-server %.2fs; partitions held:", r.AdmitterCPUS, r.NATSCPUS)
		for _, h := range r.Held {
			s += fmt.Sprintf(" %.2fs %v", h.AtS, h.Held)
		}
	}
	return s
}

// backlogRun starts n admitter replicas on parts partitions (n = 0: the relay) on the backlog.
func (e *env) backlogRun(ctx context.Context, natsBin, admitterBin string, n, parts int) (BacklogRun, error) {
	o := e.o
	kind, name := "relay", "relay"
	if n > 0 {
		kind, name = "admitter", replicaName(n, parts)
	}
	fail := func(err error) (BacklogRun, error) { return BacklogRun{Name: name}, err }
	srv, err := e.startNATSProcOf(ctx, natsBin, 0, kind, parts)
	if err != nil {
		return fail(err)
	}
	defer srv.proc.stop()
	subj := make([]string, o.BacklogTenants)
	for i := range subj {
		subj[i] = prefixIn + tenantName(i) + ".work"
	}
	begin := time.Now()
	if err := prepublishOver(ctx, srv.url, o.BacklogJobs, parts, func(i int) string { return subj[i%len(subj)] }); err != nil {
		return fail(err)
	}
	publishS := time.Since(begin).Seconds()

	nc, js, err := connect(srv.url, "bench-downstream")
	if err != nil {
		return fail(err)
	}
	defer nc.Close()
	newPrefix := prefixOut + backlogNewTenant + "."
	var (
		mu   sync.Mutex
		got  = make([]time.Time, 0, o.BacklogJobs)
		seen = make(map[string]struct{}, o.BacklogJobs)
		dups int
		news []newJob
	)
	col, err := collect(nc, prefixOut+">", func(m *nats.Msg, now time.Time) (struct{}, bool) {
		mu.Lock()
		defer mu.Unlock()
		if !strings.HasPrefix(m.Subject, newPrefix) {
			if id := m.Header.Get(nats.MsgIdHdr); id != "" {
				if _, again := seen[id]; again {
					dups++
					return struct{}{}, false
				}
				seen[id] = struct{}{}
			}
			got = append(got, now)
			return struct{}{}, false
		}
		i, err := strconv.Atoi(m.Header.Get(headerNewIndex))
		if err == nil && i >= 0 && i < len(news) && news[i].got.IsZero() {
			news[i].got = now
		}
		return struct{}{}, false
	})
	if err != nil {
		return fail(err)
	}
	defer col.stop()
	if err := e.admin.flush(ctx); err != nil {
		return fail(err)
	}
	pub, err := newAsyncPublisher(srv.url, "bench-producer")
	if err != nil {
		return fail(err)
	}
	defer pub.close()

	// The new tenant publishes from the start until the backlog is drained.
	newCtx, stopNew := context.WithCancel(ctx)
	defer stopNew()
	var newWG sync.WaitGroup
	defer newWG.Wait()
	var (
		pids         []int
		procs        []*admitterProc
		failed       <-chan error
		stopWatching = func() {}
	)
	start := time.Now()
	natsCPU0 := cpuTime(srv.proc.cmd.Process.Pid)
	newWG.Go(func() {
		// Its first job at the start, then one every 1/rate.
		tick := time.NewTicker(time.Duration(float64(time.Second) / o.BacklogNewRate))
		defer tick.Stop()
		for i := 0; ; i++ {
			h := nats.Header{}
			h.Set(headerNewIndex, strconv.Itoa(i))
			mu.Lock()
			news = append(news, newJob{sent: time.Now()})
			mu.Unlock()
			if pub.publish(&nats.Msg{Subject: prefixIn + backlogNewTenant + ".work", Data: payload, Header: h}) != nil {
				return // counted missing
			}
			select {
			case <-newCtx.Done():
				return
			case <-tick.C:
			}
		}
	})
	if n == 0 {
		fw, err := prepareRelay(ctx, srv.url, o.RelayPipelines, false, jetstream.PullMaxMessages(512))
		if err != nil {
			return fail(err)
		}
		defer fw.stop()
		if err := fw.start(); err != nil {
			return fail(err)
		}
	} else {
		exited := make(chan error, n)
		failed = exited
		for range n {
			a, err := e.startAdmitterProc(admitterBin, srv.url, fastPlans, append(admitterSettings(o, 0), "ADMITTER_PARTITIONS="+strconv.Itoa(parts))...)
			if err != nil {
				return fail(err)
			}
			defer a.stop()
			pids, procs = append(pids, a.proc.cmd.Process.Pid), append(procs, a)
			go func() { exited <- <-a.exited }()
		}
	}
	// The partitions the replicas hold, until the drain's end.
	var (
		trace    []PartitionsHeld
		sharedAt = -1.0
	)
	if n > 0 {
		watchCtx, stopWatch := context.WithCancel(ctx)
		var watch sync.WaitGroup
		watch.Go(func() {
			for {
				held, ok, _ := shared(procs, parts)
				at := round(time.Since(start).Seconds(), 3)
				if len(trace) == 0 || !slices.Equal(trace[len(trace)-1].Held, held) {
					trace = append(trace, PartitionsHeld{AtS: at, Held: held})
				}
				if ok && sharedAt < 0 {
					sharedAt = at
				}
				select {
				case <-watchCtx.Done():
					return
				case <-time.After(backlogPoll):
				}
			}
		})
		defer func() { stopWatch(); watch.Wait() }()
		stopWatching = func() { stopWatch(); watch.Wait() }
	}
	received := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(got)
	}
	bound := time.Minute + time.Duration(o.BacklogJobs)*time.Millisecond // at least 1000 jobs/s
	if err := waitUntil(ctx, bound, failed, func() bool { return received() >= o.BacklogJobs }); err != nil {
		err = fmt.Errorf("%d of %d jobs of the backlog received: %w", received(), o.BacklogJobs, err)
		for _, a := range procs {
			err = a.annotate(ctx, err)
		}
		return fail(err)
	}
	admCPU, natsCPU := sumCPU(pids), cpuTime(srv.proc.cmd.Process.Pid)-natsCPU0
	stopWatching()
	stopNew()
	newWG.Wait()
	allIn := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, j := range news {
			if j.got.IsZero() {
				return false
			}
		}
		return true
	}
	_ = waitUntil(ctx, backlogNewGrace, failed, allIn) // those still missing are counted
	// A subscriber receives a forward as it is published, before the stream has stored it: what
	// ADMITTED holds is read once it holds what was received (or after backlogStoredWait).
	mu.Lock()
	want := len(got)
	for _, j := range news {
		if !j.got.IsZero() {
			want++
		}
	}
	mu.Unlock()
	var stored uint64
	_ = waitUntil(ctx, backlogStoredWait, failed, func() bool {
		stored, _, err = streamState(ctx, js, streamOut)
		return err != nil || stored >= uint64(want)
	})
	if err != nil {
		return fail(err)
	}
	mu.Lock()
	r := BacklogFigures(start, slices.Clone(got), slices.Clone(news), o.BacklogJobs)
	r.Duplicates = dups
	mu.Unlock()
	r.Stored = stored
	r.Name, r.Replicas, r.Partitions = name, n, parts
	r.PublishS = round(publishS, 2)
	r.NATSCPUS = round(natsCPU, 2)
	if n > 0 {
		r.AdmitterCPUS = round(admCPU, 2)
		r.Held, r.SharedS = trace, sharedAt
	}
	return r, nil
}

// backlogStoredWait bounds the wait for ADMITTED to store what was received.
const backlogStoredWait = 10 * time.Second

// headerNewIndex numbers the new tenant's jobs in the backlog scenario.
const headerNewIndex = "Bench-New-Index"

// waitUntil polls done every 5 ms until it holds, for at most within; it gives up when fail
// delivers an error (nil: never).
func waitUntil(ctx context.Context, within time.Duration, fail <-chan error, done func() bool) error {
	deadline := time.Now().Add(within)
	for !done() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v", within)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-fail:
			return errors.Join(errors.New("the forwarder stopped"), err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}
