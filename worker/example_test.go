package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/admitter/admitter/wire"
	"github.com/admitter/admitter/worker"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A worker exports tenants' data under a plan with a concurrency limit and reports what each
// export really cost. Here a JetStream server runs in process and a stand-in plays admitter:
// it forwards one job, as admitter does, and prints the done message the worker sends.
func Example() {
	nc, js, dones, stop := standIn()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Your consumer of admitter's output stream: the library creates none.
	cons, err := js.CreateOrUpdateConsumer(ctx, "ADMITTED", jetstream.ConsumerConfig{
		Durable: "exports", FilterSubject: "jobs.admitted.*.export.>", AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		panic(err)
	}
	w, err := worker.New(worker.Config{Consumer: cons, Conn: nc, Concurrency: 4,
		Handler: func(ctx context.Context, j *worker.Job) error {
			fmt.Printf("%s: %s of weight %d, lease %d of %v\n", j.Tenant, j.Data, j.Weight, j.Lease, j.LeaseLength)
			rows := 300_000 // the export's work: 3 units of 100,000 rows, the unit its weight counts
			j.SetCost(int64(rows / 100_000))
			return nil // done: the lease is released, then the job acked
		}})
	if err != nil {
		panic(err)
	}
	if err := w.Start(context.Background()); err != nil {
		panic(err)
	}
	forward(js, "jobs.admitted.acme.export.csv", "an export", 17, time.Minute)
	<-dones
	if err := w.Stop(ctx); err != nil { // waits for the handlers running, until ctx is done
		panic(err)
	}
	// Output:
	// acme: an export of weight 1, lease 17 of 1m0s
	// done jobs.done.acme.export.csv: Admit-Lease 17, Admit-Cost 3
}

// standIn starts a JetStream server with admitter's output stream, and answers done messages
// as admitter does, telling dones of each; stop ends both.
func standIn() (nc *nats.Conn, js jetstream.JetStream, dones chan struct{}, stop func()) {
	dir, err := os.MkdirTemp("", "worker-example-")
	if err != nil {
		panic(err)
	}
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		panic(err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		panic("nats-server not ready")
	}
	if nc, err = nats.Connect(srv.ClientURL()); err != nil {
		panic(err)
	}
	js, err = jetstream.New(nc)
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ADMITTED", Subjects: []string{"jobs.admitted.>"}}); err != nil {
		panic(err)
	}
	dones = make(chan struct{}, 1)
	if _, err := nc.Subscribe("jobs.done.>", func(m *nats.Msg) {
		fmt.Printf("done %s: Admit-Lease %s, Admit-Cost %s\n", m.Subject, m.Header.Get(wire.HeaderLease), m.Header.Get(wire.HeaderCost))
		reply, _ := json.Marshal(wire.LeaseReply{Tenant: "acme", Held: true, Weight: 1})
		_ = m.Respond(reply)
		dones <- struct{}{}
	}); err != nil {
		panic(err)
	}
	return nc, js, dones, func() {
		nc.Close()
		srv.Shutdown()
		srv.WaitForShutdown()
		_ = os.RemoveAll(dir)
	}
}

// forward publishes a job as admitter forwards it under a plan with a concurrency limit.
func forward(js jetstream.JetStream, subject, payload string, lease int64, length time.Duration) {
	m := nats.NewMsg(subject)
	m.Data = []byte(payload)
	m.Header.Set(wire.HeaderTenant, "acme")
	m.Header.Set(wire.HeaderPlan, "exports")
	m.Header.Set(wire.HeaderLease, fmt.Sprint(lease))
	m.Header.Set(wire.HeaderLeaseLength, wire.LeaseLengthValue(length))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.PublishMsg(ctx, m); err != nil {
		panic(err)
	}
}

// A handler that calls an HTTP service passes the service's pushback on to admitter:
// ResponseError turns a 429 or 503 with Retry-After into RetryAfter (admitter holds the tenant's
// next jobs, the worker puts this one back for as long), a timeout into Overloaded, another
// failure into an error.
func ExampleResponseError() {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer api.Close()
	handler := func(ctx context.Context, j *worker.Job) error {
		req, err := http.NewRequestWithContext(ctx, "POST", api.URL+"/v1/render", bytes.NewReader(j.Data))
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if resp != nil {
			defer resp.Body.Close()
		}
		return worker.ResponseError(resp, err)
	}
	err := handler(context.Background(), &worker.Job{Data: []byte("a page")})
	var o *worker.OverloadedError
	if errors.As(err, &o) {
		fmt.Printf("overloaded; retry after %v\n", o.RetryAfter)
	}
	// Output:
	// overloaded; retry after 30s
}
