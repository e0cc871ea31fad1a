package admission

import (
	"strings"
	"testing"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/nats-io/nats.go"
)

func TestParseReport(t *testing.T) {
	now := time.Date(2026, 11, 21, 14, 3, 0, 0, time.UTC)
	for _, tc := range []struct {
		h    nats.Header
		want bucket.Report
		err  string
	}{
		{nats.Header{}, bucket.Report{}, ""},
		{nats.Header{"Admit-Outcome": {"overloaded"}, "Admit-Retry-After": {"5"}},
			bucket.Report{Outcome: bucket.DownstreamOverloaded, RetryAfter: 5 * time.Second}, ""},
		{nats.Header{"Admit-Retry-After": {"Sat, 21 Nov 2026 14:03:30 GMT"}, "Admit-Retry-Scope": {"pool"}},
			bucket.Report{RetryAfter: 30 * time.Second, PoolScope: true}, ""},
		{nats.Header{"Admit-Outcome": {"failed"}}, bucket.Report{Outcome: bucket.DownstreamFailed}, ""},
		{nats.Header{"Admit-Outcome": {"slow"}}, bucket.Report{}, `header Admit-Outcome is "slow"`},
		{nats.Header{"Admit-Retry-After": {"soon"}}, bucket.Report{}, `header Admit-Retry-After is "soon"`},
	} {
		got, err := parseReport(tc.h, now)
		if tc.err == "" && (err != nil || got != tc.want) {
			t.Errorf("parseReport(%v) = %+v, %v; want %+v", tc.h, got, err, tc.want)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("parseReport(%v) = %+v, %v; want an error containing %q", tc.h, got, err, tc.err)
		}
	}
}
