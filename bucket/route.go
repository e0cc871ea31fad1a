package bucket

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Several replicas share Redis. While it is away, each decides on its own copy, and what the
// copies of two replicas would both decide must be decided by one of them, or each could give a
// limit away in full: a tenant's requests and lease messages (which reach any replica) are
// decided by the replica that runs the tenant's queue, whose copy holds its state; a pool's slots
// (taken for the tenants of every replica) by one replica for the whole pool. A Router names that
// replica and carries the question to it (package admission: over NATS); the replica answers with
// Serve. A tenant's question that finds no answer is decided here, on this replica's copy (which
// does not know the tenant: it is taken as forgotten); a pool's is an error (the job waits).

// A Router routes what the copy decides to the replica that decides it (see above).
type Router interface {
	// Decides reports whether this replica decides for key: RouteTenant or RoutePool of a name.
	Decides(key string) bool
	// Ask sends req to the replica that decides for key and returns what its Fallback.Serve
	// answered.
	Ask(ctx context.Context, key string, req []byte) ([]byte, error)
	// Back tells every replica that Redis answers again (each calls its Fallback.Probe).
	Back()
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

// routed is a question sent to the replica that decides it, and its answer.
type routed struct {
	Op     string `json:"op"` // decide, release, renew, start, pool
	Tenant string `json:"tenant"`
	Plan   string `json:"plan,omitempty"`
	// decide
	Weight int64  `json:"weight,omitempty"`
	JobID  string `json:"job_id,omitempty"`
	// leases
	Lease  int64   `json:"lease,omitempty"`
	Cost   int64   `json:"cost,omitempty"`
	Report *Report `json:"report,omitempty"`
	// pool
	Pool   string `json:"pool,omitempty"`
	PoolOp int    `json:"pool_op,omitempty"`
	Share  int64  `json:"share,omitempty"`
	Jobs   []Job  `json:"jobs,omitempty"`
}

type routedReply struct {
	Error  string       `json:"error,omitempty"`
	Result *Result      `json:"result,omitempty"`
	Lease  *LeaseResult `json:"lease,omitempty"`
	Pool   *wirePool    `json:"pool,omitempty"`
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
}

func (w *wirePool) reply() poolReply {
	return poolReply{granted: w.Granted, before: w.Before, wait: w.Wait, found: w.Found, weight: w.Weight, ran: w.Ran, ends: w.Ends, state: w.State, wakes: w.Wakes, tenants: w.Tenants}
}

func wireOf(r poolReply) *wirePool {
	return &wirePool{Granted: r.granted, Before: r.before, Wait: r.wait, Found: r.found, Weight: r.weight, Ran: r.ran, Ends: r.ends, State: r.state, Wakes: r.wakes, Tenants: r.tenants}
}

// remote returns the router when key is decided by another replica, nil when here.
func (f *Fallback) remote(key string) Router {
	rt := f.router.Load()
	if rt == nil || rt.r.Decides(key) {
		return nil
	}
	return rt.r
}

// askFor is how long a routed question may wait for its answer (within its caller's bound).
const askFor = time.Second

// ask sends q for key to the replica that decides it; ok is false when none answered (then the
// caller decides here).
func (f *Fallback) ask(ctx context.Context, r Router, key string, q routed) (routedReply, bool) {
	b, err := json.Marshal(q)
	if err != nil {
		return routedReply{}, false
	}
	actx, cancel := context.WithTimeout(ctx, askFor)
	defer cancel()
	raw, err := r.Ask(actx, key, b)
	if err != nil {
		return routedReply{}, false
	}
	var rep routedReply
	if json.Unmarshal(raw, &rep) != nil {
		return routedReply{}, false
	}
	return rep, true
}

// Serve answers a question another replica routed here (see Router): it is decided on this
// replica's copy when Redis is away here too, else on Redis.
func (f *Fallback) Serve(ctx context.Context, req []byte) []byte {
	rep := f.serve(ctx, req)
	b, _ := json.Marshal(rep)
	return b
}

func (f *Fallback) serve(ctx context.Context, req []byte) routedReply {
	var q routed
	if err := json.Unmarshal(req, &q); err != nil {
		return routedReply{Error: fmt.Sprintf("bucket: a routed question that does not parse: %v", err)}
	}
	rt := f.router.Load()
	if rt == nil {
		return routedReply{Error: "bucket: this replica routes nothing"}
	}
	plans := rt.plans()
	fail := func(err error) routedReply { return routedReply{Error: err.Error()} }
	if q.Op == "pool" {
		var pool *Pool
		for _, p := range plans.Pools() {
			if p.Name == q.Pool {
				pool = p
			}
		}
		if pool == nil {
			return fail(fmt.Errorf("bucket: no pool %q in the plans in force here", q.Pool))
		}
		var rep Report
		if q.Report != nil {
			rep = *q.Report
		}
		r, err := f.poolHere(ctx, q.PoolOp, pool, q.Tenant, q.Share, q.Jobs, q.Cost, rep)
		if err != nil {
			return fail(err)
		}
		return routedReply{Pool: wireOf(r)}
	}
	plan, ok := plans.Plan(q.Plan)
	if !ok {
		return fail(fmt.Errorf("bucket: no plan %q in the plans in force here", q.Plan))
	}
	switch q.Op {
	case "decide":
		res, err := f.decideHere(ctx, Request{Tenant: q.Tenant, Plan: plan, Weight: q.Weight, JobID: q.JobID})
		if err != nil {
			return fail(err)
		}
		return routedReply{Result: &res}
	case "release", "renew", "start":
		req := LeaseRequest{Tenant: q.Tenant, Plan: plan, Lease: q.Lease, Cost: q.Cost, Weight: q.Weight}
		if q.Report != nil {
			req.Report = *q.Report
		}
		mode := map[string]int{"release": leaseRelease, "renew": leaseRenew, "start": leaseStart}[q.Op]
		res, err := f.leaseHere(ctx, req, mode)
		if err != nil {
			return fail(err)
		}
		return routedReply{Lease: &res}
	}
	return fail(errors.New("bucket: a routed question of unknown op " + q.Op))
}
