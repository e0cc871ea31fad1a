package api

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkDecide is one POST /v1/decide through the handler, on the in-process limiter with a
// plan that admits everything: the cost of the API's own work around a decision.
func BenchmarkDecide(b *testing.B) {
	h := NewHandler(newPolicy(b, "plans:\n  big: {limits: [{capacity: 1000000000, rate: 1000000/s}]}\ndefault_plan: big\n"))
	body := []byte(`{"tenant": "acme", "weight": 1}`)
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/decide", bytes.NewReader(body)))
		if rec.Code != http.StatusOK {
			b.Fatal(rec.Code, rec.Body.String())
		}
	}
}
