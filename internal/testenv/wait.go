package testenv

import (
	"testing"
	"time"
)

// WaitFor polls cond every 20ms until it holds, failing the test after timeout: every wait in
// the tests is bounded, and says what it waited for.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
