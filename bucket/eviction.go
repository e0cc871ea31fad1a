package bucket

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// EvictionPolicies reads each Redis server's maxmemory-policy (CONFIG GET, or INFO memory where
// an ACL forbids CONFIG), by server address. Anything but "noeviction" lets Redis drop keys under
// memory pressure: every key the limiter writes has a TTL, so volatile-* policies evict them
// too, and a dropped tenant state is a full bucket again (see README, "Running it in
// production").
func (r *Redis) EvictionPolicies(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	for addr, node := range r.client.Nodes() {
		kv, err := node.Do(ctx, node.B().ConfigGet().Parameter("maxmemory-policy").Build()).AsStrMap()
		if p := kv["maxmemory-policy"]; err == nil && p != "" {
			out[addr] = p
			continue
		}
		info, ierr := node.Do(ctx, node.B().Info().Section("memory").Build()).ToString()
		if ierr != nil {
			return nil, fmt.Errorf("bucket: redis %s: maxmemory-policy: CONFIG GET: %v; INFO memory: %w", addr, err, ierr)
		}
		p := infoFields(info)["maxmemory_policy"]
		if p == "" {
			return nil, fmt.Errorf("bucket: redis %s: neither CONFIG GET nor INFO memory tells the maxmemory-policy", addr)
		}
		out[addr] = p
	}
	return out, nil
}

// Evicting lists the servers (address=policy, sorted) whose policy is not noeviction.
func Evicting(policies map[string]string) []string {
	var out []string
	for addr, p := range policies {
		if !strings.EqualFold(p, "noeviction") {
			out = append(out, addr+"="+p)
		}
	}
	slices.Sort(out)
	return out
}
