package bucket

import (
	"context"
	"fmt"
	"time"
)

// Fences. A decider that forwarded jobs of a tenant and has not yet been told they are stored
// downstream (a NATS node that stopped answering, a stream electing a leader) raises a fence on
// the tenant: while any fence of the tenant stands, Admit admits none of its jobs (Ingest sends
// them to the lane, the lane's head waits; BatchResult.Fenced says so). Without it, a second
// decider (another replica pulling the tenant's jobs, or running its lane after taking it over)
// forwards what the limits refilled meanwhile, and NATS stores both in the same instant when it
// answers again: a burst. The decider extends its fence while it waits and lowers it once its
// forwards are stored, after charging what they were late for (Charge), so that the decisions
// after the fence pay for them; a decider that died leaves a fence that ends on its own, after
// its life. Fences do not touch Decide (requests forward nothing) or plans in shadow mode.
// Each decider names its fence with an id of its own; a tenant is fenced while any stands.

// fenceSuffix follows a tenant's state key to name its fences (Redis: a sorted set of holder
// id → end); job keys follow the state key with ':', so none is this.
const fenceSuffix = "#fence"

// MaxFenceLife bounds a fence's life: a decider extends a fence it still needs well before it
// ends.
const MaxFenceLife = time.Minute

func checkFence(tenant, id string, life time.Duration) error {
	switch {
	case tenant == "":
		return fmt.Errorf("bucket: fence: empty tenant")
	case id == "" || len(id) > 200:
		return fmt.Errorf("bucket: fence of tenant %q: id must be 1 to 200 bytes, got %d", tenant, len(id))
	case life < time.Millisecond || life > MaxFenceLife:
		return fmt.Errorf("bucket: fence of tenant %q: life %v outside [1ms, %v]", tenant, life, MaxFenceLife)
	}
	return nil
}

// Fence raises the fence id on tenant, or extends it, to end life from now.
func (m *Memory) Fence(_ context.Context, tenant, id string, life time.Duration) error {
	if err := checkFence(tenant, id, life); err != nil {
		return err
	}
	sh, _, now := m.lock(tenant)
	defer sh.mu.Unlock()
	f := sh.fences[tenant]
	if f == nil {
		if sh.fences == nil {
			sh.fences = map[string]map[string]int64{}
		}
		f = map[string]int64{}
		sh.fences[tenant] = f
	}
	for k, end := range f {
		if end <= now {
			delete(f, k)
		}
	}
	f[id] = now + life.Microseconds()
	return nil
}

// Unfence lowers the fence id on tenant (none held is no error).
func (m *Memory) Unfence(_ context.Context, tenant, id string) error {
	if err := checkFence(tenant, id, time.Millisecond); err != nil {
		return err
	}
	sh, _, _ := m.lock(tenant)
	defer sh.mu.Unlock()
	if f := sh.fences[tenant]; f != nil {
		delete(f, id)
		if len(f) == 0 {
			delete(sh.fences, tenant)
		}
	}
	return nil
}

// fenceEnd is when the last of tenant's fences ends, or 0 when none stands at now (the
// ZRANGE of lua/admit.lua).
func (sh *memShard) fenceEnd(tenant string, now int64) int64 {
	var last int64
	for _, end := range sh.fences[tenant] {
		last = max(last, end)
	}
	if last > now {
		return last
	}
	return 0
}

// Fence raises the fence id on tenant, or extends it, to end life from now (lua/fence.lua):
// one script call.
func (r *Redis) Fence(ctx context.Context, tenant, id string, life time.Duration) error {
	if err := checkFence(tenant, id, life); err != nil {
		return err
	}
	return r.fenceCall(ctx, tenant, id, life.Microseconds())
}

// Unfence lowers the fence id on tenant (none held is no error): one script call.
func (r *Redis) Unfence(ctx context.Context, tenant, id string) error {
	if err := checkFence(tenant, id, time.Millisecond); err != nil {
		return err
	}
	return r.fenceCall(ctx, tenant, id, 0)
}

func (r *Redis) fenceCall(ctx context.Context, tenant, id string, life int64) error {
	key := []string{r.stateKey(tenant) + fenceSuffix}
	_, err := r.run(ctx, r.fence, func() (keys, args []string) {
		return key, []string{string(packInts(nil, r.now(), life, r.pad)), id}
	})
	if err != nil {
		return fmt.Errorf("bucket: redis fence of tenant %q: %w", tenant, err)
	}
	return nil
}
