package bucket

import (
	"testing"
	"time"
)

// NewTestRedis is a Redis backend for the package's external tests (the conformance suite of
// bucket/buckettest): on the package's redis-server, or on its three-master Redis Cluster,
// deciding at clock's time instead of the server's, and taking limits it holds no state for to
// have been forgotten at o.Born (the zero time: unused) instead of asking the servers.
func NewTestRedis(t testing.TB, cluster bool, clock func() time.Time, o Options) *Redis {
	client := redisClient(t)
	if cluster {
		client = clusterClient(t)
	}
	r := NewRedis(client, "", o)
	r.pin(clock)
	if !o.Born.IsZero() {
		r.born.at.Store(o.Born.UnixMicro())
	}
	return r
}
