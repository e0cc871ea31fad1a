package admission

import (
	"testing"
	"time"
)

// TestAFeedWithNothingToDeliverIsNotStuck: a partition's stream that never held a job (its last
// sequence 0, the feed's next 0) is not a stuck feed, however long it stays empty. Before, it was
// taken as holding jobs the feed did not deliver: /readyz answered 503 for every idle partition.
func TestAFeedWithNothingToDeliverIsNotStuck(t *testing.T) {
	t0 := time.Now()
	var f feedHealth
	f.listed(t0, 0, 0)
	f.listed(t0.Add(2*feedGrace), 0, 0)
	if err := f.broken(t0.Add(2*feedGrace), "JOBS_4_1"); err != nil {
		t.Errorf("an empty stream's feed: %v", err)
	}
	f.listed(t0.Add(3*feedGrace), 5, 0) // five jobs, none delivered
	if err := f.broken(t0.Add(4*feedGrace), "JOBS_4_1"); err == nil {
		t.Error("a feed that delivered none of the five jobs of its stream is not said to be stuck")
	}
}
