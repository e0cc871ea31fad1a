package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// A Resolver names the tenant a request is counted against. An error refuses the request with
// 400 invalid-request and the error's text as the detail: run authentication before the
// middleware, so that an unauthenticated request is answered by it (401) rather than here.
type Resolver func(r *http.Request) (tenant string, err error)

// Header resolves the tenant from a request header, such as an API key's tenant set by a
// gateway ("X-Tenant"). A request without it, or with it twice, is refused.
func Header(name string) Resolver {
	canonical := http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, error) {
		switch vs := r.Header.Values(canonical); {
		case len(vs) == 0 || vs[0] == "":
			return "", fmt.Errorf("header %s is missing", name)
		case len(vs) > 1:
			return "", fmt.Errorf("header %s appears %d times", name, len(vs))
		default:
			return vs[0], nil
		}
	}
}

// Principal resolves the tenant from the authenticated principal that an authentication
// middleware ahead of this one stored in the request's context: from reads it (ok false when
// there is none).
func Principal(from func(ctx context.Context) (principal string, ok bool)) Resolver {
	return func(r *http.Request) (string, error) {
		p, ok := from(r.Context())
		if !ok || p == "" {
			return "", errors.New("the request carries no authenticated principal")
		}
		return p, nil
	}
}

// ClientIP resolves the tenant from the client's IP address: the connection's peer, or, when
// the peer is one of the trusted proxies, the right-most address of X-Forwarded-For that is
// not a trusted proxy (the client as the nearest trusted proxy saw it; addresses further left
// could be forged by the client). IPv4-mapped IPv6 addresses are written as IPv4. Give every IP
// its own bucket with a default_plan in the plans.
func ClientIP(trustedProxies ...netip.Prefix) Resolver {
	trusted := func(a netip.Addr) bool {
		for _, p := range trustedProxies {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	return func(r *http.Request) (string, error) {
		peer, err := netip.ParseAddrPort(r.RemoteAddr)
		if err != nil {
			return "", fmt.Errorf("the peer address %q is not ip:port", r.RemoteAddr)
		}
		client := peer.Addr().Unmap()
		if !trusted(client) {
			return client.String(), nil
		}
		hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
		for i := len(hops) - 1; i >= 0; i-- {
			h := strings.TrimSpace(hops[i])
			if h == "" {
				continue
			}
			a, err := netip.ParseAddr(h)
			if err != nil {
				return "", fmt.Errorf("X-Forwarded-For entry %q is not an IP address", h)
			}
			client = a.Unmap()
			if !trusted(client) {
				break
			}
		}
		return client.String(), nil
	}
}
