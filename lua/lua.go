// Package lua holds admitter's Redis scripts. Each script is a .lua file whose header documents
// its KEYS, ARGV and reply; state.lua is a prelude, the layout of a tenant's state and the
// helpers every script uses to read and write it, prepended to each script here so that the
// layout is written once. The package only embeds them so they ship inside the binary.
package lua

import (
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"fmt"
)

//go:embed state.lua
var state string

// Limits the scripts and the Go code share, defined once here: constants() writes them into the
// scripts' prelude, and package bucket reads them from here.
const (
	// MaxMarks is the most recent decisions a tenant's state keeps (state.lua MAX_MARKS): an
	// admission is kept until its owner says its forward was stored, so this is at least what
	// one call may admit (bucket.MaxBatch).
	MaxMarks = 512
	// ShadowRedeem is how long a shadow state keeps its trial decisions (µs): a job asked about
	// again within it is answered as before (admit.lua SHADOW_REDEEM).
	ShadowRedeem = 2_000_000
	// MaxBooked is the most entries of booked slots a tenant's state keeps (MAX_BOOKED).
	MaxBooked = 16
	// MaxListed is the most tenants a pool's inspection lists (pool.lua MAX_LISTED).
	MaxListed = 100
	// PhantomPercent: a concurrency limit or a pool whose state Redis lost (or that a replica's
	// local copy does not know) counts every slot as held for this share of its lease after
	// the loss, in percent (state.lua PHANTOM_PERCENT): the jobs running then report before it
	// ends (the worker library renews at half a lease), and each report names its own slot.
	PhantomPercent = 60
	// JobSpan: a job's id is a stream's sequence plus a multiple of JobSpan that names the
	// stream (its input's partitioning); a tenant's stored mark (admit.lua) covers the ids of
	// its own span only (state.lua JOB_SPAN).
	JobSpan = 1 << 40
)

// The adaptive pools' controller (pool.lua ADAPT_*; see bucket.Adaptive).
const (
	// AdaptWindow is the shortest window of outcomes (µs); a window is at least two floors long
	// too, and holds at least AdaptSamples outcomes.
	AdaptWindow  = 100_000
	AdaptSamples = 16
	// AdaptProbeEvery is how often the floor is measured again (µs) when the limit has not been
	// at its minimum meanwhile.
	AdaptProbeEvery = 30_000_000
	// AdaptTolerance, AdaptGrow and AdaptDecrease are percents: the limit grows while the time
	// per job is within AdaptTolerance of the floor, by AdaptGrow of itself (at least 1), and
	// keeps AdaptDecrease of itself after a window with jobs overloaded.
	AdaptTolerance = 110
	AdaptGrow      = 5
	AdaptDecrease  = 50
)

// constants is the Lua prelude that defines the shared limits.
func constants() string {
	return fmt.Sprintf("local MAX_MARKS, MAX_BOOKED, MAX_LISTED, PHANTOM_PERCENT, JOB_SPAN, SHADOW_REDEEM = %d, %d, %d, %d, %d, %d\n"+
		"local ADAPT_WINDOW, ADAPT_SAMPLES, ADAPT_PROBE_EVERY, ADAPT_TOLERANCE, ADAPT_GROW, ADAPT_DECREASE = %d, %d, %d, %d, %d, %d\n",
		MaxMarks, MaxBooked, MaxListed, PhantomPercent, JobSpan, ShadowRedeem, AdaptWindow, AdaptSamples, AdaptProbeEvery, AdaptTolerance, AdaptGrow, AdaptDecrease)
}

// prelude is every script's beginning: the shared limits, then state.lua.
var prelude = constants() + state

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

//go:embed pool.lua
var pool string

//go:embed merge.lua
var merge string

// Memory is the marker script that tells a Redis that never knew admitter from one that forgot
// (see memory.lua). It stands alone: it reads no tenant's state.
//
//go:embed memory.lua
var Memory string

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

// Pool grants, gives back, releases, renews and reads a capacity pool's slots (see pool.lua).
var Pool = prelude + pool

// Merge charges a tenant's state with what a replica decided on its own copy of it while Redis
// was unreachable (see merge.lua).
var Merge = prelude + merge

// The same scripts as a Redis Functions library (Redis 7 and later). A script sent by EVALSHA
// runs its whole text on every call: defining the prelude's functions again costs about 7 µs
// of the server's time per call, as much as a decision. A library's text runs once, when it is
// loaded; a call (FCALL) runs only its function. The library's name carries a hash of its text,
// so that versions side by side during a rolling deploy each call their own.
var (
	// LibraryName names the library; the functions are LibraryName + "_" + decide, admit,
	// inspect, lease and pool.
	LibraryName string
	// Library is the text FUNCTION LOAD takes.
	Library string
)

func init() {
	body := prelude +
		"local function decide_one(KEYS, ARGV)\n" + decide + "\nend\n" +
		"local function admit_one(KEYS, ARGV)\n" + admit + "\nend\n" +
		"local function inspect_fn(KEYS, ARGV)\n" + inspect + "\nend\n" +
		"local function lease_fn(KEYS, ARGV)\n" + lease + "\nend\n" +
		"local function pool_fn(KEYS, ARGV)\n" + pool + "\nend\n" +
		"local function merge_fn(KEYS, ARGV)\n" + merge + "\nend\n" +
		"local function many(one, KEYS, ARGV)\n" + manyLua + "\nend\n"
	sum := sha1.Sum([]byte(body))
	LibraryName = "admitter_" + hex.EncodeToString(sum[:6])
	// server_time caches TIME for one call: every call starts without it.
	Library = "#!lua name=" + LibraryName + "\n" + body + fmt.Sprintf(`
redis.register_function('%[1]s_decide', function(keys, args) server_time = nil; return many(decide_one, keys, args) end)
redis.register_function('%[1]s_admit', function(keys, args) server_time = nil; return many(admit_one, keys, args) end)
redis.register_function{function_name = '%[1]s_inspect', callback = function(keys, args) server_time = nil; return inspect_fn(keys, args) end, flags = {'no-writes'}}
redis.register_function('%[1]s_lease', function(keys, args) server_time = nil; return lease_fn(keys, args) end)
redis.register_function('%[1]s_pool', function(keys, args) server_time = nil; return pool_fn(keys, args) end)
redis.register_function('%[1]s_merge', function(keys, args) server_time = nil; return merge_fn(keys, args) end)
`, LibraryName)
}
