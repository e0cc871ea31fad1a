package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestTheProcessEndsAtItsBound: once told to stop, a command that has not returned when the
// bound passes ends the process with status 1, logging what still runs; one that returned in
// time ends nothing.
func TestTheProcessEndsAtItsBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var codes []int
		exit = func(code int) { mu.Lock(); codes = append(codes, code); mu.Unlock() }
		exited := func() []int { mu.Lock(); defer mu.Unlock(); return slices.Clone(codes) }
		defer func() { exit = os.Exit }()
		var logs bytes.Buffer
		log := slog.New(slog.NewTextHandler(&logs, nil))

		ctx, stop := context.WithCancel(context.Background())
		returned := exitBound(ctx, 12*time.Second, log)
		stop()
		time.Sleep(11 * time.Second)
		synctest.Wait()
		if got := exited(); len(got) != 0 {
			t.Fatalf("exited %v before the bound", got)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if got := exited(); len(got) != 1 || got[0] != 1 {
			t.Fatalf("exit codes %v past the bound, want [1]", got)
		}
		if !strings.Contains(logs.String(), "did not end within ADMITTER_SHUTDOWN_TIMEOUT") || !strings.Contains(logs.String(), "goroutine") {
			t.Errorf("the log does not say what still ran:\n%s", logs.String())
		}
		returned()

		ctx, stop = context.WithCancel(context.Background())
		returned = exitBound(ctx, 12*time.Second, log)
		stop()
		time.Sleep(time.Second)
		returned()
		time.Sleep(time.Minute)
		synctest.Wait()
		if got := exited(); len(got) != 1 {
			t.Fatalf("exit codes %v: the second command, which returned in time, exited too", got)
		}
	})
}
