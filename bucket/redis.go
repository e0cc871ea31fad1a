package bucket

import (
	"context"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/admitter/admitter/lua"
	"github.com/redis/rueidis"
)

// DefaultKeyPrefix starts every key the Redis backend writes.
const DefaultKeyPrefix = "admitter:"

// Redis is the shared backend: every replica using the same Redis shares the same buckets. Each
// decision is one script call (EVALSHA, falling back to EVAL when the server has lost the
// script: see run), atomic on a single server and on Redis Cluster, where all of a tenant's keys share
// the hash tag {tenant}. Time is the Redis server's clock. Safe for concurrent use.
type Redis struct {
	client  rueidis.Client
	script  *script
	admit   *script
	inspect *script
	lease   *script
	pool    *script
	merge   *script
	prefix  string
	grace   int64 // SlotGrace in µs, for Inspect
	redeem  int64 // Redeem in µs
	late    int64 // Late in µs
	hold    int64 // Hold in µs
	pad     int64 // extra key life in ms (pinned clocks in tests)
	horizon int64 // Horizon in µs
	reach   int64 // how far ahead of now a take may be made (µs): the horizon, plus calMargin
	// fixed is the part of the decide script's argument after the weight: horizon, grace,
	// marker life, key pad and redeem, packed (see lua/decide.lua).
	fixed []byte
	// clock pins the script's clock (tests only); nil reads the server's TIME.
	clock func() time.Time
	// cluster: the client is a Redis Cluster's (see markerTag).
	cluster bool
	owned   bool // the client is ours to close (DialRedis)
	// born is when the servers last lost admitter's state (µs of server time; 0: nothing known
	// lost), see born.go and lua/state.lua load; refreshed by refreshBorn.
	born born
	// noFunctions: the server runs no Redis Functions for us (see script); scripts instead.
	noFunctions atomic.Bool
	// admits sends the queue's batches, decides the requests, many tenants' in one script call
	// (see coalescer).
	admits, decides coalescer
}

// NewRedis returns a backend deciding through client, with keys under prefix
// (DefaultKeyPrefix when empty). The client is owned by the caller.
func NewRedis(client rueidis.Client, prefix string, opts Options) *Redis {
	opts = opts.withDefaults()
	if prefix == "" {
		prefix = DefaultKeyPrefix
	}
	r := &Redis{
		client:  client,
		script:  newScript("decide", lua.Decide, false),
		admit:   newScript("admit", lua.Admit, false),
		inspect: newScript("inspect", lua.Inspect, true),
		lease:   newScript("lease", lua.Lease, false),
		pool:    newScript("pool", lua.Pool, false),
		merge:   newScript("merge", lua.Merge, false),
		prefix:  prefix,
		grace:   opts.SlotGrace.Microseconds(),
		redeem:  opts.Redeem.Microseconds(),
		late:    opts.Late.Microseconds(),
		hold:    opts.Hold.Microseconds(),
		horizon: opts.Horizon.Microseconds(),
		reach:   opts.Horizon.Microseconds() + calMargin,
		fixed: packInts(nil, opts.Horizon.Microseconds(), opts.SlotGrace.Microseconds(), opts.MarkerTTL.Microseconds(), 0,
			opts.Redeem.Microseconds()),
	}
	r.cluster = client == nil || client.Mode() == rueidis.ClientModeCluster
	r.admits = coalescer{exec: r.execAdmits, maxCalls: coalesceCalls, maxBatches: coalesceBatches, maxJobs: coalesceJobs}
	r.decides = coalescer{exec: r.execDecides, maxCalls: coalesceCalls, maxBatches: coalesceBatches, maxJobs: coalesceJobs}
	if client != nil && client.Mode() == rueidis.ClientModeCluster {
		r.admits.maxBatches, r.decides.maxBatches = 1, 1 // a script's keys must share a hash slot
	}
	return r
}

// packInts appends little-endian int64s, the encoding of every value crossing the script
// boundary.
func packInts(b []byte, vs ...int64) []byte {
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	return b
}

// unpackInts decodes a reply of len(into) packed int64s.
func unpackInts(b []byte, into []int64) error {
	if len(b) != 8*len(into) {
		return fmt.Errorf("reply has %d bytes, want %d", len(b), 8*len(into))
	}
	for i := range into {
		into[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return nil
}

// Decide decides a request. A call that fails or times out (ctx) may still have run on the
// server: asking again with the same JobID is answered without a second charge.
func (r *Redis) Decide(ctx context.Context, req Request) (Result, error) {
	if err := req.check(); err != nil {
		return Result{}, err
	}
	if err := r.refreshBorn(ctx); err != nil {
		return Result{}, fmt.Errorf("bucket: redis decision for tenant %q: %w", req.Tenant, err)
	}
	born := r.born.at.Load()
	keys, args := r.call(&req)
	c := &admitCall{keys: keys, jobs: 1, size: decideReplyLen, done: make(chan struct{}), arg: func() string {
		if r.born.at.Load() == born { // built with the start it carries
			return args[0]
		}
		_, args := r.call(&req)
		return args[0]
	}}
	if err := r.decides.do(ctx, c); err != nil {
		return Result{}, fmt.Errorf("bucket: redis decision for tenant %q: %w", req.Tenant, err)
	}
	return decodeReply(&req, c.reply)
}

// call builds the script call's keys and argument in two allocations: one buffer holding both
// keys and the packed argument, seen as strings without copying (nothing writes to it
// afterwards), and one array backing the keys and args slices.
func (r *Redis) call(req *Request) (keys, args []string) {
	p := req.Plan
	state := len(r.prefix) + len(req.Tenant) + 2
	if p.Shadow { // the shadow state, and the shadow's job keys
		state += len(shadowSuffix)
	}
	job := 0
	if req.JobID != "" {
		job = state + 1 + len(req.JobID)
	}
	buf := make([]byte, 0, max(state, job)+48+len(r.fixed)+len(p.packed)+p.calendarsLen())
	buf = append(append(append(append(buf, r.prefix...), '{'), req.Tenant...), '}')
	if p.Shadow {
		buf = append(buf, shadowSuffix...)
	}
	if job > 0 {
		buf = append(append(buf, ':'), req.JobID...)
	}
	keyEnd := len(buf)
	buf = packInts(buf, r.now(), req.Weight)
	buf = append(packInts(append(buf, r.fixed...), r.born.at.Load(), int64(len(p.Limits)), LeaseKey(req.JobID), r.markerTag()), p.packed...)
	buf = p.calendars(buf, r.estimate(), r.reach)
	strs := new([3]string)
	strs[0] = unsafe.String(&buf[0], state)
	nkeys := 1
	if job > 0 {
		strs[1] = unsafe.String(&buf[0], job)
		nkeys = 2
	}
	strs[2] = unsafe.String(&buf[keyEnd], len(buf)-keyEnd)
	return strs[:nkeys], strs[2:3]
}

// Admit decides a batch of one tenant's queued jobs in one script call (see Batch and
// lua/admit.lua). A call that fails or times out may still have run on the server: asking again
// within Options.Redeem gets the same outcomes without a second charge.
func (r *Redis) Admit(ctx context.Context, b Batch) (BatchResult, error) {
	return admitPooled(ctx, r, b, r.admitTenant)
}

// admitTenant decides a batch on the tenant's limits alone.
func (r *Redis) admitTenant(ctx context.Context, b Batch) (BatchResult, error) {
	res, _, err := r.admitState(ctx, b, false)
	return res, err
}

// mirrored is the tenant's state as an admission left it, for a local copy (see Fallback): the
// server's time of the call (µs) and the state as stored (empty when the key is absent).
type mirrored struct {
	now int64
	raw []byte
}

// admitState decides a batch on the tenant's limits alone and, with mirror (not for a shadow
// plan), returns the tenant's state as the call left it.
func (r *Redis) admitState(ctx context.Context, b Batch, mirror bool) (BatchResult, mirrored, error) {
	if err := b.check(); err != nil {
		return BatchResult{}, mirrored{}, err
	}
	p := &b.Plan
	if err := r.refreshBorn(ctx); err != nil {
		return BatchResult{}, mirrored{}, fmt.Errorf("bucket: redis admit for tenant %q: %w", b.Tenant, err)
	}
	shadow := (*p).Shadow
	mirror = mirror && !shadow && !b.Peek
	c := &admitCall{jobs: len(b.Jobs), done: make(chan struct{}), shadow: shadow, mirror: mirror}
	c.keys = r.keys(b.Tenant)
	if shadow {
		c.keys = r.keys(b.Tenant, shadowSuffix)
	}
	c.size = admitReplyLen(len(b.Jobs), shadow)
	hold := r.hold
	if b.Release {
		hold = 0
	}
	c.arg = func() string {
		plan := *p
		arg := make([]byte, 0, 8*(18+2*len(b.Jobs))+len(plan.packed)+plan.calendarsLen())
		arg = packInts(arg, r.now(), b2i(shadow), r.redeem, r.late, r.horizon, b.Owner, hold, b.Stored, b.Keep.Microseconds(),
			b.LateWeight, b.Late.Microseconds(), int64(len(b.Jobs)), int64(len(plan.Limits)), r.pad, r.born.at.Load(), b2i(mirror), r.markerTag(), b2i(b.Peek))
		for _, j := range b.Jobs {
			arg = packInts(arg, j.ID, j.Weight)
		}
		arg = plan.calendars(append(arg, plan.packed...), r.estimate(), r.reach)
		return unsafe.String(&arg[0], len(arg))
	}
	if err := r.admits.do(ctx, c); err != nil {
		return BatchResult{}, mirrored{}, fmt.Errorf("bucket: redis admit for tenant %q: %w", b.Tenant, err)
	}
	k := len(b.Jobs)
	vals := make([]int64, 4+k, 4+2*k)
	if shadow {
		vals = vals[:4+2*k]
	}
	reply := c.reply
	var m mirrored
	if mirror {
		if len(reply) < c.size+16 {
			return BatchResult{}, mirrored{}, fmt.Errorf("bucket: redis admit for tenant %q: a mirrored reply of %d bytes", b.Tenant, len(reply))
		}
		m.now = int64(binary.LittleEndian.Uint64(reply[c.size:]))
		m.raw = reply[c.size+16:]
		reply = reply[:c.size]
	}
	if err := unpackInts(reply, vals); err != nil {
		return BatchResult{}, mirrored{}, fmt.Errorf("bucket: redis admit for tenant %q: %w", b.Tenant, err)
	}
	var waits []int64
	if shadow {
		waits = vals[4+k:]
	}
	res, err := b.Plan.batchResult(vals[0], vals[1], vals[2], vals[3], vals[4:4+k], waits)
	return res, m, err
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// script is one of lua/'s scripts: a function of the library lua.Library (FCALL), or on a Redis
// without functions (before 7.0, or an ACL user that may not load them) the script's text
// (EVALSHA, EVAL).
type script struct {
	fn       string // the library's function
	src, sha string
	ro       bool // read-only: FCALL_RO, EVALSHA_RO, EVAL_RO (a replica may answer)
}

func newScript(fn, src string, ro bool) *script {
	sum := sha1.Sum([]byte(src))
	return &script{fn: lua.LibraryName + "_" + fn, src: src, sha: hex.EncodeToString(sum[:]), ro: ro}
}

// run calls s with the keys and argument build makes: FCALL, and when the server does not know
// the library, FUNCTION LOAD, then FCALL again; or, on a Redis without functions, EVALSHA, and
// EVAL when the server does not know the script. A server that does not know the library (or
// the script) started after the last call that ran it here, or lost it to a flush or a
// failover, and its memory may be new: before the script runs on it, run learns when that
// memory began, and builds the argument again, since it carries that time. Without this, the
// first call on a restarted server would take the limits it forgot for refilled since the
// previous start: a burst. A failed call makes the next one ask too.
func (r *Redis) run(ctx context.Context, s *script, build func() (keys, args []string)) ([]byte, error) {
	return r.exec(ctx, s, build).AsBytes()
}

// exec is run for a reply of any type; its error is the reply's. A call the server refuses
// because it lost admitter's state after the call was built is made again once, with when.
func (r *Redis) exec(ctx context.Context, s *script, build func() (keys, args []string)) rueidis.RedisResult {
	resp := r.execOnce(ctx, s, build)
	if isStaleMemory(resp.Error()) {
		if err := r.refreshBorn(ctx); err != nil {
			return rueidis.NewErrorResult(err)
		}
		resp = r.execOnce(ctx, s, build)
	}
	return resp
}

// execOnce is one try of exec.
func (r *Redis) execOnce(ctx context.Context, s *script, build func() (keys, args []string)) rueidis.RedisResult {
	keys, args := build()
	if r.noFunctions.Load() {
		return r.evalsha(ctx, s, keys, args, build)
	}
	resp := r.fcall(ctx, s, keys, args)
	if err := resp.Error(); err != nil {
		switch {
		case isFunctionNotFound(err):
			r.born.stale()
			if err := r.refreshBorn(ctx); err != nil {
				return rueidis.NewErrorResult(err)
			}
			if err := r.loadLibrary(ctx); err != nil {
				if !noFunctions(err) {
					r.born.stale()
					return rueidis.NewErrorResult(err)
				}
				r.noFunctions.Store(true)
				keys, args = build()
				return r.evalsha(ctx, s, keys, args, build)
			}
			keys, args = build()
			resp = r.fcall(ctx, s, keys, args)
		case noFunctions(err):
			r.noFunctions.Store(true)
			return r.evalsha(ctx, s, keys, args, build)
		}
	}
	if err := resp.Error(); err != nil {
		r.born.stale()
	}
	return resp
}

// markerTag is the tag of the servers' memory marker the scripts read (lua/state.lua memory_of):
// 0 on one server, -1 where they cannot or need not (a Redis Cluster: it lives in another slot;
// the servers' memory not followed: tests with a pinned clock).
func (r *Redis) markerTag() int64 {
	if r.cluster || r.born.off {
		return -1
	}
	return 0
}

// isStaleMemory reports whether err is a script refusing a call built before its server lost
// admitter's state (lua/state.lua memory_of).
func isStaleMemory(err error) bool {
	return err != nil && strings.Contains(err.Error(), "admitter: stale memory")
}

func (r *Redis) fcall(ctx context.Context, s *script, keys, args []string) rueidis.RedisResult {
	cmd := r.client.B()
	if s.ro {
		return r.client.Do(ctx, cmd.FcallRo().Function(s.fn).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
	}
	return r.client.Do(ctx, cmd.Fcall().Function(s.fn).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
}

// evalsha is exec on a Redis without functions.
func (r *Redis) evalsha(ctx context.Context, s *script, keys, args []string, build func() (keys, args []string)) rueidis.RedisResult {
	cmd := r.client.B()
	var resp rueidis.RedisResult
	if s.ro {
		resp = r.client.Do(ctx, cmd.EvalshaRo().Sha1(s.sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
	} else {
		resp = r.client.Do(ctx, cmd.Evalsha().Sha1(s.sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
	}
	if e, ok := rueidis.IsRedisErr(resp.Error()); ok && e.IsNoScript() {
		r.born.stale()
		if err := r.refreshBorn(ctx); err != nil {
			return rueidis.NewErrorResult(err)
		}
		keys, args = build()
		if s.ro {
			resp = r.client.Do(ctx, cmd.EvalRo().Script(s.src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
		} else {
			resp = r.client.Do(ctx, cmd.Eval().Script(s.src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
		}
	}
	if resp.Error() != nil {
		r.born.stale()
	}
	return resp
}

// loadLibrary loads lua.Library on every server (a replica refuses it and gets it from its
// master).
func (r *Redis) loadLibrary(ctx context.Context) error {
	for addr, node := range r.client.Nodes() {
		err := node.Do(ctx, node.B().FunctionLoad().Replace().FunctionCode(lua.Library).Build()).Error()
		if e, ok := rueidis.IsRedisErr(err); ok && strings.HasPrefix(e.Error(), "READONLY") {
			continue
		}
		if err != nil {
			return fmt.Errorf("bucket: redis %s: function load: %w", addr, err)
		}
	}
	return nil
}

// isFunctionNotFound reports whether err is FCALL's answer for a library the server lacks.
func isFunctionNotFound(err error) bool {
	e, ok := rueidis.IsRedisErr(err)
	return ok && strings.Contains(e.Error(), "Function not found")
}

// noFunctions reports whether err says the server cannot run functions for this client: a
// Redis before 7.0 (unknown command), or an ACL user not allowed to (NOPERM).
func noFunctions(err error) bool {
	var e *rueidis.RedisError
	if !errors.As(err, &e) {
		return false
	}
	msg := e.Error()
	return strings.Contains(msg, "unknown command") || strings.HasPrefix(msg, "NOPERM")
}

// decodeReply turns the script's packed reply into a Result.
func decodeReply(req *Request, reply []byte) (Result, error) {
	var n [5]int64
	if err := unpackInts(reply, n[:]); err != nil {
		return Result{}, fmt.Errorf("bucket: redis decision for tenant %q: %w", req.Tenant, err)
	}
	return req.Plan.result(n[0], n[1], n[2], n[3], n[4])
}

// Prepare readies the backend before its first decision: it learns when the servers' memory
// began and loads the scripts on every server, so that the first decisions do not pay for
// either (four round trips instead of one). Decisions do both themselves when needed: Prepare
// only moves the cost to start-up.
func (r *Redis) Prepare(ctx context.Context) error {
	r.born.stale()
	if err := r.refreshBorn(ctx); err != nil {
		return err
	}
	err := r.loadLibrary(ctx)
	if err == nil || !noFunctions(err) {
		return err
	}
	r.noFunctions.Store(true)
	return r.loadScripts(ctx)
}

// scripts is every script the backend runs.
func (r *Redis) scripts() []*script {
	return []*script{r.script, r.admit, r.inspect, r.lease, r.pool, r.merge}
}

// loadScripts loads every script on every server, for EVALSHA on a Redis without functions.
func (r *Redis) loadScripts(ctx context.Context) error {
	for addr, node := range r.client.Nodes() {
		for _, s := range r.scripts() {
			if err := node.Do(ctx, node.B().ScriptLoad().Script(s.src).Build()).Error(); err != nil {
				return fmt.Errorf("bucket: redis %s: script load: %w", addr, err)
			}
		}
	}
	return nil
}

// Ping checks that Redis answers.
func (r *Redis) Ping(ctx context.Context) error {
	if err := r.client.Do(ctx, r.client.B().Ping().Build()).Error(); err != nil {
		return fmt.Errorf("bucket: redis ping: %w", err)
	}
	return nil
}

// now is the time argument of the scripts: 0 (the server reads its own clock) unless pinned.
func (r *Redis) now() int64 {
	if r.clock == nil {
		return 0
	}
	return r.clock().UnixMicro()
}

// estimate is this host's guess of the scripts' time (µs), to choose the quotas' calendars: the
// pinned clock, else this host's clock (the server's may differ by up to calMargin).
func (r *Redis) estimate() int64 {
	if r.clock == nil {
		return time.Now().UnixMicro()
	}
	return r.clock().UnixMicro()
}

// stateKey is the key of a tenant's bucket state; its job keys extend it with ":" + job id.
func (r *Redis) stateKey(tenant string) string { return r.prefix + "{" + tenant + "}" }

// keys returns the keys of one script call on tenant: its state key, then the state key
// followed by each suffix (shadowSuffix, fenceSuffix), built in one string.
func (r *Redis) keys(tenant string, suffixes ...string) []string {
	state := len(r.prefix) + len(tenant) + 2
	n := state
	for _, s := range suffixes {
		n += state + len(s)
	}
	var b strings.Builder
	b.Grow(n)
	for i := -1; i < len(suffixes); i++ {
		b.WriteString(r.prefix)
		b.WriteByte('{')
		b.WriteString(tenant)
		b.WriteByte('}')
		if i >= 0 {
			b.WriteString(suffixes[i])
		}
	}
	all := b.String()
	keys := make([]string, 1, 1+len(suffixes))
	keys[0] = all[:state]
	at := state
	for _, s := range suffixes {
		keys = append(keys, all[at:at+state+len(s)])
		at += state + len(s)
	}
	return keys
}

// shadowSuffix follows a tenant's state key to name its shadow state (see
// BatchResult.ShadowWaits): same hash slot; job keys follow it with ':', so none is this.
const shadowSuffix = "#shadow"

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
	r.born.off = true
	r.pad = 60000
	binary.LittleEndian.PutUint64(r.fixed[24:], uint64(r.pad))
}
