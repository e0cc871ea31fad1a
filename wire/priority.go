package wire

import (
	"fmt"

	"github.com/nats-io/nats.go"
)

// Priorities of a job within its tenant's queue (HeaderPriority): 1 goes first, 5 last.
const (
	HighestPriority = 1
	DefaultPriority = 3
	LowestPriority  = 5
)

// ParsePriority reads a job's priority from its headers (HeaderPriority): absent means
// DefaultPriority; otherwise exactly one value, a single digit from 1 to 5 (no sign, spaces or
// leading zeros). The header name is matched without regard to case. The error is a sentence
// naming the header and the value; the priority is then DefaultPriority.
func ParsePriority(h nats.Header) (int, error) {
	v, ok, err := one(h, HeaderPriority)
	switch {
	case err != nil:
		return DefaultPriority, err
	case !ok:
		return DefaultPriority, nil
	case len(v) == 1 && v[0] >= '0'+HighestPriority && v[0] <= '0'+LowestPriority:
		return int(v[0] - '0'), nil
	}
	return DefaultPriority, fmt.Errorf("header %s is %q, want one of 1, 2, 3, 4, 5 (1 goes first; absent: %d)", HeaderPriority, v, DefaultPriority)
}
