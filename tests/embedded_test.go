package tests

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/admitter/admitter/internal/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestEmbeddedServerEmptyEnvironment starts admitter with no configuration at all but the port
// of its embedded NATS server and its data directory: it serves on that port with the built-in
// example plans and in-process buckets, forwards a job, and exits 0 on SIGTERM.
func TestEmbeddedServerEmptyEnvironment(t *testing.T) {
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	p := &proc{t: t, cmd: exec.Command(binary), logs: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + t.TempDir(),
		"ADMITTER_EMBEDDED_NATS_PORT=" + strconv.Itoa(port),
		"ADMITTER_DATA_DIR=" + dataDir,
	}
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("admitter logs:\n%s", p.logs.String())
		}
	})
	waitFor(t, 30*time.Second, "the admitter to start admitting", func() bool {
		select {
		case <-p.done:
			t.Fatalf("admitter exited at start (%v):\n%s", p.err, p.logs.String())
		default:
		}
		return strings.Contains(p.logs.String(), `"msg":"admitting"`)
	})

	nc, err := nats.Connect("nats://127.0.0.1:"+strconv.Itoa(port), nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("connect to the embedded server on port %d: %v", port, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m := nats.NewMsg("jobs.submit.acme.x")
	m.Data = []byte("hello from an empty environment")
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatalf("publish to jobs.submit.acme.x: %v", err)
	}
	cons, err := js.OrderedConsumer(ctx, "ADMITTED", jetstream.OrderedConsumerConfig{FilterSubjects: []string{"jobs.admitted.acme.x"}})
	if err != nil {
		t.Fatalf("consume ADMITTED: %v", err)
	}
	got, err := cons.Next(jetstream.FetchMaxWait(15 * time.Second))
	if err != nil {
		t.Fatalf("no job forwarded to jobs.admitted.acme.x within 15s: %v", err)
	}
	if got.Subject() != "jobs.admitted.acme.x" || string(got.Data()) != string(m.Data) {
		t.Errorf("forwarded %s %q, want jobs.admitted.acme.x %q", got.Subject(), got.Data(), m.Data)
	}
	h := got.Headers()
	if h.Get("Admit-Tenant") != "acme" || h.Get("Admit-Plan") != "gold" || h.Get("Admit-Attempts") != "1" {
		t.Errorf("headers %v, want Admit-Tenant acme, Admit-Plan gold (the built-in example plans), Admit-Attempts 1", h)
	}
	nc.Close()

	if code := p.signal(syscall.SIGTERM, 20*time.Second); code != 0 {
		t.Fatalf("exit status %d after SIGTERM, want 0:\n%s", code, p.logs.String())
	}
	if fi, err := os.Stat(filepath.Join(dataDir, "jetstream")); err != nil || !fi.IsDir() {
		t.Errorf("the embedded server did not store under ADMITTER_DATA_DIR (%v)", err)
	}
}
