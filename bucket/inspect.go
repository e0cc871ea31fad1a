package bucket

import (
	"context"
	"fmt"
	"time"
)

// A Snapshot is a tenant's bucket state at one instant, for operators and tests.
type Snapshot struct {
	// At is the backend's clock when the state was read.
	At time.Time
	// Limits holds one entry per limit of the plan, in plan order.
	Limits []LimitState
}

// LimitState is one limit's state in a Snapshot.
type LimitState struct {
	// Limit is the limit's name, or its index when unnamed.
	Limit string
	// Tokens is the number of whole tokens the limit holds; negative when slots booked ahead
	// have taken more than it holds (a debt paid back at the limit's rate).
	Tokens int64
	// FullIn is how long until the limit is full again (zero when full).
	FullIn time.Duration
}

// snapshot computes a Snapshot from the limits' tats (µs; values ≤ now mean full).
func (p *Plan) snapshot(now int64, tats []int64) Snapshot {
	s := Snapshot{At: time.UnixMicro(now), Limits: make([]LimitState, len(p.Limits))}
	for i, l := range p.Limits {
		iv := l.Interval.Microseconds()
		debt := max(tats[i]-now, 0)
		tokens := l.Capacity*iv - debt
		// floor division: a partial token does not count, negative values round down too.
		q := tokens / iv
		if tokens%iv != 0 && tokens < 0 {
			q--
		}
		s.Limits[i] = LimitState{Limit: p.labels[i], Tokens: q, FullIn: time.Duration(debt) * time.Microsecond}
	}
	return s
}

// Inspect reads the tenant's state under plan without changing it.
func (m *Memory) Inspect(_ context.Context, tenant string, plan *Plan) (Snapshot, error) {
	if err := checkTenant(tenant); err != nil {
		return Snapshot{}, err
	}
	sh := &m.shards[m.shard(tenant)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := m.now().UnixMicro()
	tats := make([]int64, len(plan.Limits))
	if st := sh.tenants[tenant]; st != nil && st.expiry > now {
		copy(tats, st.tats)
	}
	return plan.snapshot(now, tats), nil
}

// Inspect reads the tenant's state under plan from Redis without changing it.
func (r *Redis) Inspect(ctx context.Context, tenant string, plan *Plan) (Snapshot, error) {
	if err := checkTenant(tenant); err != nil {
		return Snapshot{}, err
	}
	reply, err := r.inspect.Exec(ctx, r.client, []string{r.stateKey(tenant)},
		[]string{string(packInts(nil, r.now(), int64(len(plan.Limits))))}).AsBytes()
	if err != nil {
		return Snapshot{}, fmt.Errorf("bucket: redis inspect of tenant %q: %w", tenant, err)
	}
	vals := make([]int64, len(plan.Limits)+1)
	if err := unpackInts(reply, vals); err != nil {
		return Snapshot{}, fmt.Errorf("bucket: redis inspect of tenant %q: %w", tenant, err)
	}
	return plan.snapshot(vals[0], vals[1:]), nil
}
