// Package testenv starts the real servers admitter's tests and benchmarks run against: a
// redis-server process on a free loopback port and an in-process JetStream server. It is not a
// mock of either: both are the real thing, owned by the test that starts them.
package testenv

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// TB is the part of testing.TB the starters use, so benchmarks commands can pass their own.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
	TempDir() string
	Logf(format string, args ...any)
}

// RedisServer is a redis-server child process bound to 127.0.0.1.
type RedisServer struct {
	Addr string
	port int
	dir  string
	aof  bool // persist with an append-only file
	// defaults: the server runs with redis-server's own defaults (no append-only file, RDB
	// snapshots at its default save points), as `apt-get install redis-server` or `docker run
	// redis` give it; aof is ignored.
	defaults bool
	extra    []string    // more redis-server arguments (cluster mode)
	tls      *tls.Config // set: the server listens on TLS only, and readiness is checked with it
	cmd      *exec.Cmd
	done     chan struct{}
}

// RedisBinary finds redis-server on PATH or in the usual Debian location.
func RedisBinary() (string, error) {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/bin/redis-server", "/usr/local/bin/redis-server"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("redis-server not found on PATH: run `make test`, which installs it, or `apt-get install -y redis-server`")
}

// StartRedis starts a redis-server on a free loopback port, stopped when the test ends. It
// keeps nothing on disk: a restart forgets every key.
func StartRedis(t TB) *RedisServer { return startRedis(t, false) }

// StartDefaultRedis starts a redis-server with its own defaults, as a new user's is: no
// append-only file, RDB snapshots at the default save points (a SIGTERM writes one; a SIGKILL
// loses what came after the last). Only its port, address and directory are set.
func StartDefaultRedis(t TB) *RedisServer {
	t.Helper()
	port, err := FreePort()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	s := &RedisServer{port: port, dir: t.TempDir(), defaults: true, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	if err := s.Start(); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(s.Kill)
	return s
}

// Forget deletes what the server keeps on disk (its RDB snapshot and append-only files): the
// next Start begins empty. Call it while the server is stopped.
func (s *RedisServer) Forget() error {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name() != "redis.log" {
			if err := os.RemoveAll(filepath.Join(s.dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// StartPersistentRedis is StartRedis with an append-only file (appendonly yes, fsync every
// second), as admitter recommends in production: its data survives a restart.
func StartPersistentRedis(t TB) *RedisServer { return startRedis(t, true) }

// StartRedisWith is StartPersistentRedis with more redis-server arguments, such as
// "--maxmemory", "2mb".
func StartRedisWith(t TB, args ...string) *RedisServer { return startRedis(t, true, args...) }

// StartRedisTLS is StartRedisWith for a server listening on TLS only (rediss://), with a
// certificate from ca; with clientCerts, clients must present a certificate from ca too.
func StartRedisTLS(t TB, ca *CA, clientCerts bool, args ...string) *RedisServer {
	t.Helper()
	cert, key := ca.Server(t, "redis-server")
	auth := "no"
	var ping *tls.Config
	if clientCerts {
		auth = "yes"
		cert, key := ca.Client(t, "testenv-ping")
		ping = ca.ClientTLS(t, cert, key)
	} else {
		ping = ca.ClientTLS(t, "", "")
	}
	return startRedisOn(t, true, ping, append([]string{"--tls-cert-file", cert, "--tls-key-file", key,
		"--tls-ca-cert-file", ca.CertFile, "--tls-auth-clients", auth}, args...)...)
}

func startRedis(t TB, aof bool, extra ...string) *RedisServer {
	t.Helper()
	return startRedisOn(t, aof, nil, extra...)
}

func startRedisOn(t TB, aof bool, tlsConf *tls.Config, extra ...string) *RedisServer {
	t.Helper()
	port, err := FreePort()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	s := &RedisServer{port: port, dir: t.TempDir(), aof: aof, extra: extra, tls: tlsConf, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	if err := s.Start(); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(s.Kill)
	return s
}

// URL is the redis:// (rediss:// for TLS) URL of the server.
func (s *RedisServer) URL() string {
	if s.tls != nil {
		return "rediss://" + s.Addr
	}
	return "redis://" + s.Addr
}

// Start starts (or restarts, on the same port) the server and waits until it answers PING.
func (s *RedisServer) Start() error {
	bin, err := RedisBinary()
	if err != nil {
		return err
	}
	aof := "no"
	if s.aof {
		aof = "yes"
	}
	ports := []string{"--port", strconv.Itoa(s.port)}
	if s.tls != nil {
		ports = []string{"--port", "0", "--tls-port", strconv.Itoa(s.port)}
	}
	persist := []string{"--save", "", "--appendonly", aof, "--appendfsync", "everysec"}
	if s.defaults {
		persist = nil
	}
	args := append(append(append(ports, "--bind", "127.0.0.1"), persist...), append([]string{"--dir", s.dir, "--daemonize", "no",
		"--logfile", filepath.Join(s.dir, "redis.log")}, s.extra...)...)
	s.cmd = exec.Command(bin, args...)
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	done := make(chan struct{})
	s.done = done
	go func(cmd *exec.Cmd) { _ = cmd.Wait(); close(done) }(s.cmd)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := ping(s.Addr, s.tls, 500*time.Millisecond); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			s.Kill()
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			return fmt.Errorf("redis-server on %s did not answer PING within 10s: %v\n%s", s.Addr, err, log)
		}
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			return fmt.Errorf("redis-server exited at start:\n%s", log)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Kill stops the server with SIGKILL and waits for it to exit (bounded). Safe to call twice.
func (s *RedisServer) Kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT)
	_ = s.cmd.Process.Kill()
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
	}
	s.cmd = nil
}

// Stop asks the server to shut down (SIGTERM: it writes its append-only file out and exits)
// and waits for it, killing it after 10 s. Safe to call twice; Start starts it again.
func (s *RedisServer) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT)
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		s.Kill()
	}
	s.cmd = nil
}

// Pause stops the process with SIGSTOP: connections stay open but nothing answers.
func (s *RedisServer) Pause() { _ = s.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues a paused server.
func (s *RedisServer) Resume() { _ = s.cmd.Process.Signal(syscall.SIGCONT) }

// Ping sends a PING over a fresh connection and checks the +PONG reply.
func Ping(addr string, timeout time.Duration) error { return ping(addr, nil, timeout) }

// ping is Ping over TLS when tlsConf is set. A server that wants a password (-NOAUTH) is up.
func ping(addr string, tlsConf *tls.Config, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var c net.Conn
	var err error
	if tlsConf != nil {
		c, err = (&tls.Dialer{Config: tlsConf}).DialContext(ctx, "tcp", addr)
	} else {
		c, err = (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" && !strings.HasPrefix(line, "-NOAUTH ") {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// StartRedisSentinel starts a Redis Sentinel on a free loopback port monitoring master as
// masterSet (quorum 1), authenticating to it with masterPassword (none when empty) and asking
// its own clients for password (none when empty). Stopped when the test ends.
func StartRedisSentinel(t TB, master *RedisServer, masterSet, masterPassword, password string) *RedisServer {
	t.Helper()
	bin, err := RedisBinary()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	port, err := FreePort()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	s := &RedisServer{port: port, dir: t.TempDir(), Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	_, masterPort, _ := net.SplitHostPort(master.Addr)
	conf := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nlogfile %s\nsentinel monitor %s 127.0.0.1 %s 1\n",
		port, s.dir, filepath.Join(s.dir, "redis.log"), masterSet, masterPort)
	if masterPassword != "" {
		conf += fmt.Sprintf("sentinel auth-pass %s %s\n", masterSet, masterPassword)
	}
	if password != "" {
		conf += "requirepass " + password + "\n"
	}
	file := filepath.Join(s.dir, "sentinel.conf") // Sentinel rewrites it: it must be its own
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	s.cmd = exec.Command(bin, file, "--sentinel")
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("testenv: start redis-server --sentinel: %v", err)
	}
	done := make(chan struct{})
	s.done = done
	go func(cmd *exec.Cmd) { _ = cmd.Wait(); close(done) }(s.cmd)
	t.Cleanup(s.Kill)
	deadline := time.Now().Add(10 * time.Second)
	for ping(s.Addr, nil, 500*time.Millisecond) != nil {
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			t.Fatalf("testenv: sentinel on %s did not answer PING within 10s:\n%s", s.Addr, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return s
}
