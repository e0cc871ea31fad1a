package wire

import "time"

// TenantState is a tenant's buckets at one instant and why a request or job would wait now:
// the body of GET /v1/tenants/{tenant} on the decision API and of /inspect, and what `admitter
// inspect` prints.
type TenantState struct {
	Tenant string       `json:"tenant"`
	Plan   string       `json:"plan"`
	At     time.Time    `json:"at"` // the limiter's clock when the state was read
	Limits []LimitState `json:"limits"`
	// LaneOpen: queued jobs of the tenant wait in its lane, in order, and its new jobs join them.
	LaneOpen bool `json:"lane_open"`
	// PausedUntil: the tenant's jobs are held until then (see admitter plans pause).
	PausedUntil *time.Time `json:"paused_until,omitempty"`
	// Reservations counts the slots booked (by reserving requests) and not yet claimed;
	// LatestSlot is the latest of them.
	Reservations int        `json:"reservations"`
	LatestSlot   *time.Time `json:"latest_slot,omitempty"`
	// WaitMs is how long a request of weight 1 would wait now, in milliseconds rounded up (0:
	// it would be allowed now), and Limit the limit it would wait for ("" when none).
	WaitMs int64  `json:"wait_ms"`
	Limit  string `json:"limit"`
}

// LimitState is one limit of a TenantState.
type LimitState struct {
	Limit    string `json:"limit"`
	Capacity int64  `json:"capacity"`
	Rate     string `json:"rate"`
	// Tokens is the whole tokens the limit holds; negative when slots booked ahead took more.
	Tokens int64 `json:"tokens"`
	// FullInMs is how long until the limit is full again.
	FullInMs float64 `json:"full_in_ms"`
	// IntervalMs is the time to refill one token.
	IntervalMs float64 `json:"interval_ms"`
	// WaitMs is how long until the limit holds one token, in milliseconds rounded up.
	WaitMs int64 `json:"wait_ms"`
}
