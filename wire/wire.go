package wire

import (
	"errors"
	"strconv"
	"strings"
	"time"
)

// Headers of the contract (see README, "Headers").
const (
	// HeaderWeight, on input: the job's weight, an integer ≥ 1; absent means 1. The name is
	// matched without regard to case.
	HeaderWeight = "Admit-Weight"
	// HeaderMaxWait, on input: how long the job may wait from its store in the input before it
	// is dead-lettered (CodeExpired); whole seconds or a Go duration (see ParseMaxWait). Its
	// plan's max_wait bounds it too: the smaller wins. The name is matched without regard to
	// case.
	HeaderMaxWait = "Admit-Max-Wait"
	// HeaderPriority, on input: the job's priority within its tenant's queue, 1 (first) to 5
	// (last); absent means DefaultPriority (3). See ParsePriority. The name is matched without
	// regard to case.
	HeaderPriority = "Admit-Priority"
	// HeaderTenant, on output: the tenant the job was admitted for.
	HeaderTenant = "Admit-Tenant"
	// HeaderPlan, on output: the tenant's plan.
	HeaderPlan = "Admit-Plan"
	// HeaderAttempts, on output: the times the job was asked about at the head of its tenant's
	// queue: 1, and 1 more for each step of the queue that left it waiting at the head (a job
	// waiting behind that head is not counted). Jobs are read, not delivered: it counts no
	// redelivery. MetricDecisions counts otherwise: a job once per outcome (delayed once).
	HeaderAttempts = "Admit-Attempts"
	// HeaderDelayMs, on output: milliseconds from the input being stored to being forwarded.
	HeaderDelayMs = "Admit-Delay-Ms"
	// HeaderDegraded, on output and on answers of the HTTP decision API: "fail-open"
	// (DegradedFailOpen) when forwarded or allowed without a decision (Redis failed, fail mode
	// open).
	HeaderDegraded = "Admit-Degraded"
	// HeaderShadow, on output and on answers of the HTTP decision API, when the tenant's plan
	// is in shadow mode (trialled, not enforced): "delayed <ms>" when the plan would have
	// delayed the job or request that long (ShadowDelayed), else "admitted".
	HeaderShadow = "Admit-Shadow"
	// HeaderError, on dead letters: a Code.
	HeaderError = "Admit-Error"
	// HeaderErrorDetail, on dead letters: a sentence saying what was wrong.
	HeaderErrorDetail = "Admit-Error-Detail"
	// HeaderErrorArrived and HeaderErrorWaitedFor, on dead letters of CodeExpired: when the input
	// stored the job (RFC 3339, UTC), and what its last decision made it wait for (see
	// WaitedFor). Like Admit-Error, they are the dead letter's and a replay removes them.
	HeaderErrorArrived   = "Admit-Error-Arrived"
	HeaderErrorWaitedFor = "Admit-Error-Waited-For"
	// OriginalPrefix replaces "Nats-" on every input header that starts with it: those are
	// directives to the server about the input's own publish (Nats-Msg-Id, Nats-Expected-*,
	// Nats-TTL) and would be enforced, wrongly, on what the admitter publishes.
	OriginalPrefix = "Admit-Original-"
	// HeaderOriginalMsgID keeps the producer's own Nats-Msg-Id.
	HeaderOriginalMsgID = OriginalPrefix + "Msg-Id"
	// HeaderInputSubject, HeaderInputSeq and HeaderInputTime, on a job waiting in its tenant's
	// lane: the subject, stream sequence and store time of the input it was moved from.
	HeaderInputSubject = "Admit-Input-Subject"
	HeaderInputSeq     = "Admit-Input-Seq"
	HeaderInputTime    = "Admit-Input-Time"
	// HeaderLease, on output: the job's lease (its input sequence) when its plan has a
	// concurrency limit; on a done or renew message: the lease it ends or extends.
	HeaderLease = "Admit-Lease"
	// HeaderLeaseLength, on output beside HeaderLease: how long the lease lasts unless renewed
	// or released (the shortest lease of the plan's concurrency limits), in whole milliseconds
	// rounded down. A worker renews before it ends (see LeaseLengthValue, ParseLeaseLength).
	HeaderLeaseLength = "Admit-Lease-Ms"
	// HeaderCost, on a done message: what the job really cost, an integer from 0 to 2^40; the
	// difference from its weight is charged or given back (reconciliation).
	HeaderCost = "Admit-Cost"
	// HeaderStart, on a renew message sent as a request: the worker is about to begin the job
	// (value "true"). The lease is renewed, or taken again if it ended while the job waited for
	// a worker and its slots are free; otherwise the answer says not held and how long to wait
	// (LeaseReply.WaitMs), and the worker puts the job back for that long without running it.
	HeaderStart = "Admit-Start"
	// HeaderOutcome, on a done message: how the job went downstream, OutcomeOK (the default),
	// OutcomeFailed (it failed for its own reasons) or OutcomeOverloaded (the downstream refused
	// it or timed out because it was overloaded). It feeds the pool's breaker and adaptive limit.
	HeaderOutcome = "Admit-Outcome"
	// HeaderDownstreamRetryAfter, on a done message: the downstream asked for no more jobs until then,
	// whole seconds from now or an HTTP date (as HTTP's Retry-After): the tenant's next forwards
	// wait (HeaderRetryScope: the pool's).
	HeaderDownstreamRetryAfter = "Admit-Retry-After"
	// HeaderRetryScope, beside HeaderDownstreamRetryAfter: RetryScopeTenant (the default) or
	// RetryScopePool (every tenant of the job's pool waits: a third party limits them together).
	HeaderRetryScope = "Admit-Retry-Scope"
)

// Defaults of the output subject (ADMITTER_SUBJECT_OUT) and of the lease subjects (see README,
// "Concurrency limits and leases").
const (
	DefaultOutSubject   = "jobs.admitted.{tenant}.>"
	DefaultDoneSubject  = "jobs.done.{tenant}.>"
	DefaultRenewSubject = "jobs.renew.{tenant}.>"
)

// Lease paths: the path label of MetricLeaseMessages, how a lease was released or renewed.
const (
	LeasePathDone  = "done"  // a message on the done subject
	LeasePathRenew = "renew" // a message on the renew subject
	LeasePathStart = "start" // a message on the renew subject with Admit-Start: true
	LeasePathAck   = "ack"   // a downstream consumer's sampled ack of the forwarded job
	LeasePathTerm  = "term"  // a downstream consumer terminated the forwarded job
	// HeaderReplayOf, on a job replayed from a dead letter (admitter dead replay, the console):
	// "<dead stream>:<sequence>" of the dead letter it was replayed from. The forwarded job
	// carries it on.
	HeaderReplayOf = "Admit-Replay-Of"
)

// Code is a dead-letter code: the value of HeaderError, and the machine-readable code of an
// error a job or request can be refused with.
type Code string

// Dead-letter codes.
const (
	CodeInvalidWeight      Code = "invalid-weight"       // Admit-Weight is not an integer from 1 to 2^40
	CodeWeightOverCapacity Code = "weight-over-capacity" // the weight exceeds the plan's smallest capacity or limit
	CodeUnknownTenant      Code = "unknown-tenant"       // no plan for the tenant and no default plan
	CodeInvalidTenant      Code = "invalid-tenant"       // the tenant token cannot name buckets ('{', '}')
	CodeInvalidMaxWait     Code = "invalid-max-wait"     // Admit-Max-Wait is not whole seconds or a duration up to 100 years
	CodeInvalidPriority    Code = "invalid-priority"     // Admit-Priority is not one of 1, 2, 3, 4, 5
	// CodeExpired: the job could not be admitted within its bound on waiting (its plan's
	// max_wait, its Admit-Max-Wait: the smaller), counted from its store in the input; or its
	// wait, known when it was decided, ends after its bound does.
	CodeExpired Code = "expired"
	// CodeTooLarge: the job, with the headers the admitter adds, can never be stored downstream
	// (larger than the output stream's maximum message size or the server's maximum payload).
	CodeTooLarge Code = "too-large"
	// CodeForwardRejected: the output stream refused the admitted job with an error that
	// retrying cannot fix; the detail quotes the server.
	CodeForwardRejected Code = "forward-rejected"
)

// Coder is implemented by errors that carry a Code.
type Coder interface{ Code() Code }

// CodeOf returns the code carried by err or any error it wraps.
func CodeOf(err error) (Code, bool) {
	var c Coder
	if errors.As(err, &c) {
		return c.Code(), true
	}
	return "", false
}

// Kind is what a message the admitter publishes is, in its Nats-Msg-Id.
type Kind string

const (
	KindForward Kind = "a" // the admitted job, on the output stream
	KindDead    Kind = "d" // the dead letter, on the dead stream
	KindLane    Kind = "w" // the job moved to its tenant's lane, on the waiting stream
	// KindReplay is a dead letter replayed to the input stream: its stream is the dead
	// stream and its sequence the dead letter's, so a second replay of the same dead letter
	// within the input stream's duplicate window is dropped.
	KindReplay Kind = "r"
)

// MsgID is the Nats-Msg-Id of what the admitter publishes for the job at seq of the input
// stream: "admitter:<kind>:<stream>:<seq>". It depends on the input only, so a publish repeated
// after a crash is dropped by the stream's duplicate window.
func MsgID(kind Kind, stream string, seq uint64) string {
	return "admitter:" + string(kind) + ":" + stream + ":" + strconv.FormatUint(seq, 10)
}

// ParseMsgID is the inverse of MsgID; ok is false for anything MsgID does not produce.
func ParseMsgID(id string) (kind Kind, stream string, seq uint64, ok bool) {
	rest, found := strings.CutPrefix(id, "admitter:")
	if !found {
		return "", "", 0, false
	}
	k, rest, found := strings.Cut(rest, ":")
	if !found {
		return "", "", 0, false
	}
	i := strings.LastIndexByte(rest, ':')
	if i < 1 {
		return "", "", 0, false
	}
	seq, err := strconv.ParseUint(rest[i+1:], 10, 64)
	if err != nil || strconv.FormatUint(seq, 10) != rest[i+1:] {
		return "", "", 0, false
	}
	switch Kind(k) {
	case KindForward, KindDead, KindLane, KindReplay:
		return Kind(k), rest[:i], seq, true
	}
	return "", "", 0, false
}

// Decisions: the admitter.decision span attribute and the outcome label of the decisions
// metric. A queued job's is its Fate's name; a synchronous request ends as admitted, throttled,
// delayed (a slot booked for its key), paused, rejected, degraded or unavailable.
const (
	DecisionAdmitted = "admitted" // the limiter let it through: forwarded, or allowed
	DecisionDelayed  = "delayed"  // it must wait: in its tenant's queue, or a slot booked for its key
	DecisionDead     = "dead"     // dead-lettered
	DecisionDegraded = "degraded" // the limiter failed, fail mode open: forwarded or allowed unchecked
	DecisionHeld     = "held"     // the limiter failed, fail mode closed: held, asked again later
	DecisionPaused   = "paused"   // its tenant is paused: a job waits in its queue, a request is denied, until the pause ends
	// DecisionShadowDelayed: forwarded or allowed now under a plan in shadow mode, which
	// would have delayed it (HeaderShadow says how long).
	DecisionShadowDelayed = "shadow_delayed"

	DecisionThrottled   = "throttled"   // a request denied, nothing booked: ask again after the wait
	DecisionRejected    = "rejected"    // a request refused for what it is (its weight, its tenant)
	DecisionUnavailable = "unavailable" // the limiter failed, fail mode closed: a request refused (503)
)

// A Fate is what becomes of a queued job at a decision: the one encoding of it that the queue
// applies, that its metrics and spans label (String: the decisions metric's outcome), and that
// the console shows.
type Fate uint8

const (
	// FateAdmitted: forwarded now, paced by its plan.
	FateAdmitted Fate = iota
	// FateDegraded: forwarded now without a decision (the limiter failed, fail mode open).
	FateDegraded
	// FateShadowDelayed: forwarded now under a plan in shadow mode that would have delayed it.
	FateShadowDelayed
	// FateDelayed: it waits where it is, in order: its weight does not fit its plan yet (or
	// another replica is handing its tenant's queue over).
	FateDelayed
	// FatePaused: it waits where it is: its tenant is paused.
	FatePaused
	// FateHeld: it waits where it is: the limiter failed, fail mode closed.
	FateHeld
	// FateDead: dead-lettered.
	FateDead
	// FateStored: its forward was stored before (a repeat after a crash): it is removed from
	// the input and forwarded no more. Not a decision: no metric counts it.
	FateStored
	// NumFates is the number of fates.
	NumFates
)

var fateNames = [...]string{DecisionAdmitted, DecisionDegraded, DecisionShadowDelayed, DecisionDelayed, DecisionPaused, DecisionHeld, DecisionDead, "stored"}

func (f Fate) String() string {
	if int(f) < len(fateNames) {
		return fateNames[f]
	}
	return "fate(" + strconv.Itoa(int(f)) + ")"
}

// Forwarded reports whether a job of this fate is forwarded now.
func (f Fate) Forwarded() bool { return f <= FateShadowDelayed }

// Waits reports whether a job of this fate stays where it is, to be asked about again.
func (f Fate) Waits() bool { return f >= FateDelayed && f <= FateHeld }

// Source is where a decision came from: the source label of the decisions metric and the
// admitter.source span attribute.
type Source string

const (
	SourceQueue Source = "queue" // a job of the input stream (or of an earlier version's lane)
	SourceHTTP  Source = "http"  // POST /v1/decide, or the Go middleware
	SourceNATS  Source = "nats"  // a request to the admitter.decide NATS endpoint
	SourceRLS   Source = "rls"   // a descriptor of a ShouldRateLimit call of Envoy's rate limit service
)

// The NATS micro service of synchronous decisions: `nats micro info admitter` describes it.
const (
	ServiceName          = "admitter"
	EndpointDecide       = "decide"
	DefaultDecideSubject = "admitter.decide"
)

// A Metric is one of the admitter's metrics: its OpenTelemetry instrument name and the name
// Prometheus exposes it under (/metrics). Help is its description when more than one package
// records it (the queue and the synchronous decisions): they must describe it identically, or
// the Prometheus exporter keeps one description and warns.
type Metric struct{ Name, Prom, Help string }

// The admitter's metrics.
var (
	MetricDecisions = Metric{"admitter.decisions", "admitter_decisions_total",
		"Decisions by source (queue, http, nats, rls), plan and outcome: queued jobs, each once per outcome (a job that waits is delayed once, then admitted), admitted, delayed (waiting in the input for their time), paused, dead, degraded or held; requests admitted, throttled, delayed (a slot booked), paused, rejected, degraded or unavailable."}
	MetricWait         = Metric{"admitter.wait", "admitter_wait_seconds", ""}
	MetricDecisionTime = Metric{"admitter.decision.duration", "admitter_decision_duration_seconds",
		"Time one limiter call took (a queue call decides a batch of one tenant's jobs, a request's call one request)."}
	MetricRedisErrors = Metric{"admitter.redis.errors", "admitter_redis_errors_total",
		"Failed limiter calls by kind (timeout, connection, other)."}
	MetricFailEvents = Metric{"admitter.fail_mode.events", "admitter_fail_mode_events_total",
		"Jobs and requests handled without a decision, by fail mode (open: forwarded or allowed, closed: held back or refused)."}
	MetricInFlight      = Metric{"admitter.jobs.in_flight", "admitter_jobs_in_flight", ""}
	MetricQueues        = Metric{"admitter.queues", "admitter_queues", ""}
	MetricJobsWaiting   = Metric{"admitter.jobs.waiting", "admitter_jobs_waiting", ""}
	MetricOutputBlocked = Metric{"admitter.output.blocked", "admitter_output_blocked", ""}
	MetricReplicas      = Metric{"admitter.replicas", "admitter_replicas", ""}
	MetricPartitions    = Metric{"admitter.partitions", "admitter_partitions", ""}
	MetricPlansReloads  = Metric{"admitter.plans.reloads", "admitter_plans_reloads_total", ""}
	MetricRedisEvicting = Metric{"admitter.redis.evicting", "admitter_redis_evicting", ""}
	MetricLeaseMessages = Metric{"admitter.lease.messages", "admitter_lease_messages_total", ""}
	MetricLeasesExpired = Metric{"admitter.leases.expired", "admitter_leases_expired_total", ""}
	MetricRedisForgot   = Metric{"admitter.redis.forgot", "admitter_redis_forgot_total", ""}
	MetricSettleErrors  = Metric{"admitter.settle.errors", "admitter_settle_errors_total", ""}
	MetricLateForwards  = Metric{"admitter.forwards.late", "admitter_forwards_late_total", ""}
	MetricPoolInFlight  = Metric{"admitter.pool.in_flight", "admitter_pool_in_flight", ""}
	MetricPoolWaiting   = Metric{"admitter.pool.waiting", "admitter_pool_waiting", ""}
	MetricPoolGiveBacks = Metric{"admitter.pool.give_back.errors", "admitter_pool_give_back_errors_total", ""}
	MetricJobOutcomes   = Metric{"admitter.job.outcomes", "admitter_job_outcomes_total", ""}
	MetricJobTime       = Metric{"admitter.job.time", "admitter_job_time_seconds", ""}
	MetricPoolBreaker   = Metric{"admitter.pool.breaker", "admitter_pool_breaker", ""}
	MetricPoolLimit     = Metric{"admitter.pool.limit", "admitter_pool_limit", ""}
	MetricJobsExpired   = Metric{"admitter.jobs.expired", "admitter_jobs_expired_total", ""}
	MetricOldestWaiting = Metric{"admitter.oldest_waiting", "admitter_oldest_waiting_seconds", ""}
)

// JobTimeBuckets are the bucket boundaries (seconds) of MetricJobTime, a job's time downstream
// from its forward to its done message: 5 ms to an hour.
var JobTimeBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// DecisionDurationBuckets are the bucket boundaries (seconds) of MetricDecisionTime: they
// resolve below a millisecond, a decision being one Redis round trip.
var DecisionDurationBuckets = []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}

// ShadowValue is HeaderShadow's value for a job or request the plan in shadow mode would have
// delayed by wait (zero: not delayed).
func ShadowValue(wait time.Duration) string {
	if wait <= 0 {
		return "admitted"
	}
	return "delayed " + strconv.FormatInt(Millis(wait), 10)
}

// HeaderCarrier lets OpenTelemetry propagators read and write trace context (traceparent,
// tracestate) in message headers, which keep their names as written: convert a nats.Header.
type HeaderCarrier map[string][]string

// Get returns the first value of key, or "".
func (h HeaderCarrier) Get(key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set replaces the values of key with value.
func (h HeaderCarrier) Set(key, value string) { h[key] = []string{value} }

// Keys lists the header names.
func (h HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}
