package bucket

import (
	"context"
	"time"
)

// Limiter is every verb of a backend. Memory and Redis implement all of them: a verb added here
// is a compile error until every backend has it, so no caller finds a guarantee missing by a
// type assertion. A backend that cannot do a verb answers it with an error saying so.
type Limiter interface {
	// Decide decides one request and, with a JobID, books the earliest slot at which it fits
	// (see Request).
	Decide(ctx context.Context, req Request) (Result, error)
	// Admit decides the head of one tenant's queue, in order, for the replica that owns it (see
	// Batch).
	Admit(ctx context.Context, b Batch) (BatchResult, error)
	// Release ends a job's lease (the job is done), reconciling its cost; Renew extends it (see
	// LeaseRequest).
	Release(ctx context.Context, req LeaseRequest) (LeaseResult, error)
	Renew(ctx context.Context, req LeaseRequest) (LeaseResult, error)
	// Start is a worker about to begin a job: its lease is renewed, or, when it ended while
	// the job waited for a worker (the workers were away longer than a lease), its slots are
	// taken again if they are free; otherwise nothing is taken and LeaseResult.Wait says how
	// long until they may be. So jobs whose leases ended in the output run at most a limit at
	// once when the workers return.
	Start(ctx context.Context, req LeaseRequest) (LeaseResult, error)
	// Inspect reads a tenant's state under plan without changing it (its plan's pool too).
	Inspect(ctx context.Context, tenant string, plan *Plan) (Snapshot, error)
	// InspectPool reads a pool without changing it: what it holds and whom it serves.
	InspectPool(ctx context.Context, p *Pool) (PoolSnapshot, error)
	// Ping reports whether the backend answers.
	Ping(ctx context.Context) error
	// Late is how late after its decision a forward may reach downstream before its tenant is
	// charged for it (Options.Late): Batch.LateWeight counts the forwards later than this.
	Late() time.Duration
}

var (
	_ Limiter = (*Memory)(nil)
	_ Limiter = (*Redis)(nil)
	_ Limiter = (*Fallback)(nil)
)

// Ping reports whether the backend answers: an in-process one always does.
func (m *Memory) Ping(context.Context) error { return nil }

// Late is Options.Late.
func (m *Memory) Late() time.Duration { return m.opts.Late }

// Late is Options.Late.
func (r *Redis) Late() time.Duration { return time.Duration(r.late) * time.Microsecond }
