// Command worker is an example downstream worker for admitter, built on package worker: it
// exports tenants' data from the jobs admitter forwards to jobs.admitted.<tenant>.export.<...>,
// at most -concurrency at once, and reports each export's real cost so that admitter reconciles
// it with the job's weight. Under a plan with a concurrency limit the library renews each job's
// lease while it runs and releases it when the job is done.
//
// A cost is counted in the unit of the job's weight, which its producer chose: here a unit per
// 100,000 rows started, so that an export of 250,000 rows is published with Admit-Weight: 3, and
// one that exported 400,000 reports a cost of 4 (admitter charges the plan 1 more). A cost in
// another unit would charge the tenant's plan for work it never did: a unit per 1,000 rows
// charged 250 for a job weighed 1.
//
//	go run ./examples/worker -nats nats://127.0.0.1:4222
//	nats pub jobs.submit.acme.export.csv 'rows=250000' -H Admit-Weight:3 --count 10
//
// It creates (or updates) its own durable consumer on admitter's output stream: that is the
// worker's choice, not the library's. SIGINT or SIGTERM stops taking jobs and waits up to
// -stop-timeout for the running ones.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/admitter/admitter/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func main() {
	url := flag.String("nats", envOr("ADMITTER_NATS_URL", nats.DefaultURL), "the NATS admitter forwards to")
	stream := flag.String("stream", "ADMITTED", "admitter's output stream (ADMITTER_STREAM_OUT)")
	durable := flag.String("consumer", "exports", "the durable consumer this worker pulls from")
	filter := flag.String("filter", "jobs.admitted.*.export.>", "the forwards this worker handles")
	concurrency := flag.Int("concurrency", 4, "exports at once, at most")
	stopTimeout := flag.Duration("stop-timeout", 30*time.Second, "how long a stop waits for running exports")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *url, *stream, *durable, *filter, *concurrency, *stopTimeout); err != nil {
		slog.Error("worker", "err", err)
		os.Exit(1)
	}
}

// run works until ctx is done, then stops within stopTimeout.
func run(ctx context.Context, url, stream, durable, filter string, concurrency int, stopTimeout time.Duration) error {
	nc, err := nats.Connect(url, nats.MaxReconnects(-1))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable: durable, FilterSubject: filter, AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: 30 * time.Second, MaxDeliver: 5, // deliveries after Retry or a crash, at most
	})
	if err != nil {
		return fmt.Errorf("consumer %s on %s: %w", durable, stream, err)
	}
	w, err := worker.New(worker.Config{Consumer: cons, Conn: nc, Concurrency: concurrency, Handler: export})
	if err != nil {
		return err
	}
	// Not ctx: a signal should let the running exports finish, which Stop does.
	if err := w.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	slog.Info("worker: exporting", "stream", stream, "consumer", durable, "filter", filter, "concurrency", concurrency)
	select {
	case <-ctx.Done():
	case <-w.Stopped(): // the consumer was deleted, or the connection closed
		return errors.New("the consumer ended")
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	return w.Stop(stopCtx)
}

// rowsPerUnit is the rows an export's weight and cost count as one unit.
const rowsPerUnit = 100_000

// export exports the rows a job names ("rows=250000"): 1 ms per 1,000 rows here, and reports a
// unit of cost per rowsPerUnit rows started (see the package comment).
func export(ctx context.Context, j *worker.Job) error {
	rows, err := strconv.Atoi(strings.TrimPrefix(string(j.Data), "rows="))
	if err != nil || rows < 0 {
		return fmt.Errorf("payload %q: want rows=<n>", j.Data) // terminated: it will never parse
	}
	select {
	case <-ctx.Done(): // a hard stop: delivered again, holding its lease
		return ctx.Err()
	case <-time.After(time.Duration(rows/1000) * time.Millisecond):
	}
	// A downstream that asks to be called later: return worker.Retry(err, 5*time.Second), to
	// be delivered again holding the job's slot; one that is overloaded: worker.Overloaded(err),
	// or worker.RetryAfter(30*time.Second, err) when it says how long (an HTTP call's response:
	// worker.ResponseError(resp, err)), so that admitter forwards less, or none for a while.
	j.SetCost(int64((rows + rowsPerUnit - 1) / rowsPerUnit))
	slog.Info("exported", "tenant", j.Tenant, "plan", j.Plan, "rows", rows, "weight", j.Weight,
		"lease", j.Lease, "lease_deadline", j.LeaseDeadline(), "attempt", j.Attempt)
	return nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
