package bench

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Large is the megabyte-jobs scenario: a backlog of large jobs, on a plan that lets them all go
// now, queued while the forwarder was down, then drained by the relay and by the admitter, each
// on a fresh nats-server process of its own (whose maximum payload is raised to fit the jobs
// with their headers). The admitter runs as a process too, so that its memory is its own.
type Large struct {
	Jobs      int `json:"jobs"`
	SizeBytes int `json:"size_bytes"`
	Tenants   int `json:"tenants"`
	// MaxPayload is the nats-server's max_payload for this scenario.
	MaxPayload int      `json:"nats_max_payload"`
	Relay      LargeRun `json:"relay"`
	Admitter   LargeRun `json:"admitter"`
	// Ratio is the admitter's jobs/s over the relay's.
	Ratio float64 `json:"admitter_vs_relay"`
}

// LargeRun is one forwarder draining the large backlog.
type LargeRun struct {
	Throughput
	MiBPerSecond float64 `json:"mib_per_second"`
	// SlowConsumers is how many times the nats-server cut a client off as a slow consumer during
	// the drain (its /varz slow_consumers; expect 0).
	SlowConsumers int64 `json:"slow_consumers"`
	// PeakRSSMiB is the admitter process's peak resident memory (0 for the relay, which runs in
	// the bench's own process); NATSRSSMiB the nats-server's.
	PeakRSSMiB float64 `json:"peak_rss_mib,omitempty"`
	NATSRSSMiB float64 `json:"nats_server_rss_mib"`
}

// largeMaxPayload is the nats-server's max_payload in the large scenario: room for the jobs and
// the admitter's headers, and the input stream's headroom (admission.InputHeadroom).
func largeMaxPayload(size int) int { return max(1<<20, 2*size) }

// largeMaxPending bounds the large jobs' async publishes in flight (in jobs).
const largeMaxPending = 32

// slowConsumers is the server's count of clients cut off as slow consumers.
func (m monitor) slowConsumers() (int64, error) {
	var varz struct {
		SlowConsumers int64 `json:"slow_consumers"`
	}
	err := m.get("/varz", &varz)
	return varz.SlowConsumers, err
}

// prepublishLarge stores n jobs of size bytes spread round-robin over tenants in JOBS.
func prepublishLarge(ctx context.Context, url string, n, size, tenants int) error {
	p := &asyncPublisher{}
	nc, js, err := connect(url, "bench-large-prepublish", jetstream.WithPublishAsyncMaxPending(largeMaxPending),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, _ *nats.Msg, err error) {
			p.failed.Add(1)
			p.first.CompareAndSwap(nil, err)
		}))
	if err != nil {
		return err
	}
	p.nc, p.js = nc, js
	defer p.close()
	data := make([]byte, size)
	for i := range n {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := p.publish(&nats.Msg{Subject: prefixIn + tenantName(i%tenants) + ".large", Data: data}); err != nil {
			return err
		}
	}
	if err := p.complete(ctx); err != nil {
		return err
	}
	if msgs, _, err := streamState(ctx, p.js, streamIn); err != nil || msgs != uint64(n) {
		return fmt.Errorf("stream %s holds %d jobs after publishing %d (%v)", streamIn, msgs, n, err)
	}
	return nil
}

// largeRun drains the large backlog with the forwarder of the given kind: from the moment it is
// started (the admitter: its process) until the output stream stores the last job.
func (e *env) largeRun(ctx context.Context, kind, admitterBin, natsBin string) (LargeRun, error) {
	o := e.o
	srv, err := e.startNATSProc(ctx, natsBin, largeMaxPayload(o.LargeSize), kind)
	if err != nil {
		return LargeRun{}, err
	}
	defer srv.proc.stop()
	if err := prepublishLarge(ctx, srv.url, o.LargeJobs, o.LargeSize, o.LargeTenants); err != nil {
		return LargeRun{}, err
	}
	nc, js, err := connect(srv.url, "bench-large-watch")
	if err != nil {
		return LargeRun{}, err
	}
	defer nc.Close()
	slow0, err := srv.mon.slowConsumers()
	if err != nil {
		return LargeRun{}, err
	}
	var adm *admitterProc
	var failed <-chan error
	start := time.Now()
	switch kind {
	case "relay":
		// The relay bounds its pulls by bytes too (PullMaxMessages alone would ask for 512
		// megabyte jobs at once, beyond what the server buffers for one client), as the
		// admitter does: half of its default in-flight bytes.
		fw, err := prepareRelay(ctx, srv.url, o.RelayPipelines, false, jetstream.PullMaxMessagesWithBytesLimit(512, 16<<20))
		if err != nil {
			return LargeRun{}, err
		}
		defer fw.stop()
		if err := fw.start(); err != nil {
			return LargeRun{}, err
		}
	default:
		if err := e.admin.flush(ctx); err != nil {
			return LargeRun{}, err
		}
		start = time.Now()
		adm, err = e.startAdmitterProc(admitterBin, srv.url, "plans:\n  bench: {limits: [{capacity: 1000000, rate: 1000000/s}]}\ndefault_plan: bench\n")
		if err != nil {
			return LargeRun{}, err
		}
		defer adm.stop()
		failed = adm.exited
	}
	bound := time.Minute + time.Duration(o.LargeJobs)*100*time.Millisecond // at least 10 jobs/s
	last, err := waitForMessages(ctx, js, streamOut, o.LargeJobs, bound, failed)
	if err != nil && adm != nil {
		err = adm.annotate(ctx, err)
	}
	if err != nil {
		return LargeRun{}, fmt.Errorf("%s: %w", kind, err)
	}
	if err := waitForEmpty(ctx, js, streamIn, 30*time.Second); err != nil {
		return LargeRun{}, fmt.Errorf("%s: %w", kind, err)
	}
	slow1, err := srv.mon.slowConsumers()
	if err != nil {
		return LargeRun{}, err
	}
	d := last.Sub(start)
	r := LargeRun{
		Throughput:    Throughput{Jobs: o.LargeJobs, Seconds: round(d.Seconds(), 4), PerSecond: round(PerSecond(int64(o.LargeJobs), d), 1)},
		MiBPerSecond:  round(float64(o.LargeJobs)*float64(o.LargeSize)/(1<<20)/d.Seconds(), 1),
		SlowConsumers: slow1 - slow0,
		NATSRSSMiB:    peakRSS(srv.proc.cmd.Process.Pid),
	}
	if adm != nil {
		r.PeakRSSMiB = peakRSS(adm.proc.cmd.Process.Pid)
	}
	return r, nil
}

// large runs the large scenario: the relay, then the admitter.
func (e *env) large(ctx context.Context, p *progress) (*Large, error) {
	o := e.o
	l := &Large{Jobs: o.LargeJobs, SizeBytes: o.LargeSize, Tenants: o.LargeTenants, MaxPayload: largeMaxPayload(o.LargeSize)}
	admitterBin, natsBin, err := e.bins.build()
	if err != nil {
		return nil, err
	}
	what := fmt.Sprintf("%s jobs of %s over %d tenants, queued while the forwarder was down", count(float64(o.LargeJobs)), sizeName(o.LargeSize), o.LargeTenants)
	for _, kind := range []string{"relay", "admitter"} {
		into := &l.Relay
		if kind == "admitter" {
			into = &l.Admitter
		}
		if err := p.phase(fmt.Sprintf("large: %s drains %s", kind, what), func() (string, error) {
			r, err := e.largeRun(ctx, kind, admitterBin, natsBin)
			*into = r
			s := fmt.Sprintf("%s jobs/s, %s MiB/s, %d slow consumers", fixed(r.PerSecond, 1), fixed(r.MiBPerSecond, 1), r.SlowConsumers)
			if r.PeakRSSMiB > 0 {
				s += fmt.Sprintf(", peak RSS %s MiB", fixed(r.PeakRSSMiB, 1))
			}
			return s, err
		}); err != nil {
			return nil, err
		}
	}
	l.Ratio = round(Ratio(l.Admitter.PerSecond, l.Relay.PerSecond), 4)
	return l, nil
}

// sizeName writes a size in bytes as KiB or MiB when it is a whole number of them.
func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + " MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + " KiB"
	}
	return strconv.Itoa(n) + " B"
}
