package rls

import (
	"context"
	"time"

	"github.com/admitter/admitter/policy"
	"github.com/admitter/admitter/wire"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// Defaults of Config.
const (
	DefaultDomain        = "admitter"
	DefaultDescriptorKey = "tenant"
)

// MaxDescriptors bounds the descriptors of one call: each is a decision, made in order.
const MaxDescriptors = 64

// Config says what the service answers.
type Config struct {
	// Domain is the one domain answered (default DefaultDomain): the rate_limit filter's
	// domain. A call for another is refused with InvalidArgument.
	Domain string
	// DescriptorKey is the key of the descriptor entry whose value names the tenant (default
	// DefaultDescriptorKey).
	DescriptorKey string
}

// Service answers ShouldRateLimit:
//
//   - A call for another domain than Config.Domain, without descriptors or with more than
//     MaxDescriptors is refused with InvalidArgument.
//   - Each descriptor with an entry keyed Config.DescriptorKey is decided, in order, by the
//     policy's Allow for the tenant that entry names, weighing the descriptor's hits_addend if
//     set, else the call's (0 means 1). Nothing is booked. Two descriptors naming one tenant are
//     two decisions, each charged, and descriptors allowed are charged even when another is over
//     the limit (as envoyproxy/ratelimit counts them).
//   - Allowed: OK, with the binding limit (current_limit), the tokens left (limit_remaining) and
//     how long until that limit is full again, at most (duration_until_reset). Denied:
//     OVER_LIMIT with the wait until the weight fits, at most the limiter's horizon.
//   - Refused for what it is (no plan and no default_plan, a tenant that cannot key buckets, a
//     weight over 2^40 or over the plan's smallest capacity): OVER_LIMIT with no limit and no
//     wait, for it would never pass.
//   - A paused tenant: OVER_LIMIT with the rest of the pause as the wait, nothing charged.
//   - The limiter down: fail mode open, OK with no limit and Admit-Degraded: fail-open; fail
//     mode closed, OVER_LIMIT with the backoff as the wait.
//   - A plan in shadow mode: OK with no limit and Admit-Shadow.
//   - A descriptor without the key, or with is_negative_hits (admitter gives nothing back): OK
//     with no limit, nothing decided (as envoyproxy/ratelimit answers descriptors no rule
//     matches).
//
// The overall code is OVER_LIMIT when any descriptor's is. The response headers are those
// respond describes. A call's trace context (traceparent in its metadata, as Envoy sends it
// when tracing) is the parent of its decisions' spans. It is safe for concurrent use.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	pol    *policy.Policy
	domain string
	key    string
	prop   propagation.TextMapPropagator
}

var _ rlsv3.RateLimitServiceServer = (*Service)(nil)

// New returns the service over pol.
func New(pol *policy.Policy, c Config) (*Service, error) {
	if pol == nil {
		return nil, ErrNoPolicy
	}
	if c.Domain == "" {
		c.Domain = DefaultDomain
	}
	if c.DescriptorKey == "" {
		c.DescriptorKey = DefaultDescriptorKey
	}
	return &Service{pol: pol, domain: c.Domain, key: c.DescriptorKey,
		prop: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})}, nil
}

// Register registers the service on r (a *grpc.Server).
func (s *Service) Register(r grpc.ServiceRegistrar) { rlsv3.RegisterRateLimitServiceServer(r, s) }

// ShouldRateLimit answers one call (see Service). Each decision is bounded by the policy's
// timeout and by ctx (Envoy's timeout on the call).
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	asks, err := read(req, s.domain, s.key)
	if err != nil {
		return nil, err
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		ctx = s.prop.Extract(ctx, wire.HeaderCarrier(md)) // gRPC metadata keys are lower case, as traceparent
	}
	vs := make([]verdict, len(asks))
	for i, q := range asks {
		if q.decides() {
			a := s.pol.Allow(ctx, wire.SourceRLS, q.tenant, q.weight)
			vs[i] = judge(&a, time.Now())
		}
	}
	return respond(vs), nil
}
