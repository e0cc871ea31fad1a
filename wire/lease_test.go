package wire

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

func TestParseLease(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    nats.Header
		want int64
		err  string
	}{
		{"lease header", nats.Header{"Admit-Lease": {"42"}}, 42, ""},
		{"lease header, any case", nats.Header{"admit-lease": {"7"}}, 7, ""},
		{"lease header wins over the msg id", nats.Header{"Admit-Lease": {"3"}, "Nats-Msg-Id": {"admitter:a:JOBS:9"}}, 3, ""},
		{"the forward's msg id", nats.Header{"Nats-Msg-Id": {"admitter:a:JOBS:9"}}, 9, ""},
		{"largest", nats.Header{"Admit-Lease": {"9007199254740991"}}, MaxLease, ""},
		{"nothing", nats.Header{}, 0, "neither Admit-Lease nor Nats-Msg-Id"},
		{"zero", nats.Header{"Admit-Lease": {"0"}}, 0, `header Admit-Lease is "0"`},
		{"too large", nats.Header{"Admit-Lease": {"9007199254740992"}}, 0, "want an integer from 1 to 2^53-1"},
		{"signed", nats.Header{"Admit-Lease": {"+5"}}, 0, `"+5"`},
		{"twice", nats.Header{"Admit-Lease": {"1", "2"}}, 0, "appears 2 times"},
		{"a dead letter's id", nats.Header{"Nats-Msg-Id": {"admitter:d:JOBS:9"}}, 0, "want the forwarded job's (admitter:a:JOBS:<sequence>)"},
		{"another stream's", nats.Header{"Nats-Msg-Id": {"admitter:a:OTHER:9"}}, 0, "want the forwarded job's"},
		{"a producer's id", nats.Header{"Nats-Msg-Id": {"order-17"}}, 0, `"order-17"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseLease(tc.h, "JOBS")
			if tc.err == "" {
				if err != nil || got != tc.want {
					t.Fatalf("ParseLease = %d, %v; want %d", got, err, tc.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("ParseLease = %d, %v; want an error containing %q", got, err, tc.err)
			}
		})
	}
}

func TestParseCost(t *testing.T) {
	for _, tc := range []struct {
		v    []string
		want int64
		ok   bool
	}{
		{nil, -1, true}, {[]string{"0"}, 0, true}, {[]string{"17"}, 17, true}, {[]string{"1099511627776"}, MaxCost, true},
		{[]string{"1099511627777"}, -1, false}, {[]string{"-1"}, -1, false}, {[]string{"1.5"}, -1, false},
		{[]string{""}, -1, false}, {[]string{"1", "2"}, -1, false},
	} {
		h := nats.Header{}
		if tc.v != nil {
			h["Admit-Cost"] = tc.v
		}
		got, err := ParseCost(h)
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("ParseCost(%q) = %d, %v; want %d, ok %v", tc.v, got, err, tc.want, tc.ok)
		}
	}
}

// FuzzParseLease: any header values parse to a lease in range or an error, never a panic; the
// cost likewise.
func FuzzParseLease(f *testing.F) {
	for _, s := range [][2]string{{"42", ""}, {"", "admitter:a:JOBS:9"}, {"0", "x"}, {"", "admitter:a:JOBS:"}, {"9007199254740992", ""}} {
		f.Add(s[0], s[1], "3")
	}
	f.Fuzz(func(t *testing.T, lease, id, cost string) {
		h := nats.Header{}
		if lease != "" {
			h.Set(HeaderLease, lease)
		}
		if id != "" {
			h.Set(nats.MsgIdHdr, id)
		}
		h.Set(HeaderCost, cost)
		if n, err := ParseLease(h, "JOBS"); err == nil && (n < 1 || n > MaxLease) {
			t.Fatalf("lease %d out of range from %q, %q", n, lease, id)
		}
		if c, err := ParseCost(h); (err == nil && (c < 0 || c > MaxCost)) || (err != nil && c != -1) {
			t.Fatalf("cost %d, %v from %q", c, err, cost)
		}
	})
}

func TestLeaseLength(t *testing.T) {
	for _, tc := range []struct {
		v    []string
		want time.Duration
		err  string
	}{
		{nil, 0, ""}, {[]string{"60000"}, time.Minute, ""}, {[]string{"0"}, 0, ""},
		{[]string{"-1"}, 0, `header Admit-Lease-Ms is "-1"`}, {[]string{"1.5"}, 0, "want an integer"},
		{[]string{"1", "2"}, 0, "appears 2 times"}, {[]string{"9223372036855"}, 0, "want an integer"},
	} {
		h := nats.Header{}
		if tc.v != nil {
			h["Admit-Lease-Ms"] = tc.v
		}
		got, err := ParseLeaseLength(h)
		if tc.err == "" && (err != nil || got != tc.want) || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("ParseLeaseLength(%q) = %v, %v; want %v, error %q", tc.v, got, err, tc.want, tc.err)
		}
	}
	for d, want := range map[time.Duration]string{time.Minute: "60000", 1500 * time.Microsecond: "1", 999 * time.Microsecond: "0"} {
		if got := LeaseLengthValue(d); got != want {
			t.Errorf("LeaseLengthValue(%v) = %q, want %q (whole milliseconds, rounded down)", d, got, want)
		}
	}
}

func TestParseOutcome(t *testing.T) {
	for _, tc := range []struct {
		v    []string
		want string
		err  string
	}{
		{nil, OutcomeOK, ""}, {[]string{"ok"}, OutcomeOK, ""}, {[]string{"failed"}, OutcomeFailed, ""},
		{[]string{"overloaded"}, OutcomeOverloaded, ""},
		{[]string{"OK"}, "", `header Admit-Outcome is "OK", want ok, failed or overloaded`},
		{[]string{""}, "", `header Admit-Outcome is "", want ok, failed or overloaded`},
		{[]string{"timeout"}, "", `"timeout"`},
		{[]string{"ok", "failed"}, "", "appears 2 times"},
	} {
		h := nats.Header{}
		if tc.v != nil {
			h["admit-outcome"] = tc.v
		}
		got, err := ParseOutcome(h)
		if tc.err == "" && (err != nil || got != tc.want) {
			t.Errorf("ParseOutcome(%q) = %q, %v; want %q", tc.v, got, err, tc.want)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("ParseOutcome(%q) = %q, %v; want an error containing %q", tc.v, got, err, tc.err)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 21, 14, 3, 0, 0, time.UTC)
	for _, tc := range []struct {
		after, scope []string
		want         time.Duration
		pool         bool
		err          string
	}{
		{nil, nil, 0, false, ""},
		{[]string{"5"}, nil, 5 * time.Second, false, ""},
		{[]string{"0"}, nil, 0, false, ""},
		{[]string{"30"}, []string{"pool"}, 30 * time.Second, true, ""},
		{[]string{"30"}, []string{"tenant"}, 30 * time.Second, false, ""},
		{[]string{"Sat, 21 Nov 2026 14:03:10 GMT"}, nil, 10 * time.Second, false, ""},
		{[]string{"Sat, 21 Nov 2026 14:02:10 GMT"}, nil, 0, false, ""}, // in the past: no wait
		{[]string{"86400"}, nil, 24 * time.Hour, false, ""},
		{[]string{"86401"}, nil, 0, false, "want at most 86400 seconds"},
		{[]string{"Mon, 23 Nov 2026 14:03:10 GMT"}, nil, 0, false, "more than 24h0m0s from now"},
		{[]string{"1.5"}, nil, 0, false, `header Admit-Retry-After is "1.5", want whole seconds or an HTTP date`},
		{[]string{"-1"}, nil, 0, false, "want whole seconds or an HTTP date"},
		{[]string{"5"}, []string{"everyone"}, 0, false, `header Admit-Retry-Scope is "everyone", want tenant or pool`},
		{nil, []string{"pool"}, 0, false, "header Admit-Retry-Scope without Admit-Retry-After"},
		{[]string{"1", "2"}, nil, 0, false, "appears 2 times"},
	} {
		h := nats.Header{}
		if tc.after != nil {
			h["Admit-Retry-After"] = tc.after
		}
		if tc.scope != nil {
			h["Admit-Retry-Scope"] = tc.scope
		}
		got, pool, err := ParseRetryAfter(h, now)
		if tc.err == "" && (err != nil || got != tc.want || pool != tc.pool) {
			t.Errorf("ParseRetryAfter(%q, %q) = %v, %v, %v; want %v, %v", tc.after, tc.scope, got, pool, err, tc.want, tc.pool)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("ParseRetryAfter(%q, %q) = %v, %v; want an error containing %q", tc.after, tc.scope, got, err, tc.err)
		}
	}
	for d, want := range map[time.Duration]string{0: "0", time.Second: "1", 1500 * time.Millisecond: "2", -time.Second: "0"} {
		if got := RetryAfterValue(d); got != want {
			t.Errorf("RetryAfterValue(%v) = %q, want %q", d, got, want)
		}
	}
}
