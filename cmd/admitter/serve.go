package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/admitter/admitter/admission"
	"github.com/admitter/admitter/bucket"
	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/rueidis"
)

// serve connects, prepares the streams and runs the service until ctx ends.
func serve(ctx context.Context, c *config, log *slog.Logger) error {
	nc, err := nats.Connect(c.NATSURL,
		nats.Name("admitter"),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(500*time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { log.Warn("nats disconnected", "err", err) }),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("nats reconnected", "url", redact(nc.ConnectedUrl())) }),
	)
	if err != nil {
		return fmt.Errorf("%w: ADMITTER_NATS_URL: %w", errConfig, err)
	}
	defer closeNATS(nc, log)
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}

	redisClient, err := retry(ctx, log, "connect to redis", func() (rueidis.Client, error) {
		opt, err := bucket.RedisClientOption(c.RedisURL)
		if err != nil {
			return nil, backoff.Permanent(err)
		}
		return rueidis.NewClient(opt)
	})
	if err != nil {
		return err
	}
	defer redisClient.Close()
	limiter := bucket.NewRedis(redisClient, c.RedisPrefix, bucket.Options{
		Horizon: c.Horizon,
		// remember admitted jobs past a redelivery after a lost ack
		MarkerTTL: max(2*c.AckWait, time.Minute),
	})

	svc, err := admission.New(admission.Config{
		JetStream: js, Limiter: limiter, Plans: c.plans,
		In: c.in, Out: c.out, Dead: c.dead,
		StreamIn: c.StreamIn, StreamOut: c.StreamOut, StreamDead: c.StreamDead, Consumer: c.Consumer,
		FailMode: admission.FailMode(c.FailMode), DecisionTimeout: c.RedisTimeout,
		AckWait: c.AckWait, MaxAckPending: c.MaxAckPending, Workers: c.Workers,
		ShutdownTimeout: c.ShutdownTimeout, Logger: log,
	})
	if err != nil {
		return fmt.Errorf("%w: %w", errConfig, err)
	}
	if _, err := retry(ctx, log, "set up streams and consumer", func() (struct{}, error) {
		err := svc.Setup(ctx)
		var api *jetstream.APIError
		if errors.As(err, &api) || (err != nil && !isTransient(err)) {
			return struct{}{}, backoff.Permanent(err)
		}
		return struct{}{}, err
	}); err != nil {
		return err
	}
	return svc.Run(ctx)
}

// isTransient reports whether a set-up error may go away by itself (NATS not reachable yet).
func isTransient(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrDisconnected) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) || errors.Is(err, nats.ErrNoServers)
}

// retry calls f with an exponential backoff until it succeeds, fails permanently, or ctx ends,
// logging each failure.
func retry[T any](ctx context.Context, log *slog.Logger, what string, f func() (T, error)) (T, error) {
	b := backoff.NewExponentialBackOff(backoff.WithInitialInterval(200*time.Millisecond),
		backoff.WithMaxInterval(5*time.Second), backoff.WithMaxElapsedTime(0))
	return backoff.RetryNotifyWithData(f, backoff.WithContext(b, ctx), func(err error, next time.Duration) {
		log.Warn("retrying: "+what, "err", err, "next_in", next.String())
	})
}

// closeNATS flushes acks and publishes, bounded, then closes the connection.
func closeNATS(nc *nats.Conn, log *slog.Logger) {
	if err := nc.FlushTimeout(2 * time.Second); err != nil && nc.IsConnected() {
		log.Warn("nats flush at exit", "err", err)
	}
	nc.Close()
}
