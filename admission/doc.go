// Package admission runs admitter's queue: it takes jobs from the input stream and forwards each
// when its tenant's plan allows, through two paths.
//
//   - Ingest (ingest.go): one durable consumer shared by every replica. A tenant's jobs are
//     decided a batch at a time, in order (package policy, one limiter call per batch): what fits
//     now is forwarded (publish, PubAck, ack), what must wait is moved to the tenant's lane
//     (publish to the lanes stream, PubAck, ack), what can never pass is dead-lettered (publish,
//     Term). A job never waits in the consumer's window.
//   - Lanes (lanes.go): a tenant's waiting jobs, in order, on one subject of the lanes stream. A
//     lane reads its head by Direct Get when its weight fits, forwards it and removes it, and
//     sleeps until the next head fits. Replicas share the lanes (members.go).
//
// Nothing is dropped: a step that fails is retried or leaves the job where it was, and the
// deterministic Nats-Msg-Id of every publish plus the limiter's redeem window make a repeated
// step harmless. A full stream downstream holds jobs (publish.go): backpressure, not an error.
// The package does not parse configuration or open connections: the caller passes a JetStream
// context and a policy (see cmd/admitter); Layout says which streams, consumer and bucket it
// uses.
package admission
