package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/admitter/admitter/httplimit"
	"github.com/admitter/admitter/policy"
	"github.com/admitter/admitter/wire"
	"go.opentelemetry.io/otel/propagation"
)

// BodyTimeout bounds reading a request's body, and WriteTimeout writing an answer: with the
// policy's own deadline on the decision (Config.Timeout of policy), every handler is bounded.
const (
	BodyTimeout  = 5 * time.Second
	WriteTimeout = 5 * time.Second
)

// Handler serves the decision API:
//
//	POST /v1/decide            a wire.DecideRequest → 200 allowed, 429 denied (wire.Decision), or
//	                           a wire.ErrorBody with the refusal's status
//	GET  /v1/tenants/{tenant}  the tenant's state now (wire.TenantState)
//
// Anything else is a JSON 404 (not-found) or 405 (method-not-allowed). It is safe for
// concurrent use.
type Handler struct {
	pol  *policy.Policy
	prop propagation.TextMapPropagator
	mux  *http.ServeMux
}

// NewHandler returns the API's handler over pol. The trace context of each request
// (traceparent, tracestate, baggage) is the parent of its decision's span.
func NewHandler(pol *policy.Policy) *Handler {
	h := &Handler{pol: pol, mux: http.NewServeMux(),
		prop: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})}
	h.mux.HandleFunc("POST /v1/decide", h.decide)
	h.mux.HandleFunc("/v1/decide", methodNotAllowed("POST"))
	h.mux.HandleFunc("GET /v1/tenants/{tenant}", h.tenant)
	h.mux.HandleFunc("/v1/tenants/{tenant}", methodNotAllowed("GET"))
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		httplimit.WriteError(w, wire.CodeNotFound, fmt.Sprintf("no endpoint %s (the API serves POST /v1/decide and GET /v1/tenants/{tenant})", r.URL.Path))
	})
	return h
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// bodies recycles request buffers: a decision is small, and there are many.
var bodies = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// decide is POST /v1/decide.
func (h *Handler) decide(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(BodyTimeout)) // unsupported by some writers (tests): the server's timeouts remain
	_ = rc.SetWriteDeadline(time.Now().Add(BodyTimeout + WriteTimeout))
	if r.ContentLength > wire.MaxRequestBytes {
		httplimit.WriteError(w, wire.CodeRequestTooLarge, fmt.Sprintf("the body has %d bytes, more than the %d allowed", r.ContentLength, wire.MaxRequestBytes))
		return
	}
	buf := bodies.Get().(*bytes.Buffer)
	defer func() { buf.Reset(); bodies.Put(buf) }()
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, wire.MaxRequestBytes)); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			httplimit.WriteError(w, wire.CodeRequestTooLarge, fmt.Sprintf("the body is larger than the %d bytes allowed", wire.MaxRequestBytes))
			return
		}
		httplimit.WriteError(w, wire.CodeInvalidRequest, fmt.Sprintf("the body could not be read: %v", err))
		return
	}
	req, err := wire.ParseDecideRequest(buf.Bytes())
	if err != nil {
		var re *wire.RequestError
		errors.As(err, &re) // ParseDecideRequest returns nothing else
		httplimit.WriteError(w, re.Code(), re.Detail)
		return
	}
	ctx := h.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	a := h.pol.Ask(ctx, wire.SourceHTTP, req)
	if v := a.DegradedAs(); v != "" {
		w.Header().Set(wire.HeaderDegraded, v)
	}
	httplimit.WriteAnswer(w, &a)
}

// tenant is GET /v1/tenants/{tenant}.
func (h *Handler) tenant(w http.ResponseWriter, r *http.Request) {
	st, err := h.pol.Inspect(r.Context(), r.PathValue("tenant"))
	if err != nil {
		var re *wire.RequestError
		if errors.As(err, &re) {
			httplimit.WriteError(w, re.Code(), re.Detail)
			return
		}
		w.Header().Set(wire.HeaderRetryAfter, "1")
		httplimit.WriteError(w, wire.CodeLimiterUnavailable, "the limiter could not be read: ask again later")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(st)
}

// methodNotAllowed answers 405 with the method the path allows.
func methodNotAllowed(allow string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		httplimit.WriteError(w, wire.CodeMethodNotAllowed, fmt.Sprintf("%s %s: this endpoint takes %s only", r.Method, r.URL.Path, allow))
	}
}
