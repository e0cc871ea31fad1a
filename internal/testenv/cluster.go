package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"time"
)

// StartRedisCluster starts n redis-server processes in cluster mode on loopback, splits the 16384
// slots between them as masters and waits until every node reports cluster_state:ok. It returns
// a redis:// URL naming every node (the first as host, the others as ?addr= seeds), stopped
// when the test ends.
func StartRedisCluster(t TB, n int) (url string, nodes []*RedisServer) {
	t.Helper()
	c := startRedisCluster(t, n, 0, 5000)
	return c.URL, c.Nodes
}

// RedisCluster is a Redis Cluster on loopback: masters, each with its replicas. Its nodes keep
// no append-only file.
type RedisCluster struct {
	// URL names every node: the first as host, the others as ?addr= seeds.
	URL string
	// Nodes are the masters as started, then the replicas.
	Nodes []*RedisServer
}

// StartRedisClusterWithReplicas starts a cluster of masters, each with replicas of its own, and
// waits until the cluster is ok and every replica is in sync with its master. Failures are
// detected after 2 s (cluster-node-timeout 2000): a killed master's replica is promoted within a
// few seconds. args are more redis-server arguments for every node. The processes are stopped
// when the test ends.
func StartRedisClusterWithReplicas(t TB, masters, replicas int, args ...string) *RedisCluster {
	t.Helper()
	return startRedisCluster(t, masters, replicas, 2000, args...)
}

func startRedisCluster(t TB, masters, replicas int, nodeTimeoutMs int, args ...string) *RedisCluster {
	t.Helper()
	total := masters * (1 + replicas)
	c := &RedisCluster{}
	for i := range total {
		port, err := clusterPort()
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		s := &RedisServer{port: port, dir: t.TempDir(), Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
			extra: []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
				"--cluster-node-timeout", strconv.Itoa(nodeTimeoutMs)}}
		s.extra = append(s.extra, args...)
		if err := s.Start(); err != nil {
			t.Fatalf("testenv: cluster node %d: %v", i, err)
		}
		t.Cleanup(s.Kill)
		c.Nodes = append(c.Nodes, s)
	}
	per := 16384 / masters
	for i, s := range c.Nodes[:masters] {
		lo, hi := i*per, (i+1)*per-1
		if i == masters-1 {
			hi = 16383
		}
		if err := command(s.Addr, "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)); err != nil {
			t.Fatalf("testenv: %v", err)
		}
	}
	for _, s := range c.Nodes[1:] {
		if err := command(c.Nodes[0].Addr, "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(s.port)); err != nil {
			t.Fatalf("testenv: %v", err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	waitAll := func(what string, ok func(s *RedisServer) (bool, error)) {
		t.Helper()
		for _, s := range c.Nodes {
			for {
				done, err := ok(s)
				if done {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("testenv: cluster node %s: %s not within 30s: %v", s.Addr, what, err)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	known := func(s *RedisServer) (bool, error) {
		info, err := commandReply(s.Addr, "CLUSTER", "INFO")
		return err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(total)), fmt.Errorf("%v %s", err, info)
	}
	waitAll("every node known and the cluster ok", known)
	if replicas == 0 {
		c.URL = clusterURL(c.Nodes)
		return c
	}
	for i, s := range c.Nodes[masters:] {
		master := c.Nodes[i%masters]
		id, err := commandReply(master.Addr, "CLUSTER", "MYID")
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		if err := command(s.Addr, "CLUSTER", "REPLICATE", id); err != nil {
			t.Fatalf("testenv: %v", err)
		}
	}
	waitAll("the cluster ok with every replica in sync", func(s *RedisServer) (bool, error) {
		if ok, err := known(s); !ok {
			return false, err
		}
		info, err := commandReply(s.Addr, "INFO", "replication")
		if err != nil {
			return false, err
		}
		if strings.Contains(info, "role:master") {
			return strings.Contains(info, "connected_slaves:"+strconv.Itoa(replicas)), errors.New(info)
		}
		return strings.Contains(info, "master_link_status:up") && strings.Contains(info, "master_sync_in_progress:0"), errors.New(info)
	})
	c.URL = clusterURL(c.Nodes)
	return c
}

// clusterURL names every node: the first as host, the others as ?addr= seeds.
func clusterURL(nodes []*RedisServer) string {
	url := "redis://" + nodes[0].Addr
	for i, s := range nodes[1:] {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		url += sep + "addr=" + s.Addr
	}
	return url
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, addr, master string // addr: host:port; master: the id of a replica's master
	isMaster, failed bool
	slots            [][2]int
}

// nodes reads CLUSTER NODES from the first node that answers.
func (c *RedisCluster) nodes() ([]clusterNode, error) {
	var last error
	for _, s := range c.Nodes {
		out, err := commandReply(s.Addr, "CLUSTER", "NODES")
		if err != nil {
			last = err
			continue
		}
		var nodes []clusterNode
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(line)
			if len(f) < 8 {
				continue
			}
			n := clusterNode{id: f[0], addr: strings.Split(f[1], "@")[0], master: f[3],
				isMaster: strings.Contains(f[2], "master"), failed: strings.Contains(f[2], "fail")}
			for _, r := range f[8:] {
				lo, hi, ok := strings.Cut(r, "-")
				if !ok {
					hi = lo
				}
				a, err1 := strconv.Atoi(lo)
				b, err2 := strconv.Atoi(hi)
				if err1 == nil && err2 == nil {
					n.slots = append(n.slots, [2]int{a, b})
				}
			}
			nodes = append(nodes, n)
		}
		return nodes, nil
	}
	return nil, fmt.Errorf("testenv: no cluster node answers CLUSTER NODES: %w", last)
}

func (c *RedisCluster) server(addr string) *RedisServer {
	for _, s := range c.Nodes {
		if s.Addr == addr {
			return s
		}
	}
	return nil
}

// MasterOf returns the master serving key's slot now, and one of its replicas.
func (c *RedisCluster) MasterOf(key string) (master, replica *RedisServer, err error) {
	var slot int
	for _, s := range c.Nodes {
		var reply string
		if reply, err = commandReply(s.Addr, "CLUSTER", "KEYSLOT", key); err == nil {
			slot, err = strconv.Atoi(reply)
			break
		}
	}
	if err != nil {
		return nil, nil, err
	}
	nodes, err := c.nodes()
	if err != nil {
		return nil, nil, err
	}
	var id string
	for _, n := range nodes {
		for _, r := range n.slots {
			if n.isMaster && !n.failed && slot >= r[0] && slot <= r[1] {
				master, id = c.server(n.addr), n.id
			}
		}
	}
	for _, n := range nodes {
		if id != "" && n.master == id && !n.failed {
			replica = c.server(n.addr)
		}
	}
	if master == nil || replica == nil {
		return nil, nil, fmt.Errorf("testenv: slot %d of %q: master %v, replica %v", slot, key, master, replica)
	}
	return master, replica, nil
}

// IsMaster reports whether s answers as a master (a replica promoted, for one).
func IsMaster(s *RedisServer) bool {
	info, err := commandReply(s.Addr, "INFO", "replication")
	return err == nil && strings.Contains(info, "role:master")
}

// clusterPort finds a free loopback port whose cluster bus port (port+10000) is free too.
func clusterPort() (int, error) {
	for range 100 {
		p := 20000 + rand.IntN(10000)
		a, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		b, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+10000)))
		a.Close()
		if err != nil {
			continue
		}
		b.Close()
		return p, nil
	}
	return 0, fmt.Errorf("no free port pair (p, p+10000) for a cluster node")
}

// command sends one command and requires a +OK reply.
func command(addr string, args ...string) error {
	reply, err := commandReply(addr, args...)
	if err != nil {
		return err
	}
	if reply != "OK" {
		return fmt.Errorf("%s %v: %s", addr, args, reply)
	}
	return nil
}

// commandReply sends one command over a fresh connection and returns a simple, integer, error
// or bulk string reply.
func commandReply(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	switch {
	case strings.HasPrefix(line, "+"):
		return line[1:], nil
	case strings.HasPrefix(line, ":"):
		return line[1:], nil
	case strings.HasPrefix(line, "-"):
		return "", fmt.Errorf("%s %v: %s", addr, args, line[1:])
	case strings.HasPrefix(line, "$"):
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", fmt.Errorf("%s %v: bad reply %q", addr, args, line)
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("%s %v: unexpected reply %q", addr, args, line)
}
