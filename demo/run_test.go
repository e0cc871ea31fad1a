package demo

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/admitter/admitter/admission"
	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/internal/testenv"
	"github.com/admitter/admitter/policy"
	"github.com/admitter/admitter/subjects"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// startPipeline starts a JetStream server and an admission service with in-process buckets on
// testPlans, stopped when the test ends, and returns a connection for the demo.
func startPipeline(t *testing.T) (*nats.Conn, *bucket.Plans) {
	t.Helper()
	srv := testenv.StartNATS(t)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	plans := testPlansFile(t)
	pol, err := policy.New(policy.Config{Limiter: bucket.NewMemory(bucket.Options{}, nil), Plans: plans, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := admission.New(admission.Config{
		JetStream: js, Policy: pol,
		In:  subjects.MustParse("jobs.submit.{tenant}.>"),
		Out: subjects.MustParse("jobs.admitted.{tenant}.>"), Dead: subjects.MustParse("jobs.dead.{tenant}.>"),
		Wait:   subjects.MustParse("jobs.waiting.{tenant}"),
		Logger: slog.New(slog.DiscardHandler), ShutdownTimeout: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := svc.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = svc.Run(runCtx); close(done) }()
	t.Cleanup(func() {
		stop()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("the admission service did not stop within 10s")
		}
	})
	// Wait until it has forwarded a job, so that its goroutines are all running (the JetStream
	// client starts its async-publish reply handler on first use). Run tails the output stream
	// from its next message, so this job is not the demo's.
	if _, err := js.Publish(ctx, "jobs.submit.acme.warmup", nil); err != nil {
		t.Fatal(err)
	}
	out, err := js.Stream(ctx, "ADMITTED")
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "the warm-up job to be forwarded", func() bool {
		info, err := out.Info(ctx)
		return err == nil && info.State.Msgs == 1
	})
	return nc, plans
}

// settledGoroutines waits (bounded) until no more than n goroutines run, and returns how many
// do.
func settledGoroutines(n int) int {
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine() > n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	return runtime.NumGoroutine()
}

// TestRunAgainstAService runs the demo beside a real admission service: every job is accounted
// for, the tenant over its plan gets its allowance, the one under it everything, and Run leaves
// no goroutine behind.
func TestDemoRunAgainstAService(t *testing.T) {
	nc, plans := startPipeline(t)
	before := runtime.NumGoroutine()
	var out bytes.Buffer
	sum, err := Run(context.Background(), Config{
		Conn: nc, Plans: plans, Out: &out, Duration: 2 * time.Second, Settle: 300 * time.Millisecond,
		Tenants: []Tenant{{Name: "acme", Plan: "free", Profile: Burst}, {Name: "globex", Plan: "gold", Profile: Steady}},
	})
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	if n := settledGoroutines(before); n > before {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines after Run, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
	if strings.Contains(out.String(), "\x1b") {
		t.Error("plain output holds escape codes")
	}
	if !strings.Contains(out.String(), "\n1s acme: published ") || !strings.Contains(out.String(), "\nlost: 0 (") {
		t.Errorf("output lacks progress lines or the summary:\n%s", out.String())
	}
	if sum.Lost != 0 || sum.Unchecked != 0 || sum.Published != sum.Admitted+sum.Dead+sum.Waiting || sum.Interrupted || sum.LoadSeconds != 2 {
		t.Errorf("summary %+v", sum)
	}
	acme, globex := sum.Tenants[0], sum.Tenants[1]
	if !acme.Busy || acme.Waiting == 0 || acme.WindowTokens > int64(acme.Allowance) || float64(acme.WindowTokens) < 0.8*acme.Allowance {
		t.Errorf("acme (10× its plan): %+v", acme)
	}
	if globex.Busy || globex.Admitted != globex.Published || globex.Published == 0 {
		t.Errorf("globex (70%% of its plan): %+v", globex)
	}
}

// TestRunInterrupted: ending ctx stops the load early; the summary still counts every job.
func TestDemoRunInterrupted(t *testing.T) {
	nc, plans := startPipeline(t)
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	var out bytes.Buffer
	start := time.Now()
	sum, err := Run(ctx, Config{
		Conn: nc, Plans: plans, Out: &out, Duration: time.Minute, Settle: 200 * time.Millisecond,
		Tenants: []Tenant{{Name: "acme", Plan: "free", Profile: Burst}},
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("Run took %v after an interrupt at 700ms", took)
	}
	if !sum.Interrupted || sum.LoadSeconds < 0.6 || sum.LoadSeconds > 2 || sum.Lost != 0 || sum.Published == 0 {
		t.Errorf("summary %+v", sum)
	}
	if !strings.Contains(out.String(), "(interrupted)") {
		t.Errorf("the summary does not say it was interrupted:\n%s", out.String())
	}
}

func TestDemoRunRejectsBadConfig(t *testing.T) {
	plans := testPlansFile(t)
	nc := &nats.Conn{}
	ok := Config{Conn: nc, Plans: plans, Out: io.Discard, Duration: time.Second, Tenants: []Tenant{{Name: "acme", Plan: "free"}}}
	for name, c := range map[string]func(*Config){
		"no duration":   func(c *Config) { c.Duration = 0 },
		"no tenants":    func(c *Config) { c.Tenants = nil },
		"wrong plan":    func(c *Config) { c.Tenants = []Tenant{{Name: "acme", Plan: "gold"}} },
		"unknown plan":  func(c *Config) { c.Tenants = []Tenant{{Name: "acme", Plan: "platinum"}} },
		"no plan":       func(c *Config) { c.Tenants = []Tenant{{Name: "nobody", Plan: "free"}} },
		"twice":         func(c *Config) { c.Tenants = append(c.Tenants, c.Tenants[0]) },
		"bad profile":   func(c *Config) { c.Tenants = []Tenant{{Name: "acme", Plan: "free", Profile: 7}} },
		"no output":     func(c *Config) { c.Out = nil },
		"no connection": func(c *Config) { c.Conn = nil },
		"no wildcard":   func(c *Config) { c.SubjectIn = subjects.MustParse("jobs.submit.{tenant}") },
	} {
		cfg := ok
		c(&cfg)
		if _, err := Run(context.Background(), cfg); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
