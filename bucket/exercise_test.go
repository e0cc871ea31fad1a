package bucket_test

import (
	"testing"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/bucket/buckettest"
)

// TestConformance runs the conformance suite, every limit kind and feature, against both
// backends: in process, on a real redis-server, and on a real three-master Redis Cluster.
func TestConformance(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		buckettest.Exercise(t, buckettest.All, func(t testing.TB, clock func() time.Time, o bucket.Options) buckettest.Limiter {
			return bucket.NewMemory(o, clock)
		})
	})
	t.Run("redis", func(t *testing.T) {
		buckettest.Exercise(t, buckettest.All, func(t testing.TB, clock func() time.Time, o bucket.Options) buckettest.Limiter {
			return bucket.NewTestRedis(t, false, clock, o)
		})
	})
	// Every key of a tenant shares its hash tag, so each decision is one script call on one
	// node of a cluster, and Inspect finds the job keys on whichever node holds them.
	t.Run("redis-cluster", func(t *testing.T) {
		buckettest.Exercise(t, buckettest.All, func(t testing.TB, clock func() time.Time, o bucket.Options) buckettest.Limiter {
			return bucket.NewTestRedis(t, true, clock, o)
		})
	})
}

// TestConformanceSkipsWhatIsNotPromised: a backend promising only buckets and Decide runs the
// cases it can and skips the others.
func TestConformanceSkipsWhatIsNotPromised(t *testing.T) {
	ran := 0
	t.Run("buckets only", func(t *testing.T) {
		buckettest.Exercise(t, buckettest.Features{Kinds: []bucket.Kind{bucket.KindBucket}}, func(t testing.TB, clock func() time.Time, o bucket.Options) buckettest.Limiter {
			ran++
			return bucket.NewMemory(o, clock)
		})
	})
	if ran == 0 || ran >= 20 {
		t.Fatalf("%d cases ran on a backend of buckets without reservations or lanes", ran)
	}
}
