package plansource

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/plans"
	"github.com/nats-io/nats.go/jetstream"
)

// Keys of the plans bucket.
const (
	// KeyPlans holds the plans document (the YAML of a plans file).
	KeyPlans = "plans"
	// PrefixTenant + tenant holds the name of the plan the tenant is moved to.
	PrefixTenant = "tenants."
	// PrefixPause + tenant holds the time (RFC 3339) until which the tenant's jobs are held.
	PrefixPause = "pause."
)

// KV is the plans in a NATS key-value bucket, shared by every replica: the document at key
// "plans", overrides at "tenants.<tenant>", pauses at "pause.<tenant>". The bucket keeps one
// revision of each key; every write is checked first (see Push, Set, Pause), so that what the
// replicas read is valid.
type KV struct {
	kv    jetstream.KeyValue
	name  string
	parse func(filename string, data []byte) (*bucket.Plans, error)
}

// OpenKV opens (creating it when absent) the plans bucket. When it holds no document yet, seed
// is parsed and written there first (the plans file, or the built-in example), so that a new
// bucket starts from what a single replica would have used.
//
// replicas is how many servers of a NATS cluster hold a bucket created here (0: 1).
func OpenKV(ctx context.Context, js jetstream.JetStream, bucketName string, replicas int, parse func(string, []byte) (*bucket.Plans, error), seedName string, seed []byte) (*KV, error) {
	if !bucketNameRE.MatchString(bucketName) {
		return nil, fmt.Errorf("plans bucket %q: a bucket name is letters, digits, '-' and '_'", bucketName)
	}
	if parse == nil {
		parse = plans.Parse
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: bucketName, Description: "admitter: plans document, per-tenant overrides and pauses", History: 5, Replicas: max(replicas, 1),
	})
	if err != nil {
		return nil, fmt.Errorf("plans bucket %s: %w", bucketName, err)
	}
	k := &KV{kv: kv, name: bucketName, parse: parse}
	if seed != nil {
		if _, err := kv.Get(ctx, KeyPlans); errors.Is(err, jetstream.ErrKeyNotFound) {
			if _, err := parse(seedName, seed); err != nil {
				return nil, err
			}
			if _, err := kv.Create(ctx, KeyPlans, seed); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
				return nil, fmt.Errorf("plans bucket %s: write the first document: %w", bucketName, err)
			}
		} else if err != nil {
			return nil, fmt.Errorf("plans bucket %s: %w", bucketName, err)
		}
	}
	return k, nil
}

var (
	bucketNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)
	// tenantKeyRE is what a tenant name may be to be part of a key.
	tenantKeyRE = regexp.MustCompile(`^[-/_=a-zA-Z0-9]+$`)
)

// Name is the bucket's name.
func (k *KV) Name() string { return k.name }

// Load reads the bucket and builds a snapshot: an error when the document is missing or does
// not parse, or an override names a plan it does not define.
func (k *KV) Load(ctx context.Context) (*Snapshot, error) {
	entries := map[string]jetstream.KeyValueEntry{}
	lister, err := k.kv.ListKeys(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, fmt.Errorf("plans bucket %s: %w", k.name, err)
	}
	if lister != nil {
		for key := range lister.Keys() {
			e, err := k.kv.Get(ctx, key)
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("plans bucket %s: key %s: %w", k.name, key, err)
			}
			entries[key] = e
		}
	}
	return k.snapshot(entries)
}

// snapshot builds a snapshot from the bucket's entries.
func (k *KV) snapshot(entries map[string]jetstream.KeyValueEntry) (*Snapshot, error) {
	docEntry, ok := entries[KeyPlans]
	if !ok {
		return nil, fmt.Errorf("plans bucket %s has no %q key: write one with `admitter plans push FILE`", k.name, KeyPlans)
	}
	var rev uint64
	for _, e := range entries {
		rev = max(rev, e.Revision())
	}
	doc, err := k.parse(k.docName(docEntry.Revision()), docEntry.Value())
	if err != nil {
		return nil, err
	}
	overrides, pauses := map[string]string{}, map[string]time.Time{}
	for key, e := range entries {
		switch {
		case strings.HasPrefix(key, PrefixTenant):
			overrides[key[len(PrefixTenant):]] = string(e.Value())
		case strings.HasPrefix(key, PrefixPause):
			until, err := time.Parse(time.RFC3339Nano, string(e.Value()))
			if err != nil {
				return nil, fmt.Errorf("plans bucket %s: key %s: %q is not a time (RFC 3339)", k.name, key, e.Value())
			}
			pauses[key[len(PrefixPause):]] = until
		}
	}
	return build(doc, overrides, pauses, "kv bucket "+k.name, rev)
}

// docName names the document in parse errors: "kv admitter_plans plans@12:7: ...".
func (k *KV) docName(rev uint64) string { return fmt.Sprintf("kv %s %s@%d", k.name, KeyPlans, rev) }

// Watch follows the bucket until ctx ends: every change that leaves it valid is given to apply
// (within about 100ms of the write), and one that does not to refuse (the snapshot in force
// stays so).
func (k *KV) Watch(ctx context.Context, apply func(*Snapshot), refuse func(error)) {
	for ctx.Err() == nil {
		w, err := k.kv.WatchAll(ctx)
		if err != nil {
			refuse(fmt.Errorf("plans bucket %s: watch: %w", k.name, err))
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		k.follow(ctx, w, apply, refuse)
		_ = w.Stop()
	}
}

func (k *KV) follow(ctx context.Context, w jetstream.KeyWatcher, apply func(*Snapshot), refuse func(error)) {
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
			s, err := k.snapshot(entries)
			if err != nil {
				refuse(err)
				continue
			}
			apply(s)
		}
	}
}

// Push checks data as a plans document (named filename in errors) against the overrides in
// the bucket, then writes it. Nothing is written when it does not parse, or when it removes a
// plan an override still names.
func (k *KV) Push(ctx context.Context, filename string, data []byte) (uint64, error) {
	doc, err := k.parse(filename, data)
	if err != nil {
		return 0, err
	}
	cur, err := k.entries(ctx)
	if err != nil {
		return 0, err
	}
	users := map[string][]string{}
	for key, e := range cur {
		if t, ok := strings.CutPrefix(key, PrefixTenant); ok {
			if _, defined := doc.Plan(string(e.Value())); !defined {
				users[string(e.Value())] = append(users[string(e.Value())], t)
			}
		}
	}
	if len(users) > 0 {
		var parts []string
		for _, p := range slices.Sorted(maps.Keys(users)) {
			slices.Sort(users[p])
			parts = append(parts, fmt.Sprintf("plan %s (tenants %s)", p, strings.Join(users[p], ", ")))
		}
		return 0, fmt.Errorf("%s removes plans that tenants are set to in bucket %s: %s: move them first (admitter plans set TENANT PLAN, or unset TENANT)",
			filename, k.name, strings.Join(parts, "; "))
	}
	rev, err := k.kv.Put(ctx, KeyPlans, data)
	if err != nil {
		return 0, fmt.Errorf("plans bucket %s: %w", k.name, err)
	}
	return rev, nil
}

// Set moves tenant to plan, which the document must define.
func (k *KV) Set(ctx context.Context, tenant, plan string) error {
	if err := checkTenantKey(tenant); err != nil {
		return err
	}
	s, err := k.Load(ctx)
	if err != nil {
		return err
	}
	if _, ok := s.Document.Plan(plan); !ok {
		return fmt.Errorf("plan %q is not defined in bucket %s (its plans: %s)", plan, k.name, strings.Join(s.Document.Names(), ", "))
	}
	if _, err := k.kv.Put(ctx, PrefixTenant+tenant, []byte(plan)); err != nil {
		return fmt.Errorf("plans bucket %s: %w", k.name, err)
	}
	return nil
}

// Unset removes tenant's override: it is on the document's plan for it again.
func (k *KV) Unset(ctx context.Context, tenant string) error {
	return k.remove(ctx, tenant, PrefixTenant, "no override")
}

// Pause holds tenant's jobs until until.
func (k *KV) Pause(ctx context.Context, tenant string, until time.Time) error {
	if err := checkTenantKey(tenant); err != nil {
		return err
	}
	if _, err := k.kv.Put(ctx, PrefixPause+tenant, []byte(until.UTC().Format(time.RFC3339Nano))); err != nil {
		return fmt.Errorf("plans bucket %s: %w", k.name, err)
	}
	return nil
}

// Resume ends tenant's pause now.
func (k *KV) Resume(ctx context.Context, tenant string) error {
	return k.remove(ctx, tenant, PrefixPause, "not paused")
}

func (k *KV) remove(ctx context.Context, tenant, prefix, absent string) error {
	if err := checkTenantKey(tenant); err != nil {
		return err
	}
	if _, err := k.kv.Get(ctx, prefix+tenant); errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("tenant %s: %s in bucket %s", tenant, absent, k.name)
	} else if err != nil {
		return fmt.Errorf("plans bucket %s: %w", k.name, err)
	}
	if err := k.kv.Delete(ctx, prefix+tenant); err != nil {
		return fmt.Errorf("plans bucket %s: %w", k.name, err)
	}
	return nil
}

func (k *KV) entries(ctx context.Context) (map[string]jetstream.KeyValueEntry, error) {
	out := map[string]jetstream.KeyValueEntry{}
	lister, err := k.kv.ListKeys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("plans bucket %s: %w", k.name, err)
	}
	for key := range lister.Keys() {
		if e, err := k.kv.Get(ctx, key); err == nil {
			out[key] = e
		}
	}
	return out, nil
}

// checkTenantKey says why tenant cannot be part of a key of the bucket.
func checkTenantKey(tenant string) error {
	if !tenantKeyRE.MatchString(tenant) || strings.ContainsAny(tenant, "{}") {
		return fmt.Errorf("tenant %q cannot be named in the plans bucket: use letters, digits, '-', '_', '/' or '='", tenant)
	}
	return nil
}
