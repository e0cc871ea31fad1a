// Package admission runs admitter's queue: it forwards each job of the input stream when its
// tenant's plan (and its pool) allows, dead-letters what can never pass, and leaves what must wait
// where it arrived.
//
//   - Queues (queues.go): a tenant's queue is its jobs in the input, in order. One replica runs
//     it (members.go); the replica's feed hands it its jobs, or it reads them by subject while
//     behind; workers step the ready queues in turn (deficit round robin on weight).
//   - Steps (step.go): read the head, decide it in one limiter call (package policy), forward
//     and dead-letter in order, stop at the first job that waits and sleep exactly its wait.
//   - Forwards in flight (forwards.go): the one lifecycle of a forward decided and not yet
//     stored, and what the queue's next limiter call must say about it.
//   - Removal: settled jobs leave the input by one compaction below every replica's floor
//     (members.go), or by their queue's own removal when a waiting job keeps them above it.
//
// Nothing is dropped: a step that fails is retried or leaves the job where it was, and the
// deterministic Nats-Msg-Id of every publish plus the limiter's redeem window make a repeated
// step harmless. A full stream downstream holds jobs (publish.go): backpressure, not an error.
// The package does not parse configuration or open connections: the caller passes a JetStream
// context and a policy (see cmd/admitter); Layout says which streams and buckets it uses.
package admission
