package policy

import (
	"fmt"
	"strings"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/wire"
)

// A bound on waiting (issue 32). A job may wait at most its plan's max_wait (bucket.Plan.MaxWait)
// and at most its own Admit-Max-Wait (Job.MaxWait), the smaller winning, counted from its store
// in the input (Job.Stored). Step dead-letters a job as wire.CodeExpired
//
//   - before the limiter call, when its bound has passed, wherever it is in the batch: it is not
//     asked about, so it spends no limit, and the jobs around it keep their order (it leaves its
//     tenant's queue; nothing overtakes anything else);
//   - after the call, at once, when it is the first that waits (or waits behind it, weighing at
//     least as much) and the call's wait is known exactly (the binding limit is a bucket, a
//     window or a quota: their waits are exact, and a heavier job waits at least as long) and ends
//     after its bound does: a spent quota does not keep a job of a bound of an hour until the
//     hour is out. A wait that may end sooner (a concurrency limit's lease, a pool, a handover,
//     the downstream's pause, a paused tenant, a limiter that failed) is waited out up to the
//     bound; the queue wakes at the bound (Verdict.Deadline).
//
// The dead letter says when the job arrived and what it waited for: the last decision's reason
// (Queue.WaitedFor, or this call's).

// exactWait reports whether a wait bound by a limit of reason is known exactly at decision
// time: a bucket's, a window's or a quota's time until the weight fits (it can only come sooner
// if a done message gives weight back, or the plans change).
func exactWait(reason string) bool {
	switch reason {
	case bucket.KindBucket.String(), bucket.KindWindow.String(), bucket.KindQuota.String():
		return true
	}
	return false
}

// WaitedFor says what a job left waiting with verdict v under decision d waits for, as an
// expired job's dead letter gives it (wire.HeaderErrorWaitedFor) and its metric's reason label
// (its first word): "<kind> <limit>" for a limit of the plan ("quota monthly", "bucket 0"),
// "pool <name>", "breaker <pool>", "downstream", "handover", "redeemed", "paused", or "held"
// (the limiter failed, fail mode closed). Empty for a verdict that does not wait.
func (d Decision) WaitedFor(v Verdict) string {
	switch v.Fate {
	case wire.FatePaused:
		return ReasonPaused
	case wire.FateHeld:
		return wire.DecisionHeld
	case wire.FateDelayed:
	default:
		return ""
	}
	switch d.Reason {
	case ReasonHandover, ReasonDownstream, ReasonRedeemed:
		return d.Reason
	case ReasonPool, ReasonBreaker:
		if d.Pool != nil {
			return d.Reason + " " + d.Pool.Name
		}
		return d.Reason
	case "":
		return "unknown"
	}
	return d.Reason + " " + d.Limit
}

// WaitedForReason is the reason label of an expired job's metric: the first word of what it
// waited for (see Decision.WaitedFor), "unknown" when nothing says.
func WaitedForReason(waitedFor string) string {
	r, _, _ := strings.Cut(waitedFor, " ")
	if r == "" {
		return "unknown"
	}
	return r
}

// bound is a job's bound on waiting under plan: the smaller of the plan's max_wait and its own
// Admit-Max-Wait, and which of them it is; 0 when neither applies, its store time is unknown, or
// the plan is in shadow mode (it holds nothing back: it expires nothing either).
func bound(plan *bucket.Plan, j Job) (time.Duration, string) {
	if j.Stored.IsZero() || plan.Shadow {
		return 0, ""
	}
	switch {
	case j.MaxWait > 0 && (plan.MaxWait == 0 || j.MaxWait < plan.MaxWait):
		return j.MaxWait, "its " + wire.HeaderMaxWait
	case plan.MaxWait > 0:
		return plan.MaxWait, "plan " + plan.Name + "'s max_wait"
	}
	return 0, ""
}

// expired is the verdict of a job whose bound passed (at now) before it could be admitted.
func expired(j Job, deadline time.Time, b time.Duration, of, waitedFor string, now time.Time) Verdict {
	if waitedFor == "" {
		waitedFor = "unknown"
	}
	return Verdict{Fate: wire.FateDead, Code: wire.CodeExpired, Deadline: deadline, WaitedFor: waitedFor,
		Detail: fmt.Sprintf("it waited %s from its arrival at %s, beyond its bound of %s (%s); it waited for %s",
			now.Sub(j.Stored).Round(time.Millisecond), stamp(j.Stored), bucket.ShortDuration(b), of, waitedFor)}
}

// expiresAtOnce is the verdict of a job told to wait until now+wait, after its bound ends.
func expiresAtOnce(j Job, deadline time.Time, b time.Duration, of, waitedFor string, wait time.Duration, now time.Time) Verdict {
	return Verdict{Fate: wire.FateDead, Code: wire.CodeExpired, Deadline: deadline, WaitedFor: waitedFor,
		Detail: fmt.Sprintf("it would wait %s more for %s (until %s), beyond its bound of %s (%s) from its arrival at %s, which ends at %s: dead-lettered at once",
			wait.Round(time.Millisecond), waitedFor, stamp(now.Add(wait)), bucket.ShortDuration(b), of, stamp(j.Stored), stamp(deadline))}
}

// stamp is t as the dead letters give times: RFC 3339 in UTC, to the millisecond.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }
