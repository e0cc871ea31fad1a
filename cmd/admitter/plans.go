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

	"github.com/admitter/admitter/console"
	"github.com/admitter/admitter/plans"
	"github.com/admitter/admitter/plansource"
	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// livePlans keeps the running service's plans current: the plans file, watched and re-read on
// SIGHUP, or the plans bucket (ADMITTER_PLANS_KV), followed; and beside either the deployment's
// state bucket (<ADMITTER_CONSUMER>_state: pauses and overrides), followed. A new version of
// either is applied whole (plans, overrides, pauses) and the tenants' queues ask again at once;
// a plans version that does not validate is refused, said in the log and counted, and the plans
// in force stay.
type livePlans struct {
	st        *stack
	log       *slog.Logger
	reloads   metric.Int64Counter
	ok, bad   metric.MeasurementOption
	mu        sync.Mutex
	doc       *plansource.Snapshot // the source's latest valid version, without the state
	state     plansource.Tenants   // the state bucket's latest version
	cur       *plansource.Snapshot // in force: doc.With(state)
	ignored   string               // what cur leaves out of the state, as last logged
	stateName string               // the state bucket's name
	report    console.PlansReport  // its Applied, Changes, Refused and Why
}

// startLivePlans applies the plans source's current version with the state bucket's, and
// follows both until the returned stop is called.
func startLivePlans(ctx context.Context, st *stack, c *config, log *slog.Logger) (lp *livePlans, stop func(), err error) {
	counter, err := st.tel.meter.Meter("github.com/admitter/admitter/cmd/admitter").Int64Counter(wire.MetricPlansReloads.Name,
		metric.WithDescription("Plans versions read after start: applied (ok) or refused (error)."))
	if err != nil {
		return nil, nil, err
	}
	lp = &livePlans{st: st, log: log, reloads: counter,
		ok: metric.WithAttributes(attribute.String("result", "ok")), bad: metric.WithAttributes(attribute.String("result", "error"))}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	stop = func() { cancel(); wg.Wait() }
	fail := func(err error) (*livePlans, func(), error) { stop(); return nil, nil, err }
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	wg.Go(func() {
		<-ctx.Done()
		signal.Stop(hup)
	})

	state, err := plansource.OpenState(ctx, st.js, c.Consumer, c.StreamReplicas)
	if err != nil {
		return fail(fmt.Errorf("ADMITTER_CONSUMER: %w", err))
	}
	lp.stateName = state.Name()
	if lp.state, err = state.Load(ctx); err != nil {
		return fail(err)
	}
	var doc *plansource.Snapshot
	var follow func()
	switch {
	case c.PlansKV != "":
		name, seed := plansSeed(c)
		kv, err := plansource.OpenKV(ctx, st.js, c.PlansKV, c.StreamReplicas, plans.Parse, name, seed)
		if err != nil {
			return fail(fmt.Errorf("ADMITTER_PLANS_KV: %w", err))
		}
		if doc, err = kv.Load(ctx); err != nil {
			return fail(fmt.Errorf("ADMITTER_PLANS_KV: %w", err))
		}
		follow = func() {
			wg.Go(func() { kv.Watch(ctx, lp.applyDoc, lp.refuse) })
			wg.Go(func() {
				for {
					select {
					case <-ctx.Done():
						return
					case <-hup:
						if s, err := kv.Load(ctx); err != nil {
							lp.refuse(err)
						} else {
							lp.applyDoc(s)
						}
					}
				}
			})
		}
	case c.PlansFile != "":
		f := &plansource.File{Path: c.PlansFile}
		if doc, err = f.Load(); err != nil {
			return fail(fmt.Errorf("%w: ADMITTER_PLANS_FILE: %w", errConfig, err))
		}
		follow = func() {
			wg.Go(func() { f.Watch(ctx, lp.applyDoc, lp.refuse) })
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
		}
	default:
		doc, follow = plansource.DocumentSnapshot(c.plans, "built-in example plans"), func() {}
	}
	lp.applyDoc(doc)
	follow()
	wg.Go(func() { state.Watch(ctx, lp.applyState, lp.refuse) })
	return lp, stop, nil
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

// applyDoc makes s the plans document in force, with the state.
func (lp *livePlans) applyDoc(s *plansource.Snapshot) {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	lp.doc = s
	lp.applyLocked(s.Revision != 0 && lp.cur != nil && s.Revision == lp.cur.Revision)
}

// applyState makes t the per-tenant state in force, with the document.
func (lp *livePlans) applyState(t plansource.Tenants) {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	lp.state = t
	lp.applyLocked(lp.cur != nil && t.Revision == lp.cur.State)
}

// applyLocked puts the document with the state in force and logs what changed; seen says that
// the version is one already in force (a watch's first view of what was read at start): it is
// logged only if it changes something.
func (lp *livePlans) applyLocked(seen bool) {
	s := lp.doc.With(lp.state)
	lp.st.policy.SetPlans(s.Plans)
	lp.st.policy.SetPauses(s.PauseTimes())
	if lp.st.svc != nil {
		lp.st.svc.PlansChanged()
	}
	old := lp.cur
	lp.cur = s
	if ignored := strings.Join(s.Ignored, "; "); ignored != lp.ignored {
		lp.ignored = ignored
		if ignored != "" {
			lp.log.Warn("plans: per-tenant state not applied", "ignored", ignored)
		}
	}
	if old == nil {
		lp.log.Info("plans in force", "source", s.Source, "revision", s.Revision, "plans", s.Plans.Names(),
			"overrides", len(s.Overrides), "paused", len(s.Pauses))
		return
	}
	changes := s.Changes(old)
	if len(changes) == 0 && seen {
		return
	}
	lp.reloads.Add(context.Background(), 1, lp.ok)
	lp.report.Applied, lp.report.Changes = time.Now(), changes
	if len(changes) == 0 {
		lp.log.Info("plans reloaded: nothing changed", "source", s.Source, "revision", s.Revision)
		return
	}
	lp.log.Info("plans reloaded", "source", s.Source, "revision", s.Revision, "changes", strings.Join(changes, "; "))
}

// current returns the plans in force.
func (lp *livePlans) current() *plansource.Snapshot {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	return lp.cur
}

// consoleReport is where the plans in force come from and how their latest changes went.
func (lp *livePlans) consoleReport() console.PlansReport {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	r := lp.report
	r.Changes = slices.Clone(r.Changes)
	if lp.cur != nil {
		r.Source, r.Revision, r.Ignored = lp.cur.Source, lp.cur.Revision, slices.Clone(lp.cur.Ignored)
		r.State = fmt.Sprintf("bucket %s, revision %d", lp.stateName, lp.cur.State)
	}
	return r
}

// refuse says why a new version of the plans is not applied.
func (lp *livePlans) refuse(err error) {
	lp.reloads.Add(context.Background(), 1, lp.bad)
	lp.mu.Lock()
	lp.report.Refused, lp.report.Why = time.Now(), err.Error()
	lp.mu.Unlock()
	lp.log.Error("plans reload refused: the plans in force stay", "err", err)
}

const plansUsage = `usage: admitter plans COMMAND

  show                                  the plans as read here, with every override and pause
  pauses                                the pauses: tenant, until when, who set them and when
  pause TENANT (--for D | --until T) [--by WHO] [--yes]
                                        hold TENANT's jobs and deny its requests for a duration
                                        or until an RFC 3339 time; a pause longer than the
                                        plan's max_wait dead-letters the jobs it holds
                                        (expired): refused unless --yes
  resume TENANT                         end TENANT's pause now
  set TENANT PLAN [--by WHO]            move TENANT to PLAN
  unset TENANT                          move TENANT back to the document's plan for it
  push FILE                             validate FILE, then make it the plans document (with
                                        ADMITTER_PLANS_KV only: otherwise edit the plans file)

Pauses and overrides are state, not plans: they live in the NATS key-value bucket
<ADMITTER_CONSUMER>_state (admitter_state), which every replica creates and follows whatever
the plans' source, on the server of ADMITTER_NATS_URL (unset: the embedded server on
127.0.0.1:ADMITTER_EMBEDDED_NATS_PORT). Every replica applies a change within 2s. --by names
who set it (default $USER@hostname). A plan given to set is checked against the plans read
here: the plans bucket ADMITTER_PLANS_KV, else ADMITTER_PLANS_FILE, else the built-in example.
Nothing is written when the input is not valid.
`

// plansArgs is what `admitter plans` was asked.
type plansArgs struct {
	cmd   string
	args  []string  // the positional arguments after the command
	until time.Time // pause
	by    string    // pause, set
	yes   bool      // pause: even past the plan's max_wait
}

// parsePlansArgs reads the arguments of `admitter plans`: flags before or after the positional
// arguments. now is the time a pause's --for counts from; by the default of --by.
func parsePlansArgs(args []string, now time.Time, by string) (plansArgs, error) {
	if len(args) == 0 {
		return plansArgs{}, errors.New("want a command")
	}
	a := plansArgs{cmd: args[0], by: by}
	want := map[string]int{"push": 1, "show": 0, "pauses": 0, "set": 2, "unset": 1, "pause": 1, "resume": 1}
	n, known := want[a.cmd]
	if !known {
		return a, fmt.Errorf("unknown command %q", a.cmd)
	}
	fs := flag.NewFlagSet(a.cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var d time.Duration
	var u string
	if a.cmd == "pause" {
		fs.DurationVar(&d, "for", 0, "")
		fs.StringVar(&u, "until", "", "")
		fs.BoolVar(&a.yes, "yes", false, "")
	}
	if a.cmd == "pause" || a.cmd == "set" {
		fs.StringVar(&a.by, "by", by, "")
	}
	rest := args[1:]
	for len(rest) > 0 {
		if err := fs.Parse(rest); err != nil {
			return a, fmt.Errorf("%s: %v", a.cmd, err)
		}
		if fs.NArg() == 0 {
			break
		}
		a.args = append(a.args, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if len(a.args) != n {
		return a, fmt.Errorf("%s takes %d argument(s), got %d (%q)", a.cmd, n, len(a.args), a.args)
	}
	if strings.TrimSpace(a.by) == "" {
		return a, fmt.Errorf("%s: --by must name someone", a.cmd)
	}
	if a.cmd != "pause" {
		return a, nil
	}
	switch {
	case (d != 0) == (u != ""):
		return a, errors.New("pause: want exactly one of --for DURATION and --until RFC3339")
	case u != "":
		t, err := time.Parse(time.RFC3339Nano, u)
		if err != nil {
			return a, fmt.Errorf("pause: --until %q is not an RFC 3339 time (2026-11-23T15:04:05Z)", u)
		}
		if !t.After(now) {
			return a, fmt.Errorf("pause: --until %s is not in the future", u)
		}
		a.until = t
	case d <= 0:
		return a, fmt.Errorf("pause: --for %v must be positive", d)
	default:
		a.until = now.Add(d)
	}
	return a, nil
}

// operator names who runs the command: $USER@hostname.
func operator(env map[string]string) string {
	if u := env["USER"]; u != "" {
		host, _ := os.Hostname()
		return u + "@" + host
	}
	return whoami()
}

// runPlans is `admitter plans ...`; it returns the exit status.
func runPlans(ctx context.Context, args []string, env map[string]string, stdout, stderr io.Writer) int {
	if len(args) > 0 && (args[0] == "help" || args[0] == "-h" || args[0] == "--help") {
		fmt.Fprint(stdout, plansUsage)
		return 0
	}
	a, err := parsePlansArgs(args, time.Now(), operator(env))
	if err != nil {
		fmt.Fprintf(stderr, "admitter plans: %v\n%s", err, plansUsage)
		return 2
	}
	var data []byte
	if a.cmd == "push" {
		if data, err = os.ReadFile(a.args[0]); err != nil {
			fmt.Fprintf(stderr, "admitter plans push: %v\n", err)
			return 2
		}
	}
	c, err := loadConfig(env)
	if err != nil {
		fmt.Fprintf(stderr, "admitter: %v\n", err)
		return 2
	}
	if a.cmd == "push" && c.PlansKV == "" {
		fmt.Fprintf(stderr, "admitter plans push: ADMITTER_PLANS_KV is unset: the plans live in the plans file (%s): edit it (every replica reads it again within a second), or set ADMITTER_PLANS_KV to the bucket the replicas follow\n",
			orDefault(c.PlansFile, "ADMITTER_PLANS_FILE unset: the built-in example"))
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
		fmt.Fprintf(stderr, "admitter plans: connect to NATS at %s (ADMITTER_NATS_URL): %v\n", redact(url), err)
		return 1
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		fmt.Fprintf(stderr, "admitter plans: %v\n", err)
		return 1
	}
	state, err := plansource.LookupState(ctx, js, c.Consumer)
	switch {
	case errors.Is(err, plansource.ErrNoStateBucket) && (a.cmd == "push" || a.cmd == "show"):
		state = nil // no admitter has run yet: no pause, no override to keep
	case err != nil:
		fmt.Fprintf(stderr, "admitter plans %s: %v (NATS at %s)\n", a.cmd, err, redact(url))
		return 1
	}
	var kv *plansource.KV
	if c.PlansKV != "" {
		if kv, err = plansource.OpenKV(ctx, js, c.PlansKV, c.StreamReplicas, plans.Parse, "", nil); err != nil {
			fmt.Fprintf(stderr, "admitter plans: ADMITTER_PLANS_KV: %v\n", err)
			return 1
		}
		if state != nil {
			state.WithLegacy(kv)
		}
	}
	loadState := func() (plansource.Tenants, error) {
		if state == nil {
			return plansource.Tenants{}, nil
		}
		return state.Load(ctx)
	}
	stateName := func() string {
		if state == nil {
			return "(none yet: no admitter has run with ADMITTER_CONSUMER=" + c.Consumer + ")"
		}
		return state.Name()
	}
	// doc reads the plans document as this shell can: the plans bucket, the plans file, or the
	// built-in example.
	doc := func() (*plansource.Snapshot, error) {
		switch {
		case kv != nil:
			return kv.Load(ctx)
		case c.PlansFile != "":
			return (&plansource.File{Path: c.PlansFile}).Load()
		}
		return plansource.DocumentSnapshot(c.plans, "built-in example plans (ADMITTER_PLANS_FILE and ADMITTER_PLANS_KV are unset)"), nil
	}
	var opErr error
	switch a.cmd {
	case "push":
		var ts plansource.Tenants
		if ts, opErr = loadState(); opErr == nil {
			var rev uint64
			if rev, opErr = kv.Push(ctx, a.args[0], data, ts.Overrides); opErr == nil {
				fmt.Fprintf(stdout, "pushed %s to bucket %s (revision %d)\n", a.args[0], kv.Name(), rev)
			}
		}
	case "show", "pauses":
		d, err := doc()
		if err != nil {
			fmt.Fprintf(stderr, "admitter plans %s: %v\n", a.cmd, err)
			return 1
		}
		ts, err := loadState()
		if err != nil {
			fmt.Fprintf(stderr, "admitter plans %s: %v\n", a.cmd, err)
			return 1
		}
		s := d.With(ts)
		if a.cmd == "pauses" {
			printPauses(stdout, s, time.Now())
		} else {
			printSnapshot(stdout, s, stateName(), time.Now())
		}
		return 0
	case "set":
		var d *plansource.Snapshot
		if d, opErr = doc(); opErr == nil {
			if _, ok := d.Document.Plan(a.args[1]); !ok {
				opErr = fmt.Errorf("plan %q is not defined in the %s (its plans: %s)", a.args[1], d.Source, strings.Join(d.Document.Names(), ", "))
			} else if opErr = state.Set(ctx, a.args[0], a.args[1], a.by); opErr == nil {
				fmt.Fprintf(stdout, "tenant %s: plan %s, set by %s in bucket %s (checked against the %s); every replica applies it within 2s\n",
					a.args[0], a.args[1], a.by, state.Name(), d.Source)
			}
		}
	case "unset":
		if opErr = state.Unset(ctx, a.args[0]); opErr == nil {
			fmt.Fprintf(stdout, "tenant %s: back on the document's plan\n", a.args[0])
		}
	case "pause":
		now, expiry := time.Now(), ""
		d, err := doc()
		var ts plansource.Tenants
		if err == nil {
			ts, err = loadState()
		}
		if err != nil { // a pause is not held up by the plans: it says what it could not check
			fmt.Fprintf(stderr, "admitter plans pause: the plans could not be read to compare the pause with the plan's max_wait: %v\n", err)
		} else {
			expiry = pauseExpiry(d.With(ts), a.args[0], now, a.until)
		}
		if expiry != "" && !a.yes {
			fmt.Fprintf(stderr, "admitter plans pause: not paused: %s; pause for less, or add --yes to pause anyway\n", expiry)
			return 2
		}
		if opErr = state.Pause(ctx, a.args[0], a.until, a.by); opErr == nil {
			fmt.Fprintf(stdout, "tenant %s: paused until %s (%v from now), set by %s in bucket %s; every replica applies it within 2s\n",
				a.args[0], a.until.UTC().Format(time.RFC3339), a.until.Sub(now).Round(time.Second), a.by, state.Name())
			if expiry != "" {
				fmt.Fprintf(stdout, "%s (admitter dead replay --code expired --tenant %s replays them)\n", expiry, a.args[0])
			}
		}
	case "resume":
		if opErr = state.Resume(ctx, a.args[0]); opErr == nil {
			fmt.Fprintf(stdout, "tenant %s: resumed\n", a.args[0])
		}
	}
	if opErr != nil {
		fmt.Fprintf(stderr, "admitter plans %s: %v\n", a.cmd, opErr)
		if errors.Is(opErr, context.DeadlineExceeded) || errors.Is(opErr, nats.ErrTimeout) || errors.Is(opErr, nats.ErrNoResponders) {
			return 1
		}
		return 2
	}
	return 0
}

// pauseExpiry says what a pause of tenant from now until until does to its jobs under the plans
// s when its plan's max_wait is shorter ("" when it is not, or the plan has none, or is in
// shadow mode, or the tenant has no plan): every job the pause holds expires before it ends.
func pauseExpiry(s *plansource.Snapshot, tenant string, now, until time.Time) string {
	plan, err := s.Plans.Lookup(tenant)
	if err != nil || plan.Shadow || plan.MaxWait <= 0 || until.Sub(now) <= plan.MaxWait {
		return ""
	}
	return fmt.Sprintf("tenant %s's plan %s has max_wait %v, shorter than the pause (%v): its jobs waiting now, and those stored before %s, are dead-lettered expired (waited for paused) before the pause ends",
		tenant, plan.Name, plan.MaxWait, until.Sub(now).Round(time.Second), until.Add(-plan.MaxWait).UTC().Format(time.RFC3339))
}

func printSnapshot(w io.Writer, s *plansource.Snapshot, state string, now time.Time) {
	fmt.Fprintf(w, "%s, revision %d (as read here); state bucket %s, revision %d\n\n%s", s.Source, s.Revision, state, s.State, s.Plans.Describe())
	fmt.Fprintf(w, "overrides (%d):\n", len(s.Overrides))
	for _, t := range slices.Sorted(maps.Keys(s.Overrides)) {
		fmt.Fprintf(w, "  %s: %s (%s)\n", t, s.Overrides[t].Plan, s.Overrides[t].Setter())
	}
	printPauses(w, s, now)
	if len(s.Ignored) > 0 {
		fmt.Fprintf(w, "not applied (%d):\n", len(s.Ignored))
		for _, i := range s.Ignored {
			fmt.Fprintf(w, "  %s\n", i)
		}
	}
}

// printPauses lists the pauses, those in force first.
func printPauses(w io.Writer, s *plansource.Snapshot, now time.Time) {
	fmt.Fprintf(w, "pauses (%d):\n", len(s.Pauses))
	tenants := slices.SortedFunc(maps.Keys(s.Pauses), func(a, b string) int {
		if pa, pb := s.Pauses[a].Until.After(now), s.Pauses[b].Until.After(now); pa != pb {
			if pa {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	for _, t := range tenants {
		p := s.Pauses[t]
		if p.Until.After(now) {
			fmt.Fprintf(w, "  %s: paused until %s (%v from now), %s\n", t, p.Until.UTC().Format(time.RFC3339), p.Until.Sub(now).Round(time.Second), p.Setter())
		} else {
			fmt.Fprintf(w, "  %s: ended at %s, %s (admitter plans resume %s removes it)\n", t, p.Until.UTC().Format(time.RFC3339), p.Setter(), t)
		}
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
