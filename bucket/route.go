package bucket

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Several replicas share Redis. A replica that cannot reach it while another can decides nothing
// on its copy: every decision it makes (its queues' admissions too) is relayed to a replica that
// reaches Redis, and decided there (Router.Relay); the Redis away from one replica is not a second
// decider beside the Redis the others reach. Only when no replica reaches Redis does each decide
// on its own copy, and then what the copies of two replicas would both decide must be decided by
// one of them, or each could give a limit away in full: a tenant's requests, lease messages and
// inspections (which reach any replica) are decided by the replica that runs the tenant's queue,
// whose copy holds its state; a pool's slots (taken for the tenants of every replica) by one
// replica for the whole pool. A Router names that replica and carries the question to it
// (package admission: over NATS); the replica answers with Serve. A question is one decision
// about one key: answering it never asks another replica. A tenant's question that finds no
// answer is decided here, on this replica's copy (which does not know the tenant: it is taken as
// forgotten); a pool's is an error (the job waits).

// A Router routes what the copy decides to the replica that decides it (see above).
type Router interface {
	// Since is since when this replica decides for key (RouteTenant or RoutePool of a name)
	// without a break: the start of its tenure (it may be later than the real start, never
	// earlier), the same time for every call within one tenure; zero when another replica
	// decides key. A copy of a tenant's state mirrored in an earlier tenure is not trusted.
	Since(key string) time.Time
	// Ask sends req to the replica that decides for key and returns what its Fallback.Serve
	// answered.
	Ask(ctx context.Context, key string, req []byte) ([]byte, error)
	// Back tells every replica that Redis answers again (each calls its Fallback.Probe).
	Back()
	// Tell tells the other replicas whether this one decides on its copy (local: Redis is away
	// here) or on Redis: only those on Redis are relayed to. The Fallback tells local before it
	// decides anything on its copy, and tells again when Redis decides again.
	Tell(local bool)
	// Relay sends req to a replica that reaches Redis (not this one), whose Fallback.Serve
	// decides it there; an error when none does.
	Relay(ctx context.Context, req []byte) ([]byte, error)
}

// tell tells the other replicas whether this one reaches Redis (see Router.Tell).
func (f *Fallback) tell(local bool) {
	if rt := f.router.Load(); rt != nil {
		rt.r.Tell(local)
	}
}

// RouteTenant and RoutePool are the keys a Router routes: a tenant's requests and leases, a
// pool's slots.
func RouteTenant(tenant string) string { return "tenant:" + tenant }
func RoutePool(pool string) string     { return "pool:" + pool }

// Route makes f ask r during an outage for what another replica decides; plans gives the plans
// in force, whose plans and pools a question names.
func (f *Fallback) Route(r Router, plans func() *Plans) {
	f.router.Store(&routing{r: r, plans: plans})
}

type routing struct {
	r     Router
	plans func() *Plans
}

// since is Router.Since in µs (one replica, no Router: it decides everything, in one tenure).
func (f *Fallback) since(key string) int64 {
	rt := f.router.Load()
	if rt == nil {
		return 1
	}
	if t := rt.r.Since(key); !t.IsZero() {
		return max(t.UnixMicro(), 1)
	}
	return 0
}

// routed is a question sent to the replica that decides it: one decision (see Fallback.decide,
// lease, pool, inspect).
type routed struct {
	Op     string `json:"op"`             // opDecide, opLease, opPool, opInspect
	Mode   int    `json:"mode,omitempty"` // a lease's mode, a pool's operation
	Tenant string `json:"tenant"`
	Plan   string `json:"plan,omitempty"`
	Pool   string `json:"pool,omitempty"`
	Weight int64  `json:"weight,omitempty"`
	JobID  string `json:"job_id,omitempty"`
	Lease  int64  `json:"lease,omitempty"`
	Cost   int64  `json:"cost,omitempty"`
	Report Report `json:"report,omitzero"`
	Share  int64  `json:"share,omitempty"`
	Jobs   []Job  `json:"jobs,omitempty"`
	// An admission (relayed only): the rest of its Batch.
	Owner      int64         `json:"owner,omitempty"`
	Stored     int64         `json:"stored,omitempty"`
	Keep       time.Duration `json:"keep,omitempty"`
	LateWeight int64         `json:"late_weight,omitempty"`
	Late       time.Duration `json:"late,omitempty"`
	Release    bool          `json:"release,omitempty"`
	Peek       bool          `json:"peek,omitempty"`
	// Relay: decide it on Redis, or answer errNotReached (see Router.Relay).
	Relay bool `json:"relay,omitempty"`
}

const (
	opDecide  = "decide"
	opLease   = "lease"
	opPool    = "pool"
	opInspect = "inspect"
	opAdmit   = "admit"
)

// routedReply is a question's answer: the decision's result as JSON, or its error.
type routedReply struct {
	Error  string          `json:"error,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
}

// askFor is how long a routed question may wait for its answer (within its caller's bound).
const askFor = time.Second

// ask sends q for key to the replica that decides it; answered is false when none answered
// (then the caller decides).
func ask[R any](ctx context.Context, f *Fallback, key string, q routed) (r R, answered bool, err error) {
	return exchange[R](ctx, "the replica deciding "+key, q, func(ctx context.Context, b []byte) ([]byte, error) {
		return f.router.Load().r.Ask(ctx, key, b)
	})
}

// relay sends q to a replica that reaches Redis, which decides it there (see Router.Relay);
// answered is false when none did (then the caller decides on the copy).
func relay[R any](ctx context.Context, f *Fallback, q routed) (r R, answered bool, err error) {
	rt := f.router.Load()
	if rt == nil || q.Op == "" {
		return r, false, nil
	}
	q.Relay = true
	return exchange[R](ctx, "the replica relaying to Redis", q, rt.r.Relay)
}

// exchange sends q with send and reads its answer.
func exchange[R any](ctx context.Context, who string, q routed, send func(context.Context, []byte) ([]byte, error)) (r R, answered bool, err error) {
	b, err := json.Marshal(q)
	if err != nil {
		return r, false, nil
	}
	actx, cancel := context.WithTimeout(ctx, askFor)
	defer cancel()
	raw, err := send(actx, b)
	if err != nil {
		return r, false, nil
	}
	var rep routedReply
	if json.Unmarshal(raw, &rep) != nil {
		return r, false, nil
	}
	if rep.Error == errNotReached {
		return r, false, nil
	}
	if rep.Error != "" {
		return r, true, fmt.Errorf("bucket: %s: %s", who, rep.Error)
	}
	if err := json.Unmarshal(rep.Result, &r); err != nil {
		return r, true, fmt.Errorf("bucket: %s answered %q: %w", who, rep.Result, err)
	}
	return r, true, nil
}

// errNotReached is a relayed question's answer from a replica that does not reach Redis either.
const errNotReached = "bucket: Redis is away here too"

// Serve answers a question another replica routed here (see Router): it is decided on this
// replica's copy when Redis is away here too, else on Redis; never asked of another replica.
func (f *Fallback) Serve(ctx context.Context, req []byte) []byte {
	res, err := f.serve(ctx, req)
	var rep routedReply
	if err == nil {
		rep.Result, err = json.Marshal(res)
	}
	if err != nil {
		rep = routedReply{Error: err.Error()}
	}
	b, _ := json.Marshal(rep)
	return b
}

func (f *Fallback) serve(ctx context.Context, req []byte) (any, error) {
	var q routed
	if err := json.Unmarshal(req, &q); err != nil {
		return nil, fmt.Errorf("bucket: a routed question that does not parse: %w", err)
	}
	rt := f.router.Load()
	if rt == nil {
		return nil, fmt.Errorf("bucket: this replica routes nothing")
	}
	plans := rt.plans()
	if q.Relay && f.out.Load() != nil {
		return nil, errors.New(errNotReached)
	}
	if q.Op == opPool {
		for _, p := range plans.Pools() {
			if p.Name == q.Pool {
				if q.Relay {
					res, err := f.shared.poolCall(ctx, q.Mode, p, q.Tenant, q.Share, q.Jobs, q.Cost, q.Report)
					if outageError(ctx, err) {
						f.goDown(err)
						return nil, errors.New(errNotReached)
					}
					return res, err
				}
				return f.pool(ctx, q.Mode, p, q.Tenant, q.Share, q.Jobs, q.Cost, q.Report, false)
			}
		}
		return nil, fmt.Errorf("bucket: no pool %q in the plans in force here", q.Pool)
	}
	plan, ok := plans.Plan(q.Plan)
	if !ok {
		return nil, fmt.Errorf("bucket: no plan %q in the plans in force here", q.Plan)
	}
	if q.Relay {
		res, err := f.relayed(ctx, q, plan)
		if outageError(ctx, err) { // away from here too: the asker decides on its copy
			f.goDown(err)
			return nil, errors.New(errNotReached)
		}
		return res, err
	}
	switch q.Op {
	case opDecide:
		return f.decide(ctx, Request{Tenant: q.Tenant, Plan: plan, Weight: q.Weight, JobID: q.JobID}, false)
	case opLease:
		return f.lease(ctx, LeaseRequest{Tenant: q.Tenant, Plan: plan, Lease: q.Lease, Cost: q.Cost, Weight: q.Weight, Report: q.Report}, q.Mode, false)
	case opInspect:
		return f.inspect(ctx, q.Tenant, plan, false)
	}
	return nil, fmt.Errorf("bucket: a routed question of unknown op %q", q.Op)
}

// wirePool is a poolReply as it crosses to another replica.
type wirePool struct {
	Granted int          `json:"granted"`
	Before  []int        `json:"before,omitempty"`
	Wait    int64        `json:"wait"`
	Found   bool         `json:"found"`
	Weight  int64        `json:"weight"`
	Ran     int64        `json:"ran"`
	Ends    int64        `json:"ends"`
	State   PoolState    `json:"state"`
	Wakes   []string     `json:"wakes,omitempty"`
	Tenants []PoolTenant `json:"tenants,omitempty"`
	Local   bool         `json:"local,omitempty"`
}

func (r poolReply) MarshalJSON() ([]byte, error) {
	return json.Marshal(wirePool{Granted: r.granted, Before: r.before, Wait: r.wait, Found: r.found, Weight: r.weight, Ran: r.ran, Ends: r.ends,
		State: r.state, Wakes: r.wakes, Tenants: r.tenants, Local: r.local})
}

func (r *poolReply) UnmarshalJSON(b []byte) error {
	var w wirePool
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*r = poolReply{granted: w.Granted, before: w.Before, wait: w.Wait, found: w.Found, weight: w.Weight, ran: w.Ran, ends: w.Ends, state: w.State,
		wakes: w.Wakes, tenants: w.Tenants, local: w.Local}
	return nil
}

// relayed decides on Redis a question about a tenant relayed from a replica that does not reach
// it (see Router.Relay).
func (f *Fallback) relayed(ctx context.Context, q routed, plan *Plan) (any, error) {
	switch q.Op {
	case opAdmit:
		return f.shared.admitTenant(ctx, Batch{Tenant: q.Tenant, Plan: plan, Jobs: q.Jobs, Owner: q.Owner, Stored: q.Stored, Keep: q.Keep,
			LateWeight: q.LateWeight, Late: q.Late, Release: q.Release, Peek: q.Peek})
	case opDecide:
		return f.shared.Decide(ctx, Request{Tenant: q.Tenant, Plan: plan, Weight: q.Weight, JobID: q.JobID})
	case opLease:
		return f.shared.leaseCall(ctx, LeaseRequest{Tenant: q.Tenant, Plan: plan, Lease: q.Lease, Cost: q.Cost, Weight: q.Weight, Report: q.Report}, q.Mode)
	case opInspect:
		return f.shared.inspectTenant(ctx, q.Tenant, plan)
	}
	return nil, fmt.Errorf("bucket: a relayed question of unknown op %q", q.Op)
}
