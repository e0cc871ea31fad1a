package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/admitter/admitter/api"
	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/internal/testenv"
	"github.com/admitter/admitter/policy"
	"github.com/admitter/admitter/wire"
	"github.com/go-redis/redis_rate/v10"
	"github.com/nats-io/nats.go"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// The synchronous scenario: decisions per second and latency of admitter's HTTP decision API
// (POST /v1/decide) and NATS service (admitter.decide), against the peer a platform team would
// write instead: go-redis/redis_rate behind a minimal net/http handler that reads the same JSON.
// Every contender runs in this process on loopback, over the same redis-server, at the same
// concurrency, with one tenant per call among Tenants; the plans admit everything, so what is
// measured is the cost of a decision, not of a denial.

// syncPolicy is the policy the admitter faces use: the Redis backend with admitter's client
// options, the bench plans, and metrics recorded as the service records them.
func syncPolicy(redisURL string, plans *bucket.Plans) (*policy.Policy, func(), error) {
	r, err := bucket.DialRedis(redisURL, "", bucket.Options{})
	if err != nil {
		return nil, nil, err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	pol, err := policy.New(policy.Config{Limiter: r, Plans: plans, Logger: slog.New(slog.DiscardHandler), MeterProvider: mp})
	if err != nil {
		r.Close()
		return nil, nil, err
	}
	return pol, func() { _ = mp.Shutdown(context.Background()); r.Close() }, nil
}

// serveLoopback serves h on a free loopback port until the returned stop is called.
func serveLoopback(h http.Handler) (url string, stop func(), err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(l) }()
	return "http://" + l.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}

// bodies are the request bodies, one per tenant, built before the measurement.
func decideBodies(tenants []string) [][]byte {
	out := make([][]byte, len(tenants))
	for i, t := range tenants {
		out[i] = []byte(`{"tenant":"` + t + `"}`)
	}
	return out
}

// httpContender POSTs decision requests to url from a client keeping a connection per
// goroutine; a call is allowed when the answer is 200.
func httpContender(name, url string, concurrency int, bodies [][]byte, stop func()) contender {
	tr := &http.Transport{MaxIdleConns: concurrency, MaxIdleConnsPerHost: concurrency, IdleConnTimeout: time.Minute}
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	return contender{
		name: name,
		decide: func(ctx context.Context, seq int64) (bool, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(bodies[seq%int64(len(bodies))]))
			if err != nil {
				return false, err
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				return false, err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusOK:
				return true, nil
			case http.StatusTooManyRequests:
				return false, nil
			}
			return false, fmt.Errorf("%s: status %d", name, resp.StatusCode)
		},
		close: func() { tr.CloseIdleConnections(); stop() },
	}
}

// ourHTTPContender is admitter's decision API (api.NewHandler) on a loopback server.
func ourHTTPContender(redisURL string, plans *bucket.Plans, concurrency int, tenants []string) (contender, error) {
	pol, closePol, err := syncPolicy(redisURL, plans)
	if err != nil {
		return contender{}, err
	}
	url, stop, err := serveLoopback(api.NewHandler(pol))
	if err != nil {
		closePol()
		return contender{}, err
	}
	return httpContender("admitter http", url+"/v1/decide", concurrency, decideBodies(tenants), func() { stop(); closePol() }), nil
}

// peerHTTPContender is redis_rate (one limit, GCRA) behind a minimal net/http handler that
// decodes the same JSON and answers 200 or 429 with a small JSON body: what a team would write
// without admitter.
func peerHTTPContender(redisURL string, concurrency int, tenants []string) (contender, error) {
	client, lim, err := newRedisRate(redisURL, concurrency)
	if err != nil {
		return contender{}, err
	}
	limit := redis_rate.PerSecond(1_000_000)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Tenant string `json:"tenant"`
		}
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, wire.MaxRequestBytes)).Decode(&req); err != nil || req.Tenant == "" {
			http.Error(w, `{"error":"invalid-request"}`, http.StatusBadRequest)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), policy.DefaultTimeout)
		res, err := lim.Allow(ctx, req.Tenant, limit)
		cancel()
		if err != nil {
			http.Error(w, `{"error":"limiter-unavailable"}`, http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", strconv.FormatInt(wire.Seconds(res.RetryAfter), 10))
		status := http.StatusOK
		if res.Allowed == 0 {
			status = http.StatusTooManyRequests
		}
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"allowed":%t,"remaining":%d,"wait_ms":%d}`+"\n", res.Allowed > 0, res.Remaining, wire.Millis(res.RetryAfter))
	})
	url, stop, err := serveLoopback(h)
	if err != nil {
		_ = client.Close()
		return contender{}, err
	}
	return httpContender("redis_rate net/http", url, concurrency, decideBodies(tenants), func() { stop(); _ = client.Close() }), nil
}

// ourNATSContender is admitter's NATS service (api.StartService) on an in-process nats-server,
// asked by request/reply over a client connection of its own, once its endpoint answers: the
// service subscribes on its own connection, and a request that reaches the server before the
// subscription does finds no responder.
func ourNATSContender(ctx context.Context, tb testenv.TB, redisURL string, plans *bucket.Plans, tenants []string) (_ contender, err error) {
	var closers []func() // newest last
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	defer func() {
		if err != nil {
			closeAll()
		}
	}()
	srv := testenv.StartNATS(tb)
	closers = append(closers, srv.Stop)
	pol, closePol, err := syncPolicy(redisURL, plans)
	if err != nil {
		return contender{}, err
	}
	closers = append(closers, closePol)
	svcConn, err := nats.Connect(srv.URL(), nats.Name("bench-service"))
	if err != nil {
		return contender{}, err
	}
	closers = append(closers, svcConn.Close)
	svc, err := api.StartService(svcConn, pol, api.ServiceConfig{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return contender{}, err
	}
	closers = append(closers, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = svc.Stop(ctx)
	})
	nc, err := nats.Connect(srv.URL(), nats.Name("bench-client"))
	if err != nil {
		return contender{}, err
	}
	closers = append(closers, nc.Close)
	bodies := decideBodies(tenants)
	decide := func(ctx context.Context, seq int64) (bool, error) {
		m, err := nc.RequestWithContext(ctx, wire.DefaultDecideSubject, bodies[seq%int64(len(bodies))])
		if err != nil {
			return false, err
		}
		if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
			return false, fmt.Errorf("admitter nats: error %s: %s", code, m.Header.Get("Nats-Service-Error"))
		}
		var d wire.Decision
		if err := json.Unmarshal(m.Data, &d); err != nil {
			return false, fmt.Errorf("admitter nats: %w", err)
		}
		return d.Allowed, nil
	}
	if err := retry(ctx, "the NATS decision endpoint "+wire.DefaultDecideSubject+" answers", readyWithin, func(ctx context.Context) error {
		_, err := decide(ctx, 0)
		return err
	}); err != nil {
		return contender{}, err
	}
	return contender{name: "admitter nats", decide: decide, close: closeAll}, nil
}

// synchronous is the sync scenario.
func (e *env) synchronous(ctx context.Context, p *progress) (*Sync, error) {
	tenants := tenantNames(e.o.Tenants)
	s := &Sync{Concurrency: e.o.Concurrency, Tenants: e.o.Tenants}
	for _, mk := range []struct {
		into *DecisionRun
		new  func() (contender, error)
	}{
		{&s.HTTP, func() (contender, error) { return ourHTTPContender(e.redisURL, e.plans, e.o.Concurrency, tenants) }},
		{&s.NATS, func() (contender, error) { return ourNATSContender(ctx, e.tb, e.redisURL, e.plans, tenants) }},
		{&s.Peer, func() (contender, error) { return peerHTTPContender(e.redisURL, e.o.Concurrency, tenants) }},
	} {
		if err := e.admin.flush(ctx); err != nil {
			return nil, err
		}
		c, err := mk.new()
		if err != nil {
			return nil, err
		}
		err = p.phase(fmt.Sprintf("sync: %s, %d goroutines, %v warm-up + %v", c.name, e.o.Concurrency, e.o.Warmup, e.o.Duration), func() (string, error) {
			r, err := measureDecisions(ctx, c, e.o.Concurrency, e.o.Warmup, e.o.Duration, "")
			*mk.into = r
			return fmt.Sprintf("%s/s, p50 %.2fms p99 %.2fms", count(r.PerSecond), r.Latency.P50Ms, r.Latency.P99Ms), err
		})
		c.close()
		if err != nil {
			return nil, err
		}
	}
	s.HTTPVsPeer = round(Ratio(s.HTTP.PerSecond, s.Peer.PerSecond), 4)
	s.NATSVsPeer = round(Ratio(s.NATS.PerSecond, s.Peer.PerSecond), 4)
	return s, e.admin.flush(ctx)
}
