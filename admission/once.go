package admission

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/policy"
	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go"
)

// A job is forwarded once, however long after its decision it is read again (README, invariant
// 4). The limiter remembers each admission until the queue's owner says its forward was stored
// (every call carries the queue's settled mark: policy.Queue.Stored), and answers a job asked
// about again meanwhile "redeemed", charged nothing, with how long ago it was admitted
// (bucket.JobRedeemed). Whoever asks then cannot know whether the forward was stored: the
// answer of the call that admitted it was lost, or the replica that made it stopped between its
// forward and its removal from the input, seconds or hours ago. So a redeemed job is looked up
// in the output (its Msg-Id, on its output subject, from about its admission on): found, it is
// settled like a job stored before; not found, its slots are taken again (a start: its lease
// may have ended meanwhile) and it is forwarded, a late forward its tenant is charged for
// (owed.late). The output's duplicate window plays no part: it would cover two minutes.

// lookupSkew is how much earlier than a redeemed job's admission the output is searched for its
// forward: the admitter's and the NATS servers' clocks may differ by that much (the admission's
// age is the limiter's own measure, no clock compared).
const lookupSkew = 2 * time.Second

// lookupMost bounds the messages one lookup reads: the tenant's forwards stored from about the
// earliest admission on. A lookup that reads that many without finding every forward it looks
// for, and without reaching the tenant's last one, cannot tell (errLookup).
const lookupMost = 20_000

// errLookup: a lookup could not tell whether a forward was stored.
var errLookup = errors.New("the output could not be searched")

// foundForwards reads the tenant's forwards in the output stored from since on, and returns the
// Msg-Ids of ids it found there. It stops once it found them all or reached the tenant's last
// forward. One scan serves a step's redeemed jobs: the tenant's forwards since the earliest of
// them, in batches by Direct Get where the output allows it (else one message a request from
// the stream's leader).
func (s *Service) foundForwards(ctx context.Context, tenant string, ids map[string]bool, since time.Time) (map[string]bool, error) {
	filter, err := s.cfg.Out.TenantFilter(tenant)
	if err != nil {
		return nil, err
	}
	out, err := s.streams.get(ctx, s.cfg.StreamOut)
	if err != nil {
		return nil, fmt.Errorf("%w: stream %s: %w", errLookup, s.cfg.StreamOut, err)
	}
	next := s.readForwardsByAPI
	if out.CachedInfo().Config.AllowDirect {
		next = s.readForwardsDirect
	}
	found := map[string]bool{}
	var seq uint64 // 0: from since
	for read := 0; read < lookupMost; {
		msgs, end, err := next(ctx, filter, since, seq)
		if err != nil {
			return nil, fmt.Errorf("%w: stream %s, subjects %s: %w", errLookup, s.cfg.StreamOut, filter, err)
		}
		for _, m := range msgs {
			if id := m.header.Get(nats.MsgIdHdr); ids[id] {
				found[id] = true
			}
			seq = m.seq + 1
		}
		read += len(msgs)
		if len(found) == len(ids) || end || len(msgs) == 0 {
			return found, nil
		}
	}
	return nil, fmt.Errorf("%w: stream %s, subjects %s: more than %d forwards since %s", errLookup, s.cfg.StreamOut, filter, lookupMost, since.Format(time.RFC3339))
}

// storedMsg is what a lookup reads of a message of the output.
type storedMsg struct {
	seq    uint64
	header nats.Header
}

// readForwardsDirect reads a batch of the output's messages on filter, from seq (0: from the
// first stored at or after since); end: none is left after them.
func (s *Service) readForwardsDirect(ctx context.Context, filter string, since time.Time, seq uint64) ([]storedMsg, bool, error) {
	var msgs []*nats.Msg
	var pending uint64
	var err error
	if seq == 0 {
		msgs, pending, err = s.reader.readSince(ctx, s.cfg.StreamOut, filter, since, lookupBatch, 1<<20)
	} else {
		msgs, pending, err = s.reader.read(ctx, s.cfg.StreamOut, filter, seq, lookupBatch, 1<<20)
	}
	if err != nil {
		return nil, false, err
	}
	out := make([]storedMsg, 0, len(msgs))
	for _, m := range msgs {
		n, err := seqOf(m)
		if err != nil {
			return nil, false, err
		}
		out = append(out, storedMsg{seq: n, header: m.Header})
	}
	return out, pending == 0, nil
}

// lookupBatch is how many messages a lookup asks Direct Get for at once.
const lookupBatch = 256

// readForwardsByAPI reads the output's next message on filter from its stream's leader, from
// seq (0: the first stored at or after since); end: there is none.
func (s *Service) readForwardsByAPI(ctx context.Context, filter string, since time.Time, seq uint64) ([]storedMsg, bool, error) {
	req := msgGetRequest{NextFor: filter, Seq: seq}
	if seq == 0 {
		req.StartTime = &since
	}
	m, found, err := s.reader.leaderGet(ctx, s.cfg.StreamOut, req)
	if err != nil || !found {
		return nil, err == nil, err
	}
	return []storedMsg{m}, false, nil
}

// lookupRetry is how long a redeemed job waits when its lookup could not tell.
const lookupRetry = time.Second

// resolveRedeemed settles the jobs d redeemed whose forwards the output holds, and readies the
// others to be forwarded again: their slots are taken again first (a start), or they wait for
// them, with the jobs behind. When the lookup cannot tell, they wait and are asked about again
// (see once.go).
func (s *Service) resolveRedeemed(ctx context.Context, q *queue, jobs []job, d *policy.Decision) {
	for i, v := range d.Verdicts {
		if v.Redeemed {
			q.admittedBefore(jobs[i].id) // never expired unasked, whatever it waits for now
		}
	}
	ids := map[string]bool{}
	var since time.Time
	for i := range jobs {
		v := &d.Verdicts[i]
		if v.Fate.Waits() {
			break // it and the jobs behind wait: nothing of them goes in this step
		}
		if v.Redeemed && !v.Shadow {
			ids[wire.MsgID(wire.KindForward, jobs[i].stream, jobs[i].seq)] = true
			if at := time.Now().Add(-v.AdmittedAgo); since.IsZero() || at.Before(since) {
				since = at
			}
		}
	}
	if len(ids) == 0 {
		return
	}
	found, err := s.foundForwards(ctx, q.tenant, ids, since.Add(-lookupSkew))
	if err != nil {
		s.log.Warn("jobs admitted before may have been forwarded: their forwards could not be looked up; they wait",
			"tenant", q.tenant, "jobs", len(ids), "since", since.Format(time.RFC3339Nano), "err", err)
	}
	for i := range jobs {
		v := &d.Verdicts[i]
		if v.Fate.Waits() {
			return
		}
		if !v.Redeemed || v.Shadow {
			continue
		}
		j := &jobs[i]
		switch {
		case err != nil:
			*v = policy.Verdict{Fate: wire.FateDelayed, Wait: lookupRetry, Deadline: v.Deadline}
			return
		case found[wire.MsgID(wire.KindForward, j.stream, j.seq)]:
			*v = policy.Verdict{Fate: wire.FateStored} // forwarded before: settled, not forwarded again
			continue
		case d.Plan == nil || !d.Plan.Leases():
			continue // forwarded now, late (owed.settle)
		}
		res, _, err := s.cfg.Policy.Lease(ctx, policy.LeaseStart, q.tenant, j.id, max(j.weight, 1), bucket.NoCost, bucket.Report{})
		switch {
		case err != nil:
			*v = policy.Verdict{Fate: wire.FateDelayed, Wait: stepRetry(1), Deadline: v.Deadline}
			return
		case !res.Held:
			// Its lease ended while it was not forwarded, and its slots are taken: it waits for them.
			*v = policy.Verdict{Fate: wire.FateDelayed, Wait: max(res.Wait, time.Millisecond), Deadline: v.Deadline}
			return
		}
	}
}

// admittedBefore remembers that the limiter answered job id admitted before (see redeemed).
func (q *queue) admittedBefore(id int64) {
	if q.redeemed == nil {
		q.redeemed = map[int64]bool{}
	}
	q.redeemed[id] = true
}
