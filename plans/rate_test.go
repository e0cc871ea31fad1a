package plans_test

import (
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/admitter/admitter/plans"
)

func TestParseRate(t *testing.T) {
	µs := time.Microsecond
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"1/s", time.Second},
		{"10/s", 100 * time.Millisecond},
		{"2/s", 500 * time.Millisecond},
		{"2.5/s", 400 * time.Millisecond},
		{"3/s", 333334 * µs}, // 333333.33… rounded up
		{"7/s", 142858 * µs}, // 142857.14… rounded up
		{"6/s", 166667 * µs}, // 166666.67… rounded up
		{"0.5/m", 2 * time.Minute},
		{"1/m", time.Minute},
		{"60/m", time.Second},
		{"7/m", 8571429 * µs}, // 8571428.57… rounded up
		{"1/h", time.Hour},
		{"3600/h", time.Second},
		{"1/d", 24 * time.Hour},
		{"100000/d", 864 * time.Millisecond},
		{"1000000/s", µs},       // the maximum rate
		{"999999/s", 2 * µs},    // 1.000001µs rounded up
		{"999999.9/s", 2 * µs},  // 1.0000001µs rounded up
		{"1000000.0/s", µs},     // trailing zeros are fine
		{"0001/s", time.Second}, // leading zeros are fine
		{"86400000000/d", µs},   // 1/µs written per day
		{"0.1/d", 240 * time.Hour},
		{"0.000001/s", 1e6 * time.Second},
		{"0.00001/d", 8640000000 * time.Second}, // 274 years, still fine
	} {
		got, err := plans.ParseRate(tc.in)
		if err != nil {
			t.Errorf("ParseRate(%q): %v", tc.in, err)
			continue
		}
		if got != tc.want {
			t.Errorf("ParseRate(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestParseRateErrors(t *testing.T) {
	const syntax = "is not a rate (want N/s, N/m, N/h or N/d with N a positive decimal)"
	for _, tc := range []struct {
		in, want string
	}{
		{"", `"" ` + syntax},
		{"ten/s", `"ten/s" ` + syntax},
		{"5", `"5" ` + syntax},
		{"3/w", `"3/w" ` + syntax},
		{"3/S", `"3/S" ` + syntax},
		{"3/sec", `"3/sec" ` + syntax},
		{"0/s", `"0/s" ` + syntax},
		{"0.0/s", `"0.0/s" ` + syntax},
		{"-1/s", `"-1/s" ` + syntax},
		{"+1/s", `"+1/s" ` + syntax},
		{"1e3/s", `"1e3/s" ` + syntax}, // exponents are rejected
		{"1_000/s", `"1_000/s" ` + syntax},
		{"1/3/s", `"1/3/s" ` + syntax},
		{".5/s", `".5/s" ` + syntax},
		{"5./s", `"5./s" ` + syntax},
		{" 5/s", `" 5/s" ` + syntax},
		{"5 /s", `"5 /s" ` + syntax},
		{"5/ s", `"5/ s" ` + syntax},
		{"inf/s", `"inf/s" ` + syntax},
		{"0x10/s", `"0x10/s" ` + syntax},
		{"/s", `"/s" ` + syntax},
		{"5/", `"5/" ` + syntax},
		{"1000001/s", `"1000001/s" is faster than the maximum rate, 1000000/s`},
		{"1000000.1/s", `"1000000.1/s" is faster than the maximum rate, 1000000/s`},
		{"86400000001/d", `"86400000001/d" is faster than the maximum rate, 1000000/s`},
		{"99999999999999999999999999999999/s", `is faster than the maximum rate`},
		{"0.0000000001/s", `"0.0000000001/s" is too slow: one token takes longer than 285 years`},
		{"0.000009/d", `is too slow`},
		{strings.Repeat("9", 100) + "/x", `…`}, // long input is shortened in the message
	} {
		d, err := plans.ParseRate(tc.in)
		if err == nil {
			t.Errorf("ParseRate(%q) = %v, want an error", tc.in, d)
			continue
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "plans: ") || !strings.Contains(msg, tc.want) {
			t.Errorf("ParseRate(%q) error = %q, want it to contain %q", tc.in, msg, tc.want)
		}
	}
}

// FuzzParseRate checks that ParseRate never panics and that a rate it accepts is the written
// rate rounded up to a whole microsecond, tightly: interval·N ≥ unit > (interval−1µs)·N.
func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"10/s", "3/s", "0.5/m", "100000/d", "1e3/s", "1000001/s", "0/s"} {
		f.Add(s)
	}
	units := map[string]int64{"s": 1e6, "m": 60e6, "h": 3600e6, "d": 86400e6}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := plans.ParseRate(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "plans: ") {
				t.Fatalf("ParseRate(%q) error %q lacks the package prefix", s, err)
			}
			return
		}
		if d < time.Microsecond || d%time.Microsecond != 0 {
			t.Fatalf("ParseRate(%q) = %v, want a whole number of µs ≥ 1µs", s, d)
		}
		num, unit, _ := strings.Cut(s, "/")
		n, ok := new(big.Rat).SetString(num)
		if !ok || n.Sign() <= 0 {
			t.Fatalf("ParseRate(%q) accepted a non-positive or malformed N", s)
		}
		u, ok := units[unit]
		if !ok {
			t.Fatalf("ParseRate(%q) accepted unit %q", s, unit)
		}
		unitR := new(big.Rat).SetInt64(u)
		got := new(big.Rat).Mul(new(big.Rat).SetInt64(d.Microseconds()), n)
		less := new(big.Rat).Mul(new(big.Rat).SetInt64(d.Microseconds()-1), n)
		if got.Cmp(unitR) < 0 || less.Cmp(unitR) >= 0 {
			t.Fatalf("ParseRate(%q) = %v is not the interval rounded up to a µs", s, d)
		}
	})
}
