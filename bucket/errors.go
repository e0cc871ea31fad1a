package bucket

import (
	"errors"
	"fmt"

	"github.com/admitter/admitter/wire"
)

// codedError is a sentinel error that carries the machine code a caller maps to a dead-letter
// code, an HTTP status or a NATS micro error (see wire.CodeOf), so that no caller re-derives it
// from the error's identity.
type codedError struct {
	code wire.Code
	msg  string
}

func (e *codedError) Error() string { return e.msg }

// Code is the error's machine code.
func (e *codedError) Code() wire.Code { return e.code }

// Sentinel errors. Errors returned by this package wrap one of these with context; test with
// errors.Is, or read the code with wire.CodeOf.
var (
	// ErrInvalidWeight: a job's weight is not an integer ≥ 1.
	ErrInvalidWeight error = &codedError{wire.CodeInvalidWeight, "bucket: invalid weight"}
	// ErrWeightOverCapacity: a job's weight exceeds the smallest capacity or limit of its plan
	// (Plan.MaxWeight: a bucket's burst, a window's or a quota's limit), so it can
	// never be admitted, however long it waits.
	ErrWeightOverCapacity error = &codedError{wire.CodeWeightOverCapacity, "bucket: weight exceeds capacity"}
	// ErrUnknownTenant: the tenant has no plan and the plans file names no default plan.
	ErrUnknownTenant error = &codedError{wire.CodeUnknownTenant, "bucket: unknown tenant"}
	// ErrInvalidTenant: the tenant name cannot be used as a key (empty, or containing '{' or '}',
	// which would break the per-tenant hash tag).
	ErrInvalidTenant error = &codedError{wire.CodeInvalidTenant, "bucket: invalid tenant"}
	// ErrInvalidLease: a lease id is not 1 to 2^53-1.
	ErrInvalidLease = errors.New("bucket: invalid lease")
	// ErrInvalidCost: a job's actual cost is not 0 to 2^40.
	ErrInvalidCost = errors.New("bucket: invalid cost")
)

// LimitError is NewPlan refusing one limit of a plan: it carries the limit's index, so that a
// caller holding the limit's source (package plans: a line of a file) can point at it.
type LimitError struct {
	// Plan is the plan's name.
	Plan string
	// Index is the limit's index in the plan; Label its name, or its index when unnamed.
	Index int
	Label string
	// Msg says what is wrong with it, e.g. "capacity must be ≥ 1, got 0".
	Msg string
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("bucket: plan %q limit %s: %s", e.Plan, e.Label, e.Msg)
}
