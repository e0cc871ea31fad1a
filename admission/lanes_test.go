package admission

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/bucket/buckettest"
	"github.com/admitter/admitter/plans"
	"github.com/admitter/admitter/policy"
)

// TestLanesWakeWhenTheLimiterRecovers: lanes that wait out a backoff because the limiter failed
// (a failed step, a held head) ask again as soon as the limiter answers again, instead of
// sleeping up to 5 s more; lanes that wait for their plan keep their time.
func TestLanesWakeWhenTheLimiterRecovers(t *testing.T) {
	ps, err := plans.Parse("plans.yaml", []byte("plans: {p: {limits: [{capacity: 1, rate: 1/s}]}}\ndefault_plan: p\n"))
	if err != nil {
		t.Fatal(err)
	}
	lim := &buckettest.Flaky{Memory: bucket.NewMemory(bucket.Options{}, nil)}
	pol, err := policy.New(policy.Config{Limiter: lim, Plans: ps, FailMode: policy.FailClosed, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	l := newLanes(&Service{cfg: Config{Policy: pol}})
	later := 5 * time.Second
	l.mu.Lock()
	for name, ln := range map[string]*lane{"failed": {errs: 3}, "held": {held: true}, "paced": {}} {
		ln.tenant, ln.index = name, -1
		l.byName[name] = ln
		l.scheduleLocked(ln, later)
	}
	l.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	wake := l.recoveryWaker()
	go func() { defer close(done); wake(ctx) }()
	defer func() { cancel(); <-done }()

	lim.Down.Store(true)
	pol.Decide(ctx, "acme", bucket.Ingest, []policy.Job{{ID: 1, Weight: 1}})
	lim.Down.Store(false)
	pol.Decide(ctx, "acme", bucket.Ingest, []policy.Job{{ID: 2, Weight: 1}}) // the limiter answers again
	deadline := time.Now().Add(5 * time.Second)
	for {
		l.mu.Lock()
		failed, held, paced := time.Until(l.byName["failed"].due), time.Until(l.byName["held"].due), time.Until(l.byName["paced"].due)
		l.mu.Unlock()
		if failed <= 0 && held <= 0 {
			if paced < later/2 {
				t.Errorf("a lane waiting for its plan was woken too: due in %v", paced)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the limiter recovered, the failed lane is due in %v and the held one in %v", failed, held)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
