package testenv

import (
	"bufio"
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
	for i := range n {
		port, err := clusterPort()
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		s := &RedisServer{port: port, dir: t.TempDir(), Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
			extra: []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000"}}
		if err := s.Start(); err != nil {
			t.Fatalf("testenv: cluster node %d: %v", i, err)
		}
		t.Cleanup(s.Kill)
		nodes = append(nodes, s)
	}
	per := 16384 / n
	for i, s := range nodes {
		lo, hi := i*per, (i+1)*per-1
		if i == n-1 {
			hi = 16383
		}
		if err := command(s.Addr, "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)); err != nil {
			t.Fatalf("testenv: %v", err)
		}
	}
	for _, s := range nodes[1:] {
		if err := command(nodes[0].Addr, "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(s.port)); err != nil {
			t.Fatalf("testenv: %v", err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, s := range nodes {
		for {
			info, err := commandReply(s.Addr, "CLUSTER", "INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(n)) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("testenv: cluster node %s not ready within 30s: %v %s", s.Addr, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	url = "redis://" + nodes[0].Addr
	for i, s := range nodes[1:] {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		url += sep + "addr=" + s.Addr
	}
	return url, nodes
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

// commandReply sends one command over a fresh connection and returns a simple, error or bulk
// string reply.
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
