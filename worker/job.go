package worker

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go"
)

// A Handler does one job. Its ctx is cancelled only by a hard stop (Worker.Stop's bound
// passed, or Start's ctx done). It returns nil when the job is done, an error when it failed
// for good (the job is terminated), or Retry(err, after) to have it delivered again holding
// its lease. See the package documentation for what each outcome sends.
type Handler func(ctx context.Context, j *Job) error

// A Job is one delivery of a forwarded job, valid until its handler returns. Its fields are
// read from the forward's subject and headers; its methods are safe for concurrent use (a
// handler may hand the job to goroutines of its own, as long as they are done when it returns).
type Job struct {
	// Tenant is the tenant the job was admitted for: the {tenant} token of its subject under
	// Config.Out, else its Admit-Tenant header.
	Tenant string
	// Plan is the tenant's plan when the job was admitted (Admit-Plan).
	Plan string
	// Weight is the weight it was admitted with (Admit-Weight; 1 when absent).
	Weight int64
	// Lease is the job's lease (Admit-Lease): 0 when it holds none (its plan has no
	// concurrency limit, or it was forwarded in shadow mode or without a decision).
	Lease int64
	// LeaseLength is how long the lease lasts from its start or last renewal
	// (Admit-Lease-Ms, else Config.Lease); 0 when unknown: the lease is then not renewed.
	LeaseLength time.Duration
	// Attempt counts the deliveries of the forward to this consumer, 1 the first time.
	Attempt uint64
	// Subject, Header and Data are the forward's: its subject under Config.Out, every header
	// of the producer's with admitter's own (see README, "Headers"), and the payload.
	Subject string
	Header  nats.Header
	Data    []byte

	cost atomic.Int64 // noCost until SetCost

	mu       sync.Mutex
	deadline time.Time
}

// noCost is a job's cost before SetCost: nothing to reconcile.
const noCost = -1

// SetCost reports what the job really cost, in the units of its weight: the done message then
// carries it as Admit-Cost, and admitter charges the difference from Weight to the plan's
// other limits (or gives it back). The last call wins; a negative cost clears it, one above
// wire.MaxCost is sent as wire.MaxCost. It has no effect on a job without a lease (admitter
// reconciles only a lease it holds).
func (j *Job) SetCost(cost int64) {
	if cost < 0 {
		cost = noCost
	}
	j.cost.Store(min(cost, wire.MaxCost))
}

// LeaseDeadline is when the job's lease ends unless renewed, as this process estimates it: the
// forward's store time (its JetStream metadata) plus LeaseLength, then, after each renewal,
// the time the renewal was sent plus LeaseLength. It is zero when the job holds no lease or its
// length is unknown. A deadline in the past means the lease has ended (a renewal was answered
// that it was not held): the job now runs outside its tenant's concurrency limit.
func (j *Job) LeaseDeadline() time.Time {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.deadline
}

func (j *Job) setDeadline(t time.Time) {
	j.mu.Lock()
	j.deadline = t
	j.mu.Unlock()
}

// lost records that the lease was found ended at now.
func (j *Job) lost(now time.Time) {
	j.mu.Lock()
	if j.deadline.After(now) {
		j.deadline = now
	}
	j.mu.Unlock()
}
