package admission

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/admitter/admitter/policy"
)

// Forwards decided and not yet stored. NATS may store a forward seconds after its decision (a
// node that stopped answering, a stream electing a leader, the client reconnecting); it then
// reaches downstream beside whatever the tenant's limits gave meanwhile. Three things keep the
// tenant's pace through that:
//   - on this replica, the tenant's lane does not decide while a batch of its forwards is
//     being stored (isForwarding);
//   - across replicas, a batch not stored within fenceAfter raises a fence on the tenant in the
//     limiter (policy.Fence): no replica admits the tenant's jobs until it is lowered, once
//     the batch is stored, or until it ends, fenceLife after its last extension, when the
//     replica died;
//   - a batch stored lateStore or more after its decision is charged again for what the
//     limits refilled meanwhile (chargeLate), in the call that lowers the fence.

// fenceAfter is how long a batch's forwards may take to be stored before its replica fences the
// tenant. Decisions made meanwhile by others may still land beside it: at most what the limits
// give in fenceAfter (r·fenceAfter) plus what they held. Its cost is a limiter call to raise the
// fence (the charge lowers it): end to end at saturation (make bench, 50,000 jobs of 1,000
// tenants, 2 cores), Redis calls per forwarded job went from 0.199 without fences to 0.604 at
// 25 ms, 0.324 at 50 ms and 0.300 at 100 ms; jobs/s within the run-to-run noise.
const fenceAfter = 50 * time.Millisecond

// fenceLife is how long a fence stands unless extended; its replica extends it every
// fenceLife/3 while the batch waits to be stored. A replica that dies leaves the tenant fenced
// for at most this long.
const fenceLife = 3 * time.Second

// unstored is one batch of a tenant's forwards being stored.
type unstored struct {
	s      *Service
	ctx    context.Context
	tenant string
	id     string // the fence's id: the replica's name and a count

	mu     sync.Mutex
	timer  *time.Timer // raises or extends the fence; owned by the batch, stopped by stored
	done   bool
	raised bool
}

// storing notes that a batch of tenant's forwards is about to be stored; paced: its plan paced
// them (not fail-open, not shadow), so it raises a fence if they are late. stored, then release
// end it.
func (s *Service) storing(ctx context.Context, tenant string, paced bool) *unstored {
	s.forwarding.mu.Lock()
	if s.forwarding.n == nil {
		s.forwarding.n = map[string]int{}
	}
	s.forwarding.n[tenant]++
	s.forwarding.seq++
	id := s.cfg.Replica + "/" + strconv.FormatUint(s.forwarding.seq, 36)
	s.forwarding.mu.Unlock()
	u := &unstored{s: s, ctx: ctx, tenant: tenant, id: id}
	if paced {
		u.mu.Lock() // before fence can run
		u.timer = time.AfterFunc(fenceAfter, u.fence)
		u.mu.Unlock()
	}
	return u
}

// fence raises or extends the batch's fence: the batch is late.
func (u *unstored) fence() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.done {
		return
	}
	next := fenceLife / 3
	if err := u.s.cfg.Policy.Fence(u.ctx, u.tenant, u.id, fenceLife); err != nil {
		if u.ctx.Err() == nil {
			u.s.log.Warn("forwards not stored yet, and the tenant could not be fenced: another replica may forward beside them",
				"tenant", u.tenant, "err", err)
		}
		next = 100 * time.Millisecond
	} else {
		if !u.raised {
			u.s.tel.fences.Add(u.ctx, 1)
			u.s.log.Debug("forwards not stored yet: tenant fenced", "tenant", u.tenant, "fence", u.id)
		}
		u.raised = true
	}
	u.timer.Reset(next)
}

// stored ends the fence's extensions: the batch's stores are settled. It returns once no
// extension is under way, with the id of the fence the batch raised ("" when none), for the
// charge of its lateness to lower.
func (u *unstored) stored() string {
	if u.timer == nil {
		return ""
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.done = true
	u.timer.Stop()
	if u.raised {
		return u.id
	}
	return ""
}

// release lowers fence (what stored returned), if the charge of the batch's lateness did not
// (lowered), and lets the tenant's lane decide again. A batch cut short by ctx leaves its fence
// to end on its own: its forwards may still be stored late.
func (u *unstored) release(fence string, lowered bool) {
	if fence != "" && !lowered && u.ctx.Err() == nil {
		if err := u.s.cfg.Policy.Unfence(u.ctx, u.tenant, fence); err != nil {
			u.s.log.Warn("the tenant's fence could not be lowered: its jobs wait until it ends",
				"tenant", u.tenant, "ends_within", fenceLife.String(), "err", err)
		}
	}
	s := u.s
	s.forwarding.mu.Lock()
	defer s.forwarding.mu.Unlock()
	if n := s.forwarding.n[u.tenant] - 1; n > 0 {
		s.forwarding.n[u.tenant] = n
	} else {
		delete(s.forwarding.n, u.tenant)
	}
}

// isForwarding reports whether a batch of tenant's forwards is being stored by this replica.
func (s *Service) isForwarding(tenant string) bool {
	s.forwarding.mu.Lock()
	defer s.forwarding.mu.Unlock()
	return s.forwarding.n[tenant] > 0
}

// lateStore is how long after its decision a forward may be stored without being charged
// again: the usual PubAck round trip under load stays well below it.
const lateStore = 100 * time.Millisecond

// chargeLate charges the tenant again for its forwards that were stored lateStore or more after
// they were decided (a NATS node that stopped answering, a stream electing a leader, the client
// reconnecting): they reach downstream together with what the tenant's limits gave meanwhile,
// so the limits take that back (policy.Charge) before the tenant's next decision. Fail-open and
// shadow forwards are not paced, and not charged. fence (when not empty) is the batch's fence,
// lowered with the charge; it reports whether it was.
func (s *Service) chargeLate(ctx context.Context, tenant string, jobs []job, owner []int, outs []*outMsg, fence string) (lowered bool) {
	var weight int64
	var late time.Duration
	for k, o := range outs {
		j := &jobs[owner[k]]
		if o.err != nil || o.took < lateStore || o.stream != s.cfg.StreamOut || j.verdict.Action != policy.Forward ||
			j.verdict.Degraded || j.verdict.Shadow {
			continue
		}
		weight += max(j.weight, 1)
		late = max(late, o.took)
	}
	if weight == 0 || ctx.Err() != nil {
		return false
	}
	charged, err := s.cfg.Policy.Charge(ctx, tenant, weight, late, fence)
	if err != nil {
		s.log.Warn("forwards stored late could not be charged again: downstream may see them beside what the plan gave meanwhile",
			"tenant", tenant, "weight", weight, "late", late.Round(time.Millisecond).String(), "err", err)
		return false
	}
	s.log.Debug("forwards stored late: charged again", "tenant", tenant, "weight", weight, "late", late.Round(time.Millisecond).String())
	return charged && fence != ""
}
