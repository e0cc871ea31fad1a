package wire

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

func TestParsePriority(t *testing.T) {
	for _, tc := range []struct {
		h    nats.Header
		want int
	}{
		{nil, DefaultPriority},
		{nats.Header{"X-Other": {"1"}, "Admit-Priorityx": {"1"}}, DefaultPriority},
		{nats.Header{"Admit-Priority": {"1"}}, 1},
		{nats.Header{"admit-priority": {"2"}}, 2},
		{nats.Header{"Admit-Priority": {"3"}}, 3},
		{nats.Header{"ADMIT-PRIORITY": {"4"}}, 4},
		{nats.Header{"Admit-Priority": {"5"}}, 5},
	} {
		got, err := ParsePriority(tc.h)
		if err != nil || got != tc.want {
			t.Errorf("ParsePriority(%v) = %v, %v; want %v", tc.h, got, err, tc.want)
		}
	}
}

func TestParsePriorityInvalid(t *testing.T) {
	for _, v := range []string{"", "0", "6", "01", "-1", "+1", " 1", "1 ", "high", "1.0", "10", "٣"} {
		got, err := ParsePriority(nats.Header{"Admit-Priority": {v}})
		if err == nil || got != DefaultPriority || !strings.Contains(err.Error(), "Admit-Priority") || !strings.Contains(err.Error(), "want one of 1, 2, 3, 4, 5") {
			t.Errorf("ParsePriority(%q) = %v, %v; want an error naming the header and the values allowed", v, got, err)
		}
	}
	if _, err := ParsePriority(nats.Header{"Admit-Priority": {"1"}, "admit-priority": {"2"}}); err == nil || !strings.Contains(err.Error(), "2 times") {
		t.Errorf("two values: %v", err)
	}
}

// FuzzParsePriority checks ParsePriority's invariants on one header value given under a name of
// varying case, repeated 0 to 3 times.
func FuzzParsePriority(f *testing.F) {
	for _, s := range []string{"1", "3", "5", "0", "6", "", "01", "-1", " 2", "high"} {
		f.Add(s, uint8(1), uint8(0))
	}
	f.Add("2", uint8(2), uint8(1))
	names := []string{"Admit-Priority", "admit-priority", "ADMIT-PRIORITY"}
	f.Fuzz(func(t *testing.T, v string, repeats, nameCase uint8) {
		n := int(repeats % 4)
		h := nats.Header{"X-Other": {"1"}}
		for range n {
			h.Add(names[int(nameCase)%len(names)], v)
		}
		p, err := ParsePriority(h)
		switch {
		case n == 0:
			if err != nil || p != DefaultPriority {
				t.Fatalf("absent header: %v, %v", p, err)
			}
			return
		case n > 1 && err == nil:
			t.Fatalf("%d values %q: %v, nil; want an error", n, v, p)
		case err != nil:
			if p != DefaultPriority || !strings.Contains(err.Error(), HeaderPriority) {
				t.Fatalf("ParsePriority(%q) = %v, %q: want the default and an error naming the header", v, p, err)
			}
			return
		}
		if p < HighestPriority || p > LowestPriority || v != string(rune('0'+p)) {
			t.Fatalf("ParsePriority(%q) = %v: only the digits 1 to 5 read", v, p)
		}
	})
}
