package api

import (
	"context"
	"encoding/json"
	"maps"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/admitter/admitter/policy"
	"github.com/admitter/admitter/wire"
)

// readmeTenantFields is the field list the README gives for GET /v1/tenants/{tenant}: every
// `snake_case` name of its paragraph.
func readmeTenantFields(t *testing.T) []string {
	t.Helper()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, para, ok := strings.Cut(string(readme), "\n`GET /v1/tenants/{tenant}`")
	if !ok {
		t.Fatal("README.md has no paragraph starting with `GET /v1/tenants/{tenant}`")
	}
	para, _, _ = strings.Cut(para, "\n\n")
	var out []string
	for _, m := range regexp.MustCompile("`([a-z][a-z_]*)`").FindAllStringSubmatch(para, -1) {
		if !slices.Contains(out, m[1]) {
			out = append(out, m[1])
		}
	}
	if len(out) < 5 {
		t.Fatalf("README.md's paragraph on GET /v1/tenants/{tenant} names %d fields: %q", len(out), para)
	}
	return out
}

// TestReadmeTenantFields holds the README's field list of GET /v1/tenants/{tenant} against
// replies: a tenant paused, held by a replica, with a reservation, a bucket, a quota and a
// pool; and one on a plan in shadow mode. Every field the README names is in a reply, and every
// field of the replies (and of their limits) is named in the README.
func TestReadmeTenantFields(t *testing.T) {
	pol := newPolicy(t, `
pools:
  workers: {concurrency: 4, lease: 30s}
plans:
  gold:
    pool: workers
    limits:
      - {name: burst, capacity: 1, rate: 1/m}
      - {name: monthly, kind: quota, limit: 100, period: month}
  trial: {mode: shadow, limits: [{capacity: 1, rate: 1/m}]}
tenants: {acme: gold, dan: trial}
`)
	ctx := context.Background()
	if d := pol.Step(ctx, "acme", []policy.Job{{ID: 1, Weight: 1}}, policy.Queue{Owner: 1}); len(d.Verdicts) != 1 || d.Verdicts[0].Fate != wire.FateAdmitted {
		t.Fatalf("step: %+v", d)
	}
	if a := pol.Reserve(ctx, wire.SourceHTTP, "acme", 1, "k1"); !a.Reserved {
		t.Fatalf("reserve: %+v", a)
	}
	pol.SetPauses(map[string]time.Time{"acme": time.Now().Add(time.Hour)})
	srv := httptest.NewServer(NewHandler(pol))
	defer srv.Close()
	top, limits := map[string]bool{}, map[string]bool{}
	for _, tenant := range []string{"acme", "dan"} {
		resp, body := call(t, srv, "GET", "/v1/tenants/"+tenant, "")
		if resp.StatusCode != 200 {
			t.Fatalf("GET /v1/tenants/%s: %d %s", tenant, resp.StatusCode, body)
		}
		var reply struct {
			Limits []map[string]json.RawMessage `json:"limits"`
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal([]byte(body), &fields); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(body), &reply); err != nil {
			t.Fatal(err)
		}
		for k := range fields {
			top[k] = true
		}
		for _, l := range reply.Limits {
			for k := range l {
				limits[k] = true
			}
		}
	}
	documented := readmeTenantFields(t)
	for _, f := range documented {
		if !top[f] && !limits[f] {
			t.Errorf("the README names %q, which no reply of GET /v1/tenants/{tenant} has (replies have %v and, per limit, %v)",
				f, slices.Sorted(maps.Keys(top)), slices.Sorted(maps.Keys(limits)))
		}
	}
	for _, set := range []map[string]bool{top, limits} {
		for _, f := range slices.Sorted(maps.Keys(set)) {
			if !slices.Contains(documented, f) {
				t.Errorf("replies of GET /v1/tenants/{tenant} have %q, which the README does not name", f)
			}
		}
	}
}
