// Package lua holds admitter's Redis scripts. Each script is a .lua file whose header documents
// its KEYS, ARGV and reply; this package only embeds them so they ship inside the binary.
package lua

import _ "embed"

// Decide is the limiter's decision script (see decide.lua for its contract).
//
//go:embed decide.lua
var Decide string

// Inspect reads a tenant's bucket state without changing it (see inspect.lua).
//
//go:embed inspect.lua
var Inspect string
