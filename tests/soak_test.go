//go:build soak

package tests

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/admitter/admitter/admission"
	"github.com/admitter/admitter/internal/testenv"
	"github.com/admitter/admitter/subjects"
	"github.com/admitter/admitter/wire"
	"github.com/admitter/admitter/worker"
)

// The soak (make soak; built with -tags soak only, so that `make test` neither runs nor skips it): many tenants' traffic through admitter replicas (the built binary, without
// the race detector), a 3-node NATS cluster (nats-server processes, streams R3) and Redis, while
// a fault is injected every ~20 s at random: a replica, a NATS node or Redis killed (SIGKILL)
// and restarted, paused (SIGSTOP, then SIGCONT) or restarted (SIGTERM). Four tenants have a
// concurrency limit and share a pool, and the worker library runs their jobs (300 ms each).
// Afterwards the invariants are checked with the property test's checker: nothing lost,
// nothing forwarded twice, every tenant's forwards within C + r·t per limit in every interval
// (fail-open forwards excepted), every job run exactly once by its worker (the workers count
// each run of each job; none runs and is dead-lettered too), and never more jobs running at the
// worker than a concurrency limit or the pool allows. It prints a table of the faults, what each
// cost, and the invariants.
//
//	ADMITTER_SOAK=10m                 run for this long (unset: 10m)
//	ADMITTER_SOAK_SEED=n              replay a schedule (printed at the start)
//	ADMITTER_SOAK_FAULT_EVERY=20s     the mean time between faults
//	ADMITTER_SOAK_FAULTS=k,...        draw only these kinds of fault (e.g. "nats pause,nats kill")
//	ADMITTER_SOAK_LOGS=dir            write each replica's log (level debug) there at the end
//	ADMITTER_SOAK_FAIL_MODE=local     or open or closed (default: local, the service's default)
//	ADMITTER_SOAK_REDIS=aof           aof (appendonly yes, appendfsync always), everysec
//	                                  (appendfsync everysec: a crash may lose the last second)
//	                                  or forget (no append-only file: a restart forgets)
//	ADMITTER_SOAK_PARTITIONS=6        the input's partitions (the servers map it; 1: one stream)

// soakTenant is a tenant of the soak: its plan's limits and its load.
type soakTenant struct {
	plan   string
	limits []bucketLimit
	load   loadTenant
	quiet  bool // publishes within its plan: its jobs should go at once
	leased bool // its plan has a concurrency limit and a pool: its pace is the workers'
}

// The pool and the concurrency limit of the leased tenants, whose jobs the soak's worker runs.
const (
	soakPool       = 6
	soakConc       = 2
	soakLeased     = 4
	soakJobRunning = 300 * time.Millisecond
)

const soakPlans = `
pools:
  workers: {concurrency: 6, lease: 4s}
plans:
  leased: {pool: workers, limits: [{capacity: 10, rate: 10/s}, {name: running, kind: concurrency, limit: 2, lease: 4s}]}
  small: {limits: [{capacity: 4, rate: 4/s}]}
  duo:   {limits: [{name: burst, capacity: 8, rate: 8/s}, {name: sustained, capacity: 40, rate: 4/s}]}
  large: {limits: [{capacity: 20, rate: 20/s}]}
  roomy: {limits: [{capacity: 20, rate: 10/s}]}
`

// soakTenants are 40 tenants: 18 publish bursts of several times their plan every 30 s (their
// jobs wait in their lanes, then drain), 22 stay within theirs. About 120 jobs/s in all.
func soakTenants(rng *rand.Rand) []soakTenant {
	var out []soakTenant
	add := func(n int, prefix, plan string, limits []bucketLimit, quiet bool, lt loadTenant) {
		for i := range n {
			lt := lt
			lt.name = fmt.Sprintf("%s%02d", prefix, i)
			if lt.every > 0 {
				lt.phase = time.Duration(rng.Int64N(int64(lt.every)))
			}
			out = append(out, soakTenant{plan: plan, limits: limits, load: lt, quiet: quiet, leased: plan == "leased"})
		}
	}
	period := 30 * time.Second
	add(8, "small", "small", []bucketLimit{{4, 4}}, false, loadTenant{rate: 1.2, maxW: 1, burst: 12, every: period, lasting: 5 * time.Second})
	add(6, "duo", "duo", []bucketLimit{{8, 8}, {40, 4}}, false, loadTenant{rate: 1, maxW: 2, burst: 10, every: period, lasting: 4 * time.Second})
	add(4, "large", "large", []bucketLimit{{20, 20}}, false, loadTenant{rate: 5, maxW: 1, burst: 50, every: period, lasting: 3 * time.Second})
	add(22, "quiet", "roomy", []bucketLimit{{20, 10}}, true, loadTenant{rate: 2, maxW: 1})
	// Each wants 3 jobs/s of 300 ms (0.9 running), in bursts of 15/s for 3 s every 30 s (4.5
	// running, over its limit of 2): the pool's 6 binds in the bursts, and drains between them.
	add(soakLeased, "leased", "leased", []bucketLimit{{10, 10}}, false, loadTenant{rate: 3, maxW: 1, burst: 15, every: period, lasting: 3 * time.Second})
	return out
}

// soakFault is one fault injected: when (since the start), for how long, what.
type soakFault struct {
	at, held time.Duration
	kind     string
	target   string
}

// soakReplica is one admitter replica: its name and its current process.
type soakReplica struct {
	name string
	proc *proc
}

func TestSoak(t *testing.T) {
	spec := os.Getenv("ADMITTER_SOAK")
	if spec == "" {
		spec = "10m"
	}
	duration, err := time.ParseDuration(spec)
	if err != nil || duration <= 0 {
		t.Fatalf("ADMITTER_SOAK=%q: want a positive duration such as 10m", spec)
	}
	envDuration := func(name string, def time.Duration) time.Duration {
		if v := os.Getenv(name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				t.Fatalf("%s=%q: want a positive duration", name, v)
			}
			return d
		}
		return def
	}
	every := envDuration("ADMITTER_SOAK_FAULT_EVERY", 20*time.Second)
	if dl, ok := t.Deadline(); ok && time.Until(dl) < duration+25*time.Minute {
		t.Fatalf("go test's -timeout leaves %v: the soak needs its duration (%v) and up to 25 minutes more", time.Until(dl).Round(time.Second), duration)
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("ADMITTER_SOAK_SEED"); s != "" {
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("ADMITTER_SOAK_SEED: %v", err)
		}
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	failMode := "local"
	if m := os.Getenv("ADMITTER_SOAK_FAIL_MODE"); m != "" {
		failMode = m
	}
	redisMode := os.Getenv("ADMITTER_SOAK_REDIS")
	var redis *testenv.RedisServer
	switch redisMode {
	case "", "aof":
		redisMode = "aof"
		redis = testenv.StartRedisWith(t, "--appendfsync", "always")
	case "everysec":
		redis = testenv.StartPersistentRedis(t)
	case "forget":
		redis = testenv.StartRedis(t)
	default:
		t.Fatalf("ADMITTER_SOAK_REDIS=%q: want aof, everysec or forget", redisMode)
	}
	t.Logf("soak: seed %d (replay with ADMITTER_SOAK_SEED=%d), %v, a fault every ~%v, fail mode %s, redis %s",
		seed, seed, duration, every, failMode, redisMode)

	natsBin, err := testenv.BuildNATSServer(filepath.Dir(binary))
	if err != nil {
		t.Fatal(err)
	}
	parts := 6
	if s := os.Getenv("ADMITTER_SOAK_PARTITIONS"); s != "" {
		if parts, err = strconv.Atoi(s); err != nil || parts < 1 {
			t.Fatalf("ADMITTER_SOAK_PARTITIONS=%q: want a count of partitions, 1 or more", s)
		}
	}
	var mapping string
	if src, dst := admission.Partitions(subjects.MustParse("jobs.submit.{tenant}.>"), "JOBS", parts).Mapping(); src != "" {
		mapping = fmt.Sprintf("mappings {\n  %q: %q\n}\n", src, dst)
	}
	cluster := testenv.StartNATSProcessCluster(t, natsBin, 3, mapping)
	tenants := soakTenants(rng)
	plans := soakPlans + "tenants:\n"
	for _, tn := range tenants {
		plans += fmt.Sprintf("  %s: %s\n", tn.load.name, tn.plan)
	}
	w := newWorldOn(t, plans, cluster.URLs(), redis.URL())
	w.redis = redis
	bin := plainBinary(t)
	env := []string{"ADMITTER_STREAM_REPLICAS=3", "ADMITTER_FAIL_MODE=" + failMode, "ADMITTER_ACK_WAIT=30s", "ADMITTER_PARTITIONS=" + strconv.Itoa(parts)}
	if os.Getenv("ADMITTER_SOAK_LOGS") != "" {
		env = append(env, "ADMITTER_LOG_LEVEL=debug")
	}
	replicas := make([]*soakReplica, 3)
	startReplica := func(r *soakReplica) {
		r.proc = w.startBinary(bin, append(env, "ADMITTER_REPLICA="+r.name)...)
	}
	for i := range replicas {
		replicas[i] = &soakReplica{name: fmt.Sprintf("r%d", i+1)}
		startReplica(replicas[i])
	}
	var unexpected []string // replicas that exited by themselves, or badly on SIGTERM
	checkAlive := func() {
		for _, r := range replicas {
			select {
			case <-r.proc.done:
				unexpected = append(unexpected, fmt.Sprintf("replica %s exited by itself (%v)", r.name, r.proc.err))
				startReplica(r)
			default:
			}
		}
	}

	// The leased tenants' worker: the worker library, with room for more than the pool.
	run := newRunning(func(*worker.Job) time.Duration { return soakJobRunning })
	run.over = func(_ string, n, all int) bool { return n > soakConc || all > soakPool }
	var leased []string
	for _, tn := range tenants {
		if tn.leased {
			leased = append(leased, "jobs.admitted."+tn.load.name+".>")
		}
	}
	w.startPoolWorker("soak", 32, run.handle, leased...)
	// The other tenants' jobs run too (their plans hold no lease), each 300 ms, so that every
	// job's runs are counted at its worker, not only its copies stored.
	others := newRunning(func(*worker.Job) time.Duration { return soakJobRunning })
	var unleased []string
	for _, tn := range tenants {
		if !tn.leased {
			unleased = append(unleased, "jobs.admitted."+tn.load.name+".>")
		}
	}
	w.startPoolWorker("soak-others", 128, others.handle, unleased...)

	var loads []loadTenant
	for _, tn := range tenants {
		loads = append(loads, tn.load)
	}
	start := time.Now()
	ld := startLoad(t, cluster.URLs(), seed, loads, 4)

	// The faults, one at a time: inject, hold, recover; the next one every ~20 s.
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	kinds := []string{"replica kill", "replica pause", "replica restart", "nats kill", "nats pause", "nats restart", "redis kill", "redis pause", "redis restart"}
	if only := os.Getenv("ADMITTER_SOAK_FAULTS"); only != "" {
		var chosen []string
		for _, k := range strings.Split(only, ",") {
			if k = strings.TrimSpace(k); !slices.Contains(kinds, k) {
				t.Fatalf("ADMITTER_SOAK_FAULTS: unknown fault %q, want some of %q", k, kinds)
			}
			chosen = append(chosen, k)
		}
		kinds = chosen
	}
	if dir := os.Getenv("ADMITTER_SOAK_LOGS"); dir != "" {
		t.Cleanup(func() {
			for _, r := range replicas {
				if err := os.WriteFile(filepath.Join(dir, r.name+".log"), []byte(r.proc.logs.String()), 0o644); err != nil {
					t.Errorf("ADMITTER_SOAK_LOGS: %v", err)
				}
			}
		})
	}
	var faults []soakFault
	next := start.Add(every / 2)
	for {
		time.Sleep(time.Until(next))
		if time.Since(start) >= duration {
			break
		}
		checkAlive()
		f := soakFault{at: time.Since(start), kind: kinds[rng.IntN(len(kinds))]}
		switch f.kind {
		case "replica kill":
			r := replicas[rng.IntN(len(replicas))]
			f.target = r.name
			r.proc.kill()
			down := between(time.Second, 10*time.Second)
			time.Sleep(down)
			startReplica(r)
		case "replica pause":
			r := replicas[rng.IntN(len(replicas))]
			f.target = r.name
			_ = r.proc.cmd.Process.Signal(syscall.SIGSTOP)
			time.Sleep(between(2*time.Second, 8*time.Second))
			_ = r.proc.cmd.Process.Signal(syscall.SIGCONT)
		case "replica restart":
			r := replicas[rng.IntN(len(replicas))]
			f.target = r.name
			if code := r.proc.signal(syscall.SIGTERM, 20*time.Second); code != 0 {
				unexpected = append(unexpected, fmt.Sprintf("replica %s exited %d after SIGTERM", r.name, code))
			}
			startReplica(r)
		case "nats kill", "nats pause", "nats restart":
			n := cluster.Nodes[rng.IntN(len(cluster.Nodes))]
			f.target = n.Name
			switch f.kind {
			case "nats kill":
				n.Kill()
				time.Sleep(between(2*time.Second, 10*time.Second))
			case "nats pause":
				n.Pause()
				time.Sleep(between(2*time.Second, 8*time.Second))
				n.Resume()
			default:
				n.Stop()
			}
			if !n.Running() {
				if err := n.Start(); err != nil {
					t.Fatalf("restart nats-server %s: %v", n.Name, err)
				}
			}
		default: // redis
			f.target = "redis"
			switch f.kind {
			case "redis kill":
				redis.Kill()
				time.Sleep(between(0, 3*time.Second))
			case "redis pause":
				redis.Pause()
				time.Sleep(between(time.Second, 5*time.Second))
				redis.Resume()
			default:
				redis.Stop()
			}
			if f.kind != "redis pause" {
				if err := redis.Start(); err != nil {
					t.Fatalf("restart redis: %v", err)
				}
			}
		}
		f.held = time.Since(start) - f.at
		faults = append(faults, f)
		t.Logf("%7.1fs  %-15s %-6s held %.1fs", f.at.Seconds(), f.kind, f.target, f.held.Seconds())
		next = start.Add(f.at + between(every*3/4, every*5/4))
	}
	loadEnd := time.Since(start)
	published := ld.finish(t)
	checkAlive()

	// Everything is up again: wait until every job is forwarded (or nothing moves for 90 s).
	have, last, moved := uint64(0), uint64(0), time.Now()
	for deadline := time.Now().Add(20 * time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		out, err1 := w.countMsgs("ADMITTED")
		dead, err2 := w.countMsgs("DEAD")
		if err1 != nil || err2 != nil { // an election under way: ask again
			continue
		}
		have = out + dead
		if have >= uint64(len(published)) {
			break
		}
		if have != last {
			last, moved = have, time.Now()
		} else if time.Since(moved) > 90*time.Second {
			t.Errorf("nothing forwarded for 90 s with %d of %d jobs forwarded", have, len(published))
			break
		}
	}
	drained := time.Since(start) - loadEnd
	// Every forward stored delivered to its worker and settled there (ran, or put back and ran).
	if !poll(5*time.Minute, func() bool { return w.consumerDone("soak") && w.consumerDone("soak-others") }) {
		t.Errorf("the workers' consumers still had forwards to deliver or settle 5 minutes after the drain")
	}
	got := w.readAll("ADMITTED")
	deadStored := w.readAll("DEAD")
	c := checkInvariants(published, got, deadStored, soakChecked(tenants))
	most, mostAll, _ := run.snapshot()
	runs, _, _ := run.runCounts()
	otherRuns, _, _ := others.runCounts()
	maps.Copy(runs, otherRuns)
	deadSet := map[string]bool{}
	for _, j := range deadStored {
		deadSet[j.payload] = true
	}
	ran := judgeRuns(published, runs, func(p string) bool { return deadSet[p] })
	report := soakReport(start, duration, loadEnd, drained, faults, got, tenants, c, ran, unexpected, most, mostAll)
	t.Logf("soak: seed %d, fail mode %s, redis %s, %d partitions\n%s", seed, failMode, redisMode, parts, report)
	if out := os.Getenv("ADMITTER_SOAK_REPORT"); out != "" {
		if err := os.WriteFile(out, []byte(report), 0o644); err != nil {
			t.Error(err)
		}
	}
	for _, u := range unexpected {
		t.Error(u)
	}
	c.report(t, start)
	if len(ran.twice) > 0 {
		var ex []string
		for _, p := range ran.twice[:min(len(ran.twice), 10)] {
			e := p + ":"
			for _, r := range append(run.runsOf(p), others.runsOf(p)...) {
				e += fmt.Sprintf(" ran %.1fs (%s, delivery %d)", r.at.Sub(start).Seconds(), r.msgID, r.attempt)
			}
			ex = append(ex, e)
		}
		t.Errorf("%d of %d jobs ran more than once at their worker:\n  %s", len(ran.twice), len(published), strings.Join(ex, "\n  "))
	}
	if len(ran.never) > 0 {
		t.Errorf("%d of %d jobs never ran at their worker, e.g. %v", len(ran.never), len(published), ran.never[:min(len(ran.never), 10)])
	}
	if len(ran.both) > 0 {
		t.Errorf("%d jobs ran at their worker and were dead-lettered too, e.g. %v", len(ran.both), ran.both[:min(len(ran.both), 10)])
	}
	for tn, n := range most {
		if n > soakConc {
			t.Errorf("tenant %s: %d jobs ran at once at the worker, limit %d", tn, n, soakConc)
		}
	}
	if mostAll > soakPool {
		t.Errorf("%d jobs ran at once at the worker, the pool allows %d", mostAll, soakPool)
	}
	for _, o := range run.overs {
		t.Logf("over a limit at the worker %s", o)
	}
}

// soakChecked is the checker's view of the tenants: each limit, slack the largest weight.
func soakChecked(tenants []soakTenant) []checkedTenant {
	var out []checkedTenant
	for _, tn := range tenants {
		out = append(out, checkedTenant{name: tn.load.name, limits: tn.limits, slack: float64(tn.load.maxW)})
	}
	return out
}

// soakForward is a forward as the report reads it.
type soakForward struct {
	job           string
	stored, input time.Time // stored downstream; its input stored (stored - Admit-Delay-Ms)
	weight        float64
	degraded      bool
}

// faultCost is what the forwards in one window show.
type faultCost struct {
	stall       time.Duration // the longest wait of a job beyond its plan's spacing while jobs waited
	stallTenant string
	quietMax    time.Duration // the longest publish → forward of a tenant within its plan
	quietJob    string        // that job
	failOpen    int
}

// soakCosts measures each fault's window, from its start to 15 s after it ended (or the next
// fault), and the windows without a fault (the last element).
func soakCosts(start time.Time, loadEnd time.Duration, faults []soakFault, got []job, tenants []soakTenant) (perFault []faultCost, calm faultCost) {
	const after = 15 * time.Second
	window := func(at time.Time) int { // the fault whose window holds at, -1 for none
		d := at.Sub(start)
		for i, f := range faults {
			end := f.at + f.held + after
			if i+1 < len(faults) {
				end = min(end, faults[i+1].at)
			}
			if d >= f.at && d < end {
				return i
			}
		}
		return -1
	}
	perFault = make([]faultCost, len(faults))
	cost := func(at time.Time) *faultCost {
		if i := window(at); i >= 0 {
			return &perFault[i]
		}
		if at.Sub(start) > loadEnd { // the drain after the load is no calm time
			return &faultCost{}
		}
		return &calm
	}
	byTenant := map[string][]soakForward{}
	for _, j := range got {
		ms, _ := strconv.ParseInt(j.header.Get(wire.HeaderDelayMs), 10, 64)
		wt, _ := strconv.Atoi(j.header.Get(wire.HeaderWeight))
		f := soakForward{job: j.payload, stored: j.stored, input: j.stored.Add(-time.Duration(ms) * time.Millisecond), weight: float64(max(wt, 1)),
			degraded: j.header.Get(wire.HeaderDegraded) == wire.DegradedFailOpen}
		tn := j.header.Get(wire.HeaderTenant)
		byTenant[tn] = append(byTenant[tn], f)
		if f.degraded {
			cost(f.stored).failOpen++
		}
	}
	for _, tn := range tenants {
		if tn.leased {
			continue // paced by the workers' slots, not by a rate
		}
		fs := byTenant[tn.load.name]
		slices.SortFunc(fs, func(a, b soakForward) int { return a.stored.Compare(b.stored) })
		rate := tn.limits[0].rate
		for _, l := range tn.limits {
			rate = min(rate, l.rate)
		}
		for k, b := range fs {
			if tn.quiet {
				if c := cost(b.input); b.stored.Sub(b.input) > c.quietMax {
					c.quietMax, c.quietJob = b.stored.Sub(b.input), fmt.Sprintf("%s (published %.3fs, stored %.3fs)", b.job, b.input.Sub(start).Seconds(), b.stored.Sub(start).Seconds())
				}
			}
			if k == 0 {
				continue
			}
			a := fs[k-1]
			if b.input.After(a.stored) { // b was not waiting through the gap
				continue
			}
			spacing := time.Duration(b.weight / rate * float64(time.Second))
			if s := b.stored.Sub(a.stored) - spacing; s > 0 {
				if c := cost(a.stored); s > c.stall {
					c.stall, c.stallTenant = s, tn.load.name
				}
			}
		}
	}
	return perFault, calm
}

// soakReport is the soak's tables: the faults and what each cost, the costs by kind, and the
// invariants.
func soakReport(start time.Time, duration, loadEnd, drained time.Duration, faults []soakFault, got []job, tenants []soakTenant,
	c invariantCheck, ran runVerdict, unexpected []string, most map[string]int, mostAll int) string {
	perFault, calm := soakCosts(start, loadEnd, faults, got, tenants)
	var b strings.Builder
	secs := func(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) }
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(&b, "faults injected (%d in %v; costs over the fault and the 15 s after it):\n", len(faults), duration)
	fmt.Fprintln(tw, "#\tat s\tfault\ttarget\theld s\tlongest stall s\t(tenant)\tquiet max delay s\tfail-open")
	for i, f := range faults {
		pc := perFault[i]
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", i+1, secs(f.at), f.kind, f.target, secs(f.held), secs(pc.stall), pc.stallTenant, secs(pc.quietMax), pc.failOpen)
	}
	fmt.Fprintf(tw, "-\t\tno fault\t\t\t%s\t%s\t%s\t%d\n", secs(calm.stall), calm.stallTenant, secs(calm.quietMax), calm.failOpen)
	tw.Flush()
	slowest := calm
	for _, pc := range perFault {
		if pc.quietMax > slowest.quietMax {
			slowest = pc
		}
	}
	if slowest.quietJob != "" {
		fmt.Fprintf(&b, "slowest job of a tenant within its plan: %s, %s s\n", slowest.quietJob, secs(slowest.quietMax))
	}

	fmt.Fprintf(&b, "\nby kind:\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "fault\tcount\theld s (median)\tlongest stall s (median / max)\tquiet max delay s (median / max)\tfail-open")
	byKind := map[string][]int{}
	var kinds []string
	for i, f := range faults {
		if byKind[f.kind] == nil {
			kinds = append(kinds, f.kind)
		}
		byKind[f.kind] = append(byKind[f.kind], i)
	}
	slices.Sort(kinds)
	median := func(ds []time.Duration) (time.Duration, time.Duration) {
		slices.Sort(ds)
		return ds[len(ds)/2], ds[len(ds)-1]
	}
	for _, k := range kinds {
		var held, stall, quiet []time.Duration
		open := 0
		for _, i := range byKind[k] {
			held, stall, quiet = append(held, faults[i].held), append(stall, perFault[i].stall), append(quiet, perFault[i].quietMax)
			open += perFault[i].failOpen
		}
		hm, _ := median(held)
		sm, sx := median(stall)
		qm, qx := median(quiet)
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s / %s\t%s / %s\t%d\n", k, len(byKind[k]), secs(hm), secs(sm), secs(sx), secs(qm), secs(qx), open)
	}
	tw.Flush()

	held, all := c.pacingHeld()
	worst := limitPacing{excess: -1e18}
	for _, p := range c.pacing {
		if p.excess-p.slack > worst.excess-worst.slack {
			worst = p
		}
	}
	fmt.Fprintf(&b, "\ninvariants:\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	row := func(name, value string, ok bool) {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", name, value, map[bool]string{true: "held", false: "BROKEN"}[ok])
	}
	row("jobs published", strconv.Itoa(c.published), true)
	row("forwarded", fmt.Sprintf("%d (%d after the load ended, drained in %s s)", c.forwarded, countAfter(got, start.Add(loadEnd)), secs(drained)), true)
	row("lost", strconv.Itoa(len(c.lost)), len(c.lost) == 0)
	row("forwarded twice", strconv.Itoa(len(c.twice)), len(c.twice) == 0)
	row("forwarded, never published", strconv.Itoa(len(c.unknown)), len(c.unknown) == 0)
	row("dead-lettered", strconv.Itoa(c.dead), c.dead == 0)
	once := c.published - len(ran.twice) - len(ran.never)
	row("run exactly once at its worker", fmt.Sprintf("%d of %d (more than once %d, never %d, run and dead-lettered %d)",
		once, c.published, len(ran.twice), len(ran.never), len(ran.both)), once == c.published && len(ran.both) == 0)
	row("pacing: limits within C + r·t + slack", fmt.Sprintf("%d of %d (fail-open forwards left out: %d); worst: tenant %s, C %v r %v/s, %+.2f over C + r·t (slack %v)",
		held, all, c.degraded, worst.tenant, worst.limit.capacity, worst.limit.rate, worst.excess, worst.slack), held == all)
	row("replicas exited on their own or badly", strconv.Itoa(len(unexpected)), len(unexpected) == 0)
	mostTenant, tenantOf := 0, ""
	for tn, n := range most {
		if n > mostTenant {
			mostTenant, tenantOf = n, tn
		}
	}
	row("most jobs running at the worker, one tenant", fmt.Sprintf("%d of concurrency limit %d (%s)", mostTenant, soakConc, tenantOf), mostTenant <= soakConc)
	row("most jobs running at the worker, the pool", fmt.Sprintf("%d of %d", mostAll, soakPool), mostAll <= soakPool)
	tw.Flush()

	// Each pacing bound broken: the forwards in its worst interval and the faults around it.
	for _, p := range c.pacing {
		if p.held() {
			continue
		}
		fmt.Fprintf(&b, "\ntenant %s, C %v r %v/s: %+.2f over C + r·t in [%.3fs, %.3fs]; forwards there (stored s, job, weight, waited ms, decisions):\n",
			p.tenant, p.limit.capacity, p.limit.rate, p.excess, p.from.Sub(start).Seconds(), p.to.Sub(start).Seconds())
		for _, j := range got {
			if j.header.Get(wire.HeaderTenant) == p.tenant && j.header.Get(wire.HeaderDegraded) == "" && !j.stored.Before(p.from) && !j.stored.After(p.to) {
				fmt.Fprintf(&b, "  %.3f %s w%s %sms x%s\n", j.stored.Sub(start).Seconds(), j.payload, j.header.Get(wire.HeaderWeight),
					j.header.Get(wire.HeaderDelayMs), j.header.Get(wire.HeaderAttempts))
			}
		}
		for _, f := range faults {
			if at := start.Add(f.at); at.Before(p.to) && at.Add(f.held+15*time.Second).After(p.from) {
				fmt.Fprintf(&b, "  during or after: %s %s at %.1fs, held %.1fs\n", f.kind, f.target, f.at.Seconds(), f.held.Seconds())
			}
		}
	}
	return b.String()
}

func countAfter(got []job, at time.Time) int {
	n := 0
	for _, j := range got {
		if j.stored.After(at) {
			n++
		}
	}
	return n
}
