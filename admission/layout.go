package admission

import (
	"context"
	"errors"
	"fmt"
	"github.com/admitter/admitter/bucket"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/admitter/admitter/subjects"
	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go/jetstream"
)

// Layout is every JetStream resource the service uses, in one place: the streams and the
// key-value buckets where replicas announce themselves and keep their limiter's record. Setup
// creates what is absent from it; `make bench` uses it to create the same streams for the relay
// it compares with.
type Layout struct {
	// In holds jobs as producers publish them: each tenant's queue (limits retention, file
	// storage, Direct Get allowed, no limit that drops a job; discard new, so that an input
	// given a size limit refuses the producers' publishes when full). A job leaves it when it is
	// forwarded or dead-lettered. With partitions (Config.Partitions > 1) the jobs are stored in
	// Partitions instead, the configuration being the same but for the name and subjects: the
	// server's account mapping (subjects.Partitions.Mapping) sends each job to its tenant's;
	// In then keeps what producers publish without the mapping, forwarded first.
	In         jetstream.StreamConfig
	Partitions []jetstream.StreamConfig
	// Out holds admitted jobs, Dead rejected ones.
	Out, Dead jetstream.StreamConfig
	// Owners is the bucket where each replica keeps a heartbeat and the leases of the
	// partitions it reads (see owners.go).
	Owners jetstream.KeyValueConfig
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

// InputHeadroom is what the input stream the admitter creates keeps below the server's maximum
// payload for the headers the admitter adds to a job (its Msg-Id, tenant, plan, lease, trace
// context): a job too large to be forwarded is refused at publish time instead.
const InputHeadroom = 4 << 10

// NewLayout is the layout of a configuration (defaults applied as New applies them).
func NewLayout(cfg Config) Layout {
	c := cfg.withDefaults()
	dup := c.DuplicateWindow
	l := Layout{
		In: jetstream.StreamConfig{
			Name: c.StreamIn, Subjects: []string{c.In.Filter()}, Retention: jetstream.LimitsPolicy, Discard: jetstream.DiscardNew,
			Storage: jetstream.FileStorage, AllowDirect: true,
			Description: "admitter: jobs as published, each tenant's queue, until forwarded or dead-lettered",
		},
		Out: jetstream.StreamConfig{
			Name: c.StreamOut, Subjects: []string{c.Out.Filter()}, Retention: jetstream.LimitsPolicy,
			Storage: jetstream.FileStorage, MaxAge: max(DefaultOutMaxAge, dup), Duplicates: dup, AllowDirect: true,
			Description: "admitter: admitted jobs, paced per tenant",
		},
		Dead: jetstream.StreamConfig{
			Name: c.StreamDead, Subjects: []string{c.Dead.Filter()}, Retention: jetstream.LimitsPolicy,
			Storage: jetstream.FileStorage, MaxAge: max(DefaultDeadMaxAge, dup), Duplicates: dup,
			Description: "admitter: rejected jobs with Admit-Error",
		},
		Owners: jetstream.KeyValueConfig{
			Bucket:      c.Consumer + "_owners",
			Description: "admitter: heartbeats of the replicas sharing consumer " + c.Consumer + ", and which reads each partition of the input",
			History:     1,
			TTL:         time.Hour, // a replica that died leaves its heartbeat; a partition's key is renewed every heartbeat
			Storage:     jetstream.FileStorage,
			Replicas:    c.Replicas,
		},
	}
	l.Limiter = LimiterRecord(c.Consumer, c.Replicas)
	if c.Partitions > 1 {
		ps := Partitions(c.In, c.StreamIn, c.Partitions)
		for p := range c.Partitions {
			st := l.In
			st.Name, st.Subjects = wire.InputStream(c.StreamIn, c.Partitions, p), []string{ps.Filter(p)}
			st.Description = fmt.Sprintf("admitter: partition %d of %d of the jobs as published, each tenant's queue, until forwarded or dead-lettered", p, c.Partitions)
			l.Partitions = append(l.Partitions, st)
		}
		l.In.Description = "admitter: jobs published without the partitions' mapping, forwarded before their tenants' newer ones"
	}
	for _, st := range []*jetstream.StreamConfig{&l.In, &l.Out, &l.Dead} {
		st.Replicas = c.Replicas
	}
	for i := range l.Partitions {
		l.Partitions[i].Replicas = c.Replicas
	}
	return l
}

// bucketName is what a KV bucket name may be.
var bucketName = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// Ensure creates the streams of the layout that are absent and checks those present: each must
// capture the subjects the admitter publishes to or reads, the streams it publishes to must
// recognise a publish repeated within the duplicate window (raised when the admitter made them,
// else it is an error saying what to change), and the input must keep every job until it is
// forwarded and be readable by Direct Get. A set-up that would lose jobs or forward one twice is
// an error wrapping ErrSetup. It does not create the buckets (see Service.Setup).
func (l Layout) Ensure(ctx context.Context, js jetstream.JetStream, log *slog.Logger) error {
	for _, want := range append([]jetstream.StreamConfig{l.In, l.Out, l.Dead}, l.Partitions...) {
		if err := ensureStream(ctx, js, want, want.Name != l.Out.Name && want.Name != l.Dead.Name, log); err != nil {
			return err
		}
	}
	return nil
}

// lookupKeep is how long the output should keep a forward: as long as the limiter remembers an
// admission (bucket.DefaultRedeem), a job read again may be looked up there (once.go).
const lookupKeep = bucket.DefaultRedeem

func ensureStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig, input bool, log *slog.Logger) error {
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
			return fmt.Errorf("%w: stream %s has a duplicate window of %v, shorter than ADMITTER_DUPLICATE_WINDOW (%v): a forward repeated after a crash would be stored twice; raise it (nats stream edit %s --dupe-window %v) or lower ADMITTER_DUPLICATE_WINDOW",
				ErrSetup, want.Name, have.Duplicates, want.Duplicates, want.Name, want.Duplicates)
		}
		have.Duplicates = want.Duplicates
		if have.MaxAge > 0 && have.MaxAge < want.Duplicates { // 0 keeps messages for ever
			have.MaxAge = want.Duplicates
		}
		if _, err := js.UpdateStream(ctx, have); err != nil {
			return fmt.Errorf("%w: stream %s: raise its duplicate window to %v: %w", ErrSetup, want.Name, want.Duplicates, err)
		}
		log.Info("raised the duplicate window of a stream the admitter made", "stream", want.Name, "duplicates", want.Duplicates.String())
	}
	if !input {
		return ensureOutput(ctx, js, want, have, log)
	}
	// The input: every tenant's queue. A work-queue input (made by an earlier version, whose
	// consumer acknowledged what it took) holds jobs until they are removed as well.
	switch {
	case have.Retention == jetstream.InterestPolicy:
		return fmt.Errorf("%w: stream %s holds the tenants' queues and has interest retention, which drops a job no consumer wants (the admitter reads it without one): recreate it with limits retention",
			ErrSetup, want.Name)
	case have.MaxAge > 0 || (have.Discard == jetstream.DiscardOld && (have.MaxMsgs > 0 || have.MaxBytes > 0 || have.MaxMsgsPerSubject > 0)):
		return fmt.Errorf("%w: stream %s holds the tenants' queues and must keep every job until it is forwarded, but drops jobs (max age %v, or discard old with max msgs %d, max bytes %d, max msgs per subject %d): remove the max age, and set discard new to keep the size limits (producers' publishes are then refused when it is full)",
			ErrSetup, want.Name, have.MaxAge, have.MaxMsgs, have.MaxBytes, have.MaxMsgsPerSubject)
	case have.DenyPurge:
		return fmt.Errorf("%w: stream %s holds the tenants' queues and denies purges: the admitter removes forwarded jobs with them (a job is never removed otherwise, and the stream would fill): recreate it without deny purge",
			ErrSetup, want.Name)
	case !have.AllowDirect:
		have.AllowDirect = true
		if _, err := js.UpdateStream(ctx, have); err != nil {
			return fmt.Errorf("%w: stream %s: allow direct get (the tenants' queues are read with it): %w", ErrSetup, want.Name, err)
		}
		log.Info("allowed direct get on stream", "stream", want.Name)
	}
	if have.Storage == jetstream.MemoryStorage {
		log.Warn("the input stream is in memory: reading and removing each tenant's jobs costs a memory store a scan of the stream (FIELD-NOTES: 549 removals/s), and a restart of the server loses every waiting job; use file storage", "stream", want.Name)
	}
	return nil
}

// ensureOutput checks a stream the admitter publishes to (have, made by want): a forward found
// there is not repeated (once.go), so the output keeps them, and an output the admitter made
// allows Direct Get (a lookup reads a tenant's forwards in batches).
func ensureOutput(ctx context.Context, js jetstream.JetStream, want, have jetstream.StreamConfig, log *slog.Logger) error {
	if !want.AllowDirect {
		return nil // the dead letters
	}
	if have.Retention != jetstream.LimitsPolicy || (have.MaxAge > 0 && have.MaxAge < lookupKeep) {
		log.Warn("the output does not keep forwards an hour: a job forwarded just before its replica stopped, read again by the next, is forwarded again if its forward is gone (work-queue or interest retention, or a shorter max age)",
			"stream", want.Name, "retention", have.Retention.String(), "max_age", have.MaxAge.String(), "want_max_age", lookupKeep.String())
	}
	if have.AllowDirect || !strings.HasPrefix(have.Description, "admitter:") {
		return nil
	}
	have.AllowDirect = true
	if _, err := js.UpdateStream(ctx, have); err != nil {
		return fmt.Errorf("%w: stream %s: allow direct get (forwards are looked up with it): %w", ErrSetup, want.Name, err)
	}
	log.Info("allowed direct get on stream", "stream", want.Name)
	return nil
}

// DefaultHeartbeat is how often a replica announces itself and renews the leases of the
// partitions it reads when Config.Heartbeat is zero; a lease lasts three heartbeats.
const DefaultHeartbeat = time.Second
