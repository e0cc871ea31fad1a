package wire

import (
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
)

// MaxMaxWait bounds Admit-Max-Wait (and a plan's max_wait, whose bound is a window's): 100
// years, so that a job's deadline (its store time plus the bound) cannot overflow.
const MaxMaxWait = 36500 * 24 * time.Hour

// ParseMaxWait reads a job's bound on waiting from its headers (HeaderMaxWait): absent means
// none (0, nil); otherwise exactly one value, either whole seconds ("30": digits only, no sign
// or spaces) or a Go duration with its unit ("30s", "1h30m", "250ms", see time.ParseDuration),
// positive and at most MaxMaxWait. The header name is matched without regard to case. The error
// is a sentence naming the header and the value.
func ParseMaxWait(h nats.Header) (time.Duration, error) {
	v, ok, err := one(h, HeaderMaxWait)
	if err != nil || !ok {
		return 0, err
	}
	bad := func(why string) (time.Duration, error) {
		return 0, fmt.Errorf("header %s is %q, %s", HeaderMaxWait, v, why)
	}
	const want = "want whole seconds (30) or a duration with its unit (30s, 1h30m, 250ms)"
	if v == "" {
		return bad(want)
	}
	var d time.Duration
	if allDigits(v) {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n > int64(MaxMaxWait/time.Second) {
			return bad("longer than 100 years")
		}
		d = time.Duration(n) * time.Second
	} else {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			return bad(want)
		}
	}
	switch {
	case d <= 0:
		return bad("not positive (" + want + ")")
	case d > MaxMaxWait:
		return bad("longer than 100 years")
	}
	return d, nil
}

// allDigits reports whether s is non-empty and made of ASCII digits only.
func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
