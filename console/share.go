package console

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/admitter/admitter/activity"
	"github.com/admitter/admitter/admission"
	"github.com/nats-io/nats.go"
)

// The cluster's view. Each replica answers for its activity share (package activity) on a
// subject of its own, ShareSubject: core NATS request and reply. A page asks every other live
// replica (the replicas bucket's heartbeats say which) at once, waits at most
// SharesConfig.Timeout, merges what came in with this replica's share taken from memory, and
// names every replica that did not answer.
//
// One subject per replica, rather than one that every replica answers (scatter-gather): the
// console knows the live replicas by name from their heartbeats, so it knows whom it waits
// for, stops waiting when the last of them has answered rather than at the timeout, learns at
// once from the server that a replica has no responder (stopped, or of a version that does not
// share), and names each replica that did not answer instead of showing less in silence.

// ShareSubject is where replica, of the replicas sharing consumer, answers for its activity
// share.
func ShareSubject(consumer, replica string) string {
	return "_ADMITTER." + consumer + ".activity." + replica
}

// DefaultShareTimeout bounds how long a page waits for the other replicas' shares.
const DefaultShareTimeout = 500 * time.Millisecond

// SharesConfig is what Shares needs.
type SharesConfig struct {
	// Consumer names the deployment (admission.Config.Consumer) and Replica this replica
	// (admission.Config.Replica, as its heartbeats give it); both required, each one subject
	// token (letters, digits, '-' or '_').
	Consumer, Replica string
	// Activity is this replica's index (required).
	Activity *activity.Index
	// Timeout bounds how long a page waits for the other replicas (default
	// DefaultShareTimeout).
	Timeout time.Duration
	// Logger receives the answers that could not be sent (default slog.Default()).
	Logger *slog.Logger
	// Now reads the clock (default time.Now).
	Now func() time.Time
}

// Shares answers the other replicas' consoles for this replica's share, and asks the other
// replicas for theirs. Create it with StartShares and stop it with Stop; it does not own the
// connection. A replica answers whether its own console is on or off.
type Shares struct {
	nc  *nats.Conn
	cfg SharesConfig
	sub *nats.Subscription

	mu      sync.Mutex
	stopped bool
	busy    sync.WaitGroup // answers under way
}

// StartShares subscribes to this replica's ShareSubject and starts answering.
func StartShares(nc *nats.Conn, c SharesConfig) (*Shares, error) {
	switch {
	case nc == nil:
		return nil, errors.New("console: shares: no NATS connection")
	case c.Activity == nil:
		return nil, errors.New("console: shares: no activity index")
	case !subjectToken(c.Consumer):
		return nil, fmt.Errorf("console: shares: consumer %q must be letters, digits, '-' or '_'", c.Consumer)
	case !subjectToken(c.Replica) || len(c.Replica) > activity.MaxReplicaName:
		return nil, fmt.Errorf("console: shares: replica %q must be 1 to %d letters, digits, '-' or '_'", c.Replica, activity.MaxReplicaName)
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultShareTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	s := &Shares{nc: nc, cfg: c}
	sub, err := nc.Subscribe(ShareSubject(c.Consumer, c.Replica), s.answer)
	if err != nil {
		return nil, fmt.Errorf("console: shares: subscribe to %s: %w", ShareSubject(c.Consumer, c.Replica), err)
	}
	s.sub = sub
	return s, nil
}

func subjectToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// Replica is this replica's name.
func (s *Shares) Replica() string { return s.cfg.Replica }

// Stop stops answering and waits for an answer under way (it is computed from memory).
// Stopping twice is safe.
func (s *Shares) Stop() {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	s.stopped = true
	s.mu.Unlock()
	if err := s.sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) && !errors.Is(err, nats.ErrBadSubscription) {
		s.cfg.Logger.Warn("console: shares: unsubscribe", "err", err)
	}
	// The server knows at once that nobody answers here any more: an asker is told "no
	// responders" rather than waiting out its timeout.
	_ = s.nc.FlushTimeout(time.Second)
	s.busy.Wait()
}

// answer answers one request, on the subscription's goroutine: the share for what it asks,
// or a refusal saying why.
func (s *Shares) answer(m *nats.Msg) {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	s.busy.Add(1)
	s.mu.Unlock()
	defer s.busy.Done()
	if m.Reply == "" {
		return // a publish, not a request: nobody to answer
	}
	now := s.cfg.Now()
	var out []byte
	if r, err := activity.ParseShareRequest(m.Data); err != nil {
		out = activity.AppendRefusal(nil, s.cfg.Replica, now, err.Error())
	} else {
		sh := s.cfg.Activity.Share(s.cfg.Replica, r, now)
		out = sh.AppendJSON(make([]byte, 0, 16<<10))
	}
	if limit := s.nc.MaxPayload(); limit > 0 && int64(len(out)) > limit {
		out = activity.AppendRefusal(nil, s.cfg.Replica, now, fmt.Sprintf("its share of %d bytes is larger than the server's max_payload (%d)", len(out), limit))
	}
	if err := m.Respond(out); err != nil {
		s.cfg.Logger.Warn("console: shares: answer not sent", "reply", m.Reply, "err", err)
	}
}

// An answer is one replica's share as a page got it: Err when it did not come.
type answer struct {
	Replica string
	Share   activity.Share
	Err     error
	Took    time.Duration
}

// ask asks each of peers for its share, at once, and returns every answer (in the order of
// peers) when all have come or the timeout has passed.
func (s *Shares) ask(ctx context.Context, peers []string, r activity.ShareRequest) []answer {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	req := r.AppendJSON(nil)
	out := make([]answer, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		wg.Go(func() {
			start := time.Now()
			out[i] = answer{Replica: p}
			m, err := s.nc.RequestWithContext(ctx, ShareSubject(s.cfg.Consumer, p), req)
			out[i].Took = time.Since(start)
			if err != nil {
				out[i].Err = err
				return
			}
			sh, err := activity.ParseShare(m.Data)
			switch {
			case err != nil:
				out[i].Err = err
			case sh.Replica != p:
				out[i].Err = fmt.Errorf("replica %s answered as %q", p, sh.Replica)
			case sh.Want != r.Want:
				out[i].Err = fmt.Errorf("replica %s answered %q to a request for %q", p, sh.Want, r.Want)
			case r.Want == activity.WantTenant && len(sh.Tenants) == 1 && sh.Tenants[0].Tenant != r.Tenant:
				out[i].Err = fmt.Errorf("replica %s answered for tenant %q when asked for %q", p, sh.Tenants[0].Tenant, r.Tenant)
			default:
				out[i].Share = sh
			}
		})
	}
	wg.Wait()
	return out
}

// why says in words why a replica's share did not come.
func (s *Shares) why(err error) string {
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return "no answer: nothing listens on its subject (it has stopped, or runs a version that does not share its activity)"
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		return "did not answer within " + human(s.cfg.Timeout)
	case errors.Is(err, activity.ErrShareRefused):
		return "refused: " + strings.TrimPrefix(err.Error(), activity.ErrShareRefused.Error()+": ")
	case errors.Is(err, activity.ErrBadShare):
		return "its answer could not be read: " + strings.TrimPrefix(err.Error(), activity.ErrBadShare.Error()+": ")
	}
	return err.Error()
}

// A view is what the live replicas decided, as one page needs it.
type view struct {
	// Replicas are every live replica: this one first, then by name.
	Replicas []replicaShare
}

// replicaShare is how one replica's share came, or why it did not.
type replicaShare struct {
	Name string
	Self bool
	// In: Share is in the figures (Self: taken from memory), after Took; else Why not.
	In    bool
	Share activity.Share
	Took  time.Duration
	Why   string
}

// Shares are the shares in the view: this replica's first.
func (v view) Shares() []activity.Share {
	out := make([]activity.Share, 0, len(v.Replicas))
	for _, r := range v.Replicas {
		if r.In {
			out = append(out, r.Share)
		}
	}
	return out
}

// State is "memory", "answered" or "missing": the data-share attribute of the pages.
func (r replicaShare) State() string {
	switch {
	case r.Self:
		return "memory"
	case r.In:
		return "answered"
	}
	return "missing"
}

// Missing are the live replicas whose share is not in the view.
func (v view) Missing() []replicaShare {
	var out []replicaShare
	for _, r := range v.Replicas {
		if !r.In {
			out = append(out, r)
		}
	}
	return out
}

// Truncated are the replicas whose share left tenants out.
func (v view) Truncated() []replicaShare {
	var out []replicaShare
	for _, r := range v.Replicas {
		if r.In && r.Share.Truncated {
			out = append(out, r)
		}
	}
	return out
}

// Answered is how many live replicas' shares are in.
func (v view) Answered() int { return len(v.Replicas) - len(v.Missing()) }

// gather makes the view of r: this replica's share from memory, and every other live replica
// of st's as it answers (not at all when the console was given no Shares: then they are
// missing).
func (c *Console) gather(ctx context.Context, b *Backend, st admission.Status, r activity.ShareRequest, now time.Time) view {
	self := st.Replica
	v := view{Replicas: []replicaShare{{Name: self, Self: true, In: true, Share: b.Activity.Share(self, r, now)}}}
	var peers []string
	for _, rp := range st.Replicas {
		if rp.Live && !rp.Self && rp.Name != self {
			peers = append(peers, rp.Name)
		}
	}
	slices.Sort(peers)
	if b.Shares == nil {
		for _, p := range peers {
			v.Replicas = append(v.Replicas, replicaShare{Name: p, Why: "not asked: this console was started without a NATS connection to ask the other replicas"})
		}
		return v
	}
	for _, a := range b.Shares.ask(ctx, peers, r) {
		rs := replicaShare{Name: a.Replica, Took: a.Took, In: a.Err == nil, Share: a.Share}
		if a.Err != nil {
			rs.Why = b.Shares.why(a.Err)
		}
		v.Replicas = append(v.Replicas, rs)
	}
	return v
}
