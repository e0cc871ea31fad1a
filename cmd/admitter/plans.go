package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/admitter/admitter/plans"
	"github.com/admitter/admitter/plansource"
	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// livePlans keeps the running service's plans current: the plans file, watched and re-read on
// SIGHUP, or the plans bucket (ADMITTER_PLANS_KV), followed. A new version is applied whole
// (plans, overrides, pauses) and the tenants' queues ask again at once; one that does not validate is
// refused, said in the log and counted, and the plans in force stay.
type livePlans struct {
	st      *stack
	log     *slog.Logger
	reloads metric.Int64Counter
	ok, bad metric.MeasurementOption
	mu      sync.Mutex
	cur     *plansource.Snapshot
}

// startLivePlans applies the plans source's current version and follows it until the returned
// stop is called.
func startLivePlans(ctx context.Context, st *stack, c *config, log *slog.Logger) (stop func(), err error) {
	counter, err := st.tel.meter.Meter("github.com/admitter/admitter/cmd/admitter").Int64Counter(wire.MetricPlansReloads.Name,
		metric.WithDescription("Plans versions read after start: applied (ok) or refused (error)."))
	if err != nil {
		return nil, err
	}
	lp := &livePlans{st: st, log: log, reloads: counter,
		ok: metric.WithAttributes(attribute.String("result", "ok")), bad: metric.WithAttributes(attribute.String("result", "error"))}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	stop = func() { cancel(); wg.Wait() }
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	wg.Go(func() {
		<-ctx.Done()
		signal.Stop(hup)
	})

	if c.PlansKV != "" {
		name, seed := plansSeed(c)
		kv, err := plansource.OpenKV(ctx, st.js, c.PlansKV, c.StreamReplicas, plans.Parse, name, seed)
		if err != nil {
			stop()
			return nil, fmt.Errorf("ADMITTER_PLANS_KV: %w", err)
		}
		s, err := kv.Load(ctx)
		if err != nil {
			stop()
			return nil, fmt.Errorf("ADMITTER_PLANS_KV: %w", err)
		}
		lp.apply(s)
		wg.Go(func() { kv.Watch(ctx, lp.apply, lp.refuse) })
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-hup:
					if s, err := kv.Load(ctx); err != nil {
						lp.refuse(err)
					} else {
						lp.apply(s)
					}
				}
			}
		})
		return stop, nil
	}
	if c.PlansFile == "" {
		lp.cur = &plansource.Snapshot{Plans: c.plans, Document: c.plans, Source: "built-in example plans"}
		return stop, nil // nothing to follow
	}
	f := &plansource.File{Path: c.PlansFile}
	s, err := f.Load()
	if err != nil {
		stop()
		return nil, fmt.Errorf("%w: ADMITTER_PLANS_FILE: %w", errConfig, err)
	}
	lp.apply(s)
	wg.Go(func() { f.Watch(ctx, lp.apply, lp.refuse) })
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				log.Info("SIGHUP: reading the plans file again", "file", c.PlansFile)
				f.Reload()
			}
		}
	})
	return stop, nil
}

// plansSeed is what a new plans bucket starts with: the plans file, else the built-in example.
func plansSeed(c *config) (string, []byte) {
	if c.PlansFile != "" {
		if data, err := os.ReadFile(c.PlansFile); err == nil {
			return c.PlansFile, data
		}
	}
	return "built-in example plans", examplePlans
}

// apply makes s the plans in force.
func (lp *livePlans) apply(s *plansource.Snapshot) {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	lp.st.policy.SetPlans(s.Plans)
	lp.st.policy.SetPauses(s.Pauses)
	if lp.st.svc != nil {
		lp.st.svc.PlansChanged()
	}
	first := lp.cur == nil
	changes := s.Changes(lp.cur)
	same := !first && len(changes) == 0 && s.Revision == lp.cur.Revision && s.Revision != 0
	lp.cur = s
	if same { // the watch's first view of what Load read at start
		return
	}
	if first {
		lp.log.Info("plans in force", "source", s.Source, "revision", s.Revision, "plans", s.Plans.Names(),
			"overrides", len(s.Overrides), "paused", len(s.Pauses))
		return
	}
	lp.reloads.Add(context.Background(), 1, lp.ok)
	if len(changes) == 0 {
		lp.log.Info("plans reloaded: nothing changed", "source", s.Source, "revision", s.Revision)
		return
	}
	lp.log.Info("plans reloaded", "source", s.Source, "revision", s.Revision, "changes", strings.Join(changes, "; "))
}

// refuse says why a new version of the plans is not applied.
func (lp *livePlans) refuse(err error) {
	lp.reloads.Add(context.Background(), 1, lp.bad)
	lp.log.Error("plans reload refused: the plans in force stay", "err", err)
}

const plansUsage = `usage: admitter plans COMMAND

  push FILE                             validate FILE, then make it the plans document
  show                                  the plans in force: document, overrides, pauses, revision
  set TENANT PLAN                       move TENANT to PLAN
  unset TENANT                          move TENANT back to the document's plan for it
  pause TENANT (--for D | --until T)    hold TENANT's jobs for a duration or until an RFC 3339 time
  resume TENANT                         end TENANT's pause now

The plans live in the NATS key-value bucket ADMITTER_PLANS_KV, on the server of ADMITTER_NATS_URL
(unset: the embedded server on 127.0.0.1:ADMITTER_EMBEDDED_NATS_PORT). Every replica applies a
change within a second. Nothing is written when the input is not valid.
`

// runPlans is `admitter plans ...`; it returns the exit status.
func runPlans(ctx context.Context, args []string, env map[string]string, stdout, stderr io.Writer) int {
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "admitter plans: "+format+"\n%s", append(a, plansUsage)...)
		return 2
	}
	if len(args) == 0 {
		return usageErr("want a command")
	}
	cmd, rest := args[0], args[1:]
	want := map[string]int{"push": 1, "show": 0, "set": 2, "unset": 1, "pause": -1, "resume": 1}
	n, known := want[cmd]
	switch {
	case cmd == "help" || cmd == "-h" || cmd == "--help":
		fmt.Fprint(stdout, plansUsage)
		return 0
	case !known:
		return usageErr("unknown command %q", cmd)
	case n >= 0 && len(rest) != n:
		return usageErr("%s takes %d argument(s), got %d (%q)", cmd, n, len(rest), rest)
	}
	var until time.Time
	if cmd == "pause" {
		var err error
		if until, rest, err = pauseArgs(rest, time.Now()); err != nil {
			return usageErr("pause: %v", err)
		}
	}
	var data []byte
	if cmd == "push" {
		var err error
		if data, err = os.ReadFile(rest[0]); err != nil {
			fmt.Fprintf(stderr, "admitter plans push: %v\n", err)
			return 2
		}
	}
	c, err := loadConfig(env)
	if err != nil {
		fmt.Fprintf(stderr, "admitter: %v\n", err)
		return 2
	}
	if c.PlansKV == "" {
		fmt.Fprintf(stderr, "admitter plans: ADMITTER_PLANS_KV is unset: the plans live in the plans file (%s); set it to the bucket the replicas follow\n", orDefault(c.PlansFile, "built-in example"))
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	url := c.NATSURL
	if url == "" {
		url = fmt.Sprintf("nats://127.0.0.1:%d", c.EmbeddedNATSPort)
	}
	auth, err := c.natsOptions()
	if err != nil {
		fmt.Fprintf(stderr, "admitter: %v\n", err)
		return 2
	}
	nc, err := nats.Connect(url, append(auth, nats.Name("admitter-plans"), nats.Timeout(5*time.Second))...)
	if err != nil {
		fmt.Fprintf(stderr, "admitter plans: connect to NATS at %s: %v\n", redact(url), err)
		return 1
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		fmt.Fprintf(stderr, "admitter plans: %v\n", err)
		return 1
	}
	kv, err := plansource.OpenKV(ctx, js, c.PlansKV, c.StreamReplicas, plans.Parse, "", nil)
	if err != nil {
		fmt.Fprintf(stderr, "admitter plans: %v\n", err)
		return 1
	}
	var opErr error
	switch cmd {
	case "push":
		var rev uint64
		if rev, opErr = kv.Push(ctx, rest[0], data); opErr == nil {
			fmt.Fprintf(stdout, "pushed %s to bucket %s (revision %d)\n", rest[0], kv.Name(), rev)
		}
	case "show":
		var s *plansource.Snapshot
		if s, opErr = kv.Load(ctx); opErr == nil {
			printSnapshot(stdout, s, time.Now())
			return 0
		}
		fmt.Fprintf(stderr, "admitter plans show: %v\n", opErr)
		return 1
	case "set":
		if opErr = kv.Set(ctx, rest[0], rest[1]); opErr == nil {
			fmt.Fprintf(stdout, "tenant %s: plan %s\n", rest[0], rest[1])
		}
	case "unset":
		if opErr = kv.Unset(ctx, rest[0]); opErr == nil {
			fmt.Fprintf(stdout, "tenant %s: back on the document's plan\n", rest[0])
		}
	case "pause":
		if opErr = kv.Pause(ctx, rest[0], until); opErr == nil {
			fmt.Fprintf(stdout, "tenant %s: paused until %s\n", rest[0], until.UTC().Format(time.RFC3339))
		}
	case "resume":
		if opErr = kv.Resume(ctx, rest[0]); opErr == nil {
			fmt.Fprintf(stdout, "tenant %s: resumed\n", rest[0])
		}
	}
	if opErr != nil {
		fmt.Fprintf(stderr, "admitter plans %s: %v\n", cmd, opErr)
		if errors.Is(opErr, context.DeadlineExceeded) || errors.Is(opErr, nats.ErrTimeout) || errors.Is(opErr, nats.ErrNoResponders) {
			return 1
		}
		return 2
	}
	return 0
}

// pauseArgs reads "TENANT --for D" or "TENANT --until T" (flags before or after the tenant).
func pauseArgs(args []string, now time.Time) (time.Time, []string, error) {
	fs := flag.NewFlagSet("pause", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	d := fs.Duration("for", 0, "")
	u := fs.String("until", "", "")
	var tenants []string
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			return time.Time{}, nil, err
		}
		if fs.NArg() == 0 {
			break
		}
		tenants = append(tenants, fs.Arg(0))
		args = fs.Args()[1:]
	}
	switch {
	case len(tenants) != 1:
		return time.Time{}, nil, fmt.Errorf("want one tenant, got %q", tenants)
	case (*d != 0) == (*u != ""):
		return time.Time{}, nil, errors.New("want exactly one of --for DURATION and --until RFC3339")
	case *u != "":
		t, err := time.Parse(time.RFC3339Nano, *u)
		if err != nil {
			return time.Time{}, nil, fmt.Errorf("--until %q is not an RFC 3339 time (2026-11-23T15:04:05Z)", *u)
		}
		if !t.After(now) {
			return time.Time{}, nil, fmt.Errorf("--until %s is not in the future", *u)
		}
		return t, tenants, nil
	case *d <= 0:
		return time.Time{}, nil, fmt.Errorf("--for %v must be positive", *d)
	}
	return now.Add(*d), tenants, nil
}

func printSnapshot(w io.Writer, s *plansource.Snapshot, now time.Time) {
	fmt.Fprintf(w, "%s, revision %d\n\n%s", s.Source, s.Revision, s.Plans.Describe())
	fmt.Fprintf(w, "overrides (%d):\n", len(s.Overrides))
	for _, t := range slices.Sorted(maps.Keys(s.Overrides)) {
		fmt.Fprintf(w, "  %s: %s\n", t, s.Overrides[t])
	}
	fmt.Fprintf(w, "pauses (%d):\n", len(s.Pauses))
	for _, t := range slices.Sorted(maps.Keys(s.Pauses)) {
		state := "paused until"
		if !s.Pauses[t].After(now) {
			state = "ended at"
		}
		fmt.Fprintf(w, "  %s: %s %s\n", t, state, s.Pauses[t].UTC().Format(time.RFC3339))
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
