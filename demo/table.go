package demo

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// frame is one refresh of the live view.
type frame struct {
	Elapsed, Duration time.Duration
	Phase             string // "publishing", "settling", ...
	Rows              []Row
}

// column of a text table.
type column struct {
	head  string
	right bool // align right (numbers)
	min   int  // width at least, so that columns do not shift from one frame to the next
}

// layout pads cells into aligned columns separated by two spaces; trailing spaces are trimmed.
// The first line is the header.
func layout(cols []column, rows [][]string) []string {
	lines, _ := layoutWidths(cols, rows)
	return lines
}

// layoutWidths is layout, also returning the width of each column.
func layoutWidths(cols []column, rows [][]string) ([]string, []int) {
	width := make([]int, len(cols))
	for i, c := range cols {
		width[i] = max(utf8.RuneCountInString(c.head), c.min)
	}
	for _, r := range rows {
		for i, cell := range r {
			width[i] = max(width[i], utf8.RuneCountInString(cell))
		}
	}
	line := func(cells []string) string {
		var b strings.Builder
		for i, cell := range cells {
			if i > 0 {
				b.WriteString("  ")
			}
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(cell))
			if cols[i].right {
				b.WriteString(pad + cell)
			} else {
				b.WriteString(cell + pad)
			}
		}
		return strings.TrimRight(b.String(), " ")
	}
	heads := make([]string, len(cols))
	for i, c := range cols {
		heads[i] = c.head
	}
	out := []string{line(heads)}
	for _, r := range rows {
		out = append(out, line(r))
	}
	return out, width
}

// group labels columns from..to (inclusive) in a row above the header.
type group struct {
	label    string
	from, to int
}

// groupRow centres each group's label over its columns, laid out with widths.
func groupRow(widths []int, groups []group) string {
	pos := func(i int) int { // first rune of column i
		p := 0
		for _, w := range widths[:i] {
			p += w + 2
		}
		return p
	}
	row := []rune(strings.Repeat(" ", pos(len(widths)-1)+widths[len(widths)-1]))
	for _, g := range groups {
		start, end := pos(g.from), pos(g.to)+widths[g.to]
		label := []rune(g.label)
		at := start + max((end-start-len(label))/2, 0)
		for i, r := range label {
			if at+i < len(row) {
				row[at+i] = r
			}
		}
	}
	return strings.TrimRight(string(row), " ")
}

// liveColumns are the live table's columns, liveGroups the labels above them.
var (
	liveColumns = []column{
		{head: "tenant"}, {head: "plan"}, {head: "published", right: true},
		{head: "jobs", right: true}, {head: "tokens", right: true}, {head: "plan/s", right: true},
		{head: "waiting", right: true}, {head: "per job", right: true},
		{head: "p50", right: true, min: 5}, {head: "p99", right: true, min: 5}, // 999ms, 59.9s, 1m05s
	}
	liveGroups = []group{{"last second", 3, 4}, {"attempts", 7, 7}, {"waited", 8, 9}} // attempts per job: the mean Admit-Attempts
)

// tableLines renders f as the terminal table.
func tableLines(f frame) []string {
	rows := make([][]string, 0, len(f.Rows))
	for _, r := range f.Rows {
		rows = append(rows, []string{
			r.Tenant, r.Plan, itoa(r.Published),
			itoa(r.JobsLastSecond), itoa(r.TokensLastSecond), formatRate(r.PlanRate),
			itoa(r.Waiting), formatAttempts(r.MeanAttempts),
			formatDuration(r.P50), formatDuration(r.P99),
		})
	}
	lines, widths := layoutWidths(liveColumns, rows)
	out := []string{fmt.Sprintf("%s of %s · %s", formatElapsed(f.Elapsed), formatElapsed(f.Duration), f.Phase), groupRow(widths, liveGroups)}
	return append(out, lines...)
}

// plainLines renders f as plain lines, one per tenant, for logs and pipes.
func plainLines(f frame) []string {
	out := make([]string, 0, len(f.Rows))
	for _, r := range f.Rows {
		out = append(out, fmt.Sprintf("%s %s: published %d, admitted %d (last 1s: %d jobs, %d tokens; plan %s tokens/s), waiting %d, attempts per job %s, waited p50 %s p99 %s",
			formatElapsed(f.Elapsed), r.Tenant, r.Published, r.Admitted, r.JobsLastSecond, r.TokensLastSecond,
			formatRate(r.PlanRate), r.Waiting, formatAttempts(r.MeanAttempts), formatDuration(r.P50), formatDuration(r.P99)))
	}
	return out
}

// ANSI escape sequences used on a terminal.
const (
	ansiClearLine  = "\x1b[2K"
	ansiClearBelow = "\x1b[J"
	ansiHideCursor = "\x1b[?25l"
	ansiShowCursor = "\x1b[?25h"
)

// screen writes frames: on a terminal each frame replaces the previous one in place; otherwise
// frames are appended as plain lines. It is used by one goroutine.
type screen struct {
	w     io.Writer
	tty   bool
	width func() int // the terminal's columns, 0 when unknown (then 80); nil: 80
	drawn int        // lines of the frame on screen (tty)
}

// fit cuts line to at most cols−1 runes: a line that wrapped would take two rows, and the next
// frame would not go back far enough.
func fit(line string, cols int) string {
	if cols < 2 || utf8.RuneCountInString(line) < cols {
		return line
	}
	return string([]rune(line)[:cols-1])
}

// show draws a frame.
func (s *screen) show(f frame) {
	var b strings.Builder
	if !s.tty {
		for _, l := range plainLines(f) {
			b.WriteString(l)
			b.WriteByte('\n')
		}
		_, _ = io.WriteString(s.w, b.String())
		return
	}
	lines := tableLines(f)
	cols := 80
	if s.width != nil {
		if w := s.width(); w > 0 {
			cols = w
		}
	}
	for i, l := range lines {
		lines[i] = fit(l, cols)
	}
	if s.drawn == 0 {
		b.WriteString(ansiHideCursor)
	} else {
		fmt.Fprintf(&b, "\r\x1b[%dA", s.drawn) // back to the first line of the previous frame
	}
	for _, l := range lines {
		b.WriteString(ansiClearLine)
		b.WriteString(l)
		b.WriteByte('\n')
	}
	b.WriteString(ansiClearBelow)
	s.drawn = len(lines)
	_, _ = io.WriteString(s.w, b.String())
}

// done leaves the last frame on screen and restores the cursor.
func (s *screen) done() {
	if s.tty && s.drawn > 0 {
		_, _ = io.WriteString(s.w, ansiShowCursor)
		s.drawn = 0
	}
}

// printf writes text outside frames (the introduction, the summary).
func (s *screen) printf(format string, args ...any) {
	_, _ = fmt.Fprintf(s.w, format, args...)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// formatAttempts formats a mean Admit-Attempts (attempts per admitted job); "-" when there is
// none.
func formatAttempts(a float64) string {
	if math.IsNaN(a) {
		return "-"
	}
	return strconv.FormatFloat(a, 'f', 2, 64)
}

// formatElapsed formats a run time: 7s, 1m05s.
func formatElapsed(d time.Duration) string {
	d = d.Truncate(time.Second)
	if d < time.Minute {
		return strconv.Itoa(int(d/time.Second)) + "s"
	}
	return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
}

// summaryColumns are the final table's columns, summaryGroups the labels above them.
var (
	summaryColumns = []column{
		{head: "tenant"}, {head: "plan"}, {head: "published", right: true}, {head: "admitted", right: true},
		{head: "dead", right: true}, {head: "waiting", right: true}, {head: "lost", right: true},
		{head: "per job", right: true}, {head: "p50", right: true, min: 5}, {head: "p99", right: true, min: 5},
	}
	summaryGroups = []group{{"attempts", 7, 7}, {"waited", 8, 9}}
)

// summaryLines renders the summary; streamIn names the input stream in the explanation.
func summaryLines(s Summary, streamIn string) []string {
	var out []string
	head := fmt.Sprintf("summary: %.1fs of load", s.LoadSeconds)
	if s.Interrupted {
		head += " (interrupted)"
	}
	out = append(out, head+fmt.Sprintf(", then %.1fs for the pipeline to settle", s.SettleSeconds))
	rows := make([][]string, 0, len(s.Tenants)+1)
	for _, t := range s.Tenants {
		attempts := math.NaN()
		if t.Admitted > 0 {
			attempts = t.MeanAttempts
		}
		rows = append(rows, []string{t.Tenant, t.Plan, itoa(t.Published), itoa(t.Admitted), itoa(t.Dead),
			itoa(t.Waiting), itoa(t.Lost), formatAttempts(attempts),
			formatDuration(time.Duration(t.WaitP50Ms) * time.Millisecond), formatDuration(time.Duration(t.WaitP99Ms) * time.Millisecond)})
	}
	rows = append(rows, []string{"total", "", itoa(s.Published), itoa(s.Admitted), itoa(s.Dead), itoa(s.Waiting), itoa(s.Lost), "", "", ""})
	table, widths := layoutWidths(summaryColumns, rows)
	out = append(out, groupRow(widths, summaryGroups))
	out = append(out, table...)
	out = append(out, "", "pacing: tokens admitted while the tenant published (first job to end of load),",
		"against the most its plan allows in that time: capacity + rate × time")
	prow := make([][]string, 0, len(s.Tenants))
	for _, t := range s.Tenants {
		if t.Allowance == 0 {
			prow = append(prow, []string{t.Tenant, "-", "-", "-", "published nothing"})
			continue
		}
		verdict := "bucket kept busy"
		if !t.Busy {
			verdict = "under its plan"
		}
		prow = append(prow, []string{t.Tenant, itoa(t.WindowTokens),
			fmt.Sprintf("%.1f = %d + %s/s × %.1fs (%s)", t.Allowance, t.Capacity, formatRate(t.Rate), t.WindowSeconds, t.Limit),
			fmt.Sprintf("%.1f%%", t.PercentAllowed), verdict})
	}
	out = append(out, layout([]column{{head: "tenant"}, {head: "tokens", right: true}, {head: "allowance"}, {head: "share", right: true}, {}}, prow)...)
	out = append(out, "")
	var notes []string
	for _, t := range s.Tenants {
		if t.PublishErrors > 0 {
			notes = append(notes, fmt.Sprintf("%s: %d publishes failed (not counted as published)", t.Tenant, t.PublishErrors))
		}
		if t.Unmatched > 0 {
			notes = append(notes, fmt.Sprintf("%s: %d jobs admitted were not published by this run (left queued by an\n  earlier run?); they took tokens from the same bucket, so its share above is low", t.Tenant, t.Unmatched))
		}
	}
	for _, n := range notes {
		out = append(out, "note: "+n)
	}
	lost := fmt.Sprintf("lost: %d (published − admitted − dead − still in stream %s, each looked up)", s.Lost, streamIn)
	if s.Unchecked > 0 {
		lost += fmt.Sprintf("; %d jobs could not be looked up", s.Unchecked)
	}
	return append(out, lost)
}
