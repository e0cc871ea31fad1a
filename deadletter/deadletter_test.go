package deadletter

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/admitter/admitter/internal/testenv"
	"github.com/admitter/admitter/subjects"
	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var (
	in   = subjects.MustParse("jobs.submit.{tenant}.>")
	dead = subjects.MustParse("jobs.dead.{tenant}.>")
)

// setup starts a JetStream server with the input and dead streams as the admitter makes them,
// and dead letters: for tenant t<i%3>, code c<i%2>, payload "p<i>".
func setup(t *testing.T, letters int) (*Store, jetstream.JetStream) {
	t.Helper()
	srv := testenv.StartNATS(t)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "JOBS", Subjects: []string{in.Filter()}, Retention: jetstream.WorkQueuePolicy, Duplicates: 2 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "DEAD", Subjects: []string{dead.Filter()}, MaxAge: 14 * 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	for i := range letters {
		m := nats.NewMsg(fmt.Sprintf("jobs.dead.t%d.email.send", i%3))
		m.Data = []byte(fmt.Sprint("p", i))
		m.Header.Set(wire.HeaderError, fmt.Sprint("c", i%2))
		m.Header.Set(wire.HeaderErrorDetail, fmt.Sprint("detail ", i))
		m.Header.Set(nats.MsgIdHdr, wire.MsgID(wire.KindDead, "JOBS", uint64(i+1)))
		m.Header.Set("X-Mine", "kept")
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	s, err := Open(ctx, Config{JetStream: js, In: in, Dead: dead})
	if err != nil {
		t.Fatal(err)
	}
	return s, js
}

func TestList(t *testing.T) {
	s, _ := setup(t, 30)
	ctx := context.Background()
	all, stats, err := s.List(ctx, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 30 || all[0].Seq != 30 || all[29].Seq != 1 || stats.Total != 30 || stats.Scanned != 30 {
		t.Fatalf("all: %d letters, first %d, stats %+v", len(all), all[0].Seq, stats)
	}
	if l := all[0]; l.Tenant != "t2" || l.Input != "jobs.submit.t2.email.send" || l.Code != "c1" || l.Detail != "detail 29" || l.Size != 3 || l.Header.Get("X-Mine") != "kept" {
		t.Errorf("newest letter: %+v", l)
	}
	got, _, _ := s.List(ctx, Filter{Tenant: "t1", Code: "c0", Limit: 3})
	var seqs []uint64
	for _, l := range got {
		seqs = append(seqs, l.Seq)
		if l.Tenant != "t1" || l.Code != "c0" {
			t.Errorf("filtered listing has %s/%s", l.Tenant, l.Code)
		}
	}
	// t1 and c0: i%3 == 1 and i%2 == 0, i = 4, 10, 16, 22, 28: seq 29, 23, 17 are the newest three.
	if fmt.Sprint(seqs) != "[29 23 17]" {
		t.Errorf("tenant t1, code c0, limit 3: %v, want [29 23 17]", seqs)
	}
	// Scan bounds the work: only the newest 6 are looked at.
	got, stats, _ = s.List(ctx, Filter{Scan: 6})
	if len(got) != 6 || stats.Scanned != 6 || got[5].Seq != 25 {
		t.Errorf("scan 6: %d letters (oldest %d), scanned %d", len(got), got[len(got)-1].Seq, stats.Scanned)
	}
}

// TestReplayExactlyOnce: a dead letter replayed goes to its input subject once with its payload
// and headers, without the reason; replayed again (also concurrently, and after its record is
// lost within the duplicate window) it is not published again.
func TestReplayExactlyOnce(t *testing.T) {
	s, js := setup(t, 3)
	ctx := context.Background()
	res := s.Replay(ctx, []uint64{2}, "test", true)
	if res[0].Outcome != WouldReplay || res[0].Input != "jobs.submit.t1.email.send" {
		t.Fatalf("dry run: %+v", res[0])
	}
	if n := msgs(t, js, "JOBS"); n != 0 {
		t.Fatalf("a dry run published %d", n)
	}
	var wg sync.WaitGroup
	results := make([][]Result, 4)
	for i := range results {
		wg.Go(func() { results[i] = s.Replay(ctx, []uint64{2}, fmt.Sprint("replayer ", i), false) })
	}
	wg.Wait()
	replayed := 0
	for _, r := range results {
		switch r[0].Outcome {
		case Replayed:
			replayed++
		case AlreadyDone:
		default:
			t.Errorf("concurrent replay: %+v", r[0])
		}
	}
	if replayed < 1 || msgs(t, js, "JOBS") != 1 {
		t.Fatalf("%d replays reported, %d jobs on the input; want the job once", replayed, msgs(t, js, "JOBS"))
	}
	st, _ := js.Stream(ctx, "JOBS")
	m, err := st.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Data) != "p1" || m.Subject != "jobs.submit.t1.email.send" || m.Header.Get("X-Mine") != "kept" ||
		m.Header.Get(wire.HeaderError) != "" || m.Header.Get(wire.HeaderReplayOf) != "DEAD:2" || m.Header.Get(nats.MsgIdHdr) != "admitter:r:DEAD:2" {
		t.Errorf("replayed job: %s %q %v", m.Subject, m.Data, m.Header)
	}
	// Again: already replayed, with the record.
	if r := s.Replay(ctx, []uint64{2}, "again", false)[0]; r.Outcome != AlreadyDone || r.Replay == nil || r.Replay.InputSeq != 1 {
		t.Errorf("second replay: %+v", r)
	}
	// The record lost (a crash between the PubAck and the record): the duplicate window drops it.
	if err := s.replays.Purge(ctx, "2"); err != nil {
		t.Fatal(err)
	}
	if r := s.Replay(ctx, []uint64{2}, "after a crash", false)[0]; r.Outcome != Replayed || !r.Replay.Duplicate {
		t.Errorf("replay after the record was lost: %+v", r)
	}
	if n := msgs(t, js, "JOBS"); n != 1 {
		t.Errorf("%d jobs on the input after three replays, want 1", n)
	}
	// The listing shows the replay.
	all, _, _ := s.List(ctx, Filter{})
	if all[1].Seq != 2 || all[1].Replay == nil || all[0].Replay != nil {
		t.Errorf("listing after the replay: %+v / %+v", all[1].Replay, all[0].Replay)
	}
	if r := s.Replay(ctx, []uint64{99}, "x", false)[0]; r.Outcome != NotReplayable {
		t.Errorf("replay of a missing sequence: %+v", r)
	}
}

func msgs(t *testing.T, js jetstream.JetStream, stream string) uint64 {
	t.Helper()
	st, err := js.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	return st.CachedInfo().State.Msgs
}

func TestTenantFilter(t *testing.T) {
	for _, c := range []struct{ tmpl, tenant, want string }{
		{"jobs.dead.{tenant}.>", "acme", "jobs.dead.acme.>"},
		{"dead.*.{tenant}.x.>", "bob", "dead.*.bob.x.>"},
		{"dead.{tenant}.*", "c", "dead.c.*"},
		{"dead.{tenant}", "c", "dead.c"},
	} {
		got, err := tenantFilter(subjects.MustParse(c.tmpl), c.tenant)
		if err != nil || got != c.want {
			t.Errorf("tenantFilter(%q, %q) = %q, %v; want %q", c.tmpl, c.tenant, got, err, c.want)
		}
	}
}

// TestReplayEdited: a dead letter replayed with its headers changed reaches the input with
// every spelling of a set header replaced and of a dropped one removed; its record says what
// was set and which of the dropped headers it had. An edit that does not validate publishes
// nothing.
func TestReplayEdited(t *testing.T) {
	s, js := setup(t, 0)
	ctx := context.Background()
	m := nats.NewMsg("jobs.dead.acme.email.send")
	m.Data = []byte("mend me")
	m.Header.Set(wire.HeaderError, string(wire.CodeInvalidWeight))
	m.Header.Set(wire.HeaderErrorDetail, `Admit-Weight "abc" is not an integer`)
	m.Header["admit-weight"] = []string{"abc"}
	m.Header.Set("X-Bad", "1")
	m.Header.Set("X-Mine", "kept")
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReplayEdited(ctx, []uint64{1}, "test", Edit{Set: map[string]string{"Nats-Msg-Id": "x"}}, false); !errors.Is(err, ErrEdit) {
		t.Fatalf("an edit of Nats-Msg-Id: %v, want ErrEdit", err)
	}
	if n := msgs(t, js, "JOBS"); n != 0 {
		t.Fatalf("a refused edit published %d", n)
	}
	e := Edit{Set: map[string]string{"Admit-Weight": "2"}, Drop: []string{"x-bad", "X-Absent"}}
	res, err := s.ReplayEdited(ctx, []uint64{1}, "test", e, false)
	if err != nil || len(res) != 1 || res[0].Outcome != Replayed {
		t.Fatalf("replay: %+v, %v", res, err)
	}
	st, _ := js.Stream(ctx, "JOBS")
	got, err := st.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := nats.Header{"Admit-Weight": {"2"}, "X-Mine": {"kept"}, nats.MsgIdHdr: {"admitter:r:DEAD:1"}, wire.HeaderReplayOf: {"DEAD:1"}}
	if fmt.Sprint(got.Header) != fmt.Sprint(want) || string(got.Data) != "mend me" {
		t.Errorf("replayed job: %q %v, want %v", got.Data, got.Header, want)
	}
	wantEdit := Edit{Set: map[string]string{"Admit-Weight": "2"}, Drop: []string{"x-bad"}}
	if rec := res[0].Replay; rec == nil || fmt.Sprint(rec.Edit) != fmt.Sprint(wantEdit) {
		t.Errorf("the result's record: %+v, want edit %v", rec, wantEdit)
	}
	l, _, err := s.Get(ctx, 1)
	if err != nil || l.Replay == nil || l.Replay.Edit.String() != "set Admit-Weight=2; drop x-bad" {
		t.Errorf("the stored record: %+v, %v; want edit \"set Admit-Weight=2; drop x-bad\"", l.Replay, err)
	}
	// Without an edit, the record has none.
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	if r := s.Replay(ctx, []uint64{2}, "test", false)[0]; r.Outcome != Replayed || !r.Replay.Edit.IsZero() {
		t.Errorf("plain replay: %+v", r)
	}
}

func TestEditValidate(t *testing.T) {
	for _, c := range []struct {
		e    Edit
		want string // "" valid, else a part of the error
	}{
		{Edit{}, ""},
		{Edit{Set: map[string]string{"Admit-Weight": "2", "X-Empty": ""}, Drop: []string{"X-Old"}}, ""},
		{Edit{Set: map[string]string{"X-Tab": "a\tb", "X-Eq": "a=b"}}, ""},
		{Edit{Set: map[string]string{"Nats-Msg-Id": "x"}}, "Nats-Msg-Id: Nats-* headers are directives to the NATS server"},
		{Edit{Drop: []string{"nats-expected-stream"}}, "nats-expected-stream: Nats-* headers"},
		{Edit{Set: map[string]string{"Admit-Replay-Of": "DEAD:1"}}, "Admit-Replay-Of names the dead letter"},
		{Edit{Drop: []string{"admit-replay-of"}}, "admit-replay-of names the dead letter"},
		{Edit{Drop: []string{"Admit-Error"}}, "Admit-Error says why the job was dead-lettered"},
		{Edit{Set: map[string]string{"Admit-Error-Detail": "x"}}, "Admit-Error-Detail says why"},
		{Edit{Drop: []string{"admit-error-waited-for"}}, "admit-error-waited-for says why"},
		{Edit{Set: map[string]string{"Admit-Error-Arrived": "x"}}, "Admit-Error-Arrived says why"},
		{Edit{Drop: []string{"Admit-Max-Wait"}, Set: map[string]string{"Admit-Errors": "1"}}, ""},
		{Edit{Set: map[string]string{"": "x"}}, "empty header name"},
		{Edit{Drop: []string{"X Bad"}}, `header name "X Bad": ' ' at byte 1`},
		{Edit{Set: map[string]string{"X:Y": "1"}}, `header name "X:Y": ':' at byte 1`},
		{Edit{Set: map[string]string{"X-A": "a\r\nNats-Msg-Id: x"}}, `header X-A: its value holds the control character '\r' at byte 1`},
		{Edit{Set: map[string]string{"Admit-Weight": "2", "admit-weight": "3"}}, "named twice"},
		{Edit{Set: map[string]string{"X-A": "1"}, Drop: []string{"x-a"}}, "header x-a is named twice (as X-A and x-a"},
		{Edit{Drop: []string{"X-A", "X-A"}}, "named twice"},
	} {
		err := c.e.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v, want valid", c.e, err)
		case c.want != "" && (err == nil || !errors.Is(err, ErrEdit) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: %v, want ErrEdit saying %q", c.e, err, c.want)
		}
	}
}

func TestParseSetHeader(t *testing.T) {
	for _, c := range []struct{ in, name, value, err string }{
		{"Admit-Weight=2", "Admit-Weight", "2", ""},
		{"X-Query=a=b", "X-Query", "a=b", ""},
		{"X-Empty=", "X-Empty", "", ""},
		{"Admit-Weight", "", "", `"Admit-Weight" is not Name=Value`},
		{"=2", "", "", "empty header name"},
		{"Nats-Msg-Id=x", "", "", "Nats-* headers"},
		{"Admit-Replay-Of=DEAD:3", "", "", "the replay sets it"},
	} {
		name, value, err := ParseSetHeader(c.in)
		if c.err != "" {
			if err == nil || !errors.Is(err, ErrEdit) || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: %q %q %v, want an error saying %q", c.in, name, value, err, c.err)
			}
			continue
		}
		if err != nil || name != c.name || value != c.value {
			t.Errorf("%q: %q %q %v, want %q %q", c.in, name, value, err, c.name, c.value)
		}
	}
}

// TestReplayHeaderDropsTheReason: a replay carries the job's own headers (Admit-Max-Wait
// included: its bound counts again from the replay's store), not the dead letter's reasons
// (Admit-Error and every Admit-Error-*, in any case) nor the server's.
func TestReplayHeaderDropsTheReason(t *testing.T) {
	h := nats.Header{"Admit-Error": {"expired"}, "Admit-Error-Detail": {"it waited"}, "Admit-Error-Arrived": {"2026-01-01T00:00:00Z"},
		"Admit-Error-Waited-For": {"quota monthly"}, "admit-error": {"x"}, "Admit-Max-Wait": {"30s"}, "Admit-Errors": {"kept"},
		"Nats-Msg-Id": {"admitter:d:JOBS:3"}, "Admit-Replay-Of": {"DEAD:1"}}
	got := replayHeader(h, "DEAD", 7)
	want := nats.Header{"Admit-Max-Wait": {"30s"}, "Admit-Errors": {"kept"}, "Nats-Msg-Id": {"admitter:r:DEAD:7"}, "Admit-Replay-Of": {"DEAD:7"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("replayed headers %v, want %v", got, want)
	}
}
