package testenv

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// BuildNATSServer builds the nats-server of the module's dependency (the version the in-process
// servers run) into dir and returns its path.
func BuildNATSServer(dir string) (string, error) {
	path := filepath.Join(dir, "nats-server")
	if out, err := exec.Command("go", "build", "-o", path, "github.com/nats-io/nats-server/v2").CombinedOutput(); err != nil {
		return "", fmt.Errorf("testenv: go build nats-server: %v\n%s", err, out)
	}
	return path, nil
}

// NATSProcessCluster is a JetStream cluster of nats-server processes on loopback: unlike the
// in-process cluster, its nodes can be killed (SIGKILL), paused (SIGSTOP) and restarted with
// their store.
type NATSProcessCluster struct {
	Nodes []*NATSNode
}

// NATSNode is one nats-server process of a cluster, on fixed ports and store across restarts.
type NATSNode struct {
	Name                        string
	Port, ClusterPort, HTTPPort int
	bin, dir                    string
	cmd                         *exec.Cmd
	done                        chan struct{}
}

// StartNATSProcessCluster starts n nats-server processes (bin, see BuildNATSServer) named
// n1…nN forming one JetStream cluster, and waits until every node is healthy. They are killed
// when the test ends. extra is appended to each node's configuration file (a `mappings` block).
func StartNATSProcessCluster(t TB, bin string, n int, extra string) *NATSProcessCluster {
	t.Helper()
	c := &NATSProcessCluster{}
	var routes []string
	for i := range n {
		var ports [3]int
		for k := range ports {
			p, err := FreePort()
			if err != nil {
				t.Fatalf("testenv: %v", err)
			}
			ports[k] = p
		}
		node := &NATSNode{Name: fmt.Sprintf("n%d", i+1), Port: ports[0], ClusterPort: ports[1], HTTPPort: ports[2], bin: bin, dir: t.TempDir()}
		c.Nodes = append(c.Nodes, node)
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", node.ClusterPort))
	}
	for _, node := range c.Nodes {
		conf := fmt.Sprintf("server_name: %s\nlisten: 127.0.0.1:%d\nhttp: 127.0.0.1:%d\njetstream {\n  store_dir: %q\n}\n"+
			"cluster {\n  name: testenv\n  listen: 127.0.0.1:%d\n  routes: [%s]\n}\n",
			node.Name, node.Port, node.HTTPPort, filepath.Join(node.dir, "store"), node.ClusterPort, strings.Join(routes, ", "))
		conf += extra
		if err := os.WriteFile(filepath.Join(node.dir, "nats.conf"), []byte(conf), 0o644); err != nil {
			t.Fatalf("testenv: %v", err)
		}
		if err := node.launch(); err != nil {
			t.Fatalf("testenv: %v", err)
		}
		t.Cleanup(node.Kill)
	}
	for _, node := range c.Nodes {
		if err := node.waitHealthy(60 * time.Second); err != nil {
			t.Fatalf("testenv: %v", err)
		}
	}
	return c
}

// StartNATSProcess starts one nats-server process (bin, see BuildNATSServer) with JetStream on
// loopback, not clustered, and waits until it is healthy; it is killed when the test ends. extra
// is appended to its configuration file (a `mappings` block).
func StartNATSProcess(t TB, bin, extra string) *NATSNode {
	t.Helper()
	var ports [2]int
	for k := range ports {
		p, err := FreePort()
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		ports[k] = p
	}
	node := &NATSNode{Name: "n1", Port: ports[0], HTTPPort: ports[1], bin: bin, dir: t.TempDir()}
	conf := fmt.Sprintf("server_name: %s\nlisten: 127.0.0.1:%d\nhttp: 127.0.0.1:%d\njetstream {\n  store_dir: %q\n}\n",
		node.Name, node.Port, node.HTTPPort, filepath.Join(node.dir, "store")) + extra
	if err := os.WriteFile(filepath.Join(node.dir, "nats.conf"), []byte(conf), 0o644); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	if err := node.launch(); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(node.Kill)
	if err := node.waitHealthy(60 * time.Second); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return node
}

// URLs is every node's client URL, comma separated.
func (c *NATSProcessCluster) URLs() string {
	var out []string
	for _, n := range c.Nodes {
		out = append(out, n.URL())
	}
	return strings.Join(out, ",")
}

// URL is the node's client URL.
func (n *NATSNode) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.Port) }

func (n *NATSNode) launch() error {
	log, err := os.OpenFile(filepath.Join(n.dir, "nats-server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(n.bin, "-c", filepath.Join(n.dir, "nats.conf"))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start nats-server %s: %w", n.Name, err)
	}
	done := make(chan struct{})
	n.cmd, n.done = cmd, done
	go func() { _ = cmd.Wait(); log.Close(); close(done) }()
	return nil
}

// waitHealthy polls the node's /healthz until it answers 200 (JetStream ready and current).
func (n *NATSNode) waitHealthy(within time.Duration) error {
	client := http.Client{Timeout: time.Second}
	deadline := time.Now().Add(within)
	for {
		resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", n.HTTPPort))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = errors.New(resp.Status)
		}
		select {
		case <-n.done:
			log, _ := os.ReadFile(filepath.Join(n.dir, "nats-server.log"))
			return fmt.Errorf("nats-server %s exited at start:\n%s", n.Name, tail(log, 2000))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nats-server %s not healthy within %v: %v", n.Name, within, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Start starts a stopped or killed node again on its ports and store, and waits (bounded) until
// it is healthy.
func (n *NATSNode) Start() error {
	if n.cmd != nil {
		return fmt.Errorf("testenv: nats-server %s is running", n.Name)
	}
	if err := n.launch(); err != nil {
		return err
	}
	return n.waitHealthy(60 * time.Second)
}

// Kill stops the node with SIGKILL and waits (bounded) for it to exit. Safe to call twice.
func (n *NATSNode) Kill() { n.stop(syscall.SIGKILL) }

// Stop asks the node to shut down (SIGTERM) and waits for it, killing it after 15 s.
func (n *NATSNode) Stop() { n.stop(syscall.SIGTERM) }

func (n *NATSNode) stop(sig syscall.Signal) {
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGCONT)
	_ = n.cmd.Process.Signal(sig)
	select {
	case <-n.done:
	case <-time.After(15 * time.Second):
		_ = n.cmd.Process.Kill()
		select {
		case <-n.done:
		case <-time.After(5 * time.Second):
		}
	}
	n.cmd = nil
}

// Pause stops the process with SIGSTOP: its connections stay open, nothing answers.
func (n *NATSNode) Pause() {
	if n.cmd != nil {
		_ = n.cmd.Process.Signal(syscall.SIGSTOP)
	}
}

// Resume continues a paused node.
func (n *NATSNode) Resume() {
	if n.cmd != nil {
		_ = n.cmd.Process.Signal(syscall.SIGCONT)
	}
}

// Running reports whether the node's process runs (paused or not).
func (n *NATSNode) Running() bool { return n.cmd != nil }

// tail is the last n bytes of b.
func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
