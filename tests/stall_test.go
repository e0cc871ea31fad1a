package tests

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// stallProxy is a TCP proxy on loopback between the admitter and NATS that, once armed, stalls
// what the admitter sends from its first publish to a given subject prefix on, for a while (what
// NATS sends still arrives): the node holding the output stream stops reading, as a paused
// process or a leader election look from the client's side, just as forwards go out.
type stallProxy struct {
	ln      net.Listener
	up      string
	mu      sync.Mutex
	conns   []net.Conn
	trigger []byte        // armed: stall at the first line starting with it
	hold    time.Duration // for this long
	held    chan struct{} // closed when the stall starts
	every   bool          // armAll: every connection stalls, until `until`
	until   time.Time     // armAll: when the stall ends, once it started
	wg      sync.WaitGroup
	quit    chan struct{}
}

// startStallProxy proxies to the NATS server at natsURL until the test ends.
func startStallProxy(t *testing.T, natsURL string) *stallProxy {
	t.Helper()
	u, err := url.Parse(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{ln: ln, up: u.Host, held: make(chan struct{}), quit: make(chan struct{})}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		close(p.quit)
		_ = ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *stallProxy) url() string { return "nats://" + p.ln.Addr().String() }

// arm makes the proxy stall for hold at the first publish (PUB or HPUB) to a subject starting
// with prefix.
func (p *stallProxy) arm(prefix string, hold time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.trigger, p.hold = []byte("PUB "+prefix), hold
}

// armAll makes the proxy stall every connection at its first publish to a subject starting
// with prefix, from the first such publish on any connection until hold after it: a node
// holding the output stream that stops answering everyone for a while, whichever replica
// publishes.
func (p *stallProxy) armAll(prefix string, hold time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.trigger, p.hold, p.every = []byte("PUB "+prefix), hold, true
}

// fire returns where in b the stall begins (the start of the publish's line), or -1, and how
// long it lasts; it disarms the proxy when it does (armAll: when the stall is over).
func (p *stallProxy) fire(b []byte) (int, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.trigger == nil {
		return -1, 0
	}
	if p.every && !p.until.IsZero() && !time.Now().Before(p.until) {
		p.trigger = nil
		return -1, 0
	}
	i := bytes.Index(b, p.trigger)
	if i < 0 {
		return -1, 0
	}
	start := bytes.LastIndexByte(b[:i], '\n') + 1 // the line's start: PUB or HPUB
	if !p.every {
		p.trigger = nil
		close(p.held)
		return start, p.hold
	}
	if p.until.IsZero() {
		p.until = time.Now().Add(p.hold)
		close(p.held)
	}
	return start, time.Until(p.until)
}

func (p *stallProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.up)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		p.wg.Go(func() { _, _ = io.Copy(c, s); _ = c.Close(); _ = s.Close() })
		p.wg.Go(func() {
			defer func() { _ = c.Close(); _ = s.Close() }()
			buf := make([]byte, 64<<10)
			for {
				n, err := c.Read(buf)
				b := buf[:n]
				if at, hold := p.fire(b); at >= 0 {
					if _, werr := s.Write(b[:at]); werr != nil {
						return
					}
					select {
					case <-time.After(hold):
					case <-p.quit:
						return
					}
					b = b[at:]
				}
				if len(b) > 0 {
					if _, werr := s.Write(b); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		})
	}
}

// awaitStall waits until the armed stall has started.
func (p *stallProxy) awaitStall(t *testing.T) {
	t.Helper()
	select {
	case <-p.held:
	case <-time.After(10 * time.Second):
		t.Fatal("no forward went out within 10 s")
	}
}

const stallPlans = `plans:
  steady:
    limits:
      - {capacity: 20, rate: 20/s}
tenants:
  acme: steady
`

// TestStalledNATSIsNoBurst: a tenant with a full bucket publishes 60 jobs; as the admitter sends
// the first forward, NATS stops reading what it sends for 3 s. 20 are forwarded at once, the
// rest wait in the input, and none of it is stored until NATS reads again. Stored 3 s late, the 20 reach downstream beside
// what the bucket refilled meanwhile; the admitter charges them again, so the tenant's forwards
// stay within C + r·t (one job of slack) in every interval. Before the charge: 20 over.
func TestStalledNATSIsNoBurst(t *testing.T) {
	w := newWorld(t, stallPlans)
	px := startStallProxy(t, w.natsURL)
	w.natsURL = px.url() // the admitter's connection goes through the proxy, the test's does not
	w.start()
	px.arm("jobs.admitted.", 3*time.Second)
	// All at once, so that the admitter reads them in one step: 20 forwarded, 40 waiting.
	w.publishMany("jobs.submit.acme.report", "r", 60, 0)
	px.awaitStall(t)
	out := w.read("ADMITTED", 60, 60*time.Second)
	var times []time.Time
	seen := map[string]bool{}
	for _, j := range out {
		if !strings.HasPrefix(j.subject, "jobs.admitted.acme.") {
			continue
		}
		if seen[j.payload] {
			t.Errorf("%s forwarded twice", j.payload)
		}
		seen[j.payload] = true
		times = append(times, j.stored)
	}
	if len(seen) != 60 {
		t.Fatalf("%d of 60 forwarded", len(seen))
	}
	excess, from, to := worstWindow(times, 20, 20)
	t.Logf("worst interval [%v, %v]: %+.2f over C + r·t; first to last forward %v",
		from.Sub(times[0]).Round(time.Millisecond), to.Sub(times[0]).Round(time.Millisecond), excess, times[len(times)-1].Sub(times[0]).Round(time.Millisecond))
	if excess > 1 {
		t.Errorf("forwards %+.2f over C 20 + r 20/s·t in [%v, %v] after the stall, want at most 1 (the slack)",
			excess, from.Sub(times[0]).Round(time.Millisecond), to.Sub(times[0]).Round(time.Millisecond))
	}
}

const stallTenants = 4

// stallPlansTwo: four tenants of {10, 10/s}.
var stallPlansTwo = func() string {
	s := "plans:\n  steady:\n    limits:\n      - {capacity: 10, rate: 10/s}\ntenants:\n"
	for i := range stallTenants {
		s += fmt.Sprintf("  t%d: steady\n", i)
	}
	return s
}()

// TestStalledNATSTwoReplicasIsNoBurst: two replicas share four tenants of {10, 10/s}; each
// tenant publishes 30 jobs at once. As the first forward goes out, the node holding the output
// stream stops reading for 3 s, from every replica (each replica's connection stalls at its
// first forward from then until the 3 s are over). A second decider that forwarded the jobs its
// bucket refilled while the first one's forwards were not yet stored would send them into the
// same instant: the limiter holds each tenant's queue for its owner. Every tenant's forwards
// must stay within C + r·t (one job of slack) in every interval. Before a hold across replicas
// (then a fence): up to +10 over.
func TestStalledNATSTwoReplicasIsNoBurst(t *testing.T) {
	w := newWorld(t, stallPlansTwo)
	px := startStallProxy(t, w.natsURL)
	w.natsURL = px.url()
	replicas := []*proc{w.start("ADMITTER_WORKERS=4"), w.start("ADMITTER_WORKERS=4")}
	px.armAll("jobs.admitted.", 3*time.Second)
	n := 30 * stallTenants
	for k := range stallTenants {
		w.publishMany(fmt.Sprintf("jobs.submit.t%d.x", k), fmt.Sprintf("t%d", k), 30, 0)
	}
	px.awaitStall(t)
	out := w.read("ADMITTED", n, 60*time.Second)
	times := map[string][]time.Time{}
	seen := map[string]bool{}
	for _, j := range out {
		if seen[j.payload] {
			t.Errorf("%s forwarded twice", j.payload)
		}
		seen[j.payload] = true
		tenant, _, _ := strings.Cut(j.payload, "-")
		times[tenant] = append(times[tenant], j.stored)
	}
	if len(seen) != n {
		t.Fatalf("%d of %d forwarded", len(seen), n)
	}
	for k := range stallTenants {
		tenant := fmt.Sprintf("t%d", k)
		ts := times[tenant]
		excess, from, to := worstWindow(ts, 10, 10)
		slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
		t.Logf("%s: worst interval [%v, %v]: %+.2f over C + r·t", tenant, from.Sub(ts[0]).Round(time.Millisecond), to.Sub(ts[0]).Round(time.Millisecond), excess)
		if excess > 1 {
			t.Errorf("%s: forwards %+.2f over C 10 + r 10/s·t in [%v, %v] after the stall, want at most 1 (the slack)",
				tenant, excess, from.Sub(ts[0]).Round(time.Millisecond), to.Sub(ts[0]).Round(time.Millisecond))
		}
	}
	for _, p := range replicas {
		if p.signal(syscall.SIGTERM, 15*time.Second) != 0 {
			t.Errorf("replica exited non-zero:\n%s", p.logs.String())
		}
	}
}
