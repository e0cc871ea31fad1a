// Package demo shows admitter pacing tenants live: it is what `admitter demo` runs beside an
// admission service.
//
// It is three things in one [Run]:
//
//   - a load generator: one publisher per [Tenant], publishing jobs of mixed weights (header
//     Admit-Weight) and types (jobs.submit.<tenant>.email, .report, ...) to the input stream at a
//     pace set by the tenant's [Profile] relative to its plan: far over it ([Burst]), under it
//     ([Steady]), or idle and then a burst ([IdleThenBurst]);
//   - a downstream consumer: an ordered consumer of the output and dead-letter streams, from the
//     moment the demo starts, that counts each tenant's admitted jobs from the headers admitter
//     sets (Admit-Tenant, Admit-Attempts: the times each was asked about at the head of its
//     queue, Admit-Delay-Ms);
//   - a live table, one row per tenant, refreshed every second: redrawn in place with ANSI
//     escape codes on a terminal, printed as plain lines otherwise.
//
// At the end it prints, and returns, a [Summary]: per tenant what was published, admitted,
// dead-lettered and is still waiting, the tokens admitted while the tenant was publishing
// against what its plan allows in that time (capacity + rate × time), and how many jobs are
// lost. Lost is counted job by job, not assumed: every published job (identified by its input
// stream sequence from the PubAck) must have been seen downstream, be dead-lettered, or still be
// stored in the input stream.
//
// It is not a benchmark (the rates are deliberately low, to be readable and to run on a small
// machine), not a test of the limiter's exactness (the tests in bucket/ and tests/ are), and not
// an admission service: it does not decide anything. Run it beside one, against the same
// streams; it assumes no other producer publishes for its tenants and that the input stream
// holds nothing of its tenants from a previous run (a fresh embedded server guarantees both).
package demo
