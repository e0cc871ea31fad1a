package plans

import (
	"fmt"
	"math/big"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/admitter/admitter/bucket"
)

// maxMicros is the longest time a limit can span, in µs: bucket.MaxSpan.
const maxMicros = int64(bucket.MaxSpan / time.Microsecond)

// rateSyntaxHint describes the accepted rate syntax in error messages.
const rateSyntaxHint = "want N/s, N/m, N/h or N/d with N a positive decimal"

// ParseRate parses a refill rate written N/s, N/m, N/h or N/d (per second, minute, hour or day)
// and returns the interval per token: the unit divided by N, computed exactly and rounded UP to a
// whole microsecond, so that the limit is never faster than written ("10/s" → 100ms, "3/s" →
// 333.334ms, "100000/d" → 864ms, "0.5/m" → 2m).
//
// N is a positive decimal: ASCII digits with an optional fractional part ("2", "2.5", "0.5").
// Signs, exponents ("1e3/s"), underscores, "inf"/"nan", fractions ("1/3/s") and spaces are
// rejected, so that a rate reads the same to a person as to the parser.
//
// Rates faster than 1000000/s (an interval under 1µs) are an error, as are rates so slow that one
// token takes longer than 2^53-1 µs (about 285 years), the longest interval a limit can hold.
func ParseRate(s string) (time.Duration, error) {
	d, err := parseRate(s)
	if err != nil {
		return 0, fmt.Errorf("plans: %w", err)
	}
	return d, nil
}

// parseRate is ParseRate with errors not yet prefixed by the package name, so that the plans file
// parser can put the file, line and field in front of them.
func parseRate(s string) (time.Duration, error) {
	num, unit, ok := strings.Cut(s, "/")
	var unitMicros int64
	switch unit {
	case "s":
		unitMicros = int64(time.Second / time.Microsecond)
	case "m":
		unitMicros = int64(time.Minute / time.Microsecond)
	case "h":
		unitMicros = int64(time.Hour / time.Microsecond)
	case "d":
		unitMicros = int64(24 * time.Hour / time.Microsecond)
	default:
		ok = false
	}
	if !ok || !isDecimal(num) {
		return 0, fmt.Errorf("%s is not a rate (%s)", quote(s), rateSyntaxHint)
	}
	n, ok := new(big.Rat).SetString(num)
	if !ok || n.Sign() <= 0 {
		return 0, fmt.Errorf("%s is not a rate (%s)", quote(s), rateSyntaxHint)
	}
	// The interval in µs is unit/n, exactly.
	iv := new(big.Rat).SetInt64(unitMicros)
	iv.Quo(iv, n)
	if iv.Cmp(big.NewRat(1, 1)) < 0 {
		return 0, fmt.Errorf("%s is faster than the maximum rate, 1000000/s", quote(s))
	}
	// Round up: q = ⌈num/denom⌉ (both positive).
	q, r := new(big.Int).QuoRem(iv.Num(), iv.Denom(), new(big.Int))
	if r.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	if !q.IsInt64() || q.Int64() > maxMicros {
		return 0, fmt.Errorf("%s is too slow: one token takes longer than 285 years", quote(s))
	}
	return time.Duration(q.Int64()) * time.Microsecond, nil
}

// isDecimal reports whether s is digits with an optional fractional part: "2", "2.5", "0.5".
func isDecimal(s string) bool {
	whole, frac, hasDot := strings.Cut(s, ".")
	return allDigits(whole) && (!hasDot || allDigits(frac))
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

// maxQuoted bounds how much of a user-supplied value an error message repeats.
const maxQuoted = 64

// quote quotes s for an error message, shortening it when it is long.
func quote(s string) string {
	if len(s) <= maxQuoted {
		return fmt.Sprintf("%q", s)
	}
	cut := maxQuoted
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%q… (%d bytes)", s[:cut], len(s))
}
