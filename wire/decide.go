package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"
)

// Synchronous decisions: the body of POST /v1/decide and of a request to the NATS endpoint
// admitter.decide, the answers, the error codes and statuses, and the response headers. The
// HTTP API, the NATS service and the Go middleware (package httplimit) all speak this.

// MaxRequestBytes bounds the body of a decision request (64 KiB): a larger one is refused with
// CodeRequestTooLarge (HTTP 413) without being read further.
const MaxRequestBytes = 64 << 10

// MaxKeyBytes bounds a request's key.
const MaxKeyBytes = 256

// A DecideRequest asks whether a tenant may spend weight now:
//
//	{"tenant": "acme", "weight": 2, "key": "order-1234", "reserve": true}
//
// Weight defaults to 1. Reserve books a slot for Key when the weight does not fit now (as a
// queued job would); asked again with the same key at or after the slot, the request is
// allowed without a second charge. Without Reserve nothing is booked, and a key would have
// nothing to claim, so Key and Reserve go together.
type DecideRequest struct {
	Tenant  string `json:"tenant"`
	Weight  int64  `json:"weight,omitempty"`
	Key     string `json:"key,omitempty"`
	Reserve bool   `json:"reserve,omitempty"`
}

// Decision is the body of an answer, allowed or denied (HTTP 200 or 429; a NATS reply without
// error headers).
type Decision struct {
	// Allowed: the request may run now.
	Allowed bool `json:"allowed"`
	// Tenant and Plan: who asked, under which plan.
	Tenant string `json:"tenant"`
	Plan   string `json:"plan"`
	// Limit is the binding limit of the plan: for a denial, the limit whose refill sets the
	// wait; otherwise the limit with the fewest tokens left. Its name, or its index when it
	// has none; empty when Degraded.
	Limit string `json:"limit"`
	// Remaining is the whole tokens left now, the minimum over the plan's limits (0 when a
	// limit is in debt to booked slots).
	Remaining int64 `json:"remaining"`
	// WaitMs is 0 when allowed; otherwise the milliseconds, rounded up, until the weight fits
	// (or, when Reserved, until the booked slot).
	WaitMs int64 `json:"wait_ms"`
	// Reserved: a slot is booked for the request's key; ask again with the key after WaitMs.
	Reserved bool `json:"reserved,omitempty"`
	// Degraded: allowed without a decision, because the limiter failed and the fail mode is
	// open.
	Degraded bool `json:"degraded,omitempty"`
}

// ErrorBody is the body of a refused request (HTTP 4xx/5xx; a NATS reply with micro error
// headers).
type ErrorBody struct {
	Error  Code   `json:"error"`
	Detail string `json:"detail"`
	// WaitMs, for CodeLimiterUnavailable: when to ask again (the Retry-After header in
	// milliseconds).
	WaitMs int64 `json:"wait_ms,omitempty"`
}

// Codes of refused synchronous requests, beside CodeInvalidWeight, CodeWeightOverCapacity,
// CodeUnknownTenant and CodeInvalidTenant.
const (
	// CodeInvalidRequest: the body is not a decision request (malformed JSON, a missing or
	// empty tenant, an unknown field, a key without reserve...); the detail says what.
	CodeInvalidRequest Code = "invalid-request"
	// CodeRequestTooLarge: the body is larger than MaxRequestBytes.
	CodeRequestTooLarge Code = "request-too-large"
	// CodeLimiterUnavailable: the limiter failed (Redis down or slow) and the fail mode is
	// closed: ask again after the wait.
	CodeLimiterUnavailable Code = "limiter-unavailable"
	// CodeNotFound and CodeMethodNotAllowed: no such endpoint, or not with this method.
	CodeNotFound         Code = "not-found"
	CodeMethodNotAllowed Code = "method-not-allowed"
)

// HTTPStatus is the HTTP status of a refusal with code: also the error code of the NATS micro
// reply (Nats-Service-Error-Code).
func HTTPStatus(code Code) int {
	switch code {
	case CodeInvalidRequest, CodeInvalidWeight, CodeInvalidTenant:
		return http.StatusBadRequest
	case CodeUnknownTenant, CodeNotFound:
		return http.StatusNotFound
	case CodeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case CodeRequestTooLarge:
		return http.StatusRequestEntityTooLarge
	case CodeWeightOverCapacity:
		return http.StatusUnprocessableEntity
	case CodeLimiterUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// RequestError is a request refused before any decision: its code and a sentence saying what
// is wrong.
type RequestError struct {
	code   Code
	Detail string
}

// Refuse returns a RequestError.
func Refuse(code Code, format string, args ...any) *RequestError {
	return &RequestError{code: code, Detail: fmt.Sprintf(format, args...)}
}

func (e *RequestError) Error() string { return "wire: " + string(e.code) + ": " + e.Detail }

// Code is the error's machine code.
func (e *RequestError) Code() Code { return e.code }

// requestFields lists the fields of a DecideRequest, for messages.
const requestFields = "tenant, weight, key and reserve"

// ParseDecideRequest decodes a decision request. Decoding is strict: the body must be one JSON
// object of valid UTF-8 with no other field than tenant (a non-empty string, required), weight
// (an integer from 1 to MaxWeight; absent or null means 1), key (a string of 1 to MaxKeyBytes
// bytes) and reserve (a boolean), each at most once, and nothing after it; reserve needs a key
// and a key needs reserve. A null optional field is absent. Every error is a *RequestError with
// CodeInvalidRequest, CodeInvalidWeight or CodeRequestTooLarge and a one-line detail naming
// the field and the value.
func ParseDecideRequest(data []byte) (DecideRequest, error) {
	req, err := parseDecideRequest(data)
	if err != nil {
		return DecideRequest{}, err
	}
	return req, nil
}

func parseDecideRequest(data []byte) (DecideRequest, error) {
	var req DecideRequest
	if len(data) > MaxRequestBytes {
		return req, Refuse(CodeRequestTooLarge, "the body has %d bytes, more than the %d allowed", len(data), MaxRequestBytes)
	}
	if !utf8.Valid(data) {
		return req, Refuse(CodeInvalidRequest, "the body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if errors.Is(err, io.EOF) {
		return req, Refuse(CodeInvalidRequest, `the body is empty: want a JSON object such as {"tenant": "acme", "weight": 1}`)
	}
	if err != nil {
		return req, malformed(dec, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return req, Refuse(CodeInvalidRequest, "the body is %s, want a JSON object", describeToken(tok))
	}
	var seen struct{ tenant, weight, key, reserve bool }
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return req, malformed(dec, err)
		}
		name, _ := tok.(string) // object keys are strings: the decoder says so
		var dup *bool
		switch name {
		case "tenant":
			dup = &seen.tenant
		case "weight":
			dup = &seen.weight
		case "key":
			dup = &seen.key
		case "reserve":
			dup = &seen.reserve
		default:
			return req, Refuse(CodeInvalidRequest, "unknown field %s (the fields are %s)", quote(name), requestFields)
		}
		if *dup {
			return req, Refuse(CodeInvalidRequest, "field %s appears twice", name)
		}
		*dup = true
		if tok, err = dec.Token(); err != nil {
			return req, malformed(dec, err)
		}
		if err := req.set(name, tok); err != nil {
			return req, err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return req, malformed(dec, err)
	}
	if tok, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err != nil {
			return req, malformed(dec, err)
		}
		return req, Refuse(CodeInvalidRequest, "%s after the JSON object: send one object", describeToken(tok))
	}
	switch {
	case req.Tenant == "" && !seen.tenant:
		return req, Refuse(CodeInvalidRequest, "field tenant is missing: want a non-empty string naming the tenant")
	case req.Tenant == "":
		return req, Refuse(CodeInvalidRequest, "field tenant is empty: want a non-empty string naming the tenant")
	case req.Reserve && req.Key == "":
		return req, Refuse(CodeInvalidRequest, "reserve is true without a key: a reservation is claimed by its key")
	case req.Key != "" && !req.Reserve:
		return req, Refuse(CodeInvalidRequest, `key %s without "reserve": true: without a reservation nothing is booked, so there is nothing for a key to claim`, quote(req.Key))
	}
	if req.Weight == 0 {
		req.Weight = 1
	}
	return req, nil
}

// set reads the value tok of field name (a scalar, or the delimiter opening an array or object).
func (req *DecideRequest) set(name string, tok json.Token) error {
	if tok == nil { // null: absent
		if name == "tenant" {
			return Refuse(CodeInvalidRequest, "field tenant is null: want a non-empty string naming the tenant")
		}
		return nil
	}
	switch name {
	case "tenant":
		s, ok := tok.(string)
		if !ok {
			return Refuse(CodeInvalidRequest, "field tenant is %s, want a non-empty string", describeToken(tok))
		}
		req.Tenant = s
	case "weight":
		n, ok := tok.(json.Number)
		if !ok {
			return Refuse(CodeInvalidWeight, "field weight is %s, want an integer from 1 to %d", describeToken(tok), int64(MaxWeight))
		}
		w, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil || w < 1 || w > MaxWeight {
			return Refuse(CodeInvalidWeight, "field weight is %s, want an integer from 1 to %d", n, int64(MaxWeight))
		}
		req.Weight = w
	case "key":
		s, ok := tok.(string)
		if !ok {
			return Refuse(CodeInvalidRequest, "field key is %s, want a string", describeToken(tok))
		}
		if s == "" || len(s) > MaxKeyBytes {
			return Refuse(CodeInvalidRequest, "field key has %d bytes, want 1 to %d", len(s), MaxKeyBytes)
		}
		req.Key = s
	case "reserve":
		b, ok := tok.(bool)
		if !ok {
			return Refuse(CodeInvalidRequest, "field reserve is %s, want true or false", describeToken(tok))
		}
		req.Reserve = b
	}
	return nil
}

// malformed describes a decoding error at the decoder's position.
func malformed(dec *json.Decoder, err error) error {
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		return Refuse(CodeInvalidRequest, "malformed JSON at byte %d: %s", syn.Offset, syn.Error())
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return Refuse(CodeInvalidRequest, "malformed JSON: the body ends at byte %d inside the object", dec.InputOffset())
	}
	return Refuse(CodeInvalidRequest, "malformed JSON at byte %d: %v", dec.InputOffset(), err)
}

// describeToken says what a JSON token is, for messages: a string, quoted and shortened, a
// number as written, true, false, null, an array or an object.
func describeToken(tok json.Token) string {
	switch v := tok.(type) {
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(v)
	case json.Number:
		return "the number " + shorten(string(v))
	case string:
		return "the string " + quote(v)
	case json.Delim:
		switch v {
		case '[':
			return "an array"
		case '{':
			return "an object"
		}
		return "a stray " + strconv.QuoteRune(rune(v))
	}
	return fmt.Sprintf("%v", tok)
}

// maxQuoted bounds how much of a client's value a message repeats.
const maxQuoted = 64

func shorten(s string) string {
	if len(s) <= maxQuoted {
		return s
	}
	cut := maxQuoted
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// quote quotes s for a message, on one line, shortened when long.
func quote(s string) string { return strconv.Quote(shorten(s)) }

// Headers of synchronous answers (see README, "Synchronous decisions").
const (
	// HeaderRetryAfter, on 429 and 503: whole seconds, rounded up, at least 1 (RFC 9110).
	HeaderRetryAfter = "Retry-After"
	// HeaderRateLimitPolicy and HeaderRateLimit: the binding limit, as the IETF draft
	// draft-ietf-httpapi-ratelimit-headers-11 (May 2026) defines them; see RateLimitPolicy and
	// RateLimit.
	HeaderRateLimitPolicy = "RateLimit-Policy"
	HeaderRateLimit       = "RateLimit"
	// HeaderRateLimitDegraded, set to "true" by the Go middleware (httplimit) on a request it let
	// through without a decision (the limiter failed, fail mode open). The HTTP API says the same
	// with HeaderDegraded: fail-open, as forwarded jobs do.
	HeaderRateLimitDegraded = "X-RateLimit-Degraded"
	// DegradedFailOpen is the value of HeaderDegraded.
	DegradedFailOpen = "fail-open"
)

// Seconds is d in whole seconds rounded up, at least 1: a Retry-After value, or a RateLimit
// window, neither of which may be zero or early.
func Seconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second > 0 {
		s++
	}
	return max(s, 1)
}

// Millis is d in whole milliseconds rounded up (0 for d ≤ 0): a wait_ms a client can sleep
// without waking early.
func Millis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// RateLimitName is how a limit is named in the RateLimit headers: its label when that is a
// valid Structured Field String (printable ASCII, RFC 9651 §3.3.3), else its index in the plan.
func RateLimitName(label string, index int) string {
	for i := 0; i < len(label); i++ {
		if label[i] < 0x20 || label[i] > 0x7e {
			return strconv.Itoa(index)
		}
	}
	return label
}

// appendSFString appends s as a Structured Field String: quoted, with '"' and '\' escaped. s
// must be printable ASCII (RateLimitName).
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return append(b, '"')
}

// RateLimitPolicy is the RateLimit-Policy value of a token bucket limit (draft-11 §3): the
// quota q is its capacity, the window w the time it takes to refill from empty (capacity ×
// interval, in whole seconds rounded up, at least 1), so q/w is its long-run rate:
//
//	"burst";q=20;w=2
//
// name must come from RateLimitName.
func RateLimitPolicy(name string, capacity int64, interval time.Duration) string {
	window := time.Duration(math.MaxInt64) // a plan's limits refill within 2^53 µs: never in practice
	if interval > 0 && capacity <= int64(math.MaxInt64/interval) {
		window = time.Duration(capacity) * interval
	}
	b := appendSFString(make([]byte, 0, len(name)+32), name)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, capacity, 10)
	b = append(b, ";w="...)
	b = strconv.AppendInt(b, Seconds(window), 10)
	return string(b)
}

// RateLimit is the RateLimit value of the binding limit (draft-11 §4): r is the whole tokens
// available now, t the effective window in whole seconds rounded up — for a denial the wait
// (the same instant as Retry-After, which the draft says must not be earlier than the end of
// the window), otherwise the time until the limit is full again, within which at most r plus
// what refills can be used:
//
//	"burst";r=0;t=1
func RateLimit(name string, remaining int64, window time.Duration) string {
	b := appendSFString(make([]byte, 0, len(name)+32), name)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, max(remaining, 0), 10)
	b = append(b, ";t="...)
	t := int64(0)
	if window > 0 {
		t = Seconds(window)
	}
	b = strconv.AppendInt(b, t, 10)
	return string(b)
}
