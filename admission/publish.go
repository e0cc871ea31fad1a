package admission

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// forward is one message a step publishes for one of the jobs it read, the job's forward or its
// dead letter, and what became of it: the step's unit from its plan to its settlement.
type forward struct {
	job     *job
	planned planned // what the step does with the job (act, verdict)
	msg     *nats.Msg
	stream  string
	// lease is the length of the lease the forward's job holds (0: none): renewed while the
	// forward waits to be stored (Service.holdLeases).
	lease time.Duration
	// err is nil once stored (a duplicate counts: it was stored before), else an error that
	// retrying cannot fix (errTooLarge, or the server's refusal), or the context's error.
	err error
	// took is, once stored, how long from the start of publishAll until its store was confirmed:
	// an upper bound on how late after its decision it was stored.
	took time.Duration
}

// forwards reports whether f is a job's forward (to the output), not a dead letter.
func (f *forward) forwards() bool { return f.planned.act == actForward && f.err == nil }

// errTooLarge: the message cannot be stored on its stream whatever happens; its job is
// dead-lettered (too-large).
var errTooLarge = errors.New("too large")

// publisher stores messages on the admitter's streams, holding them (never dropping, never
// dead-lettering) while a stream refuses them for a reason that passes: a stream full with
// discard new, insufficient resources, no responders, a timeout. While any message is held
// because a stream is full, the publisher is blocked: Ready says so, the gauge shows it, and
// the log says it once per episode.
type publisher struct {
	js      jetstream.JetStream
	log     *slog.Logger
	limits  map[string]int // the streams' maximum message size; -1 for none
	payload int            // the server's maximum payload
	// held counts messages held because their stream is full. An episode of backpressure
	// starts with the first and ends when, none held for episodeQuiet, a message is stored at
	// its first try and none is held for episodeQuiet after it.
	held    atomic.Int64
	on      atomic.Bool // episode.on, read without the lock
	mu      sync.Mutex
	episode struct {
		on       bool
		stream   string
		reason   string
		since    time.Time
		released time.Time // when held last fell to zero
		ending   time.Time // when a message was stored at its first try, none held since
	}
}

// episodeQuiet is how long no message must be held for an episode of backpressure to end.
const episodeQuiet = time.Second

func newPublisher(js jetstream.JetStream, log *slog.Logger) *publisher {
	return &publisher{js: js, log: log, limits: map[string]int{}, payload: int(js.Conn().MaxPayload())}
}

// learn records a stream's maximum message size (Setup reads it from the stream's config).
func (p *publisher) learn(stream string, maxMsgSize int32) { p.limits[stream] = int(maxMsgSize) }

// fits says why m can never be stored on stream, or nil.
func (p *publisher) fits(m *nats.Msg, stream string) error {
	size := len(m.Data) + headerSize(m.Header)
	if p.payload > 0 && size+len(m.Subject) > p.payload {
		return fmt.Errorf("%w: %d bytes with the admitter's headers, above the server's maximum payload of %d", errTooLarge, size, p.payload)
	}
	if max := p.limits[stream]; max > 0 && size > max {
		return fmt.Errorf("%w: %d bytes with the admitter's headers, above stream %s's maximum message size of %d", errTooLarge, size, stream, max)
	}
	return nil
}

// blocked reports whether an episode of backpressure is under way, and why.
func (p *publisher) blocked() (bool, string) {
	if !p.on.Load() {
		return false, ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.episode.on {
		return false, ""
	}
	if p.held.Load() == 0 && time.Since(p.episode.released) >= episodeQuiet {
		// Try again. The episode ends once a message was stored at its first try and none was
		// held for episodeQuiet after it.
		if e := p.episode.ending; !e.IsZero() && time.Since(e) >= episodeQuiet {
			p.endLocked()
		}
		return false, ""
	}
	return true, fmt.Sprintf("stream %s refuses new messages (%s) since %s: holding them", p.episode.stream, p.episode.reason, p.episode.since.Format(time.RFC3339))
}

// publishAll stores msgs in order, pipelined, and returns once each is stored, refused for good
// or ctx has ended; see forward.err.
func (p *publisher) publishAll(ctx context.Context, msgs []*forward) {
	begin := time.Now()
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for i, m := range msgs {
		if m.err = p.fits(m.msg, m.stream); m.err != nil {
			continue
		}
		futures[i], m.err = p.js.PublishMsgAsync(m.msg, jetstream.WithExpectStream(m.stream))
	}
	timer := time.NewTimer(pubAckTimeout)
	defer timer.Stop()
	for i, m := range msgs {
		if futures[i] != nil {
			timer.Reset(pubAckTimeout)
			m.err = awaitPubAck(ctx, futures[i], timer)
		}
		if m.err != nil && !p.permanent(m.err) {
			m.err = p.retry(ctx, m)
		} else if m.err == nil && p.on.Load() {
			p.storedAtOnce()
		}
		m.took = time.Since(begin)
	}
}

// storedAtOnce notes a message stored at its first try during an episode of backpressure, none
// having been held for episodeQuiet: the episode ends if none is held for episodeQuiet more.
func (p *publisher) storedAtOnce() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.episode.on && p.episode.ending.IsZero() && p.held.Load() == 0 && time.Since(p.episode.released) >= episodeQuiet {
		p.episode.ending = time.Now()
	}
}

// pubAckTimeout bounds the wait for one PubAck before the publish is retried.
const pubAckTimeout = 5 * time.Second

func awaitPubAck(ctx context.Context, f jetstream.PubAckFuture, timer *time.Timer) error {
	select {
	case <-f.Ok():
		return nil
	case err := <-f.Err():
		return err
	case <-timer.C:
		return errors.New("no PubAck within " + pubAckTimeout.String())
	case <-ctx.Done():
		return ctx.Err()
	}
}

// retry publishes m synchronously with a backoff until it is stored, refused for good, or ctx
// ends. A full stream holds it: counted, logged once per episode.
func (p *publisher) retry(ctx context.Context, m *forward) error {
	b := backoff.WithContext(backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(100*time.Millisecond),
		backoff.WithMaxInterval(2*time.Second),
		backoff.WithMaxElapsedTime(0),
	), ctx)
	holding := false
	defer func() {
		if holding {
			p.release()
		}
	}()
	err := m.err
	for ctx.Err() == nil {
		if reason, full := fullStream(err); full && !holding {
			holding = true
			p.hold(m.stream, reason)
		}
		next := b.NextBackOff()
		if next == backoff.Stop {
			break
		}
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, pubAckTimeout)
		_, err = p.js.PublishMsg(pctx, m.msg, jetstream.WithExpectStream(m.stream))
		cancel()
		if err == nil || p.permanent(err) {
			return err
		}
	}
	return ctx.Err()
}

func (p *publisher) hold(stream, reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held.Add(1)
	p.episode.ending = time.Time{}
	if !p.episode.on {
		p.episode.on = true
		p.on.Store(true)
		p.episode.stream, p.episode.reason, p.episode.since = stream, reason, time.Now()
		p.log.Warn("output stream full: holding jobs until it takes them again (backpressure, not an error)", "stream", stream, "reason", reason)
	}
}

func (p *publisher) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held.Add(-1) == 0 {
		p.episode.released = time.Now()
	}
}

func (p *publisher) endLocked() {
	p.episode.on, p.episode.ending = false, time.Time{}
	p.on.Store(false)
	p.log.Info("output stream takes jobs again", "stream", p.episode.stream, "held_for", time.Since(p.episode.since).Round(time.Millisecond).String())
}

// permanent reports whether err means the message can never be stored: too large for the
// server or the stream. Everything else passes (a full stream, a leader election, a timeout)
// and is retried.
func (p *publisher) permanent(err error) bool {
	return errors.Is(err, errTooLarge) || tooLargeAPI(err)
}

// tooLargeAPI reports whether err is the server refusing a message for its size.
func tooLargeAPI(err error) bool {
	var api *jetstream.APIError
	return errors.Is(err, nats.ErrMaxPayload) || (errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum ||
		api.ErrorCode == errCodeHeaderExceedsMaximum || (api.ErrorCode == errCodeStoreFailed && strings.Contains(api.Description, "message too large"))))
}

// fullStream reports whether err is a stream refusing messages because it is full, and how.
func fullStream(err error) (string, bool) {
	var api *jetstream.APIError
	if !errors.As(err, &api) {
		return "", false
	}
	switch {
	case api.ErrorCode == errCodeStoreFailed && strings.Contains(api.Description, "maximum"):
		return api.Description, true
	case api.ErrorCode == errCodeInsufficientResources:
		return api.Description, true
	}
	return "", false
}
