package admission

import (
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
	// actDead: its dead letter is published, in its place.
	actDead
	// actSkip: its dead letter is published out of its place: its bound on waiting passed
	// while it waited behind the head (see skipExpired). The others keep their order.
	actSkip
	// actStored: its forward was stored before: it is settled, nothing is sent.
	actStored
)

// sends reports whether the act publishes a message.
func (a act) sends() bool { return a == actForward || a == actDead || a == actSkip }

// stepPlan is what a step does with the jobs it read.
type stepPlan struct {
	// each holds each job's act and the verdict it goes with (a job behind the head: the
	// head's fate and wait), in the order of the jobs read.
	each []planned
	// head is the job left waiting at the head of the queue (the first that waits); len(jobs)
	// when none waits. The jobs before it settle once their messages are stored.
	head int
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
}

// planStep is the plan of a step over jobs, decided by d at now. skips says whether the queue
// may dead-letter jobs out of their place (its list of those not yet removed has room).
func planStep(d policy.Decision, jobs []job, now time.Time, skips bool) stepPlan {
	p := stepPlan{each: make([]planned, len(jobs)), head: len(jobs)}
	skipped := false
	for i := range jobs {
		v, pl := d.Verdicts[i], &p.each[i]
		if p.head < len(jobs) { // behind the job that waits
			if v.Code == wire.CodeExpired && skips && !jobs[i].src && !jobs[i].lane {
				*pl, skipped = planned{act: actSkip, verdict: v}, true
				p.spent++
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
			p.spent += max(jobs[i].weight, 1)
		case f == wire.FateDead:
			pl.act = actDead
			p.spent++ // a dead letter costs the turn its work, not its weight
		case f == wire.FateStored:
			pl.act = actStored
		default:
			pl.act, p.head = actWait, i // it waits, and every job behind it
		}
	}
	if p.head == len(jobs) {
		return p
	}
	p.next = max(p.each[p.head].verdict.Wait, time.Millisecond)
	for k := p.head; k < len(jobs); k++ {
		if dl := d.Verdicts[k].Deadline; !dl.IsZero() && p.each[k].act == actWait && d.Verdicts[k].Fate.Waits() {
			p.next = min(p.next, max(dl.Sub(now), time.Millisecond))
		}
	}
	if skipped {
		p.next = 0
	}
	return p
}
