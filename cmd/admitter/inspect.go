package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/plans"
	"github.com/admitter/admitter/plansource"
	"github.com/admitter/admitter/policy"
	"github.com/admitter/admitter/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// inspector reads a tenant's live bucket state; both bucket backends implement it.
type inspector interface {
	Inspect(ctx context.Context, tenant string, plan *bucket.Plan) (bucket.Snapshot, error)
}

// inspect reads the tenant's state under its plan.
func inspect(ctx context.Context, l any, plans *bucket.Plans, tenant string) (*wire.TenantState, error) {
	in, ok := l.(inspector)
	if !ok {
		return nil, errors.New("this limiter cannot be inspected")
	}
	plan, err := plans.Lookup(tenant)
	if err != nil {
		return nil, err
	}
	snap, err := in.Inspect(ctx, tenant, plan)
	if err != nil {
		return nil, err
	}
	st := policy.TenantState(tenant, plan, snap)
	return &st, nil
}

// inspectLimit bounds the /inspect calls answered at once; inspectTimeout bounds one read of
// Redis: a frozen or slow Redis gets a quick 503, not a hung call, and many callers cannot pile
// up on it.
const (
	inspectLimit   = 4
	inspectTimeout = time.Second
)

var inspectSlots = make(chan struct{}, inspectLimit)

// inspectHandler serves GET /inspect?tenant=NAME from the running process: the only way to
// read the in-process buckets from outside. It uses the plans and pauses in force, and reads
// only the tenant's own key.
func inspectHandler(l any, pol *policy.Policy) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case inspectSlots <- struct{}{}:
			defer func() { <-inspectSlots }()
		default:
			w.Header().Set("Retry-After", "1")
			http.Error(w, fmt.Sprintf("busy: %d inspections under way, try again", inspectLimit), http.StatusServiceUnavailable)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), inspectTimeout)
		defer cancel()
		tenant := r.URL.Query().Get("tenant")
		if tenant == "" {
			http.Error(w, "want ?tenant=NAME", http.StatusBadRequest)
			return
		}
		res, err := inspect(ctx, l, pol.Plans(), tenant)
		if err == nil {
			if until, paused := pol.PausedUntil(tenant); paused {
				res.PausedUntil = &until
			}
		}
		if err != nil {
			status := http.StatusServiceUnavailable // the limiter did not answer in time
			if errors.Is(err, bucket.ErrUnknownTenant) || errors.Is(err, bucket.ErrInvalidTenant) {
				status = http.StatusNotFound
			}
			http.Error(w, err.Error(), status)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(res)
	})
}

// runInspect is `admitter inspect TENANT`: from Redis directly when ADMITTER_REDIS_URL is set,
// otherwise from the running admitter's /inspect at ADMITTER_HTTP_ADDR (in-process buckets live
// only there).
func runInspect(ctx context.Context, c *config, tenant string, w io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var res *wire.TenantState
	var source string
	if c.RedisURL != "" {
		opt, err := c.redisClientOption()
		if err != nil {
			return err
		}
		r, err := bucket.DialRedisWith(opt, c.RedisPrefix, bucket.Options{})
		if err != nil {
			return fmt.Errorf("connect to redis %s: %w", redactURL(c.RedisURL), err)
		}
		defer r.Close()
		plans, until, err := plansInForce(ctx, c, tenant)
		if err != nil {
			return err
		}
		if res, err = inspect(ctx, r, plans, tenant); err != nil {
			return err
		}
		res.PausedUntil = until
		source = "Redis " + redactURL(c.RedisURL)
	} else {
		if c.HTTPAddr == "off" {
			return errors.New("ADMITTER_REDIS_URL is unset and ADMITTER_HTTP_ADDR is off: the in-process buckets cannot be read")
		}
		u := "http://" + c.HTTPAddr + "/inspect?tenant=" + url.QueryEscape(tenant)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if c.HTTPToken != "" {
			req.Header.Set("Authorization", "Bearer "+c.HTTPToken)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("ask the running admitter at %s (ADMITTER_REDIS_URL is unset, so its buckets live in that process): %w", c.HTTPAddr, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("admitter at %s: %s", c.HTTPAddr, strings.TrimSpace(string(body)))
		}
		res = new(wire.TenantState)
		if err := json.Unmarshal(body, res); err != nil {
			return fmt.Errorf("admitter at %s: %w", c.HTTPAddr, err)
		}
		source = "the admitter at " + c.HTTPAddr
	}
	printInspection(w, res, source)
	return nil
}

// plansInForce is the plans the replicas use and the tenant's pause: the plans bucket when
// ADMITTER_PLANS_KV is set, else the plans file, with the state bucket's overrides and pauses.
func plansInForce(ctx context.Context, c *config, tenant string) (*bucket.Plans, *time.Time, error) {
	u := c.NATSURL
	if u == "" {
		u = fmt.Sprintf("nats://127.0.0.1:%d", c.EmbeddedNATSPort)
	}
	auth, err := c.natsOptions()
	if err != nil {
		return nil, nil, err
	}
	nc, err := nats.Connect(u, append(auth, nats.Name("admitter-inspect"), nats.Timeout(5*time.Second))...)
	if err != nil {
		return nil, nil, fmt.Errorf("read the state bucket: connect to NATS at %s: %w", redact(u), err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, nil, err
	}
	doc := plansource.DocumentSnapshot(c.plans, "plans file")
	if c.PlansKV != "" {
		kv, err := plansource.OpenKV(ctx, js, c.PlansKV, c.StreamReplicas, plans.Parse, "", nil)
		if err != nil {
			return nil, nil, err
		}
		if doc, err = kv.Load(ctx); err != nil {
			return nil, nil, err
		}
	}
	state, err := plansource.LookupState(ctx, js, c.Consumer)
	if err != nil {
		return nil, nil, err
	}
	ts, err := state.Load(ctx)
	if err != nil {
		return nil, nil, err
	}
	s := doc.With(ts)
	if until, paused := s.PausedUntil(tenant, time.Now()); paused {
		return s.Plans, &until, nil
	}
	return s.Plans, nil, nil
}

func printInspection(w io.Writer, r *wire.TenantState, source string) {
	fmt.Fprintf(w, "tenant %s, plan %s, read from %s at %s\n\n", r.Tenant, r.Plan, source, r.At.Format(time.RFC3339Nano))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LIMIT\tKIND\tRULE\tUSED\tLEFT\tNEXT\tFULL IN\tA JOB OF WEIGHT 1 FITS IN")
	var binding *wire.LimitState
	for i := range r.Limits {
		l := &r.Limits[i]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", l.Limit, l.Kind, l.Rule, l.Used, l.Tokens, next(l),
			human(msDuration(l.FullInMs)), human(time.Duration(l.WaitMs)*time.Millisecond))
		if l.Limit == r.Limit {
			binding = l
		}
	}
	tw.Flush()
	if r.Shadow {
		fmt.Fprintf(w, "\nplan %s is in shadow mode: its jobs are forwarded at once; the limits above are the trial's, and the waits what it would give\n", r.Plan)
	}
	if r.PausedUntil != nil {
		fmt.Fprintf(w, "\npaused until %s (%v from now): its jobs wait in its queue, in order\n", r.PausedUntil.UTC().Format(time.RFC3339), r.PausedUntil.Sub(r.At).Round(time.Second))
	}
	if r.HeldUntil != nil {
		fmt.Fprintf(w, "\nqueue: held by the replica deciding it for %v more (each of its decisions extends it; another replica admits none of its jobs before)\n",
			r.HeldUntil.Sub(r.At).Round(time.Millisecond))
	}
	if r.Reservations > 0 {
		fmt.Fprintf(w, "reservations booked by requests: %d", r.Reservations)
		if r.LatestSlot != nil {
			fmt.Fprintf(w, " (latest slot %s, %v from now)", r.LatestSlot.Format(time.RFC3339Nano), r.LatestSlot.Sub(r.At).Round(time.Millisecond))
		}
		fmt.Fprintln(w)
	}
	if p := r.Pool; p != nil {
		printPool(w, r.Tenant, p)
	}
	switch {
	case binding != nil && r.WaitMs > 0:
		fmt.Fprintf(w, "\nwhy jobs wait: limit %s (%s, %s) %s; a job of weight 1 fits in %s\n",
			binding.Limit, binding.Kind, binding.Rule, why(binding), human(time.Duration(r.WaitMs)*time.Millisecond))
	default:
		fmt.Fprintln(w, "\na job of weight 1 would be admitted now")
	}
}

// printPool says what the tenant's pool holds and whom it serves.
func printPool(w io.Writer, tenant string, p *wire.PoolState) {
	fmt.Fprintf(w, "\npool %s (%s): ", p.Name, p.Rule)
	var parts []string
	if p.Concurrency > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d in flight", p.InFlight, p.Concurrency))
	}
	if p.Capacity > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d tokens left", max(p.Tokens, 0), p.Capacity))
	}
	fmt.Fprintf(w, "%s; %d tenants waiting (shares %d in all); %s's share %d\n", strings.Join(parts, ", "), p.Waiting, p.WaitingShares, tenant, p.Share)
	if len(p.Tenants) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  TENANT\tSHARE\tRECEIVED\tWAITING")
	for _, t := range p.Tenants {
		share := "-"
		if t.Share > 0 {
			share = fmt.Sprint(t.Share)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%v\n", t.Tenant, share, t.Received, t.Waiting)
	}
	tw.Flush()
}

// next says when a limit next gives something back, in its kind's terms.
func next(l *wire.LimitState) string {
	d := human(msDuration(l.NextInMs))
	switch l.Kind {
	case "window":
		if l.Used == 0 {
			return "empty"
		}
		return fmt.Sprintf("oldest leaves in %s", d)
	case "quota":
		if l.ResetsAt != nil {
			return fmt.Sprintf("resets in %s (%s)", d, l.ResetsAt.Format(time.RFC3339))
		}
		return fmt.Sprintf("resets in %s", d)
	case "concurrency":
		if l.Used == 0 {
			return "none running"
		}
		return fmt.Sprintf("oldest lease ends in %s", d)
	}
	if l.NextInMs == 0 {
		return "full"
	}
	return fmt.Sprintf("next token in %s", d)
}

// why says what holds a limit back, in its kind's terms.
func why(l *wire.LimitState) string {
	switch l.Kind {
	case "window":
		return fmt.Sprintf("counts %d in its window; its oldest take leaves in %s", l.Used, human(msDuration(l.NextInMs)))
	case "quota":
		return fmt.Sprintf("has %d used this period; it resets in %s", l.Used, human(msDuration(l.NextInMs)))
	case "concurrency":
		return fmt.Sprintf("has %d of %d running; the oldest lease ends in %s, or sooner when a job is done", l.Used, l.Capacity, human(msDuration(l.NextInMs)))
	}
	return fmt.Sprintf("holds %d tokens", l.Tokens)
}

func msDuration(ms float64) time.Duration {
	return time.Duration(ms * float64(time.Millisecond)).Round(time.Millisecond)
}

// human formats a duration for people: whole days first when it is a day or more ("9d10h50m"),
// otherwise compactly ("50m", "1.5s", "0s").
func human(d time.Duration) string {
	const day = 24 * time.Hour
	if d < day {
		if d == 0 {
			return "0s"
		}
		return bucket.ShortDuration(d)
	}
	days, rest := d/day, d%day
	if rest == 0 {
		return fmt.Sprintf("%dd", days)
	}
	return fmt.Sprintf("%dd%s", days, bucket.ShortDuration(rest))
}
