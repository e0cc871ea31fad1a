package plansource

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// StateBucket names the deployment's state bucket: "<consumer>_state" (ADMITTER_CONSUMER).
func StateBucket(consumer string) string { return consumer + "_state" }

// ErrNoStateBucket: the state bucket does not exist (LookupState): no admitter of this
// deployment (ADMITTER_CONSUMER) ever ran on that NATS.
var ErrNoStateBucket = errors.New("plansource: no state bucket")

// A Pause holds a tenant's jobs in its queue, and denies its requests, until Until.
type Pause struct {
	Until time.Time `json:"until"`
	// By says who set it ("ops@bastion", "console: alice (cookie) from 10.0.0.7:51234"), At
	// when: empty for a pause an earlier version set.
	By string    `json:"by,omitempty"`
	At time.Time `json:"at,omitzero"`
	// Where it is kept: "bucket admitter_state", or "plans bucket plans" for a pause an earlier
	// version set there (key pause.<tenant>).
	Where string `json:"-"`
}

// An Override moves a tenant to another plan than the document's.
type Override struct {
	Plan string `json:"plan"`
	// By, At and Where: as for a Pause.
	By    string    `json:"by,omitempty"`
	At    time.Time `json:"at,omitzero"`
	Where string    `json:"-"`
}

// Tenants is per-tenant state: overrides and pauses, as one bucket holds them.
type Tenants struct {
	Overrides map[string]Override
	Pauses    map[string]Pause
	// Bad says which entries are not read, and why ("key pause.acme: \"soon\" is not ...").
	Bad []string
	// Revision is the bucket's revision of its latest entry.
	Revision uint64
}

// State is the deployment's per-tenant state in a NATS key-value bucket shared by every
// replica, whatever the plans' source: overrides at "tenants.<tenant>" and pauses at
// "pause.<tenant>", each a JSON object that says who set it and when. State is not plans: a
// plans file or document changes what plans say, State which tenants are held or moved.
//
// Earlier versions kept the same keys (with bare values: a plan name, an RFC 3339 time) in the
// plans bucket of ADMITTER_PLANS_KV: they are still honoured (the KV source reads them, see
// Snapshot.With), Resume and Unset remove them too (see WithLegacy), and nothing writes them
// any more.
type State struct {
	kv     jetstream.KeyValue
	name   string
	legacy *KV
	now    func() time.Time
}

// stateConfig is the state bucket: one revision per key (what is in force, with who set it),
// followed by watchers.
func stateConfig(consumer string, replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{Bucket: StateBucket(consumer), History: 1, Replicas: max(replicas, 1),
		Description: "admitter: per-tenant pauses and plan overrides (admitter plans pause|resume|set|unset)"}
}

// OpenState opens the deployment's state bucket, creating it when absent (what a replica does
// at start). replicas is how many servers of a NATS cluster hold a bucket created here (0: 1).
func OpenState(ctx context.Context, js jetstream.JetStream, consumer string, replicas int) (*State, error) {
	if !bucketNameRE.MatchString(consumer) {
		return nil, fmt.Errorf("state bucket %q: a bucket name is letters, digits, '-' and '_'", StateBucket(consumer))
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, stateConfig(consumer, replicas))
	if err != nil {
		return nil, fmt.Errorf("state bucket %s: %w", StateBucket(consumer), err)
	}
	return &State{kv: kv, name: StateBucket(consumer), now: time.Now}, nil
}

// LookupState opens the deployment's state bucket, which must exist (what the command line
// does: a bucket it would create under a mistyped ADMITTER_CONSUMER nobody would read). Its
// absence is ErrNoStateBucket.
func LookupState(ctx context.Context, js jetstream.JetStream, consumer string) (*State, error) {
	name := StateBucket(consumer)
	if !bucketNameRE.MatchString(consumer) {
		return nil, fmt.Errorf("state bucket %q: a bucket name is letters, digits, '-' and '_'", name)
	}
	kv, err := js.KeyValue(ctx, name)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("%w: bucket %s does not exist: no admitter with ADMITTER_CONSUMER=%s has run on this NATS (each creates it at start)", ErrNoStateBucket, name, consumer)
	}
	if err != nil {
		return nil, fmt.Errorf("state bucket %s: %w", name, err)
	}
	return &State{kv: kv, name: name, now: time.Now}, nil
}

// WithLegacy makes Resume and Unset remove the keys an earlier version wrote in the plans
// bucket k too. It returns s.
func (s *State) WithLegacy(k *KV) *State {
	s.legacy = k
	return s
}

// Name is the bucket's name.
func (s *State) Name() string { return s.name }

// Load reads the bucket now.
func (s *State) Load(ctx context.Context) (Tenants, error) {
	entries, err := readEntries(ctx, s.kv)
	if err != nil {
		return Tenants{}, fmt.Errorf("state bucket %s: %w", s.name, err)
	}
	return readTenants(entries, "bucket "+s.name), nil
}

// Watch follows the bucket until ctx ends, giving apply every version of it (within about
// 100ms of a write), the first one complete; refuse hears why it could not be watched, while
// it tries again each second.
func (s *State) Watch(ctx context.Context, apply func(Tenants), refuse func(error)) {
	watchEntries(ctx, s.kv, "state bucket "+s.name, func(entries map[string]jetstream.KeyValueEntry) {
		apply(readTenants(entries, "bucket "+s.name))
	}, refuse)
}

// Pause holds tenant until until, set by by.
func (s *State) Pause(ctx context.Context, tenant string, until time.Time, by string) error {
	if err := checkTenantKey(tenant); err != nil {
		return err
	}
	if !until.After(s.now()) {
		return fmt.Errorf("tenant %s: a pause until %s has ended already", tenant, until.UTC().Format(time.RFC3339))
	}
	return s.put(ctx, PrefixPause+tenant, Pause{Until: until.UTC(), By: by, At: s.now().UTC()})
}

// Resume ends tenant's pause now, wherever it is kept.
func (s *State) Resume(ctx context.Context, tenant string) error {
	return s.remove(ctx, tenant, PrefixPause, "not paused")
}

// Set moves tenant to plan, set by by. The plan is not checked here: the caller checks it
// against the plans it knows; a replica whose plans do not define it leaves the tenant on the
// document's plan and says so (Snapshot.Ignored).
func (s *State) Set(ctx context.Context, tenant, plan, by string) error {
	if err := checkTenantKey(tenant); err != nil {
		return err
	}
	if plan == "" {
		return fmt.Errorf("tenant %s: no plan named", tenant)
	}
	return s.put(ctx, PrefixTenant+tenant, Override{Plan: plan, By: by, At: s.now().UTC()})
}

// Unset removes tenant's override, wherever it is kept: it is on the document's plan again.
func (s *State) Unset(ctx context.Context, tenant string) error {
	return s.remove(ctx, tenant, PrefixTenant, "no override")
}

func (s *State) put(ctx context.Context, key string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := s.kv.Put(ctx, key, data); err != nil {
		return fmt.Errorf("state bucket %s: %w", s.name, err)
	}
	return nil
}

// remove deletes prefix+tenant from the state bucket and from the legacy plans bucket; absent
// from both, it says absent.
func (s *State) remove(ctx context.Context, tenant, prefix, absent string) error {
	if err := checkTenantKey(tenant); err != nil {
		return err
	}
	found := false
	buckets := []struct {
		kv   jetstream.KeyValue
		name string
	}{{s.kv, "state bucket " + s.name}}
	if s.legacy != nil {
		buckets = append(buckets, struct {
			kv   jetstream.KeyValue
			name string
		}{s.legacy.kv, "plans bucket " + s.legacy.name})
	}
	var where []string
	for _, b := range buckets {
		where = append(where, b.name)
		if _, err := b.kv.Get(ctx, prefix+tenant); errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		} else if err != nil {
			return fmt.Errorf("%s: %w", b.name, err)
		}
		if err := b.kv.Delete(ctx, prefix+tenant); err != nil {
			return fmt.Errorf("%s: %w", b.name, err)
		}
		found = true
	}
	if !found {
		return fmt.Errorf("tenant %s: %s in %s", tenant, absent, strings.Join(where, " or "))
	}
	return nil
}

// readTenants reads the overrides and pauses among entries, kept in where.
func readTenants(entries map[string]jetstream.KeyValueEntry, where string) Tenants {
	t := Tenants{Overrides: map[string]Override{}, Pauses: map[string]Pause{}}
	for _, key := range slices.Sorted(maps.Keys(entries)) {
		e := entries[key]
		t.Revision = max(t.Revision, e.Revision())
		var err error
		switch {
		case strings.HasPrefix(key, PrefixTenant):
			tenant := key[len(PrefixTenant):]
			var o Override
			if err = checkTenantKey(tenant); err == nil {
				if o, err = parseOverride(e.Value()); err == nil {
					o.Where = where
					t.Overrides[tenant] = o
				}
			}
		case strings.HasPrefix(key, PrefixPause):
			tenant := key[len(PrefixPause):]
			var p Pause
			if err = checkTenantKey(tenant); err == nil {
				if p, err = parsePause(e.Value()); err == nil {
					p.Where = where
					t.Pauses[tenant] = p
				}
			}
		}
		if err != nil {
			t.Bad = append(t.Bad, fmt.Sprintf("%s key %s: %v", where, key, err))
		}
	}
	return t
}

// parsePause reads a pause: a JSON Pause, or the bare RFC 3339 time an earlier version wrote.
func parsePause(v []byte) (Pause, error) {
	if bytes.HasPrefix(v, []byte("{")) {
		var p Pause
		if err := strictJSON(v, &p); err != nil {
			return Pause{}, err
		}
		if p.Until.IsZero() {
			return Pause{}, fmt.Errorf("%q has no until", v)
		}
		return p, nil
	}
	until, err := time.Parse(time.RFC3339Nano, string(v))
	if err != nil {
		return Pause{}, fmt.Errorf("%q is not a time (RFC 3339)", v)
	}
	return Pause{Until: until}, nil
}

// parseOverride reads an override: a JSON Override, or the bare plan name an earlier version
// wrote.
func parseOverride(v []byte) (Override, error) {
	if bytes.HasPrefix(v, []byte("{")) {
		var o Override
		if err := strictJSON(v, &o); err != nil {
			return Override{}, err
		}
		if o.Plan == "" {
			return Override{}, fmt.Errorf("%q names no plan", v)
		}
		return o, nil
	}
	if len(v) == 0 {
		return Override{}, errors.New("names no plan")
	}
	return Override{Plan: string(v)}, nil
}

func strictJSON(v []byte, into any) error {
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		return fmt.Errorf("%q: %w", v, err)
	}
	return nil
}

// readEntries reads every key of kv.
func readEntries(ctx context.Context, kv jetstream.KeyValue) (map[string]jetstream.KeyValueEntry, error) {
	out := map[string]jetstream.KeyValueEntry{}
	lister, err := kv.ListKeys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	for key := range lister.Keys() {
		e, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("key %s: %w", key, err)
		}
		out[key] = e
	}
	return out, nil
}

// watchEntries follows kv until ctx ends: view gets its entries once the current values are in,
// then after each change (writes within 100ms of each other once). A watch that cannot start or
// ends is said to refuse and started again after a second.
func watchEntries(ctx context.Context, kv jetstream.KeyValue, name string, view func(map[string]jetstream.KeyValueEntry), refuse func(error)) {
	for ctx.Err() == nil {
		w, err := kv.WatchAll(ctx)
		if err != nil {
			refuse(fmt.Errorf("%s: watch: %w", name, err))
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		follow(ctx, w, view)
		_ = w.Stop()
	}
}

func follow(ctx context.Context, w jetstream.KeyWatcher, view func(map[string]jetstream.KeyValueEntry)) {
	entries := map[string]jetstream.KeyValueEntry{}
	initial := true
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	defer settle.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil { // the current values are in: build from them now
				initial = false
				settle.Reset(0)
				continue
			}
			if e.Operation() == jetstream.KeyValuePut {
				entries[e.Key()] = e
			} else {
				delete(entries, e.Key())
			}
			if !initial {
				settle.Reset(100 * time.Millisecond) // writes in a row apply once
			}
		case <-settle.C:
			view(maps.Clone(entries))
		}
	}
}
