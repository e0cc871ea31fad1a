package httplimit_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/httplimit"
	"github.com/admitter/admitter/plans"
	"github.com/admitter/admitter/policy"
)

// A service limits its API per tenant with admitter's plans. Here the buckets are in process;
// with bucket.DialRedis on the admitter's Redis instead, the service's requests and the
// tenant's queued jobs share them.
func Example() {
	plans, err := plans.Parse("plans.yaml", []byte(`
plans:
  free:
    limits:
      - {name: burst, capacity: 2, rate: 2/m}
default_plan: free
`))
	if err != nil {
		panic(err)
	}
	pol, err := policy.New(policy.Config{
		Limiter:  bucket.NewMemory(bucket.Options{}, nil),
		Plans:    plans,
		FailMode: policy.FailOpen,
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	limit, err := httplimit.New(httplimit.Config{Policy: pol, Tenant: httplimit.Header("X-Tenant")})
	if err != nil {
		panic(err)
	}
	api := limit.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello", r.Header.Get("X-Tenant"))
	}))

	for range 3 {
		req := httptest.NewRequest("GET", "/hello", nil)
		req.Header.Set("X-Tenant", "acme")
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, req)
		fmt.Print(rec.Code, " RateLimit: ", rec.Header().Get("RateLimit"))
		if ra := rec.Header().Get("Retry-After"); ra != "" {
			fmt.Print(", Retry-After: ", ra)
		}
		fmt.Println()
	}
	rec := httptest.NewRecorder()
	api.ServeHTTP(rec, httptest.NewRequest("GET", "/hello", nil))
	fmt.Print(rec.Code, " ", rec.Body.String())
	// Output:
	// 200 RateLimit: "burst";r=1;t=30
	// 200 RateLimit: "burst";r=0;t=60
	// 429 RateLimit: "burst";r=0;t=30, Retry-After: 30
	// 400 {"error":"invalid-request","detail":"no tenant for this request: header X-Tenant is missing"}
}
