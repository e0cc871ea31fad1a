package tests

// A burst is not a noisy neighbour: a tenant's burst of jobs, however fast it arrives, does not
// delay another tenant's jobs while it arrives; and when the admitter itself is the bottleneck,
// tenants with backlogs are served in turn, each the same share.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestBurstIsNotANoisyNeighbour: one tenant publishes 60,000 jobs as fast as JetStream takes
// them while a quiet tenant, on its own plan, publishes 20 a second: at least 95 % of the quiet
// tenant's jobs are forwarded within 2 s of their PubAck, while the burst arrives.
func TestBurstIsNotANoisyNeighbour(t *testing.T) {
	w := newWorld(t, `
plans:
  noisy: {limits: [{capacity: 100, rate: 1000/s}]}
  quiet: {limits: [{capacity: 20, rate: 20/s}]}
tenants: {noisy: noisy, quiet: quiet}
`)
	w.startBinary(plainBinary(t))
	var mu sync.Mutex
	acked := map[string]time.Time{} // quiet payload → its PubAck
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var quiet sync.WaitGroup
	quiet.Go(func() { // 20/s for as long as the burst arrives, at most 30 s
		js, err := jetstream.New(w.nc)
		if err != nil {
			t.Error(err)
			return
		}
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := 0; i < 600; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			p := fmt.Sprint("quiet-", i)
			pctx, pcancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := js.Publish(pctx, "jobs.submit.quiet.email", []byte(p))
			pcancel()
			if err != nil {
				t.Errorf("publish %s: %v", p, err)
				return
			}
			mu.Lock()
			acked[p] = time.Now()
			mu.Unlock()
		}
	})
	time.Sleep(500 * time.Millisecond) // the quiet tenant's pace is under way
	begin := time.Now()
	w.publishMany("jobs.submit.noisy.batch", "noisy", 60_000, 0)
	took := time.Since(begin)
	cancel()
	quiet.Wait()
	mu.Lock()
	n := len(acked)
	mu.Unlock()
	var lat []time.Duration
	waitFor(t, 60*time.Second, "every quiet job forwarded", func() bool {
		lat = lat[:0]
		got := w.readSubject("ADMITTED", "jobs.admitted.quiet.>")
		mu.Lock()
		defer mu.Unlock()
		for _, j := range got {
			lat = append(lat, j.stored.Sub(acked[j.payload]))
		}
		return len(got) >= n
	})
	slices.Sort(lat)
	within := 0
	for _, l := range lat {
		if l <= 2*time.Second {
			within++
		}
	}
	t.Logf("60,000 noisy jobs stored in %v; %d quiet jobs: PubAck→forward p50 %v, p95 %v, max %v; %d within 2 s",
		took.Round(time.Millisecond), len(lat), lat[len(lat)/2], lat[len(lat)*95/100], lat[len(lat)-1], within)
	if within*100 < 95*len(lat) {
		t.Fatalf("%d of %d quiet jobs forwarded within 2 s of their PubAck while the burst arrived, want at least 95 %%", within, len(lat))
	}
}

// readSubject reads every message of stream on subject (a filter), in order.
func (w *world) readSubject(stream, subject string) []job {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cons, err := w.js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		w.t.Fatal(err)
	}
	defer func() { _ = w.js.DeleteConsumer(context.Background(), stream, cons.CachedInfo().Name) }()
	var out []job
	for {
		batch, err := cons.FetchNoWait(500)
		if err != nil {
			w.t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				w.t.Fatal(err)
			}
			out = append(out, job{subject: m.Subject(), payload: string(m.Data()), header: m.Headers(), stored: meta.Timestamp})
			if meta.NumPending == 0 {
				return out
			}
		}
		if n == 0 {
			return out
		}
	}
}

// TestFairWhenTheAdmitterIsTheBottleneck: 60 tenants publish 300 jobs each, one tenant after
// the other, on plans faster than the admitter can forward with one worker: the tenants are
// served in turn, not in the order their jobs arrived. Over the middle of the drain, each
// tenant's share of the forwards is within ±10 % of the others' mean.
func TestFairWhenTheAdmitterIsTheBottleneck(t *testing.T) {
	const tenants, each = 60, 300
	w := newWorld(t, `
plans:
  fast: {limits: [{capacity: 100000, rate: 100000/s}]}
default_plan: fast
`)
	// The streams made, every backlog is published before the admitter runs again, one tenant
	// after the other: arrival order is as unfair as it gets.
	env := []string{"ADMITTER_WORKERS=1", "ADMITTER_QUANTUM=10", "ADMITTER_BATCH=10"}
	if code := w.startBinary(plainBinary(t), env...).signal(syscall.SIGTERM, 15*time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	for i := range tenants {
		w.publishMany(fmt.Sprintf("jobs.submit.t%02d.work", i), fmt.Sprintf("t%02d", i), each, 0)
	}
	if n := w.streamMsgs("JOBS"); n != tenants*each {
		t.Fatalf("the input holds %d jobs, want %d", n, tenants*each)
	}
	w.startBinary(plainBinary(t), env...)
	got := w.read("ADMITTED", tenants*each, 120*time.Second)
	slices.SortFunc(got, func(a, b job) int { return a.stored.Compare(b.stored) })
	// The middle half of the drain: every tenant still has a backlog there.
	mid := got[len(got)/4 : 3*len(got)/4]
	share := map[string]int{}
	for _, j := range mid {
		share[strings.Split(j.subject, ".")[2]]++
	}
	mean := float64(len(mid)) / tenants
	var worst float64
	for i := range tenants {
		tn := fmt.Sprintf("t%02d", i)
		dev := (float64(share[tn]) - mean) / mean
		if dev < 0 {
			dev = -dev
		}
		worst = max(worst, dev)
	}
	t.Logf("middle of the drain (%d forwards): mean %.1f per tenant, worst deviation %.1f %%; t00 %d, t30 %d, t59 %d",
		len(mid), mean, 100*worst, share["t00"], share["t30"], share["t59"])
	if worst > 0.10 {
		t.Fatalf("a tenant's share deviates by %.1f %% from the mean, want within 10 %%: %v", 100*worst, share)
	}
}
