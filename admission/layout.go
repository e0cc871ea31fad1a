package admission

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/admitter/admitter/subjects"
	"github.com/nats-io/nats.go/jetstream"
)

// Layout is every JetStream resource the service uses, in one place: the four streams, the
// ingest consumer shared by all replicas, and the key-value bucket where replicas announce
// themselves. Setup creates what is absent from it; `make bench` uses it to create the same
// streams for the relay it compares with.
type Layout struct {
	// In holds jobs as producers publish them (work queue: a job leaves it when acknowledged).
	In jetstream.StreamConfig
	// Out holds admitted jobs, Dead rejected ones.
	Out, Dead jetstream.StreamConfig
	// Wait holds the jobs that must wait, one subject per tenant: the tenants' lanes. Limits
	// retention, read by sequence with Direct Get; a job leaves when it is forwarded.
	Wait jetstream.StreamConfig
	// Ingest is the durable consumer on In shared by every replica.
	Ingest jetstream.ConsumerConfig
	// Replicas is the bucket where each replica keeps a heartbeat (see members.go).
	Replicas jetstream.KeyValueConfig
	// Limiter is the bucket where the deployment records that it has used a Redis (see
	// LimiterRecord).
	Limiter jetstream.KeyValueConfig
}

// LimiterRecord is the key-value bucket in which the replicas sharing consumer record, outside
// Redis, that they have marked a Redis as theirs (bucket.MemoryRecord): with it, a Redis that
// lost everything while no replica ran is told from one that never knew admitter. File storage,
// kept for ever: one small key.
func LimiterRecord(consumer string, replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      consumer + "_limiter",
		Description: "admitter: what the replicas sharing consumer " + consumer + " know of their limiter",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	}
}

// DuplicateMargin is how much longer than the ack wait the duplicate window of the streams the
// admitter publishes to must be: a job redelivered after its ack wait, whose first publish was
// stored, is published again and must be recognised.
const DuplicateMargin = 30 * time.Second

// InputHeadroom is what the input stream the admitter creates keeps below the server's maximum
// payload for the headers the admitter adds to a job (its Msg-Id, tenant, plan, trace context,
// and on the way to a lane its input's subject, sequence and time): a job too large to be
// forwarded is refused at publish time instead.
const InputHeadroom = 4 << 10

// NewLayout is the layout of a configuration (defaults applied as New applies them).
func NewLayout(cfg Config) Layout {
	c := cfg.withDefaults()
	dup := max(c.DuplicateWindow, c.AckWait+DuplicateMargin)
	l := Layout{
		In: jetstream.StreamConfig{
			Name: c.StreamIn, Subjects: []string{c.In.Filter()}, Retention: jetstream.WorkQueuePolicy,
			Storage: jetstream.FileStorage, Description: "admitter: jobs as published, until decided",
		},
		Out: jetstream.StreamConfig{
			Name: c.StreamOut, Subjects: []string{c.Out.Filter()}, Retention: jetstream.LimitsPolicy,
			Storage: jetstream.FileStorage, MaxAge: max(DefaultOutMaxAge, dup), Duplicates: dup,
			Description: "admitter: admitted jobs, paced per tenant",
		},
		Dead: jetstream.StreamConfig{
			Name: c.StreamDead, Subjects: []string{c.Dead.Filter()}, Retention: jetstream.LimitsPolicy,
			Storage: jetstream.FileStorage, MaxAge: max(DefaultDeadMaxAge, dup), Duplicates: dup,
			Description: "admitter: rejected jobs with Admit-Error",
		},
		Wait: jetstream.StreamConfig{
			Name: c.StreamWait, Subjects: []string{c.Wait.Filter()}, Retention: jetstream.LimitsPolicy,
			Storage: jetstream.FileStorage, AllowDirect: true, Duplicates: dup,
			Description: "admitter: jobs waiting for their tenant's plan, one subject per tenant",
		},
		Ingest: jetstream.ConsumerConfig{
			Durable:       c.Consumer,
			Description:   "admitter: ingest, shared by all replicas",
			FilterSubject: c.In.Filter(),
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       c.AckWait,
			MaxDeliver:    -1, // a held job is not a failure: never drop a job for being delivered often
			MaxAckPending: c.MaxAckPending,
		},
		Replicas: jetstream.KeyValueConfig{
			Bucket:      c.Consumer + "_replicas",
			Description: "admitter: heartbeats of the replicas sharing consumer " + c.Consumer,
			History:     1,
			TTL:         10 * c.Heartbeat,
			Storage:     jetstream.MemoryStorage,
			Replicas:    c.Replicas,
		},
	}
	l.Limiter = LimiterRecord(c.Consumer, c.Replicas)
	for _, st := range []*jetstream.StreamConfig{&l.In, &l.Out, &l.Dead, &l.Wait} {
		st.Replicas = c.Replicas
	}
	return l
}

// bucketName is what a KV bucket name may be.
var bucketName = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// Ensure creates the streams of the layout that are absent and checks those present: each must
// capture the subjects the admitter publishes to or consumes from, the streams it publishes to
// must recognise a publish repeated after the ack wait (their duplicate window is raised when
// the admitter made them, else it is an error saying what to change), and the lanes stream must
// keep jobs until they are forwarded. A set-up that would lose jobs or forward one twice is an
// error wrapping ErrSetup. It does not create the consumer or the bucket (see Service.Setup).
func (l Layout) Ensure(ctx context.Context, js jetstream.JetStream, log *slog.Logger) error {
	for _, want := range []jetstream.StreamConfig{l.In, l.Out, l.Dead, l.Wait} {
		if err := ensureStream(ctx, js, want, log, l.Ingest.AckWait); err != nil {
			return err
		}
	}
	return nil
}

func ensureStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig, log *slog.Logger, ackWait time.Duration) error {
	filter := want.Subjects[0]
	st, err := js.Stream(ctx, want.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err := js.CreateStream(ctx, want); err != nil {
			return fmt.Errorf("%w: create stream %s over %q: %w", ErrSetup, want.Name, filter, err)
		}
		log.Info("created stream", "stream", want.Name, "subjects", want.Subjects, "retention", want.Retention.String())
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: look up stream %s: %w", ErrSetup, want.Name, err)
	}
	have := st.CachedInfo().Config
	captured := false
	for _, subj := range have.Subjects {
		captured = captured || subjects.Covers(subj, filter)
	}
	if !captured {
		return fmt.Errorf("%w: stream %s exists with subjects %q, which do not capture %q: jobs would be lost; add %q to the stream's subjects or change the subject template",
			ErrSetup, want.Name, have.Subjects, filter, filter)
	}
	if want.Duplicates > 0 && have.Duplicates < want.Duplicates { // a stream the admitter publishes to
		if !strings.HasPrefix(have.Description, "admitter:") {
			return fmt.Errorf("%w: stream %s has a duplicate window of %v, shorter than the ack wait (ADMITTER_ACK_WAIT %v) plus %v: a job redelivered after its ack wait would be stored twice; raise it to at least %v (nats stream edit %s --dupe-window %v) or lower ADMITTER_ACK_WAIT",
				ErrSetup, want.Name, have.Duplicates, ackWait, DuplicateMargin, want.Duplicates, want.Name, want.Duplicates)
		}
		have.Duplicates = want.Duplicates
		if have.MaxAge > 0 && have.MaxAge < want.Duplicates { // 0 keeps messages for ever
			have.MaxAge = want.Duplicates
		}
		if _, err := js.UpdateStream(ctx, have); err != nil {
			return fmt.Errorf("%w: stream %s: raise its duplicate window to %v: %w", ErrSetup, want.Name, want.Duplicates, err)
		}
		log.Info("raised the duplicate window of a stream the admitter made, to cover the ack wait", "stream", want.Name, "duplicates", want.Duplicates.String())
	}
	if !want.AllowDirect { // the lanes stream is the only one with requirements of its own
		return nil
	}
	switch {
	case have.Retention != jetstream.LimitsPolicy:
		return fmt.Errorf("%w: stream %s holds the tenants' lanes and needs limits retention, it has %s: delete it (it must be empty) and let the admitter create it",
			ErrSetup, want.Name, have.Retention)
	case have.MaxAge > 0 || have.MaxMsgs > 0 || have.MaxBytes > 0 || have.MaxMsgsPerSubject > 0:
		return fmt.Errorf("%w: stream %s holds the tenants' lanes and must keep every job until it is forwarded, but has limits (max age %v, max msgs %d, max bytes %d, max msgs per subject %d) that would drop waiting jobs: remove them",
			ErrSetup, want.Name, have.MaxAge, have.MaxMsgs, have.MaxBytes, have.MaxMsgsPerSubject)
	case !have.AllowDirect:
		have.AllowDirect = true
		if _, err := js.UpdateStream(ctx, have); err != nil {
			return fmt.Errorf("%w: stream %s: allow direct get (lanes are read with it): %w", ErrSetup, want.Name, err)
		}
		log.Info("allowed direct get on stream", "stream", want.Name)
	}
	return nil
}

// DefaultHeartbeat is how often a replica announces itself when Config.Heartbeat is zero; a
// replica not heard from for three heartbeats is taken for dead and its lanes are taken over.
const DefaultHeartbeat = time.Second
