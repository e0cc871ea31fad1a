package bench

import (
	"context"
	"testing"

	"github.com/admitter/admitter/internal/testenv"
)

// TestTheNATSContenderAnswersItsFirstRequest: the sync scenario's NATS contender is ready when it
// is made. Its service subscribes on a connection of its own and the client asks on another: a
// request that reaches the server before the subscription does has no responder, and a run of
// make bench died so ("sync: admitter nats warm-up: nats: no responders available for
// request"). Before the contender waited for its endpoint to answer, 2 of 100 first requests
// here had no responder.
func TestTheNATSContenderAnswersItsFirstRequest(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers")
	}
	redis := testenv.StartRedis(t)
	plans, err := Plans(Defaults())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		c, err := ourNATSContender(t.Context(), t, redis.URL(), plans, []string{"t0001"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.decide(context.Background(), int64(i))
		c.close()
		if err != nil {
			t.Fatalf("contender %d: its first request: %v", i, err)
		}
	}
}
