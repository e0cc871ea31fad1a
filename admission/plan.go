package admission

import (
	"cmp"
	"slices"
	"time"

	"github.com/admitter/admitter/policy"
	"github.com/admitter/admitter/wire"
)

// A step decides the jobs it read, then does what the decision says, in three parts
// (decideAndApply): decide (the limiter's call, and the lookups of the jobs it redeemed: I/O),
// plan (this file: what becomes of each job, from the decision alone), and publish and settle
// over one forward value per message (forwards.go, step.go). The plan is pure: given the same
// decision, jobs and time it is the same, and its tests are tables.

// act is what a step does with one job it read.
type act uint8

const (
	// actWait: it waits, for its own verdict or behind the job that waits (the head); it is
	// read again by a later step.
	actWait act = iota
	// actForward: its forward is published.
	actForward
	// actDead: its dead letter is published.
	actDead
	// actStored: its forward was stored before: it is settled, nothing is sent.
	actStored
)

// sends reports whether the act publishes a message.
func (a act) sends() bool { return a == actForward || a == actDead }

// stepPlan is what a step does with the jobs it read, in the order it asked about them.
type stepPlan struct {
	// each holds each job's act and the verdict it goes with (a job behind the head: the
	// head's fate and wait), in the order the jobs were asked about.
	each []planned
	// head is the job left waiting at the head of the queue (the first asked about that
	// waits: every job asked after it waits with it); len(jobs) when none waits.
	head int
	// inPlace are the jobs that settle in their place, by sequence: those read in order from
	// the cursor (job.ordered), up to the first that does not settle. The queue's cursor and
	// settled mark move past them once their messages are stored. Every other job that settles
	// does so out of its place (planned.out).
	inPlace []int
	// spent is what the step's messages cost its queue's turn: a forward its weight (paced or
	// not: every forward is work downstream), a dead letter 1.
	spent int64
	// next, when a job waits: when the queue asks again (the head's wait, or sooner the first
	// bound on waiting among the jobs left waiting, so that they expire on time; at once when
	// jobs were dead-lettered out of place: those beyond the ones read may have expired too).
	next time.Duration
}

// planned is one job's part of a step's plan.
type planned struct {
	act     act
	verdict policy.Verdict
	// out: it settles out of its place (a job of the tenant stored before it waits, or was not
	// read): once its message is stored (at once, stored before) it is removed from the input
	// by itself, and the queue passes over it (see skipExpired). An expired job behind the head
	// (its bound passed while it waited), and a job that a higher priority made go before.
	out bool
}

// planStep is the plan of a step over jobs, in the order they were asked about, decided by d at
// now. skips says whether the queue may settle jobs out of their place (its list of those not
// yet removed has room); a job of an older stream never does (it is read by its own cursor).
func planStep(d policy.Decision, jobs []job, now time.Time, skips bool) stepPlan {
	p := stepPlan{each: make([]planned, len(jobs)), head: len(jobs)}
	outOK := func(j *job) bool { return skips && !j.src && !j.lane }
	skipped := false
	for i := range jobs {
		v, pl := d.Verdicts[i], &p.each[i]
		if p.head < len(jobs) { // behind the job that waits
			if v.Code == wire.CodeExpired && outOK(&jobs[i]) {
				*pl, skipped = planned{act: actDead, verdict: v, out: true}, true
				continue
			}
			head := p.each[p.head].verdict
			*pl = planned{act: actWait, verdict: policy.Verdict{Fate: head.Fate, Wait: head.Wait}} // it waits behind the head, for as long
			continue
		}
		pl.verdict = v
		switch f := v.Fate; {
		case f.Forwarded():
			pl.act = actForward
		case f == wire.FateDead:
			pl.act = actDead
		case f == wire.FateStored:
			pl.act = actStored
		default:
			pl.act, p.head = actWait, i // it waits, and every job asked after it
		}
	}
	p.inPlace = inPlace(jobs, p.each)
	placed := make([]bool, len(jobs))
	for _, i := range p.inPlace {
		placed[i] = true
	}
	for i := range jobs {
		pl := &p.each[i]
		switch {
		case pl.act == actWait || placed[i]:
		case outOK(&jobs[i]):
			pl.out = true
		default:
			// It may not settle out of its place (cannot happen: such a queue asks in order): it
			// waits, with the head if one waits, and is found admitted when asked again.
			v := policy.Verdict{Fate: wire.FateDelayed}
			if p.head < len(jobs) {
				v = policy.Verdict{Fate: p.each[p.head].verdict.Fate, Wait: p.each[p.head].verdict.Wait}
			}
			*pl = planned{act: actWait, verdict: v}
		}
		switch pl.act {
		case actForward:
			p.spent += max(jobs[i].weight, 1)
		case actDead:
			p.spent++ // a dead letter costs the turn its work, not its weight
		}
	}
	if p.head == len(jobs) {
		return p
	}
	p.next = max(p.each[p.head].verdict.Wait, time.Millisecond)
	for k := range jobs {
		if dl := d.Verdicts[k].Deadline; !dl.IsZero() && p.each[k].act == actWait && d.Verdicts[k].Fate.Waits() {
			p.next = min(p.next, max(dl.Sub(now), time.Millisecond))
		}
	}
	if skipped {
		p.next = 0
	}
	return p
}

// inPlace are the jobs read in order from the cursor (job.ordered), by sequence, up to the
// first that waits or was dead-lettered out of its place.
func inPlace(jobs []job, each []planned) []int {
	var ordered []int
	for i := range jobs {
		if jobs[i].ordered {
			ordered = append(ordered, i)
		}
	}
	slices.SortFunc(ordered, func(a, b int) int { return cmp.Compare(jobs[a].at, jobs[b].at) })
	for k, i := range ordered {
		if each[i].act == actWait || each[i].out {
			return ordered[:k]
		}
	}
	return ordered
}
