package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/admitter/admitter/internal/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestOutputLeaderKilledInACluster: on a 3-node JetStream cluster with ADMITTER_STREAM_REPLICAS=3,
// the server leading the output stream is shut down while jobs flow and wait in a lane: every
// job is forwarded exactly once, none is lost.
func TestOutputLeaderKilledInACluster(t *testing.T) {
	cluster := testenv.StartNATSCluster(t, 3)
	w := newWorld(t, "plans: {p: {limits: [{capacity: 20, rate: 100/s}]}}\ndefault_plan: p\n")
	nc, err := nats.Connect(cluster.URLs())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	w.nc, w.js = nc, js // the world's client talks to the cluster
	w.start("ADMITTER_NATS_URL="+cluster.URLs(), "ADMITTER_STREAM_REPLICAS=3")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := js.Stream(ctx, "ADMITTED")
	if err != nil {
		t.Fatal(err)
	}
	if r := out.CachedInfo().Config.Replicas; r != 3 {
		t.Fatalf("ADMITTED made with %d replicas, want 3", r)
	}
	const n = 600
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			m := nats.NewMsg("jobs.submit.acme.work")
			m.Data = []byte(fmt.Sprint("job-", i))
			for try := 0; ; try++ { // the producer retries through the election, as producers do
				pctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_, err := js.PublishMsg(pctx, m, jetstream.WithMsgID(fmt.Sprint("producer-", i)))
				cancel()
				if err == nil || try > 20 {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	waitFor(t, 20*time.Second, "some jobs forwarded", func() bool { return len(w.readAll("ADMITTED")) > 100 })
	info, err := out.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leader := info.Cluster.Leader
	cluster.Server(leader).Shutdown()
	t.Logf("shut down %s, the leader of ADMITTED", leader)
	<-done
	got := w.read("ADMITTED", n, 90*time.Second)
	if c := uniquePayloads(t, got); c != n || len(got) != n {
		t.Fatalf("%d messages for %d distinct jobs on ADMITTED, want %d once each", len(got), c, n)
	}
}
