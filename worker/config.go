package worker

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/admitter/admitter/subjects"
	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Config is what a Worker needs. Consumer, Conn and Handler are required; the other fields have
// the defaults each documents.
type Config struct {
	// Consumer delivers the forwarded jobs (required): a pull consumer of admitter's output
	// stream (ADMITTED) that you created, with AckPolicy jetstream.AckExplicitPolicy, usually
	// durable and filtered on the subjects this worker serves. The Worker neither creates nor
	// changes it; its MaxDeliver and BackOff apply to the jobs Nak'd (see Retry).
	Consumer jetstream.Consumer
	// Conn carries the lease messages (required): a connection to the NATS the admitter
	// listens on, usually the one the consumer's JetStream was made with.
	Conn *nats.Conn
	// Handler does a job (required).
	Handler Handler
	// Concurrency is how many handlers run at once, at most (default 1). It is also how many
	// jobs the consumer delivers ahead of the handlers.
	Concurrency int
	// Out, Done and Renew are admitter's subject templates (ADMITTER_SUBJECT_OUT,
	// ADMITTER_SUBJECT_DONE, ADMITTER_SUBJECT_RENEW): by default jobs.admitted.{tenant}.>,
	// jobs.done.{tenant}.> and jobs.renew.{tenant}.>. A forward's subject, matched by Out, is
	// mapped to its done and renew subjects; when Done or Renew has other wildcards than Out,
	// each is filled with "job".
	Out, Done, Renew string
	// Lease is the length of a job's lease when its forward names a lease without saying how
	// long it lasts (an admitter older than Admit-Lease-Ms). Zero: such a lease is not renewed
	// (it is still ended by the done message).
	Lease time.Duration
	// RequestTimeout bounds each lease message's wait for admitter's answer (default 2 s; a
	// renewal's is at most half the lease; a done message's 100 ms at each of its first eight
	// tries, then doubling). A done message unanswered is sent again, 13 times in all (a replica
	// that stopped answering took it: another answers a next one); a renewal is tried again until
	// the handler returns.
	RequestTimeout time.Duration
	// Logger receives what cannot be returned: lease messages unanswered, leases found ended,
	// acks that failed, handlers that panicked (default slog.Default()).
	Logger *slog.Logger
}

// Defaults.
const (
	defaultRequestTimeout = 2 * time.Second
	// defaultAckWait is JetStream's AckWait when the consumer's is unknown or unset.
	defaultAckWait = 30 * time.Second
)

// withDefaults returns c with its defaults filled in.
func (c Config) withDefaults() Config {
	if c.Concurrency == 0 {
		c.Concurrency = 1
	}
	if c.Out == "" {
		c.Out = wire.DefaultOutSubject
	}
	if c.Done == "" {
		c.Done = wire.DefaultDoneSubject
	}
	if c.Renew == "" {
		c.Renew = wire.DefaultRenewSubject
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = defaultRequestTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// templates are Config's subject templates, parsed, and the mappings from a forward's subject.
type templates struct {
	out, done, renew subjects.Template
	toDone, toRenew  *subjects.Mapping // nil: the templates' wildcards differ
}

// validate checks c, defaults filled in, and parses its templates.
func (c Config) validate() (templates, error) {
	var t templates
	switch {
	case c.Consumer == nil:
		return t, fmt.Errorf("%w: Consumer is nil (create one on admitter's output stream with jetstream.Stream.CreateOrUpdateConsumer, AckPolicy explicit)", ErrConfig)
	case c.Conn == nil:
		return t, fmt.Errorf("%w: Conn is nil (the connection the lease messages go through: try the consumer's)", ErrConfig)
	case c.Handler == nil:
		return t, fmt.Errorf("%w: Handler is nil", ErrConfig)
	case c.Concurrency < 0:
		return t, fmt.Errorf("%w: Concurrency must be 1 or more (0: the default, 1), got %d", ErrConfig, c.Concurrency)
	case c.Lease < 0:
		return t, fmt.Errorf("%w: Lease must not be negative, got %v", ErrConfig, c.Lease)
	case c.RequestTimeout < 0:
		return t, fmt.Errorf("%w: RequestTimeout must not be negative, got %v", ErrConfig, c.RequestTimeout)
	}
	if ci := c.Consumer.CachedInfo(); ci != nil && ci.Config.AckPolicy != jetstream.AckExplicitPolicy {
		return t, fmt.Errorf("%w: Consumer %s acks with policy %v, want jetstream.AckExplicitPolicy (each job is settled on its own)", ErrConfig, ci.Name, ci.Config.AckPolicy)
	}
	for _, f := range []struct {
		name, value string
		t           *subjects.Template
	}{{"Out", c.Out, &t.out}, {"Done", c.Done, &t.done}, {"Renew", c.Renew, &t.renew}} {
		var err error
		if *f.t, err = subjects.Parse(f.value); err != nil {
			return t, fmt.Errorf("%w: %s: %w", ErrConfig, f.name, err)
		}
	}
	if m, err := subjects.NewMapping(t.out, t.done); err == nil {
		t.toDone = &m
	}
	if m, err := subjects.NewMapping(t.out, t.renew); err == nil {
		t.toRenew = &m
	}
	return t, nil
}

// ackWait is how long the consumer waits for an ack before delivering again.
func ackWait(c jetstream.Consumer) time.Duration {
	if ci := c.CachedInfo(); ci != nil && ci.Config.AckWait > 0 {
		return ci.Config.AckWait
	}
	return defaultAckWait
}
