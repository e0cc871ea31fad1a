package buckettest

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/admitter/admitter/bucket"
)

// Flaky is an in-process limiter whose Admit fails while Down is set: a Redis outage for tests
// of what uses a limiter (fail modes, recovery).
type Flaky struct {
	*bucket.Memory
	Down atomic.Bool
}

// ErrFlakyDown is Flaky's error while it is down.
var ErrFlakyDown = errors.New("buckettest: flaky limiter down")

// Admit fails with ErrFlakyDown while Down is set, else asks the in-process limiter.
func (f *Flaky) Admit(ctx context.Context, b bucket.Batch) (bucket.BatchResult, error) {
	if f.Down.Load() {
		return bucket.BatchResult{}, ErrFlakyDown
	}
	return f.Memory.Admit(ctx, b)
}
