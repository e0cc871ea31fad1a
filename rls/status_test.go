package rls

import (
	"math"
	"testing"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/wire"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestRateLimit: every kind of limit as RLS describes it, in the largest unit that divides its
// span.
func TestRateLimit(t *testing.T) {
	const (
		second  = rlsv3.RateLimitResponse_RateLimit_SECOND
		minute  = rlsv3.RateLimitResponse_RateLimit_MINUTE
		hour    = rlsv3.RateLimitResponse_RateLimit_HOUR
		day     = rlsv3.RateLimitResponse_RateLimit_DAY
		week    = rlsv3.RateLimitResponse_RateLimit_WEEK
		month   = rlsv3.RateLimitResponse_RateLimit_MONTH
		unknown = rlsv3.RateLimitResponse_RateLimit_UNKNOWN
	)
	b := func(capacity int64, interval time.Duration) bucket.Limit {
		return bucket.Limit{Kind: bucket.KindBucket, Capacity: capacity, Interval: interval}
	}
	w := func(limit int64, window time.Duration) bucket.Limit {
		return bucket.Limit{Kind: bucket.KindWindow, Capacity: limit, Window: window}
	}
	q := func(limit int64, p bucket.Period) bucket.Limit {
		return bucket.Limit{Kind: bucket.KindQuota, Capacity: limit, Period: p}
	}
	for _, tc := range []struct {
		name    string
		l       bucket.Limit
		perUnit uint32
		unit    rlsv3.RateLimitResponse_RateLimit_Unit
		mult    uint32
	}{
		{"bucket 20 at 10/s", b(20, 100*time.Millisecond), 20, second, 2},
		{"bucket 5 at 2/s: 2.5s up", b(5, 500*time.Millisecond), 5, second, 3},
		{"bucket 60 at 1/s", b(60, time.Second), 60, minute, 1},
		{"bucket 3 at 1/m", b(3, time.Minute), 3, minute, 3},
		{"bucket 1000 at 1000/h", b(1000, 3600*time.Millisecond), 1000, hour, 1},
		{"bucket 10 at 10/d", b(10, 8640*time.Second), 10, day, 1},
		{"bucket 1 at 1/s", b(1, time.Second), 1, second, 1},
		{"bucket at 1000000/s", b(1_000_000, time.Microsecond), 1_000_000, second, 1},
		{"window 1h", w(1000, time.Hour), 1000, hour, 1},
		{"window 90s", w(10, 90*time.Second), 10, second, 90},
		{"window 7d", w(10, 7*24*time.Hour), 10, week, 1},
		{"window 14d", w(10, 14*24*time.Hour), 10, week, 2},
		{"window 3d", w(10, 3*24*time.Hour), 10, day, 3},
		{"window 500ms: 1s up", w(10, 500*time.Millisecond), 10, second, 1},
		{"window over uint32", w(bucket.MaxLimit, time.Minute), math.MaxUint32, minute, 1},
		{"quota minute", q(5, bucket.Minute), 5, minute, 1},
		{"quota hour", q(5, bucket.Hour), 5, hour, 1},
		{"quota day", q(5, bucket.Day), 5, day, 1},
		{"quota week", q(5, bucket.Week), 5, week, 1},
		{"quota month", q(100000, bucket.Month), 100000, month, 1},
		{"concurrency", bucket.Limit{Kind: bucket.KindConcurrency, Capacity: 4, Lease: time.Minute}, 4, unknown, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := rateLimit(tc.l, "x")
			want := limit("x", tc.perUnit, tc.unit, tc.mult)
			if !sameLimit(got, want) {
				t.Fatalf("%v, want %v", got, want)
			}
		})
	}
}

// TestUntilFull: how long until a limit is full again, by kind.
func TestUntilFull(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Skip("no time zone database:", err)
	}
	now := time.Date(2026, 11, 21, 22, 30, 0, 0, time.UTC) // 23:30 in Paris
	for _, tc := range []struct {
		name      string
		l         bucket.Limit
		remaining int64
		want      time.Duration
	}{
		{"bucket", bucket.Limit{Kind: bucket.KindBucket, Capacity: 5, Interval: 500 * time.Millisecond}, 2, 1500 * time.Millisecond},
		{"bucket full", bucket.Limit{Kind: bucket.KindBucket, Capacity: 5, Interval: 500 * time.Millisecond}, 5, 0},
		{"window", bucket.Limit{Kind: bucket.KindWindow, Capacity: 5, Window: time.Hour}, 2, time.Hour},
		{"quota day UTC", bucket.Limit{Kind: bucket.KindQuota, Capacity: 5, Period: bucket.Day}, 2, 90 * time.Minute},
		{"quota day Paris", bucket.Limit{Kind: bucket.KindQuota, Capacity: 5, Period: bucket.Day, Location: paris}, 2, 30 * time.Minute},
		{"concurrency", bucket.Limit{Kind: bucket.KindConcurrency, Capacity: 5, Lease: 30 * time.Second}, 2, 30 * time.Second},
	} {
		if got := tc.l.FullIn(now, tc.remaining); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestRespond: the overall code, the statuses in order, and the headers of the most binding
// descriptor.
func TestRespond(t *testing.T) {
	a, b := limit("a", 10, rlsv3.RateLimitResponse_RateLimit_SECOND, 1), limit("b", 3, rlsv3.RateLimitResponse_RateLimit_MINUTE, 1)
	for _, tc := range []struct {
		name    string
		vs      []verdict
		over    bool
		headers map[string]string
	}{
		{"nothing decided", []verdict{{}, {}}, false, map[string]string{}},
		{"fewest left", []verdict{{limit: a, remaining: 7, reset: 300 * time.Millisecond}, {}, {limit: b, remaining: 2, reset: 60 * time.Second}, {limit: a, remaining: 2, reset: time.Second}},
			false, map[string]string{wire.HeaderRateLimitLimit: "3", wire.HeaderRateLimitRemaining: "2", wire.HeaderRateLimitReset: "60"}},
		{"over beats fewer left", []verdict{{limit: a, remaining: 0, reset: time.Second}, {over: true, retry: true, limit: b, remaining: 1, reset: 1500 * time.Millisecond}},
			true, map[string]string{wire.HeaderRateLimitLimit: "3", wire.HeaderRateLimitRemaining: "1", wire.HeaderRateLimitReset: "2", wire.HeaderRetryAfter: "2"}},
		{"longest wait", []verdict{{over: true, retry: true, limit: a, reset: 20 * time.Second}, {over: true, retry: true, limit: b, reset: 10 * time.Second}, {over: true, retry: true, reset: 30 * time.Second}},
			true, map[string]string{wire.HeaderRateLimitLimit: "10", wire.HeaderRateLimitRemaining: "0", wire.HeaderRateLimitReset: "20", wire.HeaderRetryAfter: "30"}},
		{"refused only", []verdict{{over: true}, {}}, true, map[string]string{}},
		{"degraded and shadow", []verdict{{degraded: wire.DegradedFailOpen}, {shadow: "delayed 12"}, {shadow: "admitted"}}, false,
			map[string]string{wire.HeaderDegraded: wire.DegradedFailOpen, wire.HeaderShadow: "delayed 12"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := respond(tc.vs)
			if over := resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT; over != tc.over || len(resp.GetStatuses()) != len(tc.vs) {
				t.Fatalf("%v", resp)
			}
			for i, v := range tc.vs {
				st := resp.GetStatuses()[i]
				if (st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT) != v.over || st.GetCode() == rlsv3.RateLimitResponse_UNKNOWN ||
					st.GetCurrentLimit() != v.limit || st.GetLimitRemaining() != v.remaining ||
					(st.GetDurationUntilReset() != nil) != (v.limit != nil || v.retry) || st.GetDurationUntilReset().AsDuration() != v.reset && st.GetDurationUntilReset() != nil {
					t.Errorf("status %d: %v for %+v", i, st, v)
				}
			}
			got := map[string]string{}
			for _, h := range resp.GetResponseHeadersToAdd() {
				got[h.GetKey()] = h.GetValue()
			}
			if len(got) != len(tc.headers) || len(resp.GetResponseHeadersToAdd()) != len(got) {
				t.Fatalf("headers %v, want %v", got, tc.headers)
			}
			for k, v := range tc.headers {
				if got[k] != v {
					t.Errorf("header %s: %q, want %q", k, got[k], v)
				}
			}
		})
	}
}
