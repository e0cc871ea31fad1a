package testenv

import (
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// NATSCluster is a cluster of in-process JetStream servers on loopback, routed to each other.
type NATSCluster struct {
	Servers []*server.Server
}

// StartNATSCluster starts n JetStream servers named n1…nN forming cluster "admitter-test", and
// waits until JetStream has a meta leader. They are shut down when the test ends.
func StartNATSCluster(t TB, n int) *NATSCluster {
	t.Helper()
	routes := make([]int, n)
	for i := range routes {
		p, err := FreePort()
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		routes[i] = p
	}
	var urls []string
	for _, p := range routes {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	c := &NATSCluster{}
	for i := range n {
		opts := &server.Options{
			ServerName: fmt.Sprintf("n%d", i+1), Host: "127.0.0.1", Port: -1,
			JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
			Cluster: server.ClusterOpts{Name: "admitter-test", Host: "127.0.0.1", Port: routes[i]},
			Routes:  server.RoutesFromStr(strings.Join(urls, ",")),
		}
		s, err := server.NewServer(opts)
		if err != nil {
			t.Fatalf("testenv: cluster server %d: %v", i+1, err)
		}
		s.Start()
		c.Servers = append(c.Servers, s)
	}
	t.Cleanup(c.Stop)
	for _, s := range c.Servers {
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatalf("testenv: cluster server %s not ready", s.Name())
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for !c.hasMetaLeader() {
		if time.Now().After(deadline) {
			t.Fatalf("testenv: the cluster elected no JetStream meta leader within 20s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return c
}

func (c *NATSCluster) hasMetaLeader() bool {
	for _, s := range c.Servers {
		if s.Running() && s.JetStreamIsLeader() {
			return true
		}
	}
	return false
}

// URLs is every server's client URL, comma separated.
func (c *NATSCluster) URLs() string {
	var out []string
	for _, s := range c.Servers {
		out = append(out, s.ClientURL())
	}
	return strings.Join(out, ",")
}

// Server returns the server named name.
func (c *NATSCluster) Server(name string) *server.Server {
	for _, s := range c.Servers {
		if s.Name() == name {
			return s
		}
	}
	return nil
}

// Stop shuts every server down. Safe to call twice.
func (c *NATSCluster) Stop() {
	for _, s := range c.Servers {
		s.Shutdown()
	}
	for _, s := range c.Servers {
		s.WaitForShutdown()
	}
}
