package plansource

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/plans"
	"github.com/nats-io/nats.go/jetstream"
)

// Keys of the plans bucket and of the state bucket.
const (
	// KeyPlans holds the plans document (the YAML of a plans file), in the plans bucket.
	KeyPlans = "plans"
	// PrefixTenant + tenant holds the plan the tenant is moved to (an Override), in the state
	// bucket (see State); an earlier version wrote it in the plans bucket.
	PrefixTenant = "tenants."
	// PrefixPause + tenant holds until when the tenant is held (a Pause), in the state bucket;
	// an earlier version wrote it in the plans bucket.
	PrefixPause = "pause."
)

// KV is the plans in a NATS key-value bucket, shared by every replica: the document at key
// "plans". Every write is checked first (see Push), so that what the replicas read is valid.
// The overrides and pauses an earlier version kept in the same bucket ("tenants.<tenant>",
// "pause.<tenant>") are read too and honoured beside the state bucket's (see State).
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
		Bucket: bucketName, Description: "admitter: plans document (admitter plans push)", History: 5, Replicas: max(replicas, 1),
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
// not parse.
func (k *KV) Load(ctx context.Context) (*Snapshot, error) {
	entries, err := readEntries(ctx, k.kv)
	if err != nil {
		return nil, fmt.Errorf("plans bucket %s: %w", k.name, err)
	}
	return k.snapshot(entries)
}

// snapshot builds a snapshot from the bucket's entries: the document, and the overrides and
// pauses an earlier version kept there.
func (k *KV) snapshot(entries map[string]jetstream.KeyValueEntry) (*Snapshot, error) {
	docEntry, ok := entries[KeyPlans]
	if !ok {
		return nil, fmt.Errorf("plans bucket %s has no %q key: write one with `admitter plans push FILE`", k.name, KeyPlans)
	}
	doc, err := k.parse(k.docName(docEntry.Revision()), docEntry.Value())
	if err != nil {
		return nil, err
	}
	legacy := readTenants(entries, "plans bucket "+k.name)
	s := build(doc, "kv bucket "+k.name, legacy.Revision)
	s.legacy = legacy
	return s.With(Tenants{}), nil
}

// docName names the document in parse errors: "kv admitter_plans plans@12:7: ...".
func (k *KV) docName(rev uint64) string { return fmt.Sprintf("kv %s %s@%d", k.name, KeyPlans, rev) }

// Watch follows the bucket until ctx ends: every change that leaves it valid is given to apply
// (within about 100ms of the write), and one that does not to refuse (the snapshot in force
// stays so).
func (k *KV) Watch(ctx context.Context, apply func(*Snapshot), refuse func(error)) {
	watchEntries(ctx, k.kv, "plans bucket "+k.name, func(entries map[string]jetstream.KeyValueEntry) {
		s, err := k.snapshot(entries)
		if err != nil {
			refuse(err)
			return
		}
		apply(s)
	}, refuse)
}

// Push checks data as a plans document (named filename in errors) against the overrides, then
// writes it: those an earlier version kept in the bucket, and also (from the state bucket, see
// State). Nothing is written when it does not parse, or when it removes a plan an override
// still names.
func (k *KV) Push(ctx context.Context, filename string, data []byte, also map[string]Override) (uint64, error) {
	doc, err := k.parse(filename, data)
	if err != nil {
		return 0, err
	}
	cur, err := readEntries(ctx, k.kv)
	if err != nil {
		return 0, fmt.Errorf("plans bucket %s: %w", k.name, err)
	}
	overrides := readTenants(cur, "plans bucket "+k.name).Overrides
	maps.Copy(overrides, also)
	users := map[string][]string{}
	for t, o := range overrides {
		if _, defined := doc.Plan(o.Plan); !defined {
			users[o.Plan] = append(users[o.Plan], t)
		}
	}
	if len(users) > 0 {
		var parts []string
		for _, p := range slices.Sorted(maps.Keys(users)) {
			slices.Sort(users[p])
			parts = append(parts, fmt.Sprintf("plan %s (tenants %s)", p, strings.Join(users[p], ", ")))
		}
		return 0, fmt.Errorf("%s removes plans that tenants are set to: %s: move them first (admitter plans set TENANT PLAN, or unset TENANT)",
			filename, strings.Join(parts, "; "))
	}
	rev, err := k.kv.Put(ctx, KeyPlans, data)
	if err != nil {
		return 0, fmt.Errorf("plans bucket %s: %w", k.name, err)
	}
	return rev, nil
}

// checkTenantKey says why tenant cannot be part of a key of the bucket.
func checkTenantKey(tenant string) error {
	if !tenantKeyRE.MatchString(tenant) || strings.ContainsAny(tenant, "{}") {
		return fmt.Errorf("tenant %q cannot be named in a key of a NATS bucket: use letters, digits, '-', '_', '/' or '='", tenant)
	}
	return nil
}
