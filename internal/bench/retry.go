package bench

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// retry calls attempt until it succeeds, for at most within: a readiness probe (a server that
// answers, an endpoint subscribed) or a set-up step that a busy machine may fail for a while (a
// FLUSHALL that timed out, a stream not created in time). Every attempt's context ends with the
// bound; between tries it pauses retryPause, doubling up to retryPauseMax. An attempt whose error
// is wrapped in permanent ends it at once (a process that exited will not become ready). The
// error names what was tried, the bound, the tries and the last attempt's error; when ctx ends
// first, it wraps ctx's error.
func retry(ctx context.Context, what string, within time.Duration, attempt func(ctx context.Context) error) error {
	bounded, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	pause := retryPause
	for tries := 1; ; tries++ {
		err := attempt(bounded)
		if err == nil {
			return nil
		}
		if p, ok := errors.AsType[permanent](err); ok {
			return fmt.Errorf("%s: %w", what, p.error)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w (the last try: %v)", what, ctx.Err(), err)
		}
		t := time.NewTimer(pause)
		select {
		case <-bounded.Done():
			t.Stop()
		case <-t.C:
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w (the last try: %v)", what, ctx.Err(), err)
		}
		if bounded.Err() != nil {
			return fmt.Errorf("%s: not done within %v (%d tries), the last: %w", what, within, tries, err)
		}
		pause = min(2*pause, retryPauseMax)
	}
}

// readyWithin bounds the wait for a server or a process started by a scenario to answer.
const readyWithin = 30 * time.Second

// The pauses of retry between tries.
const (
	retryPause    = 10 * time.Millisecond
	retryPauseMax = 250 * time.Millisecond
)

// permanent is an attempt's error that no retry mends: retry returns it at once.
type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }
