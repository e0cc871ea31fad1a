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
// state.
type born struct {
	at      atomic.Int64 // µs of server time; 0 when nothing is known lost
	checked atomic.Int64 // unix ns of the last check; 0 forces one
	mu      sync.Mutex   // held by the one caller checking
	// starts is each server's start (µs) by run_id, under mu: a server's start is computed
	// once (its uptime is whole seconds: computed again it would move), so a check of the
	// same servers finds the same value.
	starts map[string]int64
	off    bool // pinned clock (tests): not refreshed
	// onChange is called, under mu, when a check finds a new start.
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
	at, err := r.memoryBegan(ctx)
	if err != nil {
		return fmt.Errorf("bucket: when did redis start (a restart forgets every limit): %w", err)
	}
	b.checked.Store(time.Now().UnixNano())
	if old := b.at.Swap(at); old != at && at != 0 && b.onChange != nil {
		b.onChange(time.UnixMicro(at), old == 0)
	}
	return nil
}

// memoryBegan is the latest start, in server time, of the servers that do not persist with an
// append-only file; 0 when every server does. Under born.mu.
func (r *Redis) memoryBegan(ctx context.Context) (int64, error) {
	b := &r.born
	var latest int64
	seen := map[string]int64{}
	for addr, node := range r.client.Nodes() {
		info, err := node.Do(ctx, node.B().Info().Section("server").Section("persistence").Build()).ToString()
		if err != nil {
			return 0, fmt.Errorf("bucket: redis %s: info: %w", addr, err)
		}
		fields := infoFields(info)
		if fields["aof_enabled"] == "1" {
			continue
		}
		start, ok := b.starts[fields["run_id"]]
		if !ok || fields["run_id"] == "" {
			now, err1 := strconv.ParseInt(fields["server_time_usec"], 10, 64)
			up, err2 := strconv.ParseInt(fields["uptime_in_seconds"], 10, 64)
			if err1 != nil || err2 != nil {
				return 0, fmt.Errorf("bucket: redis %s: info lacks server_time_usec or uptime_in_seconds", addr)
			}
			// uptime is whole seconds, rounded down: the start taken is at or after the real
			// one, the safe side.
			start = now - up*1_000_000
		}
		seen[fields["run_id"]] = start
		latest = max(latest, start)
	}
	b.starts = seen
	return latest, nil
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
	var r *Redis
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
		if err == nil && r != nil {
			r.born.stale()
		}
		return conn, err
	}
	client, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("bucket: connect to redis: %w", err)
	}
	r = NewRedis(client, prefix, opts)
	r.owned = true
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
