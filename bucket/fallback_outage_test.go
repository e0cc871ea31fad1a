package bucket

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// faultyRedis is Redis as one replica reaches it, for tests: there, away (a call fails before it
// is sent), or late (a call runs on the server and its answer is lost). It is the shared backend
// a test gives newFallback, so that replicas of one test can lose Redis one at a time.
type faultyRedis struct {
	*Redis
	fault atomic.Int32 // reach, away or late
	// answer, when set, holds each admission's answer (it ran on the server) until it is closed.
	answer atomic.Pointer[chan struct{}]
	// pooled, when set, is told of each pool operation Redis answered (set it before the calls).
	pooled func(op int)
}

const (
	reach int32 = iota
	away
	late
)

var (
	errAway = errors.New("test: redis away")
	errLate = errors.New("test: redis answered too late")
)

func (r *faultyRedis) before() error {
	if r.fault.Load() == away {
		return errAway
	}
	return nil
}

func (r *faultyRedis) after(err error) error {
	if err == nil && r.fault.Load() == late {
		return errLate
	}
	return err
}

func (r *faultyRedis) admitState(ctx context.Context, b Batch, mirror bool) (BatchResult, mirrored, error) {
	if err := r.before(); err != nil {
		return BatchResult{}, mirrored{}, err
	}
	res, m, err := r.Redis.admitState(ctx, b, mirror)
	if held := r.answer.Load(); held != nil {
		<-*held
	}
	return res, m, r.after(err)
}

func (r *faultyRedis) admitTenant(ctx context.Context, b Batch) (BatchResult, error) {
	res, _, err := r.admitState(ctx, b, false)
	return res, err
}

func (r *faultyRedis) Decide(ctx context.Context, req Request) (Result, error) {
	if err := r.before(); err != nil {
		return Result{}, err
	}
	res, err := r.Redis.Decide(ctx, req)
	return res, r.after(err)
}

func (r *faultyRedis) leaseCall(ctx context.Context, req LeaseRequest, mode int) (LeaseResult, error) {
	if err := r.before(); err != nil {
		return LeaseResult{}, err
	}
	res, err := r.Redis.leaseCall(ctx, req, mode)
	return res, r.after(err)
}

func (r *faultyRedis) poolCall(ctx context.Context, op int, p *Pool, tenant string, share int64, jobs []Job, cost int64, rep Report) (poolReply, error) {
	if err := r.before(); err != nil {
		return poolReply{}, err
	}
	res, err := r.Redis.poolCall(ctx, op, p, tenant, share, jobs, cost, rep)
	if err == nil && r.pooled != nil {
		r.pooled(op)
	}
	return res, r.after(err)
}

func (r *faultyRedis) inspectTenant(ctx context.Context, tenant string, plan *Plan) (Snapshot, error) {
	if err := r.before(); err != nil {
		return Snapshot{}, err
	}
	res, err := r.Redis.inspectTenant(ctx, tenant, plan)
	return res, r.after(err)
}

func (r *faultyRedis) mergeTenant(ctx context.Context, tenant string, p *Plan, d tenantDelta) error {
	if err := r.before(); err != nil {
		return err
	}
	return r.after(r.Redis.mergeTenant(ctx, tenant, p, d))
}

func (r *faultyRedis) mergePool(ctx context.Context, p *Pool, d poolDelta) error {
	if err := r.before(); err != nil {
		return err
	}
	return r.after(r.Redis.mergePool(ctx, p, d))
}

func (r *faultyRedis) probe(ctx context.Context) error {
	if err := r.before(); err != nil {
		return err
	}
	return r.after(r.Redis.probe(ctx))
}

// replica is one replica of a test: its Fallback over its own way to the package's Redis (its
// fault set by the test), deciding at c's time. Nothing probes Redis but the test (Recover).
type replica struct {
	*Fallback
	redis *faultyRedis
}

func newReplica(t *testing.T, c *clock, opts Options) *replica {
	t.Helper()
	r := NewRedis(redisClient(t), "", opts)
	r.pin(c.Now)
	fr := &faultyRedis{Redis: r}
	return &replica{Fallback: newFallback(fr, c.Now, opts, time.Second, FallbackHooks{}), redis: fr}
}

// recover ends the replica's outage: Redis answers it again and is charged with the outage.
func (r *replica) recover(t *testing.T) {
	t.Helper()
	r.redis.fault.Store(reach)
	if err := r.Recover(context.Background()); err != nil || r.Local() {
		t.Fatalf("recover: %v (local %v)", err, r.Local())
	}
}

// goDown makes the replica lose Redis: its next call fails and turns it local.
func (r *replica) goDown(t *testing.T, c *clock) {
	t.Helper()
	r.redis.fault.Store(away)
	other := mustPlan(t, "other", lim("b", 1, time.Second))
	if res, err := r.Decide(context.Background(), Request{Tenant: uniqueTenant("switch"), Plan: other, Weight: 1}); err != nil || !res.Local {
		t.Fatalf("the call that finds Redis away: %+v %v", res, err)
	}
}

// TestATenantFirstDecidedLateInAnOutageIsForgottenFromThen: another replica's tenant holds 4 of
// its 4 slots when Redis goes away; this replica first decides it 7 s into the outage (its
// partition moved here: the other replica renewed its jobs on its own copy meanwhile). Its slots
// are taken as forgotten from then, held until 60 % of a lease later unless the jobs report: the
// tenant's next job waits.
//
// Issue 38, item 3: before, the tenant was taken as forgotten at the outage's start, whose
// forgotten slots had ended 1 s before (60 % of a 10 s lease): a 5th job was admitted at once
// (8 running where 4 are allowed).
func TestATenantFirstDecidedLateInAnOutageIsForgottenFromThen(t *testing.T) {
	c := newClock()
	opts := Options{}
	r := newReplica(t, c, opts)
	p := mustPlan(t, "c", conc("c", 4, 10*time.Second))
	tn := uniqueTenant("late")
	ctx := context.Background()
	other := NewRedis(redisClient(t), "", opts) // the replica that ran the tenant's queue
	other.pin(c.Now)
	if res, err := other.Admit(ctx, Batch{Tenant: tn, Plan: p, Owner: 2, Jobs: []Job{{ID: 1, Weight: 1}, {ID: 2, Weight: 1}, {ID: 3, Weight: 1}, {ID: 4, Weight: 1}}}); err != nil || res.Outcomes[3] != JobAdmitted {
		t.Fatalf("4 jobs on Redis: %+v %v", res, err)
	}
	r.goDown(t, c)
	c.Advance(7 * time.Second)
	res, err := r.Admit(ctx, Batch{Tenant: tn, Plan: p, Owner: 1, Jobs: []Job{{ID: 5, Weight: 1}}})
	if err != nil || !res.Local || res.Outcomes[0] != JobNotYet || res.Wait != 6*time.Second {
		t.Fatalf("job 5, first decided here 7s into the outage: %+v %v, want it to wait 6s (the slots forgotten from now)", res, err)
	}
}

// TestAPoolFirstDecidedLateInAnOutageIsForgottenFromThen: a pool of 2 full when Redis goes away;
// this replica first decides it 7 s into the outage (the pool's deciding replica changed). Its
// slots are taken as forgotten from then: the next job waits for the pool.
//
// Issue 38, item 3: before, every pool was taken as forgotten at the outage's start: its
// forgotten slots had ended, and 2 more were granted at once.
func TestAPoolFirstDecidedLateInAnOutageIsForgottenFromThen(t *testing.T) {
	c := newClock()
	opts := Options{}
	r := newReplica(t, c, opts)
	pool, err := NewPool(Pool{Name: uniqueTenant("pool"), Concurrency: 2, Lease: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p := mustPlan(t, "pooled", lim("own", 1000, time.Millisecond))
	p.Pool = pool
	ctx := context.Background()
	other := NewRedis(redisClient(t), "", opts)
	other.pin(c.Now)
	a := uniqueTenant("a")
	if res, err := other.Admit(ctx, Batch{Tenant: a, Plan: p, Owner: 2, Jobs: []Job{{ID: 1, Weight: 1}, {ID: 2, Weight: 1}}}); err != nil || res.Outcomes[1] != JobAdmitted {
		t.Fatalf("2 jobs on Redis: %+v %v", res, err)
	}
	r.goDown(t, c)
	c.Advance(7 * time.Second)
	res, err := r.Admit(ctx, Batch{Tenant: uniqueTenant("b"), Plan: p, Owner: 1, Jobs: []Job{{ID: 3, Weight: 1}}})
	if err != nil || !res.Local || res.Outcomes[0] != JobNotYet || !res.PoolBound {
		t.Fatalf("a job first deciding the pool here 7s into the outage: %+v %v, want it to wait for the pool", res, err)
	}
}

// routes routes between the replicas of one test, in process: which replica decides each key,
// and since when (a partition's tenure). A key nobody was given is decided by every replica,
// since the epoch.
type routes struct {
	mu       sync.Mutex
	decider  map[string]*Fallback
	since    map[string]time.Time
	local    map[*Fallback]bool // the replicas that told they decide on their copies (Router.Tell)
	replicas []*Fallback
}

func newRoutes() *routes {
	return &routes{decider: map[string]*Fallback{}, since: map[string]time.Time{}, local: map[*Fallback]bool{}}
}

// move gives key to f from at on (a new tenure, even if f decided it before).
func (n *routes) move(key string, f *Fallback, at time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.decider[key], n.since[key] = f, at
}

// router is f's Router over n; plans are the plans every replica has.
func (n *routes) router(f *Fallback, plans *Plans) {
	n.mu.Lock()
	n.replicas = append(n.replicas, f)
	n.mu.Unlock()
	f.Route(router{self: f, n: n}, func() *Plans { return plans })
}

type router struct {
	self *Fallback
	n    *routes
}

func (r router) Since(key string) time.Time {
	r.n.mu.Lock()
	defer r.n.mu.Unlock()
	switch d := r.n.decider[key]; {
	case d == nil:
		return time.Unix(1, 0)
	case d == r.self:
		return r.n.since[key]
	}
	return time.Time{}
}

func (r router) Ask(ctx context.Context, key string, req []byte) ([]byte, error) {
	r.n.mu.Lock()
	d := r.n.decider[key]
	r.n.mu.Unlock()
	return d.Serve(ctx, req), nil
}

func (r router) Tell(local bool) {
	r.n.mu.Lock()
	defer r.n.mu.Unlock()
	r.n.local[r.self] = local
}

// Relay relays to the first other replica that reaches Redis.
func (r router) Relay(ctx context.Context, req []byte) ([]byte, error) {
	r.n.mu.Lock()
	var to *Fallback
	for _, f := range r.n.replicas {
		if f != r.self && !r.n.local[f] {
			to = f
			break
		}
	}
	r.n.mu.Unlock()
	if to == nil {
		return nil, errors.New("test: no replica reaches Redis")
	}
	return to.Serve(ctx, req), nil
}

func (r router) Back() {
	r.n.mu.Lock()
	defer r.n.mu.Unlock()
	for _, d := range r.n.decider {
		d.Probe()
	}
}

// TestACopyFromAnEarlierTenureIsNotTrusted: this replica ran a tenant's queue (its copy holds 9
// of 10 tokens, refilling one a minute), then the tenant's partition went to another replica,
// which spent the 9 on Redis, and came back. Redis goes away before the queue's first call: a
// request for the tenant is decided on a copy from the earlier tenure, which must not be
// trusted: the tenant is taken as forgotten, its bucket empty.
//
// Issue 38, item 4: before, a copy stayed trusted for an hour after its last mirror, whatever
// happened to the partition: the request was allowed from the 9 tokens Redis no longer had.
func TestACopyFromAnEarlierTenureIsNotTrusted(t *testing.T) {
	c := newClock()
	opts := Options{}
	r := newReplica(t, c, opts)
	p := mustPlan(t, "slow", lim("b", 10, time.Minute))
	tn := uniqueTenant("stale")
	plans, err := NewPlans([]*Plan{p}, map[string]string{tn: "slow"}, "")
	if err != nil {
		t.Fatal(err)
	}
	n := newRoutes()
	n.router(r.Fallback, plans)
	key := RouteTenant(tn)
	n.move(key, r.Fallback, c.Now())
	ctx := context.Background()
	if res, err := r.Admit(ctx, Batch{Tenant: tn, Plan: p, Owner: 1, Jobs: []Job{{ID: 1, Weight: 1}}}); err != nil || res.Outcomes[0] != JobAdmitted || res.Local {
		t.Fatalf("job 1 on Redis: %+v %v", res, err)
	}
	c.Advance(5 * time.Second) // past this replica's hold on the queue
	n.move(key, nil, c.Now())  // to another replica
	other := NewRedis(redisClient(t), "", opts)
	other.pin(c.Now)
	jobs := make([]Job, 9)
	for i := range jobs {
		jobs[i] = Job{ID: int64(2 + i), Weight: 1}
	}
	if res, err := other.Admit(ctx, Batch{Tenant: tn, Plan: p, Owner: 2, Jobs: jobs, Release: true}); err != nil || res.Outcomes[8] != JobAdmitted {
		t.Fatalf("9 jobs on the other replica: %+v %v", res, err)
	}
	c.Advance(time.Second)
	n.move(key, r.Fallback, c.Now()) // back
	r.goDown(t, c)
	if res, err := r.Decide(ctx, Request{Tenant: tn, Plan: p, Weight: 1}); err != nil || !res.Local || res.Allowed {
		t.Fatalf("a request after the partition came back, Redis away: %+v %v, want refused (the tenant taken as forgotten)", res, err)
	}
}

// TestARecreatedQueueKeepsItsExactCopy: a tenant's queue used 9 of its quota of 10 a minute on
// this replica, then went idle and was dropped; its next job makes a new queue (its first call
// said so: Batch.Fresh, before) while Redis is away. The partition never left this replica: the
// copy is exact, and one job of the two goes.
//
// Issue 38, item 6: before, a fresh queue discarded the copy (it might predate another replica's
// decisions), and the tenant was taken as forgotten: the quota counted only the share of the
// minute elapsed, and both jobs went (18 where 10 are allowed, in the run).
func TestARecreatedQueueKeepsItsExactCopy(t *testing.T) {
	c := newClock()
	opts := Options{}
	r := newReplica(t, c, opts)
	p := mustPlan(t, "q", quota("minute", 10, Minute, nil))
	tn := uniqueTenant("fresh")
	ctx := context.Background()
	jobs := make([]Job, 9)
	for i := range jobs {
		jobs[i] = Job{ID: int64(1 + i), Weight: 1}
	}
	if res, err := r.Admit(ctx, Batch{Tenant: tn, Plan: p, Owner: 1, Jobs: jobs}); err != nil || res.Outcomes[8] != JobAdmitted {
		t.Fatalf("9 jobs on Redis: %+v %v", res, err)
	}
	c.Advance(5 * time.Second)
	r.goDown(t, c)
	res, err := r.Admit(ctx, Batch{Tenant: tn, Plan: p, Owner: 1, Jobs: []Job{{ID: 10, Weight: 1}, {ID: 11, Weight: 1}}})
	if err != nil || !res.Local || res.Outcomes[0] != JobAdmitted || res.Outcomes[1] != JobNotYet {
		t.Fatalf("a new queue's 2 jobs, Redis away: %+v %v, want the 10th of the quota admitted, the 11th waiting", res, err)
	}
}

// TestAPoolsBucketIsChargedBackAfterAnOutage: a pool of 10 tokens at 10/s drained on Redis; Redis
// is away 2 s, during which the copy (the pool taken as forgotten: empty) grants 20 as they
// refill; then Redis is charged with the outage. The pool's bucket on Redis counts what the copy
// took: empty, not refilled, so the pool gives at most C + r·t (30 in those 2 s).
//
// Issue 38, item 5: before, a pool's merge carried its leases and the downstream's hold, not its
// bucket: Redis held the 10 tokens it had refilled meanwhile (39 in 2 s against 30).
func TestAPoolsBucketIsChargedBackAfterAnOutage(t *testing.T) {
	c := newClock()
	opts := Options{}
	r := newReplica(t, c, opts)
	pool, err := NewPool(Pool{Name: uniqueTenant("pool"), Capacity: 10, Rate: "10/s", Interval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	p := mustPlan(t, "pooled", lim("own", 1_000_000, time.Microsecond))
	p.Pool = pool
	tn := uniqueTenant("t")
	ctx := context.Background()
	next := int64(1)
	admit := func(n int) (admitted int) {
		t.Helper()
		b := Batch{Tenant: tn, Plan: p, Owner: 1}
		for range n {
			b.Jobs = append(b.Jobs, Job{ID: next, Weight: 1})
			next++
		}
		res, err := r.Admit(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range res.Outcomes {
			if o.Admitted() {
				admitted++
			}
		}
		return admitted
	}
	total := admit(10) // drained on Redis
	r.goDown(t, c)
	for range 20 {
		c.Advance(100 * time.Millisecond)
		total += admit(1)
	}
	r.recover(t)
	total += admit(10)
	if total > 30 {
		t.Fatalf("%d admitted in 2s through a pool of 10 at 10/s, want at most C + r·t = 30", total)
	}
}

// TestReleasesOfAForgottenTenantReachRedis: another replica's tenant runs 3 jobs of its 3 slots
// (leases of 10 minutes) when Redis goes away; this replica takes the tenant as forgotten. Two
// jobs are done and one renews during the outage: after it, Redis counts the renewed job alone,
// held until its renewal's end, and the tenant's next two jobs go at once.
//
// Issue 38, item 7: before, the releases were taken out of the forgotten slots on the copy and
// lost at the merge (only a lease the copy knew at its base was dropped): Redis counted 3 in
// flight of 3, and the tenant stalled until the old leases ended, 10 minutes later.
func TestReleasesOfAForgottenTenantReachRedis(t *testing.T) {
	c := newClock()
	opts := Options{}
	r := newReplica(t, c, opts)
	p := mustPlan(t, "c", conc("c", 3, 10*time.Minute))
	tn := uniqueTenant("forgotten")
	ctx := context.Background()
	other := NewRedis(redisClient(t), "", opts)
	other.pin(c.Now)
	if res, err := other.Admit(ctx, Batch{Tenant: tn, Plan: p, Owner: 2, Jobs: []Job{{ID: 1, Weight: 1}, {ID: 2, Weight: 1}, {ID: 3, Weight: 1}}}); err != nil || res.Outcomes[2] != JobAdmitted {
		t.Fatalf("3 jobs on Redis: %+v %v", res, err)
	}
	r.goDown(t, c)
	c.Advance(time.Minute)
	for _, id := range []int64{1, 2} {
		if res, err := r.Release(ctx, LeaseRequest{Tenant: tn, Plan: p, Lease: id, Cost: NoCost, Weight: 1}); err != nil || !res.Held || !res.Local {
			t.Fatalf("job %d done on the copy: %+v %v", id, res, err)
		}
	}
	if res, err := r.Renew(ctx, LeaseRequest{Tenant: tn, Plan: p, Lease: 3, Weight: 1}); err != nil || !res.Held {
		t.Fatalf("job 3 renewed on the copy: %+v %v", res, err)
	}
	renewed := c.Now()
	r.recover(t)
	snap, err := r.redis.Redis.Inspect(ctx, tn, p)
	if err != nil {
		t.Fatal(err)
	}
	if l := snap.Limits[0]; l.Used != 1 || l.FullIn != renewed.Add(10*time.Minute).Sub(c.Now()) {
		t.Fatalf("Redis after the outage: %d in flight, full in %v, want job 3 alone, held 10m from its renewal", l.Used, l.FullIn)
	}
	res, err := r.Admit(ctx, Batch{Tenant: tn, Plan: p, Owner: 1, Jobs: []Job{{ID: 4, Weight: 1}, {ID: 5, Weight: 1}}})
	if err != nil || res.Local || res.Outcomes[1] != JobAdmitted {
		t.Fatalf("the tenant's next 2 jobs after the outage: %+v %v, want both admitted on Redis", res, err)
	}
}

// TestAnAdmissionAnsweredAfterTheSwitchIsCounted: an admission of 3 jobs runs on Redis while
// another call finds Redis away and turns this replica local, and a request for the same tenant
// is decided on the copy before the admission's answer comes back. The copy must count the 3
// jobs: the tenant (a bucket of 10, nothing refilled) gets 10 in all, however the calls fall.
//
// Before, the admission's answer was used as Redis gave it (3 admitted) while its state was not
// mirrored (the copy already decided the tenant): the copy went on from 4 tokens, and 13 went.
func TestAnAdmissionAnsweredAfterTheSwitchIsCounted(t *testing.T) {
	c := newClock()
	opts := Options{}
	r := newReplica(t, c, opts)
	p := mustPlan(t, "slow", lim("b", 10, time.Hour))
	tn := uniqueTenant("late")
	ctx := context.Background()
	next := int64(1)
	admitted := 0
	count := func(res BatchResult, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range res.Outcomes {
			if o.Admitted() {
				admitted++
			}
		}
	}
	admit := func(n int) (BatchResult, error) {
		b := Batch{Tenant: tn, Plan: p, Owner: 1}
		for range n {
			b.Jobs = append(b.Jobs, Job{ID: next, Weight: 1})
			next++
		}
		return r.Admit(ctx, b)
	}
	count(admit(5))
	held := make(chan struct{})
	r.redis.answer.Store(&held)
	type answer struct {
		res BatchResult
		err error
	}
	answered := make(chan answer, 1)
	go func() { res, err := admit(3); answered <- answer{res, err} }()
	deadline := time.Now().Add(5 * time.Second)
	for tokens(t, r.redis.Redis, tn, p) != 2 { // the 3 jobs taken on Redis: the answer is on its way
		if time.Now().After(deadline) {
			t.Fatal("the admission of 3 jobs never ran on Redis")
		}
		time.Sleep(time.Millisecond)
	}
	r.goDown(t, c)
	if res, err := r.Decide(ctx, Request{Tenant: tn, Plan: p, Weight: 1}); err != nil || !res.Local || !res.Allowed {
		t.Fatalf("a request on the copy: %+v %v", res, err)
	}
	admitted++
	r.redis.answer.Store(nil)
	close(held)
	a := <-answered
	count(a.res, a.err)
	count(admit(10))
	if admitted > 10 {
		t.Fatalf("%d went from a bucket of 10 that never refilled", admitted)
	}
}

// tokens is what tenant's first limit holds on Redis now.
func tokens(t *testing.T, r *Redis, tenant string, p *Plan) int64 {
	t.Helper()
	snap, err := r.Inspect(context.Background(), tenant, p)
	if err != nil {
		t.Fatal(err)
	}
	return snap.Limits[0].Tokens
}

// TestTheOutageSummaryCountsEachJobOnce: during an outage a queue of 5 jobs, one token between
// them, is asked 3 times; after it, the summary counts 1 job admitted and 4 told to wait: each
// job once, as admitter_decisions_total does.
//
// Issue 38, item 10: before, every decision counted every job it left waiting: 12 told to wait
// (the log said 3027 where the metric said 216).
func TestTheOutageSummaryCountsEachJobOnce(t *testing.T) {
	c := newClock()
	opts := Options{}
	r := newReplica(t, c, opts)
	var ups []Outage
	r.hooks.Up = func(o Outage) { ups = append(ups, o) }
	p := mustPlan(t, "one", lim("b", 1, time.Hour))
	tn := uniqueTenant("count")
	ctx := context.Background()
	if _, err := r.Admit(ctx, Batch{Tenant: tn, Plan: p, Owner: 1}); err != nil { // its copy: full
		t.Fatal(err)
	}
	r.goDown(t, c)
	jobs := []Job{{ID: 1, Weight: 1}, {ID: 2, Weight: 1}, {ID: 3, Weight: 1}, {ID: 4, Weight: 1}, {ID: 5, Weight: 1}}
	for i := range 3 {
		res, err := r.Admit(ctx, Batch{Tenant: tn, Plan: p, Owner: 1, Jobs: jobs})
		if err != nil || !res.Local || res.Outcomes[0].Admitted() != (i == 0) {
			t.Fatalf("step %d on the copy: %+v %v", i, res, err)
		}
		if i == 0 {
			jobs = jobs[1:] // the first went
		}
		c.Advance(time.Second)
	}
	r.recover(t)
	if len(ups) != 1 || ups[0].Admitted != 1 || ups[0].Waited != 4 {
		t.Fatalf("the outage's summary %+v: want 1 job admitted and 4 told to wait", ups)
	}
}

// TestALookUpKeepsTheCopy: a pooled job that may have been admitted before is looked up in its
// tenant's state on Redis (Batch.Peek), which returns no state to mirror; Redis is lost after the
// pool granted it, and the tenant's copy decides it: its bucket (1 an hour) spent by job 1 on
// Redis, job 2 waits.
//
// Failed before (the merge of the exactly-once work): the look-up's empty answer was mirrored as
// the tenant's state, a tenant Redis holds nothing of: a full bucket, and job 2 was admitted.
func TestALookUpKeepsTheCopy(t *testing.T) {
	c := newClock()
	opts := Options{}
	r := newReplica(t, c, opts)
	pool, err := NewPool(Pool{Name: uniqueTenant("pool"), Concurrency: 10, Lease: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p := mustPlan(t, "pooled", lim("own", 1, time.Hour))
	p.Pool = pool
	tn := uniqueTenant("again")
	ctx := context.Background()
	if res, err := r.Admit(ctx, Batch{Tenant: tn, Plan: p, Owner: 1, Jobs: []Job{{ID: 1, Weight: 1}}}); err != nil || res.Local || res.Outcomes[0] != JobAdmitted {
		t.Fatalf("job 1 on Redis: %+v %v", res, err)
	}
	r.redis.pooled = func(op int) {
		if op == poolAcquire {
			r.redis.fault.Store(away) // the tenant's admission finds Redis away
		}
	}
	res, err := r.Admit(ctx, Batch{Tenant: tn, Plan: p, Owner: 1, Jobs: []Job{{ID: 2, Weight: 1, Again: true}}})
	if err != nil || !res.Local || res.Outcomes[0] != JobNotYet {
		t.Fatalf("job 2, looked up on Redis, granted by the pool there, decided on the copy: %+v %v, want it to wait", res, err)
	}
}
