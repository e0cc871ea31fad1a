package wire

import (
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

func TestParseWeightValid(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    nats.Header
		want int64
	}{
		{"nil header", nil, 1},
		{"empty header", nats.Header{}, 1},
		{"other headers only", nats.Header{"X-Trace": {"abc"}, "Admit-Weightx": {"9"}, "Weight": {"9"}}, 1},
		{"one", nats.Header{"Admit-Weight": {"1"}}, 1},
		{"three", nats.Header{"Admit-Weight": {"3"}}, 3},
		{"large", nats.Header{"Admit-Weight": {"123456789"}}, 123456789},
		{"2^40", nats.Header{"Admit-Weight": {"1099511627776"}}, 1 << 40},
		{"2^40-1", nats.Header{"Admit-Weight": {"1099511627775"}}, 1<<40 - 1},
		{"lower-case name", nats.Header{"admit-weight": {"3"}}, 3},
		{"upper-case name", nats.Header{"ADMIT-WEIGHT": {"4"}}, 4},
		{"mixed-case name", nats.Header{"aDmIt-WeIgHt": {"5"}}, 5},
		{"with other headers", nats.Header{"Admit-Weight": {"7"}, "X-Trace": {"a", "b"}}, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseWeight(tc.h)
			if err != nil || got != tc.want {
				t.Fatalf("ParseWeight(%v) = %d, %v; want %d, nil", tc.h, got, err, tc.want)
			}
		})
	}
}

func TestParseWeightInvalid(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    nats.Header
		// quoted must appear in the error: the offending value, quoted.
		quoted string
	}{
		{"letters", nats.Header{"Admit-Weight": {"abc"}}, `"abc"`},
		{"zero", nats.Header{"Admit-Weight": {"0"}}, `"0"`},
		{"zeros", nats.Header{"Admit-Weight": {"000"}}, `"000"`},
		{"negative", nats.Header{"Admit-Weight": {"-1"}}, `"-1"`},
		{"plus sign", nats.Header{"Admit-Weight": {"+1"}}, `"+1"`},
		{"fraction", nats.Header{"Admit-Weight": {"1.5"}}, `"1.5"`},
		{"exponent", nats.Header{"Admit-Weight": {"1e3"}}, `"1e3"`},
		{"hex", nats.Header{"Admit-Weight": {"0x10"}}, `"0x10"`},
		{"underscore", nats.Header{"Admit-Weight": {"1_000"}}, `"1_000"`},
		{"leading space", nats.Header{"Admit-Weight": {" 2"}}, `" 2"`},
		{"trailing space", nats.Header{"Admit-Weight": {"2 "}}, `"2 "`},
		{"tab", nats.Header{"Admit-Weight": {"\t2"}}, `"\t2"`},
		{"inner space", nats.Header{"Admit-Weight": {"1 0"}}, `"1 0"`},
		{"empty", nats.Header{"Admit-Weight": {""}}, `""`},
		{"unicode digit", nats.Header{"Admit-Weight": {"٣"}}, `"٣"`},
		{"fullwidth digit", nats.Header{"Admit-Weight": {"３"}}, `"３"`},
		{"2^40+1", nats.Header{"Admit-Weight": {"1099511627777"}}, `"1099511627777"`},
		{"2^41", nats.Header{"Admit-Weight": {"2199023255552"}}, `"2199023255552"`},
		{"14 digits", nats.Header{"Admit-Weight": {"10000000000000"}}, `"10000000000000"`},
		{"int64 max", nats.Header{"Admit-Weight": {"9223372036854775807"}}, `"9223372036854775807"`},
		{"int64 overflow", nats.Header{"Admit-Weight": {"9223372036854775808"}}, `"9223372036854775808"`},
		{"two values", nats.Header{"Admit-Weight": {"1", "2"}}, `"1" "2"`},
		{"two equal values", nats.Header{"Admit-Weight": {"3", "3"}}, `"3" "3"`},
		{"lower-case invalid", nats.Header{"admit-weight": {"x"}}, `"x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := ParseWeight(tc.h)
			if err == nil {
				t.Fatalf("ParseWeight(%v) = %d, nil; want an error", tc.h, w)
			}
			if w != 0 {
				t.Errorf("ParseWeight(%v) returned weight %d with its error, want 0", tc.h, w)
			}
			msg := err.Error()
			if !strings.Contains(msg, "Admit-Weight") {
				t.Errorf("error %q does not name the header Admit-Weight", msg)
			}
			if !strings.Contains(msg, tc.quoted) {
				t.Errorf("error %q does not quote the value as %s", msg, tc.quoted)
			}
			if strings.ContainsAny(msg, "\n\r") {
				t.Errorf("error %q spans lines; it becomes a header value", msg)
			}
		})
	}
}

// Header names differing only in case are one header: a value under each is two values.
func TestParseWeightCaseVariantsCountTogether(t *testing.T) {
	h := nats.Header{"Admit-Weight": {"1"}, "admit-weight": {"2"}}
	w, err := ParseWeight(h)
	if err == nil {
		t.Fatalf("ParseWeight(%v) = %d, nil; want an error for two values", h, w)
	}
	if msg := err.Error(); !strings.Contains(msg, "Admit-Weight") || !strings.Contains(msg, "2 times") ||
		!strings.Contains(msg, `"1"`) || !strings.Contains(msg, `"2"`) {
		t.Errorf("error %q should name the header, the count and both values", msg)
	}
}

func TestMsgID(t *testing.T) {
	for _, tc := range []struct {
		kind   Kind
		stream string
		seq    uint64
		want   string
	}{
		{KindForward, "JOBS", 1, "admitter:a:JOBS:1"},
		{KindDead, "JOBS", 1, "admitter:d:JOBS:1"},
		{KindForward, "OTHER", 18446744073709551615, "admitter:a:OTHER:18446744073709551615"},
		{KindDead, "JOBS", 0, "admitter:d:JOBS:0"},
		{KindLane, "A:B", 7, "admitter:w:A:B:7"},
		{KindReplay, "DEAD", 12, "admitter:r:DEAD:12"},
	} {
		if got := MsgID(tc.kind, tc.stream, tc.seq); got != tc.want {
			t.Errorf("MsgID(%q, %q, %d) = %q, want %q", tc.kind, tc.stream, tc.seq, got, tc.want)
		}
		k, st, seq, ok := ParseMsgID(tc.want)
		if !ok || k != tc.kind || st != tc.stream || seq != tc.seq {
			t.Errorf("ParseMsgID(%q) = %q %q %d %v", tc.want, k, st, seq, ok)
		}
	}
	// Distinct inputs give distinct ids: a forward and a dead letter of one job, two jobs, two
	// streams.
	ids := []string{MsgID(KindForward, "JOBS", 12), MsgID(KindDead, "JOBS", 12), MsgID(KindForward, "JOBS", 1), MsgID(KindForward, "JOBS", 2), MsgID(KindForward, "JOB", 12)}
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Errorf("MsgID gave %q twice", id)
		}
		seen[id] = true
	}
}

// FuzzParseWeight checks ParseWeight's invariants on one header value given under a name of
// varying case, repeated 0 to 3 times.
func FuzzParseWeight(f *testing.F) {
	f.Add("1", uint8(1), uint8(0))
	f.Add("1099511627776", uint8(1), uint8(1))
	f.Add("1099511627777", uint8(1), uint8(2))
	f.Add("-1", uint8(1), uint8(0))
	f.Add("2", uint8(2), uint8(0))
	f.Add("", uint8(0), uint8(0))
	names := []string{"Admit-Weight", "admit-weight", "ADMIT-WEIGHT", "aDMIT-wEIGHT"}
	f.Fuzz(func(t *testing.T, v string, repeats, nameCase uint8) {
		n := int(repeats % 4)
		name := names[int(nameCase)%len(names)]
		h := nats.Header{"X-Other": {"5"}}
		for range n {
			h.Add(name, v)
		}
		w, err := ParseWeight(h)
		switch {
		case n == 0:
			if err != nil || w != 1 {
				t.Fatalf("absent header: ParseWeight = %d, %v; want 1, nil", w, err)
			}
			return
		case n > 1:
			if err == nil {
				t.Fatalf("%d values %q: ParseWeight = %d, nil; want an error", n, v, w)
			}
		}
		if err != nil {
			if !strings.Contains(err.Error(), "Admit-Weight") {
				t.Fatalf("ParseWeight(%q) error %q does not name Admit-Weight", v, err)
			}
			if w != 0 {
				t.Fatalf("ParseWeight(%q) = %d with error %v, want 0", v, w, err)
			}
			return
		}
		if w < 1 || w > 1<<40 {
			t.Fatalf("ParseWeight(%q) = %d, out of [1, 2^40]", v, w)
		}
		// The value is the decimal form of w. Leading zeros are accepted by the current code (up
		// to 13 characters), which the documentation neither allows nor forbids, so they are
		// stripped before comparing.
		if got := strconv.FormatInt(w, 10); got != strings.TrimLeft(v, "0") {
			t.Fatalf("ParseWeight(%q) = %d, which is not the value written", v, w)
		}
	})
}

func TestParseMsgIDRejects(t *testing.T) {
	for _, id := range []string{"", "admitter:", "admitter:a:JOBS", "admitter:x:JOBS:1", "admitter:a:JOBS:", "admitter:a::1",
		"admitter:a:JOBS:01", "admitter:a:JOBS:-1", "admitter:a:JOBS:1x", "other:a:JOBS:1", "admitter:a:JOBS:99999999999999999999"} {
		if k, st, seq, ok := ParseMsgID(id); ok {
			t.Errorf("ParseMsgID(%q) = %q %q %d, want not ok", id, k, st, seq)
		}
	}
}

// FuzzParseMsgID: whatever ParseMsgID accepts, MsgID gives back exactly.
func FuzzParseMsgID(f *testing.F) {
	for _, s := range []string{"admitter:a:JOBS:1", "admitter:w:A:B:7", "admitter:d:J:0", "admitter:a:JOBS:01"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		k, st, seq, ok := ParseMsgID(id)
		if ok && MsgID(k, st, seq) != id {
			t.Fatalf("ParseMsgID(%q) = %q %q %d, which MsgID turns into %q", id, k, st, seq, MsgID(k, st, seq))
		}
	})
}
