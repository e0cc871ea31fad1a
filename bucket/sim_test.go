package bucket

import (
	"flag"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// TestSimulation runs the deterministic simulation of the limiter layer (sim_*_test.go) for
// -sim.seeds seeds from -sim.first: each seed is a world of replicas, tenants, workers and
// faults in virtual time, checked after every event. A failing seed prints itself, how to replay
// it, and its last events; -sim.seed=N replays seed N alone and prints every event.
//
//	go test -run 'TestSimulation$' ./bucket -sim.seed=N -v
var (
	simSeeds = flag.Int("sim.seeds", 200, "TestSimulation: how many seeds to run")
	simFirst = flag.Uint64("sim.first", 1, "TestSimulation: the first seed")
	simSeed  = flag.Uint64("sim.seed", 0, "TestSimulation: run this seed alone, printing every event (with -v)")
)

func TestSimulation(t *testing.T) {
	first, n := *simFirst, uint64(*simSeeds)
	if *simSeed != 0 {
		first, n = *simSeed, 1
	}
	var failed []string
	for seed := first; seed < first+n; seed++ {
		start := time.Now()
		v, trace := runSeed(t, seed, *simSeed != 0 && testing.Verbose())
		if took := time.Since(start); took > 5*time.Second {
			t.Logf("seed %d took %v", seed, took.Round(time.Millisecond))
		}
		if v == "" {
			continue
		}
		failed = append(failed, fmt.Sprint(seed))
		if len(failed) <= 3 {
			t.Errorf("seed %d: %s\n  replay: go test -run 'TestSimulation$' ./bucket -sim.seed=%d -v\n  its last events:\n%s", seed, v, seed, trace)
		} else {
			t.Errorf("seed %d: %s", seed, summary(v))
		}
	}
	if len(failed) > 0 {
		t.Logf("%d of %d seeds failed: %s", len(failed), n, strings.Join(failed, " "))
	}
}

// runSeed plays seed's world; it returns the first violation ("" when none) and the events
// before it.
func runSeed(t *testing.T, seed uint64, verbose bool) (violation, trace string) {
	t.Helper()
	clients, raw := simClients(t)
	w := newWorld(t, seed, simDefaultShape, clients, raw, verbose)
	defer w.close()
	v := w.run()
	tail := w.trace
	if len(tail) > 60 {
		tail = tail[len(tail)-60:]
	}
	return v, "    " + strings.Join(tail, "\n    ")
}

// summary is a violation's first line and what the replicas were doing.
func summary(v string) string {
	lines := strings.Split(v, "\n")
	out := lines[0]
	for _, l := range lines[1:] {
		if strings.HasPrefix(strings.TrimSpace(l), "replicas:") {
			out += "\n  " + strings.TrimSpace(l)
		}
	}
	return out
}

// simClientsOf is one client of the package's redis-server per replica slot, made once.
var simClientsOf struct {
	once    sync.Once
	clients []rueidis.Client
	err     error
}

// simClients returns a client of the package's redis-server for each replica slot of a world,
// and one without faults.
func simClients(t testing.TB) ([]rueidis.Client, rueidis.Client) {
	t.Helper()
	raw := redisClient(t)
	simClientsOf.once.Do(func() {
		opt, err := RedisClientOption(sharedRedis.server.URL())
		if err != nil {
			simClientsOf.err = err
			return
		}
		for range simDefaultShape.maxReps {
			c, err := rueidis.NewClient(opt)
			if err != nil {
				simClientsOf.err = err
				return
			}
			simClientsOf.clients = append(simClientsOf.clients, c)
			packageCleanups = append(packageCleanups, c.Close)
		}
	})
	if simClientsOf.err != nil {
		t.Fatalf("redis clients: %v", simClientsOf.err)
	}
	return simClientsOf.clients, raw
}
