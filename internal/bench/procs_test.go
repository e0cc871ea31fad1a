package bench

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestAWaitForTheAdmitterSaysWhatItWaitsFor: a wait on an admitter process that passes its
// bound says what the admitter's /readyz answers (its 503's body names what it waits for), and a
// process that exited ends the wait at once with its log. Before, the wait said "503 Service
// Unavailable" alone, and a drain timed from the process's start said only how many jobs came.
func TestAWaitForTheAdmitterSaysWhatItWaitsFor(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		http.Error(w, "waiting for NATS at nats://127.0.0.1:4222: connection refused", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	exits := make(chan error, 1)
	a := &admitterProc{http: strings.TrimPrefix(srv.URL, "http://"), exited: exits}

	err := a.waitReady(t.Context(), 100*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "/readyz answers 200: not done within 100ms") ||
		!strings.HasSuffix(err.Error(), "the last: 503 Service Unavailable: waiting for NATS at nats://127.0.0.1:4222: connection refused") {
		t.Errorf("waitReady: %v", err)
	}
	drained := errors.New("only 12 of 1000 jobs forwarded to ADMITTED within 1m1s")
	if err := a.annotate(t.Context(), drained); !errors.Is(err, drained) ||
		!strings.HasSuffix(err.Error(), "(the admitter's /readyz: 503 Service Unavailable: waiting for NATS at nats://127.0.0.1:4222: connection refused)") {
		t.Errorf("annotate: %v", err)
	}

	exited := errors.New("the admitter exited: ADMITTER_PLANS_FILE: no such file")
	exits <- exited
	if err := a.waitReady(t.Context(), time.Minute); !errors.Is(err, exited) {
		t.Errorf("waitReady after the exit: %v, want the exit at once", err)
	}
}
