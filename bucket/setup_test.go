package bucket

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/admitter/admitter/internal/testenv"
	"github.com/redis/rueidis"
)

// clock is a settable clock for tests: time moves only when the test says so.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) Advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// limiter is a backend, for the package's own tests.
type limiter = Limiter

// sharedRedis is one redis-server for the whole package's tests; tests keep apart by tenant.
var sharedRedis struct {
	once   sync.Once
	server *testenv.RedisServer
	client rueidis.Client
	err    error
}

// tenantSeq makes tenant names unique across tests sharing one Redis.
var tenantSeq atomic.Int64

func uniqueTenant(name string) string { return fmt.Sprintf("%s-%d", name, tenantSeq.Add(1)) }

// sharedCluster is one three-master Redis Cluster for the package's tests.
var sharedCluster struct {
	once   sync.Once
	client rueidis.Client
	err    error
}

// clusterClient returns a cluster client of the package's Redis Cluster, starting it on first
// use.
func clusterClient(t testing.TB) rueidis.Client {
	t.Helper()
	sharedCluster.once.Do(func() {
		url, _ := testenv.StartRedisCluster(packageTB{}, 3)
		opt, err := RedisClientOption(url)
		if err != nil {
			sharedCluster.err = err
			return
		}
		sharedCluster.client, sharedCluster.err = rueidis.NewClient(opt)
		if sharedCluster.err == nil && sharedCluster.client.Mode() != rueidis.ClientModeCluster {
			sharedCluster.err = fmt.Errorf("client mode %v, want cluster", sharedCluster.client.Mode())
		}
	})
	if sharedCluster.err != nil {
		t.Fatalf("redis cluster: %v", sharedCluster.err)
	}
	return sharedCluster.client
}

// redisClient returns a client of the package's redis-server, starting it on first use.
func redisClient(t testing.TB) rueidis.Client {
	t.Helper()
	sharedRedis.once.Do(func() {
		sharedRedis.server = testenv.StartRedis(packageTB{})
		opt, err := RedisClientOption(sharedRedis.server.URL())
		if err != nil {
			sharedRedis.err = err
			return
		}
		sharedRedis.client, sharedRedis.err = rueidis.NewClient(opt)
	})
	if sharedRedis.err != nil {
		t.Fatalf("redis: %v", sharedRedis.err)
	}
	return sharedRedis.client
}

// packageTB lets the package-wide server outlive single tests; TestMain stops it.
type packageTB struct{}

var packageCleanups []func()

func (packageTB) Helper()                           {}
func (packageTB) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (packageTB) Cleanup(f func())                  { packageCleanups = append(packageCleanups, f) }
func (packageTB) Logf(string, ...any)               {}
func (packageTB) TempDir() string {
	dir, err := os.MkdirTemp("", "bucket-test-")
	if err != nil {
		panic(err)
	}
	packageCleanups = append(packageCleanups, func() { _ = os.RemoveAll(dir) })
	return dir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedRedis.client != nil {
		sharedRedis.client.Close()
	}
	if sharedCluster.client != nil {
		sharedCluster.client.Close()
	}
	for i := len(packageCleanups) - 1; i >= 0; i-- {
		packageCleanups[i]()
	}
	os.Exit(code)
}

// backends returns constructors for every backend, each pinned to the given clock.
func backends() []struct {
	name string
	make func(t testing.TB, c *clock, o Options) limiter
} {
	return []struct {
		name string
		make func(t testing.TB, c *clock, o Options) limiter
	}{
		{"memory", func(t testing.TB, c *clock, o Options) limiter { return NewMemory(o, c.Now) }},
		{"redis", func(t testing.TB, c *clock, o Options) limiter {
			r := NewRedis(redisClient(t), "", o)
			r.pin(c.Now)
			return r
		}},
		// Every key of a tenant shares its hash tag, so each decision is one script call on
		// one node of a cluster, and Inspect finds the job keys on whichever node holds them.
		{"redis-cluster", func(t testing.TB, c *clock, o Options) limiter {
			r := NewRedis(clusterClient(t), "", o)
			r.pin(c.Now)
			return r
		}},
	}
}

func mustPlan(t testing.TB, name string, limits ...Limit) *Plan {
	t.Helper()
	p, err := NewPlan(name, limits...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// lim builds a limit of capacity c refilling one token every interval.
func lim(name string, c int64, every time.Duration) Limit {
	return Limit{Name: name, Capacity: c, Interval: every}
}

// win builds a sliding window of at most limit per window.
func win(name string, limit int64, window time.Duration) Limit {
	return Limit{Name: name, Kind: KindWindow, Capacity: limit, Window: window}
}

// conc builds a concurrency limit of at most limit in flight, each for at most lease.
func conc(name string, limit int64, lease time.Duration) Limit {
	return Limit{Name: name, Kind: KindConcurrency, Capacity: limit, Lease: lease}
}

// quota builds a calendar quota of limit per period in loc (nil: UTC).
func quota(name string, limit int64, p Period, loc *time.Location) Limit {
	return Limit{Name: name, Kind: KindQuota, Capacity: limit, Period: p, Location: loc}
}
