package wire

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// MaxLease is the largest lease id: an input stream sequence exact in the limiter's scripts.
const MaxLease = 1<<53 - 1

// MaxCost is the largest Admit-Cost, as weights are bounded.
const MaxCost = MaxWeight

// ParseLease reads the lease a done or renew message names: its Admit-Lease header (the
// forwarded job's, copied), else the forwarded job's Nats-Msg-Id, which must be a forward of
// a stream of input stream in (the lease is the job's id: see JobID). Header names are matched
// without regard to case; a header given twice is an error.
func ParseLease(h nats.Header, in string) (int64, error) {
	v, ok, err := one(h, HeaderLease)
	if err != nil {
		return 0, err
	}
	if ok {
		n, err := digits(v)
		if err != nil || n < 1 || n > MaxLease {
			return 0, fmt.Errorf("header %s is %q, want an integer from 1 to 2^53-1", HeaderLease, v)
		}
		return n, nil
	}
	id, ok, err := one(h, nats.MsgIdHdr)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, fmt.Errorf("neither %s nor %s names the forwarded job", HeaderLease, nats.MsgIdHdr)
	}
	kind, stream, seq, ok := ParseMsgID(id)
	var n, p int
	if ok && kind == KindForward {
		n, p, ok = ParseInputStream(in, stream)
	}
	lease := JobID(n, p, seq)
	if !ok || kind != KindForward || lease < 1 || lease > MaxLease {
		return 0, fmt.Errorf("header %s is %q, want the forwarded job's (%s)", nats.MsgIdHdr, id, MsgID(KindForward, in, 1)[:len("admitter:a:")+len(in)+1]+"<sequence>")
	}
	return lease, nil
}

// LeaseReply is the answer to a done or renew message sent as a request:
//
//	{"tenant": "acme", "lease": 17, "held": true, "weight": 1, "ends": "2026-11-21T12:10:00Z"}
type LeaseReply struct {
	Tenant string `json:"tenant,omitempty"`
	Lease  int64  `json:"lease,omitempty"`
	// Held: the lease was held, and is now released (done) or extended (renew). False when it
	// had already ended or been released: nothing changed (a repeat is harmless).
	Held bool `json:"held"`
	// Weight is the weight the lease was taken with (when held).
	Weight int64 `json:"weight,omitempty"`
	// Ends is, for a renewal or a start held, when the lease now ends (RFC 3339, the limiter's
	// clock).
	Ends string `json:"ends,omitempty"`
	// WaitMs is, for a start not held (the job's slots are taken), how long until they may be
	// free: the worker puts the job back for that long.
	WaitMs int64 `json:"wait_ms,omitempty"`
	// Error says why the message ended or extended nothing: it named no lease, the plan has no
	// concurrency limit, the limiter failed.
	Error string `json:"error,omitempty"`
}

// LeaseLengthValue is HeaderLeaseLength's value for a lease of length d: whole milliseconds,
// rounded down, so that a worker renewing by it renews early rather than late.
func LeaseLengthValue(d time.Duration) string {
	return strconv.FormatInt(max(d.Milliseconds(), 0), 10)
}

// ParseLeaseLength reads Admit-Lease-Ms, the length of a forwarded job's lease; absent is 0.
// The header name is matched without regard to case; a header given twice is an error.
func ParseLeaseLength(h nats.Header) (time.Duration, error) {
	v, ok, err := one(h, HeaderLeaseLength)
	if err != nil || !ok {
		return 0, err
	}
	n, err := digits(v)
	if err != nil || n > int64(math.MaxInt64/time.Millisecond) {
		return 0, fmt.Errorf("header %s is %q, want an integer of milliseconds", HeaderLeaseLength, v)
	}
	return time.Duration(n) * time.Millisecond, nil
}

// ParseCost reads Admit-Cost: what a done job really cost, 0 to MaxCost; absent is -1 (no
// reconciliation).
func ParseCost(h nats.Header) (int64, error) {
	v, ok, err := one(h, HeaderCost)
	if err != nil || !ok {
		return -1, err
	}
	n, err := digits(v)
	if err != nil || n > MaxCost {
		return -1, fmt.Errorf("header %s is %q, want an integer from 0 to %d", HeaderCost, v, int64(MaxCost))
	}
	return n, nil
}

// ParseStart reads Admit-Start on a renew message: "true" (the worker is about to begin the
// job) or absent (a renewal). The header name is matched without regard to case.
func ParseStart(h nats.Header) (bool, error) {
	v, ok, err := one(h, HeaderStart)
	if err != nil || !ok {
		return false, err
	}
	if v != "true" {
		return false, fmt.Errorf("header %s is %q, want true", HeaderStart, v)
	}
	return true, nil
}

// one is the single value of header name (matched without regard to case).
func one(h nats.Header, name string) (string, bool, error) {
	var vals []string
	for k, v := range h {
		if strings.EqualFold(k, name) {
			vals = append(vals, v...)
		}
	}
	switch len(vals) {
	case 0:
		return "", false, nil
	case 1:
		return vals[0], true, nil
	}
	return "", false, fmt.Errorf("header %s appears %d times (%q), want one value", name, len(vals), vals)
}

// digits parses a non-negative decimal integer of ASCII digits only.
func digits(v string) (int64, error) {
	if len(v) > 18 || !allDigits(v) {
		return 0, strconv.ErrSyntax
	}
	return strconv.ParseInt(v, 10, 64)
}

// Outcomes of a job downstream: the values of HeaderOutcome, and the outcome label of
// MetricJobOutcomes.
const (
	OutcomeOK         = "ok"
	OutcomeFailed     = "failed"
	OutcomeOverloaded = "overloaded"
)

// ParseOutcome reads Admit-Outcome on a done message: ok, failed or overloaded; absent is ok.
// The header name is matched without regard to case, its value exactly.
func ParseOutcome(h nats.Header) (string, error) {
	v, ok, err := one(h, HeaderOutcome)
	if err != nil || !ok {
		return OutcomeOK, err
	}
	switch v {
	case OutcomeOK, OutcomeFailed, OutcomeOverloaded:
		return v, nil
	}
	return "", fmt.Errorf("header %s is %q, want %s, %s or %s", HeaderOutcome, v, OutcomeOK, OutcomeFailed, OutcomeOverloaded)
}

// Scopes of a downstream's Retry-After (HeaderRetryScope).
const (
	RetryScopeTenant = "tenant"
	RetryScopePool   = "pool"
)

// MaxRetryAfter bounds HeaderDownstreamRetryAfter: a day.
const MaxRetryAfter = 24 * time.Hour

// ParseRetryAfter reads Admit-Retry-After and Admit-Retry-Scope on a done message: how long
// from now the downstream asked for no more jobs (whole seconds, or an HTTP date, which in the
// past is 0) and whether the whole pool waits. Absent, it is 0; a scope without a Retry-After,
// a value neither form, or more than MaxRetryAfter is an error.
func ParseRetryAfter(h nats.Header, now time.Time) (d time.Duration, pool bool, err error) {
	scope, scoped, err := one(h, HeaderRetryScope)
	if err != nil {
		return 0, false, err
	}
	if scoped && scope != RetryScopeTenant && scope != RetryScopePool {
		return 0, false, fmt.Errorf("header %s is %q, want %s or %s", HeaderRetryScope, scope, RetryScopeTenant, RetryScopePool)
	}
	v, ok, err := one(h, HeaderDownstreamRetryAfter)
	if err != nil {
		return 0, false, err
	}
	if !ok {
		if scoped {
			return 0, false, fmt.Errorf("header %s without %s", HeaderRetryScope, HeaderDownstreamRetryAfter)
		}
		return 0, false, nil
	}
	if n, derr := digits(v); derr == nil {
		d = time.Duration(n) * time.Second
		if n > int64(MaxRetryAfter/time.Second) {
			return 0, false, fmt.Errorf("header %s is %q, want at most %d seconds", HeaderDownstreamRetryAfter, v, int64(MaxRetryAfter/time.Second))
		}
	} else if at, terr := http.ParseTime(v); terr == nil {
		d = max(at.Sub(now), 0)
		if d > MaxRetryAfter {
			return 0, false, fmt.Errorf("header %s is %q, more than %v from now", HeaderDownstreamRetryAfter, v, MaxRetryAfter)
		}
	} else {
		return 0, false, fmt.Errorf("header %s is %q, want whole seconds or an HTTP date", HeaderDownstreamRetryAfter, v)
	}
	return d, scope == RetryScopePool, nil
}

// RetryAfterValue is HeaderDownstreamRetryAfter's value for a wait of d: whole seconds, rounded up.
func RetryAfterValue(d time.Duration) string {
	return strconv.FormatInt(int64((max(d, 0)+time.Second-1)/time.Second), 10)
}
