// Package deadletter reads the dead letters the admitter wrote to its dead stream
// (ADMITTER_STREAM_DEAD) and replays them to the input once their cause is fixed, each exactly
// once. `admitter dead` and the console use it; the queue (package admission) writes dead
// letters and never reads them.
//
// Exactly once: a replay publishes the dead letter to the input subject it came from with the
// Nats-Msg-Id "admitter:r:<dead stream>:<sequence>" (wire.KindReplay), so a second replay of
// the same dead letter within the input stream's duplicate window is dropped by the server, and
// records it, once the input stream has stored it, in the replays bucket (a key per dead
// letter), so a later replay is refused for as long as the dead letter is kept. The one gap: a
// process that dies between the input's PubAck and the record, followed by a second replay
// after the duplicate window, publishes the job again.
//
// A replay may change the dead letter's headers on the way (ReplayEdited with an Edit), to mend
// what made the job dead, such as an Admit-Weight that was not a weight; its record keeps the
// change.
package deadletter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/admitter/admitter/subjects"
	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Defaults of List.
const (
	// DefaultLimit is how many dead letters List returns when the filter says 0.
	DefaultLimit = 100
	// DefaultScan is how many of the newest dead letters List looks through when the filter
	// says 0: the bound of one listing's work.
	DefaultScan = 10_000
	// MaxScan bounds Filter.Scan.
	MaxScan = 1_000_000
)

// Config is what a Store needs.
type Config struct {
	// JetStream is the connection's JetStream context (required).
	JetStream jetstream.JetStream
	// In and Dead are the input and dead subject templates (required): a dead letter's input
	// subject is its subject mapped from Dead back to In.
	In, Dead subjects.Template
	// StreamIn and StreamDead name the streams (defaults JOBS, DEAD).
	StreamIn, StreamDead string
	// Replays names the key-value bucket recording replays (default "<StreamDead>_replays"),
	// created when absent with Replicas replicas (default 1) and the dead stream's maximum age.
	Replays  string
	Replicas int
}

// A Store reads and replays dead letters. Create it with Open. Safe for concurrent use.
type Store struct {
	cfg     Config
	back    subjects.Mapping // dead subject → input subject
	replays jetstream.KeyValue
}

// Open checks the configuration, finds the dead stream and opens (creating when absent) the
// replays bucket.
func Open(ctx context.Context, c Config) (*Store, error) {
	if c.JetStream == nil {
		return nil, errors.New("deadletter: no JetStream context")
	}
	if c.StreamIn == "" {
		c.StreamIn = "JOBS"
	}
	if c.StreamDead == "" {
		c.StreamDead = "DEAD"
	}
	if c.Replays == "" {
		c.Replays = c.StreamDead + "_replays"
	}
	back, err := subjects.NewMapping(c.Dead, c.In)
	if err != nil {
		return nil, fmt.Errorf("deadletter: dead subject back to the input: %w", err)
	}
	st, err := c.JetStream.Stream(ctx, c.StreamDead)
	if err != nil {
		return nil, fmt.Errorf("deadletter: stream %s: %w", c.StreamDead, err)
	}
	kv, err := c.JetStream.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: c.Replays, Description: "admitter: dead letters of stream " + c.StreamDead + " replayed to the input",
		History: 1, TTL: st.CachedInfo().Config.MaxAge, Replicas: max(c.Replicas, 1),
	})
	if err != nil {
		return nil, fmt.Errorf("deadletter: replays bucket %s: %w", c.Replays, err)
	}
	return &Store{cfg: c, back: back, replays: kv}, nil
}

// A Letter is one dead letter.
type Letter struct {
	// Seq is its sequence in the dead stream; Subject its subject there; Time when it was
	// stored.
	Seq     uint64
	Subject string
	Time    time.Time
	// Tenant is the tenant its subject names; Input the input subject a replay publishes to
	// ("" when the subject does not map back: it cannot be replayed).
	Tenant, Input string
	// Code and Detail are its Admit-Error and Admit-Error-Detail.
	Code   wire.Code
	Detail string
	// Header is every header it carries; Size its payload's size in bytes.
	Header nats.Header
	Size   int
	// Replay is its replay, when it was replayed.
	Replay *Replay
}

// A Replay records one dead letter replayed.
type Replay struct {
	At time.Time `json:"at"`
	// By says who replayed it ("console: alice from 127.0.0.1", "cli: bob@host").
	By string `json:"by"`
	// InputSeq is the sequence the input stream stored it at; Duplicate is true when the input
	// stream had it already (a replay repeated within its duplicate window).
	InputSeq  uint64 `json:"input_seq"`
	Duplicate bool   `json:"duplicate,omitempty"`
	// Edit is how its headers were changed: each header set, and each dropped that it had.
	Edit Edit `json:"edit,omitzero"`
}

// A Filter selects dead letters: by Code and Tenant when set, the Limit newest (DefaultLimit
// when 0) among the Scan newest of the stream (DefaultScan when 0).
type Filter struct {
	Code        wire.Code
	Tenant      string
	Limit, Scan int
}

// Stats is what a listing looked through.
type Stats struct {
	// Scanned is how many dead letters were looked at; Total how many the stream holds.
	Scanned, Total uint64
	// ByCode counts the scanned dead letters of the filter's tenant (all tenants when none) by
	// code.
	ByCode map[wire.Code]int
}

// List returns the newest dead letters matching f, newest first, read without their payloads,
// with what was looked through. Each carries its replay, if any.
func (s *Store) List(ctx context.Context, f Filter) ([]Letter, Stats, error) {
	if f.Limit <= 0 {
		f.Limit = DefaultLimit
	}
	if f.Scan <= 0 {
		f.Scan = DefaultScan
	}
	f.Scan = min(f.Scan, MaxScan)
	st, err := s.cfg.JetStream.Stream(ctx, s.cfg.StreamDead)
	if err != nil {
		return nil, Stats{}, fmt.Errorf("deadletter: stream %s: %w", s.cfg.StreamDead, err)
	}
	state := st.CachedInfo().State
	stats := Stats{Total: state.Msgs, ByCode: map[wire.Code]int{}}
	if state.Msgs == 0 {
		return nil, stats, nil
	}
	start := state.FirstSeq
	if state.LastSeq >= uint64(f.Scan) && state.LastSeq-uint64(f.Scan)+1 > start {
		start = state.LastSeq - uint64(f.Scan) + 1
	}
	filter := s.cfg.Dead.Filter()
	if f.Tenant != "" {
		if filter, err = tenantFilter(s.cfg.Dead, f.Tenant); err != nil {
			return nil, stats, err
		}
	}
	cons, err := s.cfg.JetStream.OrderedConsumer(ctx, s.cfg.StreamDead, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter}, DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: start, HeadersOnly: true,
	})
	if err != nil {
		return nil, stats, fmt.Errorf("deadletter: read stream %s: %w", s.cfg.StreamDead, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = s.cfg.JetStream.DeleteConsumer(dctx, s.cfg.StreamDead, cons.CachedInfo().Name)
	}()
	var found []Letter // the newest matches, oldest first; trimmed to f.Limit as it grows
	var last uint64
	for stats.Scanned < uint64(f.Scan) && last < state.LastSeq && ctx.Err() == nil {
		batch, err := cons.FetchNoWait(min(f.Scan-int(stats.Scanned), 1000))
		if err != nil {
			return nil, stats, fmt.Errorf("deadletter: read stream %s: %w", s.cfg.StreamDead, err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			stats.Scanned++
			meta, err := m.Metadata()
			if err != nil {
				continue
			}
			last = meta.Sequence.Stream
			l := s.letter(last, m.Subject(), meta.Timestamp, m.Headers())
			if size, err := strconv.Atoi(l.Header.Get(nats.MsgSize)); err == nil {
				l.Size = size
			}
			l.Header.Del(nats.MsgSize)
			stats.ByCode[l.Code]++
			if f.Code != "" && l.Code != f.Code {
				continue
			}
			found = append(found, l)
			if len(found) >= 2*f.Limit {
				found = append(found[:0], found[len(found)-f.Limit:]...)
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return nil, stats, fmt.Errorf("deadletter: read stream %s: %w", s.cfg.StreamDead, err)
		}
		if got == 0 {
			break
		}
	}
	if len(found) > f.Limit {
		found = found[len(found)-f.Limit:]
	}
	out := make([]Letter, 0, len(found)) // newest first
	for i := len(found) - 1; i >= 0; i-- {
		out = append(out, found[i])
	}
	for i := range out {
		out[i].Replay = s.replayOf(ctx, out[i].Seq)
	}
	return out, stats, ctx.Err()
}

// Get reads one dead letter with its payload.
func (s *Store) Get(ctx context.Context, seq uint64) (Letter, []byte, error) {
	st, err := s.cfg.JetStream.Stream(ctx, s.cfg.StreamDead)
	if err != nil {
		return Letter{}, nil, fmt.Errorf("deadletter: stream %s: %w", s.cfg.StreamDead, err)
	}
	m, err := st.GetMsg(ctx, seq)
	if err != nil {
		return Letter{}, nil, fmt.Errorf("deadletter: %s sequence %d: %w", s.cfg.StreamDead, seq, err)
	}
	l := s.letter(seq, m.Subject, m.Time, m.Header)
	l.Size = len(m.Data)
	l.Replay = s.replayOf(ctx, seq)
	return l, m.Data, nil
}

func (s *Store) letter(seq uint64, subject string, at time.Time, h nats.Header) Letter {
	l := Letter{Seq: seq, Subject: subject, Time: at, Header: h, Code: wire.Code(h.Get(wire.HeaderError)), Detail: h.Get(wire.HeaderErrorDetail)}
	if l.Header == nil {
		l.Header = nats.Header{}
	}
	if tenant, input, err := s.back.Map(subject); err == nil {
		l.Tenant, l.Input = tenant, input
	} else if tenant, ok := s.cfg.Dead.Match(subject); ok {
		l.Tenant = tenant
	}
	return l
}

func replayKey(seq uint64) string { return strconv.FormatUint(seq, 10) }

func (s *Store) replayOf(ctx context.Context, seq uint64) *Replay {
	e, err := s.replays.Get(ctx, replayKey(seq))
	if err != nil {
		return nil
	}
	var r Replay
	if json.Unmarshal(e.Value(), &r) != nil {
		return nil
	}
	return &r
}

// Outcome is what a replay did with one dead letter.
type Outcome string

const (
	Replayed      Outcome = "replayed"         // published to the input and recorded
	AlreadyDone   Outcome = "already-replayed" // recorded as replayed before: nothing published
	WouldReplay   Outcome = "would-replay"     // dry run: it would be published
	NotReplayable Outcome = "not-replayable"   // not a dead letter the admitter can replay (see Detail)
	Failed        Outcome = "failed"           // publishing or recording failed (see Err)
)

// A Result is what a replay did with one dead letter.
type Result struct {
	Seq     uint64
	Input   string // the input subject
	Outcome Outcome
	Replay  *Replay // Replayed, AlreadyDone: the record
	Detail  string  // NotReplayable: why
	Err     error   // Failed
}

// Replay publishes each dead letter of seqs to its input subject, once (see the package
// comment), with its headers as they are; by says who asks, for the record. With dryRun nothing
// is published or recorded. A dead letter whose payload was left out (the dead letter could not
// carry it) or whose subject does not map back to the input is not replayed.
func (s *Store) Replay(ctx context.Context, seqs []uint64, by string, dryRun bool) []Result {
	out, _ := s.ReplayEdited(ctx, seqs, by, Edit{}, dryRun) // the zero Edit is valid
	return out
}

// ReplayEdited is Replay with each dead letter's headers changed by e, which its record keeps.
// An edit that does not validate (Edit.Validate) is refused before anything is published.
func (s *Store) ReplayEdited(ctx context.Context, seqs []uint64, by string, e Edit, dryRun bool) ([]Result, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	out := make([]Result, 0, len(seqs))
	for _, seq := range seqs {
		out = append(out, s.replayOne(ctx, seq, by, e, dryRun))
	}
	return out, nil
}

func (s *Store) replayOne(ctx context.Context, seq uint64, by string, e Edit, dryRun bool) Result {
	r := Result{Seq: seq}
	if rec := s.replayOf(ctx, seq); rec != nil {
		r.Outcome, r.Replay = AlreadyDone, rec
		return r
	}
	l, data, err := s.Get(ctx, seq)
	if err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			r.Outcome, r.Detail = NotReplayable, fmt.Sprintf("no dead letter at sequence %d of %s", seq, s.cfg.StreamDead)
			return r
		}
		r.Outcome, r.Err = Failed, err
		return r
	}
	r.Input = l.Input
	switch {
	case l.Code == "":
		r.Outcome, r.Detail = NotReplayable, "not a dead letter of the admitter (no "+wire.HeaderError+" header)"
		return r
	case l.Input == "":
		r.Outcome, r.Detail = NotReplayable, fmt.Sprintf("subject %q does not map back to the input (%s)", l.Subject, s.cfg.In.String())
		return r
	case strings.Contains(l.Detail, "is left out"):
		r.Outcome, r.Detail = NotReplayable, "its payload was left out of the dead letter: there is nothing to replay"
		return r
	}
	if dryRun {
		r.Outcome = WouldReplay
		return r
	}
	h := replayHeader(l.Header, s.cfg.StreamDead, seq)
	done := e.apply(h)
	m := &nats.Msg{Subject: l.Input, Data: data, Header: h}
	ack, err := s.cfg.JetStream.PublishMsg(ctx, m)
	if err != nil {
		r.Outcome, r.Err = Failed, fmt.Errorf("deadletter: publish to %s: %w", l.Input, err)
		return r
	}
	rec := &Replay{At: time.Now().UTC(), By: by, InputSeq: ack.Sequence, Duplicate: ack.Duplicate, Edit: done}
	value, _ := json.Marshal(rec)
	if _, err := s.replays.Create(ctx, replayKey(seq), value); err != nil {
		if prev := s.replayOf(ctx, seq); prev != nil { // another replay recorded it first
			r.Outcome, r.Replay = AlreadyDone, prev
			return r
		}
		r.Outcome, r.Err = Failed, fmt.Errorf("deadletter: replayed to %s (input sequence %d) but not recorded: %w", l.Input, ack.Sequence, err)
		return r
	}
	r.Outcome, r.Replay = Replayed, rec
	return r
}

// replayHeader is a dead letter's headers as replayed: without the reason it was dead
// (Admit-Error and the Admit-Error-* that explain it) and without the server's own headers,
// with the replay's Msg-Id and Admit-Replay-Of.
func replayHeader(h nats.Header, stream string, seq uint64) nats.Header {
	out := make(nats.Header, len(h)+2)
	for k, v := range h {
		switch {
		case isErrorHeader(k) || strings.EqualFold(k, wire.HeaderReplayOf):
			continue
		case len(k) > 5 && strings.EqualFold(k[:5], "Nats-"):
			continue
		}
		out[k] = append([]string(nil), v...)
	}
	out.Set(nats.MsgIdHdr, wire.MsgID(wire.KindReplay, stream, seq))
	out.Set(wire.HeaderReplayOf, stream+":"+strconv.FormatUint(seq, 10))
	return out
}

// isErrorHeader reports whether k is Admit-Error or one of the Admit-Error-* headers that
// explain it (detail, arrival, what an expired job waited for): the dead letter's, not the job's.
func isErrorHeader(k string) bool {
	return strings.EqualFold(k, wire.HeaderError) || len(k) > len(wire.HeaderError) &&
		strings.EqualFold(k[:len(wire.HeaderError)+1], wire.HeaderError+"-")
}

// tenantFilter is the subject filter of t's subjects for one tenant: its wildcards kept,
// {tenant} replaced.
func tenantFilter(t subjects.Template, tenant string) (string, error) {
	n := t.Wildcards()
	caps := make([]string, n)
	for i := range caps {
		caps[i] = "ADMITTERWILDCARD" + strconv.Itoa(i)
	}
	subj, err := t.Subject(tenant, caps...)
	if err != nil {
		return "", fmt.Errorf("deadletter: tenant %q: %w", tenant, err)
	}
	tail := strings.HasSuffix(t.Filter(), ">")
	toks := strings.Split(subj, ".")
	for i, tok := range toks {
		if strings.HasPrefix(tok, "ADMITTERWILDCARD") {
			toks[i] = "*"
			if tail && tok == caps[n-1] {
				toks[i] = ">"
			}
		}
	}
	return strings.Join(toks, "."), nil
}
