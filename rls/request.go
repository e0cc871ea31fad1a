package rls

import (
	"math"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// An ask is what one descriptor asks.
type ask struct {
	// named: an entry of the descriptor has the descriptor key; tenant is its value (the first
	// such entry's). A descriptor without one is answered OK with no limit.
	named  bool
	tenant string
	// weight is the descriptor's hits_addend if it has one, else the request's; 0 means 1.
	// Values over math.MaxInt64 are math.MaxInt64 (the policy refuses either as invalid).
	weight int64
	// refund: is_negative_hits, hits given back. admitter gives nothing back: the descriptor is
	// answered OK with no limit and nothing is decided.
	refund bool
}

// decides reports whether the ask is decided by the policy.
func (q ask) decides() bool { return q.named && !q.refund }

// read checks a call against the domain and reads what each of its descriptors asks, the
// tenant being named by the entry whose key is key. A call for another domain, without
// descriptors or with more than MaxDescriptors is an InvalidArgument error; anything else is
// read, whatever its entries (a descriptor may be nil).
func read(req *rlsv3.RateLimitRequest, domain, key string) ([]ask, error) {
	if got := req.GetDomain(); got != domain {
		return nil, status.Errorf(codes.InvalidArgument, "rls: domain %q is not served here: admitter answers domain %q (ADMITTER_RLS_DOMAIN); set the rate_limit filter's domain to it", got, domain)
	}
	ds := req.GetDescriptors()
	switch {
	case len(ds) == 0:
		return nil, status.Error(codes.InvalidArgument, "rls: the call has no descriptors: want at least one, with an entry naming the tenant")
	case len(ds) > MaxDescriptors:
		return nil, status.Errorf(codes.InvalidArgument, "rls: the call has %d descriptors, more than the %d allowed", len(ds), MaxDescriptors)
	}
	asks := make([]ask, len(ds))
	for i, d := range ds {
		asks[i] = readDescriptor(d, key, req.GetHitsAddend())
	}
	return asks, nil
}

// readDescriptor reads one descriptor; hits is the request's hits_addend.
func readDescriptor(d *ratelimitv3.RateLimitDescriptor, key string, hits uint32) ask {
	q := ask{refund: d.GetIsNegativeHits()}
	for _, e := range d.GetEntries() {
		if e.GetKey() == key {
			q.named, q.tenant = true, e.GetValue()
			break
		}
	}
	w := uint64(hits)
	if h := d.GetHitsAddend(); h != nil {
		w = h.GetValue()
	}
	q.weight = int64(min(max(w, 1), math.MaxInt64))
	return q
}
