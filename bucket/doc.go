// Package bucket decides whether a tenant's job may run now under its plan: an ordered list of
// limits, each a token bucket, a sliding window or a calendar quota (Kind). A job of weight w is
// admitted only when every limit lets w through, and then w is charged to every limit, all or
// nothing, in one atomic step; otherwise nothing is charged and the answer says how long until
// w fits every limit, exactly, and which limit binds.
//
// Two backends make the same decisions: Redis (shared by every replica; one Lua script call per
// decision, see package lua; time is the Redis server's clock) and Memory (one process). Their
// arithmetic is written twice, in lua/state.lua and kinds.go, and held together by a
// differential test; bucket/buckettest is the conformance suite both pass.
//
// Verbs: Decide decides one request and, with a JobID, books the earliest slot at which it fits
// after the bookings ahead of it (for callers that come back by themselves); Admit decides a
// batch of one tenant's queued jobs in order without booking (the admission queue), and asks
// the plan's pool first (pool.go); Release and Renew end and extend leases; Inspect serves
// operators. Every backend implements every verb (Limiter).
//
// The package does not read plans files (package plans does), talk to NATS or keep time itself
// beyond reading a clock.
package bucket
