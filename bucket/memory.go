package bucket

import (
	"context"
	"hash/maphash"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/admitter/admitter/lua"
)

const memShards = 64

// Memory is the in-process backend: the same decisions as Redis, for one process only (buckets
// are not shared between replicas). It is safe for concurrent use; the zero value is not usable,
// call NewMemory.
type Memory struct {
	opts   Options
	bornAt atomic.Int64 // Options.Born in µs, 0 when zero; see Forgot
	now    func() time.Time
	seed   maphash.Seed
	shards [memShards]memShard
	pools  memPools
}

type memShard struct {
	mu        sync.Mutex
	tenants   map[string]*memState
	jobs      map[jobKey]int64 // Decide's job keys: booked slot (> 0) or -(expiry) once admitted
	nextSweep int64
	work      []work // scratch, guarded by mu
	shadow    []work // scratch for a shadow state, guarded by mu
	expired   int64  // leases the last load found ended unreleased, guarded by mu
}

// memState mirrors a tenant's state in lua/state.lua.
type memState struct {
	stored, keep      int64  // see Batch.Stored; keep: until when (µs) stored must last
	owner, ownerUntil int64  // see Batch.Owner
	marks             []mark // oldest first
	limits            []memLimit
	booked            []entry // Decide's slots booked and not yet claimed: see booked.go
	expiry            int64   // µs; the state is gone (everything full, nothing held) from then on
	hold              int64   // µs; the downstream holds the tenant's forwards until then (0: no)
	// outage and released are a copy's own (see Fallback): the latest outage during which the
	// copy decided the tenant (0: none; see adopt and restore), and the leases released on it
	// then that it did not hold (Redis may: they are dropped there when it is charged), at most
	// maxReported.
	outage   int64
	released []int64
}

type mark struct{ job, at int64 } // admitted at

// memLimit is one limit's stored state, by id and kind: a bucket's tat, a window's or quota's
// log, a concurrency limit's leases.
type memLimit struct {
	id   int64
	kind Kind
	tat  int64
	iv   int64 // a bucket's: the interval (µs) its tat was kept under
	log  []entry
	tags []leaseTag
}

type jobKey struct{ tenant, id string }

// sweepEvery is how often (in clock time) a shard drops expired entries.
const sweepEvery = int64(time.Second / time.Microsecond)

// maxMarks is MAX_MARKS of lua/state.lua.
const maxMarks = lua.MaxMarks

// NewMemory returns an in-process limiter reading time from now (time.Now when nil).
func NewMemory(opts Options, now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	m := &Memory{opts: opts.withDefaults(), now: now, seed: maphash.MakeSeed(), pools: memPools{pools: map[string]*memPool{}}}
	m.Forgot(opts.Born)
	for i := range m.shards {
		m.shards[i].tenants = make(map[string]*memState)
		m.shards[i].jobs = make(map[jobKey]int64)
	}
	return m
}

// shard is the shard of tenant's state, and of its shadow state (shadowKey).
func (m *Memory) shard(tenant string) uint64 {
	if i := strings.IndexByte(tenant, 0); i >= 0 {
		tenant = tenant[:i]
	}
	return maphash.String(m.seed, tenant) % memShards
}

// lock takes the tenant's shard at the backend's current time, sweeping it now and then, and
// returns the shard (locked), the tenant's live state (nil when none) and the time in µs.
func (m *Memory) lock(tenant string) (*memShard, *memState, int64) {
	sh := &m.shards[m.shard(tenant)]
	sh.mu.Lock()
	now := m.now().UnixMicro()
	if now >= sh.nextSweep {
		sh.sweep(now, m.opts.SlotGrace.Microseconds())
		sh.nextSweep = now + sweepEvery
	}
	st := sh.tenants[tenant]
	if st != nil && st.expiry <= now {
		delete(sh.tenants, tenant)
		st = nil
	}
	return sh, st, now
}

// load fills the shard's scratch with the plan's limits' state at now: read_state and load of
// lua/state.lua (a limit without state was used up at born, µs; see Plan.forgotten).
func (sh *memShard) load(st *memState, p *Plan, now, born int64) []work {
	return sh.loadInto(&sh.work, st, p, now, born)
}

// loadInto is load into the scratch *scratch.
func (sh *memShard) loadInto(scratch *[]work, st *memState, p *Plan, now, born int64) []work {
	for len(*scratch) < len(p.specs) {
		*scratch = append(*scratch, work{})
	}
	ws := (*scratch)[:len(p.specs)]
	sh.expired = 0
	for i := range p.specs {
		sp := &p.specs[i]
		var rec *memLimit
		if st != nil {
			for k := range st.limits {
				if st.limits[k].id == sp.id && st.limits[k].kind == sp.kind {
					rec = &st.limits[k]
				}
			}
		}
		switch {
		case rec == nil:
			ws[i] = p.forgotten(i, now, born, ws[i].log[:0], ws[i].tags[:0])
		case sp.kind == KindBucket:
			t := rec.tat
			if rec.iv > 0 && rec.iv != sp.iv && t > now { // the tokens used are kept, not the time owed
				t = now + int64(math.Ceil(float64(t-now)*float64(sp.iv)/float64(rec.iv)))
			}
			ws[i].tat = max(t, now)
		case sp.kind == KindConcurrency:
			log, tags := ws[i].log[:0], ws[i].tags[:0]
			for j, e := range rec.log {
				if e.death > now {
					log, tags = append(log, e), append(tags, rec.tags[j])
				} else if rec.tags[j].id != 0 {
					sh.expired++
				}
			}
			ws[i] = work{log: log, tags: tags}
		default:
			log := ws[i].log[:0]
			for _, e := range rec.log {
				if e.death > now {
					log = append(log, e)
				}
			}
			ws[i] = work{log: log}
		}
	}
	return ws
}

// Forgot says that what this backend would have known before t is lost (Options.Born): limits
// without state are taken for empty at t and refilled since. A process that starts after another
// forwarded jobs until t sets it to t; the zero time takes them for full.
func (m *Memory) Forgot(t time.Time) {
	if t.IsZero() {
		m.bornAt.Store(0)
		return
	}
	m.bornAt.Store(t.UnixMicro())
}

func (m *Memory) born() int64 { return m.bornAt.Load() }

// store writes the tenant's state back: write_state of lua/state.lua.
func (sh *memShard) store(tenant string, st *memState, p *Plan, ws []work, now int64, o Options) {
	cut := now - o.Redeem.Microseconds()
	first := 0
	for first < len(st.marks) && (abs(st.marks[first].at) < cut || stored(st.marks[first].job, st.stored)) {
		first++
	}
	if len(st.marks)-first > maxMarks {
		first = len(st.marks) - maxMarks
	}
	st.marks = append(st.marks[:0], st.marks[first:]...)
	life := p.life(ws, now)
	if len(st.marks) > 0 {
		life = max(life, o.Redeem.Microseconds())
	}
	life = max(life, st.ownerUntil-now)
	if st.stored > 0 {
		life = max(life, st.keep-now)
	}
	st.booked = liveBooked(st.booked, now)
	if len(st.booked) > 0 {
		life = max(life, st.booked[len(st.booked)-1].death-now)
	}
	if st.hold <= now {
		st.hold = 0 // state.lua writes no hold record for a hold over
	}
	life = max(life, st.hold-now)
	if life <= 0 {
		delete(sh.tenants, tenant)
		return
	}
	for len(st.limits) < len(p.specs) {
		st.limits = append(st.limits, memLimit{})
	}
	st.limits = st.limits[:len(p.specs)]
	for i := range p.specs {
		l := &st.limits[i]
		l.id, l.kind, l.tat, l.iv = p.specs[i].id, p.specs[i].kind, ws[i].tat, p.specs[i].iv
		l.log = append(l.log[:0], ws[i].log...)
		l.tags = append(l.tags[:0], ws[i].tags...)
	}
	st.expiry = now + life
	sh.tenants[tenant] = st
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// Decide decides a request at the backend's current time. The context is unused: an
// in-process decision never blocks on I/O.
func (m *Memory) Decide(_ context.Context, req Request) (Result, error) {
	if err := req.check(); err != nil {
		return Result{}, err
	}
	if req.Plan.Shadow { // the shadow state, and the shadow's job keys
		req.Tenant = shadowKey(req.Tenant)
	}
	sh, st, now := m.lock(req.Tenant)
	defer sh.mu.Unlock()
	status, rem, wait, lim, expired := sh.decide(now, m.born(), st, &req, m.opts)
	return req.Plan.result(status, rem, wait, lim, expired)
}

// decide mirrors lua/decide.lua step by step; the differential test holds them together.
func (sh *memShard) decide(now, born int64, st *memState, req *Request, o Options) (status, rem, wait, lim, expired int64) {
	p, w := req.Plan, req.Weight
	ws := sh.load(st, p, now, born)
	if st != nil {
		st.booked = liveBooked(st.booked, now)
	}
	life := o.MarkerTTL.Microseconds()
	grace := o.SlotGrace.Microseconds()
	var jk jobKey
	if req.JobID != "" {
		jk = jobKey{req.Tenant, req.JobID}
		if v, ok := sh.jobs[jk]; ok {
			if v < 0 && -v > now {
				r, b := p.remaining(ws, now)
				return int64(Duplicate), r, 0, b, 0
			}
			if v > 0 && v+grace > now {
				r, b := p.remaining(ws, now)
				if now < v {
					return int64(Early), r, v - now, b, 0
				}
				sh.jobs[jk] = -(now + life)
				if st != nil {
					var found bool
					if st.booked, found = unbook(st.booked, v+grace); found {
						sh.store(req.Tenant, st, p, ws, now, o)
						expired = sh.expired
					}
				}
				return int64(AdmittedAtSlot), r, 0, b, expired
			}
		}
	}
	s, bind := p.slot(ws, now, w)
	if horizon := o.Horizon.Microseconds(); s-now > horizon || (s > now && req.JobID == "") {
		r, _ := p.remaining(ws, now)
		return int64(Throttled), r, s - now, bind, 0
	}
	p.take(ws, s, w, LeaseKey(req.JobID))
	if st == nil {
		st = &memState{}
	}
	if s > now {
		st.booked = book(st.booked, s+grace)
	}
	sh.store(req.Tenant, st, p, ws, now, o)
	r, b := p.remaining(ws, now)
	if s == now {
		if req.JobID != "" {
			sh.jobs[jk] = -(now + life)
		}
		return int64(Admitted), r, 0, b, sh.expired
	}
	if req.JobID != "" {
		sh.jobs[jk] = s
	}
	return int64(Delayed), r, s - now, bind, sh.expired
}

// Admit decides the head of one tenant's queue at the backend's current time (see Batch).
func (m *Memory) Admit(ctx context.Context, b Batch) (BatchResult, error) {
	return admitPooled(ctx, m, b, m.admitTenant)
}

// admitTenant decides a batch on the tenant's limits alone.
func (m *Memory) admitTenant(_ context.Context, b Batch) (BatchResult, error) {
	if err := b.check(); err != nil {
		return BatchResult{}, err
	}
	sh, st, now := m.lock(b.Tenant)
	defer sh.mu.Unlock()
	outcomes := make([]int64, len(b.Jobs))
	var waits []int64
	if b.Plan.Shadow {
		waits = make([]int64, len(b.Jobs))
	}
	wait, bind, rem, expired := sh.admit(now, m.born(), st, &b, outcomes, waits, m.opts)
	return b.Plan.batchResult(wait, bind, rem, expired, outcomes, waits)
}

// shadowKey is where the memory backend keeps a tenant's shadow state (Redis: its state key
// and shadowSuffix); tenant names hold no NUL.
func shadowKey(tenant string) string { return tenant + "\x00shadow" }

// admit mirrors lua/admit.lua step by step; the differential test holds them together.
func (sh *memShard) admit(now, born int64, st *memState, b *Batch, out, swait []int64, o Options) (wait, bind, rem, expired int64) {
	p := b.Plan
	ws := sh.load(st, p, now, born)
	if st == nil {
		st = &memState{}
	}
	redeem, horizon := o.Redeem.Microseconds(), o.Horizon.Microseconds()
	if b.Peek {
		held := st.owner != 0 && st.owner != b.Owner && st.ownerUntil > now
		for i, j := range b.Jobs {
			out[i] = int64(JobNotYet)
			if stored(j.ID, st.stored) {
				out[i] = int64(JobStored)
			} else if at, ok := findMark(st, j.ID); ok && !held && at > 0 && at+redeem >= now {
				out[i] = redeemedAgo + max(now-at, 0)
			}
		}
		return 0, 0, 0, 0
	}
	wait = -1
	changed, schanged := false, false
	if b.Stored > st.stored {
		st.stored, changed = b.Stored, true
	}
	if b.Keep > 0 {
		st.keep, changed = now+b.Keep.Microseconds(), true
	}
	shadow := p.Shadow
	var sst *memState
	var sws []work
	if shadow {
		sst = sh.tenants[shadowKey(b.Tenant)]
		if sst != nil && sst.expiry <= now {
			delete(sh.tenants, shadowKey(b.Tenant))
			sst = nil
		}
		mainExpired := sh.expired // leases ended in the tenant's own state, not the trial's
		sws = sh.loadInto(&sh.shadow, sst, p, now, born)
		sh.expired = mainExpired
		if sst == nil {
			sst = &memState{}
		}
	}
	held := !shadow && st.owner != 0 && st.owner != b.Owner && st.ownerUntil > now
	if !shadow && !held {
		hold := o.Hold.Microseconds()
		if b.Release {
			hold = 0
		}
		st.owner, st.ownerUntil, changed = b.Owner, now+hold, true
		if b.LateWeight > 0 {
			p.chargeLate(ws, now, b.LateWeight, b.Late.Microseconds())
		}
	}
	for i, j := range b.Jobs {
		switch {
		case stored(j.ID, st.stored):
			out[i] = int64(JobStored)
		case held:
			if wait < 0 {
				wait, bind = st.ownerUntil-now, -1
			}
			out[i] = int64(JobNotYet)
		case shadow:
			out[i], swait[i] = int64(JobAdmitted), 0
			if sat, ok := findMark(sst, j.ID); ok && sat+lua.ShadowRedeem >= now {
				out[i], swait[i] = int64(JobRedeemed), max(sat-now, 0)
				break
			}
			s, _ := p.slot(sws, now, j.Weight)
			if s-now <= horizon {
				p.take(sws, s, j.Weight, j.ID)
				sst.marks = append(sst.marks, mark{j.ID, s})
				schanged = true
			}
			swait[i] = min(s-now, horizon)
		default:
			at, found := findMark(st, j.ID)
			if found && (at <= 0 || at+redeem < now) {
				found = false
			}
			if found {
				out[i] = redeemedAgo + max(now-at, 0) // charged nothing, even behind a job that waits (lua/admit.lua: Once)
				break
			}
			if st.hold > now { // the downstream asked for no more until then
				if wait < 0 {
					wait, bind = st.hold-now, bindDownstream
				}
				out[i] = int64(JobNotYet)
				break
			}
			s, bi := p.slot(ws, now, j.Weight)
			if s == now && wait < 0 {
				p.take(ws, now, j.Weight, j.ID)
				st.marks = append(st.marks, mark{j.ID, now})
				out[i] = int64(JobAdmitted)
			} else {
				if wait < 0 {
					wait, bind = s-now, bi
				}
				out[i] = int64(JobNotYet)
			}
		}
	}
	rws := ws
	if shadow {
		rws = sws
	}
	r, rb := p.remaining(rws, now)
	if wait < 0 {
		wait, bind = 0, rb
	}
	if changed {
		sh.store(b.Tenant, st, p, ws, now, o)
		expired = sh.expired
	}
	if schanged {
		so := o
		so.Redeem = lua.ShadowRedeem * time.Microsecond // a trial's decisions are kept that long (lua/admit.lua)
		sh.store(shadowKey(b.Tenant), sst, p, sws, now, so)
	}
	return wait, bind, r, expired
}

// findMark is the latest recent decision of job in st (lua/state.lua find_mark).
func findMark(st *memState, job int64) (at int64, ok bool) {
	for k := len(st.marks) - 1; k >= 0; k-- {
		if st.marks[k].job == job {
			return st.marks[k].at, true
		}
	}
	return 0, false
}

// sweep drops state that has logically expired, as Redis would by TTL. Reservations live until
// their slot plus grace; markers until their own expiry.
func (sh *memShard) sweep(now, grace int64) {
	for k, st := range sh.tenants {
		if st.expiry <= now {
			delete(sh.tenants, k)
		}
	}
	for k, v := range sh.jobs {
		if (v < 0 && -v <= now) || (v > 0 && v+grace <= now) {
			delete(sh.jobs, k)
		}
	}
}

// Len reports how many tenants and jobs the backend holds after dropping what has expired at
// the current time: an idle tenant leaves nothing behind.
func (m *Memory) Len() (tenants, jobs int) {
	now := m.now().UnixMicro()
	grace := m.opts.SlotGrace.Microseconds()
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		sh.sweep(now, grace)
		tenants += len(sh.tenants)
		jobs += len(sh.jobs)
		sh.mu.Unlock()
	}
	return tenants, jobs
}

// restore makes st the tenant's state (nil: none), as another backend left it in a call made
// before outage since+1 began (see Fallback), unless the copy decided the tenant during that
// outage or a later one: then st is older than what the copy knows, and it reports false.
func (m *Memory) restore(tenant string, st *memState, since int64) bool {
	sh, cur, _ := m.lock(tenant)
	defer sh.mu.Unlock()
	switch {
	case cur != nil && cur.outage > since:
		return false
	case st == nil:
		delete(sh.tenants, tenant)
	default:
		sh.tenants[tenant] = st
	}
	return true
}

// copyOf returns a copy of the tenant's live state, nil when it has none.
func (m *Memory) copyOf(tenant string) *memState {
	sh, st, _ := m.lock(tenant)
	defer sh.mu.Unlock()
	return st.clone()
}

// clone is a deep copy of st (nil: nil).
func (st *memState) clone() *memState {
	if st == nil {
		return nil
	}
	c := *st
	c.marks = slices.Clone(st.marks)
	c.booked = slices.Clone(st.booked)
	c.released = slices.Clone(st.released)
	c.limits = make([]memLimit, len(st.limits))
	for i, l := range st.limits {
		c.limits[i] = l
		c.limits[i].log = slices.Clone(l.log)
		c.limits[i].tags = slices.Clone(l.tags)
	}
	return &c
}

// adopt begins deciding tenant under p on this copy at at (µs) during outage (see Fallback) and
// returns its state then (nil: forgotten; without a record of a limit: the limit is full). An exact copy keeps its state, each named lease of a
// concurrency limit held until at least the slots forgotten at at would end (it may have been
// renewed on Redis since it was copied); any other is taken as used at at, to the bound
// Plan.forgotten states, as a Redis that lost it would. From then on, the releases of leases the
// copy does not hold are kept (memState.released), and no mirror replaces the state until the
// outage is charged (restore).
func (m *Memory) adopt(tenant string, p *Plan, at int64, exact bool, outage int64) *memState {
	sh, st, now := m.lock(tenant)
	defer sh.mu.Unlock()
	if !exact {
		sh.store(tenant, &memState{outage: outage}, p, sh.load(nil, p, now, at), now, m.opts)
		return nil
	}
	if st == nil {
		return &memState{} // every limit full
	}
	st.outage, st.released = outage, nil
	if p.concurrent {
		ws := sh.load(st, p, now, 0)
		for i := range p.specs {
			if p.specs[i].kind != KindConcurrency {
				continue
			}
			end := phantomEnd(at, p.specs[i].span)
			for j := len(ws[i].log) - 1; j >= 0; j-- {
				if e := ws[i].log[j]; ws[i].tags[j].id != 0 && e.death < end {
					t := ws[i].tags[j]
					ws[i].leaseDrop(j)
					ws[i].leasePut(end, e.weight, t)
				}
			}
		}
		sh.store(tenant, st, p, ws, now, m.opts)
		if st = sh.tenants[tenant]; st == nil {
			return nil
		}
	}
	return st.clone()
}
