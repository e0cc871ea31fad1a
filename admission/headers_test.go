package admission

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

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
		kind, stream string
		seq          uint64
		want         string
	}{
		{"a", "JOBS", 1, "admitter:a:JOBS:1"},
		{"d", "JOBS", 1, "admitter:d:JOBS:1"},
		{"a", "OTHER", 18446744073709551615, "admitter:a:OTHER:18446744073709551615"},
		{"d", "JOBS", 0, "admitter:d:JOBS:0"},
	} {
		if got := msgID(tc.kind, tc.stream, tc.seq); got != tc.want {
			t.Errorf("msgID(%q, %q, %d) = %q, want %q", tc.kind, tc.stream, tc.seq, got, tc.want)
		}
	}
	// Distinct inputs give distinct ids: a forward and a dead letter of one job, two jobs, two
	// streams.
	ids := []string{msgID("a", "JOBS", 12), msgID("d", "JOBS", 12), msgID("a", "JOBS", 1), msgID("a", "JOBS", 2), msgID("a", "JOB", 12)}
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Errorf("msgID gave %q twice", id)
		}
		seen[id] = true
	}
}

func TestCopyHeader(t *testing.T) {
	in := nats.Header{
		"X-Trace":      {"t1"},
		"X-Multi":      {"a", "b"},
		"x-lower":      {"v"},
		"Admit-Weight": {"3"},
		"Empty":        {},
	}
	snapshot := cloneHeader(in)
	out := copyHeader(in, 4)
	if !equalHeader(out, in) {
		t.Fatalf("copyHeader(%v) = %v, want an equal copy", in, out)
	}
	// Writing through the copy's slices must not touch the input, and the other way round.
	out["X-Multi"][0] = "changed"
	out["X-Trace"] = append(out["X-Trace"], "added")
	out.Set("X-New", "n")
	if !equalHeader(in, snapshot) {
		t.Fatalf("changing the copy changed the input: %v, was %v", in, snapshot)
	}
	in["X-Multi"][1] = "changed-in"
	if out["X-Multi"][1] != "b" {
		t.Fatalf("changing the input changed the copy: %v", out)
	}
	// Appending to an input slice with spare capacity must not show in the copy either.
	in2 := nats.Header{"K": make([]string, 1, 4)}
	in2["K"][0] = "v"
	out2 := copyHeader(in2, 0)
	in2["K"] = append(in2["K"], "w")
	out2["K"] = append(out2["K"], "x")
	if in2["K"][1] != "w" || len(out2["K"]) != 2 || out2["K"][1] != "x" {
		t.Fatalf("copy shares a backing array with the input: in %v, out %v", in2, out2)
	}
}

func TestCopyHeaderMovesMsgID(t *testing.T) {
	in := nats.Header{nats.MsgIdHdr: {"producer-1"}, "X-Trace": {"t"}}
	out := copyHeader(in, 0)
	if _, ok := out[nats.MsgIdHdr]; ok {
		t.Errorf("copy keeps %s: %v", nats.MsgIdHdr, out)
	}
	if got := out[HeaderOriginalMsgID]; !slices.Equal(got, []string{"producer-1"}) {
		t.Errorf("%s = %q, want [producer-1]", HeaderOriginalMsgID, got)
	}
	if out.Get("X-Trace") != "t" {
		t.Errorf("X-Trace lost: %v", out)
	}
	if !slices.Equal(in[nats.MsgIdHdr], []string{"producer-1"}) || len(in) != 2 {
		t.Errorf("input changed: %v", in)
	}
	out[HeaderOriginalMsgID][0] = "changed"
	if in.Get(nats.MsgIdHdr) != "producer-1" {
		t.Errorf("the moved id aliases the input: %v", in)
	}
	// Without a producer id there is no Admit-Original-Msg-Id.
	if out := copyHeader(nats.Header{"X": {"y"}}, 0); out[HeaderOriginalMsgID] != nil {
		t.Errorf("copy without Nats-Msg-Id has %s: %v", HeaderOriginalMsgID, out)
	}
	// An empty or nil input gives an empty, usable header.
	for _, h := range []nats.Header{nil, {}} {
		out := copyHeader(h, 2)
		if out == nil || len(out) != 0 {
			t.Errorf("copyHeader(%v) = %v, want an empty non-nil header", h, out)
		}
	}
}

func TestAdmittedHeader(t *testing.T) {
	in := nats.Header{nats.MsgIdHdr: {"producer-1"}, "X-Trace": {"t"}, "Admit-Weight": {"2"}}
	snapshot := cloneHeader(in)
	h := admittedHeader(in, "admitter:a:JOBS:7", "acme", "gold", 3, 1500*time.Millisecond, false)
	want := nats.Header{
		nats.MsgIdHdr:       {"admitter:a:JOBS:7"},
		HeaderOriginalMsgID: {"producer-1"},
		"X-Trace":           {"t"},
		"Admit-Weight":      {"2"},
		HeaderTenant:        {"acme"},
		HeaderPlan:          {"gold"},
		HeaderAttempts:      {"3"},
		HeaderDelayMs:       {"1500"},
	}
	if !equalHeader(h, want) {
		t.Errorf("admittedHeader = %v\nwant %v", h, want)
	}
	if !equalHeader(in, snapshot) {
		t.Errorf("admittedHeader changed its input: %v", in)
	}

	// Degraded; a negative wait (clock skew) is 0; sub-millisecond waits round down.
	h = admittedHeader(nats.Header{}, "id", "t", "p", 1, -time.Second, true)
	if h.Get(HeaderDegraded) != "fail-open" || h.Get(HeaderDelayMs) != "0" || h.Get(HeaderAttempts) != "1" {
		t.Errorf("degraded header %v", h)
	}
	if h = admittedHeader(nil, "id", "t", "p", 1, 999*time.Microsecond, false); h.Get(HeaderDelayMs) != "0" || h.Get(HeaderDegraded) != "" {
		t.Errorf("header %v: want Admit-Delay-Ms 0 and no Admit-Degraded", h)
	}

	// A producer's own values of the output headers are replaced, not kept beside ours.
	in = nats.Header{HeaderTenant: {"forged"}, HeaderPlan: {"forged"}, HeaderAttempts: {"99"}, HeaderDelayMs: {"99"}}
	h = admittedHeader(in, "id", "acme", "free", 2, 0, false)
	for k, v := range map[string]string{HeaderTenant: "acme", HeaderPlan: "free", HeaderAttempts: "2", HeaderDelayMs: "0"} {
		if !slices.Equal(h[k], []string{v}) {
			t.Errorf("%s = %q, want [%s]", k, h[k], v)
		}
	}
}

func TestDeadHeader(t *testing.T) {
	in := nats.Header{nats.MsgIdHdr: {"producer-1"}, "X-Multi": {"a", "b"}, "Admit-Weight": {"abc"}}
	snapshot := cloneHeader(in)
	h := deadHeader(in, "admitter:d:JOBS:9", CodeInvalidWeight, `header Admit-Weight is "abc"`)
	want := nats.Header{
		nats.MsgIdHdr:       {"admitter:d:JOBS:9"},
		HeaderOriginalMsgID: {"producer-1"},
		"X-Multi":           {"a", "b"},
		"Admit-Weight":      {"abc"},
		HeaderError:         {CodeInvalidWeight},
		HeaderErrorDetail:   {`header Admit-Weight is "abc"`},
	}
	if !equalHeader(h, want) {
		t.Errorf("deadHeader = %v\nwant %v", h, want)
	}
	if !equalHeader(in, snapshot) {
		t.Errorf("deadHeader changed its input: %v", in)
	}
	// A producer's own Admit-Error is replaced.
	h = deadHeader(nats.Header{HeaderError: {"forged"}, HeaderErrorDetail: {"forged"}}, "id", CodeUnknownTenant, "d")
	if !slices.Equal(h[HeaderError], []string{CodeUnknownTenant}) || !slices.Equal(h[HeaderErrorDetail], []string{"d"}) {
		t.Errorf("deadHeader kept a forged error: %v", h)
	}
	// Nothing of the admitted contract leaks into a dead letter.
	for _, k := range []string{HeaderTenant, HeaderPlan, HeaderAttempts, HeaderDelayMs, HeaderDegraded} {
		if _, ok := h[k]; ok {
			t.Errorf("dead letter has %s: %v", k, h)
		}
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

func cloneHeader(h nats.Header) nats.Header {
	c := make(nats.Header, len(h))
	for k, v := range h {
		c[k] = slices.Clone(v)
	}
	return c
}

func equalHeader(a, b nats.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || !slices.Equal(v, w) {
			return false
		}
	}
	return true
}
