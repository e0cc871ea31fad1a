package bucket

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/admitter/admitter/lua"
	"github.com/redis/rueidis"
)

// DefaultKeyPrefix starts every key the Redis backend writes.
const DefaultKeyPrefix = "admitter:"

// Redis is the shared backend: every replica using the same Redis shares the same buckets. Each
// decision is one script call (EVALSHA, falling back to EVAL when the server has lost the
// script), atomic on a single server and on Redis Cluster, where all of a tenant's keys share
// the hash tag {tenant}. Time is the Redis server's clock. Safe for concurrent use.
type Redis struct {
	client  rueidis.Client
	script  *rueidis.Lua
	inspect *rueidis.Lua
	prefix  string
	// fixed are the script arguments after weight: horizon, grace, marker life, key pad.
	fixed [4]string
	// clock pins the script's clock (tests only); nil reads the server's TIME.
	clock func() time.Time
}

// NewRedis returns a backend deciding through client, with keys under prefix
// (DefaultKeyPrefix when empty). The client is owned by the caller.
func NewRedis(client rueidis.Client, prefix string, opts Options) *Redis {
	opts = opts.withDefaults()
	if prefix == "" {
		prefix = DefaultKeyPrefix
	}
	return &Redis{
		client:  client,
		script:  rueidis.NewLuaScript(lua.Decide),
		inspect: rueidis.NewLuaScriptReadOnly(lua.Inspect),
		prefix:  prefix,
		fixed: [4]string{
			strconv.FormatInt(opts.Horizon.Microseconds(), 10),
			strconv.FormatInt(opts.SlotGrace.Microseconds(), 10),
			strconv.FormatInt(opts.MarkerTTL.Microseconds(), 10),
			"0",
		},
	}
}

// Decide decides a request. A call that fails or times out (ctx) may still have run on the
// server: asking again with the same JobID is answered without a second charge.
func (r *Redis) Decide(ctx context.Context, req Request) (Result, error) {
	if err := req.check(); err != nil {
		return Result{}, err
	}
	state := r.stateKey(req.Tenant)
	keys := []string{state}
	if req.JobID != "" {
		keys = append(keys, state+":"+req.JobID)
	}
	now := "0"
	if r.clock != nil {
		now = strconv.FormatInt(r.clock().UnixMicro(), 10)
	}
	args := make([]string, 0, 6+len(req.Plan.scriptArgs))
	args = append(args, now, strconv.FormatInt(req.Weight, 10))
	args = append(args, r.fixed[:]...)
	args = append(args, req.Plan.scriptArgs...)
	vals, err := r.script.Exec(ctx, r.client, keys, args).ToArray()
	if err != nil {
		return Result{}, fmt.Errorf("bucket: redis decision for tenant %q: %w", req.Tenant, err)
	}
	if len(vals) != 4 {
		return Result{}, fmt.Errorf("bucket: redis decision for tenant %q: reply has %d values, want 4", req.Tenant, len(vals))
	}
	var n [4]int64
	for i := range vals {
		if n[i], err = vals[i].AsInt64(); err != nil {
			return Result{}, fmt.Errorf("bucket: redis decision for tenant %q: reply value %d: %w", req.Tenant, i, err)
		}
	}
	return req.Plan.result(n[0], n[1], n[2], n[3])
}

// stateKey is the key of a tenant's bucket state; its job keys extend it with ":" + job id.
func (r *Redis) stateKey(tenant string) string { return r.prefix + "{" + tenant + "}" }

// RedisClientOption turns a redis:// or rediss:// URL (more cluster seeds as ?addr=host:port)
// into client options safe for a limiter: no client-side cache, and write/keep-alive timeouts
// short enough that a stalled server (SIGSTOP, a partition) cannot block callers for long past
// their context deadlines once the connection's pipeline fills.
func RedisClientOption(url string) (rueidis.ClientOption, error) {
	opt, err := rueidis.ParseURL(url)
	if err != nil {
		return opt, fmt.Errorf("bucket: redis url: %w", err)
	}
	opt.DisableCache = true
	opt.ConnWriteTimeout = 300 * time.Millisecond
	if opt.Dialer.Timeout == 0 {
		opt.Dialer.Timeout = 2 * time.Second
	}
	opt.Dialer.KeepAlive = 200 * time.Millisecond
	return opt, nil
}

// pin makes the script use clock instead of the server's TIME, for tests that drive time. Keys
// then live a minute longer than their logical life, so Redis never evicts state that the pinned
// clock still considers alive.
func (r *Redis) pin(clock func() time.Time) {
	r.clock = clock
	r.fixed[3] = "60000"
}
