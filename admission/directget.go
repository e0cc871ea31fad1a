package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

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
	Seq      uint64 `json:"seq"`
	NextFor  string `json:"next_by_subj"`
	Batch    int    `json:"batch"`
	MaxBytes int    `json:"max_bytes"`
}

// read returns up to batch messages of stream on subject at or after seq, in order, stopping
// after maxBytes (at least one message), and how many more the subject had when the server
// answered (0: the read reached the subject's end; unknown counts as more). An empty result
// means there is none.
func (r *reader) read(ctx context.Context, stream, subject string, seq uint64, batch, maxBytes int) ([]*nats.Msg, uint64, error) {
	token := strconv.FormatUint(r.seq.Add(1), 36)
	ch := make(chan *nats.Msg, batch+1)
	r.mu.Lock()
	r.routes[token] = ch
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.routes, token)
		r.mu.Unlock()
	}()
	req, err := json.Marshal(directRequest{Seq: max(seq, 1), NextFor: subject, Batch: batch, MaxBytes: maxBytes})
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
// stream's leader has it (found false: none). A Direct Get may be answered by a follower that has
// not applied the latest stores (FIELD-NOTES): a "none" from it is no proof; this asks the leader
// (STREAM.MSG.GET, which only the leader answers).
func (r *reader) firstFrom(ctx context.Context, stream, subject string, seq uint64) (uint64, bool, error) {
	req, err := json.Marshal(struct {
		Seq     uint64 `json:"seq"`
		NextFor string `json:"next_by_subj"`
	}{max(seq, 1), subject})
	if err != nil {
		return 0, false, err
	}
	m, err := r.nc.RequestWithContext(ctx, r.api+"STREAM.MSG.GET."+stream, req)
	if err != nil {
		return 0, false, fmt.Errorf("get the first message of %s on %s from %d: %w", stream, subject, seq, err)
	}
	var resp struct {
		Message *struct {
			Seq uint64 `json:"seq"`
		} `json:"message"`
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return 0, false, fmt.Errorf("get the first message of %s on %s from %d: %w", stream, subject, seq, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return 0, false, nil
	case resp.Error != nil:
		return 0, false, fmt.Errorf("get the first message of %s on %s from %d: %w", stream, subject, seq, resp.Error)
	case resp.Message == nil:
		return 0, false, fmt.Errorf("get the first message of %s on %s from %d: an answer without a message", stream, subject, seq)
	}
	return resp.Message.Seq, true, nil
}

// seqOf is the stream sequence of a message read by Direct Get.
func seqOf(m *nats.Msg) (uint64, error) {
	seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("direct get reply without %s: %q", jetstream.SequenceHeader, m.Header.Get(jetstream.SequenceHeader))
	}
	return seq, nil
}
