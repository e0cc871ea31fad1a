package activity

import (
	"cmp"
	"slices"
	"strings"
	"time"
)

// Merging the shares of several replicas: each job is decided by one replica (the one running
// its tenant's queue), so the replicas' counts add up without counting a job twice. A tenant
// decided by two replicas within the window (its queue changed hands) has the sum of both, and
// the latest decision of the two.

// A Merged tenant is a tenant's activity over every replica that decided its jobs.
type Merged struct {
	Tenant
	// Replica decided its latest job; Replicas are every replica that decided its jobs within
	// Retention, sorted, Replica among them.
	Replica  string
	Replicas []string
}

// Others are the replicas other than Replica that decided some of its jobs.
func (m *Merged) Others() []string {
	var out []string
	for _, r := range m.Replicas {
		if r != m.Replica {
			out = append(out, r)
		}
	}
	return out
}

// MergeTenants merges the shares' tenants, sorted by tenant. A tenant's counts and admitted
// weight are the sums over the shares; its latest decision, last seen time and replica are
// those of the share that saw it last (its plan too, or the latest plan any share names).
func MergeTenants(shares []Share) []Merged {
	by := map[string]*Merged{}
	for _, s := range shares {
		for _, t := range s.Tenants {
			m := by[t.Tenant]
			if m == nil {
				by[t.Tenant] = &Merged{Tenant: t, Replica: s.Replica, Replicas: []string{s.Replica}}
				continue
			}
			m.AdmittedWeight += t.AdmittedWeight
			m.Admitted += t.Admitted
			m.Delayed += t.Delayed
			m.Dead += t.Dead
			if !slices.Contains(m.Replicas, s.Replica) {
				m.Replicas = append(m.Replicas, s.Replica)
			}
			if t.LastSeen.After(m.LastSeen) || (t.LastSeen.Equal(m.LastSeen) && s.Replica < m.Replica) {
				plan := m.Plan
				m.Plan, m.LastSeen, m.Latest, m.Replica = t.Plan, t.LastSeen, t.Latest, s.Replica
				if m.Plan == "" {
					m.Plan = plan
				}
			} else if m.Plan == "" {
				m.Plan = t.Plan
			}
		}
	}
	out := make([]Merged, 0, len(by))
	for _, m := range by {
		m.AdmittedPerSec = float64(m.AdmittedWeight) / RateWindow.Seconds()
		slices.Sort(m.Replicas)
		out = append(out, *m)
	}
	slices.SortFunc(out, func(a, b Merged) int { return strings.Compare(a.Tenant.Tenant, b.Tenant.Tenant) })
	return out
}

// A ReplicaWait is a wait and the replica that decided it.
type ReplicaWait struct {
	Wait
	Replica string
}

// MergeWaits merges the shares' waits, newest first (ties: by replica), a run of identical
// waits of one replica in a row folded into one (Wait.Count, Wait.First): a share folds its
// own runs already, but a run can be cut by the ring's end or by the time order of two
// replicas' waits.
func MergeWaits(shares []Share) []ReplicaWait {
	var all []ReplicaWait
	for _, s := range shares {
		for _, w := range s.Waits {
			w.Count = max(w.Count, 1)
			if w.First.IsZero() || w.First.After(w.At) {
				w.First = w.At
			}
			all = append(all, ReplicaWait{Wait: w, Replica: s.Replica})
		}
	}
	slices.SortStableFunc(all, func(a, b ReplicaWait) int {
		return cmp.Or(b.At.Compare(a.At), strings.Compare(a.Replica, b.Replica))
	})
	out := all[:0]
	for _, w := range all {
		if n := len(out); n > 0 && out[n-1].Replica == w.Replica && w.folds(out[n-1].Wait) {
			out[n-1].fold(w.Wait) // w is older: the run's latest stays
			continue
		}
		out = append(out, w)
	}
	return out
}

// MergeSeries sums the shares' series over the n seconds before now's second (at most
// ShareSeconds), oldest first, matching seconds by their time: a share taken a moment earlier
// or later (another replica's clock) adds the seconds it has in common; the others are left
// out.
func MergeSeries(now time.Time, n int, shares []Share) []Second {
	n = min(max(n, 0), ShareSeconds)
	end := now.Unix()
	out := make([]Second, n)
	for i := range out {
		out[i].At = time.Unix(end-int64(n-i), 0)
	}
	for _, s := range shares {
		for _, sec := range s.Series {
			i := sec.At.Unix() - (end - int64(n))
			if i < 0 || i >= int64(n) {
				continue
			}
			for f, c := range sec.Jobs {
				out[i].Jobs[f] += c
			}
		}
	}
	return out
}
