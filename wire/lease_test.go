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
