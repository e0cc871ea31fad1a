package wire

import (
	"errors"
	"strconv"
	"strings"
)

// Headers of the contract (see README, "Headers").
const (
	// HeaderWeight, on input: the job's weight, an integer ≥ 1; absent means 1. The name is
	// matched without regard to case.
	HeaderWeight = "Admit-Weight"
	// HeaderTenant, on output: the tenant the job was admitted for.
	HeaderTenant = "Admit-Tenant"
	// HeaderPlan, on output: the tenant's plan.
	HeaderPlan = "Admit-Plan"
	// HeaderAttempts, on output: how many times the input was delivered to the admitter.
	HeaderAttempts = "Admit-Attempts"
	// HeaderDelayMs, on output: milliseconds from the input being stored to being forwarded.
	HeaderDelayMs = "Admit-Delay-Ms"
	// HeaderDegraded, on output: "fail-open" when forwarded without a decision (Redis failed).
	HeaderDegraded = "Admit-Degraded"
	// HeaderError, on dead letters: a Code.
	HeaderError = "Admit-Error"
	// HeaderErrorDetail, on dead letters: a sentence saying what was wrong.
	HeaderErrorDetail = "Admit-Error-Detail"
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
	case KindForward, KindDead, KindLane:
		return Kind(k), rest[:i], seq, true
	}
	return "", "", 0, false
}

// Decisions: the admitter.decision span attribute and the outcome label of the decisions
// metric.
const (
	DecisionAdmitted = "admitted" // the limiter let it through: forwarded
	DecisionDelayed  = "delayed"  // it must wait: moved to (or kept in) its tenant's lane
	DecisionDead     = "dead"     // dead-lettered
	DecisionDegraded = "degraded" // the limiter failed, fail mode open: forwarded unchecked
	DecisionHeld     = "held"     // the limiter failed, fail mode closed: held, asked again later
)

// A Metric is one of the admitter's metrics: its OpenTelemetry instrument name and the name
// Prometheus exposes it under (/metrics).
type Metric struct{ Name, Prom string }

// The admitter's metrics.
var (
	MetricDecisions     = Metric{"admitter.decisions", "admitter_decisions_total"}
	MetricWait          = Metric{"admitter.wait", "admitter_wait_seconds"}
	MetricDecisionTime  = Metric{"admitter.decision.duration", "admitter_decision_duration_seconds"}
	MetricRedisErrors   = Metric{"admitter.redis.errors", "admitter_redis_errors_total"}
	MetricFailEvents    = Metric{"admitter.fail_mode.events", "admitter_fail_mode_events_total"}
	MetricInFlight      = Metric{"admitter.jobs.in_flight", "admitter_jobs_in_flight"}
	MetricLanes         = Metric{"admitter.lanes", "admitter_lanes"}
	MetricLaneJobs      = Metric{"admitter.lanes.jobs", "admitter_lanes_jobs"}
	MetricOutputBlocked = Metric{"admitter.output.blocked", "admitter_output_blocked"}
	MetricReplicas      = Metric{"admitter.replicas", "admitter_replicas"}
	MetricPending       = Metric{"admitter.consumer.pending", "admitter_consumer_pending"}
	MetricAckPending    = Metric{"admitter.consumer.ack_pending", "admitter_consumer_ack_pending"}
	MetricRedelivered   = Metric{"admitter.consumer.redelivered", "admitter_consumer_redelivered"}
)
