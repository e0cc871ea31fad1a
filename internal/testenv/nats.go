package testenv

import (
	"errors"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// NATSServer is an in-process nats-server with JetStream, on a random loopback port.
type NATSServer struct {
	*server.Server
	dir string
}

// StartNATS starts a JetStream server storing under a temporary directory, shut down when the
// test ends.
func StartNATS(t TB) *NATSServer {
	t.Helper()
	s := &NATSServer{dir: t.TempDir()}
	if err := s.start(-1); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

func (s *NATSServer) start(port int) error {
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: s.dir,
		NoLog: true, NoSigs: true,
	})
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
