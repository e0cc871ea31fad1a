package wire

import (
	"strconv"
	"strings"
	"time"
)

// TenantState is a tenant's buckets at one instant and why a request or job would wait now:
// the body of GET /v1/tenants/{tenant} on the decision API and of /inspect, and what `admitter
// inspect` prints.
type TenantState struct {
	Tenant string       `json:"tenant"`
	Plan   string       `json:"plan"`
	At     time.Time    `json:"at"` // the limiter's clock when the state was read
	Limits []LimitState `json:"limits"`
	// Shadow: the plan is in shadow mode (trialled, not enforced): Limits are its trial's
	// state, which nothing is held for.
	Shadow bool `json:"shadow,omitempty"`
	// HeldUntil: the replica deciding the tenant's queue holds it until then (each of its
	// decisions extends it): another replica admits none of its jobs before, so that forwards
	// one decided cannot land beside forwards another decides.
	HeldUntil *time.Time `json:"held_until,omitempty"`
	// PausedUntil: the tenant's jobs are held until then (see admitter plans pause).
	PausedUntil *time.Time `json:"paused_until,omitempty"`
	// DownstreamUntil: the downstream asked for no more of the tenant's jobs until then (a done
	// message's Admit-Retry-After): its queue's jobs wait; its synchronous requests do not.
	DownstreamUntil *time.Time `json:"downstream_until,omitempty"`
	// Reservations counts the slots booked (by reserving requests) and not yet claimed;
	// LatestSlot is the latest of them.
	Reservations int        `json:"reservations"`
	LatestSlot   *time.Time `json:"latest_slot,omitempty"`
	// WaitMs is how long a request of weight 1 would wait now, in milliseconds rounded up (0:
	// it would be allowed now), and Limit the limit it would wait for ("" when none).
	WaitMs int64  `json:"wait_ms"`
	Limit  string `json:"limit"`
	// Pool is the capacity pool the tenant's plan shares with others (absent: none). WaitMs
	// does not count it: a synchronous request does not ask pools, the queue's jobs do.
	Pool *PoolState `json:"pool,omitempty"`

	// What only the service's /inspect (and its NATS twin) answers, absent from the decision
	// API's answer:

	// Queue is the tenant's queue in the input stream.
	Queue *QueueState `json:"queue,omitempty"`
	// Sources says where each figure came from.
	Sources *Sources `json:"sources,omitempty"`
}

// QueueState is a tenant's queue: the jobs waiting for it in the input.
type QueueState struct {
	// Waiting is how many jobs of the tenant the input's streams held when the answering
	// replica counted them, at ListedAt (whichever replica holds the tenant's partition); jobs
	// forwarded in the last seconds may still be counted until they are removed. Streams says
	// which streams hold them, in the order its jobs go.
	Waiting  uint64       `json:"waiting"`
	ListedAt time.Time    `json:"listed_at"`
	Streams  QueueStreams `json:"streams,omitempty"`
	// OldestAt, OldestSeq and OldestStream: the tenant's first job in the input, read then
	// (absent: none); OldestAgeMs how long ago it was stored, at the answer's At.
	OldestAt     *time.Time `json:"oldest_at,omitempty"`
	OldestSeq    uint64     `json:"oldest_seq,omitempty"`
	OldestStream string     `json:"oldest_stream,omitempty"`
	OldestAgeMs  int64      `json:"oldest_age_ms,omitempty"`
	// Error says what could not be read.
	Error string `json:"error,omitempty"`
}

// QueueStream is how many of a tenant's jobs one stream holds (a partition's stream is named
// as the server knows it: JOBS_4_3 is partition 3 of 4).
type QueueStream struct {
	Stream string `json:"stream"`
	Jobs   uint64 `json:"jobs"`
}

// QueueStreams are the streams that hold a tenant's queue, in the order its jobs go.
type QueueStreams []QueueStream

// String names them: "JOBS_4_3" for one, "3 in JOBS, 9 in JOBS_4_3" for several.
func (ss QueueStreams) String() string {
	if len(ss) == 1 {
		return ss[0].Stream
	}
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = strconv.FormatUint(s.Jobs, 10) + " in " + s.Stream
	}
	return strings.Join(parts, ", ")
}

// Sources says where the figures of an answer came from, in words.
type Sources struct {
	// Replica is the replica that answered.
	Replica string `json:"replica"`
	// Plans is where the plans in force were read ("file /etc/admitter/plans.yaml", "kv
	// bucket plans, revision 7", "built-in example plans"); Plan why the tenant is on its plan
	// ("tenants.acme of the plans", "default_plan of the plans", "override in bucket
	// admitter_state, set by ops@bastion at ...").
	Plans string `json:"plans"`
	Plan  string `json:"plan"`
	// Limits is where the limits' state was read ("Redis redis://redis:6379, shared by every
	// replica", "the in-process buckets of replica r1").
	Limits string `json:"limits"`
	// Queue is where the queue's figures were read; Pause who set the pause, when, and where
	// it is kept.
	Queue string `json:"queue"`
	Pause string `json:"pause,omitempty"`
}

// PoolState is a pool of a TenantState: its rule, what it holds now, the tenant's share, and the
// tenants it serves lately (waiting first, in turn; at most 100).
type PoolState struct {
	Name string `json:"name"`
	// Rule is the pool in words ("8 in flight, lease 30s", "capacity 100 at 50/s").
	Rule        string `json:"rule"`
	Concurrency int64  `json:"concurrency,omitempty"`
	Capacity    int64  `json:"capacity,omitempty"`
	// InFlight is the weight holding its slots; Tokens its bucket's tokens (-1: no bucket).
	InFlight int64 `json:"in_flight"`
	Tokens   int64 `json:"tokens"`
	// Waiting is how many tenants wait for it, WaitingShares their shares together; Share the
	// tenant's (its plan's).
	Waiting       int64 `json:"waiting"`
	WaitingShares int64 `json:"waiting_shares"`
	Share         int64 `json:"share"`
	// DownstreamUntil: the downstream asked for no more of the pool's jobs until then (a done
	// message's Admit-Retry-After with Admit-Retry-Scope: pool).
	DownstreamUntil *time.Time `json:"downstream_until,omitempty"`
	// Breaker is the pool's breaker, when it has one: closed, open (until BreakerUntil) or
	// half-open (Probes jobs let through; BreakerUntil: when they are taken for lost if they have
	// not come back).
	Breaker      string     `json:"breaker,omitempty"`
	BreakerUntil *time.Time `json:"breaker_until,omitempty"`
	Probes       int64      `json:"probes,omitempty"`
	// Limit is the limit in force of an adaptive pool (absent otherwise: Concurrency), between
	// its minimum (AdaptiveMin) and Concurrency; LimitReason why it last moved; FloorMs the time
	// per job at the minimum (0: not measured yet) and TimePerJobMs the last window's, from a
	// job's forward to its done message.
	Limit        int64   `json:"limit,omitempty"`
	AdaptiveMin  int64   `json:"adaptive_min,omitempty"`
	LimitReason  string  `json:"limit_reason,omitempty"`
	FloorMs      float64 `json:"floor_ms,omitempty"`
	TimePerJobMs float64 `json:"time_per_job_ms,omitempty"`
	// Tenants it serves lately: each one's share (0: not known, it does not wait), the weight
	// it received since it last had nothing waiting, and whether it waits.
	Tenants []PoolTenant `json:"tenants,omitempty"`
}

// PoolTenant is one tenant of a PoolState.
type PoolTenant struct {
	Tenant   string `json:"tenant"`
	Share    int64  `json:"share"`
	Received int64  `json:"received"`
	Waiting  bool   `json:"waiting"`
}

// LimitState is one limit of a TenantState.
type LimitState struct {
	Limit string `json:"limit"`
	// Kind is bucket, window or quota; Rule the limit in words ("20 at 10/s", "1000 in any 1h",
	// "100000 per month (UTC)").
	Kind string `json:"kind"`
	Rule string `json:"rule"`
	// Capacity is a bucket's burst, a window's or a quota's limit.
	Capacity int64 `json:"capacity"`
	// Rate and IntervalMs (buckets): the rate as written and the time to refill one token.
	Rate       string  `json:"rate,omitempty"`
	IntervalMs float64 `json:"interval_ms,omitempty"`
	// Tokens is what the limit lets through now (negative: booked ahead past it); Used what it
	// counts (a bucket: its capacity less its tokens; a window: in the window; a quota: this
	// period).
	Tokens int64 `json:"tokens"`
	Used   int64 `json:"used"`
	// FullInMs: until the limit lets its whole capacity through again. NextInMs: until it next
	// gives something back (a bucket's next token, a window's oldest take leaving, a quota's
	// reset).
	FullInMs float64 `json:"full_in_ms"`
	NextInMs float64 `json:"next_in_ms"`
	// WaitMs is how long until a job of weight 1 fits the limit, in milliseconds rounded up.
	WaitMs int64 `json:"wait_ms"`
	// ResetsAt (quotas) is when the current period ends.
	ResetsAt *time.Time `json:"resets_at,omitempty"`
}

// InspectSubject is where the replicas of a deployment (ADMITTER_CONSUMER) answer `admitter
// inspect` over NATS, one replica per request (queue group "inspect"): the request's body is an
// InspectRequest, the reply a TenantState, or an ErrorBody with the HTTP status of the refusal
// in the Nats-Service-Error-Code header (as the decide endpoint's micro errors).
func InspectSubject(consumer string) string { return "_ADMITTER." + consumer + ".inspect" }

// InspectRequest asks a replica for a tenant's state (see InspectSubject).
type InspectRequest struct {
	Tenant string `json:"tenant"`
}
