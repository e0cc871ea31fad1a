package tests

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/admitter/admitter/internal/testenv"
	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The tests of this file hold the invariants of where a waiting job waits (README): pacing is an
// upper bound downstream through crashes, a tenant within its plan is not slowed by another's
// backlog, waiting payloads are not held in the admitter's memory, and a full output stream is
// backpressure, not a reason to dead-letter.

// publishMany stores n jobs on subject as fast as JetStream takes them, each with payload
// prefix-i (padded to size bytes when size > 0), and waits for every PubAck.
func (w *world) publishMany(subject, prefix string, n, size int) {
	w.t.Helper()
	js, err := jetstream.New(w.nc, jetstream.WithPublishAsyncMaxPending(1024))
	if err != nil {
		w.t.Fatal(err)
	}
	for i := range n {
		data := []byte(fmt.Sprintf("%s-%d", prefix, i))
		if size > len(data) {
			data = append(data, make([]byte, size-len(data))...)
		}
		if _, err := js.PublishAsync(subject, data, jetstream.WithStallWait(10*time.Second)); err != nil {
			w.t.Fatalf("publish %s: %v", subject, err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(60 * time.Second):
		w.t.Fatalf("%d PubAcks missing after 60s", js.PublishAsyncPending())
	}
}

// arrivals returns, for one tenant, the times ADMITTED stored its forwarded jobs, in order, and
// fails the test if a payload arrived twice.
func arrivals(t *testing.T, jobs []job, tenant string) []time.Time {
	t.Helper()
	var times []time.Time
	seen := map[string]bool{}
	for _, j := range jobs {
		if j.header.Get("Admit-Tenant") != tenant {
			continue
		}
		if seen[j.payload] {
			t.Fatalf("tenant %s: job %.40q forwarded twice", tenant, j.payload)
		}
		seen[j.payload] = true
		times = append(times, j.stored)
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	return times
}

// TestQuietTenantIsNotHeldBehindABacklog: one tenant has a backlog of 2,000 jobs; another
// tenant, within its own plan, still gets every job forwarded promptly.
func TestQuietTenantIsNotHeldBehindABacklog(t *testing.T) {
	w := newWorld(t, `
plans:
  slow: {limits: [{capacity: 5, rate: 5/s}]}
  fast: {limits: [{capacity: 10, rate: 20/s}]}
tenants: {noisy: slow, quiet: fast}
`)
	// A backlog of 2,000 jobs, 100 times a step's batch.
	w.start("ADMITTER_WORKERS=16")
	w.publishMany("jobs.submit.noisy.batch", "noisy", 2000, 0)
	time.Sleep(time.Second) // the backlog is in place and being paced

	const n = 40
	sent := map[string]time.Time{}
	for i := range n { // 20/s: within the quiet tenant's plan
		p := fmt.Sprint("quiet-", i)
		sent[p] = time.Now()
		w.publish("jobs.submit.quiet.email", p)
		time.Sleep(50 * time.Millisecond)
	}
	var got []job
	waitFor(t, 20*time.Second, fmt.Sprintf("%d quiet jobs forwarded", n), func() bool {
		got = got[:0]
		for _, j := range w.readAll("ADMITTED") {
			if j.header.Get("Admit-Tenant") == "quiet" {
				got = append(got, j)
			}
		}
		return len(got) >= n
	})
	var lat []time.Duration
	for _, j := range got {
		lat = append(lat, j.stored.Sub(sent[j.payload]))
	}
	slices.Sort(lat)
	t.Logf("quiet tenant beside a 2,000-job backlog: publish→forward p50 %v, max %v", lat[len(lat)/2], lat[len(lat)-1])
	// The product promises 1s at p99 (measured in make bench); 3s here absorbs a loaded CI box.
	if lat[len(lat)-1] > 3*time.Second {
		t.Fatalf("a quiet job waited %v behind another tenant's backlog", lat[len(lat)-1])
	}
}

// TestCrashDoesNotBecomeABurst kills the admitter while it paces a backlog and restarts it at
// once: forwarding resumes within 5s, and in no interval does the tenant get more than C + r·t
// (slack: one job, for the time between a decision and the store of its forward).
func TestCrashDoesNotBecomeABurst(t *testing.T) {
	const capacity, rate, n = 10, 20.0, 300
	w := newWorld(t, `
plans: {p: {limits: [{capacity: 10, rate: 20/s}]}}
default_plan: p
`)
	p := w.start()
	w.publishMany("jobs.submit.acme.work", "job", n, 0)
	first := w.read("ADMITTED", 1, 20*time.Second)[0].stored
	for time.Since(first) < 3*time.Second {
		time.Sleep(50 * time.Millisecond)
	}
	p.kill()
	killed := time.Now()
	before := len(w.readAll("ADMITTED"))
	w.start()
	got := w.read("ADMITTED", n, 60*time.Second)
	times := arrivals(t, got, "acme")
	if len(times) != n {
		t.Fatalf("forwarded %d jobs, want %d", len(times), n)
	}
	var resumed time.Time
	for _, at := range times {
		if at.After(killed) {
			resumed = at
			break
		}
	}
	t.Logf("killed after %d of %d forwarded; first forward %v after the kill", before, n, resumed.Sub(killed))
	if resumed.Sub(killed) > 5*time.Second {
		t.Errorf("forwarding resumed %v after the crash, want within 5s", resumed.Sub(killed))
	}
	if e, from, to := worstWindow(times, capacity, rate); e > 1 {
		t.Fatalf("pacing bound broken by %.1f jobs in [%v, %v] (+%v after the kill): %d forwarded there",
			e, from.Sub(killed), to.Sub(killed), to.Sub(from), countBetween(times, from, to))
	}
}

// TestFullOutputStreamIsBackpressure: the output stream is a work queue capped at 50 jobs that
// refuses new ones when full, drained by a slower downstream. Every job is forwarded exactly
// once, none is dead-lettered, and the admitter says it is held back.
func TestFullOutputStreamIsBackpressure(t *testing.T) {
	t.Parallel()
	w := newWorld(t, `
plans: {big: {limits: [{capacity: 1000, rate: 1000/s}]}}
default_plan: big
`)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := w.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "ADMITTED", Subjects: []string{"jobs.admitted.>"}, Retention: jetstream.WorkQueuePolicy,
		MaxMsgs: 50, Discard: jetstream.DiscardNew, Duplicates: 2 * time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	p := w.start(fmt.Sprintf("ADMITTER_HTTP_ADDR=127.0.0.1:%d", port))
	const n = 150
	w.publishMany("jobs.submit.acme.work", "job", n, 0)

	// Downstream: 100 jobs/s, starting once the stream is full and the admitter holds the rest.
	waitFor(t, 10*time.Second, "the output stream to fill", func() bool { return w.streamMsgs("ADMITTED") == 50 })
	notReady, blocked := false, 0.0
	waitFor(t, 10*time.Second, "the admitter to say it is held back", func() bool {
		if code, _ := httpGet(t, base+"/readyz"); code == 503 {
			notReady = true
		}
		_, body := httpGet(t, base+"/metrics")
		blocked = metricValue(body, wire.MetricOutputBlocked.Prom)
		return notReady && blocked == 1
	})
	cons, err := out.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "worker", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	received := map[string]int{}
	deadline := time.Now().Add(40 * time.Second)
	for len(received) < n && time.Now().Before(deadline) {
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			received[string(m.Data())]++
			_ = m.Ack()
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(received) != n {
		t.Fatalf("downstream received %d distinct jobs, want %d", len(received), n)
	}
	for k, c := range received {
		if c != 1 {
			t.Fatalf("job %s received %d times", k, c)
		}
	}
	if d := w.readAll("DEAD"); len(d) != 0 {
		t.Fatalf("%d jobs dead-lettered for a full output stream (first: %s %s)", len(d), d[0].header.Get("Admit-Error"), d[0].header.Get("Admit-Error-Detail"))
	}
	if !notReady || blocked != 1 {
		t.Errorf("while the output stream was full: /readyz not-ready %v, admitter_output_blocked %v; want 503 and 1", notReady, blocked)
	}
	if c := strings.Count(p.logs.String(), "output stream full"); c != 1 {
		t.Errorf("'output stream full' logged %d times for one episode, want once", c)
	}
	waitFor(t, 10*time.Second, "/readyz to answer 200 once the output stream takes jobs again", func() bool {
		code, _ := httpGet(t, base+"/readyz")
		return code == 200
	})
}

// TestWaitingPayloadsStayInJetStream: jobs of 64 KiB wait for one tenant, first 2,000 (125 MiB)
// then 4,000 more (375 MiB in all). The admitter's resident memory does not grow with them: the
// payloads wait in JetStream. Measured on a build without the race detector, with the default
// settings, against the product's bound of 256 MiB.
func TestWaitingPayloadsStayInJetStream(t *testing.T) {
	t.Parallel()
	w := newWorld(t, `
plans: {slow: {limits: [{capacity: 5, rate: 5/s}]}}
default_plan: slow
`)
	p := w.startBinary(plainBinary(t))
	absorbed := func(n uint64) {
		waitFor(t, 60*time.Second, fmt.Sprintf("%d jobs waiting or forwarded", n), func() bool {
			return w.streamMsgs("JOBS")+w.streamMsgs("ADMITTED") >= n
		})
	}
	w.publishMany("jobs.submit.acme.big", "big", 2000, 64<<10)
	absorbed(2000)
	first := peakRSS(t, p)
	w.publishMany("jobs.submit.acme.big", "more", 4000, 64<<10)
	absorbed(6000)
	time.Sleep(time.Second)
	peak := peakRSS(t, p)
	t.Logf("admitter peak RSS: %d MiB with 125 MiB of payloads waiting, %d MiB with 375 MiB", first>>20, peak>>20)
	// Jobs in hand (a step's read) take up to their budget, so the peak moves a little whatever
	// waits; a process holding what waits would grow by the 250 MiB that came.
	if grew := peak - first; grew > 250<<20/4 {
		t.Errorf("admitter RSS grew by %d MiB while 250 MiB more payloads came to wait: it holds them", grew>>20)
	}
	if peak > 256<<20 {
		t.Errorf("admitter peak RSS %d MiB, above the bound of 256 MiB", peak>>20)
	}
}

// peakRSS is the process's peak resident set size (VmHWM), in bytes.
func peakRSS(t *testing.T, p *proc) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc status")
	return 0
}

var _ = syscall.SIGTERM
var _ = nats.MsgIdHdr

// TestSurvivingReplicaTakesOverTheQueue: of two replicas, the one running a tenant's queue is
// killed; the other continues the queue within 5s (three missed heartbeats, and the dead one's
// hold on the queue ending), at the plan's pace, and every job is forwarded once.
func TestSurvivingReplicaTakesOverTheQueue(t *testing.T) {
	const capacity, rate, n = 5, 20.0, 200
	w := newWorld(t, "plans: {p: {limits: [{capacity: 5, rate: 20/s}]}}\ndefault_plan: p\n")
	var replicas []*proc
	var metrics []string
	for range 2 {
		port, err := testenv.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		replicas = append(replicas, w.start(fmt.Sprintf("ADMITTER_HTTP_ADDR=127.0.0.1:%d", port)))
		metrics = append(metrics, fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	}
	w.publishMany("jobs.submit.acme.work", "job", n, 0)
	owner := -1
	waitFor(t, 20*time.Second, "one replica to run the tenant's queue", func() bool {
		for i, url := range metrics {
			if _, body := httpGet(t, url); metricValue(body, wire.MetricQueues.Prom) == 1 && metricValue(body, wire.MetricReplicas.Prom) == 2 {
				owner = i
				return len(w.readAll("ADMITTED")) > 20
			}
		}
		return false
	})
	replicas[owner].kill()
	killed := time.Now()
	got := w.read("ADMITTED", n, 60*time.Second)
	times := arrivals(t, got, "acme")
	if len(times) != n {
		t.Fatalf("forwarded %d jobs, want %d", len(times), n)
	}
	var resumed time.Time
	for _, at := range times {
		if at.After(killed) {
			resumed = at
			break
		}
	}
	t.Logf("replica %d ran the queue; after its SIGKILL the other forwarded again after %v", owner, resumed.Sub(killed))
	if resumed.Sub(killed) > 5*time.Second {
		t.Errorf("the queue was taken over after %v, want within 5s", resumed.Sub(killed))
	}
	if e, from, to := worstWindow(times, capacity, rate); e > 1 {
		t.Fatalf("pacing bound broken by %.1f jobs in [%v, %v] around the takeover", e, from.Sub(killed), to.Sub(killed))
	}
}
