package admission

import (
	"strconv"
	"strings"
	"time"

	"github.com/admitter/admitter/policy"
	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go"
)

// What the admitter publishes for a job: its forward and its dead letter (the message, its
// subject and headers), and the headers of each.

// forwardMsg is the admitted job as published to the output, under verdict v of decision d.
func (s *Service) forwardMsg(j *job, d *decision, v policy.Verdict) *nats.Msg {
	h := s.baseHeader(j, 9)
	forwardHeader(h, wire.MsgID(wire.KindForward, j.stream, j.seq), j.tenant, d.plan, j.tries, d.now.Sub(j.stored), v)
	leaseHeader(h, j.id, d.lease, v)
	m := &nats.Msg{Subject: j.out, Data: j.data, Header: h}
	s.tel.injectSend(j, m, s.cfg.StreamOut)
	return m
}

// deadMsg is the job as dead-lettered with code and detail (v: its verdict, for an expired job's
// headers).
func (s *Service) deadMsg(j *job, v policy.Verdict, code wire.Code, detail string) *nats.Msg {
	_, dead, err := s.dead.Map(j.subject)
	if err != nil { // not an input subject (a foreign message in a legacy lane): the tenant's dead subject
		fill := make([]string, s.cfg.Dead.Wildcards())
		for i := range fill {
			fill[i] = "lane"
		}
		dead, _ = s.cfg.Dead.Subject(j.tenant, fill...)
	}
	h := deadHeader(s.baseHeader(j, 5), wire.MsgID(wire.KindDead, j.stream, j.seq), code, detail)
	if code == wire.CodeExpired {
		h.Set(wire.HeaderErrorArrived, j.stored.UTC().Format(time.RFC3339Nano))
		h.Set(wire.HeaderErrorWaitedFor, v.WaitedFor)
	}
	m := &nats.Msg{Subject: dead, Data: j.data, Header: h}
	s.tel.injectSend(j, m, s.cfg.StreamDead)
	return m
}

// baseHeader is the job's own headers as carried into what the admitter publishes: the
// producer's, without the stream's read headers (Nats-Sequence, ...) and with its Nats-* kept
// as Admit-Original-*.
func (s *Service) baseHeader(j *job, extra int) nats.Header {
	if j.lane {
		return fromLane(j.header, extra)
	}
	return carried(j.header, extra)
}

// carried copies an input's headers for what the admitter publishes from it. Headers starting
// with "Nats-" are server directives for the input's own publish: they are kept as
// Admit-Original-<rest> (Nats-Msg-Id becomes Admit-Original-Msg-Id), neither lost nor applied
// to the copy. extra is room for the headers the caller adds.
func carried(in nats.Header, extra int) nats.Header {
	out := make(nats.Header, len(in)+extra)
	for k, v := range in {
		if isNats(k) {
			k = wire.OriginalPrefix + k[5:]
		}
		out[k] = append(out[k], v...)
	}
	return out
}

// fromLane copies the headers of a job read back from its lane: what carried gave it when it
// was moved, without the Nats-* headers (the lane copy's own Msg-Id and those Direct Get adds)
// and without the Admit-Input-* headers that describe the input.
func fromLane(in nats.Header, extra int) nats.Header {
	out := make(nats.Header, len(in)+extra)
	for k, v := range in {
		if isNats(k) || strings.HasPrefix(k, "Admit-Input-") {
			continue
		}
		out[k] = append(out[k], v...)
	}
	return out
}

func isNats(k string) bool { return len(k) > 5 && strings.EqualFold(k[:5], "Nats-") }

// forwardHeader completes h, the headers of a job admitted with verdict v, with the contract's
// own.
func forwardHeader(h nats.Header, id, tenant, plan string, attempts uint64, waited time.Duration, v policy.Verdict) nats.Header {
	h.Set(nats.MsgIdHdr, id)
	h.Set(wire.HeaderTenant, tenant)
	h.Set(wire.HeaderPlan, plan)
	h.Set(wire.HeaderAttempts, strconv.FormatUint(attempts, 10))
	h.Set(wire.HeaderDelayMs, strconv.FormatInt(max(waited.Milliseconds(), 0), 10))
	switch {
	case v.Fate == wire.FateDegraded:
		h.Set(wire.HeaderDegraded, wire.DegradedFailOpen)
	case v.Local:
		h.Set(wire.HeaderDegraded, wire.DegradedLocal)
	default:
		h.Del(wire.HeaderDegraded)
	}
	if v.Shadow {
		h.Set(wire.HeaderShadow, wire.ShadowValue(v.Wait))
	} else {
		h.Del(wire.HeaderShadow)
	}
	return h
}

// leaseHeader completes h, the headers of a job admitted with verdict v under a plan whose lease
// is lease long (0: no concurrency limit), with the job's lease (its input sequence seq) and the
// lease's length, or removes them: they are not the producer's to set, and a job forwarded
// unchecked or in shadow mode holds no lease.
func leaseHeader(h nats.Header, id int64, lease time.Duration, v policy.Verdict) nats.Header {
	if lease > 0 && v.Fate == wire.FateAdmitted && !v.Shadow {
		h.Set(wire.HeaderLease, strconv.FormatInt(id, 10))
		h.Set(wire.HeaderLeaseLength, wire.LeaseLengthValue(lease))
	} else {
		h.Del(wire.HeaderLease)
		h.Del(wire.HeaderLeaseLength)
	}
	return h
}

// deadHeader completes h, the headers of a dead-lettered job, with the reason.
func deadHeader(h nats.Header, id string, code wire.Code, detail string) nats.Header {
	h.Set(nats.MsgIdHdr, id)
	h.Set(wire.HeaderError, string(code))
	h.Set(wire.HeaderErrorDetail, detail)
	h.Del(wire.HeaderErrorArrived) // an expired job's (deadMsg): not the producer's to set
	h.Del(wire.HeaderErrorWaitedFor)
	return h
}

// laneHeader completes h, the headers of a job moved to its tenant's lane by an earlier version,
// with its input's identity: subject, sequence, store time and deliveries so far. Only tests
// write lanes now (an earlier version's, to be drained).
func laneHeader(h nats.Header, id, subject string, seq uint64, stored time.Time, attempts uint64) nats.Header {
	h.Set(nats.MsgIdHdr, id)
	h.Set(wire.HeaderInputSubject, subject)
	h.Set(wire.HeaderInputSeq, strconv.FormatUint(seq, 10))
	h.Set(wire.HeaderInputTime, stored.UTC().Format(time.RFC3339Nano))
	h.Set(wire.HeaderAttempts, strconv.FormatUint(attempts, 10))
	return h
}

// headerSize is the encoded size of h on the wire ("NATS/1.0\r\n", "Key: value\r\n" per value,
// "\r\n"), to tell before publishing whether a message can be stored at all.
func headerSize(h nats.Header) int {
	if len(h) == 0 {
		return 0
	}
	n := len("NATS/1.0\r\n\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + 2 + len(v) + 2
		}
	}
	return n
}
