package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
)

// boot is what the process is waiting for while it starts: /readyz answers 503 with it until
// the service runs, and the log says each new reason once, with the server's own words.
type boot struct {
	log      *slog.Logger
	deadline time.Time // zero: wait for ever (ADMITTER_CONNECT_TIMEOUT unset)
	mu       sync.Mutex
	reason   string
	ready    func(context.Context) error // set once the service runs
}

func newBoot(log *slog.Logger, timeout time.Duration) *boot {
	b := &boot{log: log, reason: "starting"}
	if timeout > 0 {
		b.deadline = time.Now().Add(timeout)
	}
	return b
}

// Ready is /readyz: the reason the process is not running yet, or the service's own answer.
func (b *boot) Ready(ctx context.Context) error {
	b.mu.Lock()
	reason, ready := b.reason, b.ready
	b.mu.Unlock()
	if ready == nil {
		return errors.New(reason)
	}
	return ready(ctx)
}

// running hands readiness to the service.
func (b *boot) running(ready func(context.Context) error) {
	b.mu.Lock()
	b.ready = ready
	b.mu.Unlock()
}

// await calls f until it succeeds, ctx ends or the connect deadline passes, with a backoff from
// 200ms to 5s. what names the step ("connect to NATS at nats://…"). A failure is logged the first
// time and whenever its reason changes, marked permanent when only a change of configuration
// can fix it (credentials, certificates); /readyz says the same meanwhile.
func await[T any](ctx context.Context, b *boot, what string, f func() (T, error)) (T, error) {
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(200*time.Millisecond),
		backoff.WithMaxInterval(5*time.Second), backoff.WithMaxElapsedTime(0))
	var last string
	b.mu.Lock()
	b.reason = what
	b.mu.Unlock()
	for {
		v, err := f()
		if err == nil {
			return v, nil
		}
		var perm *backoff.PermanentError
		if errors.As(err, &perm) {
			return v, perm.Err
		}
		kind, why := classify(err)
		msg := fmt.Sprintf("%s: %s", what, why)
		b.mu.Lock()
		b.reason = msg
		b.mu.Unlock()
		// The reason's headline, not its details: those may change at every attempt (a local
		// port in "write tcp 127.0.0.1:45828->…: broken pipe").
		if head, _, _ := strings.Cut(why, " ("); head != last {
			last = head
			if kind == "permanent" {
				b.log.Error("cannot "+what+": retrying, but this needs a change of configuration", "reason", why, "permanent", true)
			} else {
				b.log.Warn("cannot "+what+" yet: retrying", "reason", why)
			}
		}
		next := bo.NextBackOff()
		if !b.deadline.IsZero() && time.Now().Add(next).After(b.deadline) {
			return v, fmt.Errorf("%s: gave up after ADMITTER_CONNECT_TIMEOUT: %s", what, why)
		}
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			return v, fmt.Errorf("%s: %w (last: %s)", what, ctx.Err(), why)
		case <-t.C:
		}
	}
}

// classify says whether a connection error is permanent (only a change of configuration fixes
// it: credentials refused, a certificate not trusted) and puts the server's reason in words.
func classify(err error) (kind, why string) {
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	var verify *tls.CertificateVerificationError
	var alert tls.AlertError
	var record tls.RecordHeaderError
	msg := err.Error()
	low := strings.ToLower(msg)
	switch {
	case errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || strings.Contains(low, "authorization violation"):
		return "permanent", "authorization violation: the server refused the credentials (" + msg + ")"
	case strings.Contains(msg, "WRONGPASS") || strings.Contains(msg, "NOAUTH") || strings.Contains(low, "invalid username-password"):
		return "permanent", "authentication refused by redis (" + msg + ")"
	case errors.As(err, &unknownCA) || (errors.As(err, &verify) && errors.As(verify.Err, &unknownCA)):
		return "permanent", "TLS: the server's certificate is signed by an unknown certificate authority (" + msg + ")"
	case errors.As(err, &hostname) || errors.As(err, &invalid) || errors.As(err, &verify):
		return "permanent", "TLS: the server's certificate does not verify (" + msg + ")"
	case strings.Contains(low, "remote error: tls: certificate required") || strings.Contains(low, "closed by remote after tls handshake") ||
		strings.Contains(low, "remote error: tls: bad certificate") || strings.Contains(low, "remote error: tls: unknown certificate authority"):
		// TLS 1.3: the client's handshake ends before the server checks the client's certificate,
		// so its refusal arrives as an alert, or as the connection closed right after.
		return "permanent", "TLS: the server wants a client certificate it trusts (ADMITTER_NATS_CERT or ADMITTER_REDIS_CERT, with its _KEY) (" + msg + ")"
	case errors.As(err, &alert) || errors.As(err, &record) || strings.Contains(low, "tls:"):
		return "permanent", "TLS handshake failed (" + msg + ")"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "transient", "connection refused (" + msg + ")"
	case errors.Is(err, nats.ErrNoServers):
		return "transient", "no server answers (" + msg + ")"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "transient", "timed out (" + msg + ")"
	}
	return "transient", msg
}

// whyNoServers finds the reason nats.Connect hides behind "no servers available": it dials each
// server of the list itself (TCP only) and returns the first failure with err.
func whyNoServers(ctx context.Context, list string, err error) error {
	for _, raw := range strings.Split(list, ",") {
		u, perr := url.Parse(strings.TrimSpace(raw))
		if perr != nil || u.Host == "" {
			continue
		}
		host := u.Host
		if u.Port() == "" {
			host = net.JoinHostPort(u.Hostname(), "4222")
		}
		var d net.Dialer
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, derr := d.DialContext(dctx, "tcp", host)
		cancel()
		if derr != nil {
			return fmt.Errorf("%w (%w)", derr, err)
		}
		conn.Close()
	}
	return err
}
