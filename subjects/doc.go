// Package subjects parses the subject templates admitter is configured with and maps concrete
// NATS subjects between them.
//
// A template is a NATS subject with exactly one {tenant} token, for example
//
//	jobs.submit.{tenant}.>
//
// Tokens are separated by '.'. Each token is a literal (non-empty, no whitespace, none of
// '*', '>', '{', '}'), the placeholder {tenant} (exactly once, as a whole token), the
// single-token wildcard '*', or the multi-token wildcard '>' (only as the last token).
// [Template.Filter] is the NATS filter to subscribe with ({tenant} becomes '*'),
// [Template.Match] extracts the tenant from a concrete subject, and a [Mapping] rewrites a
// subject matched by one template into the subject of another, carrying the tenant and the
// tokens matched by the wildcards:
//
//	in:  jobs.submit.{tenant}.>    jobs.submit.acme.email.send
//	out: jobs.admitted.{tenant}.>  jobs.admitted.acme.email.send
//
// [Overlap] tells whether two NATS filters can match the same subject, so that a
// configuration whose output would be consumed again as input can be refused.
//
// A concrete subject token (the tenant, or a token matched by a wildcard) is accepted exactly
// when NATS accepts it as a literal token: it is non-empty, contains none of space, '\t', '\n',
// '\f', '\r', and is not a lone "*" or ">". Any other bytes, including '{', '}' and invalid
// UTF-8, are passed through unchanged.
//
// The package is not a NATS client and does not talk to a server; it does not implement the
// NATS server's subject-mapping functions ({{wildcard(1)}} and friends); and it does not decide
// whether a tenant is known or allowed — a tenant is whatever token sits in the {tenant}
// position, and vetting it is the caller's job.
//
// All values are immutable once built and safe for concurrent use. The package has no global
// mutable state.
package subjects
