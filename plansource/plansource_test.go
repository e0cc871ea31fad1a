package plansource

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/admitter/admitter/internal/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const (
	docA = "plans:\n  a: {limits: [{capacity: 1, rate: 1/s}]}\ndefault_plan: a\n"
	docB = "plans:\n  a: {limits: [{capacity: 1, rate: 1/s}]}\n  b: {limits: [{capacity: 2, rate: 2/s}]}\ndefault_plan: b\n"
	docC = "plans:\n  c: {limits: [{capacity: 3, rate: 3/s}]}\ndefault_plan: c\n"
	bad  = "plans:\n  a: {limits: [{capacity: 1, rate: often}]}\n"
)

// recorder collects what a watcher delivers.
type recorder struct {
	mu      sync.Mutex
	applied []*Snapshot
	refused []error
}

func (r *recorder) apply(s *Snapshot) { r.mu.Lock(); r.applied = append(r.applied, s); r.mu.Unlock() }
func (r *recorder) refuse(e error)    { r.mu.Lock(); r.refused = append(r.refused, e); r.mu.Unlock() }
func (r *recorder) counts() (int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.applied), len(r.refused)
}
func (r *recorder) last() *Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.applied[len(r.applied)-1]
}

func watchFile(t *testing.T, path string) (*File, *recorder) {
	t.Helper()
	f := &File{Path: path, Interval: 20 * time.Millisecond}
	if _, err := f.Load(); err != nil {
		t.Fatal(err)
	}
	r := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { f.Watch(ctx, r.apply, r.refuse) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return f, r
}

func TestFileWatch(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "plans.yaml")
	if err := os.WriteFile(path, []byte(docA), 0o644); err != nil {
		t.Fatal(err)
	}
	f, r := watchFile(t, path)
	waitApplied := func(n int, what string) {
		t.Helper()
		testenv.WaitFor(t, 5*time.Second, what, func() bool { a, _ := r.counts(); return a >= n })
	}
	// Replaced by rename.
	if err := os.WriteFile(path+".new", []byte(docB), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
	waitApplied(1, "the renamed file")
	if got := r.last().Plans.Names(); strings.Join(got, ",") != "a,b" {
		t.Fatalf("plans %v after the rename", got)
	}
	// Edited in place with something that does not parse: refused once, with file:line.
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 5*time.Second, "the refusal", func() bool { _, n := r.counts(); return n >= 1 })
	time.Sleep(100 * time.Millisecond)
	if a, n := r.counts(); a != 1 || n != 1 {
		t.Fatalf("after a bad edit: %d applied, %d refused; want 1 and 1 (refused once)", a, n)
	}
	if msg := r.refused[0].Error(); !strings.Contains(msg, "plans.yaml:2") || !strings.Contains(msg, "rate") {
		t.Errorf("refusal %q does not name file:line and field", msg)
	}
	// Touched without a change: nothing; Reload: applied again.
	now := time.Now().Add(time.Second)
	if err := os.WriteFile(path, []byte(docC), 0o644); err != nil {
		t.Fatal(err)
	}
	waitApplied(2, "the fixed file")
	if err := os.Chtimes(path, now, now); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if a, _ := r.counts(); a != 2 {
		t.Fatalf("a touch without a change applied again (%d)", a)
	}
	f.Reload()
	waitApplied(3, "SIGHUP")
}

func TestFileWatchFollowsSymlinks(t *testing.T) {
	dir := t.TempDir()
	for v, doc := range map[string]string{"v1": docA, "v2": docC} {
		if err := os.Mkdir(filepath.Join(dir, v), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, v, "plans.yaml"), []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "plans.yaml")
	if err := os.Symlink("..data/plans.yaml", path); err != nil {
		t.Fatal(err)
	}
	_, r := watchFile(t, path)
	if err := os.Symlink("v2", filepath.Join(dir, "..tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 5*time.Second, "the swapped version", func() bool { a, _ := r.counts(); return a >= 1 })
	if got := r.last().Plans.Names(); strings.Join(got, ",") != "c" {
		t.Fatalf("plans %v after the swap, want c", got)
	}
}

func openKV(t *testing.T) (*KV, jetstream.JetStream) {
	t.Helper()
	srv := testenv.StartNATS(t)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := OpenKV(context.Background(), js, "plans", 1, nil, "seed.yaml", []byte(docB))
	if err != nil {
		t.Fatal(err)
	}
	return kv, js
}

func TestKV(t *testing.T) {
	kv, js := openKV(t)
	ctx := context.Background()
	s, err := kv.Load(ctx)
	if err != nil || strings.Join(s.Plans.Names(), ",") != "a,b" {
		t.Fatalf("seeded: %v %v", s, err)
	}
	// A second open does not overwrite the document.
	if _, err := OpenKV(ctx, js, "plans", 1, nil, "other.yaml", []byte(docC)); err != nil {
		t.Fatal(err)
	}
	r := &recorder{}
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { kv.Watch(wctx, r.apply, r.refuse) })
	defer func() { cancel(); wg.Wait() }()
	testenv.WaitFor(t, 5*time.Second, "the first view", func() bool { a, _ := r.counts(); return a >= 1 })

	// What an earlier version wrote in the plans bucket is honoured.
	raw, err := js.KeyValue(ctx, "plans")
	if err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(time.Hour).Truncate(time.Second).UTC()
	for k, v := range map[string]string{"tenants.acme": "a", "pause.bob": until.Format(time.RFC3339)} {
		if _, err := raw.Put(ctx, k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitFor(t, 5*time.Second, "the earlier version's override and pause", func() bool {
		s := r.last()
		p, _ := s.Plans.Lookup("acme")
		u, paused := s.PausedUntil("bob", time.Now())
		return p.Name == "a" && paused && u.Equal(until) && s.Pauses["bob"].Where == "plans bucket plans"
	})
	// A document that removes a plan an override uses is refused, and nothing is written: the
	// override in the plans bucket, or one given from the state bucket.
	if _, err := kv.Push(ctx, "c.yaml", []byte(docC), nil); err == nil || !strings.Contains(err.Error(), "plan a (tenants acme)") {
		t.Errorf("push removing a used plan: %v", err)
	}
	if _, err := kv.Push(ctx, "a.yaml", []byte(docA), map[string]Override{"zed": {Plan: "b"}}); err == nil || !strings.Contains(err.Error(), "plan b (tenants zed)") {
		t.Errorf("push removing a plan the state bucket uses: %v", err)
	}
	if _, err := kv.Push(ctx, "bad.yaml", []byte(bad), nil); err == nil || !strings.Contains(err.Error(), "bad.yaml:2") {
		t.Errorf("push of a bad file: %v", err)
	}
	if s, _ := kv.Load(ctx); strings.Join(s.Document.Names(), ",") != "a,b" {
		t.Errorf("a refused push changed the document: %v", s.Document.Names())
	}
	// Written around the checks, a bad document reaches the watchers as a refusal.
	if _, err := raw.Put(ctx, KeyPlans, []byte(bad)); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 5*time.Second, "the refusal", func() bool { _, n := r.counts(); return n >= 1 })
}

// TestState: pauses and overrides live in the state bucket with who set them; every watcher
// sees them; Snapshot.With applies them to any document, leaves an override to an undefined
// plan out and says so; Resume and Unset remove what an earlier version kept in the plans
// bucket too.
func TestState(t *testing.T) {
	kv, js := openKV(t)
	ctx := context.Background()
	if _, err := LookupState(ctx, js, "admitter"); !errors.Is(err, ErrNoStateBucket) || !strings.Contains(err.Error(), "ADMITTER_CONSUMER=admitter") {
		t.Fatalf("lookup before any replica made it: %v", err)
	}
	if _, err := OpenState(ctx, js, "admitter", 1); err != nil {
		t.Fatal(err)
	}
	st, err := LookupState(ctx, js, "admitter")
	if err != nil {
		t.Fatal(err)
	}
	st.WithLegacy(kv)
	r := &struct {
		sync.Mutex
		last Tenants
		n    int
	}{}
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		st.Watch(wctx, func(t Tenants) { r.Lock(); r.last, r.n = t, r.n+1; r.Unlock() }, func(err error) { t.Errorf("watch: %v", err) })
	})
	defer func() { cancel(); wg.Wait() }()
	last := func() (Tenants, int) { r.Lock(); defer r.Unlock(); return r.last, r.n }
	testenv.WaitFor(t, 5*time.Second, "the first view", func() bool { _, n := last(); return n >= 1 })

	until := time.Now().Add(time.Hour).Truncate(time.Second).UTC()
	if err := st.Pause(ctx, "bob", until, "ops@bastion"); err != nil {
		t.Fatal(err)
	}
	if err := st.Pause(ctx, "bob", time.Now().Add(-time.Second), "ops@bastion"); err == nil {
		t.Error("a pause that has ended was set")
	}
	if err := st.Set(ctx, "acme", "b", "ops@bastion"); err != nil {
		t.Fatal(err)
	}
	if err := st.Set(ctx, "zed", "gold", "ops@bastion"); err != nil {
		t.Fatal(err)
	}
	if err := st.Set(ctx, "a{b", "a", "x"); err == nil {
		t.Error("a tenant that cannot key buckets was set")
	}
	applied := time.Now()
	testenv.WaitFor(t, 5*time.Second, "the pause and the overrides", func() bool {
		ts, _ := last()
		return len(ts.Pauses) == 1 && len(ts.Overrides) == 2
	})
	t.Logf("seen by the watcher %v after the writes", time.Since(applied))
	ts, err := st.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p := ts.Pauses["bob"]; !p.Until.Equal(until) || p.By != "ops@bastion" || p.At.IsZero() || p.Where != "bucket admitter_state" {
		t.Errorf("pause %+v", p)
	}
	doc, err := kv.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s := doc.With(ts)
	if p, _ := s.Plans.Lookup("acme"); p.Name != "b" {
		t.Errorf("acme on plan %s, want b", p.Name)
	}
	if p, _ := s.Plans.Lookup("zed"); p.Name != "b" || len(s.Ignored) != 1 || !strings.Contains(s.Ignored[0], "override of tenant zed to plan gold (set by ops@bastion") {
		t.Errorf("zed on plan %s; ignored %q", p.Name, s.Ignored)
	}
	if u, ok := s.PausedUntil("bob", time.Now()); !ok || !u.Equal(until) {
		t.Errorf("bob paused until %v %v", u, ok)
	}
	// Resume and Unset remove the plans bucket's keys of an earlier version as well.
	raw, err := js.KeyValue(ctx, "plans")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Put(ctx, PrefixPause+"carl", []byte(until.Format(time.RFC3339))); err != nil {
		t.Fatal(err)
	}
	for _, f := range []func() error{
		func() error { return st.Resume(ctx, "bob") }, func() error { return st.Resume(ctx, "carl") },
		func() error { return st.Unset(ctx, "acme") }, func() error { return st.Unset(ctx, "zed") },
	} {
		if err := f(); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Resume(ctx, "bob"); err == nil || !strings.Contains(err.Error(), "not paused in state bucket admitter_state or plans bucket plans") {
		t.Errorf("resume twice: %v", err)
	}
	if s, _ := kv.Load(ctx); len(s.Pauses) != 0 {
		t.Errorf("the earlier version's pause is left: %v", s.Pauses)
	}
	// An entry that cannot be read is left out, and said.
	rawState, err := js.KeyValue(ctx, StateBucket("admitter"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rawState.Put(ctx, PrefixPause+"dan", []byte("soon")); err != nil {
		t.Fatal(err)
	}
	if ts, _ := st.Load(ctx); len(ts.Pauses) != 0 || len(ts.Bad) != 1 || !strings.Contains(ts.Bad[0], `key pause.dan: "soon" is not a time`) {
		t.Errorf("a bad entry: %+v", ts)
	}
}

func TestSnapshotChanges(t *testing.T) {
	f := func(doc string) *Snapshot {
		t.Helper()
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "p.yaml"), []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := (&File{Path: filepath.Join(dir, "p.yaml")}).Load()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, b := f(docA), f(docB)
	got := strings.Join(b.Changes(a), "; ")
	if got != "plans added: b; default plan: a → b" {
		t.Errorf("changes %q", got)
	}
	if c := a.Changes(a); len(c) != 0 {
		t.Errorf("changes of a snapshot with itself: %v", c)
	}
}

// TestSnapshotChangesPools: a change to a pool, or to a plan's pool or share, is a change: the
// log says which pool and how (a pool's concurrency 6 → 10 once applied saying "nothing").
func TestSnapshotChangesPools(t *testing.T) {
	f := func(doc string) *Snapshot {
		t.Helper()
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "p.yaml"), []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := (&File{Path: filepath.Join(dir, "p.yaml")}).Load()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	const doc = "pools:\n  workers: {concurrency: %d, lease: 30s}\n  extra: {capacity: 5, rate: 1/s}\nplans:\n  a: {pool: workers, share: %d, limits: [{capacity: 1, rate: 1/s}]}\n%sdefault_plan: a\n"
	const b = "  b: {pool: extra, limits: [{capacity: 1, rate: 1/s}]}\n"
	six := f(fmt.Sprintf(doc, 6, 1, ""))
	for _, tc := range []struct {
		doc, want string
	}{
		{fmt.Sprintf(doc, 10, 1, ""), "pools changed: workers (6 in flight, lease 30s → 10 in flight, lease 30s)"},
		{fmt.Sprintf(doc, 6, 3, ""), "plans changed: a (share 1 → 3)"},
		{strings.Replace(fmt.Sprintf(doc, 6, 1, ""), "share: 1,", "share: 1, max_wait: 1h,", 1), "plans changed: a (max_wait none → 1h)"},
		{strings.Replace(fmt.Sprintf(doc, 6, 1, ""), "{capacity: 1, rate: 1/s}", "{capacity: 2, rate: 1/s}, {name: hourly, kind: window, limit: 9, window: 1h}", 1),
			"plans changed: a (limit 0: 1 at 1/s → 2 at 1/s; limit hourly added: 9 in any 1h)"},
		{fmt.Sprintf(doc, 6, 1, b), "plans added: b; pools added: extra (capacity 5 at 1/s)"},
	} {
		if got := strings.Join(f(tc.doc).Changes(six), "; "); got != tc.want {
			t.Errorf("changes %q, want %q", got, tc.want)
		}
	}
	if got := strings.Join(six.Changes(f(fmt.Sprintf(doc, 6, 1, b))), "; "); got != "plans removed: b; pools removed: extra" {
		t.Errorf("changes %q, want plans removed: b; pools removed: extra", got)
	}
}
