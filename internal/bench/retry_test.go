package bench

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestRetryTriesUntilTheStepSucceeds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tries := 0
		err := retry(t.Context(), "redis FLUSHALL", 30*time.Second, func(context.Context) error {
			if tries++; tries < 3 {
				return errors.New("i/o timeout")
			}
			return nil
		})
		if err != nil || tries != 3 {
			t.Fatalf("retry: %v after %d tries, want nil after 3", err, tries)
		}
	})
}

func TestRetryGivesUpAtItsBoundSayingWhatItWaitedFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		refused := errors.New("connection refused")
		tries := 0
		begin := time.Now()
		err := retry(t.Context(), "the server on 127.0.0.1:4222 answers", 10*time.Second, func(ctx context.Context) error {
			tries++
			if _, ok := ctx.Deadline(); !ok {
				t.Error("an attempt's context has no deadline")
			}
			return refused
		})
		if !errors.Is(err, refused) || !strings.HasPrefix(err.Error(), "the server on 127.0.0.1:4222 answers: not done within 10s (") {
			t.Errorf("retry: %v, want the server's wait named, the bound and the last error", err)
		}
		if tries < 2 || time.Since(begin) > 10*time.Second {
			t.Errorf("%d tries in %v, want several within the bound of 10s", tries, time.Since(begin))
		}
	})
}

func TestRetryStopsAtAPermanentError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exited := errors.New("the admitter exited: bad plans file")
		tries := 0
		err := retry(t.Context(), "the admitter's /readyz", 30*time.Second, func(context.Context) error {
			tries++
			return permanent{exited}
		})
		if !errors.Is(err, exited) || tries != 1 || err.Error() != "the admitter's /readyz: the admitter exited: bad plans file" {
			t.Errorf("retry: %v after %d tries, want the exit after 1", err, tries)
		}
	})
}

func TestRetryEndsWithItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		tries := 0
		err := retry(ctx, "redis FLUSHALL", 30*time.Second, func(context.Context) error {
			if tries++; tries == 2 {
				cancel()
			}
			return errors.New("i/o timeout")
		})
		if !errors.Is(err, context.Canceled) || tries != 2 {
			t.Errorf("retry: %v after %d tries, want canceled after 2", err, tries)
		}
	})
}
