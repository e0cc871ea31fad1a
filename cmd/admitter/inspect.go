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
	"github.com/admitter/admitter/policy"
	"github.com/admitter/admitter/wire"
	"github.com/redis/rueidis"
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
	var res *wire.TenantState
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
		res = new(wire.TenantState)
		if err := json.Unmarshal(body, res); err != nil {
			return fmt.Errorf("admitter at %s: %w", c.HTTPAddr, err)
		}
		source = "the admitter at " + c.HTTPAddr
	}
	printInspection(w, res, source)
	return nil
}

func printInspection(w io.Writer, r *wire.TenantState, source string) {
	fmt.Fprintf(w, "tenant %s, plan %s, read from %s at %s\n\n", r.Tenant, r.Plan, source, r.At.Format(time.RFC3339Nano))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LIMIT\tCAPACITY\tRATE\tTOKENS NOW\tFULL IN\tA JOB OF WEIGHT 1 FITS IN")
	var binding *wire.LimitState
	for i := range r.Limits {
		l := &r.Limits[i]
		full := time.Duration(l.FullInMs * float64(time.Millisecond)).Round(time.Millisecond)
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%v\t%v\n", l.Limit, l.Capacity, l.Rate, l.Tokens, full, time.Duration(l.WaitMs)*time.Millisecond)
		if l.Limit == r.Limit {
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
	case binding != nil && r.WaitMs > 0:
		fmt.Fprintf(w, "\nwhy jobs wait: limit %s (%s) holds %d tokens; a job of weight 1 fits in %v\n",
			binding.Limit, binding.Rate, binding.Tokens, time.Duration(r.WaitMs)*time.Millisecond)
	case r.LaneOpen:
		fmt.Fprintln(w, "\nthe head of the lane goes as soon as its own weight fits")
	default:
		fmt.Fprintln(w, "\na job of weight 1 would be admitted now")
	}
}
