package bucket

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/admitter/admitter/lua"
	"github.com/redis/rueidis"
)

// born tracks whether the Redis servers have lost admitter's state, and since when. A server
// that restarted without its data, or was emptied, has forgotten every tenant's state; a limit
// without state is then taken to have been used up to a stated bound at that moment (lua/state.lua
// load): otherwise every loss would be followed by a burst of a full capacity per tenant. A
// server that never held admitter's state (a new deployment) has forgotten nothing: its limits
// start full, as the plans say.
//
// The two are told apart by a marker (lua/memory.lua) that every replica keeps on every server
// (on Redis Cluster, every master, under a hash tag of a slot it owns) and rewrites each
// bornCheckEvery: a server without it lost admitter's state if this deployment had marked a
// Redis before, which the replica knows from its own checks and, across restarts of every
// replica, from a MemoryRecord kept outside Redis (cmd/admitter: in NATS). A marker restored
// from a snapshot older than the server's start by more than snapshotGap (no append-only file)
// means what came after the snapshot is lost. The first replica to find a loss writes it into
// the marker; every replica adopts the latest. A server of a cluster that does not answer is
// taken to be restarting now, without failing the decisions the others make.
type born struct {
	at      atomic.Int64 // µs of server time; 0 when nothing is known lost
	checked atomic.Int64 // unix ns of the last check; 0 forces one
	mu      sync.Mutex   // held by the one caller checking
	lost    int64        // the latest loss the markers record (µs), under mu
	nodes   map[string]*nodeMemory
	// marked: this deployment has marked a Redis (a marker was found, or the record says so),
	// under mu; until then a server without the marker never knew admitter.
	marked   bool
	recorded bool          // the record knows it (Mark succeeded, or Marked said so), under mu
	record   MemoryRecord  // nil: only this process's own checks
	off      bool          // pinned clock (tests): not refreshed
	gap      time.Duration // snapshotGap; shorter in tests
	// onForget is called, under mu, for each loss this process finds (not for one another
	// replica found first).
	onForget func(Forgetting)
}

// nodeMemory is what the checks know of one server, by address.
type nodeMemory struct {
	run   string // the server's run_id at the last check
	start int64  // its start (µs), computed once per run: uptime is whole seconds
	seen  int64  // server time of the last check that found the marker on this run; 0: none
	tag   string // the hash tag of the server's marker; "" until found
	probe int    // candidate tags tried so far without finding one the server owns
}

// A MemoryRecord remembers, outside Redis, that this deployment has marked a Redis: with it, a
// Redis that lost everything while no replica ran is told from one that never knew admitter.
// Safe for concurrent use. cmd/admitter keeps it in a NATS key-value bucket.
type MemoryRecord interface {
	// Marked reports whether a Redis was ever marked.
	Marked(ctx context.Context) (bool, error)
	// Mark notes that one is; marking again is harmless.
	Mark(ctx context.Context) error
}

// A Forgetting is a loss of admitter's state that a check found on a Redis server.
type Forgetting struct {
	// Node is the server's address.
	Node string
	// At is when the state began to be lost: limits without state are taken to have been used
	// up (to the bound README's "Faults" table states per kind) at At.
	At time.Time
	// Why says what happened, for the log.
	Why string
}

// bornCheckEvery is how often the servers are asked when they started, and the markers
// rewritten.
const bornCheckEvery = time.Second

// snapshotGap is how much older than its server's start a marker restored without an
// append-only file may be before what came after it is taken as lost: a marker is rewritten
// every bornCheckEvery, so a server shut down cleanly (which saves a snapshot) and started again
// finds one younger than this.
const snapshotGap = 10 * time.Second

// markerTags is how many hash tags a check tries at once to find one whose slot a server owns:
// on a cluster of n masters, (1 - 1/n)^markerTags that none is (1.5e-11 for 3).
const markerTags = 64

// stale forces a check before the next decision: a new connection or a failed call may mean a
// restarted server.
func (b *born) stale() { b.checked.Store(0) }

// refreshBorn asks the servers when their memory began before a decision uses it. After a new
// connection or a failed call (stale) every decision waits for that answer, and fails with the
// error when it cannot be had: a decision on a restarted server with the old start would take
// its forgotten limits for unused, a burst. Otherwise it asks at most once per bornCheckEvery,
// by one caller while the others go on with the value they have (a restart is always a new
// connection, so the value cannot be stale unnoticed); a failure there makes the next decision
// wait.
func (r *Redis) refreshBorn(ctx context.Context) error {
	b := &r.born
	if b.off {
		return nil
	}
	last := b.checked.Load()
	if last == 0 {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.checked.Load() != 0 { // another caller checked while this one waited
			return nil
		}
		return r.checkBorn(ctx)
	}
	if time.Now().UnixNano()-last < int64(bornCheckEvery) || !b.mu.TryLock() {
		return nil
	}
	defer b.mu.Unlock()
	if r.checkBorn(ctx) != nil {
		b.stale()
	}
	return nil
}

// bornInfoTimeout bounds the questions to one server: one that does not answer in time is
// taken as one that may have restarted (see checkBorn), not as a reason to fail every decision.
const bornInfoTimeout = 100 * time.Millisecond

// nodeCheck is one server's answer to a check.
type nodeCheck struct {
	addr   string
	node   rueidis.Client
	fields map[string]string
	now    int64 // the server's time (µs)
	start  int64
	aof    bool
	tag    string // found by this check's probe
	owns   bool   // the server owns a tag's slot (a master)
	lost   int64  // the marker's loss time after the check
	found  bool   // this check recorded a new loss
	err    error
}

// checkBorn asks every server when it started and reads and rewrites its marker, under born.mu.
func (r *Redis) checkBorn(ctx context.Context) error {
	b := &r.born
	if b.nodes == nil {
		b.nodes = map[string]*nodeMemory{}
	}
	if !b.marked && b.record != nil {
		marked, err := b.record.Marked(ctx)
		if err != nil {
			return fmt.Errorf("bucket: has this deployment used a redis before (its record): %w", err)
		}
		b.marked, b.recorded = marked, marked
	}
	nodes := r.client.Nodes()
	answers := make(chan *nodeCheck, len(nodes))
	used, gap := b.marked, b.gap
	if gap == 0 {
		gap = snapshotGap
	}
	for addr, node := range nodes {
		n := b.nodes[addr]
		if n == nil {
			n = &nodeMemory{}
			b.nodes[addr] = n
		}
		go func() { answers <- r.checkNode(ctx, addr, node, *n, used, gap) }()
	}
	var errs []error
	missed, now := false, int64(0)
	for range nodes {
		a := <-answers
		if a.err != nil {
			missed = true
			errs = append(errs, fmt.Errorf("bucket: redis %s: %w", a.addr, a.err))
			continue
		}
		now = max(now, a.now)
		n := b.nodes[a.addr]
		restarted := n.run != "" && n.run != a.fields["run_id"]
		n.run, n.start = a.fields["run_id"], a.start
		if a.tag != "" {
			n.tag, n.probe = a.tag, 0
		} else if !a.owns {
			n.probe += markerTags
		}
		if !a.owns {
			continue
		}
		if a.found && b.onForget != nil {
			why := "lost admitter's keys without restarting (flushed, evicted, or a replica promoted before it had them)"
			switch {
			case a.lost < a.start:
				why = fmt.Sprintf("restarted from a snapshot taken about %v before it started, without an append-only file: what admitter decided after the snapshot is lost",
					(time.Duration(a.start-a.lost) * time.Microsecond).Round(time.Second))
			case restarted:
				why = "restarted without its data"
			case n.seen == 0:
				why = "restarted or emptied while no admitter of this deployment watched it"
			}
			b.onForget(Forgetting{Node: a.addr, At: time.UnixMicro(a.lost), Why: why})
		}
		n.seen = a.now
		b.marked = true
		b.lost = max(b.lost, a.lost)
	}
	if now == 0 { // no server answered
		return errors.Join(errs...)
	}
	b.checked.Store(time.Now().UnixNano())
	if b.marked && !b.recorded && b.record != nil {
		if err := b.record.Mark(ctx); err == nil {
			b.recorded = true
		}
	}
	at := b.lost
	if missed {
		// A server that does not answer may be restarting without its data: its tenants'
		// limits without state are taken as lost from now on, until it answers again (the
		// new connection makes the next decision ask). The other servers' tenants keep being
		// decided; only those without state lose what they would have had.
		at = max(at, now)
	}
	b.at.Store(at)
	return nil
}

// checkNode asks one server when it started (INFO), finds the hash tag of its marker when n
// does not know it (a server that owns no candidate's slot, a replica, has none: owns false),
// then reads and rewrites the marker (lua/memory.lua). used: this deployment has marked a Redis.
func (r *Redis) checkNode(ctx context.Context, addr string, node rueidis.Client, n nodeMemory, used bool, gap time.Duration) *nodeCheck {
	a := &nodeCheck{addr: addr, node: node, tag: n.tag}
	ctx, cancel := context.WithTimeout(ctx, bornInfoTimeout)
	defer cancel()
	cmds := rueidis.Commands{node.B().Info().Section("server").Section("persistence").Build()}
	if n.tag == "" {
		for i := range markerTags {
			cmds = append(cmds, node.B().Exists().Key(r.markerKey(strconv.Itoa(n.probe+i))).Build())
		}
	}
	res := node.DoMulti(ctx, cmds...)
	info, err := res[0].ToString()
	if err != nil {
		a.err = fmt.Errorf("info: %w", err)
		return a
	}
	a.fields = infoFields(info)
	t, err1 := strconv.ParseInt(a.fields["server_time_usec"], 10, 64)
	up, err2 := strconv.ParseInt(a.fields["uptime_in_seconds"], 10, 64)
	if err1 != nil || err2 != nil {
		a.err = errors.New("info lacks server_time_usec or uptime_in_seconds")
		return a
	}
	a.now, a.aof = t, a.fields["aof_enabled"] == "1"
	if a.start = n.start; n.run != a.fields["run_id"] || a.fields["run_id"] == "" {
		// uptime is whole seconds, rounded down: the start taken is at or after the real one,
		// the safe side.
		a.start = t - up*1_000_000
	}
	for i, c := range res[1:] {
		err := c.Error()
		if err == nil {
			a.tag = strconv.Itoa(n.probe + i)
			break
		}
		if e, ok := rueidis.IsRedisErr(err); !ok || !isRedirect(e) {
			a.err = fmt.Errorf("look for the marker: %w", err)
			return a
		}
	}
	if a.tag == "" {
		return a // no slot of a candidate here: a replica, or a master of few slots (next time)
	}
	since := max(a.start, n.seen)
	if n.run != a.fields["run_id"] {
		since = a.start
	}
	reply, err := memoryScript.Exec(ctx, node, []string{r.markerKey(a.tag)}, []string{
		b2s(used), strconv.FormatInt(since, 10), strconv.FormatInt(a.start, 10), b2s(a.aof),
		strconv.FormatInt(gap.Microseconds(), 10)}).AsIntSlice()
	if e, ok := rueidis.IsRedisErr(err); ok && isRedirect(e) {
		a.tag = "" // the slot moved: find another tag next time
		return a
	}
	if err == nil && len(reply) != 3 {
		err = fmt.Errorf("marker script replied %v, want 3 integers", reply)
	}
	if err != nil {
		a.err = fmt.Errorf("marker: %w", err)
		return a
	}
	a.owns, a.lost, a.found, a.now = true, reply[0], reply[1] == 1, max(a.now, reply[2])
	return a
}

// memoryScript is lua/memory.lua, sent by EVALSHA (EVAL when the server lacks it).
var memoryScript = rueidis.NewLuaScript(lua.Memory)

// markerKey is the key of the marker under hash tag tag.
func (r *Redis) markerKey(tag string) string { return r.prefix + "memory{" + tag + "}" }

// isRedirect reports a cluster's redirection: the key's slot is another server's.
func isRedirect(e *rueidis.RedisError) bool {
	_, moved := e.IsMoved()
	_, ask := e.IsAsk()
	return moved || ask
}

func b2s(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// infoFields parses the "key:value" lines of an INFO reply.
func infoFields(info string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(k, "#") {
			out[k] = v
		}
	}
	return out
}

// OnForget calls f for each loss of admitter's state that this process finds on a Redis server
// (one another replica found first is adopted without a call): every tenant's limits without
// state are then taken to have been used up, to a bound per kind, at Forgetting.At. Call it
// before the first decision.
func (r *Redis) OnForget(f func(Forgetting)) { r.born.onForget = f }

// Record gives the backend the deployment's MemoryRecord. Call it before the first decision.
func (r *Redis) Record(rec MemoryRecord) { r.born.record = rec }

// DialRedis connects to the Redis at url (see RedisClientOption) and returns a backend that
// owns the client (Close releases it). Every connection the client opens, a reconnection after
// a server restart among them, makes the next decision first ask the servers when their memory
// began: a restart is noticed before the first decision on the new connection.
func DialRedis(url, prefix string, opts Options) (*Redis, error) {
	opt, err := RedisClientOption(url)
	if err != nil {
		return nil, err
	}
	return DialRedisWith(opt, prefix, opts)
}

// DialRedisWith is DialRedis with client options made by RedisClientOption and then given
// credentials or TLS settings (a CA, a client certificate) the URL cannot carry.
func DialRedisWith(opt rueidis.ClientOption, prefix string, opts Options) (*Redis, error) {
	var made atomic.Pointer[Redis] // a cluster client dials from its own goroutines, in NewClient too
	opt.DialCtxFn = func(ctx context.Context, dst string, d *net.Dialer, cfg *tls.Config) (net.Conn, error) {
		var conn net.Conn
		var err error
		if cfg != nil {
			conn, err = (&tls.Dialer{NetDialer: d, Config: cfg}).DialContext(ctx, "tcp", dst)
			if err == nil {
				conn = &handshaken{Conn: conn}
			}
		} else {
			conn, err = d.DialContext(ctx, "tcp", dst)
		}
		if r := made.Load(); err == nil && r != nil {
			r.born.stale()
		}
		return conn, err
	}
	client, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("bucket: connect to redis: %w", err)
	}
	r := NewRedis(client, prefix, opts)
	r.owned = true
	made.Store(r)
	return r, nil
}

// handshaken is a TLS connection whose server has not answered yet. Under TLS 1.3 the client's
// handshake ends before the server has checked the client's certificate: a server refusing it
// sends an alert and closes, and the client may see only its first command's write reset or
// its read cut short. Until the first answer, such errors say so (as nats.go's do), so that
// they are not taken for a passing network failure.
type handshaken struct {
	net.Conn
	answered atomic.Bool
}

func (c *handshaken) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.answered.Store(true)
	}
	return n, c.annotate(err)
}

func (c *handshaken) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	return n, c.annotate(err)
}

func (c *handshaken) annotate(err error) error {
	if err == nil || c.answered.Load() || errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, net.ErrClosed) {
		return err
	}
	return fmt.Errorf("connection closed by remote after TLS handshake: %w", err)
}

// Close releases the client of a backend made by DialRedis; for one made by NewRedis the client
// is the caller's and Close does nothing.
func (r *Redis) Close() {
	if r.owned {
		r.client.Close()
	}
}
