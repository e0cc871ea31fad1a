package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/admitter/admitter/internal/testenv"
)

// natsProc is a nats-server process of its own, on 127.0.0.1 with JetStream in a fresh store,
// holding the streams of one forwarder (see createStreams).
type natsProc struct {
	proc *child
	url  string
	mon  monitor
}

// processWorld prepares a scenario that runs admitter and nats-server as processes of their
// own: both built, Redis emptied, and a nats-server started for the admitter; the caller stops
// it (srv.proc.stop).
func (e *env) processWorld(ctx context.Context) (admitterBin string, srv *natsProc, err error) {
	admitterBin, natsBin, err := e.bins.build()
	if err != nil {
		return "", nil, err
	}
	if err := e.admin.flush(ctx); err != nil {
		return "", nil, err
	}
	srv, err = e.startNATSProc(ctx, natsBin, 0, "admitter")
	if err != nil {
		return "", nil, err
	}
	return admitterBin, srv, nil
}

// startNATSProc starts a nats-server process (natsBin, see binaries) with its monitoring
// port, a max_payload of maxPayload bytes (0: the server's default), and the streams of kind's
// forwarder, and waits until it answers.
func (e *env) startNATSProc(ctx context.Context, natsBin string, maxPayload int, kind string) (*natsProc, error) {
	return e.startNATSProcOf(ctx, natsBin, maxPayload, kind, 1)
}

// startNATSProcOf is startNATSProc with admitter's input over partitions streams, the server
// carrying the mapping that stores each job in its tenant's (none for the relay, or one
// partition).
func (e *env) startNATSProcOf(ctx context.Context, natsBin string, maxPayload int, kind string, partitions int) (*natsProc, error) {
	dir := e.tb.TempDir()
	port, err1 := testenv.FreePort()
	mport, err2 := testenv.FreePort()
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	conf := fmt.Sprintf("listen: 127.0.0.1:%d\nhttp: 127.0.0.1:%d\n", port, mport)
	if maxPayload > 0 {
		conf += fmt.Sprintf("max_payload: %d\n", maxPayload)
	}
	conf += fmt.Sprintf("jetstream {\n  store_dir: %q\n}\n", filepath.Join(dir, "store"))
	if src, dst := partitionMapping(partitions); src != "" && kind == "admitter" {
		conf += fmt.Sprintf("mappings {\n  %q: %q\n}\n", src, dst)
	}
	confPath := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	proc, err := startChild(natsBin, os.Environ(), filepath.Join(dir, "nats-server.log"), "-c", confPath)
	if err != nil {
		return nil, err
	}
	s := &natsProc{proc: proc, url: fmt.Sprintf("nats://127.0.0.1:%d", port), mon: monitor{base: fmt.Sprintf("http://127.0.0.1:%d", mport)}}
	if err := retry(ctx, fmt.Sprintf("nats-server on %s answers with the %s streams", s.url, kind), readyWithin, func(ctx context.Context) error {
		select {
		case <-proc.done:
			return permanent{errors.New("nats-server exited")}
		default:
		}
		nc, js, err := connect(s.url, "bench-setup")
		if err != nil {
			return err
		}
		defer nc.Close()
		return createStreamsOf(ctx, js, kind, partitions)
	}); err != nil {
		proc.stop()
		log, _ := os.ReadFile(filepath.Join(dir, "nats-server.log"))
		return nil, fmt.Errorf("%w\n%s", err, log)
	}
	return s, nil
}

// admitterProc is the admitter as a process of its own, on a natsProc and the bench's Redis.
type admitterProc struct {
	proc *child
	// http is its HTTP server's address (/readyz, /debug/pprof).
	http string
	// exited delivers an error with the admitter's log if the process ends (before stop).
	exited <-chan error
}

// startAdmitterProc starts the admitter (admitterBin, see binaries) against natsURL and
// the bench's Redis with plans (a plans file's YAML) and extra environment (ADMITTER_…=…, which
// wins over the bench's own), logging warnings and errors to a file of its own. Its HTTP server
// listens on a free loopback port; its decision APIs are off.
func (e *env) startAdmitterProc(admitterBin, natsURL, plans string, extra ...string) (*admitterProc, error) {
	dir := e.tb.TempDir()
	plansPath := filepath.Join(dir, "plans.yaml")
	if err := os.WriteFile(plansPath, []byte(plans), 0o644); err != nil {
		return nil, err
	}
	hport, err := testenv.FreePort()
	if err != nil {
		return nil, err
	}
	httpAddr := fmt.Sprintf("127.0.0.1:%d", hport)
	env := append(os.Environ(), "ADMITTER_NATS_URL="+natsURL, "ADMITTER_REDIS_URL="+e.redisURL, "ADMITTER_PLANS_FILE="+plansPath,
		"ADMITTER_HTTP_ADDR="+httpAddr, "ADMITTER_API_ADDR=off", "ADMITTER_API_SUBJECT=off", "ADMITTER_LOG_LEVEL=warn")
	logPath := filepath.Join(dir, "admitter.log")
	proc, err := startChild(admitterBin, append(env, extra...), logPath)
	if err != nil {
		return nil, err
	}
	exited := make(chan error, 1)
	go func() { // ends with the process, which stop ends
		<-proc.done
		log, _ := os.ReadFile(logPath)
		exited <- fmt.Errorf("the admitter exited: %s", log)
	}()
	return &admitterProc{proc: proc, http: httpAddr, exited: exited}, nil
}

// stop stops the process (bounded, see child.stop).
func (a *admitterProc) stop() { a.proc.stop() }

// readyz asks the admitter's /readyz once: nil when it admits, else what it answered (a 503's
// body says what the admitter waits for) or why it did not answer.
func (a *admitterProc) readyz(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.http+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
}

// waitReady polls /readyz until the admitter answers that it admits, for at most within; it
// fails at once if the process exits.
func (a *admitterProc) waitReady(ctx context.Context, within time.Duration) error {
	return retry(ctx, "the admitter's http://"+a.http+"/readyz answers 200", within, func(ctx context.Context) error {
		select {
		case err := <-a.exited:
			return permanent{err}
		default:
		}
		return a.readyz(ctx)
	})
}

// annotate adds what the admitter's /readyz says now to err, a wait's whose bound passed from
// the admitter's start (a scenario that times its drain from the process's start does not wait
// for readiness first): whether the admitter ever became ready.
func (a *admitterProc) annotate(ctx context.Context, err error) error {
	now := "ready"
	if e := a.readyz(context.WithoutCancel(ctx)); e != nil {
		now = e.Error()
	}
	return fmt.Errorf("%w (the admitter's /readyz: %s)", err, now)
}
