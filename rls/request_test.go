package rls

import (
	"math"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestRead: what each descriptor asks, and the calls refused.
func TestRead(t *testing.T) {
	hits := func(d *ratelimitv3.RateLimitDescriptor, n uint64) *ratelimitv3.RateLimitDescriptor {
		d.HitsAddend = wrapperspb.UInt64(n)
		return d
	}
	refund := desc("tenant", "acme")
	refund.IsNegativeHits = true
	req := &rlsv3.RateLimitRequest{Domain: "admitter", HitsAddend: 3, Descriptors: []*ratelimitv3.RateLimitDescriptor{
		desc("tenant", "acme"),
		desc("path", "/x", "tenant", "bob", "tenant", "carol"),
		desc("path", "/x"),
		desc("Tenant", "acme"),
		hits(desc("tenant", "acme"), 0),
		hits(desc("tenant", "acme"), 7),
		hits(desc("tenant", "acme"), math.MaxUint64),
		refund,
		nil,
		desc("tenant", ""),
	}}
	want := []ask{
		{named: true, tenant: "acme", weight: 3},
		{named: true, tenant: "bob", weight: 3},
		{weight: 3},
		{weight: 3}, // keys are matched exactly
		{named: true, tenant: "acme", weight: 1},
		{named: true, tenant: "acme", weight: 7},
		{named: true, tenant: "acme", weight: math.MaxInt64},
		{named: true, tenant: "acme", weight: 3, refund: true},
		{weight: 3},
		{named: true, weight: 3},
	}
	got, err := read(req, "admitter", "tenant")
	if err != nil || len(got) != len(want) {
		t.Fatalf("%v %v", got, err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("descriptor %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if got, _ := read(&rlsv3.RateLimitRequest{Domain: "admitter", Descriptors: req.Descriptors[:1]}, "admitter", "tenant"); got[0].weight != 1 {
		t.Errorf("no hits_addend: weight %d, want 1", got[0].weight)
	}
	for _, tc := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{"nil", nil, `domain "" is not served here: admitter answers domain "admitter"`},
		{"another domain", &rlsv3.RateLimitRequest{Domain: "envoy", Descriptors: req.Descriptors}, `domain "envoy" is not served here: admitter answers domain "admitter" (ADMITTER_RLS_DOMAIN)`},
		{"no descriptors", &rlsv3.RateLimitRequest{Domain: "admitter"}, "no descriptors"},
		{"too many", &rlsv3.RateLimitRequest{Domain: "admitter", Descriptors: many(65, desc("tenant", "acme"))}, "65 descriptors, more than the 64 allowed"},
	} {
		_, err := read(tc.req, "admitter", "tenant")
		if s, _ := status.FromError(err); s.Code() != codes.InvalidArgument || !strings.Contains(s.Message(), tc.want) || !strings.HasPrefix(s.Message(), "rls: ") {
			t.Errorf("%s: %v, want InvalidArgument saying %q", tc.name, err, tc.want)
		}
	}
}

// FuzzRead: any call Envoy could send (any bytes that decode as a RateLimitRequest) is read
// without panicking into one ask per descriptor, each as the rules say, or refused with
// InvalidArgument.
func FuzzRead(f *testing.F) {
	for _, req := range []*rlsv3.RateLimitRequest{
		{Domain: "admitter", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("tenant", "acme")}},
		{Domain: "admitter", HitsAddend: 5, Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("path", "/x", "tenant", "bob"), desc("path", "/y")}},
		{Domain: "admitter", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: desc("tenant", "a").Entries, HitsAddend: wrapperspb.UInt64(1 << 41), IsNegativeHits: true}}},
		{Domain: "envoy", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("tenant", "acme")}},
		{Domain: "admitter"},
	} {
		b, err := proto.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x0a, 0x08, 'a', 'd', 'm', 'i', 't', 't', 'e', 'r', 0x12, 0x00})
	f.Add([]byte("\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var req rlsv3.RateLimitRequest
		if err := proto.Unmarshal(data, &req); err != nil {
			return
		}
		asks, err := read(&req, "admitter", "tenant")
		ds := req.GetDescriptors()
		if refused := req.GetDomain() != "admitter" || len(ds) == 0 || len(ds) > MaxDescriptors; refused {
			if s, _ := status.FromError(err); s.Code() != codes.InvalidArgument || asks != nil {
				t.Fatalf("refused call read as %v, %v", asks, err)
			}
			return
		}
		if err != nil || len(asks) != len(ds) {
			t.Fatalf("%d asks for %d descriptors, %v", len(asks), len(ds), err)
		}
		for i, d := range ds {
			q := asks[i]
			want := ask{refund: d.GetIsNegativeHits(), weight: int64(max(req.GetHitsAddend(), 1))}
			if h := d.GetHitsAddend(); h != nil {
				want.weight = int64(min(max(h.GetValue(), 1), math.MaxInt64))
			}
			for _, e := range d.GetEntries() {
				if e.GetKey() == "tenant" {
					want.named, want.tenant = true, e.GetValue()
					break
				}
			}
			if q != want || q.weight < 1 || q.decides() != (q.named && !q.refund) {
				t.Fatalf("descriptor %d (%v): %+v, want %+v", i, d, q, want)
			}
		}
		// Any verdicts of these descriptors make a response of one status each.
		vs := make([]verdict, len(asks))
		for i := range vs {
			vs[i] = verdict{over: i%2 == 1, retry: i%3 == 0 && i%2 == 1, remaining: uint32(i)}
		}
		if resp := respond(vs); len(resp.GetStatuses()) != len(asks) {
			t.Fatalf("%d statuses for %d descriptors", len(resp.GetStatuses()), len(asks))
		}
	})
}
