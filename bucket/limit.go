package bucket

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// Kind says how a limit counts the weight it admits.
type Kind uint8

const (
	// KindBucket is a token bucket (GCRA): it holds at most Capacity tokens and refills one every
	// Interval; a job takes its weight in tokens. A bucket nobody used is full. The default kind.
	KindBucket Kind = iota
	// KindWindow is a sliding window: in every interval of length Window, at most Capacity weight
	// is admitted. A take leaves the window Window after it was made (see Limit.Grain).
	KindWindow
	// KindQuota is a calendar quota: at most Capacity weight per calendar Period in Location, the
	// count starting afresh at the start of each period.
	KindQuota
	// KindConcurrency counts the weight of the jobs in flight: at most Capacity at once. A job
	// admitted takes a lease of its weight that ends when it is released (the job is done: see
	// Release), or Lease after it was taken or last renewed (see Renew), whichever comes first.
	KindConcurrency
)

var kindNames = [...]string{"bucket", "window", "quota", "concurrency"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Period is the calendar period of a quota.
type Period uint8

const (
	// NoPeriod is the zero value: a limit that is not a quota.
	NoPeriod Period = iota
	// Minute, Hour, Day and Month start at the first instant of their calendar minute, hour, day
	// and month in the quota's location.
	Minute
	Hour
	Day
	// Week is the ISO week: it starts on Monday at 00:00.
	Week
	Month
)

var periodNames = [...]string{"none", "minute", "hour", "day", "week", "month"}

func (p Period) String() string {
	if int(p) < len(periodNames) {
		return periodNames[p]
	}
	return "period(" + strconv.Itoa(int(p)) + ")"
}

// ParsePeriod returns the period called s: minute, hour, day, week or month.
func ParsePeriod(s string) (Period, bool) {
	for p := Minute; p <= Month; p++ {
		if periodNames[p] == s {
			return p, true
		}
	}
	return NoPeriod, false
}

// Window bounds and resolution.
const (
	// MaxWindow is the longest window a limit may have: 100 × 365 days.
	MaxWindow = 100 * 365 * 24 * time.Hour
	// MaxLimit is the largest Capacity of a window or a quota: the scripts add weights in Lua
	// doubles, exact below 2^53.
	MaxLimit = 1_000_000_000_000_000
	// ExactWindowMax is the largest Capacity of a window counted exactly, one entry per instant
	// it admitted at: at most ExactWindowMax entries (16 bytes each) are alive at once.
	ExactWindowMax = 64
	// WindowSlices is how many sub-windows a larger window is counted in: a take is recorded at
	// the end of its sub-window, so it leaves the window up to Window/WindowSlices (rounded up to
	// a microsecond) late, never early, and at most WindowSlices+1 entries are alive at once.
	WindowSlices = 64
	// MaxConcurrency is the largest Capacity of a concurrency limit: the tenant's state holds one
	// lease per job in flight (32 bytes each), read and written by every decision.
	MaxConcurrency = 1000
)

// A Limit is one rule of a plan: a token bucket, a sliding window or a calendar quota (Kind).
// The fields of the other kinds are zero.
type Limit struct {
	// Name identifies the limit in results, logs and its stored state; empty names are reported
	// by index.
	Name string
	// Kind says how the limit counts (default KindBucket).
	Kind Kind
	// Capacity is the most weight the limit lets through at once: a bucket's burst in tokens (≥
	// 1), a window's or a quota's limit (1 to MaxLimit). A job heavier than it can never pass.
	Capacity int64
	// Interval (bucket) is the time to refill one token, a whole number of microseconds (≥ 1µs):
	// the written rate rounded so that the limit is never faster than the plan says.
	Interval time.Duration
	// Rate (bucket) is the rate as written in the plans file ("10/s"), for display.
	Rate string
	// Window (window) is the window's length, a whole number of microseconds, 1µs to MaxWindow.
	Window time.Duration
	// Period (quota) is the calendar period.
	Period Period
	// Location (quota) is the time zone whose calendar the periods follow; nil means UTC.
	Location *time.Location
	// Lease (concurrency) is how long a job holds its lease unless released or renewed, a whole
	// number of microseconds, 1µs to MaxWindow.
	Lease time.Duration
}

// PerSecond is the limit's long-run rate in weight per second: a bucket's refill rate, a
// window's Capacity per Window, a quota's Capacity per period (a month taken as 30 days).
func (l Limit) PerSecond() float64 {
	switch l.Kind {
	case KindWindow:
		return float64(l.Capacity) / l.Window.Seconds()
	case KindQuota:
		return float64(l.Capacity) / l.Period.nominal().Seconds()
	case KindConcurrency:
		return float64(l.Capacity) / l.Lease.Seconds() // jobs that each hold their lease to its end
	}
	return float64(time.Second) / float64(l.Interval)
}

// Span is the time over which the limit counts its Capacity, at t: a bucket's refill from empty
// (Capacity × Interval), a window's length, the length of the quota's period holding t (a
// month's days, a day of 23 or 25 hours across a daylight-saving change), a concurrency limit's
// lease. It is the window of the limit's RateLimit-Policy header.
func (l Limit) Span(t time.Time) time.Duration {
	switch l.Kind {
	case KindWindow:
		return l.Window
	case KindQuota:
		start, end := l.PeriodBounds(t)
		return end.Sub(start)
	case KindConcurrency:
		return l.Lease
	}
	if l.Interval > 0 && l.Capacity <= int64(math.MaxInt64/l.Interval) {
		return time.Duration(l.Capacity) * l.Interval
	}
	return time.Duration(math.MaxInt64)
}

// FullIn bounds, at t, how long until the limit holding remaining lets its whole Capacity
// through again: exact for a bucket ((Capacity − remaining) × Interval) and a quota (its
// period's end), and for a window and a concurrency limit their length and lease (what is
// counted now has left by then). It is the t of the RateLimit header of an allowed request.
func (l Limit) FullIn(t time.Time, remaining int64) time.Duration {
	switch l.Kind {
	case KindWindow:
		return l.Window
	case KindQuota:
		_, end := l.PeriodBounds(t)
		return end.Sub(t)
	case KindConcurrency:
		return l.Lease
	}
	return time.Duration(max(l.Capacity-remaining, 0)) * l.Interval
}

// nominal is the period's usual length.
func (p Period) nominal() time.Duration {
	switch p {
	case Minute:
		return time.Minute
	case Hour:
		return time.Hour
	case Day:
		return 24 * time.Hour
	case Week:
		return 7 * 24 * time.Hour
	}
	return 30 * 24 * time.Hour
}

// Grain is the resolution at which a window counts: 1µs (exact) when Capacity is at most
// ExactWindowMax, else Window/WindowSlices rounded up to a microsecond. A take at time t is
// recorded at the end of its grain, ⌈t/Grain⌉·Grain, and leaves the window Window later. Zero for
// the other kinds.
func (l Limit) Grain() time.Duration {
	if l.Kind != KindWindow {
		return 0
	}
	if l.Capacity <= ExactWindowMax {
		return time.Microsecond
	}
	us := l.Window.Microseconds()
	return time.Duration((us+WindowSlices-1)/WindowSlices) * time.Microsecond
}

// location is the quota's location, UTC when unset.
func (l *Limit) location() *time.Location {
	if l.Location == nil {
		return time.UTC
	}
	return l.Location
}

// PeriodBounds returns the calendar period of a quota that holds t: [start, end). A period
// starts when the wall clock of the limit's location enters a new calendar minute, hour, day,
// ISO week (Monday) or month. Across a daylight-saving change: a day, week or month is as long
// as the clock makes it (23 or 25 hours for a day); when the clock skips the start of a period
// (a gap at midnight) the period starts when the clock jumps; a minute or an hour never lasts
// longer than one (a repeated hour is two periods, a shortened one lasts less). Meaningless for
// other kinds.
func (l Limit) PeriodBounds(t time.Time) (start, end time.Time) {
	return l.periodStart(t), l.periodEndAt(t)
}

// periodStart is the start of the period holding t: the wall clock's start of the period, unless
// the clock's offset changed since then, when the change itself may be the start.
func (l *Limit) periodStart(t time.Time) time.Time {
	loc := l.location()
	for {
		t = t.In(loc)
		w := wall(t)
		x := t.Add(-w.Sub(floor(w, l.Period)))
		z, _ := t.ZoneBounds()
		if z.IsZero() || x.After(z) {
			return x
		}
		before := z.Add(-time.Nanosecond)
		if l.periodLabel(before) != l.periodLabel(t) {
			return z
		}
		t = before // the period began under the previous offset
	}
}

// periodEndAt is the end of the period holding t, found the same way.
func (l *Limit) periodEndAt(t time.Time) time.Time {
	loc := l.location()
	for {
		t = t.In(loc)
		w := wall(t)
		y := t.Add(nextPeriod(floor(w, l.Period), l.Period).Sub(w))
		_, z := t.ZoneBounds()
		if z.IsZero() || y.Before(z) {
			return y
		}
		if l.periodLabel(z) != l.periodLabel(t) {
			return z
		}
		t = z // the period goes on under the next offset
	}
}

// periodEnd is periodEndAt in µs.
func (l *Limit) periodEnd(us int64) int64 { return l.periodEndAt(time.UnixMicro(us)).UnixMicro() }

// label names the period holding an instant: the wall-clock start of its period, and for a
// minute or an hour the clock's offset too (01:30 before and after a clock goes back are
// different hours).
type label struct {
	start  time.Time
	offset int
}

func (l *Limit) periodLabel(t time.Time) label {
	t = t.In(l.location())
	lb := label{start: floor(wall(t), l.Period)}
	if l.Period == Minute || l.Period == Hour {
		_, lb.offset = t.Zone()
	}
	return lb
}

// wall is t's wall-clock reading in its location, as a UTC time: wall-clock arithmetic without
// daylight saving.
func wall(t time.Time) time.Time {
	y, mo, d := t.Date()
	return time.Date(y, mo, d, t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
}

// floor is the wall-clock start of the period p holding the wall-clock time w.
func floor(w time.Time, p Period) time.Time {
	y, mo, d := w.Date()
	switch p {
	case Minute:
		return w.Truncate(time.Minute)
	case Hour:
		return w.Truncate(time.Hour)
	case Week:
		d -= (int(w.Weekday()) + 6) % 7 // back to Monday
	case Month:
		d = 1
	}
	return time.Date(y, mo, d, 0, 0, 0, 0, time.UTC)
}

// nextPeriod is the wall-clock start of the period after the one starting at f.
func nextPeriod(f time.Time, p Period) time.Time {
	switch p {
	case Minute:
		return f.Add(time.Minute)
	case Hour:
		return f.Add(time.Hour)
	case Day:
		return f.AddDate(0, 0, 1)
	case Week:
		return f.AddDate(0, 0, 7)
	}
	return f.AddDate(0, 1, 0)
}

// describe is the limit's rule in words, for people.
func (l Limit) describe() string {
	switch l.Kind {
	case KindWindow:
		res := "exact"
		if g := l.Grain(); g > time.Microsecond {
			res = fmt.Sprintf("counted in sub-windows of %v: a take leaves up to %v late", g, g)
		}
		return fmt.Sprintf("window, at most %d in any %s (%s)", l.Capacity, ShortDuration(l.Window), res)
	case KindQuota:
		return fmt.Sprintf("quota, %d per calendar %s (%s), reset at its start", l.Capacity, l.Period, l.location())
	case KindConcurrency:
		return fmt.Sprintf("concurrency, at most %d in flight, each for at most %s unless renewed", l.Capacity, ShortDuration(l.Lease))
	}
	return fmt.Sprintf("capacity %d, rate %s = 1 token every %v (%s tokens/s)", l.Capacity, l.Rate, l.Interval, plansPerSecond(l.PerSecond()))
}

// Rule is the limit in a few words: "20 at 10/s", "1000 in any 1h", "100000 per month (UTC)",
// "5 running, lease 10m".
func (l Limit) Rule() string {
	switch l.Kind {
	case KindWindow:
		return fmt.Sprintf("%d in any %s", l.Capacity, ShortDuration(l.Window))
	case KindQuota:
		return fmt.Sprintf("%d per %s (%s)", l.Capacity, l.Period, l.location())
	case KindConcurrency:
		return fmt.Sprintf("%d running, lease %s", l.Capacity, ShortDuration(l.Lease))
	}
	return fmt.Sprintf("%d at %s", l.Capacity, l.Rate)
}

// ShortDuration formats d compactly: whole days as "3d", otherwise as time.Duration does
// without zero units ("1h", "1h30m", "90s" as "1m30s", "1.5s").
func ShortDuration(d time.Duration) string {
	const day = 24 * time.Hour
	if d > 0 && d%day == 0 {
		return strconv.FormatInt(int64(d/day), 10) + "d"
	}
	s := d.String()
	if len(s) > 2 && s[len(s)-2:] == "0s" && (s[len(s)-3] == 'm' || s[len(s)-3] == 'h') {
		s = s[:len(s)-2]
	}
	if len(s) > 2 && s[len(s)-2:] == "0m" && s[len(s)-3] == 'h' {
		s = s[:len(s)-2]
	}
	return s
}
