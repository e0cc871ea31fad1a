package bench

import (
	"context"
	"fmt"
)

// scenario is one part of a run: it measures into its section of the report (and may add
// notes), or returns why it could not.
type scenario struct {
	name string
	run  func(ctx context.Context, e *env, p *progress, rep *Report) error
}

// scenarios are every scenario in the order they run (AllScenarios are their names).
var scenarios = []scenario{
	{ScenarioDecisions, func(ctx context.Context, e *env, p *progress, rep *Report) error {
		d, err := e.decisions(ctx, p)
		if err != nil {
			return err
		}
		rep.Decisions = d
		denied := d.Ours.Denied + d.RedisRate.Denied + d.Ceiling.Denied
		for _, k := range d.Kinds {
			denied += k.Denied
		}
		if denied > 0 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("decisions denied (expected none): %d", denied))
		}
		return nil
	}},
	{ScenarioSync, func(ctx context.Context, e *env, p *progress, rep *Report) error {
		s, err := e.synchronous(ctx, p)
		if err != nil {
			return err
		}
		rep.Sync = s
		if s.HTTP.Denied+s.NATS.Denied+s.Peer.Denied > 0 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("sync decisions denied (expected none): http %d, nats %d, redis_rate net/http %d", s.HTTP.Denied, s.NATS.Denied, s.Peer.Denied))
		}
		return nil
	}},
	{ScenarioEndToEnd, func(ctx context.Context, e *env, p *progress, rep *Report) error {
		r, err := e.endToEnd(ctx, p)
		if err != nil {
			return err
		}
		rep.EndToEnd = r
		rep.Notes = append(rep.Notes, r.Notes...)
		return nil
	}},
	{ScenarioReplicas, func(ctx context.Context, e *env, p *progress, rep *Report) error {
		r, err := e.replicas(ctx, p)
		if err != nil {
			return err
		}
		rep.Replicas = r
		return nil
	}},
	{ScenarioBacklog, func(ctx context.Context, e *env, p *progress, rep *Report) error {
		b, err := e.backlog(ctx, p)
		if err != nil {
			return err
		}
		rep.Backlog = b
		for _, r := range b.Runs {
			if r.Duplicates > 0 {
				rep.Notes = append(rep.Notes, fmt.Sprintf("backlog at start, %s: %d jobs of the backlog forwarded twice (the same Nats-Msg-Id received again by a subscriber on jobs.admitted.>; ADMITTED stores %d for %d jobs and %d of the new tenant)",
					r.Name, r.Duplicates, r.Stored, r.Received, r.New.Samples))
			}
		}
		return nil
	}},
	{ScenarioLarge, func(ctx context.Context, e *env, p *progress, rep *Report) error {
		l, err := e.large(ctx, p)
		if err != nil {
			return err
		}
		rep.Large = l
		return nil
	}},
	{ScenarioOverload, func(ctx context.Context, e *env, p *progress, rep *Report) error {
		o := e.o
		what := fmt.Sprintf("overload: tenant %s (%d at %d/s) at %g× for %v, watched %v more", overloadTenant,
			o.OverloadCapacity, o.OverloadRate, o.OverloadFactor, o.OverloadDuration, o.OverloadTail)
		return p.phase(what, func() (string, error) {
			ov, err := e.overload(ctx)
			if err != nil {
				return "", err
			}
			rep.Overload = ov
			return fmt.Sprintf("%d admitted at load end vs %.1f expected (%+.2f%%), worst lag %s jobs at t=%.1fs, %.2f attempts/job",
				ov.AdmittedAtEnd, ov.Expected, ov.ErrorPct, count(ov.WorstLagJobs), ov.WorstLagAtS, ov.AttemptsMean), nil
		})
	}},
	{ScenarioFlood, func(ctx context.Context, e *env, p *progress, rep *Report) error {
		f, err := e.flood(ctx, p)
		if err != nil {
			return err
		}
		rep.Flood = f
		return nil
	}},
	{ScenarioFair, func(ctx context.Context, e *env, p *progress, rep *Report) error {
		f, err := e.fair(ctx, p)
		if err != nil {
			return err
		}
		rep.Fair = f
		if f.Forwarded != int64(f.Tenants*f.JobsPerTenant) {
			rep.Notes = append(rep.Notes, fmt.Sprintf("fair: %d forwards received for %d jobs", f.Forwarded, f.Tenants*f.JobsPerTenant))
		}
		return nil
	}},
	{ScenarioCrowd, func(ctx context.Context, e *env, p *progress, rep *Report) error {
		c, err := e.crowd(ctx, p)
		if err != nil {
			return err
		}
		rep.Crowd = c
		if c.Forwarded != int64(c.Tenants*c.JobsPerTenant) {
			rep.Notes = append(rep.Notes, fmt.Sprintf("crowd: %d forwards received for %d jobs", c.Forwarded, c.Tenants*c.JobsPerTenant))
		}
		return nil
	}},
	{ScenarioPool, func(ctx context.Context, e *env, p *progress, rep *Report) error {
		f, err := e.pool(ctx, p)
		if err != nil {
			return err
		}
		rep.Pool = f
		if f.QuietMissing > 0 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("pool: %d quiet jobs published in the window were not forwarded within %v of its end (counted with their wait so far)", f.QuietMissing, poolQuietGrace))
		}
		if f.RanOutEarly > 0 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("pool: %d tenants received their whole backlog before every tenant had been served (the first queues found had the pool to themselves): left out of the figures", f.RanOutEarly))
		}
		return nil
	}},
	{ScenarioDownstream, func(ctx context.Context, e *env, p *progress, rep *Report) error {
		d, err := e.downstream(ctx, p)
		if err != nil {
			return err
		}
		rep.Downstream = d
		for _, r := range []*DownstreamRun{&d.Adaptive, &d.Fixed} {
			if r.RanOut > 0 {
				rep.Notes = append(rep.Notes, fmt.Sprintf("downstream (pool %s): %d tenants had their whole backlog done before the end (their share no longer held)", r.Pool, r.RanOut))
			}
		}
		return nil
	}},
}
