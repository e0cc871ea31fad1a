package console

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/admitter/admitter/wire"
)

// A Why answers "how long would a new job of weight w wait, and because of what", from a
// tenant's state (policy.Inspect), the jobs already waiting in its queue and its pause.
type Why struct {
	Weight int64
	// Wait is how long the limits hold a new job of weight Weight (ignoring the queue and the
	// pause); AtMost: Wait is an upper bound (a window's takes leave one by one, and only the
	// time for weight 1 and for the whole window are known).
	Wait   time.Duration
	AtMost bool
	// Limit is the limit that holds it longest ("" when none does); Never: its weight exceeds a
	// limit's capacity, so it can never pass.
	Limit string
	Never bool
	// Sentence says it all in words.
	Sentence string
}

// explain computes the Why of a new job of weight w.
func explain(s wire.TenantState, w int64, waiting uint64, pausedUntil time.Time, now time.Time) Why {
	y := Why{Weight: w}
	var bind *wire.LimitState
	for i := range s.Limits {
		l := &s.Limits[i]
		if w > l.Capacity {
			y.Never, y.Limit = true, l.Limit
			y.Sentence = fmt.Sprintf("A new job of weight %d can never pass limit %s (%s, %s): its weight exceeds %d; it is dead-lettered as %s.",
				w, l.Limit, l.Kind, l.Rule, l.Capacity, wire.CodeWeightOverCapacity)
			return y
		}
		d, atMost := limitWait(l, w)
		if d > y.Wait || (bind == nil && d > 0) {
			y.Wait, y.AtMost, y.Limit, bind = d, atMost, l.Limit, l
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "A new job of weight %d ", w)
	paused := !pausedUntil.IsZero() && pausedUntil.After(now)
	if paused {
		fmt.Fprintf(&b, "waits until the pause ends at %s (in %s), then ", pausedUntil.UTC().Format(time.RFC3339), human(pausedUntil.Sub(now)))
	}
	switch {
	case bind == nil && waiting == 0:
		if paused {
			b.WriteString("goes: every limit has room.")
		} else {
			b.WriteString("goes now: every limit of plan " + s.Plan + " has room.")
		}
	case bind == nil:
		fmt.Fprintf(&b, "waits behind the %d jobs already in its queue, in order: every limit has room for it, but not yet for them all.", waiting)
	default:
		bound := ""
		if y.AtMost {
			bound = "at most "
		}
		fmt.Fprintf(&b, "waits %s%s because of limit %s (%s, %s): %s.", bound, human(y.Wait), bind.Limit, bind.Kind, bind.Rule, limitState(bind))
		if waiting > 0 {
			fmt.Fprintf(&b, " It also waits behind the %d jobs already in its queue, in order.", waiting)
		}
	}
	y.Sentence = b.String()
	return y
}

// limitWait is how long until weight w fits limit l, and whether that is an upper bound.
func limitWait(l *wire.LimitState, w int64) (time.Duration, bool) {
	if l.Tokens >= w {
		return 0, false
	}
	ms := func(f float64) time.Duration { return time.Duration(math.Ceil(f * float64(time.Millisecond))) }
	switch l.Kind {
	case "bucket":
		// The next whole token in NextIn, then one every interval.
		return ms(l.NextInMs) + time.Duration(w-l.Tokens-1)*ms(l.IntervalMs), false
	case "quota":
		return ms(l.NextInMs), false // the period's reset
	case "window":
		if w == 1 {
			return time.Duration(l.WaitMs) * time.Millisecond, false
		}
		return ms(l.FullInMs), true
	}
	return time.Duration(l.WaitMs) * time.Millisecond, true
}

// limitState is a limit's state now, in its kind's terms.
func limitState(l *wire.LimitState) string {
	switch l.Kind {
	case "bucket":
		return fmt.Sprintf("it holds %d of %d tokens, and the next comes in %s", max(l.Tokens, 0), l.Capacity, human(time.Duration(l.NextInMs*float64(time.Millisecond))))
	case "window":
		return fmt.Sprintf("it counts %d of %d in its window, and its oldest take leaves in %s", l.Used, l.Capacity, human(time.Duration(l.NextInMs*float64(time.Millisecond))))
	case "quota":
		at := ""
		if l.ResetsAt != nil {
			at = " at " + l.ResetsAt.UTC().Format(time.RFC3339)
		}
		return fmt.Sprintf("it has used %d of %d this period, which resets%s", l.Used, l.Capacity, at)
	}
	return fmt.Sprintf("%d tokens", l.Tokens)
}

// human writes a duration for people: 0s, 340ms, 1.2s, 4m10s, 2h5m, 3d4h.
func human(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return fmt.Sprintf("%dms", (d+time.Millisecond-1)/time.Millisecond)
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(math.Ceil(d.Seconds())))
	case d < time.Hour:
		d = d.Round(time.Second)
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 48*time.Hour:
		d = d.Round(time.Minute)
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	d = d.Round(time.Hour)
	return fmt.Sprintf("%dd%dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}
