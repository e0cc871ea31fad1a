package rls

import (
	"math"
	"strconv"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/policy"
	"github.com/admitter/admitter/wire"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// A verdict is one descriptor's answer, computed from the policy's before any of the response
// is written. The zero verdict is OK with no limit: a descriptor that was not decided.
type verdict struct {
	// over: OVER_LIMIT.
	over bool
	// limit is the binding limit of the tenant's plan when the limiter decided and the plan is
	// enforced; nil otherwise (not decided, refused, degraded, shadow mode).
	limit *rlsv3.RateLimitResponse_RateLimit
	// remaining is the whole tokens left (the policy's Remaining, at most math.MaxUint32).
	remaining uint32
	// reset is duration_until_reset, given when limit is set or retry: over the limit, the wait
	// until the weight fits (at most the limiter's horizon) or, fail closed, until asking again;
	// allowed, the time until the binding limit is full again, at most (bucket.Limit.FullIn).
	reset time.Duration
	// retry: over the limit with a time to ask again after (Retry-After); not for a refusal.
	retry bool
	// degraded is the answer's wire.HeaderDegraded (policy.Answer.DegradedAs): fail-open, OK
	// without a decision; local, decided on the replica's copy; "" decided.
	degraded string
	// shadow is the Admit-Shadow value when the plan is in shadow mode, else "".
	shadow string
}

// judge turns the policy's answer into a verdict; now is when it was asked, for the reset of a
// quota.
func judge(a *policy.Answer, now time.Time) verdict {
	switch {
	case a.Code == wire.CodeLimiterUnavailable: // fail closed
		return verdict{over: true, reset: a.Wait, retry: true}
	case a.Refused(): // unknown or invalid tenant, invalid weight, weight over capacity: never
		return verdict{over: true}
	case a.Degraded:
		return verdict{degraded: wire.DegradedFailOpen}
	case a.Paused: // until the pause ends
		return verdict{over: true, reset: a.Wait, retry: true}
	case a.Shadow:
		return verdict{shadow: wire.ShadowValue(a.ShadowWait)}
	case a.Plan == nil || a.LimitIndex < 0 || a.LimitIndex >= len(a.Plan.Limits):
		return verdict{over: !a.Allowed, reset: a.Wait, retry: !a.Allowed} // no limit to name: a limiter bug, not a client's
	}
	l := a.Plan.Limits[a.LimitIndex]
	v := verdict{over: !a.Allowed, limit: rateLimit(l, a.Limit), remaining: uint32(min(max(a.Remaining, 0), math.MaxUint32)), degraded: a.DegradedAs()}
	if v.over {
		v.reset, v.retry = a.Wait, true
	} else {
		v.reset = max(l.FullIn(now, a.Remaining), 0)
	}
	return v
}

// units are the RLS units a span of whole seconds is written in, largest first.
var units = [...]struct {
	unit rlsv3.RateLimitResponse_RateLimit_Unit
	secs int64
}{
	{rlsv3.RateLimitResponse_RateLimit_WEEK, 7 * 24 * 3600},
	{rlsv3.RateLimitResponse_RateLimit_DAY, 24 * 3600},
	{rlsv3.RateLimitResponse_RateLimit_HOUR, 3600},
	{rlsv3.RateLimitResponse_RateLimit_MINUTE, 60},
	{rlsv3.RateLimitResponse_RateLimit_SECOND, 1},
}

// rateLimit is a plan's limit as RLS describes one, named name: requests_per_unit is its
// capacity (a bucket's burst, a window's, quota's or concurrency limit's limit, at most
// math.MaxUint32), per
//
//   - a bucket: the time it takes to refill from empty (capacity × interval), in whole seconds
//     rounded up, as the HTTP API's RateLimit-Policy w; so requests_per_unit / unit is its rate;
//   - a window: its length, in whole seconds rounded up;
//   - a quota: its calendar period (MINUTE, HOUR, DAY, WEEK or MONTH);
//   - a concurrency limit: no unit (UNKNOWN): it limits jobs in flight, not per time.
//
// A span of seconds is written in the largest unit that divides it, with unit_multiplier when it
// is more than one of them (20 per 2 SECOND, 1000 per HOUR, 10 per 3 DAY).
func rateLimit(l bucket.Limit, name string) *rlsv3.RateLimitResponse_RateLimit {
	r := &rlsv3.RateLimitResponse_RateLimit{Name: name, RequestsPerUnit: uint32(min(l.Capacity, math.MaxUint32))}
	switch l.Kind {
	case bucket.KindQuota:
		r.Unit = quotaUnits[l.Period]
		return r
	case bucket.KindConcurrency:
		return r
	}
	secs := wire.Seconds(l.Span(time.Time{})) // a bucket's or a window's span is the same at any time
	for _, u := range units {
		if secs%u.secs == 0 {
			r.Unit = u.unit
			if n := secs / u.secs; n > 1 {
				r.UnitMultiplier = wrapperspb.UInt32(uint32(min(n, math.MaxUint32)))
			}
			break
		}
	}
	return r
}

// quotaUnits are the RLS units of the quotas' periods.
var quotaUnits = [...]rlsv3.RateLimitResponse_RateLimit_Unit{
	bucket.Minute: rlsv3.RateLimitResponse_RateLimit_MINUTE,
	bucket.Hour:   rlsv3.RateLimitResponse_RateLimit_HOUR,
	bucket.Day:    rlsv3.RateLimitResponse_RateLimit_DAY,
	bucket.Week:   rlsv3.RateLimitResponse_RateLimit_WEEK,
	bucket.Month:  rlsv3.RateLimitResponse_RateLimit_MONTH,
}

// respond writes the verdicts, one per descriptor in order, as the response: OVER_LIMIT overall
// when any is. Its response headers are, as envoyproxy/ratelimit sets them, RateLimit-Limit,
// RateLimit-Remaining and RateLimit-Reset of the most binding descriptor with a limit (over the
// limit with the longest wait, else the fewest left; the first on a tie), and beside them
// Retry-After when over the limit with a wait (the longest), Admit-Degraded when a descriptor
// was allowed without a decision, and Admit-Shadow when one was decided under a plan in shadow
// mode (the first one's).
func respond(vs []verdict) *rlsv3.RateLimitResponse {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(vs))}
	head, retry, degraded, shadow := -1, time.Duration(-1), "", ""
	for i := range vs {
		v := &vs[i]
		st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, CurrentLimit: v.limit, LimitRemaining: v.remaining}
		if v.over {
			st.Code, resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT, rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if v.limit != nil || v.retry {
			st.DurationUntilReset = durationpb.New(v.reset)
		}
		resp.Statuses[i] = st
		if v.limit != nil && (head < 0 || v.binds(&vs[head])) {
			head = i
		}
		if v.retry {
			retry = max(retry, v.reset)
		}
		if v.degraded != "" {
			degraded = v.degraded
		}
		if shadow == "" {
			shadow = v.shadow
		}
	}
	add := func(k, v string) {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corev3.HeaderValue{Key: k, Value: v})
	}
	if head >= 0 {
		h := &vs[head]
		add(wire.HeaderRateLimitLimit, strconv.FormatUint(uint64(h.limit.GetRequestsPerUnit()), 10))
		add(wire.HeaderRateLimitRemaining, strconv.FormatUint(uint64(h.remaining), 10))
		add(wire.HeaderRateLimitReset, strconv.FormatInt(ceilSeconds(h.reset), 10))
	}
	if retry >= 0 {
		add(wire.HeaderRetryAfter, strconv.FormatInt(wire.Seconds(retry), 10))
	}
	if degraded != "" {
		add(wire.HeaderDegraded, degraded)
	}
	if shadow != "" {
		add(wire.HeaderShadow, shadow)
	}
	return resp
}

// binds reports whether v binds more than w: v is over the limit and w is not, both are and v
// waits longer, or neither is and v has fewer left.
func (v *verdict) binds(w *verdict) bool {
	switch {
	case v.over != w.over:
		return v.over
	case v.over:
		return v.reset > w.reset
	}
	return v.remaining < w.remaining
}

// ceilSeconds is d in whole seconds rounded up, 0 for d ≤ 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return wire.Seconds(d)
}
