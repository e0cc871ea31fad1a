package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/admitter/admitter/internal/testenv"
	"github.com/nats-io/nats.go"
)

// Flood is the deep-flood scenario: one tenant with a backlog far beyond anything a window of
// jobs in flight could hold, and many quiet tenants within their plans beside it. The admitter
// and nats-server run as processes of their own, so that their memory is theirs alone.
type Flood struct {
	Jobs         int     `json:"noisy_jobs"`
	NoisyRate    float64 `json:"noisy_rate_per_second"`
	QuietTenants int     `json:"quiet_tenants"`
	QuietRate    float64 `json:"quiet_rate_per_tenant"`
	DurationS    float64 `json:"measured_s"`
	// PublishS is how long the flood took to publish; AbsorbS how long until every job of it was
	// stored (it waits where it arrived: the same, from the first publish).
	PublishS float64 `json:"publish_s"`
	AbsorbS  float64 `json:"absorb_s"`
	// CPU seconds the admitter and nats-server used from the first publish until absorbed, and
	// nats-server's per job of the flood.
	AbsorbAdmitterCPUS     float64 `json:"absorb_admitter_cpu_s"`
	AbsorbNATSCPUS         float64 `json:"absorb_nats_server_cpu_s"`
	AbsorbNATSMicrosPerJob float64 `json:"absorb_nats_server_cpu_us_per_job"`
	// Quiet is publish → forward of the quiet tenants' jobs while the backlog waits (from 2s
	// after AbsorbS); QuietWhileArriving the same before, while the flood arrived.
	Quiet              Latency `json:"quiet"`
	QuietWhileArriving Latency `json:"quiet_while_arriving"`
	// The noisy tenant's forwards in the measured window against rate × window.
	NoisyForwarded int64   `json:"noisy_forwarded"`
	NoisyExpected  float64 `json:"noisy_expected"`
	NoisyErrorPct  float64 `json:"noisy_error_pct"`
	// Peak resident memory of the two processes.
	AdmitterRSSMiB float64 `json:"admitter_rss_mib"`
	NATSRSSMiB     float64 `json:"nats_server_rss_mib"`
	// Per job forwarded in the measured window: JetStream API requests the server counted
	// (stream, consumer and purge requests; Direct Gets are not counted there), messages the
	// admitter sent the server (publishes, acks, requests, Direct Gets), and commands Redis
	// ran for it (EVALSHA, EVAL, INFO, PING).
	Forwarded          int64   `json:"forwarded"`
	APICallsPerJob     float64 `json:"jetstream_api_calls_per_job"`
	AdmitterMsgsPerJob float64 `json:"admitter_messages_per_job"`
	RedisCallsPerJob   float64 `json:"redis_calls_per_job"`
	PeakConsumers      int     `json:"peak_consumers"`
}

// binaries are the admitter and nats-server that the scenarios running them as processes use,
// built into dir once per run (the first scenario that asks builds them).
type binaries struct {
	dir      string
	once     sync.Once
	admitter string
	nats     string
	err      error
}

// build builds the binaries, or returns those built before (or why they could not be).
func (b *binaries) build() (admitter, natsServer string, err error) {
	b.once.Do(func() {
		admitter := filepath.Join(b.dir, "admitter")
		if out, err := exec.Command("go", "build", "-o", admitter, "github.com/admitter/admitter/cmd/admitter").CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build admitter: %v\n%s", err, out)
			return
		}
		b.admitter = admitter
		b.nats, b.err = testenv.BuildNATSServer(b.dir)
	})
	return b.admitter, b.nats, b.err
}

// child is a process the flood scenario started, stopped at the end.
type child struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func startChild(name string, env []string, logPath string, args ...string) (*child, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = env
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	c := &child{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); f.Close(); close(c.done) }()
	return c, nil
}

func (c *child) stop() {
	_ = c.cmd.Process.Signal(os.Interrupt)
	select {
	case <-c.done:
	case <-time.After(15 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// peakRSS is a process's peak resident memory (VmHWM) in MiB.
func peakRSS(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
			return round(kb/1024, 1)
		}
	}
	return 0
}

// cpuSeconds is the user and system CPU time a process has used.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	s, _ := strconv.ParseFloat(f[12], 64)
	return (u + s) / 100 // clock ticks: 100 a second on Linux
}

// monitor reads nats-server's monitoring endpoints.
type monitor struct{ base string }

func (m monitor) get(path string, into any) error {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(m.base + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(into)
}

// apiAndConsumers is the server's JetStream API request count and consumer count.
func (m monitor) apiAndConsumers() (api uint64, consumers int, err error) {
	var jsz struct {
		API       struct{ Total uint64 } `json:"api"`
		Consumers int                    `json:"consumers"`
	}
	err = m.get("/jsz", &jsz)
	return jsz.API.Total, jsz.Consumers, err
}

// sentBy is how many messages the connections named name have sent the server.
func (m monitor) sentBy(name string) (int64, error) {
	var connz struct {
		Connections []struct {
			Name   string `json:"name"`
			InMsgs int64  `json:"in_msgs"`
		} `json:"connections"`
	}
	if err := m.get("/connz?limit=1024", &connz); err != nil {
		return 0, err
	}
	var n int64
	for _, c := range connz.Connections {
		if c.Name == name {
			n += c.InMsgs
		}
	}
	return n, nil
}

// floodSettle is the time between the flood being absorbed and the measured window.
const floodSettle = 2 * time.Second

// flood runs the deep-flood scenario.
func (e *env) flood(ctx context.Context, p *progress) (*Flood, error) {
	o := e.o
	f := &Flood{Jobs: o.FloodJobs, NoisyRate: float64(o.FloodRate), QuietTenants: o.FloodQuietTenants, QuietRate: 5,
		DurationS: o.FloodDuration.Seconds()}
	admitterBin, srv, err := e.processWorld(ctx)
	if err != nil {
		return nil, err
	}
	defer srv.proc.stop()
	url, mon := srv.url, srv.mon
	nc, _, err := connect(url, "bench-flood")
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	adm, err := e.startAdmitterProc(admitterBin, url, fmt.Sprintf(`plans:
  noisy: {limits: [{capacity: %d, rate: %d/s}]}
  quiet: {limits: [{capacity: 20, rate: 20/s}]}
tenants: {noisy: noisy}
default_plan: quiet
`, o.FloodRate, o.FloodRate))
	if err != nil {
		return nil, err
	}
	defer adm.stop()
	if err := adm.waitReady(ctx, 30*time.Second); err != nil {
		return nil, err
	}

	// Watch: the noisy tenant's forwards, the quiet tenants' latencies, the consumer count.
	var noisyTimes []time.Time
	var mu sync.Mutex
	var absorbedAt atomic.Int64 // unix ns; 0 while the flood is still being moved
	var quiet, quietArriving []time.Duration
	sub, err := nc.Subscribe(prefixOut+">", func(m *nats.Msg) {
		now := time.Now()
		if strings.HasPrefix(m.Subject, prefixOut+"noisy.") {
			mu.Lock()
			noisyTimes = append(noisyTimes, now)
			mu.Unlock()
			return
		}
		if sent, ok := sentAt(m); ok {
			mu.Lock()
			if a := absorbedAt.Load(); a != 0 && sent.UnixNano() > a {
				quiet = append(quiet, now.Sub(sent))
			} else {
				quietArriving = append(quietArriving, now.Sub(sent))
			}
			mu.Unlock()
		}
	})
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	stopWatch := make(chan struct{})
	var watch sync.WaitGroup
	watch.Go(func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			if _, n, err := mon.apiAndConsumers(); err == nil && n > f.PeakConsumers {
				f.PeakConsumers = n
			}
			select {
			case <-stopWatch:
				return
			case <-t.C:
			}
		}
	})
	defer func() { close(stopWatch); watch.Wait() }()

	// Quiet tenants publish at their pace from the start to the end.
	quietCtx, stopQuiet := context.WithCancel(ctx)
	defer stopQuiet()
	qpub, err := newAsyncPublisher(url, "bench-quiet")
	if err != nil {
		return nil, err
	}
	defer qpub.close()
	var quietWG sync.WaitGroup
	quietWG.Go(func() {
		subj := make([]string, o.FloodQuietTenants)
		for i := range subj {
			subj[i] = prefixIn + fmt.Sprintf("q%03d", i) + ".work"
		}
		_, _, _ = pace(quietCtx, qpub, f.QuietRate*float64(len(subj)), 24*time.Hour, func(i int64) *nats.Msg {
			h := nats.Header{}
			h.Set(headerSent, strconv.FormatInt(time.Now().UnixNano(), 10))
			return &nats.Msg{Subject: subj[int(i%int64(len(subj)))], Data: payload, Header: h}
		})
	})
	defer quietWG.Wait()

	begin := time.Now()
	admCPU0, natsCPU0 := cpuSeconds(adm.proc.cmd.Process.Pid), cpuSeconds(srv.proc.cmd.Process.Pid)
	var profiled sync.WaitGroup
	if o.FloodProfile != "" { // the admitter's CPU while it takes the flood in
		profiled.Go(func() {
			resp, err := http.Get("http://" + adm.http + "/debug/pprof/profile?seconds=15")
			if err != nil {
				return
			}
			defer resp.Body.Close()
			if out, err := os.Create(o.FloodProfile); err == nil {
				_, _ = io.Copy(out, resp.Body)
				out.Close()
			}
		})
	}
	defer profiled.Wait()
	if err := p.phase(fmt.Sprintf("deep flood: publish %s jobs of one tenant beside %d quiet tenants", count(float64(o.FloodJobs)), o.FloodQuietTenants), func() (string, error) {
		pub, err := newAsyncPublisher(url, "bench-flood-producer")
		if err != nil {
			return "", err
		}
		defer pub.close()
		for i := range o.FloodJobs {
			if err := ctx.Err(); err != nil {
				return "", err
			}
			if err := pub.publish(&nats.Msg{Subject: prefixIn + "noisy.work", Data: payload}); err != nil {
				return "", err
			}
			_ = i
		}
		if err := pub.complete(ctx); err != nil {
			return "", err
		}
		f.PublishS = round(time.Since(begin).Seconds(), 2)
		return fmt.Sprintf("%.1fs, %s jobs/s", f.PublishS, count(float64(o.FloodJobs)/f.PublishS)), nil
	}); err != nil {
		return nil, err
	}
	// The million waits where it arrived: absorbed once stored (every PubAck in).
	f.AbsorbS = f.PublishS
	f.AbsorbAdmitterCPUS = round(cpuSeconds(adm.proc.cmd.Process.Pid)-admCPU0, 2)
	f.AbsorbNATSCPUS = round(cpuSeconds(srv.proc.cmd.Process.Pid)-natsCPU0, 2)
	f.AbsorbNATSMicrosPerJob = round(f.AbsorbNATSCPUS*1e6/float64(o.FloodJobs), 1)
	p.say(fmt.Sprintf("deep flood: stored %.1fs after the first publish; CPU while it arrived: admitter %.1fs, nats-server %.1fs (%.1f µs a job)",
		f.AbsorbS, f.AbsorbAdmitterCPUS, f.AbsorbNATSCPUS, f.AbsorbNATSMicrosPerJob))
	if err := p.phase(fmt.Sprintf("deep flood: %v beside the backlog, after %v to settle", o.FloodDuration, floodSettle), func() (string, error) {
		// What was published while the flood arrived is through, and the streams' own work
		// after a million acknowledgements has settled.
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(floodSettle):
		}
		absorbedAt.Store(time.Now().UnixNano())
		api0, _, err1 := mon.apiAndConsumers()
		msgs0, err2 := mon.sentBy("admitter")
		calls0, err3 := e.admin.calls(ctx)
		mu.Lock()
		n0, q0 := len(noisyTimes), len(quiet)
		mu.Unlock()
		t0 := time.Now()
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(o.FloodDuration):
		}
		api1, _, err4 := mon.apiAndConsumers()
		msgs1, err5 := mon.sentBy("admitter")
		calls1, err6 := e.admin.calls(ctx)
		mu.Lock()
		n1, q1 := len(noisyTimes), len(quiet)
		mu.Unlock()
		window := time.Since(t0).Seconds()
		if err := errors.Join(err1, err2, err3, err4, err5, err6); err != nil {
			return "", err
		}
		f.NoisyForwarded = int64(n1 - n0)
		f.NoisyExpected = round(f.NoisyRate*window, 1)
		f.NoisyErrorPct = round(ErrorPct(float64(f.NoisyForwarded), f.NoisyExpected), 2)
		f.Forwarded = f.NoisyForwarded + int64(q1-q0)
		f.APICallsPerJob = round(float64(api1-api0)/float64(max(f.Forwarded, 1)), 3)
		f.AdmitterMsgsPerJob = round(float64(msgs1-msgs0)/float64(max(f.Forwarded, 1)), 3)
		f.RedisCallsPerJob = round(float64(calls1-calls0)/float64(max(f.Forwarded, 1)), 3)
		return fmt.Sprintf("noisy %d forwarded vs %.0f (%+.2f%%), %.2f redis calls/job", f.NoisyForwarded, f.NoisyExpected, f.NoisyErrorPct, f.RedisCallsPerJob), nil
	}); err != nil {
		return nil, err
	}
	stopQuiet()
	quietWG.Wait()
	mu.Lock()
	f.Quiet, f.QuietWhileArriving = Summarize(quiet), Summarize(quietArriving)
	mu.Unlock()
	f.AdmitterRSSMiB = peakRSS(adm.proc.cmd.Process.Pid)
	f.NATSRSSMiB = peakRSS(srv.proc.cmd.Process.Pid)
	return f, nil
}
