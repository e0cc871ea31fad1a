// Package plansource is where the plans in force come from, live: a plans file watched for
// changes, or a document in a NATS key-value bucket shared by every replica; and beside either,
// the deployment's per-tenant state (State: pauses and overrides, tenant → plan name), in a
// bucket of its own that every replica follows whatever the plans' source.
//
// A source delivers Snapshots: each is complete and valid, or refused with an error that names
// where the problem is (file:line and field, as at start-up); a refused version leaves the
// snapshot in force. Snapshot.With applies the per-tenant state to a document. The package
// decides nothing and forwards nothing: the caller applies what it is given (see cmd/admitter).
package plansource

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/admitter/admitter/bucket"
)

// A Snapshot is the plans in force at one moment and where they come from.
type Snapshot struct {
	// Plans is the document with the overrides applied: what decisions use.
	Plans *bucket.Plans
	// Document is the plans document alone.
	Document *bucket.Plans
	// Overrides moves tenants to other plans; those whose plan the document does not define are
	// not applied (Ignored says so).
	Overrides map[string]Override
	// Pauses holds tenants' jobs until a time. Pauses that have ended may be present: see
	// PausedUntil.
	Pauses map[string]Pause
	// Ignored says what of the per-tenant state is not applied, and why: an override naming a
	// plan the document does not define, an entry that cannot be read.
	Ignored []string
	// Source says where the document was read: "file /etc/plans.yaml", "kv bucket
	// admitter_plans" or "built-in example plans".
	Source string
	// Revision is the plans bucket's revision of its latest entry (0 for a file); State the
	// state bucket's (0: none read).
	Revision, State uint64

	// legacy is what an earlier version kept in the plans bucket (KV only).
	legacy Tenants
}

// DocumentSnapshot returns a snapshot of doc alone, read from source (the built-in plans).
func DocumentSnapshot(doc *bucket.Plans, source string) *Snapshot { return build(doc, source, 0) }

// PausedUntil reports until when tenant's jobs are held at time now.
func (s *Snapshot) PausedUntil(tenant string, now time.Time) (time.Time, bool) {
	p, ok := s.Pauses[tenant]
	if !ok || !p.Until.After(now) {
		return time.Time{}, false
	}
	return p.Until, true
}

// PauseTimes returns the pauses as tenant → until, as policy.Policy.SetPauses takes them.
func (s *Snapshot) PauseTimes() map[string]time.Time {
	out := make(map[string]time.Time, len(s.Pauses))
	for t, p := range s.Pauses {
		out[t] = p.Until
	}
	return out
}

// With returns the snapshot's document with the per-tenant state st applied, beside what an
// earlier version kept in the plans bucket (st wins for a tenant in both). An override whose
// plan the document does not define is not applied: the tenant stays on the document's plan,
// and Ignored says so.
func (s *Snapshot) With(st Tenants) *Snapshot {
	out := *s
	out.Overrides, out.Pauses = map[string]Override{}, map[string]Pause{}
	maps.Copy(out.Overrides, s.legacy.Overrides)
	maps.Copy(out.Overrides, st.Overrides)
	maps.Copy(out.Pauses, s.legacy.Pauses)
	maps.Copy(out.Pauses, st.Pauses)
	out.Ignored = append(slices.Clone(s.legacy.Bad), st.Bad...)
	out.State = st.Revision
	applied := map[string]string{}
	for _, t := range slices.Sorted(maps.Keys(out.Overrides)) {
		o := out.Overrides[t]
		if _, ok := s.Document.Plan(o.Plan); !ok {
			out.Ignored = append(out.Ignored, fmt.Sprintf("override of tenant %s to plan %s (%s): the plans define no plan %s (they define %s)",
				t, o.Plan, describeSetter(o.By, o.At, o.Where), o.Plan, strings.Join(s.Document.Names(), ", ")))
			continue
		}
		applied[t] = o.Plan
	}
	plans, err := s.Document.WithTenants(applied)
	if err != nil { // tenants' keys are checked as they are read: not expected
		out.Ignored = append(out.Ignored, "overrides: "+err.Error())
		plans = s.Document
	}
	out.Plans = plans
	return &out
}

// describeSetter says who set a pause or an override, when and where it is kept.
func describeSetter(by string, at time.Time, where string) string {
	var parts []string
	if by != "" {
		parts = append(parts, "set by "+by)
	}
	if !at.IsZero() {
		parts = append(parts, "at "+at.UTC().Format(time.RFC3339))
	}
	if where != "" {
		parts = append(parts, "in "+where)
	}
	if len(parts) == 0 {
		return "by an unknown setter"
	}
	return strings.Join(parts, " ")
}

// Setter says who set p, when and where it is kept: "set by ops@bastion at
// 2026-11-25T09:00:00Z in bucket admitter_state".
func (p Pause) Setter() string { return describeSetter(p.By, p.At, p.Where) }

// Setter says who set o, when and where it is kept.
func (o Override) Setter() string { return describeSetter(o.By, o.At, o.Where) }

// Changes describes what changed from old to s, for the log: plans, pools and tenants added,
// removed or changed, overrides and pauses. Empty when nothing did.
func (s *Snapshot) Changes(old *Snapshot) []string {
	var out []string
	if old == nil {
		return nil
	}
	c := s.Plans.Diff(old.Plans)
	add := func(what string, list []string) {
		if len(list) > 0 {
			out = append(out, what+": "+strings.Join(list, ", "))
		}
	}
	add("plans added", c.PlansAdded)
	add("plans removed", c.PlansRemoved)
	add("plans changed", c.PlansChanged)
	add("pools added", c.PoolsAdded)
	add("pools removed", c.PoolsRemoved)
	add("pools changed", c.PoolsChanged)
	add("tenants added", c.TenantsAdded)
	add("tenants removed", c.TenantsRemoved)
	add("tenants moved", c.TenantsChanged)
	if c.DefaultChanged != "" {
		out = append(out, "default plan: "+c.DefaultChanged)
	}
	var paused, resumed []string
	for _, t := range slices.Sorted(maps.Keys(s.Pauses)) {
		if o, ok := old.Pauses[t]; !ok || !o.Until.Equal(s.Pauses[t].Until) {
			p := s.Pauses[t]
			paused = append(paused, t+" until "+p.Until.UTC().Format(time.RFC3339)+" ("+p.Setter()+")")
		}
	}
	for _, t := range slices.Sorted(maps.Keys(old.Pauses)) {
		if _, ok := s.Pauses[t]; !ok {
			resumed = append(resumed, t)
		}
	}
	add("paused", paused)
	add("resumed", resumed)
	return out
}

// build makes a snapshot of a document alone.
func build(doc *bucket.Plans, source string, rev uint64) *Snapshot {
	return &Snapshot{Plans: doc, Document: doc, Overrides: map[string]Override{}, Pauses: map[string]Pause{}, Source: source, Revision: rev}
}
