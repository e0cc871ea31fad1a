package demo

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func testFrame() frame {
	return frame{
		Elapsed: 12*time.Second + 400*time.Millisecond, Duration: 30 * time.Second, Phase: "publishing",
		Rows: []Row{
			{Tenant: "acme", Plan: "free", Published: 612, Admitted: 72, Waiting: 540, JobsLastSecond: 4, TokensLastSecond: 5,
				PlanRate: 5, Limit: "burst", MeanAttempts: 1.9783, P50: 3100 * time.Millisecond, P99: 9870 * time.Millisecond},
			{Tenant: "globex", Plan: "gold", Published: 168, Admitted: 168, JobsLastSecond: 10, TokensLastSecond: 14,
				PlanRate: 20, Limit: "burst", MeanAttempts: 1, P50: 3 * time.Millisecond, P99: 12 * time.Millisecond},
			{Tenant: "initech", Plan: "pro", PlanRate: 1000.0 / 3, Limit: "burst", MeanAttempts: math.NaN(), P50: -1, P99: -1},
		},
	}
}

func TestDemoTableLines(t *testing.T) {
	got := strings.Join(tableLines(testFrame()), "\n")
	want := strings.Join([]string{
		"12s of 30s · publishing",
		"                          last second                    attempts    waited",
		"tenant   plan  published  jobs  tokens  plan/s  waiting  per job    p50    p99",
		"acme     free        612     4       5       5      540     1.98   3.1s   9.8s",
		"globex   gold        168    10      14      20        0     1.00    3ms   12ms",
		"initech  pro           0     0       0  333.33        0        -      -      -",
	}, "\n")
	if got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
}

func TestDemoPlainLines(t *testing.T) {
	lines := plainLines(testFrame())
	if len(lines) != 3 {
		t.Fatalf("%d lines, want one per tenant: %q", len(lines), lines)
	}
	want := "12s acme: published 612, admitted 72 (last 1s: 4 jobs, 5 tokens; plan 5 tokens/s), waiting 540, attempts per job 1.98, waited p50 3.1s p99 9.8s"
	if lines[0] != want {
		t.Errorf("line:\n%s\nwant:\n%s", lines[0], want)
	}
	if !strings.Contains(lines[2], "attempts per job -, waited p50 - p99 -") {
		t.Errorf("a tenant with nothing admitted: %s", lines[2])
	}
}

func TestDemoScreenPlainHasNoEscapes(t *testing.T) {
	var b bytes.Buffer
	s := &screen{w: &b}
	s.show(testFrame())
	s.show(testFrame())
	s.done()
	if strings.Contains(b.String(), "\x1b") {
		t.Errorf("plain output holds an escape code: %q", b.String())
	}
	if n := strings.Count(b.String(), "\n"); n != 6 {
		t.Errorf("%d lines, want 2 frames × 3 tenants", n)
	}
}

func TestDemoScreenTTYRedrawsInPlace(t *testing.T) {
	var b bytes.Buffer
	s := &screen{w: &b, tty: true}
	f := testFrame()
	s.show(f)
	first := b.String()
	lines := tableLines(f)
	if !strings.HasPrefix(first, ansiHideCursor+ansiClearLine+lines[0]+"\n") {
		t.Errorf("first frame starts %q", first[:min(len(first), 60)])
	}
	if strings.Count(first, "\n") != len(lines) || !strings.HasSuffix(first, ansiClearBelow) {
		t.Errorf("first frame: %q", first)
	}
	b.Reset()
	f.Elapsed = 13 * time.Second
	f.Rows = f.Rows[:2] // a shorter frame clears what the longer one left below
	s.show(f)
	second := b.String()
	up := "\r\x1b[6A" // the previous frame had 6 lines
	if !strings.HasPrefix(second, up+ansiClearLine+"13s of 30s · publishing\n") {
		t.Errorf("second frame starts %q, want the cursor moved up 6 lines first", second[:min(len(second), 60)])
	}
	if !strings.HasSuffix(second, ansiClearBelow) || strings.Count(second, "\n") != 5 {
		t.Errorf("second frame: %q", second)
	}
	b.Reset()
	s.show(f)
	if !strings.HasPrefix(b.String(), "\r\x1b[5A") {
		t.Errorf("third frame starts %q, want the cursor moved up 5 lines", b.String()[:10])
	}
	b.Reset()
	s.done()
	if b.String() != ansiShowCursor {
		t.Errorf("done wrote %q, want the cursor shown again", b.String())
	}
}

func TestDemoSummaryLines(t *testing.T) {
	sum := Summary{
		LoadSeconds: 6, SettleSeconds: 1, Published: 300, Admitted: 120, Waiting: 180,
		Tenants: []TenantSummary{
			{Tenant: "acme", Plan: "free", Published: 200, PublishedTokens: 280, Admitted: 30, Waiting: 170, MeanAttempts: 1.9,
				WaitP50Ms: 2100, WaitP99Ms: 5800, WindowSeconds: 5.98, WindowTokens: 34, Limit: "burst", Capacity: 5, Rate: 5,
				Allowance: 34.9, PercentAllowed: 97.42, Busy: true},
			{Tenant: "globex", Plan: "gold", Published: 100, PublishedTokens: 84, Admitted: 90, Waiting: 10, MeanAttempts: 1,
				WaitP50Ms: 0, WaitP99Ms: 2, WindowSeconds: 5.98, WindowTokens: 84, Limit: "burst", Capacity: 20, Rate: 20,
				Allowance: 139.6, PercentAllowed: 60.17},
			{Tenant: "initech", Plan: "pro", WaitP50Ms: -1, WaitP99Ms: -1},
		},
	}
	got := strings.Join(summaryLines(sum, "JOBS"), "\n")
	for _, want := range []string{
		"summary: 6.0s of load, then 1.0s for the pipeline to settle",
		"                                                         attempts    waited",
		"tenant   plan  published  admitted  dead  waiting  lost  per job    p50    p99",
		"acme     free        200        30     0      170     0     1.90   2.1s   5.8s",
		"initech  pro           0         0     0        0     0        -      -      -",
		"total                300       120     0      180     0",
		"acme         34  34.9 = 5 + 5/s × 6.0s (burst)     97.4%  bucket kept busy",
		"globex       84  139.6 = 20 + 20/s × 6.0s (burst)  60.2%  under its plan",
		"initech       -  -                                     -  published nothing",
		"lost: 0 (published − admitted − dead − still in stream JOBS, each looked up)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "\x1b") {
		t.Error("summary holds an escape code")
	}
	sum.Interrupted, sum.Unchecked, sum.Lost = true, 2, 1
	sum.Tenants[0].PublishErrors = 3
	got = strings.Join(summaryLines(sum, "JOBS"), "\n")
	for _, want := range []string{"(interrupted)", "lost: 1 ", "2 jobs could not be looked up", "acme: 3 publishes failed"} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
}

func TestDemoFormatting(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-1: "-", 0: "0ms", 999 * time.Millisecond: "999ms", 4190 * time.Millisecond: "4.1s",
		59999 * time.Millisecond: "59.9s", 65 * time.Second: "1m05s",
	} {
		if got := formatDuration(d); got != want {
			t.Errorf("formatDuration(%v) = %q, want %q", d, got, want)
		}
	}
	for r, want := range map[float64]string{5: "5", 11.574: "11.57", 1.0 / 3: "0.33", 1000000: "1000000"} {
		if got := formatRate(r); got != want {
			t.Errorf("formatRate(%v) = %q, want %q", r, got, want)
		}
	}
	if got := formatElapsed(75*time.Second + 900*time.Millisecond); got != "1m15s" {
		t.Errorf("formatElapsed = %q", got)
	}
}

func TestDemoScreenTTYFitsTheTerminal(t *testing.T) {
	var b bytes.Buffer
	s := &screen{w: &b, tty: true, width: func() int { return 40 }}
	s.show(testFrame())
	s.show(testFrame())
	for _, l := range strings.Split(b.String(), "\n") {
		l = strings.NewReplacer(ansiHideCursor, "", ansiClearLine, "", ansiClearBelow, "", "\r\x1b[6A", "").Replace(l)
		if n := utf8.RuneCountInString(l); n > 39 {
			t.Errorf("a line of %d columns on a terminal of 40 would wrap: %q", n, l)
		}
	}
	if !strings.Contains(b.String(), "\r\x1b[6A") {
		t.Error("the second frame did not go back the 6 lines of the first")
	}
	// Unknown width: 80 columns; the table fits.
	b.Reset()
	s = &screen{w: &b, tty: true, width: func() int { return 0 }}
	s.show(testFrame())
	if !strings.Contains(b.String(), "initech  pro           0     0       0  333.33        0        -      -      -\n") {
		t.Errorf("the table was cut on an 80-column terminal:\n%s", b.String())
	}
}

func TestDemoFitAndGroupRow(t *testing.T) {
	if got := fit("abcdef", 4); got != "abc" {
		t.Errorf("fit = %q", got)
	}
	if got := fit("a×c", 4); got != "a×c" {
		t.Errorf("fit of a short line = %q", got)
	}
	if got := groupRow([]int{3, 4, 4}, []group{{"ab", 1, 2}}); got != "         ab" {
		t.Errorf("groupRow = %q, want the label centred over columns 1 to 2", got)
	}
}
