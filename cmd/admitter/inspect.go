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
	"github.com/admitter/admitter/plansource"
	"github.com/admitter/admitter/policy"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// inspector reads a tenant's live bucket state; both bucket backends implement it.
type inspector interface {
	Inspect(ctx context.Context, tenant string, plan *bucket.Plan) (bucket.Snapshot, error)
}

// inspection is what `admitter inspect` prints and /inspect serves as JSON.
type inspection struct {
	Tenant       string       `json:"tenant"`
	Plan         string       `json:"plan"`
	At           time.Time    `json:"at"`
	Limits       []limitState `json:"limits"`
	LaneOpen     bool         `json:"lane_open"`
	PausedUntil  *time.Time   `json:"paused_until,omitempty"`
	Reservations int          `json:"reservations"`
	LatestSlot   *time.Time   `json:"latest_slot,omitempty"`
}

type limitState struct {
	Limit    string  `json:"limit"`
	Capacity int64   `json:"capacity"`
	Rate     string  `json:"rate"`
	Tokens   int64   `json:"tokens"`
	FullInMs float64 `json:"full_in_ms"`
	// IntervalMs is the time to refill one token.
	IntervalMs float64 `json:"interval_ms"`
}

// nextWait is how long a job of weight 1 waits for this limit: until it holds one token.
func (l limitState) nextWait() time.Duration {
	ms := l.FullInMs - float64(l.Capacity-1)*l.IntervalMs
	return time.Duration(max(ms, 0) * float64(time.Millisecond))
}

// inspect reads the tenant's state under its plan.
func inspect(ctx context.Context, l any, plans *bucket.Plans, tenant string) (*inspection, error) {
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
	out := &inspection{Tenant: tenant, Plan: plan.Name, At: snap.At.UTC(), LaneOpen: snap.LaneOpen, Reservations: snap.Reservations}
	if !snap.LatestSlot.IsZero() {
		t := snap.LatestSlot.UTC()
		out.LatestSlot = &t
	}
	for i, ls := range snap.Limits {
		l := plan.Limits[i]
		out.Limits = append(out.Limits, limitState{Limit: ls.Limit, Capacity: l.Capacity, Rate: l.Rate,
			Tokens: ls.Tokens, FullInMs: float64(ls.FullIn) / float64(time.Millisecond),
			IntervalMs: float64(l.Interval) / float64(time.Millisecond)})
	}
	return out, nil
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
		r = r.WithContext(ctx)
		tenant := r.URL.Query().Get("tenant")
		if tenant == "" {
			http.Error(w, "want ?tenant=NAME", http.StatusBadRequest)
			return
		}
		res, err := inspect(r.Context(), l, pol.Plans(), tenant)
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
	var res *inspection
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
		res = new(inspection)
		if err := json.Unmarshal(body, res); err != nil {
			return fmt.Errorf("admitter at %s: %w", c.HTTPAddr, err)
		}
		source = "the admitter at " + c.HTTPAddr
	}
	printInspection(w, res, source)
	return nil
}

// plansInForce is the plans the replicas use and the tenant's pause: from the plans bucket when
// ADMITTER_PLANS_KV is set, else the plans file.
func plansInForce(ctx context.Context, c *config, tenant string) (*bucket.Plans, *time.Time, error) {
	if c.PlansKV == "" {
		return c.plans, nil, nil
	}
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
		return nil, nil, fmt.Errorf("read the plans bucket %s: connect to NATS at %s: %w", c.PlansKV, redact(u), err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, nil, err
	}
	kv, err := plansource.OpenKV(ctx, js, c.PlansKV, c.StreamReplicas, bucket.ParsePlans, "", nil)
	if err != nil {
		return nil, nil, err
	}
	s, err := kv.Load(ctx)
	if err != nil {
		return nil, nil, err
	}
	if until, paused := s.PausedUntil(tenant, time.Now()); paused {
		return s.Plans, &until, nil
	}
	return s.Plans, nil, nil
}

func printInspection(w io.Writer, r *inspection, source string) {
	fmt.Fprintf(w, "tenant %s, plan %s, read from %s at %s\n\n", r.Tenant, r.Plan, source, r.At.Format(time.RFC3339Nano))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LIMIT\tCAPACITY\tRATE\tTOKENS NOW\tFULL IN\tA JOB OF WEIGHT 1 FITS IN")
	var binding *limitState
	for i := range r.Limits {
		l := &r.Limits[i]
		full := time.Duration(l.FullInMs * float64(time.Millisecond)).Round(time.Millisecond)
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%v\t%v\n", l.Limit, l.Capacity, l.Rate, l.Tokens, full, l.nextWait().Round(time.Millisecond))
		if binding == nil || l.nextWait() > binding.nextWait() {
			binding = l
		}
	}
	tw.Flush()
	if r.PausedUntil != nil {
		fmt.Fprintf(w, "\npaused until %s (%v from now): its jobs wait in its lane, in order\n", r.PausedUntil.UTC().Format(time.RFC3339), r.PausedUntil.Sub(r.At).Round(time.Second))
	}
	if r.LaneOpen {
		fmt.Fprintf(w, "\nlane: open: jobs of %s wait in it, in order, and its new jobs join them\n", r.Tenant)
	} else {
		fmt.Fprintln(w, "\nlane: closed: no job of this tenant waits")
	}
	if r.Reservations > 0 {
		fmt.Fprintf(w, "reservations booked by requests: %d", r.Reservations)
		if r.LatestSlot != nil {
			fmt.Fprintf(w, " (latest slot %s, %v from now)", r.LatestSlot.Format(time.RFC3339Nano), r.LatestSlot.Sub(r.At).Round(time.Millisecond))
		}
		fmt.Fprintln(w)
	}
	switch {
	case binding != nil && binding.nextWait() > 0:
		fmt.Fprintf(w, "\nwhy jobs wait: limit %s (%s) holds %d tokens; a job of weight 1 fits in %v\n",
			binding.Limit, binding.Rate, binding.Tokens, binding.nextWait().Round(time.Millisecond))
	case r.LaneOpen:
		fmt.Fprintln(w, "\nthe head of the lane goes as soon as its own weight fits")
	default:
		fmt.Fprintln(w, "\na job of weight 1 would be admitted now")
	}
}
