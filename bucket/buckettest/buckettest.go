// Package buckettest is the conformance suite of admitter's limiters: one set of cases, keyed by
// the features a backend promises (limit kinds, reservations, queues, forgetting, leases, pools), that every
// backend of package bucket must pass, and that a new backend can run against itself. Each case
// drives the backend's clock (time only moves when the case says so) and checks decisions,
// waits and the state Inspect reports, to the microsecond.
//
//	func TestConformance(t *testing.T) {
//		buckettest.Exercise(t, buckettest.All, func(t testing.TB, clock func() time.Time, o bucket.Options) buckettest.Limiter {
//			return bucket.NewMemory(o, clock)
//		})
//	}
//
// It is a package for tests: it calls t.Fatal and starts nothing itself.
package buckettest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/admitter/admitter/bucket"
)

// Limiter is what the suite exercises: every verb of a backend (bucket.Limiter).
type Limiter = bucket.Limiter

// Features says what a backend promises. A case that needs more than a backend promises is
// skipped, and says why.
type Features struct {
	// Kinds are the limit kinds the backend implements; the bucket kind is always needed.
	Kinds []bucket.Kind
	// Reservations: Decide books the earliest slot for a request with a JobID, and recognises
	// the job when it comes back (Delayed, AdmittedAtSlot, Early, Duplicate).
	Reservations bool
	// Queues: Admit decides the head of a tenant's queue for its owner (see bucket.Batch).
	Queues bool
	// Forget: the backend honours Options.Born, taking a limit it holds no state for to have
	// been used up when its memory began.
	Forget bool
	// Leases: jobs admitted under a concurrency limit
	// (bucket.KindConcurrency) hold leases that Release ends, reconciling a job's cost, and
	// Renew extends.
	Leases bool
	// Pools: a plan's pool (bucket.Pool) is shared by the tenants of every plan naming it,
	// fairly by their shares.
	Pools bool
	// Downstream: what the workers report on a release is kept: the job's time downstream
	// (LeaseResult.Ran), a Retry-After that holds the tenant's or the pool's forwards, the
	// outcomes that open a pool's breaker and move an adaptive pool's limit.
	Downstream bool
}

// All is every feature: what both backends of package bucket promise.
var All = Features{
	Kinds:        []bucket.Kind{bucket.KindBucket, bucket.KindWindow, bucket.KindQuota, bucket.KindConcurrency},
	Reservations: true,
	Queues:       true,
	Forget:       true,
	Leases:       true,
	Pools:        true,
	Downstream:   true,
}

// missing says what of need f lacks, or "" when f covers it.
func (f Features) missing(need Features) string {
	for _, k := range need.Kinds {
		if !slices.Contains(f.Kinds, k) {
			return "limit kind " + k.String()
		}
	}
	switch {
	case need.Reservations && !f.Reservations:
		return "reservations"
	case need.Queues && !f.Queues:
		return "queues"
	case need.Forget && !f.Forget:
		return "forgetting (Options.Born)"
	case need.Leases && !f.Leases:
		return "leases (Release and Renew)"
	case need.Pools && !f.Pools:
		return "pools"
	case need.Downstream && !f.Downstream:
		return "downstream reports"
	}
	return ""
}

// NewLimiter returns the backend for one case: deciding at the time clock returns (the case
// moves it; it starts at Start), with opts, Options.Born included. Cases use tenant names of
// their own, so backends may share storage (one Redis) between cases.
type NewLimiter func(t testing.TB, clock func() time.Time, opts bucket.Options) Limiter

// Start is the time every case starts at: Saturday 2026-11-21 12:00 UTC.
var Start = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// Exercise runs every case that f covers against backends made by newLimiter, each as a
// subtest of t, grouped by what they exercise (decide, admit, forget, kinds).
func Exercise(t *testing.T, f Features, newLimiter NewLimiter) {
	for _, group := range []struct {
		name  string
		cases []testCase
	}{{"decide", decideCases}, {"admit", admitCases}, {"forget", forgetCases}, {"kinds", kindCases}, {"leases", leaseCases}, {"pools", poolCases}, {"downstream", downstreamCases}} {
		t.Run(group.name, func(t *testing.T) {
			for _, tc := range group.cases {
				t.Run(tc.name, func(t *testing.T) {
					if what := f.missing(tc.needs); what != "" {
						t.Skipf("the backend does not promise %s", what)
					}
					c := &clock{t: Start}
					l := newLimiter(t, c.Now, tc.opts)
					tc.run(t, &harness{t: t, l: l, c: c, tenant: uniqueTenant(tc.name)})
				})
			}
		})
	}
}

// testCase is one case of the suite.
type testCase struct {
	name  string
	needs Features
	opts  bucket.Options
	run   func(t *testing.T, h *harness)
}

// decide, reserve, queues and forget build what a case needs: Decide alone, reservations,
// queues, and forgetting on top of another need; kinds beside the bucket.
func decide(kinds ...bucket.Kind) Features { return Features{Kinds: kinds} }

func reserve(kinds ...bucket.Kind) Features { return Features{Kinds: kinds, Reservations: true} }

func queues(kinds ...bucket.Kind) Features { return Features{Kinds: kinds, Queues: true} }

func forget(f Features) Features { f.Forget = true; return f }

// clock is a settable clock: time moves only when the case says so.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) Advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// run is a random prefix for this process's tenants: cases of several runs may share a Redis.
var run = func() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}()

var tenantSeq atomic.Int64

// uniqueTenant is a tenant name no other case of any run uses.
func uniqueTenant(name string) string {
	clean := make([]byte, 0, len(name))
	for i := 0; i < len(name) && len(clean) < 24; i++ {
		if c := name[i]; c != '{' && c != '}' && c != ' ' {
			clean = append(clean, c)
		}
	}
	return fmt.Sprintf("bt-%s-%d-%s", run, tenantSeq.Add(1), clean)
}

const ms = time.Millisecond

func mustPlan(t testing.TB, name string, limits ...bucket.Limit) *bucket.Plan {
	t.Helper()
	p, err := bucket.NewPlan(name, limits...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// lim builds a token bucket of capacity c refilling one token every interval.
func lim(name string, c int64, every time.Duration) bucket.Limit {
	return bucket.Limit{Name: name, Capacity: c, Interval: every}
}

// win builds a sliding window of at most limit per window.
func win(name string, limit int64, window time.Duration) bucket.Limit {
	return bucket.Limit{Name: name, Kind: bucket.KindWindow, Capacity: limit, Window: window}
}

// quota builds a calendar quota of limit per period in loc (nil: UTC).
func quota(name string, limit int64, p bucket.Period, loc *time.Location) bucket.Limit {
	return bucket.Limit{Name: name, Kind: bucket.KindQuota, Capacity: limit, Period: p, Location: loc}
}
