// Package admission runs admitter's loop: consume a job from the input stream, ask the limiter
// whether its tenant's plan allows its weight now, then do exactly one of
//
//   - forward it to the output subject (publish, wait for the PubAck, then ack the input),
//   - delay it (NakWithDelay by the limiter's wait, so JetStream redelivers it at its slot),
//   - dead-letter it (publish to the dead subject with the reason, then Term the input).
//
// Nothing is dropped: a step that fails leaves the input un-acked or NAKs it with a delay, and
// the deterministic Nats-Msg-Id of every forward plus the limiter's per-job idempotency make a
// repeated step harmless. The package does not parse configuration or open connections: the
// caller passes a JetStream context, a limiter and plans (see cmd/admitter).
package admission
