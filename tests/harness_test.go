// Package tests holds admitter's end-to-end tests: they build the admitter binary and run it as
// a user would, against an in-process JetStream server and a real redis-server.
package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/admitter/admitter/admission"
	"github.com/admitter/admitter/internal/testenv"
	"github.com/admitter/admitter/subjects"
	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// binary is the admitter built once for all tests, with the race detector.
var binary string

// plain is the admitter built without the race detector (which multiplies memory use), for the
// tests that measure memory; built on first use.
var plain struct {
	once sync.Once
	path string
	err  error
}

func plainBinary(t *testing.T) string {
	t.Helper()
	plain.once.Do(func() {
		plain.path = filepath.Join(filepath.Dir(binary), "admitter-plain")
		out, err := exec.Command("go", "build", "-o", plain.path, "../cmd/admitter").CombinedOutput()
		if err != nil {
			plain.err = fmt.Errorf("build admitter without -race: %v\n%s", err, out)
		}
	})
	if plain.err != nil {
		t.Fatal(plain.err)
	}
	return plain.path
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "admitter-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "admitter")
	build := exec.Command("go", "build", "-race", "-o", binary, "../cmd/admitter")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build admitter:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// world is one test's servers, plans file and client connection.
type world struct {
	t     *testing.T
	nats  *testenv.NATSServer // nil when the world runs on servers of another kind (a cluster)
	redis *testenv.RedisServer
	// natsURL and redisURL are what the admitter is given.
	natsURL, redisURL string
	nc                *nats.Conn
	js                jetstream.JetStream
	plans             string
	// parts is how many partitions the input is spread over (ADMITTER_PARTITIONS; the server
	// maps the jobs' subjects to them: newPartitionedWorld).
	parts int
}

// newPartitionedWorld is newWorld on a server that spreads the input over n partitions with
// the account mapping the README gives (admission.Partitions), and admitters told so.
func newPartitionedWorld(t *testing.T, plans string, n int) *world {
	t.Helper()
	redis := testenv.StartPersistentRedis(t)
	nsrv := testenv.StartNATSWith(t, partitionMapping(t, n))
	w := newWorldOn(t, plans, nsrv.URL(), redis.URL())
	w.nats, w.redis, w.parts = nsrv, redis, n
	return w
}

// partitionMapping tunes a server's options with the mapping of the default input over n
// partitions.
func partitionMapping(t *testing.T, n int) func(*server.Options) {
	src, dst := admission.Partitions(subjects.MustParse("jobs.submit.{tenant}.>"), "JOBS", n).Mapping()
	return func(o *server.Options) {
		global := server.NewAccount(server.DEFAULT_GLOBAL_ACCOUNT)
		if err := global.AddMapping(src, dst); err != nil {
			t.Fatal(err)
		}
		o.Accounts = []*server.Account{global}
	}
}

// waitShared waits until the replicas whose /metrics are at urls hold every partition between
// them, each at least one.
func (w *world) waitShared(urls ...string) {
	w.t.Helper()
	waitFor(w.t, 20*time.Second, "the replicas to share the partitions", func() bool {
		sum := 0.0
		for _, url := range urls {
			_, body := httpGet(w.t, url)
			n := metricValue(body, wire.MetricPartitions.Prom)
			if n < 1 {
				return false
			}
			sum += n
		}
		return int(sum) == w.parts
	})
}

// newWorld starts a world whose Redis persists, as the README recommends: buckets survive its
// restarts.
func newWorld(t *testing.T, plans string) *world {
	t.Helper()
	return newWorldWith(t, plans, testenv.StartPersistentRedis(t))
}

// newWorldWith starts a world around the given Redis.
func newWorldWith(t *testing.T, plans string, redis *testenv.RedisServer) *world {
	t.Helper()
	n := testenv.StartNATS(t)
	w := newWorldOn(t, plans, n.URL(), redis.URL())
	w.nats, w.redis = n, redis
	return w
}

// newWorldOn is a world on servers the test started: NATS at natsURL (comma-separated URLs of a
// cluster), Redis at redisURL.
func newWorldOn(t *testing.T, plans, natsURL, redisURL string) *world {
	t.Helper()
	w := &world{t: t, natsURL: natsURL, redisURL: redisURL}
	w.plans = filepath.Join(t.TempDir(), "plans.yaml")
	if err := os.WriteFile(w.plans, []byte(plans), 0o644); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(natsURL, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	w.nc = nc
	if w.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	return w
}

// env is the admitter's environment for this world, with overrides.
func (w *world) env(over ...string) []string {
	e := []string{
		"PATH=" + os.Getenv("PATH"),
		"ADMITTER_NATS_URL=" + w.natsURL,
		"ADMITTER_REDIS_URL=" + w.redisURL,
		"ADMITTER_PLANS_FILE=" + w.plans,
		"ADMITTER_LOG_FORMAT=text",
		"ADMITTER_HTTP_ADDR=off", // tests that want it pick a free port
		"ADMITTER_API_ADDR=off",  // likewise
	}
	if w.parts > 1 {
		e = append(e, fmt.Sprintf("ADMITTER_PARTITIONS=%d", w.parts))
	}
	return append(e, over...)
}

// command prepares an admitter subcommand with this world's environment.
func (w *world) command(args ...string) *exec.Cmd {
	cmd := exec.Command(binary, args...)
	cmd.Env = w.env()
	return cmd
}

// proc is a running admitter.
type proc struct {
	t    *testing.T
	cmd  *exec.Cmd
	logs *syncBuffer
	done chan struct{}
	err  error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// start runs the admitter and waits until it admits.
func (w *world) start(over ...string) *proc {
	w.t.Helper()
	return w.startBinary(binary, over...)
}

// startBinary runs the given admitter build and waits until it admits.
func (w *world) startBinary(bin string, over ...string) *proc {
	w.t.Helper()
	p := &proc{t: w.t, cmd: exec.Command(bin), logs: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Env = w.env(over...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	w.t.Cleanup(func() {
		p.kill()
		if w.t.Failed() {
			w.t.Logf("admitter logs:\n%s", p.logs.String())
		}
	})
	waitFor(w.t, 20*time.Second, "the admitter to start consuming", func() bool {
		select {
		case <-p.done:
			w.t.Fatalf("admitter exited at start (%v):\n%s", p.err, p.logs.String())
		default:
		}
		return strings.Contains(p.logs.String(), "admitting")
	})
	return p
}

func (p *proc) kill() {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Kill()
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
	}
}

// signal sends sig and waits (bounded) for the exit status.
func (p *proc) signal(sig syscall.Signal, within time.Duration) int {
	p.t.Helper()
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(within):
		p.t.Fatalf("admitter did not exit within %v of %v:\n%s", within, sig, p.logs.String())
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	return 0
}

// waitFor polls cond until it holds, failing after timeout.
var waitFor = testenv.WaitFor

// publish stores a job on the input stream and waits for the PubAck.
func (w *world) publish(subject, payload string, hdr ...string) {
	w.t.Helper()
	m := nats.NewMsg(subject)
	m.Data = []byte(payload)
	for i := 0; i+1 < len(hdr); i += 2 {
		m.Header.Add(hdr[i], hdr[i+1])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := w.js.PublishMsg(ctx, m); err != nil {
		w.t.Fatalf("publish %s: %v", subject, err)
	}
}

// job is a message read back from an output stream.
type job struct {
	subject string
	payload string
	header  nats.Header
	stored  time.Time
}

// read returns every message on the stream, waiting (bounded) until there are at least n.
func (w *world) read(stream string, n int, timeout time.Duration) []job {
	w.t.Helper()
	var out []job
	waitFor(w.t, timeout, fmt.Sprintf("%d messages on %s", n, stream), func() bool {
		out = w.readAll(stream)
		return len(out) >= n
	})
	return out
}

// readAll returns every message now on the stream.
func (w *world) readAll(stream string) []job { return w.readStream(stream, false) }

// readHeaders is readAll without the payloads (job.payload is empty): cheaper for large jobs.
func (w *world) readHeaders(stream string) []job { return w.readStream(stream, true) }

// readStream reads every message now on the stream with an ordered consumer, in order. A read
// that fails (a cluster electing a leader, a node that restarted and is not ready) is tried
// again, over a new connection (to whichever node answers), while readRetries have not passed;
// a try takes at most a minute more, and its read by sequence five.
func (w *world) readStream(stream string, headersOnly bool) []job {
	w.t.Helper()
	until := time.Now().Add(readRetries)
	out, err := w.tryReadStream(w.js, stream, headersOnly)
	for try := 1; err != nil && time.Now().Before(until); try++ {
		w.t.Logf("read %s (try %d): %v", stream, try, err)
		time.Sleep(2 * time.Second)
		nc, cerr := nats.Connect(w.natsURL)
		if cerr != nil {
			err = cerr
			continue
		}
		js, jerr := jetstream.New(nc)
		if err = jerr; err == nil {
			if out, err = w.tryReadStream(js, stream, headersOnly); err != nil {
				w.t.Logf("read %s (try %d): %v; reading by sequence", stream, try, err)
				out, err = readBySequence(js, stream)
			}
		}
		nc.Close()
	}
	if err != nil {
		w.t.Fatalf("read %s: %v", stream, err)
	}
	return out
}

// readRetries bounds how long readStream tries again.
const readRetries = 3 * time.Minute

// readBySequence reads every message now on the stream one by one from the stream's leader,
// without a consumer: after NATS nodes were killed and restarted, a node may lack the interest
// that carries a consumer's pull requests (measured: "no responders" from one node of three for
// minutes while the stream API answered on all).
func readBySequence(js jetstream.JetStream, stream string) ([]job, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, err
	}
	var out []job
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("message %d: %w", seq, err)
		}
		out = append(out, job{subject: m.Subject, payload: string(m.Data), header: m.Header, stored: m.Time})
	}
	return out, nil
}

func (w *world) tryReadStream(js jetstream.JetStream, stream string, headersOnly bool) ([]job, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, err
	}
	if info.State.Msgs == 0 {
		return nil, nil
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{HeadersOnly: headersOnly})
	if err != nil {
		return nil, fmt.Errorf("ordered consumer: %w", err)
	}
	// Deleted when read: tests poll with reads, and the server's consumers are limited.
	defer func() {
		if ci := c.CachedInfo(); ci != nil {
			dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer dcancel()
			_ = s.DeleteConsumer(dctx, ci.Name)
		}
	}()
	var out []job
	left := info.State.Msgs // a fetch of what is there returns at once
	for {
		batch, err := c.Fetch(int(min(left, 256)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, fmt.Errorf("fetch after %d messages: %w", len(out), err)
		}
		n, pending, last := 0, uint64(0), uint64(0)
		for m := range batch.Messages() {
			meta, err := m.Metadata()
			if err != nil {
				return nil, err
			}
			out = append(out, job{subject: m.Subject(), payload: string(m.Data()), header: m.Headers(), stored: meta.Timestamp})
			n, pending, last = n+1, meta.NumPending, meta.Sequence.Stream
		}
		left = pending
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("fetch after %d messages: %w", len(out), err)
		}
		// Done once the last message there was at the start is read, or none is left (a
		// work-queue stream may lose messages while it is read).
		if n == 0 || pending == 0 || last >= info.State.LastSeq {
			return out, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%d messages in a minute, not done", len(out))
		}
	}
}

// streamMsgs is the number of messages stored on a stream.
func (w *world) streamMsgs(stream string) uint64 {
	w.t.Helper()
	n, err := w.countMsgs(stream)
	if err != nil {
		w.t.Fatal(err)
	}
	return n
}

// countMsgs is streamMsgs with the error returned.
func (w *world) countMsgs(stream string) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := w.js.Stream(ctx, stream)
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.Msgs, nil
}
