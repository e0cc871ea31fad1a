package tests

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/admitter/admitter/internal/testenv"
)

// chaosTenant is a tenant of the property test: its plan's limits and the weights it sends.
type chaosTenant struct {
	name   string
	limits []bucketLimit
	maxW   int
	rate   float64 // published jobs per second
}

var chaosTenants = []chaosTenant{
	{"ant", []bucketLimit{{4, 8}}, 2, 10},
	{"bee", []bucketLimit{{6, 12}, {40, 6}}, 3, 8},
}

const chaosPlans = `
plans:
  ant: {limits: [{capacity: 4, rate: 8/s}]}
  bee: {limits: [{name: burst, capacity: 6, rate: 12/s}, {name: slow, capacity: 40, rate: 6/s}]}
tenants: {ant: ant, bee: bee}
`

// TestPacingHoldsThroughChaos is invariant 1 (and 4) as a property: two tenants publish above
// their plans while, at random, replicas start, are killed (SIGKILL) or stopped (SIGTERM), and
// Redis restarts without its data. Afterwards every job has been forwarded exactly once, and for
// each tenant and each limit of its plan, no interval of any length holds more forwarded weight
// than C + r·t (forwards marked fail-open excepted), up to the time between a decision and the
// store of its forward. The schedule is random; ADMITTER_CHAOS_SEED replays one.
func TestPacingHoldsThroughChaos(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("ADMITTER_CHAOS_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("ADMITTER_CHAOS_SEED: %v", err)
		}
	}
	t.Logf("seed %d (replay with ADMITTER_CHAOS_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	failMode := []string{"local", "open", "closed"}[rng.IntN(3)]
	w := newWorldWith(t, chaosPlans, testenv.StartRedis(t)) // no append-only file: a restart forgets
	env := []string{"ADMITTER_FAIL_MODE=" + failMode, "ADMITTER_SHUTDOWN_TIMEOUT=3s", "ADMITTER_REDIS_TIMEOUT=200ms"}

	var live []*proc
	var events []string
	start := time.Now()
	event := func(format string, args ...any) {
		events = append(events, fmt.Sprintf("%6.2fs ", time.Since(start).Seconds())+fmt.Sprintf(format, args...))
	}
	live = append(live, w.start(env...))
	event("replica started")

	// Load: each tenant above its plan, random weights, published by one goroutine.
	var lt []loadTenant
	for _, tn := range chaosTenants {
		lt = append(lt, loadTenant{name: tn.name, rate: tn.rate, maxW: tn.maxW})
	}
	ld := startLoad(t, w.natsURL, seed, lt, 1)

	for time.Since(start) < 15*time.Second {
		time.Sleep(time.Duration(800+rng.IntN(1700)) * time.Millisecond)
		switch r := rng.IntN(100); {
		case len(live) == 0 || (r < 25 && len(live) < 3):
			live = append(live, w.start(env...))
			event("replica started (%d live)", len(live))
		case r < 50:
			k := rng.IntN(len(live))
			live[k].kill()
			live = slices.Delete(live, k, k+1)
			event("replica killed (%d live)", len(live))
		case r < 70:
			k := rng.IntN(len(live))
			if code := live[k].signal(syscall.SIGTERM, 15*time.Second); code != 0 {
				t.Errorf("a replica exited %d after SIGTERM", code)
			}
			live = slices.Delete(live, k, k+1)
			event("replica stopped (%d live)", len(live))
		case r < 85:
			w.redis.Kill()
			if err := w.redis.Start(); err != nil {
				t.Fatal(err)
			}
			event("redis restarted without its data")
		default:
			event("nothing")
		}
	}
	published := ld.finish(t)
	if len(live) == 0 {
		live = append(live, w.start(env...))
		event("replica started to finish")
	}
	t.Logf("fail mode %s; %d jobs published (weights %v); events:\n%s", failMode, len(published), ld.weight, strings.Join(events, "\n"))
	got := w.read("ADMITTED", len(published), 90*time.Second)
	var checked []checkedTenant
	for _, tn := range chaosTenants {
		checked = append(checked, checkedTenant{name: tn.name, limits: tn.limits, slack: float64(tn.maxW)})
	}
	c := checkInvariants(published, got, w.readAll("DEAD"), checked)
	for _, p := range c.pacing {
		t.Logf("tenant %s, limit %v/%v per s: %d forwards decided, %d fail-open; worst window excess %.2f",
			p.tenant, p.limit.capacity, p.limit.rate, p.decided, p.degraded, p.excess)
	}
	c.report(t, start)
	// The replicas that lived through the chaos stop as any replica does: SIGTERM, exit 0.
	for _, p := range live {
		if code := p.signal(syscall.SIGTERM, 15*time.Second); code != 0 {
			t.Errorf("a replica that lived through the chaos exited %d after SIGTERM, want 0", code)
		}
	}
}
