package worker

import (
	"errors"
	"time"
)

var (
	// ErrConfig: New was given a Config it cannot work with; the message names the field.
	ErrConfig = errors.New("worker: invalid configuration")
	// ErrStarted: Start was called on a Worker already started.
	ErrStarted = errors.New("worker: already started")
	// ErrStopped: Start was called on a Worker stopped (a Worker runs once).
	ErrStopped = errors.New("worker: stopped")
)

// Retry wraps a handler's error to have the job delivered again after at least after, holding
// its lease: no done message is sent (the slot stays taken, the cost unreconciled), and the
// delivery is Nak'd with that delay (0: at once). The lease is not renewed meanwhile: a delay
// longer than what is left of it lets it end (counted by admitter as expired), and the retry
// then runs outside the tenant's concurrency limit. The consumer's MaxDeliver bounds the
// retries. Retry(nil, d) is nil.
func Retry(err error, after time.Duration) error {
	if err == nil {
		return nil
	}
	return &RetryError{Err: err, After: max(after, 0)}
}

// RetryError is the error Retry returns.
type RetryError struct {
	Err   error
	After time.Duration
}

func (e *RetryError) Error() string { return "retry after " + e.After.String() + ": " + e.Err.Error() }
func (e *RetryError) Unwrap() error { return e.Err }

// Overloaded wraps a handler's error to say that the downstream refused the job, or timed out,
// because it was overloaded (not for a fault of the job's): the done message says so
// (Admit-Outcome: overloaded), which moves an adaptive pool's limit down and counts toward its
// breaker, and the delivery is Nak'd to be delivered again after overloadedDelay. Its second
// delivery first takes its slots again (a start), so its retry waits its turn under the limit
// in force. Overloaded(nil) is nil.
func Overloaded(err error) error {
	if err == nil {
		return nil
	}
	return &OverloadedError{Err: err, After: overloadedDelay}
}

// overloadedDelay is how long a job refused as overloaded waits in the consumer before it is
// delivered again, when the downstream did not say how long.
const overloadedDelay = time.Second

// RetryAfter wraps a handler's error to say that the downstream refused the job for now and
// asked for no more until after has passed (an HTTP 429 or 503 with Retry-After): as
// Overloaded, and the done message carries Admit-Retry-After (whole seconds, rounded up), so that
// admitter forwards none of the tenant's jobs until then; the job itself is delivered again
// after after. RetryAfter(d, nil) is nil.
func RetryAfter(after time.Duration, err error) error {
	if err == nil {
		return nil
	}
	after = max(after, 0)
	return &OverloadedError{Err: err, After: after, RetryAfter: after}
}

// RetryAfterPool is RetryAfter for a downstream that limits every tenant together (a third
// party's rate limit on one account): the done message adds Admit-Retry-Scope: pool, and no job
// of the pool is forwarded until after has passed.
func RetryAfterPool(after time.Duration, err error) error {
	if err == nil {
		return nil
	}
	after = max(after, 0)
	return &OverloadedError{Err: err, After: after, RetryAfter: after, Pool: true}
}

// OverloadedError is the error Overloaded, RetryAfter and RetryAfterPool return.
type OverloadedError struct {
	Err error
	// After is how long the job waits before it is delivered again.
	After time.Duration
	// RetryAfter is how long the downstream asked for no more jobs (0: it did not say), of the
	// tenant's, or with Pool of the pool's.
	RetryAfter time.Duration
	Pool       bool
}

func (e *OverloadedError) Error() string { return "overloaded: " + e.Err.Error() }
func (e *OverloadedError) Unwrap() error { return e.Err }
