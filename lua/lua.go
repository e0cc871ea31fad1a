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
var many string

//go:embed lease.lua
var lease string

// Decide decides one request and books a slot when it must wait (see decide.lua).
var Decide = prelude + decide

// Admit decides batches of queued jobs, each of one tenant's jobs in order, without booking:
// many.lua calls admit.lua, wrapped as the function admit_one(KEYS, ARGV), once per batch.
var Admit = prelude + "local function admit_one(KEYS, ARGV)\n" + admit + "\nend\n" + many

// Inspect reads a tenant's state without changing it (see inspect.lua).
var Inspect = prelude + inspect

// Lease releases or renews a job's lease and reconciles its cost (see lease.lua).
var Lease = prelude + lease
