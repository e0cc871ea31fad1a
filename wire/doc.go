// Package wire is admitter's external contract in one place: the header names it reads and
// writes, the dead-letter and refusal codes with their HTTP statuses, the Nats-Msg-Id format of
// what it publishes, the JSON of synchronous decisions (ParseDecideRequest, Decision,
// ErrorBody) and their RateLimit headers, the names of its metrics, decisions, sources and NATS
// service, and the parser of the one header it reads (Admit-Weight). The service, the Go
// middleware, the demo, the benchmarks and the end-to-end tests import these instead of
// retyping them.
//
// It holds names and formats only: no connection, no configuration, no state.
package wire
