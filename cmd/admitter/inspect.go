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
	"github.com/redis/rueidis"
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
	Reservations int          `json:"reservations"`
	LatestSlot   *time.Time   `json:"latest_slot,omitempty"`
}

type limitState struct {
	Limit string `json:"limit"`
	// Kind is bucket, window or quota; Rule the limit in words ("20 at 10/s", "1000 in any 1h",
	// "100000 per month (UTC)").
	Kind string `json:"kind"`
	Rule string `json:"rule"`
	// Capacity is a bucket's burst, a window's or a quota's limit.
	Capacity int64 `json:"capacity"`
	// Rate and IntervalMs (buckets): the rate as written and the time to refill one token.
	Rate       string  `json:"rate,omitempty"`
	IntervalMs float64 `json:"interval_ms,omitempty"`
	// Tokens is what the limit lets through now (negative: booked ahead past it); Used what it
	// counts (a window: in the window; a quota: this period).
	Tokens int64 `json:"tokens"`
	Used   int64 `json:"used"`
	// FullInMs: until the limit lets its whole capacity through again. NextInMs: until it next
	// gives something back (a bucket's next token, a window's oldest take leaving, a quota's
	// reset). FitsInMs: until a job of weight 1 fits it.
	FullInMs float64 `json:"full_in_ms"`
	NextInMs float64 `json:"next_in_ms"`
	FitsInMs float64 `json:"fits_in_ms"`
	// ResetsAt (quotas) is when the current period ends.
	ResetsAt *time.Time `json:"resets_at,omitempty"`
}

// nextWait is how long a job of weight 1 waits for this limit.
func (l limitState) nextWait() time.Duration { return msDuration(l.FitsInMs) }

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

func toMs(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// rule is a limit in words.
func rule(l bucket.Limit) string {
	switch l.Kind {
	case bucket.KindWindow:
		return fmt.Sprintf("%d in any %s", l.Capacity, bucket.ShortDuration(l.Window))
	case bucket.KindQuota:
		zone := "UTC"
		if l.Location != nil {
			zone = l.Location.String()
		}
		return fmt.Sprintf("%d per %s (%s)", l.Capacity, l.Period, zone)
	}
	return fmt.Sprintf("%d at %s", l.Capacity, l.Rate)
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
		st := limitState{Limit: ls.Limit, Kind: l.Kind.String(), Rule: rule(l), Capacity: l.Capacity,
			Tokens: ls.Tokens, Used: ls.Used, FullInMs: toMs(ls.FullIn), NextInMs: toMs(ls.NextIn), FitsInMs: toMs(ls.OneFitsIn)}
		switch l.Kind {
		case bucket.KindBucket:
			st.Rate, st.IntervalMs = l.Rate, toMs(l.Interval)
		case bucket.KindQuota:
			t := snap.At.Add(ls.NextIn).UTC()
			st.ResetsAt = &t
		}
		out.Limits = append(out.Limits, st)
	}
	return out, nil
}

// inspectHandler serves GET /inspect?tenant=NAME from the running process: the only way to
// read the in-process buckets from outside.
func inspectHandler(l any, plans *bucket.Plans) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant := r.URL.Query().Get("tenant")
		if tenant == "" {
			http.Error(w, "want ?tenant=NAME", http.StatusBadRequest)
			return
		}
		res, err := inspect(r.Context(), l, plans, tenant)
		if err != nil {
			status := http.StatusInternalServerError
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
		opt, err := bucket.RedisClientOption(c.RedisURL)
		if err != nil {
			return err
		}
		client, err := rueidis.NewClient(opt)
		if err != nil {
			return fmt.Errorf("connect to redis %s: %w", redact(c.RedisURL), err)
		}
		defer client.Close()
		if res, err = inspect(ctx, bucket.NewRedis(client, c.RedisPrefix, bucket.Options{}), c.plans, tenant); err != nil {
			return err
		}
		source = "Redis " + redact(c.RedisURL)
	} else {
		if c.HTTPAddr == "off" {
			return errors.New("ADMITTER_REDIS_URL is unset and ADMITTER_HTTP_ADDR is off: the in-process buckets cannot be read")
		}
		u := "http://" + c.HTTPAddr + "/inspect?tenant=" + url.QueryEscape(tenant)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
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

func printInspection(w io.Writer, r *inspection, source string) {
	fmt.Fprintf(w, "tenant %s, plan %s, read from %s at %s\n\n", r.Tenant, r.Plan, source, r.At.Format(time.RFC3339Nano))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LIMIT\tKIND\tRULE\tUSED\tLEFT\tNEXT\tFULL IN\tA JOB OF WEIGHT 1 FITS IN")
	var binding *limitState
	for i := range r.Limits {
		l := &r.Limits[i]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", l.Limit, l.Kind, l.Rule, l.Used, l.Tokens, next(l),
			human(msDuration(l.FullInMs)), human(l.nextWait()))
		if binding == nil || l.nextWait() > binding.nextWait() {
			binding = l
		}
	}
	tw.Flush()
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
		fmt.Fprintf(w, "\nwhy jobs wait: limit %s (%s, %s) %s; a job of weight 1 fits in %s\n",
			binding.Limit, binding.Kind, binding.Rule, why(binding), human(binding.nextWait()))
	case r.LaneOpen:
		fmt.Fprintln(w, "\nthe head of the lane goes as soon as its own weight fits")
	default:
		fmt.Fprintln(w, "\na job of weight 1 would be admitted now")
	}
}

// next says when a limit next gives something back, in its kind's terms.
func next(l *limitState) string {
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
	}
	if l.NextInMs == 0 {
		return "full"
	}
	return fmt.Sprintf("next token in %s", d)
}

// why says what holds a limit back, in its kind's terms.
func why(l *limitState) string {
	switch l.Kind {
	case "window":
		return fmt.Sprintf("counts %d in its window; its oldest take leaves in %s", l.Used, human(msDuration(l.NextInMs)))
	case "quota":
		return fmt.Sprintf("has %d used this period; it resets in %s", l.Used, human(msDuration(l.NextInMs)))
	}
	return fmt.Sprintf("holds %d tokens", l.Tokens)
}
