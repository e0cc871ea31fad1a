package admission

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Header names of the external contract (see README).
const (
	// HeaderWeight, on input: the job's weight, an integer ≥ 1; absent means 1.
	HeaderWeight = "Admit-Weight"
	// HeaderTenant, on output: the tenant the job was admitted for.
	HeaderTenant = "Admit-Tenant"
	// HeaderPlan, on output: the tenant's plan.
	HeaderPlan = "Admit-Plan"
	// HeaderAttempts, on output: how many times the input was delivered, the admitting delivery
	// included.
	HeaderAttempts = "Admit-Attempts"
	// HeaderDelayMs, on output: milliseconds from the input being stored to being forwarded.
	HeaderDelayMs = "Admit-Delay-Ms"
	// HeaderDegraded, on output: "fail-open" when forwarded without a decision (Redis failed).
	HeaderDegraded = "Admit-Degraded"
	// HeaderError, on dead-lettered jobs: a code (see the Code constants).
	HeaderError = "Admit-Error"
	// HeaderErrorDetail, on dead-lettered jobs: a sentence saying what was wrong.
	HeaderErrorDetail = "Admit-Error-Detail"
	// HeaderOriginalMsgID keeps the producer's own Nats-Msg-Id, which the forward replaces. Every
	// other Nats-* header of the input is kept the same way, as Admit-Original-*: they are
	// directives to the server about the input's publish (Nats-Expected-Last-Sequence,
	// Nats-TTL, ...) and would be enforced, wrongly, on the forward.
	HeaderOriginalMsgID = "Admit-Original-Msg-Id"
	originalPrefix      = "Admit-Original-"
)

// Dead-letter codes, the value of HeaderError.
const (
	CodeInvalidWeight      = "invalid-weight"
	CodeWeightOverCapacity = "weight-over-capacity"
	CodeUnknownTenant      = "unknown-tenant"
	CodeInvalidTenant      = "invalid-tenant"
	// CodeForwardRejected: the output stream refused the admitted job for good (a JetStream API
	// error such as a message larger than the stream allows); the detail quotes the server.
	CodeForwardRejected = "forward-rejected"
)

// maxWeight bounds Admit-Weight so that weight × interval arithmetic cannot overflow.
const maxWeight = 1 << 40

// ParseWeight reads the job's weight from its headers: absent means 1; otherwise exactly one
// value, a decimal integer from 1 to 2^40 without sign or spaces (leading zeros allowed). The header name is matched
// without regard to case (NATS keeps header case as the producer wrote it). The error is a
// sentence naming the header and the value.
func ParseWeight(h nats.Header) (int64, error) {
	var vals []string
	for k, v := range h {
		if strings.EqualFold(k, HeaderWeight) {
			vals = append(vals, v...)
		}
	}
	switch len(vals) {
	case 0:
		return 1, nil
	case 1:
	default:
		return 0, fmt.Errorf("header %s appears %d times (%q), want one value", HeaderWeight, len(vals), vals)
	}
	v := vals[0]
	if v == "" {
		return 0, fmt.Errorf("header %s is %q, want an integer from 1 to %d", HeaderWeight, v, int64(maxWeight))
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, fmt.Errorf("header %s is %q, want an integer from 1 to %d", HeaderWeight, v, int64(maxWeight))
		}
	}
	w, err := strconv.ParseInt(v, 10, 64)
	if err != nil || w < 1 || w > maxWeight {
		return 0, fmt.Errorf("header %s is %q, want an integer from 1 to %d", HeaderWeight, v, int64(maxWeight))
	}
	return w, nil
}

// msgID is the Nats-Msg-Id of the job's forward (kind "a") or dead letter (kind "d"): derived
// from the input stream and sequence, so a forward repeated after a crash is deduplicated.
func msgID(kind, stream string, seq uint64) string {
	return "admitter:" + kind + ":" + stream + ":" + strconv.FormatUint(seq, 10)
}

// copyHeader copies every input header to a new header. Headers starting with "Nats-" are
// server directives for the input's own publish: they are kept as Admit-Original-<rest>
// (Nats-Msg-Id becomes Admit-Original-Msg-Id) so that they are neither lost nor applied to the
// forward.
func copyHeader(in nats.Header, extra int) nats.Header {
	out := make(nats.Header, len(in)+extra)
	for k, v := range in {
		if len(k) > 5 && strings.EqualFold(k[:5], "Nats-") {
			k = originalPrefix + k[5:]
		}
		out[k] = append(out[k], v...)
	}
	return out
}

// admittedHeader is the header of a forwarded job.
func admittedHeader(in nats.Header, id, tenant, plan string, attempts uint64, waited time.Duration, degraded bool) nats.Header {
	h := copyHeader(in, 6)
	h.Set(nats.MsgIdHdr, id)
	h.Set(HeaderTenant, tenant)
	h.Set(HeaderPlan, plan)
	h.Set(HeaderAttempts, strconv.FormatUint(attempts, 10))
	h.Set(HeaderDelayMs, strconv.FormatInt(max(waited.Milliseconds(), 0), 10))
	if degraded {
		h.Set(HeaderDegraded, "fail-open")
	}
	return h
}

// deadHeader is the header of a dead-lettered job.
func deadHeader(in nats.Header, id, code, detail string) nats.Header {
	h := copyHeader(in, 3)
	h.Set(nats.MsgIdHdr, id)
	h.Set(HeaderError, code)
	h.Set(HeaderErrorDetail, detail)
	return h
}
