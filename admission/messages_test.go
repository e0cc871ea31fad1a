package admission

import (
	"slices"
	"testing"
	"time"

	"github.com/admitter/admitter/policy"
	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go"
)

// The contract's names, short.
const (
	HeaderTenant        = wire.HeaderTenant
	HeaderPlan          = wire.HeaderPlan
	HeaderAttempts      = wire.HeaderAttempts
	HeaderDelayMs       = wire.HeaderDelayMs
	HeaderDegraded      = wire.HeaderDegraded
	HeaderError         = wire.HeaderError
	HeaderErrorDetail   = wire.HeaderErrorDetail
	HeaderOriginalMsgID = wire.HeaderOriginalMsgID
)

func TestCarried(t *testing.T) {
	in := nats.Header{
		"X-Trace":      {"t1"},
		"X-Multi":      {"a", "b"},
		"x-lower":      {"v"},
		"Admit-Weight": {"3"},
		"Empty":        {},
	}
	snapshot := cloneHeader(in)
	out := carried(in, 4)
	if !equalHeader(out, in) {
		t.Fatalf("carried(%v) = %v, want an equal copy", in, out)
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
	out2 := carried(in2, 0)
	in2["K"] = append(in2["K"], "w")
	out2["K"] = append(out2["K"], "x")
	if in2["K"][1] != "w" || len(out2["K"]) != 2 || out2["K"][1] != "x" {
		t.Fatalf("copy shares a backing array with the input: in %v, out %v", in2, out2)
	}
}

func TestCarriedMovesMsgID(t *testing.T) {
	in := nats.Header{nats.MsgIdHdr: {"producer-1"}, "X-Trace": {"t"}}
	out := carried(in, 0)
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
	if out := carried(nats.Header{"X": {"y"}}, 0); out[HeaderOriginalMsgID] != nil {
		t.Errorf("copy without Nats-Msg-Id has %s: %v", HeaderOriginalMsgID, out)
	}
	// An empty or nil input gives an empty, usable header.
	for _, h := range []nats.Header{nil, {}} {
		out := carried(h, 2)
		if out == nil || len(out) != 0 {
			t.Errorf("carried(%v) = %v, want an empty non-nil header", h, out)
		}
	}
}

func TestForwardHeader(t *testing.T) {
	in := nats.Header{nats.MsgIdHdr: {"producer-1"}, "X-Trace": {"t"}, "Admit-Weight": {"2"}}
	snapshot := cloneHeader(in)
	h := forwardHeader(carried(in, 6), "admitter:a:JOBS:7", "acme", "gold", 3, 1500*time.Millisecond, policy.Verdict{})
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
		t.Errorf("forwardHeader = %v\nwant %v", h, want)
	}
	if !equalHeader(in, snapshot) {
		t.Errorf("forwardHeader changed its input: %v", in)
	}

	// Degraded; a negative wait (clock skew) is 0; sub-millisecond waits round down.
	h = forwardHeader(carried(nats.Header{}, 6), "id", "t", "p", 1, -time.Second, policy.Verdict{Fate: wire.FateDegraded})
	if h.Get(HeaderDegraded) != "fail-open" || h.Get(HeaderDelayMs) != "0" || h.Get(HeaderAttempts) != "1" {
		t.Errorf("degraded header %v", h)
	}
	if h = forwardHeader(carried(nil, 6), "id", "t", "p", 1, 999*time.Microsecond, policy.Verdict{}); h.Get(HeaderDelayMs) != "0" || h.Get(HeaderDegraded) != "" {
		t.Errorf("header %v: want Admit-Delay-Ms 0 and no Admit-Degraded", h)
	}

	// A producer's own values of the output headers are replaced, not kept beside ours.
	in = nats.Header{HeaderTenant: {"forged"}, HeaderPlan: {"forged"}, HeaderAttempts: {"99"}, HeaderDelayMs: {"99"}, wire.HeaderShadow: {"forged"}}
	h = forwardHeader(carried(in, 6), "id", "acme", "free", 2, 0, policy.Verdict{})
	for k, v := range map[string]string{HeaderTenant: "acme", HeaderPlan: "free", HeaderAttempts: "2", HeaderDelayMs: "0"} {
		if !slices.Equal(h[k], []string{v}) {
			t.Errorf("%s = %q, want [%s]", k, h[k], v)
		}
	}
	if h.Get(wire.HeaderShadow) != "" {
		t.Errorf("a producer's %s kept on a job not in shadow mode: %v", wire.HeaderShadow, h)
	}

	// Shadow mode: what the plan would have done.
	for v, want := range map[policy.Verdict]string{{Shadow: true}: "admitted", {Shadow: true, Wait: 2500 * time.Microsecond}: "delayed 3"} {
		h = forwardHeader(carried(in, 6), "id", "acme", "trial", 1, 0, v)
		if !slices.Equal(h[wire.HeaderShadow], []string{want}) {
			t.Errorf("%+v: %s = %q, want [%s]", v, wire.HeaderShadow, h[wire.HeaderShadow], want)
		}
	}
}

func TestDeadHeader(t *testing.T) {
	in := nats.Header{nats.MsgIdHdr: {"producer-1"}, "X-Multi": {"a", "b"}, "Admit-Weight": {"abc"}}
	snapshot := cloneHeader(in)
	h := deadHeader(carried(in, 3), "admitter:d:JOBS:9", wire.CodeInvalidWeight, `header Admit-Weight is "abc"`)
	want := nats.Header{
		nats.MsgIdHdr:       {"admitter:d:JOBS:9"},
		HeaderOriginalMsgID: {"producer-1"},
		"X-Multi":           {"a", "b"},
		"Admit-Weight":      {"abc"},
		HeaderError:         {string(wire.CodeInvalidWeight)},
		HeaderErrorDetail:   {`header Admit-Weight is "abc"`},
	}
	if !equalHeader(h, want) {
		t.Errorf("deadHeader = %v\nwant %v", h, want)
	}
	if !equalHeader(in, snapshot) {
		t.Errorf("deadHeader changed its input: %v", in)
	}
	// A producer's own Admit-Error is replaced.
	h = deadHeader(carried(nats.Header{HeaderError: {"forged"}, HeaderErrorDetail: {"forged"}}, 3), "id", wire.CodeUnknownTenant, "d")
	if !slices.Equal(h[HeaderError], []string{string(wire.CodeUnknownTenant)}) || !slices.Equal(h[HeaderErrorDetail], []string{"d"}) {
		t.Errorf("deadHeader kept a forged error: %v", h)
	}
	// Nothing of the admitted contract leaks into a dead letter.
	for _, k := range []string{HeaderTenant, HeaderPlan, HeaderAttempts, HeaderDelayMs, HeaderDegraded} {
		if _, ok := h[k]; ok {
			t.Errorf("dead letter has %s: %v", k, h)
		}
	}
}

// TestFromLane: a job read back from its lane keeps what carried gave it, and loses the lane
// copy's own Msg-Id, the Direct Get headers and the Admit-Input-* headers.
func TestFromLane(t *testing.T) {
	moved := laneHeader(carried(nats.Header{nats.MsgIdHdr: {"producer-1"}, "X-Trace": {"t"}, "Admit-Weight": {"2"}}, 5),
		"admitter:w:JOBS:7", "jobs.submit.acme.x", 7, time.Unix(0, 0), 1)
	read := cloneHeader(moved)
	for k, v := range map[string]string{"Nats-Stream": "WAITING", "Nats-Sequence": "3", "Nats-Subject": "jobs.waiting.acme", "Nats-Time-Stamp": "x", "Nats-Num-Pending": "0", "Nats-Last-Sequence": "0"} {
		read.Set(k, v)
	}
	got := fromLane(read, 0)
	want := nats.Header{HeaderOriginalMsgID: {"producer-1"}, "X-Trace": {"t"}, "Admit-Weight": {"2"}, HeaderAttempts: {"1"}}
	if !equalHeader(got, want) {
		t.Errorf("fromLane = %v\nwant %v", got, want)
	}
}

func TestHeaderSize(t *testing.T) {
	for _, tc := range []struct {
		h    nats.Header
		want int
	}{
		{nil, 0},
		{nats.Header{"A": {"b"}}, len("NATS/1.0\r\nA: b\r\n\r\n")},
		{nats.Header{"A": {"b", "cd"}, "Ef": {""}}, len("NATS/1.0\r\nA: b\r\nA: cd\r\nEf: \r\n\r\n")},
	} {
		if got := headerSize(tc.h); got != tc.want {
			t.Errorf("headerSize(%v) = %d, want %d", tc.h, got, tc.want)
		}
	}
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

// TestLeaseHeader: a forward under a plan with a concurrency limit names its lease and the
// lease's length; one without (or forwarded unchecked, or in shadow mode) has neither, whatever
// the producer wrote.
func TestLeaseHeader(t *testing.T) {
	forged := func() nats.Header {
		return nats.Header{wire.HeaderLease: {"999"}, wire.HeaderLeaseLength: {"1"}, "X": {"y"}}
	}
	h := leaseHeader(forged(), 7, 90*time.Second, policy.Verdict{})
	if !slices.Equal(h[wire.HeaderLease], []string{"7"}) || !slices.Equal(h[wire.HeaderLeaseLength], []string{"90000"}) || h.Get("X") != "y" {
		t.Errorf("leased forward: %v, want %s 7 and %s 90000", h, wire.HeaderLease, wire.HeaderLeaseLength)
	}
	for name, tc := range map[string]struct {
		lease time.Duration
		v     policy.Verdict
	}{"no concurrency limit": {0, policy.Verdict{}}, "degraded": {time.Minute, policy.Verdict{Fate: wire.FateDegraded}}, "shadow": {time.Minute, policy.Verdict{Shadow: true}}} {
		if h := leaseHeader(forged(), 7, tc.lease, tc.v); h[wire.HeaderLease] != nil || h[wire.HeaderLeaseLength] != nil {
			t.Errorf("%s: %v, want no lease headers", name, h)
		}
	}
}
