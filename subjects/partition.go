package subjects

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
)

// Partition is the partition of n a tenant's jobs go to: FNV-1a (32 bits) of the tenant modulo
// n, the value nats-server's mapping function {{partition(n,k)}} gives for the tenant's token.
// A producer that computes it publishes straight to [Partitions.Subject]; one that does not
// relies on the server's mapping ([Partitions.Mapping]). Partition is 0 when n < 2.
func Partition(tenant string, n int) int {
	if n < 2 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(tenant))
	return int(h.Sum32() % uint32(n))
}

// Partitions is how the subjects of an input template are spread over N partitions: a job
// published on subject s of the template is stored on Prefix.N.p.s, where p is its tenant's
// partition. The zero Partitions (or N < 2) is one partition: subjects are stored as published.
type Partitions struct {
	In     Template
	Prefix string // literal tokens, e.g. "admitter.JOBS"
	N      int
}

// NewPartitions checks prefix (literal tokens) and n (1 to 4096) and returns the partitioning.
func NewPartitions(in Template, prefix string, n int) (Partitions, error) {
	if n < 1 || n > MaxPartitions {
		return Partitions{}, fmt.Errorf("%w: %d partitions: want 1 to %d", ErrTemplate, n, MaxPartitions)
	}
	for i, tok := range strings.Split(prefix, ".") {
		if tok == "" {
			return Partitions{}, fmt.Errorf("%w: partition prefix %q: token %d is empty", ErrTemplate, prefix, i+1)
		}
		if p := literalProblem(tok); p != "" || tok == starToken || tok == tailToken || tok == tenantToken {
			return Partitions{}, fmt.Errorf("%w: partition prefix %q: token %d %q is not a literal", ErrTemplate, prefix, i+1, tok)
		}
	}
	return Partitions{In: in, Prefix: prefix, N: n}, nil
}

// MaxPartitions bounds N: every job of every partition has an id of its own below 2^53 (see
// wire.MaxPartitions, which it equals).
const MaxPartitions = 64

// One reports whether there is a single partition: jobs are stored as published.
func (ps Partitions) One() bool { return ps.N < 2 }

// Head is the tokens partition p's stored subjects start with (with their final dot), "" for
// one partition.
func (ps Partitions) Head(p int) string {
	if ps.One() {
		return ""
	}
	return ps.Prefix + "." + strconv.Itoa(ps.N) + "." + strconv.Itoa(p) + "."
}

// Filter is the subject filter of partition p's stream.
func (ps Partitions) Filter(p int) string {
	if ps.One() {
		return ps.In.Filter()
	}
	return ps.Head(p) + ">"
}

// Subject is where a job published on subject (of the template) is stored.
func (ps Partitions) Subject(subject string) (string, error) {
	tenant, ok := ps.In.Match(subject)
	if !ok {
		return "", ps.In.noMatch(subject)
	}
	return ps.Head(Partition(tenant, ps.N)) + subject, nil
}

// Published is the subject a job stored on stored was published on, and its tenant; ok is
// false when stored is not a subject of partition p.
func (ps Partitions) Published(p int, stored string) (subject, tenant string, ok bool) {
	subject, ok = strings.CutPrefix(stored, ps.Head(p))
	if !ok {
		return "", "", false
	}
	tenant, ok = ps.In.Match(subject)
	return subject, tenant, ok
}

// TenantFilter is the subject filter of tenant's jobs in partition p's stream.
func (ps Partitions) TenantFilter(p int, tenant string) (string, error) {
	f, err := ps.In.TenantFilter(tenant)
	return ps.Head(p) + f, err
}

// Mapping is the account subject mapping that stores the template's subjects in their
// partitions, for a NATS server's configuration (mappings { "<source>": "<destination>" }) or
// an embedded server's account: source is the template's filter, destination the partition's
// head with {{partition(N,k)}} over the tenant's token and every wildcard carried. It is empty
// for one partition.
func (ps Partitions) Mapping() (source, destination string) {
	if ps.One() {
		return "", ""
	}
	var b strings.Builder
	b.WriteString(ps.Prefix + "." + strconv.Itoa(ps.N) + ".")
	k, tenantAt := 0, 0
	for _, tok := range ps.In.toks {
		if tok == tenantToken || tok == starToken {
			k++
			if tok == tenantToken {
				tenantAt = k
			}
		}
	}
	fmt.Fprintf(&b, "{{partition(%d,%d)}}", ps.N, tenantAt)
	k = 0
	for _, tok := range ps.In.toks {
		b.WriteByte('.')
		switch tok {
		case tenantToken, starToken:
			k++
			fmt.Fprintf(&b, "{{wildcard(%d)}}", k)
		default:
			b.WriteString(tok)
		}
	}
	return ps.In.Filter(), b.String()
}

// MappingLine is [Partitions.Mapping] as a line of a NATS server's configuration, the one
// admitter logs at start and names when jobs arrive without it: mappings { "<source>":
// "<destination>" }. It is empty for one partition.
func (ps Partitions) MappingLine() string {
	src, dst := ps.Mapping()
	if src == "" {
		return ""
	}
	return fmt.Sprintf("mappings { %q: %q }", src, dst)
}
