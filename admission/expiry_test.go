package admission

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go/jetstream"
)

// dead reads every dead letter, waiting (bounded) for n of them.
func (r *rig) dead(n int, within time.Duration) []jetstream.Msg {
	r.t.Helper()
	cons, err := r.js.OrderedConsumer(context.Background(), "DEAD", jetstream.OrderedConsumerConfig{})
	if err != nil {
		r.t.Fatal(err)
	}
	var out []jetstream.Msg
	waitFor(r.t, within, fmt.Sprintf("%d dead letters", n), func() bool {
		batch, err := cons.FetchNoWait(100)
		if err != nil {
			r.t.Fatal(err)
		}
		for m := range batch.Messages() {
			out = append(out, m)
		}
		return len(out) >= n
	})
	return out
}

// stored is when the input stream stored its message at seq.
func (r *rig) stored(seq uint64) (time.Time, error) {
	st, err := r.js.Stream(context.Background(), "JOBS")
	if err != nil {
		return time.Time{}, err
	}
	m, err := st.GetMsg(context.Background(), seq)
	if err != nil {
		return time.Time{}, err
	}
	return m.Time, nil
}

func metaOf(t *testing.T, m jetstream.Msg) *jetstream.MsgMetadata {
	t.Helper()
	meta, err := m.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	return meta
}

// TestPlanMaxWaitExpiresTheHeadOnTime: a job whose plan's max_wait runs out while it waits for
// a concurrency slot (held for a lease of a minute, which a done message may end sooner: not a
// wait known in advance) is dead-lettered expired at its deadline, not at the lease's end: the
// queue wakes for it. Its dead letter says when it arrived and what it waited for; the job
// behind it, arrived later, expires at its own deadline, after it. Before, the queue slept until
// the lease's end and forwarded both, a minute apart.
func TestPlanMaxWaitExpiresTheHeadOnTime(t *testing.T) {
	const plans = "plans: {p: {max_wait: 2s, limits: [{name: running, kind: concurrency, limit: 1, lease: 1m}]}}\ndefault_plan: p\n"
	r := startRig(t, plans, Config{})
	r.publish(1, "jobs.submit.acme.x")
	r.forwarded(1)
	r.publish(1, "jobs.submit.acme.x")
	time.Sleep(300 * time.Millisecond)
	r.publish(1, "jobs.submit.acme.y")
	dead := r.dead(2, 10*time.Second)
	for i, m := range dead {
		h := m.Headers()
		arrived, err := time.Parse(time.RFC3339Nano, h.Get(wire.HeaderErrorArrived))
		if err != nil {
			t.Fatalf("dead letter %d: %s %q: %v", i, wire.HeaderErrorArrived, h.Get(wire.HeaderErrorArrived), err)
		}
		if late := metaOf(t, m).Timestamp.Sub(arrived.Add(2 * time.Second)); late < 0 || late > time.Second {
			t.Errorf("dead letter %d stored %v after its deadline, want within [0, 1s]", i, late)
		}
		if h.Get(wire.HeaderError) != string(wire.CodeExpired) || h.Get(wire.HeaderErrorWaitedFor) != "concurrency running" {
			t.Errorf("dead letter %d: %v", i, h)
		}
	}
	if dead[0].Subject() != "jobs.dead.acme.x" || dead[1].Subject() != "jobs.dead.acme.y" {
		t.Errorf("dead letters %s, %s: want the jobs in their order", dead[0].Subject(), dead[1].Subject())
	}
	if n := r.streamMsgs("ADMITTED"); n != 1 {
		t.Errorf("%d forwarded, want 1", n)
	}
}

// TestExpiredBehindTheHeadLeavesAtItsDeadline: a job whose own Admit-Max-Wait passes while it
// waits behind its tenant's head (which waits a minute for its bucket) is dead-lettered at its
// deadline, out of its place: the head and the job behind it stay, in order, and it is removed
// from the input at once. Before, it waited behind the head until the head went.
func TestExpiredBehindTheHeadLeavesAtItsDeadline(t *testing.T) {
	const plans = "plans: {p: {limits: [{name: slow, capacity: 1, rate: 1/m}]}}\ndefault_plan: p\n"
	r := startRig(t, plans, Config{})
	r.publish(1, "jobs.submit.acme.a")
	r.forwarded(1)
	r.publish(1, "jobs.submit.acme.b")                               // seq 2: waits a minute
	r.publish(1, "jobs.submit.acme.c", wire.HeaderMaxWait, "1500ms") // seq 3: gives up after 1.5 s
	r.publish(1, "jobs.submit.acme.d")                               // seq 4
	dead := r.dead(1, 10*time.Second)
	h := dead[0].Headers()
	if dead[0].Subject() != "jobs.dead.acme.c" || h.Get(wire.HeaderError) != string(wire.CodeExpired) || h.Get(wire.HeaderErrorWaitedFor) != "bucket slow" {
		t.Fatalf("dead letter %s: %v", dead[0].Subject(), h)
	}
	arrived, _ := time.Parse(time.RFC3339Nano, h.Get(wire.HeaderErrorArrived))
	if late := metaOf(t, dead[0]).Timestamp.Sub(arrived.Add(1500 * time.Millisecond)); late < 0 || late > 1500*time.Millisecond {
		t.Errorf("dead-lettered %v after its deadline, want within [0, 1.5s]", late)
	}
	waitFor(t, 2*time.Second, "the expired job to leave the input (its dead letter is stored first)", func() bool {
		_, err := r.stored(3)
		return errors.Is(err, jetstream.ErrMsgNotFound)
	})
	for _, seq := range []uint64{2, 4} {
		if _, err := r.stored(seq); err != nil {
			t.Errorf("job %d left the input: %v", seq, err)
		}
	}
	if n := r.streamMsgs("ADMITTED"); n != 1 {
		t.Errorf("%d forwarded, want 1", n)
	}
}

// TestSpentQuotaExpiresAtOnce: a job that must wait for next month's quota, with a bound of an
// hour, is dead-lettered at once. Before, it waited the hour.
func TestSpentQuotaExpiresAtOnce(t *testing.T) {
	const plans = "plans: {p: {max_wait: 1h, limits: [{name: monthly, kind: quota, limit: 1, period: month}]}}\ndefault_plan: p\n"
	r := startRig(t, plans, Config{})
	r.publish(1, "jobs.submit.acme.x")
	r.forwarded(1)
	r.publish(1, "jobs.submit.acme.x")
	dead := r.dead(1, 5*time.Second)
	h := dead[0].Headers()
	if h.Get(wire.HeaderError) != string(wire.CodeExpired) || h.Get(wire.HeaderErrorWaitedFor) != "quota monthly" {
		t.Errorf("dead letter: %v", h)
	}
}

// TestExpiredBehindTheHeadReadsOn: with reads of 2 jobs (the queue falls behind its feed and
// reads the input by subject), the jobs whose Admit-Max-Wait passed behind the waiting head are
// all dead-lettered, not only those of the first read: a step that dead-letters some reads on.
func TestExpiredBehindTheHeadReadsOn(t *testing.T) {
	const plans = "plans: {p: {limits: [{name: slow, capacity: 1, rate: 1/m}]}}\ndefault_plan: p\n"
	r := startRig(t, plans, Config{Batch: 2})
	r.publish(1, "jobs.submit.acme.a")
	r.forwarded(1)
	r.publish(1, "jobs.submit.acme.b")                          // waits a minute
	r.publish(5, "jobs.submit.acme.c", wire.HeaderMaxWait, "1") // give up after a second
	r.publish(1, "jobs.submit.acme.d")
	dead := r.dead(5, 10*time.Second)
	for _, m := range dead {
		if m.Subject() != "jobs.dead.acme.c" || m.Headers().Get(wire.HeaderError) != string(wire.CodeExpired) {
			t.Errorf("dead letter %s: %v", m.Subject(), m.Headers())
		}
	}
	waitFor(t, 5*time.Second, "the input to hold b and d alone", func() bool { return r.streamMsgs("JOBS") == 2 })
	for _, seq := range []uint64{2, 8} {
		if _, err := r.stored(seq); err != nil {
			t.Errorf("job %d left the input: %v", seq, err)
		}
	}
}

// TestJobsOfAnEarlierHolderAreAskedFirst: a job stored before this replica took its partition may
// have been forwarded by the earlier holder (which stopped before removing it): past its bound,
// it is asked about once before it may expire, so that its forward is found or repeated (the
// output's duplicate window drops a repeat) rather than joined by a dead letter. Here the first
// fits and is forwarded; the second does not, and expires.
func TestJobsOfAnEarlierHolderAreAskedFirst(t *testing.T) {
	const plans = "plans: {p: {limits: [{name: slow, capacity: 1, rate: 1/m}]}}\ndefault_plan: p\n"
	r := newRig(t)
	r.run(plans, Config{})
	r.stop() // the streams exist; no replica holds the partition
	r.publish(2, "jobs.submit.acme.x", wire.HeaderMaxWait, "100ms")
	time.Sleep(300 * time.Millisecond) // their bound passes before any replica reads them
	r.run(plans, Config{})
	r.forwarded(1)
	dead := r.dead(1, 5*time.Second)
	if h := dead[0].Headers(); h.Get(wire.HeaderError) != string(wire.CodeExpired) || h.Get(wire.HeaderErrorWaitedFor) != "bucket slow" {
		t.Errorf("dead letter: %v", h)
	}
}
