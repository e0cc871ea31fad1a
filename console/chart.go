package console

import (
	"fmt"
	"html/template"
	"math"
	"strings"
	"time"

	"github.com/admitter/admitter/activity"
	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/wire"
)

// A chart is the overview's series drawn as an inline SVG, rendered on the server (it needs no
// script; the page's script swaps in a fresh one). Each series has a colour and a dash pattern
// of its own, and the figure's caption and data table say the same in words.
type chart struct {
	SVG     template.HTML
	Summary string
}

// series drawn, in order: what, colour, dash.
var chartSeries = []struct {
	kind        wire.Fate
	name, color string
	dash        string
}{
	{wire.FateAdmitted, "admitted", "#1a7f37", ""},
	{wire.FateDelayed, "delayed", "#9a6700", "6 3"},
	{wire.FateDead, "dead", "#cf222e", "2 3"},
	{wire.FateDegraded, "degraded", "#8250df", "10 3 2 3"},
}

const (
	chartW, chartH         = 720, 200
	padL, padR, padT, padB = 44, 8, 8, 22
)

// drawChart draws secs (one point per second, oldest first).
func drawChart(secs []activity.Second) chart {
	top := int64(2)
	for _, s := range secs {
		for _, cs := range chartSeries {
			top = max(top, s.Jobs[cs.kind])
		}
	}
	top = niceCeil(top)
	n := max(len(secs)-1, 1)
	x := func(i int) float64 { return padL + float64(i)*float64(chartW-padL-padR)/float64(n) }
	y := func(v int64) float64 { return padT + float64(chartH-padT-padB)*(1-float64(v)/float64(top)) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg viewBox="0 0 %d %d" width="100%%" preserveAspectRatio="none" aria-hidden="true" focusable="false" class="chart">`, chartW, chartH)
	for _, v := range []int64{0, top / 2, top} {
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" class="grid"/><text x="%d" y="%.1f" class="axis" text-anchor="end">%d/s</text>`,
			padL, chartW-padR, y(v), y(v), padL-4, y(v)+4, v)
	}
	if len(secs) > 1 {
		span := len(secs)
		for m := 0; m*60 <= span; m++ {
			i := span - 1 - m*60
			if i < 0 {
				break
			}
			label := "now"
			if m > 0 {
				label = fmt.Sprintf("−%dm", m)
			}
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" class="axis" text-anchor="middle">%s</text>`, x(i), chartH-6, label)
		}
	}
	for _, cs := range chartSeries {
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.6" stroke-dasharray="%s" points="`, cs.color, cs.dash)
		for i, s := range secs {
			fmt.Fprintf(&b, "%.0f,%.1f ", x(i), y(s.Jobs[cs.kind]))
		}
		b.WriteString(`"/>`)
	}
	b.WriteString(`</svg>`)
	var sum strings.Builder
	last := min(10, len(secs))
	for i, cs := range chartSeries {
		var t int64
		for _, s := range secs[len(secs)-last:] {
			t += s.Jobs[cs.kind]
		}
		if i > 0 {
			sum.WriteString(", ")
		}
		fmt.Fprintf(&sum, "%s %.1f/s", cs.name, float64(t)/math.Max(float64(last), 1))
	}
	return chart{SVG: template.HTML(b.String()), Summary: sum.String() + fmt.Sprintf(" over the last %d seconds; the chart spans %d seconds, up to %d/s", last, len(secs), top)}
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v int64) int64 {
	p := int64(1)
	for {
		for _, m := range []int64{1, 2, 5} {
			if m*p >= v {
				return m * p
			}
		}
		p *= 10
	}
}

// drawPoolChart draws an adaptive pool's states seen at (oldest first) over the 5 minutes
// before now: its limit in force and weight in flight on the left axis, the time per job on
// the right one.
func drawPoolChart(at []time.Time, states []bucket.PoolState, now time.Time) chart {
	const span = 5 * time.Minute
	top, topMs := int64(2), int64(1)
	for _, st := range states {
		top = max(top, st.Limit, st.InFlight)
		topMs = max(topMs, (st.TimePerJob+999)/1000)
	}
	top, topMs = niceCeil(top), niceCeil(topMs)
	x := func(t time.Time) float64 {
		f := 1 - float64(now.Sub(t))/float64(span)
		return padL + math.Max(f, 0)*float64(chartW-padL-padPoolR)
	}
	y := func(v, of int64) float64 { return padT + float64(chartH-padT-padB)*(1-float64(v)/float64(of)) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg viewBox="0 0 %d %d" width="100%%" preserveAspectRatio="none" aria-hidden="true" focusable="false" class="chart">`, chartW, chartH)
	for _, v := range []int64{0, top / 2, top} {
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" class="grid"/><text x="%d" y="%.1f" class="axis" text-anchor="end">%d</text>`,
			padL, chartW-padPoolR, y(v, top), y(v, top), padL-4, y(v, top)+4, v)
	}
	for _, v := range []int64{topMs / 2, topMs} {
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" class="axis">%dms</text>`, chartW-padPoolR+4, y(v, topMs)+4, v)
	}
	for m := 0; m <= 5; m++ {
		label := "now"
		if m > 0 {
			label = fmt.Sprintf("−%dm", m)
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" class="axis" text-anchor="middle">%s</text>`, x(now.Add(-time.Duration(m)*time.Minute)), chartH-6, label)
	}
	for _, ps := range poolSeries {
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.6" stroke-dasharray="%s" class="%s" points="`, ps.color, ps.dash, ps.class)
		for i, st := range states {
			if now.Sub(at[i]) > span {
				continue
			}
			v, of := st.Limit, top
			switch ps.class {
			case "in-flight":
				v = st.InFlight
			case "time-per-job":
				v, of = st.TimePerJob/1000, topMs
			}
			fmt.Fprintf(&b, "%.0f,%.1f ", x(at[i]), y(v, of))
		}
		b.WriteString(`"/>`)
	}
	b.WriteString(`</svg>`)
	last := states[len(states)-1]
	return chart{SVG: template.HTML(b.String()), Summary: fmt.Sprintf("limit in force (solid) %d, in flight (dashed) %d, time per job (dotted, right axis) %s, as this replica last saw them; the chart spans %s, one point a second in which it called the pool",
		last.Limit, last.InFlight, time.Duration(last.TimePerJob)*time.Microsecond, human(now.Sub(at[0]).Round(time.Second)))}
}

// padPoolR leaves room for the pool chart's right axis.
const padPoolR = 44

// poolSeries are the pool chart's lines: what, colour, dash.
var poolSeries = []struct{ class, color, dash string }{
	{"limit", "#1a7f37", ""},
	{"in-flight", "#0969da", "6 3"},
	{"time-per-job", "#9a6700", "2 3"},
}
