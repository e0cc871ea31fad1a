package main

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"github.com/admitter/admitter/console"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// telemetry is the process's tracer and meter providers and the Prometheus registry they feed.
type telemetry struct {
	tracer   trace.TracerProvider
	meter    metric.MeterProvider
	registry *prometheus.Registry
	shutdown func(context.Context) error
}

// tracingConfigured reports whether the standard OTEL_* variables ask for traces to be exported.
// Nothing is exported when none of them is set (autoexport alone would default to OTLP on
// localhost).
func tracingConfigured(env map[string]string) bool {
	if v := env["OTEL_TRACES_EXPORTER"]; v != "" {
		return v != "none"
	}
	return env["OTEL_EXPORTER_OTLP_ENDPOINT"] != "" || env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] != ""
}

// newTelemetry builds the providers: traces exported as the OTEL_* variables say (none when
// unset), metrics exposed for Prometheus.
func newTelemetry(ctx context.Context, env map[string]string) (*telemetry, error) {
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName("admitter")),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil {
		return nil, fmt.Errorf("telemetry resource: %w", err)
	}
	t := &telemetry{registry: prometheus.NewRegistry(), tracer: tracenoop.NewTracerProvider()}
	exporter, err := otelprom.New(otelprom.WithRegisterer(t.registry))
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter), sdkmetric.WithResource(res))
	t.meter = mp
	shutdowns := []func(context.Context) error{mp.Shutdown}
	if tracingConfigured(env) {
		exp, err := autoexport.NewSpanExporter(ctx)
		if err != nil {
			return nil, fmt.Errorf("%w: OTEL_* trace exporter settings: %w", errConfig, err)
		}
		// The sampler follows OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG.
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
		t.tracer = tp
		shutdowns = append(shutdowns, tp.Shutdown)
	}
	t.shutdown = func(ctx context.Context) error {
		var errs []error
		for _, f := range shutdowns {
			errs = append(errs, f(ctx))
		}
		return errors.Join(errs...)
	}
	return t, nil
}

// startHTTP serves /metrics, /healthz and /readyz on addr until ctx ends. It returns once the
// listener is bound, and a function that stops the server (bounded) and waits for it.
//
// The console, when not nil, is served under /console/ (and / leads there): it checks its own
// tokens (ADMITTER_HTTP_TOKEN to read, through a sign-in form a browser can use), so the bearer
// guard of the other endpoints does not apply to it.
//
// /readyz answers 503 with what ready says is missing, else 200 "ready", followed by what
// degraded says (empty: nothing), e.g. that decisions are made on the replica's copy of the
// tenants' state while Redis is away.
func startHTTP(addr string, reg *prometheus.Registry, ready func(context.Context) error, degraded func() string, extra map[string]http.Handler, con *console.Console, token string, log *slog.Logger) (stop func(), err error) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := ready(r.Context()); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		if d := degraded(); d != "" {
			fmt.Fprintln(w, "ready, "+d)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	// Everything but metrics and health is for operators: behind ADMITTER_HTTP_TOKEN when set,
	// and bounded in time (the profiler excepted: it runs for as long as asked).
	guard := func(h http.Handler, bound time.Duration) http.Handler {
		if bound > 0 {
			h = http.TimeoutHandler(h, bound, "timed out\n")
		}
		if token == "" {
			return h
		}
		want := []byte("Bearer " + token)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="admitter"`)
				http.Error(w, "unauthorized: this endpoint needs Authorization: Bearer <ADMITTER_HTTP_TOKEN>", http.StatusUnauthorized)
				return
			}
			h.ServeHTTP(w, r)
		})
	}
	for pattern, h := range extra {
		mux.Handle(pattern, guard(h, 5*time.Second))
	}
	if con != nil {
		mux.Handle(console.Prefix, http.TimeoutHandler(con, 10*time.Second, "timed out\n"))
		mux.Handle("GET /{$}", http.RedirectHandler(console.Prefix, http.StatusFound))
	}
	// Go's profiler, for "where does the time go" on a live replica (loopback by default).
	mux.Handle("GET /debug/pprof/", guard(http.HandlerFunc(pprof.Index), 0))
	mux.Handle("GET /debug/pprof/profile", guard(http.HandlerFunc(pprof.Profile), 0))
	mux.Handle("GET /debug/pprof/trace", guard(http.HandlerFunc(pprof.Trace), 0))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, IdleTimeout: time.Minute}
	stop, bound, err := serveOn("ADMITTER_HTTP_ADDR", addr, srv, log)
	if err != nil {
		return nil, err
	}
	log.Info("serving /metrics, /healthz, /readyz, /inspect and /console/", "addr", bound, "console", con != nil)
	return stop, nil
}

// serveOn binds addr (the value of variable, which errors name) and serves srv on it until the
// returned stop is called; stop shuts the server down (bounded by 2s) and waits for it. It
// returns once the listener is bound, with the address bound.
func serveOn(variable, addr string, srv *http.Server, log *slog.Logger) (stop func(), bound string, err error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %s: %w", errConfig, variable, err)
	}
	srv.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server", "variable", variable, "err", err)
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = srv.Shutdown(ctx)
			<-done
		})
	}, l.Addr().String(), nil
}
