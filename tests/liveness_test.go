package tests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/admitter/admitter/internal/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsBin is the nats-server of the module's dependency, built once for the tests that run it
// as processes.
// natsServerBinary is the nats-server of the module's dependency, built once for the tests that run it as a process.
var natsServerBinary struct {
	once sync.Once
	path string
	err  error
}

// natsServer builds (once) the nats-server the tests run as a process (drills, NATS node losses).
func natsServer(t *testing.T) string {
	t.Helper()
	natsServerBinary.once.Do(func() {
		natsServerBinary.path, natsServerBinary.err = testenv.BuildNATSServer(filepath.Dir(binary))
	})
	if natsServerBinary.err != nil {
		t.Fatal(natsServerBinary.err)
	}
	return natsServerBinary.path
}

// leaderOf is the name of the node leading stream ("" when it cannot be read now).
func leaderOf(js jetstream.JetStream, stream string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return ""
	}
	info, err := s.Info(ctx)
	if err != nil || info.Cluster == nil {
		return ""
	}
	return info.Cluster.Leader
}

// connectedNode is the node of cluster the admitter is connected to.
func connectedNode(t *testing.T, cluster *testenv.NATSProcessCluster) *testenv.NATSNode {
	t.Helper()
	var found *testenv.NATSNode
	waitFor(t, 10*time.Second, "the admitter's connection on a node", func() bool {
		for _, nd := range cluster.Nodes {
			if !nd.Running() {
				continue
			}
			_, body := httpGet(t, fmt.Sprintf("http://127.0.0.1:%d/connz?limit=1000", nd.HTTPPort))
			if strings.Contains(body, `"name": "admitter"`) {
				found = nd
				return true
			}
		}
		return false
	})
	return found
}

// moveLeader makes node the leader of stream (a step-down with a preferred placement).
func moveLeader(t *testing.T, nc *nats.Conn, stream, node string) {
	t.Helper()
	waitFor(t, 30*time.Second, fmt.Sprintf("%s to lead %s", node, stream), func() bool {
		js, _ := jetstream.New(nc)
		if leaderOf(js, stream) == node {
			return true
		}
		_, _ = nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+stream, []byte(`{"placement":{"preferred":"`+node+`"}}`), 2*time.Second)
		time.Sleep(500 * time.Millisecond)
		return leaderOf(js, stream) == node
	})
}

// healed reports whether every stream of names has a leader and every replica current.
func healed(js jetstream.JetStream, names ...string) bool {
	for _, name := range names {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		s, err := js.Stream(ctx, name)
		if err != nil {
			cancel()
			return false
		}
		info, err := s.Info(ctx)
		cancel()
		if err != nil || info.Cluster == nil || info.Cluster.Leader == "" || len(info.Cluster.Replicas) != 2 {
			return false
		}
		for _, r := range info.Cluster.Replicas {
			if !r.Current || r.Offline {
				return false
			}
		}
	}
	return true
}

// TestNodeLossesNeverStopTheReplica: one replica on a 3-node cluster (ADMITTER_STREAM_REPLICAS=3)
// forwards a tenant's jobs on {10, 50/s} (issue 39's scene); in each round, once a quarter of
// the round's jobs are forwarded, the node leading the output stream (then, the next round, the
// input stream), which is also the node the admitter is connected to, is shut down, and started
// again after the round. Every job of a round is stored within 15 s of its loss, and every job
// once. Two rounds (the output's leader, then the input's) in make test, about 12 s each;
// ADMITTER_NODE_LOSSES=N plays N.
func TestNodeLossesNeverStopTheReplica(t *testing.T) {
	cluster := testenv.StartNATSProcessCluster(t, natsServer(t), 3, "")
	w := newWorldOn(t, "plans: {p: {limits: [{capacity: 10, rate: 50/s}]}}\ndefault_plan: p\n", cluster.URLs(), testenv.StartPersistentRedis(t).URL())
	httpEnv, metricsURL := metricsPort(t)
	p := w.start("ADMITTER_STREAM_REPLICAS=3", httpEnv)
	base := strings.TrimSuffix(metricsURL, "/metrics")
	rounds, each := 2, uint64(150)
	if n, err := strconv.Atoi(os.Getenv("ADMITTER_NODE_LOSSES")); err == nil && n > 0 {
		rounds = n
	}
	var took []time.Duration
	for r := range rounds {
		stream := []string{"ADMITTED", "JOBS"}[r%2]
		waitFor(t, 60*time.Second, "the cluster healed", func() bool { return healed(w.js, "ADMITTED", "JOBS") })
		before, err := w.countMsgs("ADMITTED")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := range each {
				m := nats.NewMsg("jobs.submit.acme.work")
				m.Data = []byte(fmt.Sprintf("job-%d-%d", r, i))
				for try := 0; ; try++ { // the producer retries through the election, as producers do
					pctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					_, err := w.js.PublishMsg(pctx, m, jetstream.WithMsgID(fmt.Sprintf("producer-%d-%d", r, i)))
					cancel()
					if err == nil || try > 50 {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
		want := before + each
		waitFor(t, 30*time.Second, "a quarter of the round forwarded", func() bool {
			c, _ := w.countMsgs("ADMITTED")
			return c >= before+each/4
		})
		node := connectedNode(t, cluster)
		moveLeader(t, w.nc, stream, node.Name)
		lost := time.Now()
		node.Stop()
		<-done
		var c uint64
		for time.Since(lost) < 60*time.Second {
			if c, _ = w.countMsgs("ADMITTED"); c >= want {
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
		// From the loss to the store of the round's last job, as the server stored it (the same
		// host's clock): the test's own reads through the election take no part in it.
		var d time.Duration
		for _, j := range w.readAll("ADMITTED") {
			if strings.HasPrefix(j.payload, fmt.Sprintf("job-%d-", r)) {
				d = max(d, j.stored.Sub(lost))
			}
		}
		if c < want || d > 15*time.Second {
			code, dump := httpGet(t, base+"/debug/pprof/goroutine?debug=2")
			f := filepath.Join(os.TempDir(), fmt.Sprintf("liveness-dump-%d.txt", time.Now().UnixNano()))
			_ = os.WriteFile(f, []byte(fmt.Sprintf("status %d\n%s\n\nLOGS\n%s", code, dump, p.logs.String())), 0o644)
			t.Fatalf("round %d: %d of %d jobs stored, the last %v after the loss of %s, the leader of %s (want every one within 15s); goroutines in %s",
				r, c, want, d.Round(time.Millisecond), node.Name, stream, f)
		}
		took = append(took, d.Round(time.Millisecond))
		if err := node.Start(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("from each loss to every job stored: %v", took)
	all := rounds * int(each)
	got := w.read("ADMITTED", all, 30*time.Second)
	if u := uniquePayloads(t, got); u != all || len(got) != all {
		t.Fatalf("%d messages for %d distinct jobs on ADMITTED, want %d once each", len(got), u, all)
	}
}
