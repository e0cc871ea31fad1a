package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Fair is the fair-share scenario: when more tenants have jobs that may go now than the admitter
// can forward, they are served in turn, not in the order their jobs arrived. Tenants tenants
// each have a backlog of JobsPerTenant jobs, published tenant by tenant before the admitter
// starts (the order in which serving jobs as they arrived would forward the first tenants'
// whole backlogs before the last tenants' first job), on a plan far faster than the system:
// the admitter (and NATS) is the bottleneck and every tenant may go all along. Each tenant's
// forwards are counted over the window where every tenant is known to the admitter and still
// has a backlog: from when the first tenth of all the jobs has been forwarded and every tenant
// has had one (the start-up, while the admitter learns of the tenants in the order their jobs
// were stored, is reported apart) until the first tenant's last job is. The admitter and
// nats-server run as processes of their own.
type Fair struct {
	Tenants       int `json:"tenants"`
	JobsPerTenant int `json:"jobs_per_tenant"`
	// Settings is the admitter's environment that differs from its defaults ("" for none).
	Settings string  `json:"admitter_settings"`
	PublishS float64 `json:"publish_s"`
	// FirstForwardS is the admitter's start → the first forward received; DrainS → the last.
	FirstForwardS  float64 `json:"first_forward_s"`
	DrainS         float64 `json:"drain_s"`
	DrainPerSecond float64 `json:"drain_per_second"`
	// Forwarded is every forward received (Tenants × JobsPerTenant, unless some came twice).
	Forwarded int64 `json:"forwarded"`
	// Start-up: every tenant had had a forward once AllServed jobs were forwarded (0: never,
	// some tenant ran out first), AllServedS after the admitter's start; StartLeader is the
	// tenant that had had the most by then.
	AllServed   int         `json:"all_served_after"`
	AllServedS  float64     `json:"all_served_s"`
	StartLeader TenantCount `json:"start_leader"`
	// The window: the forwards received from the WindowFrom-th to before the WindowTo-th
	// (counting from 0), WindowS long; PerSecond is the throughput over it.
	WindowFrom int     `json:"window_from"`
	WindowTo   int     `json:"window_to"`
	WindowS    float64 `json:"window_s"`
	PerSecond  float64 `json:"window_per_second"`
	// Every tenant's forwards in the window: their mean, least and most.
	Mean float64 `json:"mean_per_tenant"`
	Min  int64   `json:"min_per_tenant"`
	Max  int64   `json:"max_per_tenant"`
	// Jain is Jain's fairness index of the counts, (Σx)²/(n·Σx²): 1 when all are equal, 1/n
	// when one tenant has everything; it is 1/(1+CV²), CV the counts' coefficient of variation.
	Jain float64 `json:"jain_index"`
	// MaxDeviationPct is the largest |count/mean − 1| in percent; WithinPct the share of tenants
	// within ±10 % of the mean, in percent.
	MaxDeviationPct float64 `json:"max_deviation_pct"`
	WithinPct       float64 `json:"within_10pct_share_pct"`
	// FirstTenth and LastTenth are the mean count of the first and of the last tenth of the
	// tenants in publishing order, over the mean: both 1 when the order of arrival does not
	// matter; above 1 and below 1 when the first are favoured.
	FirstTenth float64 `json:"first_tenth_vs_mean"`
	LastTenth  float64 `json:"last_tenth_vs_mean"`
	// Lowest and Highest are the tenants with the fewest and the most forwards in the window.
	Lowest  []TenantCount `json:"lowest"`
	Highest []TenantCount `json:"highest"`
	// CPU seconds the two processes used from the admitter's start to the last forward.
	AdmitterCPUS float64 `json:"admitter_cpu_s"`
	NATSCPUS     float64 `json:"nats_server_cpu_s"`
}

// TenantCount is one tenant's forwards in the fair scenario's window.
type TenantCount struct {
	Tenant string `json:"tenant"`
	Count  int64  `json:"count"`
}

// landed is one forward the downstream subscriber received: its tenant (an index into the
// scenario's tenants) and when.
type landed struct {
	tenant int32
	at     time.Time
}

// fairExtremes is how many of the lowest and of the highest tenants Fair lists.
const fairExtremes = 5

// FairFigures computes the fair scenario's figures from the forwards in the order the
// subscriber received them (jobs[i].tenant an index into names, names in publishing order),
// each tenant having had perTenant jobs. The window starts once a tenth of every job has been
// forwarded and every tenant has had a forward (the admitter knows them all), and ends before
// the forward of the first tenant's last job; if a tenant ran out before it could start, it
// starts at the first forward (the start-up was itself unfair).
func FairFigures(jobs []landed, names []string, perTenant int) Fair {
	f := Fair{Tenants: len(names), JobsPerTenant: perTenant, Forwarded: int64(len(jobs))}
	n := len(names)
	if n == 0 || len(jobs) == 0 {
		return f
	}
	seen := make([]int, n)
	to, allServed, served := len(jobs), len(jobs), 0
	for i, j := range jobs {
		seen[j.tenant]++
		if seen[j.tenant] == 1 {
			if served++; served == n {
				allServed = i + 1
				leader := slices.Index(seen, slices.Max(seen))
				f.AllServed, f.StartLeader = allServed, TenantCount{Tenant: names[leader], Count: int64(seen[leader])}
			}
		}
		if seen[j.tenant] == perTenant {
			to = i
			break
		}
	}
	from := max(n*perTenant/10, allServed)
	if from >= to {
		from = 0
	}
	f.WindowFrom, f.WindowTo = from, to
	counts := make([]int64, n)
	for _, j := range jobs[from:to] {
		counts[j.tenant]++
	}
	if to > from+1 {
		d := jobs[to-1].at.Sub(jobs[from].at)
		f.WindowS = round(d.Seconds(), 3)
		f.PerSecond = round(PerSecond(int64(to-from-1), d), 1)
	}
	var sum, squares float64
	for _, c := range counts {
		sum += float64(c)
		squares += float64(c) * float64(c)
	}
	m := sum / float64(n)
	f.Mean = round(m, 2)
	f.Min, f.Max = slices.Min(counts), slices.Max(counts)
	if squares > 0 {
		f.Jain = round(sum*sum/(float64(n)*squares), 4)
	}
	var worst float64
	within := 0
	for _, c := range counts {
		dev := 1.0
		if m > 0 {
			dev = abs(float64(c)/m - 1)
		}
		worst = max(worst, dev)
		if dev <= 0.1 {
			within++
		}
	}
	f.MaxDeviationPct = round(100*worst, 2)
	f.WithinPct = round(100*float64(within)/float64(n), 2)
	tenth := max(n/10, 1)
	f.FirstTenth = round(Ratio(mean(counts[:tenth]), m), 3)
	f.LastTenth = round(Ratio(mean(counts[n-tenth:]), m), 3)
	byCount := make([]int, n)
	for i := range byCount {
		byCount[i] = i
	}
	slices.SortStableFunc(byCount, func(a, b int) int { return int(counts[a] - counts[b]) })
	k := min(fairExtremes, n)
	for _, i := range byCount[:k] {
		f.Lowest = append(f.Lowest, TenantCount{Tenant: names[i], Count: counts[i]})
	}
	for _, i := range slices.Backward(byCount[n-k:]) {
		f.Highest = append(f.Highest, TenantCount{Tenant: names[i], Count: counts[i]})
	}
	return f
}

func abs(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}

// admitterSettings is the environment of an admitter process for what the options set:
// o.Workers and quantum, nothing where they leave the admitter's default (0).
func admitterSettings(o Options, quantum int) []string {
	var env []string
	if o.Workers > 0 {
		env = append(env, "ADMITTER_WORKERS="+strconv.Itoa(o.Workers))
	}
	if quantum > 0 {
		env = append(env, "ADMITTER_QUANTUM="+strconv.Itoa(quantum))
	}
	return env
}

// subscribeLanded collects every forward on jobs.admitted.> of one of names (by name; another
// tenant's is counted but not kept).
func subscribeLanded(nc *nats.Conn, names []string) (*collector[landed], error) {
	index := make(map[string]int32, len(names))
	for i, name := range names {
		index[name] = int32(i)
	}
	return collect(nc, prefixOut+">", func(m *nats.Msg, now time.Time) (landed, bool) {
		tenant, _, _ := strings.Cut(strings.TrimPrefix(m.Subject, prefixOut), ".")
		i, ok := index[tenant]
		return landed{tenant: i, at: now}, ok
	})
}

// fair runs the fair-share scenario.
func (e *env) fair(ctx context.Context, p *progress) (*Fair, error) {
	o := e.o
	admitterBin, srv, err := e.processWorld(ctx)
	if err != nil {
		return nil, err
	}
	defer srv.proc.stop()
	names := tenantNames(o.FairTenants)
	total := o.FairTenants * o.FairJobs
	var publishS float64
	if err := p.phase(fmt.Sprintf("fair: publish %s jobs tenant by tenant (%s tenants × %d)", count(float64(total)), count(float64(o.FairTenants)), o.FairJobs), func() (string, error) {
		subj := make([]string, len(names))
		for i, name := range names {
			subj[i] = prefixIn + name + ".work"
		}
		begin := time.Now()
		if err := prepublishTo(ctx, srv.url, total, func(i int) string { return subj[i/o.FairJobs] }); err != nil {
			return "", err
		}
		publishS = time.Since(begin).Seconds()
		return fmt.Sprintf("%s jobs/s", count(float64(total)/publishS)), nil
	}); err != nil {
		return nil, err
	}
	nc, _, err := connect(srv.url, "bench-downstream")
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	col, err := subscribeLanded(nc, names)
	if err != nil {
		return nil, err
	}
	defer col.stop()
	settings := admitterSettings(o, o.FairQuantum)
	shown := strings.Join(settings, " ")
	if shown == "" {
		shown = "its defaults"
	}
	var f Fair
	if err := p.phase("fair: the admitter drains them, with "+shown, func() (string, error) {
		begin := time.Now()
		adm, err := e.startAdmitterProc(admitterBin, srv.url, "plans:\n  fast: {limits: [{capacity: 1000000, rate: 1000000/s}]}\ndefault_plan: fast\n", settings...)
		if err != nil {
			return "", err
		}
		defer adm.stop()
		natsCPU0 := cpuSeconds(srv.proc.cmd.Process.Pid)
		bound := time.Minute + time.Duration(total)*time.Millisecond // at least 1000 jobs/s
		if err := col.waitCount(ctx, int64(total), bound, adm.exited); err != nil {
			return "", adm.annotate(ctx, err)
		}
		admCPU, natsCPU := cpuSeconds(adm.proc.cmd.Process.Pid), cpuSeconds(srv.proc.cmd.Process.Pid)-natsCPU0
		jobs := col.stop()
		f = FairFigures(jobs, names, o.FairJobs)
		f.Settings = strings.Join(settings, " ")
		f.PublishS = round(publishS, 2)
		if f.AllServed > 0 {
			f.AllServedS = round(jobs[f.AllServed-1].at.Sub(begin).Seconds(), 3)
		}
		if len(jobs) > 0 {
			f.FirstForwardS = round(jobs[0].at.Sub(begin).Seconds(), 3)
			last := jobs[len(jobs)-1].at.Sub(begin)
			f.DrainS = round(last.Seconds(), 3)
			f.DrainPerSecond = round(PerSecond(int64(len(jobs)), last), 1)
		}
		f.AdmitterCPUS, f.NATSCPUS = round(admCPU, 2), round(natsCPU, 2)
		return fmt.Sprintf("%s jobs/s over the window of %s forwards; Jain %.4f, max deviation %.1f%%, %.1f%% of tenants within ±10%%",
			count(f.PerSecond), count(float64(f.WindowTo-f.WindowFrom)), f.Jain, f.MaxDeviationPct, f.WithinPct), nil
	}); err != nil {
		return nil, err
	}
	p.say(fmt.Sprintf("fair: start-up: every tenant served once after %s forwards (%.2fs), when %s had had %d",
		count(float64(f.AllServed)), f.AllServedS, f.StartLeader.Tenant, f.StartLeader.Count))
	p.say(fmt.Sprintf("fair: window: forwards %s to %s; first tenth of the tenants %.2f× the mean, last tenth %.2f×; fewest %s, most %s",
		count(float64(f.WindowFrom)), count(float64(f.WindowTo)), f.FirstTenth, f.LastTenth, tenantCounts(f.Lowest), tenantCounts(f.Highest)))
	return &f, nil
}

// tenantCounts writes tenants' counts as t0001:12 t0002:13.
func tenantCounts(tc []TenantCount) string {
	parts := make([]string, len(tc))
	for i, c := range tc {
		parts[i] = c.Tenant + ":" + strconv.FormatInt(c.Count, 10)
	}
	return strings.Join(parts, " ")
}
