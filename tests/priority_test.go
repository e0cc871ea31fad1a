package tests

// Priorities within a tenant (issue 40, item 1): Admit-Priority 1 goes first, 5 last, 3 when
// absent; a tenant's waiting jobs go highest priority first, FIFO within a priority, under the
// same plan; a plan's priority_aging lifts a waiting job one level per period. The assertions
// are on the order of the forwards (how many of the tenant's went before a job), not on speed.

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// publishPriority stores n jobs of tenant (payloads prefix-0 … prefix-(n-1)) with priority
// (empty: no header), in order, over one connection, and waits for every PubAck.
func (w *world) publishPriority(tenant, prefix string, n int, priority string) {
	w.t.Helper()
	js, err := jetstream.New(w.nc, jetstream.WithPublishAsyncMaxPending(1024))
	if err != nil {
		w.t.Fatal(err)
	}
	for i := range n {
		m := nats.NewMsg("jobs.submit." + tenant + ".x")
		m.Data = []byte(fmt.Sprintf("%s-%d", prefix, i))
		if priority != "" {
			m.Header.Set(wire.HeaderPriority, priority)
		}
		if _, err := js.PublishMsgAsync(m, jetstream.WithStallWait(10*time.Second)); err != nil {
			w.t.Fatalf("publish %s-%d: %v", prefix, i, err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		w.t.Fatalf("%d PubAcks missing after 30s", js.PublishAsyncPending())
	}
}

// payloads are the payloads of jobs, in order.
func payloads(jobs []job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.payload
	}
	return out
}

// forwardedAt waits (bounded) until payload is forwarded, and returns the forwards then and
// its index among them (-1: not forwarded within timeout).
func (w *world) forwardedAt(payload string, timeout time.Duration) ([]job, int) {
	w.t.Helper()
	var got []job
	at := -1
	for deadline := time.Now().Add(timeout); at < 0 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		got = w.readAll("ADMITTED")
		at = slices.Index(payloads(got), payload)
	}
	return got, at
}

// paced checks that the tenant's forwards in jobs kept its plan's bucket (capacity, rate per
// second): never more than capacity + rate·t (+1 for the clocks) within any span t between two of them.
func paced(t *testing.T, jobs []job, capacity, rate float64) {
	t.Helper()
	for i := range jobs {
		for k := i + 1; k < len(jobs); k++ {
			span := jobs[k].stored.Sub(jobs[i].stored).Seconds()
			if n := float64(k - i + 1); n > capacity+rate*span+1 {
				t.Fatalf("%v forwards within %.3fs (forwards %d to %d): the plan (capacity %v, %v/s) was not kept", n, span, i, k, capacity, rate)
			}
		}
	}
}

// TestAPriorityOneJobOvertakesItsTenantsBacklog: a job with Admit-Priority: 1 published behind
// 10,000 waiting jobs of its tenant (no header: priority 3) is forwarded at the plan's next
// slots for the tenant (within 20 forwards, a second at 20/s: the feed reaches it through the
// backlog, the queue's next step reads it), and the plan is kept. Before, it waited its turn
// behind the 10,000 (issue 40: behind 300, still waiting 20 s later).
func TestAPriorityOneJobOvertakesItsTenantsBacklog(t *testing.T) {
	t.Parallel()
	const backlog, rate = 10_000, 20
	w := newWorld(t, fmt.Sprintf("plans: {p: {limits: [{capacity: 1, rate: %d/s}]}}\ndefault_plan: p\n", rate))
	w.start()
	w.publishPriority("acme", "bulk", backlog, "")
	w.read("ADMITTED", 5, 20*time.Second)
	before := len(w.readAll("ADMITTED"))
	w.publish("jobs.submit.acme.reset", "urgent", wire.HeaderPriority, "1")
	got, at := w.forwardedAt("urgent", 10*time.Second)
	if at < 0 {
		t.Fatalf("the priority-1 job is not forwarded 10s after it was published (%d of the backlog forwarded meanwhile)", len(got)-before)
	}
	t.Logf("the priority-1 job was forwarded %d forwards after it was published (%d before it)", at-before, before)
	if at-before > 20 {
		t.Errorf("the priority-1 job was forwarded after %d forwards of its tenant's backlog, want at most 20", at-before)
	}
	paced(t, got, 1, rate)
	for i, p := range slices.DeleteFunc(payloads(got), func(p string) bool { return p == "urgent" }) {
		if want := fmt.Sprintf("bulk-%d", i); p != want {
			t.Fatalf("forward %d of the backlog is %s, want %s: FIFO within a priority", i, p, want)
		}
	}
}

// TestAgingLiftsAStarvedLowPriorityJob: a priority-5 job is published behind 4 of priority 3,
// and more arrive for 4 s at 20/s, twice what the plan forwards (10/s): without aging the priority-5 job
// waits while its tenant has higher work, and goes last. Under the same plan with
// priority_aging: 1s every waiting job rises a level a second: two seconds in, the priority-5
// job ranks with the priority-3 jobs that just arrived, ahead of them, and goes well before the
// last. Before, it went first (FIFO).
func TestAgingLiftsAStarvedLowPriorityJob(t *testing.T) {
	t.Parallel()
	const arriving, ahead, every = 80, 4, 50 * time.Millisecond
	w := newWorld(t, `plans:
  aged: {priority_aging: 1s, limits: [{capacity: 1, rate: 10/s}]}
  flat: {limits: [{capacity: 1, rate: 10/s}]}
tenants: {acme: aged, bob: flat}
`)
	w.start()
	for i := range arriving {
		if i == ahead { // a backlog waits already: the priority-5 job is never alone at the head
			for _, tn := range []string{"acme", "bob"} {
				w.publish("jobs.submit."+tn+".x", tn+"-low", wire.HeaderPriority, "5")
			}
		}
		for _, tn := range []string{"acme", "bob"} {
			w.publish("jobs.submit."+tn+".x", fmt.Sprintf("%s-%d", tn, i))
		}
		if i >= ahead {
			time.Sleep(every)
		}
	}
	all := w.read("ADMITTED", 2*(arriving+1), 30*time.Second)
	of := func(tn string) (out []string, low time.Duration) {
		var first time.Time
		for _, j := range all {
			if j.header.Get(wire.HeaderTenant) != tn {
				continue
			}
			if first.IsZero() {
				first = j.stored
			}
			if j.payload == tn+"-low" {
				low = j.stored.Sub(first)
			}
			out = append(out, j.payload)
		}
		return out, low
	}
	acme, after := of("acme")
	bob, _ := of("bob")
	if at := slices.Index(bob, "bob-low"); at != arriving {
		t.Errorf("without aging the priority-5 job went at %d of %d, want last (%d)", at, len(bob), arriving)
	}
	at := slices.Index(acme, "acme-low")
	t.Logf("with priority_aging: 1s the priority-5 job went after %d of the %d priority-3 jobs, %v after the tenant's first forward", at, arriving, after)
	if at < 1 || at > arriving/2+10 {
		t.Errorf("with priority_aging: 1s the priority-5 job went at %d of %d, want after some (it waited) and by the %dth (lifted two seconds in)", at, len(acme), arriving/2+10)
	}
}

// TestPriorityOrderSurvivesATakeover: behind a priority-5 job and 300 of priority 3, a
// priority-1 job is forwarded at once; a second replica starts, the first is killed, and a
// second priority-1 job is published. The second replica takes the partitions over, rebuilds
// its index from each partition's first job, and forwards the second priority-1 job at its
// first slots, the priority-3 jobs in order and the priority-5 job last: every job once (the
// first priority-1 job, forwarded out of its place, is not forwarded again).
func TestPriorityOrderSurvivesATakeover(t *testing.T) {
	t.Parallel()
	const backlog, rate, parts = 300, 50, 2
	w := newPartitionedWorld(t, fmt.Sprintf("plans: {p: {limits: [{capacity: 1, rate: %d/s}]}}\ndefault_plan: p\n", rate), parts)
	first := w.start()
	w.publish("jobs.submit.acme.x", "low", wire.HeaderPriority, "5")
	w.publishPriority("acme", "bulk", backlog, "3")
	w.publish("jobs.submit.acme.x", "urgent", wire.HeaderPriority, "1")
	if _, at := w.forwardedAt("urgent", 10*time.Second); at < 0 || at > 20 {
		t.Fatalf("the first priority-1 job forwarded at %d, want within the first 20", at)
	}
	env, metrics := metricsPort(t)
	w.start(env)
	waitFor(t, 20*time.Second, "the second replica to run", func() bool { return partitionsHeld(t, metrics) >= 0 })
	first.kill()
	killed := len(w.readAll("ADMITTED"))
	w.publish("jobs.submit.acme.x", "urgent-2", wire.HeaderPriority, "1")
	waitFor(t, 20*time.Second, "the second replica to hold every partition", func() bool { return partitionsHeld(t, metrics) == parts })
	got := w.read("ADMITTED", backlog+3, 40*time.Second)
	seen := map[string]int{}
	for _, p := range payloads(got) {
		seen[p]++
	}
	for p, n := range seen {
		if n > 1 {
			t.Errorf("%s forwarded %d times, want once", p, n)
		}
	}
	ps := payloads(got)
	at := slices.Index(ps, "urgent-2")
	t.Logf("the second priority-1 job went %d forwards after the kill; the priority-5 job at %d of %d", at-killed, slices.Index(ps, "low"), len(ps))
	if at < 0 || at-killed > 20 {
		t.Errorf("the second priority-1 job went %d forwards after the kill, want within 20", at-killed)
	}
	if ps[len(ps)-1] != "low" {
		t.Errorf("the last forward is %s, want the priority-5 job", ps[len(ps)-1])
	}
	bulk := slices.DeleteFunc(slices.Clone(ps), func(p string) bool { return p == "low" || p == "urgent" || p == "urgent-2" })
	for i, p := range bulk {
		if want := fmt.Sprintf("bulk-%d", i); p != want {
			t.Fatalf("forward %d of the priority-3 jobs is %s, want %s", i, p, want)
		}
	}
}
