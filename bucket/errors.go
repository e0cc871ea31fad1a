package bucket

import "errors"

// Sentinel errors. Errors returned by this package wrap one of these with context; test with
// errors.Is.
var (
	// ErrInvalidWeight: a job's weight is not an integer ≥ 1.
	ErrInvalidWeight = errors.New("bucket: invalid weight")
	// ErrWeightOverCapacity: a job's weight exceeds the smallest capacity of its plan, so it can
	// never be admitted, however long it waits.
	ErrWeightOverCapacity = errors.New("bucket: weight exceeds capacity")
	// ErrUnknownTenant: the tenant has no plan and the plans file names no default plan.
	ErrUnknownTenant = errors.New("bucket: unknown tenant")
	// ErrInvalidTenant: the tenant name cannot be used as a key (empty, or containing '{' or '}',
	// which would break the per-tenant hash tag).
	ErrInvalidTenant = errors.New("bucket: invalid tenant")
	// ErrPlansFile: the plans file is malformed; the wrapping error names the file, line and field.
	ErrPlansFile = errors.New("bucket: bad plans file")
)
