package testenv

import (
	"errors"
	"net"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// NATSServer is an in-process nats-server with JetStream, on a random loopback port.
type NATSServer struct {
	*server.Server
	dir  string
	tune func(*server.Options)
}

// StartNATS starts a JetStream server storing under a temporary directory, shut down when the
// test ends.
func StartNATS(t TB) *NATSServer { return StartNATSWith(t, nil) }

// StartNATSWith is StartNATS with options tuned by tune (users, TLS, limits).
func StartNATSWith(t TB, tune func(*server.Options)) *NATSServer {
	t.Helper()
	s := &NATSServer{dir: t.TempDir(), tune: tune}
	if err := s.start(-1); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

func (s *NATSServer) start(port int) error {
	srv, err := server.NewServer(s.options(port, s.tune))
	if err != nil {
		return err
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return errNotReady
	}
	s.Server = srv
	return nil
}

// options are the server's options on port, tuned by tune.
func (s *NATSServer) options(port int, tune func(*server.Options)) *server.Options {
	opts := &server.Options{
		Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: s.dir,
		NoLog: true, NoSigs: true,
	}
	if tune != nil {
		tune(opts)
	}
	return opts
}

// Reload applies the server's options tuned by tune instead of those it started with, on the
// live server (a configuration reload: connections stay up). Permissions of users may change
// so; what a reload cannot change (ports, storage) must stay as it was.
func (s *NATSServer) Reload(tune func(*server.Options)) error {
	return s.Server.ReloadOptions(s.options(s.Server.Addr().(*net.TCPAddr).Port, tune))
}

var errNotReady = errors.New("nats-server not ready for connections within 10s")

// URL is the server's client URL.
func (s *NATSServer) URL() string { return s.ClientURL() }

// Stop shuts the server down and waits for it (bounded by the server's own shutdown). Safe to
// call twice.
func (s *NATSServer) Stop() {
	if s.Server == nil {
		return
	}
	s.Shutdown()
	s.WaitForShutdown()
}
