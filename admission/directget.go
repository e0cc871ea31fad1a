package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// reader reads a tenant's queue: the first messages at or after a sequence on its subjects, in
// one batched Direct Get request ($JS.API.DIRECT.GET.<stream> with next_by_subj, batch and
// max_bytes; nats-server ≥ 2.11). nats.go reads one message per request only. Replies of every
// request arrive on one wildcard inbox and are routed by its last token, so a read costs one
// request and no subscription of its own. Safe for concurrent use.
type reader struct {
	nc     *nats.Conn
	api    string // "$JS.API." or the domain's
	direct string // api + "DIRECT.GET."
	inbox  string
	sub    *nats.Subscription
	seq    atomic.Uint64
	mu     sync.Mutex
	routes map[string]chan *nats.Msg
}

func newReader(js jetstream.JetStream) (*reader, error) {
	o := js.Options()
	api := o.APIPrefix
	switch {
	case o.Domain != "":
		api = "$JS." + o.Domain + ".API."
	case api == "":
		api = jetstream.DefaultAPIPrefix
	}
	r := &reader{nc: js.Conn(), api: api, direct: api + "DIRECT.GET.", inbox: nats.NewInbox(), routes: map[string]chan *nats.Msg{}}
	sub, err := r.nc.Subscribe(r.inbox+".*", r.route)
	if err != nil {
		return nil, fmt.Errorf("admission: reader: %w", err)
	}
	r.sub = sub
	return r, nil
}

func (r *reader) route(m *nats.Msg) {
	token := m.Subject[len(r.inbox)+1:]
	r.mu.Lock()
	ch := r.routes[token]
	r.mu.Unlock()
	if ch != nil {
		select {
		case ch <- m:
		default: // more than asked for: cannot happen, never block the connection
		}
	}
}

func (r *reader) close() { _ = r.sub.Unsubscribe() }

type directRequest struct {
	Seq       uint64     `json:"seq,omitempty"`
	StartTime *time.Time `json:"start_time,omitempty"`
	NextFor   string     `json:"next_by_subj"`
	Batch     int        `json:"batch"`
	MaxBytes  int        `json:"max_bytes"`
}

// read returns up to batch messages of stream on subject at or after seq, in order, stopping
// after maxBytes (at least one message), and how many more the subject had when the server
// answered (0: the read reached the subject's end; unknown counts as more). An empty result
// means there is none.
func (r *reader) read(ctx context.Context, stream, subject string, seq uint64, batch, maxBytes int) ([]*nats.Msg, uint64, error) {
	return r.get(ctx, stream, directRequest{Seq: max(seq, 1), NextFor: subject, Batch: batch, MaxBytes: maxBytes})
}

// readSince is read from the first message stored at or after since (the server's clock).
func (r *reader) readSince(ctx context.Context, stream, subject string, since time.Time, batch, maxBytes int) ([]*nats.Msg, uint64, error) {
	return r.get(ctx, stream, directRequest{StartTime: &since, NextFor: subject, Batch: batch, MaxBytes: maxBytes})
}

func (r *reader) get(ctx context.Context, stream string, dr directRequest) ([]*nats.Msg, uint64, error) {
	subject, seq := dr.NextFor, dr.Seq
	token := strconv.FormatUint(r.seq.Add(1), 36)
	ch := make(chan *nats.Msg, dr.Batch+1)
	r.mu.Lock()
	r.routes[token] = ch
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.routes, token)
		r.mu.Unlock()
	}()
	req, err := json.Marshal(dr)
	if err != nil {
		return nil, 0, err
	}
	if err := r.nc.PublishRequest(r.direct+stream, r.inbox+"."+token, req); err != nil {
		return nil, 0, fmt.Errorf("direct get %s %s: %w", stream, subject, err)
	}
	var out []*nats.Msg
	for {
		select {
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("direct get %s %s from %d: %w", stream, subject, seq, ctx.Err())
		case m := <-ch:
			switch m.Header.Get("Status") {
			case "":
				out = append(out, m)
			case "204": // end of batch
				pending, err := strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
				if err != nil {
					pending = 1
				}
				return out, pending, nil
			case "404":
				return out, 0, nil
			default:
				return nil, 0, fmt.Errorf("direct get %s %s from %d: %s %s", stream, subject, seq, m.Header.Get("Status"), m.Header.Get("Description"))
			}
		}
	}
}

// firstFrom is the sequence of the first message of stream on subject at or after seq, as the
// stream's leader has it (found false: none; see leaderGet).
func (r *reader) firstFrom(ctx context.Context, stream, subject string, seq uint64) (uint64, bool, error) {
	m, found, err := r.leaderGet(ctx, stream, msgGetRequest{Seq: max(seq, 1), NextFor: subject})
	if err != nil {
		return 0, false, fmt.Errorf("get the first message of %s on %s from %d: %w", stream, subject, seq, err)
	}
	return m.seq, found, nil
}

type msgGetRequest struct {
	Seq       uint64     `json:"seq,omitempty"`
	NextFor   string     `json:"next_by_subj"`
	StartTime *time.Time `json:"start_time,omitempty"`
}

// leaderGet is the first message of stream that req asks for, as the stream's leader has it
// (STREAM.MSG.GET, which only the leader answers; found false: there is none). A Direct Get may
// be answered by a follower that has not applied the latest stores (FIELD-NOTES): a "none" from
// it is no proof.
func (r *reader) leaderGet(ctx context.Context, stream string, req msgGetRequest) (m storedMsg, found bool, err error) {
	body, err := json.Marshal(req)
	if err != nil {
		return storedMsg{}, false, err
	}
	reply, err := r.nc.RequestWithContext(ctx, r.api+"STREAM.MSG.GET."+stream, body)
	if err != nil {
		return storedMsg{}, false, err
	}
	var resp struct {
		Message *struct {
			Sequence uint64 `json:"seq"`
			Header   []byte `json:"hdrs"`
		} `json:"message"`
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		return storedMsg{}, false, fmt.Errorf("a reply that does not read: %w", err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return storedMsg{}, false, nil
	case resp.Error != nil:
		return storedMsg{}, false, resp.Error
	case resp.Message == nil:
		return storedMsg{}, false, errors.New("a reply without a message")
	}
	m.seq = resp.Message.Sequence
	if len(resp.Message.Header) > 0 {
		if m.header, err = nats.DecodeHeadersMsg(resp.Message.Header); err != nil {
			return storedMsg{}, false, fmt.Errorf("message %d: headers that do not read: %w", m.seq, err)
		}
	}
	return m, true, nil
}

// seqOf is the stream sequence of a message read by Direct Get.
func seqOf(m *nats.Msg) (uint64, error) {
	seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("direct get reply without %s: %q", jetstream.SequenceHeader, m.Header.Get(jetstream.SequenceHeader))
	}
	return seq, nil
}
