// Package httplimit rate-limits the requests of a Go HTTP service under admitter's plans, in
// process: a middleware around an http.Handler that resolves each request's tenant (from a
// header, the authenticated principal or the client's IP, or any Resolver), asks a
// policy.Policy over the same bucket backends and plans as the admitter service, and either
// lets the request through with the RateLimit headers, or answers it itself: 429 with
// Retry-After when the tenant's plan denies it, 503 when the limiter is down and the fail mode
// is closed, and 4xx for what can never pass — with the bodies and headers of admitter's HTTP
// decision API, whose answers are written by WriteAnswer here too. With a shared Redis, the
// service's requests and the tenant's queued jobs draw on the same buckets.
//
// The middleware books nothing (policy.Allow): a denied client retries by itself after
// Retry-After.
package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/admitter/admitter/policy"
	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go"
)

// Config is what a Middleware needs.
type Config struct {
	// Policy decides (required): build it with policy.New over a bucket backend
	// (bucket.NewRedis, bucket.DialRedis or bucket.NewMemory) and the plans. Its fail mode and
	// timeout apply; its meter and tracer providers record each decision with source "http".
	Policy *policy.Policy
	// Tenant names each request's tenant (required): Header, Principal, ClientIP, or your own.
	Tenant Resolver
	// Weight gives each request's weight (default: 1 for every request). AdmitWeight reads the
	// Admit-Weight header, as queued jobs do.
	Weight func(*http.Request) (int64, error)
}

// Middleware limits the requests of the handlers it wraps. It is safe for concurrent use.
type Middleware struct {
	c Config
}

// New checks the configuration and returns the middleware.
func New(c Config) (*Middleware, error) {
	switch {
	case c.Policy == nil:
		return nil, errors.New("httplimit: no policy (build one with policy.New)")
	case c.Tenant == nil:
		return nil, errors.New("httplimit: no tenant resolver (try httplimit.Header(\"X-Tenant\"))")
	}
	return &Middleware{c: c}, nil
}

// Wrap returns next behind the limit. A request goes through to next when its tenant's plan
// allows its weight now, with RateLimit-Policy and RateLimit set on the response, or when the
// limiter failed and the fail mode is open, with X-RateLimit-Degraded: true instead. Otherwise
// the middleware answers and next never sees the request:
//
//	429 denied: Retry-After (whole seconds), RateLimit headers, a wire.Decision body
//	503 limiter-unavailable (fail mode closed): Retry-After, a wire.ErrorBody
//	400 invalid-request (no tenant could be resolved), invalid-weight, invalid-tenant
//	404 unknown-tenant (no plan and no default plan), 422 weight-over-capacity
func (m *Middleware) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant, err := m.c.Tenant(r)
		if err != nil {
			WriteError(w, wire.CodeInvalidRequest, fmt.Sprintf("no tenant for this request: %v", err))
			return
		}
		weight := int64(1)
		if m.c.Weight != nil {
			if weight, err = m.c.Weight(r); err != nil {
				WriteError(w, wire.CodeInvalidWeight, err.Error())
				return
			}
		}
		a := m.c.Policy.Allow(r.Context(), wire.SourceHTTP, tenant, weight)
		if !a.Allowed {
			WriteAnswer(w, &a)
			return
		}
		h := w.Header()
		a.Headers(headerSetter(h).set)
		if a.Degraded || a.Local {
			h.Set(wire.HeaderRateLimitDegraded, "true")
		}
		next.ServeHTTP(w, r)
	})
}

// AdmitWeight reads a request's weight from its Admit-Weight header (absent: 1), with the rules
// and errors of queued jobs (wire.ParseWeight).
func AdmitWeight(r *http.Request) (int64, error) {
	return wire.ParseWeight(nats.Header(r.Header))
}

// WriteAnswer writes a policy's answer as the response: its headers (Retry-After,
// RateLimit-Policy, RateLimit), its status (200, 429, or the refusal's) and its JSON body
// (wire.Decision or wire.ErrorBody). Set a degraded header first if the face has one.
func WriteAnswer(w http.ResponseWriter, a *policy.Answer) {
	a.Headers(headerSetter(w.Header()).set)
	buf := buffers.Get().(*[]byte)
	body := append(a.AppendBody((*buf)[:0]), '\n')
	write(w, a.Status(), body)
	*buf = body
	buffers.Put(buf)
}

// WriteError writes a refusal made before any decision: the code's status and a
// wire.ErrorBody.
func WriteError(w http.ResponseWriter, code wire.Code, detail string) {
	write(w, wire.HTTPStatus(code), append(wire.ErrorBody{Error: code, Detail: detail}.AppendJSON(nil), '\n'))
}

// buffers recycles the bodies of answers.
var buffers = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

func write(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h["Content-Type"] = contentJSON
	h["Cache-Control"] = noStore
	h["X-Content-Type-Options"] = noSniff
	w.WriteHeader(status)
	_, _ = w.Write(body) // a client that went away: nothing to do
}

// The values of the headers every answer carries, shared: net/http only reads them.
var (
	contentJSON = []string{"application/json"}
	noStore     = []string{"no-store"}
	noSniff     = []string{"nosniff"}
)

// headerSetter sets the headers of an answer under their canonical names without
// canonicalizing each time (the draft's RateLimit-Policy is Ratelimit-Policy to net/http).
type headerSetter http.Header

func (h headerSetter) set(name, value string) {
	switch name {
	case wire.HeaderRetryAfter:
	case wire.HeaderRateLimit:
		name = "Ratelimit"
	case wire.HeaderRateLimitPolicy:
		name = "Ratelimit-Policy"
	default:
		name = http.CanonicalHeaderKey(name)
	}
	h[name] = []string{value}
}
