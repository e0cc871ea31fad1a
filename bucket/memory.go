package bucket

import (
	"context"
	"hash/maphash"
	"sync"
	"time"
)

const memShards = 64

// Memory is the in-process backend: the same decisions as Redis, for one process only (buckets
// are not shared between replicas). It is safe for concurrent use; the zero value is not usable,
// call NewMemory.
type Memory struct {
	opts   Options
	now    func() time.Time
	seed   maphash.Seed
	shards [memShards]memShard
}

type memShard struct {
	mu        sync.Mutex
	tenants   map[string]*memTenant
	jobs      map[jobKey]int64 // booked slot (> 0) or -(expiry) once admitted, as in the script
	nextSweep int64
	tats      []int64 // scratch, guarded by mu
}

type memTenant struct {
	tats   []int64 // per limit; values ≤ now mean "full"
	expiry int64   // µs; the state is gone (full) from then on
}

type jobKey struct{ tenant, id string }

// sweepEvery is how often (in clock time) a shard drops expired entries.
const sweepEvery = int64(time.Second / time.Microsecond)

// NewMemory returns an in-process limiter reading time from now (time.Now when nil).
func NewMemory(opts Options, now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	m := &Memory{opts: opts.withDefaults(), now: now, seed: maphash.MakeSeed()}
	for i := range m.shards {
		m.shards[i].tenants = make(map[string]*memTenant)
		m.shards[i].jobs = make(map[jobKey]int64)
	}
	return m
}

// Decide decides a request at the backend's current time. The context is unused: an
// in-process decision never blocks on I/O.
func (m *Memory) Decide(_ context.Context, req Request) (Result, error) {
	if err := req.check(); err != nil {
		return Result{}, err
	}
	sh := &m.shards[m.shard(req.Tenant)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := m.now().UnixMicro()
	if now >= sh.nextSweep {
		sh.sweep(now, m.opts.SlotGrace.Microseconds())
		sh.nextSweep = now + sweepEvery
	}
	status, rem, wait, lim := sh.decide(now, &req, m.opts)
	return req.Plan.result(status, rem, wait, lim)
}

func (m *Memory) shard(tenant string) uint64 { return maphash.String(m.seed, tenant) % memShards }

// decide mirrors lua/decide.lua step by step; the differential test holds them together.
func (sh *memShard) decide(now int64, req *Request, o Options) (status, rem, wait, lim int64) {
	p, w := req.Plan, req.Weight
	n := len(p.Limits)
	st := sh.tenants[req.Tenant]
	if st != nil && st.expiry <= now {
		delete(sh.tenants, req.Tenant)
		st = nil
	}
	tats := sh.tats[:0]
	for i := 0; i < n; i++ {
		t := now
		if st != nil && i < len(st.tats) && st.tats[i] > now {
			t = st.tats[i]
		}
		tats = append(tats, t)
	}
	sh.tats = tats
	remaining := func() (int64, int64) {
		best, bi := int64(-1), int64(0)
		for i, l := range p.Limits {
			iv := l.Interval.Microseconds()
			r := (l.Capacity*iv - (tats[i] - now)) / iv
			if r < 0 {
				r = 0
			}
			if best < 0 || r < best {
				best, bi = r, int64(i)
			}
		}
		return best, bi
	}
	life := o.MarkerTTL.Microseconds()
	var jk jobKey
	if req.JobID != "" {
		jk = jobKey{req.Tenant, req.JobID}
		if v, ok := sh.jobs[jk]; ok {
			if v < 0 && -v > now {
				r, b := remaining()
				return int64(Duplicate), r, 0, b
			}
			if v > 0 && v+o.SlotGrace.Microseconds() > now {
				r, b := remaining()
				if now < v {
					return int64(Early), r, v - now, b
				}
				sh.jobs[jk] = -(now + life)
				return int64(AdmittedAtSlot), r, 0, b
			}
		}
	}
	slot, bind := now, int64(0)
	for i, l := range p.Limits {
		iv := l.Interval.Microseconds()
		if s := tats[i] + w*iv - l.Capacity*iv; s > slot {
			slot, bind = s, int64(i)
		}
	}
	if horizon := o.Horizon.Microseconds(); slot-now > horizon || (slot > now && req.JobID == "") {
		r, _ := remaining()
		return int64(Throttled), r, min(slot-now, horizon), bind
	}
	if st == nil {
		st = &memTenant{}
		sh.tenants[req.Tenant] = st
	}
	st.tats = st.tats[:0]
	last := now
	for i, l := range p.Limits {
		t := max(tats[i], slot) + w*l.Interval.Microseconds()
		tats[i] = t
		st.tats = append(st.tats, t)
		last = max(last, t)
	}
	st.expiry = last
	r, b := remaining()
	if slot == now {
		if req.JobID != "" {
			sh.jobs[jk] = -(now + life)
		}
		return int64(Admitted), r, 0, b
	}
	if req.JobID != "" {
		sh.jobs[jk] = slot
	}
	return int64(Delayed), r, slot - now, bind
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
