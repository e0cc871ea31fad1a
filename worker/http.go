package worker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ResponseError is what a handler that called an HTTP service returns for the call's response
// and error: nil for a response of 2xx or 3xx; for 429 Too Many Requests or 503 Service
// Unavailable, RetryAfter (the response's Retry-After, whole seconds or an HTTP date) or, without
// one, Overloaded; Overloaded too for a call that timed out; and otherwise an error naming the
// request and the status (or err itself): the job failed. It reads no body and closes nothing:
// the response stays the caller's.
//
//	resp, err := http.DefaultClient.Do(req)
//	if resp != nil {
//		defer resp.Body.Close()
//	}
//	return worker.ResponseError(resp, err)
func ResponseError(resp *http.Response, err error) error {
	if err != nil {
		var ne net.Error
		if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
			return Overloaded(err)
		}
		return err
	}
	if resp == nil {
		return errors.New("worker: no response and no error")
	}
	if resp.StatusCode < 400 {
		return nil
	}
	what := resp.Status
	if what == "" {
		what = strconv.Itoa(resp.StatusCode)
	}
	if resp.Request != nil && resp.Request.URL != nil {
		what = resp.Request.Method + " " + resp.Request.URL.Redacted() + ": " + what
	}
	failed := fmt.Errorf("worker: %s", what)
	if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable {
		return failed
	}
	if d, ok := retryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
		return RetryAfter(d, failed)
	}
	return Overloaded(failed)
}

// retryAfter reads an HTTP Retry-After value at now: whole seconds, or an HTTP date (in the
// past: 0). ok is false for anything else, or nothing.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseUint(v, 10, 32); err == nil {
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}
