// Package rls is admitter's face for Envoy: the gRPC service
// envoy.service.ratelimit.v3.RateLimitService (ShouldRateLimit), which Envoy's rate_limit HTTP
// filter — and Istio, which configures it — calls before forwarding a request. With it, admitter
// stands where envoyproxy/ratelimit would.
//
// Each descriptor of a request names a tenant by its entry whose key is Config.DescriptorKey
// ("tenant"), and is decided for that tenant by policy.Allow with the hits_addend as its weight:
// the same plans, buckets, fail mode, deadline and telemetry (source "rls") as the HTTP API and
// the NATS service. A call is read into what to ask, each policy answer becomes one descriptor's
// status, and the statuses become the response with its headers; neither step looks up a plan,
// checks a weight or applies the fail mode.
//
// It is not a port of envoyproxy/ratelimit. It reads no descriptor configuration of its own: the
// plans decide, per tenant, and the other entries of a descriptor and its limit override are
// ignored. It books nothing (no reservations), gives nothing back for negative hits, and answers
// one domain. It opens no listener: the caller owns the grpc.Server (see cmd/admitter).
package rls
