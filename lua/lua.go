// Package lua holds admitter's Redis scripts. Each script is a .lua file whose header documents
// its KEYS, ARGV and reply; state.lua is a prelude, the layout of a tenant's state and the
// helpers every script uses to read and write it, prepended to each script here so that the
// layout is written once. The package only embeds them so they ship inside the binary.
package lua

import _ "embed"

//go:embed state.lua
var prelude string

//go:embed decide.lua
var decide string

//go:embed admit.lua
var admit string

//go:embed inspect.lua
var inspect string

//go:embed many.lua
var manyLua string

//go:embed lease.lua
var lease string

// many wraps script as the function one(KEYS, ARGV) that many.lua calls once per batch.
func many(script string) string {
	return prelude + "local function one(KEYS, ARGV)\n" + script + "\nend\n" + manyLua
}

// Decide decides requests, booking a slot for one that must wait: decide.lua once per request
// (see many.lua).
var Decide = many(decide)

// Admit decides batches of queued jobs, each of one tenant's jobs in order, without booking:
// admit.lua once per batch (see many.lua).
var Admit = many(admit)

// Inspect reads a tenant's state without changing it (see inspect.lua).
var Inspect = prelude + inspect

// Lease releases or renews a job's lease and reconciles its cost (see lease.lua).
var Lease = prelude + lease
