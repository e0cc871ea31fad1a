package demo

import "time"

// A Clock tells the demo the time and paces it: the publishers' schedule, the table's refresh,
// the duration and the settling moment all follow it. Bounds on network calls use real time.
type Clock interface {
	Now() time.Time
	// NewTicker returns a ticker delivering the time every d.
	NewTicker(d time.Duration) Ticker
}

// A Ticker delivers ticks on C until stopped.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// RealClock is the system clock.
type RealClock struct{}

// Now returns time.Now().
func (RealClock) Now() time.Time { return time.Now() }

// NewTicker returns a time.Ticker.
func (RealClock) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

type realTicker struct{ t *time.Ticker }

func (t realTicker) C() <-chan time.Time { return t.t.C }
func (t realTicker) Stop()               { t.t.Stop() }
