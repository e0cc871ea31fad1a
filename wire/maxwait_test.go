package wire

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

func TestParseMaxWait(t *testing.T) {
	for _, tc := range []struct {
		h    nats.Header
		want time.Duration
	}{
		{nil, 0},
		{nats.Header{"X-Other": {"30s"}, "Admit-Max-Waitx": {"1"}}, 0},
		{nats.Header{"Admit-Max-Wait": {"30"}}, 30 * time.Second},
		{nats.Header{"Admit-Max-Wait": {"030"}}, 30 * time.Second},
		{nats.Header{"Admit-Max-Wait": {"30s"}}, 30 * time.Second},
		{nats.Header{"admit-max-wait": {"1h30m"}}, 90 * time.Minute},
		{nats.Header{"ADMIT-MAX-WAIT": {"250ms"}}, 250 * time.Millisecond},
		{nats.Header{"Admit-Max-Wait": {"1.5h"}}, 90 * time.Minute},
		{nats.Header{"Admit-Max-Wait": {"3153600000"}}, MaxMaxWait},
		{nats.Header{"Admit-Max-Wait": {"876000h"}}, MaxMaxWait},
	} {
		got, err := ParseMaxWait(tc.h)
		if err != nil || got != tc.want {
			t.Errorf("ParseMaxWait(%v) = %v, %v; want %v", tc.h, got, err, tc.want)
		}
	}
}

func TestParseMaxWaitInvalid(t *testing.T) {
	for v, why := range map[string]string{
		"":                     "want whole seconds",
		"0":                    "not positive",
		"0s":                   "not positive",
		"-5s":                  "not positive",
		"-5":                   "want whole seconds",
		"+5":                   "want whole seconds",
		" 5":                   "want whole seconds",
		"5 s":                  "want whole seconds",
		"soon":                 "want whole seconds",
		"1d":                   "want whole seconds", // days are a plan's syntax, not Go's
		"3153600001":           "longer than 100 years",
		"876001h":              "longer than 100 years",
		"99999999999999999999": "longer than 100 years",
	} {
		got, err := ParseMaxWait(nats.Header{"Admit-Max-Wait": {v}})
		if err == nil || got != 0 || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), "Admit-Max-Wait") {
			t.Errorf("ParseMaxWait(%q) = %v, %v; want an error naming the header and saying %q", v, got, err, why)
		}
	}
	if _, err := ParseMaxWait(nats.Header{"Admit-Max-Wait": {"1s"}, "admit-max-wait": {"2s"}}); err == nil || !strings.Contains(err.Error(), "2 times") {
		t.Errorf("two values: %v", err)
	}
}

// FuzzParseMaxWait checks ParseMaxWait's invariants on one header value given under a name of
// varying case, repeated 0 to 3 times.
func FuzzParseMaxWait(f *testing.F) {
	for _, s := range []string{"30", "30s", "1h30m", "250ms", "0", "-1s", "1d", "", "3153600001", "1e3s", "0x10", "1.5h"} {
		f.Add(s, uint8(1), uint8(0))
	}
	f.Add("5s", uint8(2), uint8(1))
	names := []string{"Admit-Max-Wait", "admit-max-wait", "ADMIT-MAX-WAIT"}
	f.Fuzz(func(t *testing.T, v string, repeats, nameCase uint8) {
		n := int(repeats % 4)
		h := nats.Header{"X-Other": {"5s"}}
		for range n {
			h.Add(names[int(nameCase)%len(names)], v)
		}
		d, err := ParseMaxWait(h)
		switch {
		case n == 0:
			if err != nil || d != 0 {
				t.Fatalf("absent header: %v, %v", d, err)
			}
			return
		case n > 1 && err == nil:
			t.Fatalf("%d values %q: %v, nil; want an error", n, v, d)
		}
		if err != nil {
			if d != 0 || !strings.Contains(err.Error(), HeaderMaxWait) {
				t.Fatalf("ParseMaxWait(%q) = %v, %q: want 0 and an error naming the header", v, d, err)
			}
			return
		}
		if d <= 0 || d > MaxMaxWait {
			t.Fatalf("ParseMaxWait(%q) = %v, out of (0, 100 years]", v, d)
		}
		if allDigits(v) {
			if d%time.Second != 0 {
				t.Fatalf("ParseMaxWait(%q) = %v: whole seconds read as something else", v, d)
			}
		} else if want, perr := time.ParseDuration(v); perr != nil || want != d {
			t.Fatalf("ParseMaxWait(%q) = %v; time.ParseDuration says %v, %v", v, d, want, perr)
		}
	})
}
