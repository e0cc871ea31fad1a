package bucket

import (
	"context"
	"encoding/binary"
	"strings"

	"fmt"
	"github.com/redis/rueidis"
	"time"
)

// A Snapshot is a tenant's bucket state at one instant, for operators and tests.
type Snapshot struct {
	// At is the backend's clock when the state was read.
	At time.Time
	// Limits holds one entry per limit of the plan, in plan order.
	Limits []LimitState
	// Reservations counts the slots booked by waiting jobs and not yet claimed (within their
	// grace). Their weight is already taken from the limits.
	Reservations int
	// LatestSlot is the latest slot booked, zero when there is none.
	LatestSlot time.Time
	// LaneOpen reports whether the tenant's lane is open: jobs of its wait there, in order, and
	// its new jobs join them.
	LaneOpen bool
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
	sh, st, now := m.lock(tenant)
	defer sh.mu.Unlock()
	tats := make([]int64, len(plan.Limits))
	copy(tats, sh.loadTats(st, plan, now, m.born()))
	snap := plan.snapshot(now, tats)
	snap.LaneOpen = st != nil && st.enq > st.done
	grace := m.opts.SlotGrace.Microseconds()
	for k, v := range sh.jobs {
		if k.tenant == tenant {
			snap.addReservation(v, now, grace)
		}
	}
	return snap, nil
}

// addReservation counts a job value (see lua/decide.lua) if it is a live booked slot.
func (s *Snapshot) addReservation(v, now, grace int64) {
	if v <= 0 || v+grace <= now {
		return
	}
	s.Reservations++
	if t := time.UnixMicro(v); t.After(s.LatestSlot) {
		s.LatestSlot = t
	}
}

// Inspect reads the tenant's state under plan from Redis without changing it.
func (r *Redis) Inspect(ctx context.Context, tenant string, plan *Plan) (Snapshot, error) {
	if err := checkTenant(tenant); err != nil {
		return Snapshot{}, err
	}
	r.refreshBorn(ctx)
	reply, err := r.inspect.Exec(ctx, r.client, []string{r.stateKey(tenant)},
		[]string{string(append(packInts(nil, r.now(), r.born.at.Load(), int64(len(plan.Limits))), plan.packed...))}).AsBytes()
	if err != nil {
		return Snapshot{}, fmt.Errorf("bucket: redis inspect of tenant %q: %w", tenant, err)
	}
	vals := make([]int64, len(plan.Limits)+4)
	if err := unpackInts(reply, vals); err != nil {
		return Snapshot{}, fmt.Errorf("bucket: redis inspect of tenant %q: %w", tenant, err)
	}
	snap := plan.snapshot(vals[0], vals[4:])
	snap.LaneOpen = vals[1] == 1
	if err := r.scanReservations(ctx, tenant, &snap, vals[0]); err != nil {
		return Snapshot{}, fmt.Errorf("bucket: redis inspect of tenant %q: %w", tenant, err)
	}
	return snap, nil
}

// scanReservations counts the tenant's booked slots: SCAN for its job keys on every node (they
// share the tenant's hash tag, so one node holds them all), then read them.
func (r *Redis) scanReservations(ctx context.Context, tenant string, snap *Snapshot, now int64) error {
	pattern := globEscape(r.stateKey(tenant)) + ":*"
	for _, node := range r.client.Nodes() {
		for cursor := uint64(0); ; {
			e, err := node.Do(ctx, node.B().Scan().Cursor(cursor).Match(pattern).Count(1000).Build()).AsScanEntry()
			if err != nil {
				return fmt.Errorf("scan: %w", err)
			}
			if len(e.Elements) > 0 {
				cmds := make(rueidis.Commands, len(e.Elements))
				for i, k := range e.Elements {
					cmds[i] = node.B().Get().Key(k).Build()
				}
				for _, res := range node.DoMulti(ctx, cmds...) {
					b, err := res.AsBytes()
					if rueidis.IsRedisNil(err) {
						continue // expired between SCAN and GET
					}
					if err != nil {
						return fmt.Errorf("read job key: %w", err)
					}
					if len(b) == 8 {
						snap.addReservation(int64(binary.LittleEndian.Uint64(b)), now, r.grace)
					}
				}
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	return nil
}

// globEscape quotes the characters SCAN's MATCH treats specially.
func globEscape(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`*?[]\`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}
