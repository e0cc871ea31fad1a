package deadletter

import (
	"context"
	"fmt"
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
