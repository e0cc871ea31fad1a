// Package worker runs a service's handlers over the jobs admitter forwards
// (jobs.admitted.<tenant>.<rest>) and keeps the worker's side of admitter's contract for them.
// Under a plan with a concurrency limit, each forwarded job holds a lease (Admit-Lease) that
// ends, and frees its slot, when the worker says the job is done or when the lease's length
// (Admit-Lease-Ms) passes without a renewal. For each job the package:
//
//  1. runs the Handler, at most Config.Concurrency at once;
//
//  2. while it runs, renews the lease halfway through each lease's length, as a request to
//     jobs.renew.<tenant>.<rest> (so it learns whether the lease is still held), and keeps the
//     JetStream delivery alive (InProgress) past the consumer's AckWait;
//
//  3. when the handler returns, stops renewing, then ends the lease with a request to
//     jobs.done.<tenant>.<rest> carrying the cost the handler reported (Job.SetCost, sent as
//     Admit-Cost: admitter charges or gives back the difference from the weight);
//
//  4. only then settles the delivery.
//
// One outcome per delivery:
//
//	handler returns          lease                            delivery
//	nil                      done message (with the cost)     Ack
//	an error, or panics      done message, outcome failed     TermWithReason(the error): not delivered again
//	Overloaded(err)          done message, outcome overloaded NakWithDelay(1s): delivered again, taking its slots again first
//	RetryAfter(d, err)       the same, and Admit-Retry-After  NakWithDelay(d)
//	RetryAfterPool(d, err)   the same, of the pool's scope    NakWithDelay(d)
//	Retry(err, after)        kept: no done message            NakWithDelay(after): delivered again holding it
//	an error after a hard    kept: no done message            Nak: delivered again at once, holding it
//	stop (see Worker.Stop)
//
// The done message says how the job went downstream (Admit-Outcome: failed, overloaded; nothing
// for ok): admitter's pools count it toward their breaker and move an adaptive pool's limit by
// it. RetryAfter's Admit-Retry-After holds the tenant's next forwards for d (RetryAfterPool: the
// whole pool's), a downstream's 429 or 503 passed on; ResponseError maps an HTTP call's response
// to these (see docs/downstream.md).
//
// A failed job is terminated rather than delivered again because its done message has freed
// its slot: a redelivery would run outside the tenant's concurrency limit. Retry inside the
// handler to keep the slot (the lease is renewed all along), or return Retry to be delivered
// again holding the lease. A redelivered job's lease is renewed before its handler runs, to
// learn whether it is still held; one that ended (the retry came after it) runs anyway, its
// Job.LeaseDeadline in the past.
//
// Subjects follow admitter's templates (ADMITTER_SUBJECT_OUT, _DONE, _RENEW; Config.Out, Done,
// Renew, with admitter's defaults): a forward's subject is mapped to its done and renew
// subjects by package subjects, keeping the tenant and what the wildcards matched.
//
// A job without a lease (its plan has no concurrency limit, it was forwarded in shadow mode or
// without a decision) is handled the same way without renewals or starts; its done message, named
// by the forward's Nats-Msg-Id, is sent only when the handler has something to say (an error,
// Overloaded, RetryAfter): its Retry-After holds the tenant as for a job with a lease, and its
// outcome is counted. Its cost is not reconciled (admitter reconciles only a lease it holds).
//
// What it is not: it does not create or change streams or consumers (you pass the consumer you
// made, with explicit acks); it decides and limits nothing (admitter did, before the job was
// forwarded); it is not a retry scheduler (JetStream's redelivery and the consumer's MaxDeliver
// and BackOff are); and it is not exactly-once: a delivery whose ack is lost is delivered again,
// and runs again with its lease already released.
package worker
