package tests

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestTooLargeJobIsRefusedAtPublish: on an input stream the admitter made, a job too large to be
// forwarded with the admitter's headers is refused when the producer publishes it.
func TestTooLargeJobIsRefusedAtPublish(t *testing.T) {
	w := newWorld(t, "plans: {p: {limits: [{capacity: 5, rate: 5/s}]}}\ndefault_plan: p\n")
	w.start()
	m := nats.NewMsg("jobs.submit.acme.big")
	m.Data = make([]byte, int(w.nc.MaxPayload())-200)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := w.js.PublishMsg(ctx, m)
	var api *jetstream.APIError
	if !errors.As(err, &api) || api.ErrorCode != 10054 {
		t.Fatalf("publish of a job %d bytes under the maximum payload: %v, want the stream's refusal (message size exceeds maximum)", 200, err)
	}
	small := nats.NewMsg("jobs.submit.acme.small")
	small.Data = make([]byte, int(w.nc.MaxPayload())-8<<10)
	if _, err := w.js.PublishMsg(ctx, small); err != nil {
		t.Fatalf("a job with room for the headers is refused: %v", err)
	}
	w.read("ADMITTED", 1, 10*time.Second)
}

// TestTooLargeJobIsDeadLettered: on an input stream made by someone else without a size limit, a
// job that could never be forwarded (a few bytes under the maximum payload; with the admitter's
// headers it is over) is dead-lettered once, as too-large, with its size and input sequence; the
// dead letter cannot carry the payload either and says so. It is not redelivered for ever.
func TestTooLargeJobIsDeadLettered(t *testing.T) {
	w := newWorld(t, "plans: {p: {limits: [{capacity: 5, rate: 5/s}]}}\ndefault_plan: p\n")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := w.js.CreateStream(ctx, jetstream.StreamConfig{Name: "JOBS", Subjects: []string{"jobs.submit.>"}, Retention: jetstream.WorkQueuePolicy}); err != nil {
		t.Fatal(err)
	}
	w.start()
	m := nats.NewMsg("jobs.submit.acme.big")
	m.Data = make([]byte, int(w.nc.MaxPayload())-100)
	ack, err := w.js.PublishMsg(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	w.publish("jobs.submit.acme.after", "small") // the next job is not held behind it
	dead := w.read("DEAD", 1, 10*time.Second)
	h := dead[0].header
	if h.Get(wire.HeaderError) != string(wire.CodeTooLarge) {
		t.Fatalf("dead letter %s: %s", h.Get(wire.HeaderError), h.Get(wire.HeaderErrorDetail))
	}
	detail := h.Get(wire.HeaderErrorDetail)
	for _, want := range []string{"maximum payload", "payload", "left out", "sequence", "JOBS"} {
		if !strings.Contains(detail, want) {
			t.Errorf("the detail %q does not say %q", detail, want)
		}
	}
	if len(dead[0].payload) != 0 {
		t.Errorf("the dead letter carries %d bytes", len(dead[0].payload))
	}
	w.read("ADMITTED", 1, 10*time.Second)
	waitFor(t, 10*time.Second, "the input to be settled", func() bool { return w.streamMsgs("JOBS") == 0 })
	t.Logf("input %d dead-lettered: %s", ack.Sequence, detail)
}

// TestDuplicateWindowCoversTheAckWait: the streams the admitter publishes to must recognise a
// publish repeated after the ack wait. Made by the admitter, their window is sized to it; made by
// someone else too short, the admitter refuses to start and says what to change; configured too
// short, check-config says so.
func TestDuplicateWindowCoversTheAckWait(t *testing.T) {
	w := newWorld(t, "plans: {p: {limits: [{capacity: 5, rate: 5/s}]}}\ndefault_plan: p\n")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p := w.start("ADMITTER_ACK_WAIT=5m")
	for _, name := range []string{"ADMITTED", "DEAD", "WAITING"} {
		st, err := w.js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if d := st.CachedInfo().Config.Duplicates; d < 5*time.Minute+30*time.Second {
			t.Errorf("stream %s made with a duplicate window of %v under an ack wait of 5m", name, d)
		}
	}
	p.kill()

	w2 := newWorld(t, "plans: {p: {limits: [{capacity: 5, rate: 5/s}]}}\ndefault_plan: p\n")
	if _, err := w2.js.CreateStream(ctx, jetstream.StreamConfig{Name: "ADMITTED", Subjects: []string{"jobs.admitted.>"}, Duplicates: 2 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runBinary(t, append(w2.env(), "ADMITTER_ACK_WAIT=5m"))
	if code == 0 || !strings.Contains(stderr, "duplicate window of 2m0s") || !strings.Contains(stderr, "5m30s") || !strings.Contains(stderr, "ADMITTER_ACK_WAIT") {
		t.Errorf("start beside a stream with too short a window: exit %d\n%s", code, stderr)
	}
	code, _, stderr = runBinary(t, append(w2.env(), "ADMITTER_ACK_WAIT=5m", "ADMITTER_DUPLICATE_WINDOW=2m"), "check-config")
	if code != 2 || !strings.Contains(stderr, "ADMITTER_DUPLICATE_WINDOW") || !strings.Contains(stderr, "ADMITTER_ACK_WAIT") {
		t.Errorf("check-config with a window shorter than the ack wait: exit %d, %q", code, stderr)
	}
}
