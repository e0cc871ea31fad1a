package bench

import (
	"testing"
	"time"
)

// TestPoolFigures computes the pool scenario's figures from a small hand-made run: three tenants
// of shares 1, 2 and 1, a window from the forward that served the last of them to the first
// tenant's last job, the handlers' busy time clipped to it, and a quiet job inside and one
// outside it.
func TestPoolFigures(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(100, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	fw := func(tenant int32, ms int) poolForward { return poolForward{tenant: tenant, at: at(ms)} }
	r := poolRun{names: tenantNames(3), shares: []int64{1, 2, 1}, jobs: []int{3, 6, 30}, pool: 2,
		forwards: []poolForward{
			fw(0, 0), fw(1, 10), fw(2, 20), // every tenant served after 3: the window starts at 20ms
			fw(1, 30), {tenant: -1, seq: 0, at: at(35), sent: at(25)},
			fw(0, 40), fw(1, 50), fw(1, 60), fw(2, 70),
			fw(0, 120), // t0001's 3rd and last: the window ends here (forwards 3 to before 8)
			fw(1, 130),
		},
		spans:     [][2]time.Time{{at(0), at(20)}, {at(20), at(70)}, {at(60), at(200)}},
		quietSent: []time.Time{at(25), at(110), at(500)}, // the 2nd is never forwarded, the 3rd after the window
		quietEnd:  at(1110),
		calls:     []callSample{{at(0), 100}, {at(20), 104}, {at(80), 120}, {at(140), 200}},
	}
	f := PoolFigures(r)
	if f.AllServed != 3 || f.WindowFrom != 3 || f.WindowTo != 8 || f.WindowS != 0.1 || f.PerSecond != 50 {
		t.Errorf("window: %+v", f)
	}
	// In the window: t0001 1 (40), t0002 3 (30, 50, 60), t0003 1 (70); over the shares 1, 1.5, 1.
	if f.Jain != 0.9608 || f.MinRatio != 0.857 || f.MaxRatio != 1.286 {
		t.Errorf("fairness: Jain %v, min %v, max %v", f.Jain, f.MinRatio, f.MaxRatio)
	}
	if len(f.ByShare) != 2 || f.ByShare[0] != (PoolShare{Share: 1, Tenants: 2, MeanReceived: 1, PerShareVsMean: 0.857}) ||
		f.ByShare[1] != (PoolShare{Share: 2, Tenants: 1, MeanReceived: 3, PerShareVsMean: 1.286}) {
		t.Errorf("by share: %+v", f.ByShare)
	}
	if len(f.Lowest) != 3 || f.Lowest[0].Tenant != "t0001" || f.Highest[0] != (TenantShare{Tenant: "t0002", Share: 2, Received: 3}) {
		t.Errorf("extremes: lowest %+v, highest %+v", f.Lowest, f.Highest)
	}
	// Busy in [20ms, 120ms]: 50ms + 60ms of a pool of 2 over 100ms.
	if f.Utilisation != 0.55 {
		t.Errorf("utilisation %v, want 0.55", f.Utilisation)
	}
	// Quiet: 10ms (forwarded), and 1000ms (never forwarded: its wait until the end).
	if f.Quiet.Samples != 2 || f.QuietMissing != 1 || f.Quiet.MaxMs != 1000 {
		t.Errorf("quiet: %+v, missing %d", f.Quiet, f.QuietMissing)
	}
	// Redis between the samples at 20ms and 80ms: 16 commands less one INFO, over the 6
	// forwards (contending and quiet) after 20ms up to 80ms.
	if f.RedisCallsPerJob != 2.5 {
		t.Errorf("redis calls per job %v, want 2.5", f.RedisCallsPerJob)
	}
	// A tenant whose whole backlog went before every one had been served is left out.
	early := PoolFigures(poolRun{names: tenantNames(3), shares: []int64{1, 1, 1}, jobs: []int{1, 4, 10}, pool: 1,
		forwards: []poolForward{fw(0, 0), fw(1, 10), fw(2, 20), fw(1, 30), fw(2, 40), fw(1, 50), fw(2, 60), fw(1, 70), fw(2, 80)}})
	if early.RanOutEarly != 1 || early.WindowFrom != 3 || early.WindowTo != 7 || early.Jain != 1 || len(early.Lowest) != 2 ||
		len(early.ByShare) != 1 || early.ByShare[0].Tenants != 2 || early.ByShare[0].MeanReceived != 2 {
		t.Errorf("a tenant out before the window: %+v", early)
	}
	if f := PoolFigures(poolRun{names: tenantNames(2), shares: []int64{1, 1}, jobs: []int{1, 1}}); f.Jain != 0 || f.WindowS != 0 {
		t.Errorf("no forward: %+v", f)
	}
}
