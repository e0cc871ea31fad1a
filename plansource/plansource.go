// Package plansource is where the plans in force come from, live: a plans file watched for
// changes, or a document in a NATS key-value bucket shared by every replica, with per-tenant
// overrides (tenants.<tenant> → a plan name) and pauses (pause.<tenant> → until when).
//
// A source delivers Snapshots: each is complete and valid, or refused with an error that names
// where the problem is (file:line and field, as at start-up); a refused version leaves the
// snapshot in force. The package decides nothing and forwards nothing: the caller applies what
// it is given (see cmd/admitter).
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
	// Overrides moves tenants to other plans (tenant → plan name); KV only.
	Overrides map[string]string
	// Pauses holds tenants' jobs until a time (tenant → until); KV only. Pauses that have ended
	// may be present: see PausedUntil.
	Pauses map[string]time.Time
	// Source says where the snapshot was read: "file /etc/plans.yaml" or "kv bucket admitter_plans".
	Source string
	// Revision is the KV bucket's revision of the latest entry (0 for a file).
	Revision uint64
}

// PausedUntil reports until when tenant's jobs are held at time now.
func (s *Snapshot) PausedUntil(tenant string, now time.Time) (time.Time, bool) {
	until, ok := s.Pauses[tenant]
	if !ok || !until.After(now) {
		return time.Time{}, false
	}
	return until, true
}

// Changes describes what changed from old to s, for the log: plans and tenants added, removed or
// changed, overrides and pauses. Empty when nothing did.
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
		if o, ok := old.Pauses[t]; !ok || !o.Equal(s.Pauses[t]) {
			paused = append(paused, t+" until "+s.Pauses[t].UTC().Format(time.RFC3339))
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

// build makes a snapshot of a document and its overrides; an override naming a plan the
// document does not define is an error.
func build(doc *bucket.Plans, overrides map[string]string, pauses map[string]time.Time, source string, rev uint64) (*Snapshot, error) {
	plans, err := doc.WithTenants(overrides)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	return &Snapshot{Plans: plans, Document: doc, Overrides: overrides, Pauses: pauses, Source: source, Revision: rev}, nil
}
