package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/policy"
	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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
// forward: the admitter's, the limiter's and the NATS servers' clocks may differ by that much.
const lookupSkew = 10 * time.Second

// lookupMost bounds the messages a lookup reads: the forwards of the job's subject stored from
// about its admission on. A lookup that reads them all without finding the forward, or finds
// no end, cannot tell (errLookup).
const lookupMost = 2000

// errLookup: a lookup could not tell whether the forward was stored.
var errLookup = errors.New("the output could not be searched")

type msgGetRequest struct {
	Seq       uint64     `json:"seq,omitempty"`
	NextFor   string     `json:"next_by_subj"`
	StartTime *time.Time `json:"start_time,omitempty"`
}

type msgGetResponse struct {
	Message *struct {
		Sequence uint64 `json:"seq"`
		Header   []byte `json:"hdrs"`
	} `json:"message"`
	Error *jetstream.APIError `json:"error"`
}

// errCodeNoMessage is the API's "no message found" (JSNoMessageFoundErr).
const errCodeNoMessage = 10037

// forwarded reports whether the output holds the forward of j (its Msg-Id on its output
// subject), stored after since. It reads the output's stream leader (not Direct Get: a
// follower may lag), one message a request: it runs for redeemed jobs only.
func (s *Service) forwarded(ctx context.Context, j *job, since time.Time) (bool, error) {
	_, subject, err := s.out.Map(j.subject)
	if err != nil {
		return false, err
	}
	id := wire.MsgID(wire.KindForward, j.stream, j.seq)
	api := s.apiPrefix() + "STREAM.MSG.GET." + s.cfg.StreamOut
	start := since.Add(-lookupSkew)
	req := msgGetRequest{NextFor: subject, StartTime: &start}
	for range lookupMost {
		body, err := json.Marshal(req)
		if err != nil {
			return false, err
		}
		m, err := s.cfg.JetStream.Conn().RequestWithContext(ctx, api, body)
		if err != nil {
			return false, fmt.Errorf("%w: stream %s, subject %s: %w", errLookup, s.cfg.StreamOut, subject, err)
		}
		var r msgGetResponse
		if err := json.Unmarshal(m.Data, &r); err != nil {
			return false, fmt.Errorf("%w: stream %s: a reply that does not read: %w", errLookup, s.cfg.StreamOut, err)
		}
		switch {
		case r.Error != nil && r.Error.ErrorCode == errCodeNoMessage:
			return false, nil // the subject's end: not there
		case r.Error != nil:
			return false, fmt.Errorf("%w: stream %s, subject %s: %w", errLookup, s.cfg.StreamOut, subject, r.Error)
		case r.Message == nil:
			return false, fmt.Errorf("%w: stream %s: a reply without a message", errLookup, s.cfg.StreamOut)
		}
		if len(r.Message.Header) > 0 {
			h, err := nats.DecodeHeadersMsg(r.Message.Header)
			if err == nil && h.Get(nats.MsgIdHdr) == id {
				return true, nil
			}
		}
		req = msgGetRequest{Seq: r.Message.Sequence + 1, NextFor: subject}
	}
	return false, fmt.Errorf("%w: stream %s, subject %s: more than %d forwards since %s", errLookup, s.cfg.StreamOut, subject, lookupMost, start.Format(time.RFC3339))
}

// apiPrefix is the JetStream API's subject prefix ("$JS.API." or its domain's).
func (s *Service) apiPrefix() string {
	o := s.cfg.JetStream.Options()
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		return o.APIPrefix
	}
	return jetstream.DefaultAPIPrefix
}

// lookupRetry is how long a redeemed job waits when its lookup could not tell.
const lookupRetry = time.Second

// resolveRedeemed settles the jobs d redeemed whose forwards the output holds, and readies the
// others to be forwarded again: their slots are taken again first (a start), or they wait for
// them, with the jobs behind. A redeemed job whose lookup cannot tell waits, and is asked about
// again (see once.go).
func (s *Service) resolveRedeemed(ctx context.Context, q *queue, jobs []job, d *policy.Decision) {
	for i := range jobs {
		v := &d.Verdicts[i]
		if v.Fate.Waits() {
			return // it and the jobs behind wait: nothing of them goes in this step
		}
		if !v.Redeemed || v.Shadow {
			continue
		}
		j := &jobs[i]
		found, err := s.forwarded(ctx, j, time.Now().Add(-v.AdmittedAgo))
		switch {
		case err != nil:
			s.log.Warn("a job admitted before may have been forwarded: its forward could not be looked up; it waits",
				"tenant", q.tenant, "stream", j.stream, "sequence", j.seq, "admitted_ago", v.AdmittedAgo.Round(time.Millisecond).String(), "err", err)
			*v = policy.Verdict{Fate: wire.FateDelayed, Wait: lookupRetry, Deadline: v.Deadline}
			return
		case found:
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
