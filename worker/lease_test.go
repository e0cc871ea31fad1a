package worker

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/admitter/admitter/wire"
)

// TestKeeperSchedule drives a keeper's clock: renewals halfway through each lease (the first
// halfway through the lease the forward started), a failed one tried again a tenth of a lease
// later, none after one answered not held (the deadline then in the past), the delivery kept
// alive every period all along, and nothing once stopped.
func TestKeeperSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		stored := start.Add(-100 * time.Millisecond) // the forward waited 100 ms for the worker
		j := &Job{Tenant: "acme", Lease: 7, LeaseLength: time.Second, Attempt: 1, deadline: stored.Add(time.Second)}
		var mu sync.Mutex
		var renewals, progress []time.Duration
		answers := []error{nil, errors.New("timeout"), nil, nil}
		k := keeper{job: j, every: 700 * time.Millisecond, log: slog.New(slog.DiscardHandler),
			progress: func() error {
				mu.Lock()
				defer mu.Unlock()
				progress = append(progress, time.Since(start))
				return nil
			},
			renew: func(ctx context.Context) (wire.LeaseReply, error) {
				time.Sleep(10 * time.Millisecond) // the round trip
				mu.Lock()
				defer mu.Unlock()
				n := len(renewals)
				renewals = append(renewals, time.Since(start))
				if n >= len(answers) {
					return wire.LeaseReply{Held: false}, nil
				}
				return wire.LeaseReply{Held: true}, answers[n]
			}}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		first := firstRenewal(time.Now(), j.LeaseDeadline(), j.LeaseLength, j.Attempt)
		wg.Go(func() { k.run(ctx, first) })

		time.Sleep(1300 * time.Millisecond)
		synctest.Wait()
		if d := j.LeaseDeadline(); !d.Equal(start.Add(1010 * time.Millisecond).Add(time.Second)) {
			t.Errorf("deadline %v after the start, want the third renewal's sending (1.01 s) + 1 s", d.Sub(start))
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if d := j.LeaseDeadline(); d.After(time.Now()) {
			t.Errorf("deadline %v from now after the lease was found not held, want it past", time.Until(d))
		}
		cancel()
		wg.Wait()
		time.Sleep(5 * time.Second)
		ms := func(d ...int) []time.Duration {
			var out []time.Duration
			for _, x := range d {
				out = append(out, time.Duration(x)*time.Millisecond)
			}
			return out
		}
		// Each answered 10 ms after it was sent. Sent at 400 ms: halfway through the first lease
		// (from -100 ms); 900: halfway through the renewed one; fails; 1010: a tenth of a lease
		// later; 1510; 2010, answered not held: the last.
		want := ms(410, 910, 1020, 1520, 2020)
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(renewals, want) {
			t.Errorf("renewals answered at %v, want %v", renewals, want)
		}
		if want := ms(700, 1400, 2100, 2800, 3500, 4200); !slices.Equal(progress, want) {
			t.Errorf("in progress at %v, want %v", progress, want)
		}
	})
}

func TestFirstRenewal(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, tc := range []struct {
		name     string
		deadline time.Time
		length   time.Duration
		attempt  uint64
		want     time.Duration
	}{
		{"fresh: halfway through", now.Add(time.Minute), time.Minute, 1, 30 * time.Second},
		{"waited 40 s of a minute: at once", now.Add(20 * time.Second), time.Minute, 1, 0},
		{"deadline passed: at once", now.Add(-time.Second), time.Minute, 1, 0},
		{"delivered before: at once", now.Add(time.Minute), time.Minute, 2, 0},
		{"store time unknown: at once", time.Time{}, time.Minute, 1, 0},
	} {
		if got := firstRenewal(now, tc.deadline, tc.length, tc.attempt); got != tc.want {
			t.Errorf("%s: firstRenewal = %v, want %v", tc.name, got, tc.want)
		}
	}
	for length, want := range map[time.Duration]time.Duration{time.Minute: time.Second, 2 * time.Second: 200 * time.Millisecond, 50 * time.Millisecond: 10 * time.Millisecond} {
		if got := retryDelay(length); got != want {
			t.Errorf("retryDelay(%v) = %v, want %v", length, got, want)
		}
	}
}
