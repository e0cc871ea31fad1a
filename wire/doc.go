// Package wire is admitter's external contract in one place: the header names it reads and
// writes, the dead-letter codes, the Nats-Msg-Id format of what it publishes, the names of its
// metrics and decisions, and the parser of the one header it reads (Admit-Weight). The service,
// the demo, the benchmarks and the end-to-end tests import these instead of retyping them.
//
// It holds names and formats only: no connection, no configuration, no state.
package wire
