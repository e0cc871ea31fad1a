package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go"
)

// overloadTenant is the one tenant of scenario 3; the plans give it the overload plan.
const overloadTenant = "hot"

// forwarded is what the downstream subscriber saw of one admitted job.
type forwarded struct {
	at       time.Time
	attempts int64
	delay    time.Duration
}

// OverloadFigures computes scenario 3's figures from what the subscriber saw: jobs admitted by
// loadEnd against capacity + rate·t, t from the first admission to loadEnd; attempts per
// admitted job (Admit-Attempts); Admit-Delay-Ms. Jobs seen after tailEnd are left out.
func OverloadFigures(jobs []forwarded, capacity int64, rate float64, loadStart, loadEnd, tailEnd time.Time) Overload {
	o := Overload{Capacity: capacity, RatePerSecond: rate}
	var first time.Time
	attempts := make([]int64, 0, len(jobs))
	delays := make([]time.Duration, 0, len(jobs))
	var inTail int64
	for _, j := range jobs {
		if j.at.After(tailEnd) {
			continue
		}
		if first.IsZero() || j.at.Before(first) {
			first = j.at
		}
		if !j.at.After(loadEnd) {
			o.AdmittedAtEnd++
		} else {
			inTail++
		}
		attempts = append(attempts, j.attempts)
		o.AttemptsMax = max(o.AttemptsMax, j.attempts)
		delays = append(delays, j.delay)
	}
	o.AdmittedTotal = o.AdmittedAtEnd + inTail
	if o.AdmittedTotal == 0 {
		return o
	}
	t := max(loadEnd.Sub(first), 0)
	o.SinceFirstS = round(t.Seconds(), 4)
	o.FirstAdmissionS = round(first.Sub(loadStart).Seconds(), 4)
	o.Expected = round(float64(capacity)+rate*t.Seconds(), 2)
	o.ErrorPct = round(ErrorPct(float64(o.AdmittedAtEnd), o.Expected), 3)
	o.TailPerSecond = round(PerSecond(inTail, tailEnd.Sub(loadEnd)), 1)
	o.AttemptsMean = round(mean(attempts), 4)
	o.DelayMs = Summarize(delays)

	times := make([]time.Time, 0, o.AdmittedTotal)
	for _, j := range jobs {
		if !j.at.After(tailEnd) {
			times = append(times, j.at)
		}
	}
	slices.SortFunc(times, time.Time.Compare)
	admittedBy := func(c time.Time) int { // admissions at or before c
		i, _ := slices.BinarySearchFunc(times, c, func(t, c time.Time) int {
			if t.After(c) {
				return 1
			}
			return -1
		})
		return i
	}
	for c := first.Add(checkpoint); !c.After(loadEnd); c = c.Add(checkpoint) {
		since := c.Sub(first)
		gap := float64(capacity) + rate*since.Seconds() - float64(admittedBy(c))
		if gap > o.WorstLagJobs {
			o.WorstLagJobs, o.WorstLagAtS = round(gap, 1), round(since.Seconds(), 1)
		}
		o.WorstAheadJobs = max(o.WorstAheadJobs, round(-gap, 1))
	}
	for s := loadStart; s.Before(tailEnd); s = s.Add(time.Second) {
		e := s.Add(time.Second)
		if e.After(tailEnd) {
			e = tailEnd
		}
		o.AdmittedPerSecond = append(o.AdmittedPerSecond, int64(admittedBy(e)-admittedBy(s)))
	}
	return o
}

// checkpoint is the spacing of the pacing checks of OverloadFigures.
const checkpoint = 100 * time.Millisecond

// overload is scenario 3: one tenant on the overload plan, published at OverloadFactor × its
// rate for OverloadDuration, with admitter (Redis limiter) running throughout and the
// subscriber watching until OverloadTail after the load ends.
func (e *env) overload(ctx context.Context) (*Overload, error) {
	srv, err := e.freshNATS(ctx, "admitter")
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	fw, err := e.prepare(ctx, "admitter", srv.URL())
	if err != nil {
		return nil, fmt.Errorf("admitter: %w", err)
	}
	defer fw.stop()
	if err := fw.start(); err != nil {
		return nil, err
	}
	subNC, _, err := connect(srv.URL(), "bench-downstream")
	if err != nil {
		return nil, err
	}
	defer subNC.Close()
	col, err := collect(subNC, prefixOut+overloadTenant+".>", func(m *nats.Msg, now time.Time) (forwarded, bool) {
		f := forwarded{at: now}
		f.attempts, _ = strconv.ParseInt(m.Header.Get(wire.HeaderAttempts), 10, 64)
		d, _ := strconv.ParseInt(m.Header.Get(wire.HeaderDelayMs), 10, 64)
		f.delay = time.Duration(d) * time.Millisecond
		return f, true
	})
	if err != nil {
		return nil, err
	}
	defer col.stop()
	dead, err := collect(subNC, "jobs.dead.>", func(*nats.Msg, time.Time) (struct{}, bool) { return struct{}{}, false })
	if err != nil {
		return nil, err
	}
	defer dead.stop()
	pub, err := newAsyncPublisher(srv.URL(), "bench-producer")
	if err != nil {
		return nil, err
	}
	defer pub.close()
	rate := float64(e.o.OverloadRate)
	subject := prefixIn + overloadTenant + ".work"
	loadStart := time.Now()
	sent, loadEnd, err := pace(ctx, pub, e.o.OverloadFactor*rate, e.o.OverloadDuration, func(int64) *nats.Msg {
		return &nats.Msg{Subject: subject, Data: payload}
	})
	if err != nil {
		return nil, err
	}
	if err := pub.complete(ctx); err != nil {
		return nil, err
	}
	tailEnd := loadEnd.Add(e.o.OverloadTail)
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case err := <-fw.failed:
		return nil, fmt.Errorf("admitter stopped during the overload: %w", err)
	case <-time.After(time.Until(tailEnd)):
	}
	jobs := col.stop()
	o := OverloadFigures(jobs, e.o.OverloadCapacity, rate, loadStart, loadEnd, tailEnd)
	o.PublishRate = round(e.o.OverloadFactor*rate, 1)
	o.DurationS = e.o.OverloadDuration.Seconds()
	o.TailS = e.o.OverloadTail.Seconds()
	o.Published = sent
	o.Dead = dead.n.Load()
	return &o, nil
}
