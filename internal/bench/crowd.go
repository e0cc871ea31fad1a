package bench

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
)

// Crowd is the crowd scenario: a burst is not a noisy neighbour. Tenants tenants fire
// JobsPerTenant jobs each at once (tenant by tenant, each its jobs in a row, as fast as an
// async publisher goes), each on a plan of Capacity at RatePerSecond/s: the plan lets every
// tenant's last job go PlanS after its first ((jobs − capacity)/rate), and the admitter, with
// every tenant waiting on its plan most of the time, should not add much to that. The admitter
// and nats-server run as processes of their own.
type Crowd struct {
	Tenants       int     `json:"tenants"`
	JobsPerTenant int     `json:"jobs_per_tenant"`
	Capacity      int64   `json:"capacity"`
	RatePerSecond float64 `json:"rate_per_second"`
	PlanS         float64 `json:"plan_s"`
	// PublishS is the first publish → the last PubAck.
	PublishS  float64 `json:"publish_s"`
	Forwarded int64   `json:"forwarded"`
	// Done is each tenant's first publish → its last job received downstream, in seconds:
	// median, 99th percentile, most (the slowest tenant, SlowestTenant); Late counts the tenants
	// done more than a second after PlanS.
	DoneP50S      float64 `json:"done_p50_s"`
	DoneP99S      float64 `json:"done_p99_s"`
	DoneMaxS      float64 `json:"done_max_s"`
	SlowestTenant string  `json:"slowest_tenant"`
	Late          int     `json:"late_tenants"`
	// DonePerSecond counts the tenants done in each second after their first publish ([0] in
	// the first second).
	DonePerSecond []int `json:"done_per_second"`
	// First is each tenant's first publish → its first job received: median and most.
	FirstP50S float64 `json:"first_p50_s"`
	FirstMaxS float64 `json:"first_max_s"`
	// OverallS is the first publish of all → the last job received.
	OverallS float64 `json:"overall_s"`
	// PacingViolations counts the jobs received before their plan let them go: the k-th job of
	// a tenant received less than (k − capacity)/rate after the tenant's first publish. The
	// first publish comes before the first decision, and a job is received after it was
	// decided, so no delay can make a job look early: a violation is a plan overrun. EarliestMs
	// is how early the earliest was.
	PacingViolations int64   `json:"pacing_violations"`
	EarliestMs       float64 `json:"earliest_ms"`
	// CPU seconds the two processes used from the first publish to the last job received.
	AdmitterCPUS float64 `json:"admitter_cpu_s"`
	NATSCPUS     float64 `json:"nats_server_cpu_s"`
}

// crowdSlack is how much later than its plan's pace a tenant of the crowd may finish: the goal.
const crowdSlack = time.Second

// CrowdFigures computes the crowd scenario's figures from each tenant's first publish
// (first[i] for tenant names[i]) and the forwards the subscriber received, in order.
func CrowdFigures(first []time.Time, jobs []landed, names []string, perTenant int, capacity int64, rate float64) Crowd {
	c := Crowd{Tenants: len(names), JobsPerTenant: perTenant, Capacity: capacity, RatePerSecond: rate, Forwarded: int64(len(jobs))}
	c.PlanS = round(max(float64(int64(perTenant)-capacity), 0)/rate, 3)
	if len(jobs) == 0 || len(first) == 0 {
		return c
	}
	seen := make([]int64, len(names))
	firstIn := make([]time.Duration, len(names))
	lastIn := make([]time.Duration, len(names))
	var earliest time.Duration
	for _, j := range jobs {
		since := j.at.Sub(first[j.tenant])
		seen[j.tenant]++
		if seen[j.tenant] == 1 {
			firstIn[j.tenant] = since
		}
		lastIn[j.tenant] = since
		if k := seen[j.tenant]; k > capacity {
			allowed := time.Duration(float64(k-capacity) / rate * float64(time.Second))
			if since < allowed {
				c.PacingViolations++
				earliest = max(earliest, allowed-since)
			}
		}
	}
	c.EarliestMs = ms(earliest)
	var done, firsts []time.Duration
	slowest := -1
	for i, n := range seen {
		if n == 0 {
			continue
		}
		done = append(done, lastIn[i])
		firsts = append(firsts, firstIn[i])
		if slowest < 0 || lastIn[i] > lastIn[slowest] {
			slowest = i
		}
		if lastIn[i] > time.Duration(c.PlanS*float64(time.Second))+crowdSlack {
			c.Late++
		}
		s := int(lastIn[i] / time.Second)
		for len(c.DonePerSecond) <= s {
			c.DonePerSecond = append(c.DonePerSecond, 0)
		}
		c.DonePerSecond[s]++
	}
	c.SlowestTenant = names[slowest]
	slices.Sort(done)
	slices.Sort(firsts)
	c.DoneP50S = round(Percentile(done, 50).Seconds(), 3)
	c.DoneP99S = round(Percentile(done, 99).Seconds(), 3)
	c.DoneMaxS = round(done[len(done)-1].Seconds(), 3)
	c.FirstP50S = round(Percentile(firsts, 50).Seconds(), 3)
	c.FirstMaxS = round(firsts[len(firsts)-1].Seconds(), 3)
	c.OverallS = round(jobs[len(jobs)-1].at.Sub(slices.MinFunc(first, time.Time.Compare)).Seconds(), 3)
	return c
}

// crowd runs the crowd scenario.
func (e *env) crowd(ctx context.Context, p *progress) (*Crowd, error) {
	o := e.o
	admitterBin, srv, err := e.processWorld(ctx)
	if err != nil {
		return nil, err
	}
	defer srv.proc.stop()
	adm, err := e.startAdmitterProc(admitterBin, srv.url, fmt.Sprintf("plans:\n  crowd: {limits: [{capacity: %d, rate: %d/s}]}\ndefault_plan: crowd\n",
		o.CrowdCapacity, o.CrowdRate), admitterSettings(o, 0)...)
	if err != nil {
		return nil, err
	}
	defer adm.stop()
	if err := adm.waitReady(ctx, 30*time.Second); err != nil {
		return nil, err
	}
	nc, _, err := connect(srv.url, "bench-downstream")
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	names := tenantNames(o.CrowdTenants)
	col, err := subscribeLanded(nc, names)
	if err != nil {
		return nil, err
	}
	defer col.stop()
	pub, err := newAsyncPublisher(srv.url, "bench-producer")
	if err != nil {
		return nil, err
	}
	defer pub.close()
	total := o.CrowdTenants * o.CrowdJobs
	var c Crowd
	what := fmt.Sprintf("crowd: %s tenants fire %d jobs each at once (%s), each on {capacity: %d, rate: %d/s}",
		count(float64(o.CrowdTenants)), o.CrowdJobs, count(float64(total)), o.CrowdCapacity, o.CrowdRate)
	if err := p.phase(what, func() (string, error) {
		first := make([]time.Time, len(names))
		admCPU0, natsCPU0 := cpuSeconds(adm.proc.cmd.Process.Pid), cpuSeconds(srv.proc.cmd.Process.Pid)
		begin := time.Now()
		for i, name := range names {
			subject := prefixIn + name + ".work"
			first[i] = time.Now()
			for range o.CrowdJobs {
				if err := pub.publish(&nats.Msg{Subject: subject, Data: payload}); err != nil {
					return "", err
				}
			}
			if err := ctx.Err(); err != nil {
				return "", err
			}
		}
		if err := pub.complete(ctx); err != nil {
			return "", err
		}
		publishS := time.Since(begin).Seconds()
		plan := time.Duration(float64(o.CrowdJobs) / float64(o.CrowdRate) * float64(time.Second))
		if err := col.waitCount(ctx, int64(total), time.Minute+plan, adm.exited); err != nil {
			return "", err
		}
		admCPU, natsCPU := cpuSeconds(adm.proc.cmd.Process.Pid)-admCPU0, cpuSeconds(srv.proc.cmd.Process.Pid)-natsCPU0
		c = CrowdFigures(first, col.stop(), names, o.CrowdJobs, int64(o.CrowdCapacity), float64(o.CrowdRate))
		c.PublishS = round(publishS, 3)
		c.AdmitterCPUS, c.NATSCPUS = round(admCPU, 2), round(natsCPU, 2)
		return fmt.Sprintf("tenants done after p50 %.2fs, p99 %.2fs, max %.2fs (plan: %.1fs); %d late, %d pacing violations",
			c.DoneP50S, c.DoneP99S, c.DoneMaxS, c.PlanS, c.Late, c.PacingViolations), nil
	}); err != nil {
		return nil, err
	}
	p.say(fmt.Sprintf("crowd: published in %.2fs; first job through after p50 %.2fs, max %.2fs; all done %.2fs after the first publish; slowest %s; tenants done per second %v",
		c.PublishS, c.FirstP50S, c.FirstMaxS, c.OverallS, c.SlowestTenant, c.DonePerSecond))
	return &c, nil
}
