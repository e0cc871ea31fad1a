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

	"github.com/redis/rueidis"
)

// born tracks when the Redis servers' memory began. A Redis that restarted without persisting
// its data has forgotten every tenant's state; a limit without state is then taken to have been
// empty at that moment and to have refilled since (lua/state.lua clamp_tats), instead of full:
// otherwise every restart of Redis would be followed by a burst of a full capacity per tenant.
// A server that persists with an append-only file (appendonly yes) is trusted to have kept its
// state. A server of a cluster that does not answer is taken to be restarting now, without
// failing the decisions the others make.
type born struct {
	at      atomic.Int64 // µs of server time; 0 when nothing is known lost
	started int64        // the latest start of the servers that answered, under mu
	checked atomic.Int64 // unix ns of the last check; 0 forces one
	mu      sync.Mutex   // held by the one caller checking
	// starts is each server's start (µs) by run_id, under mu: a server's start is computed
	// once (its uptime is whole seconds: computed again it would move), so a check of the
	// same servers finds the same value.
	starts map[string]int64
	runs   map[string]string // each server's run_id by address, under mu: another one is a restart
	off    bool              // pinned clock (tests): not refreshed
	// onChange is called, under mu, at the first check that finds a server keeping no
	// append-only file, then when a check finds such a server restarted.
	onChange func(at time.Time, first bool)
}

// bornCheckEvery is how often the servers are asked when they started.
const bornCheckEvery = time.Second

// stale forces a check before the next decision: a new connection or a failed call may mean a
// restarted server.
func (b *born) stale() { b.checked.Store(0) }

// refreshBorn asks the servers when their memory began before a decision uses it. After a new
// connection or a failed call (stale) every decision waits for that answer, and fails with the
// error when it cannot be had: a decision on a restarted server with the old start would take
// its forgotten limits for refilled since then, a burst. Otherwise it asks at most once per
// bornCheckEvery, by one caller while the others go on with the value they have (a restart is
// always a new connection, so the value cannot be stale unnoticed); a failure there makes the
// next decision wait.
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

// checkBorn asks the servers, under born.mu.
func (r *Redis) checkBorn(ctx context.Context) error {
	b := &r.born
	started, restarted, now, missed, err := r.memoryBegan(ctx)
	if err != nil {
		return fmt.Errorf("bucket: when did redis start (a restart forgets every limit): %w", err)
	}
	b.checked.Store(time.Now().UnixNano())
	if b.onChange != nil {
		switch {
		case b.started == 0 && started != 0:
			b.onChange(time.UnixMicro(started), true)
		case restarted != 0:
			b.onChange(time.UnixMicro(restarted), false)
		}
	}
	b.started = started
	at := started
	if missed {
		// A server that does not answer may be restarting without its data: its tenants'
		// limits without state are taken for empty from now on, until it answers again (the
		// new connection makes the next decision ask). The other servers' tenants keep being
		// decided; only those without state lose what they would have had.
		at = max(at, now)
	}
	b.at.Store(at)
	return nil
}

// bornInfoTimeout bounds the question to one server: one that does not answer in time is
// taken as one that may have restarted (see checkBorn), not as a reason to fail every decision.
const bornInfoTimeout = 100 * time.Millisecond

// memoryBegan asks every server when its memory began. started is the latest start, in server
// time (µs), of the servers that answer and do not persist with an append-only file (0 when
// every one does); restarted the latest start of those among them that restarted since the
// last check (another run_id at the same address; 0 for none); now is the latest server time
// they gave; missed says that some server did not answer. Only when none answers is it an
// error. Under born.mu.
func (r *Redis) memoryBegan(ctx context.Context) (started, restarted, now int64, missed bool, err error) {
	b := &r.born
	type answer struct {
		addr   string
		fields map[string]string
		err    error
	}
	nodes := r.client.Nodes()
	answers := make(chan answer, len(nodes))
	for addr, node := range nodes {
		go func() {
			ictx, cancel := context.WithTimeout(ctx, bornInfoTimeout)
			defer cancel()
			info, err := node.Do(ictx, node.B().Info().Section("server").Section("persistence").Build()).ToString()
			answers <- answer{addr, infoFields(info), err}
		}()
	}
	seen := map[string]int64{}
	if b.runs == nil {
		b.runs = map[string]string{}
	}
	var errs []error
	for range nodes {
		a := <-answers
		if a.err != nil {
			missed = true
			errs = append(errs, fmt.Errorf("bucket: redis %s: info: %w", a.addr, a.err))
			continue
		}
		t, err1 := strconv.ParseInt(a.fields["server_time_usec"], 10, 64)
		up, err2 := strconv.ParseInt(a.fields["uptime_in_seconds"], 10, 64)
		if err1 != nil || err2 != nil {
			return 0, 0, 0, false, fmt.Errorf("bucket: redis %s: info lacks server_time_usec or uptime_in_seconds", a.addr)
		}
		now = max(now, t)
		run := a.fields["run_id"]
		prev, known := b.runs[a.addr]
		b.runs[a.addr] = run
		if a.fields["aof_enabled"] == "1" {
			continue
		}
		start, ok := b.starts[a.fields["run_id"]]
		if !ok || a.fields["run_id"] == "" {
			// uptime is whole seconds, rounded down: the start taken is at or after the real
			// one, the safe side.
			start = t - up*1_000_000
		}
		seen[run] = start
		started = max(started, start)
		if known && prev != run {
			restarted = max(restarted, start)
		}
	}
	if now == 0 { // no server answered
		return 0, 0, 0, true, errors.Join(errs...)
	}
	if missed { // a server that answers again with the same run_id keeps the start it had
		for id, start := range b.starts {
			if _, ok := seen[id]; !ok {
				seen[id] = start
			}
		}
	}
	b.starts = seen
	return started, restarted, now, missed, nil
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

// OnForget calls f when the limiter learns when a Redis server that keeps no append-only file
// began (first: at its first check) or finds that one restarted: every tenant without state is
// then taken to have been empty at that time. Call it before the first decision.
func (r *Redis) OnForget(f func(at time.Time, first bool)) { r.born.onChange = f }

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
