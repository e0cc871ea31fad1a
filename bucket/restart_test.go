package bucket

import (
	"context"
	"testing"
	"time"

	"github.com/admitter/admitter/internal/testenv"
)

// forget makes a backend behave as one whose memory began at t (a restarted process, a Redis
// restarted without its data).
func forget(l limiter, t time.Time) {
	switch b := l.(type) {
	case *Memory:
		b.Forgot(t)
	case *Redis:
		b.born.at.Store(t.UnixMicro())
	}
}

// TestRedisRestartStartsEmpty: a real redis-server without an append-only file is restarted
// (SIGKILL): the limiter notices and takes the forgotten buckets for empty since the restart,
// so the tenant gets its rate, not a second full capacity.
func TestRedisRestartStartsEmpty(t *testing.T) {
	srv := testenv.StartRedis(t)
	r, err := DialRedis(srv.URL(), "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var seen []bool
	r.OnForget(func(_ time.Time, first bool) { seen = append(seen, first) })
	p := mustPlan(t, "p", lim("", 20, time.Second)) // 20 burst, 1/s: 20 s to refill
	ctx := context.Background()
	count := func() int {
		b := Batch{Tenant: "acme", Plan: p, Mode: Lane}
		for i := range 20 {
			b.Jobs = append(b.Jobs, Job{ID: int64(i + 1), Weight: 1})
		}
		res, err := r.Admit(ctx, b)
		for tries := 0; err != nil && tries < 50; tries++ { // the call on the connection the restart broke fails
			time.Sleep(20 * time.Millisecond)
			res, err = r.Admit(ctx, b)
		}
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, o := range res.Outcomes {
			if o == JobAdmitted {
				n++
			}
		}
		return n
	}
	// A server up for less than the refill time: buckets without state are not full yet.
	time.Sleep(1100 * time.Millisecond)
	if n := count(); n < 1 || n > 3 {
		t.Fatalf("just after the server started: %d admitted, want its refill since (1-3)", n)
	}
	srv.Kill()
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	n := count()
	t.Logf("after a restart of redis: %d admitted of 20 asked; forget events %v", n, seen)
	if n > 3 {
		t.Fatalf("after a restart of redis, %d of 20 admitted at once: the forgotten bucket was taken for full", n)
	}
	if len(seen) != 2 || !seen[0] || seen[1] {
		t.Errorf("forget events %v, want the first check, then the restart", seen)
	}
}
