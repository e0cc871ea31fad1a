package bench

import (
	"testing"
	"time"

	"github.com/admitter/admitter/internal/testenv"
)

// TestTheFlushWaitsForABusyRedis: a run of make bench died on a Redis FLUSHALL that timed out on
// the busy machine. A Redis that does not answer for a second (paused) is emptied once it
// answers again. Before, the FLUSHALL went once through a client with admitter's options and
// failed with "i/o timeout" after 0.7 s.
func TestTheFlushWaitsForABusyRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a redis-server")
	}
	redis := testenv.StartRedis(t)
	admin, err := newRedisAdmin(redis.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.close()
	if err := admin.c.Do(t.Context(), admin.c.B().Set().Key("left").Value("over").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	redis.Pause()
	defer redis.Resume()
	resume := time.AfterFunc(time.Second, redis.Resume)
	defer resume.Stop()
	if err := admin.flush(t.Context()); err != nil {
		t.Fatalf("flush: %v", err)
	}
	if n, err := admin.c.Do(t.Context(), admin.c.B().Dbsize().Build()).AsInt64(); err != nil || n != 0 {
		t.Errorf("after the flush: %d keys (%v), want 0", n, err)
	}
}
