package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
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
	// Shadow, when the plan is in shadow mode (trialled, not enforced: the request is
	// allowed): "admitted", or "delayed <ms>" when the plan would have made it wait (see
	// HeaderShadow).
	Shadow string `json:"shadow,omitempty"`
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
	l := lexer{b: data}
	if l.skip(); l.i == len(l.b) {
		return req, Refuse(CodeInvalidRequest, `the body is empty: want a JSON object such as {"tenant": "acme", "weight": 1}`)
	}
	tok, err := l.value()
	if err != nil {
		return req, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return req, Refuse(CodeInvalidRequest, "the body is %s, want a JSON object", describeToken(tok))
	}
	var seen struct{ tenant, weight, key, reserve bool }
	if l.skip(); l.i < len(l.b) && l.b[l.i] == '}' {
		l.i++
	} else {
		for {
			if l.skip(); l.i == len(l.b) {
				return req, l.eof()
			}
			if l.b[l.i] != '"' {
				return req, l.syntax("invalid character %s looking for the beginning of a field name", quoteByte(l.b[l.i]))
			}
			name, err := l.str()
			if err != nil {
				return req, err
			}
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
			if l.skip(); l.i == len(l.b) {
				return req, l.eof()
			}
			if l.b[l.i] != ':' {
				return req, l.syntax("invalid character %s after the field name %s", quoteByte(l.b[l.i]), quote(name))
			}
			l.i++
			if l.skip(); l.i == len(l.b) {
				return req, l.eof()
			}
			tok, err := l.value()
			if err != nil {
				return req, err
			}
			if err := req.set(name, tok); err != nil {
				return req, err
			}
			if l.skip(); l.i == len(l.b) {
				return req, l.eof()
			}
			if c := l.b[l.i]; c == ',' {
				l.i++
				continue
			} else if c != '}' {
				return req, l.syntax("invalid character %s after the value of field %s", quoteByte(c), name)
			}
			l.i++
			break
		}
	}
	if l.skip(); l.i < len(l.b) {
		tok, err := l.value()
		if err != nil {
			return req, err
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

// lexer reads the JSON of a decision request (RFC 8259), valid UTF-8 already, without the
// allocations of encoding/json's token API: one string per field name and value.
type lexer struct {
	b []byte
	i int
}

// skip moves past whitespace.
func (l *lexer) skip() {
	for l.i < len(l.b) {
		switch l.b[l.i] {
		case ' ', '\t', '\n', '\r':
			l.i++
		default:
			return
		}
	}
}

func (l *lexer) syntax(format string, args ...any) error {
	return Refuse(CodeInvalidRequest, "malformed JSON at byte %d: %s", l.i, fmt.Sprintf(format, args...))
}

func (l *lexer) eof() error {
	return Refuse(CodeInvalidRequest, "malformed JSON: the body ends at byte %d before the object does", len(l.b))
}

// value reads the value at l.i, not whitespace: a string, a json.Number, true, false, nil for
// null, or json.Delim('[') or json.Delim('{') past the delimiter, whose contents are not read.
func (l *lexer) value() (json.Token, error) {
	switch c := l.b[l.i]; {
	case c == '"':
		return l.str()
	case c == '-' || (c >= '0' && c <= '9'):
		return l.number()
	case c == '[' || c == '{':
		l.i++
		return json.Delim(c), nil
	}
	for _, lit := range [...]struct {
		text string
		tok  json.Token
	}{{"true", true}, {"false", false}, {"null", nil}} {
		if bytes.HasPrefix(l.b[l.i:], []byte(lit.text)) {
			l.i += len(lit.text)
			return lit.tok, nil
		}
	}
	return nil, l.syntax("invalid character %s looking for the beginning of a value", quoteByte(l.b[l.i]))
}

// str reads a string literal. One without escapes is its bytes; one with escapes is decoded by
// encoding/json, which knows them all (surrogate pairs included).
func (l *lexer) str() (string, error) {
	start := l.i
	escaped := false
	for l.i++; l.i < len(l.b); {
		switch c := l.b[l.i]; {
		case c == '"':
			l.i++
			if !escaped {
				return string(l.b[start+1 : l.i-1]), nil
			}
			var s string
			if err := json.Unmarshal(l.b[start:l.i], &s); err != nil {
				l.i = start
				return "", l.syntax("invalid escape in the string starting here")
			}
			return s, nil
		case c == '\\':
			escaped = true
			l.i += 2
		case c < 0x20:
			return "", l.syntax("control character %s in a string: escape it", quoteByte(c))
		default:
			l.i++
		}
	}
	return "", l.eof()
}

// number reads a number literal: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (l *lexer) number() (json.Token, error) {
	start := l.i
	digits := func() int {
		n := 0
		for l.i < len(l.b) && l.b[l.i] >= '0' && l.b[l.i] <= '9' {
			l.i++
			n++
		}
		return n
	}
	want := func() error {
		if l.i == len(l.b) {
			return l.eof()
		}
		return l.syntax("invalid character %s in a number", quoteByte(l.b[l.i]))
	}
	if l.b[l.i] == '-' {
		l.i++
	}
	switch {
	case l.i < len(l.b) && l.b[l.i] == '0':
		l.i++
	case digits() == 0:
		return nil, want()
	}
	if l.i < len(l.b) && l.b[l.i] == '.' {
		if l.i++; digits() == 0 {
			return nil, want()
		}
	}
	if l.i < len(l.b) && (l.b[l.i] == 'e' || l.b[l.i] == 'E') {
		if l.i++; l.i < len(l.b) && (l.b[l.i] == '+' || l.b[l.i] == '-') {
			l.i++
		}
		if digits() == 0 {
			return nil, want()
		}
	}
	return json.Number(l.b[start:l.i]), nil
}

// quoteByte quotes a byte for a message: 'x', or its escape.
func quoteByte(c byte) string {
	if c < utf8.RuneSelf {
		return strconv.QuoteRune(rune(c))
	}
	return fmt.Sprintf("byte 0x%02x", c)
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
	// DegradedFailOpen and DegradedLocal are the values of HeaderDegraded: forwarded (or allowed)
	// without a decision (fail mode open), or decided by the replica from its own copy of the
	// plans' state while the limiter is unreachable (fail mode local).
	DegradedFailOpen = "fail-open"
	DegradedLocal    = "local"
	// HeaderRateLimitLimit, HeaderRateLimitRemaining and HeaderRateLimitReset, added by Envoy to
	// its response from a rate limit service answer (package rls), under the names
	// envoyproxy/ratelimit gives them (its LIMIT_RESPONSE_HEADERS_ENABLED, after
	// draft-polli-ratelimit-headers-03): the binding limit's requests per unit, the whole tokens
	// left, and the seconds, rounded up, until it is full again (when allowed) or until the
	// weight fits (when over the limit).
	HeaderRateLimitLimit     = "RateLimit-Limit"
	HeaderRateLimitRemaining = "RateLimit-Remaining"
	HeaderRateLimitReset     = "RateLimit-Reset"
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

// RateLimitPolicy is the RateLimit-Policy value of a limit (draft-11 §3): the quota q is its
// capacity, the window w the time over which it counts q (bucket.Limit.Span: a bucket's refill
// from empty, so that q/w is its long-run rate; a window's length; a quota's period), in whole
// seconds rounded up, at least 1:
//
//	"burst";q=20;w=2
//	"monthly";q=100000;w=2592000
//
// name must come from RateLimitName.
func RateLimitPolicy(name string, quota int64, window time.Duration) string {
	b := appendSFString(make([]byte, 0, len(name)+32), name)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, quota, 10)
	b = append(b, ";w="...)
	b = strconv.AppendInt(b, max(Seconds(window), 1), 10)
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
