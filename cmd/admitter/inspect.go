package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
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
	"github.com/nats-io/nats.go/micro"
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

// tenantInspector answers `admitter inspect` from the running service, over HTTP (/inspect)
// and NATS (wire.InspectSubject): the plan and pause in force on this replica, the limits'
// state, the tenant's queue in the input, and where each figure came from.
type tenantInspector struct {
	st   *stack
	live *livePlans
	c    *config
	// limits says where the limits' state is read, in words.
	limits string
}

func newTenantInspector(st *stack, live *livePlans, c *config) *tenantInspector {
	limits := fmt.Sprintf("the in-process buckets of replica %s (ADMITTER_REDIS_URL unset: not shared)", st.replica)
	if st.redis != nil {
		limits = fmt.Sprintf("Redis %s, shared by every replica", redactURL(c.RedisURL))
	}
	return &tenantInspector{st: st, live: live, c: c, limits: limits}
}

// inspect answers for tenant. A *wire.RequestError refuses the tenant; any other error is the
// limiter's.
func (ti *tenantInspector) inspect(ctx context.Context, tenant string) (*wire.TenantState, error) {
	res, err := ti.st.policy.Inspect(ctx, tenant)
	if err != nil {
		return nil, err
	}
	snap := ti.live.current()
	src := &wire.Sources{Replica: ti.st.replica, Plans: snap.Source, Plan: planReason(snap, tenant), Limits: ti.limits}
	if since, down := ti.st.policy.Outage(); down && ti.st.policy.FailMode() == policy.FailLocal {
		src.Limits = fmt.Sprintf("replica %s's copy of the tenant's state: Redis is unreachable since %s (fail mode local)", ti.st.replica, since.UTC().Format(time.RFC3339))
	}
	if snap.Revision != 0 {
		src.Plans += fmt.Sprintf(", revision %d", snap.Revision)
	}
	if p, ok := snap.Pauses[tenant]; ok && res.PausedUntil != nil {
		src.Pause = p.Setter()
	}
	res.Queue, src.Queue = ti.queue(ctx, tenant, res.At)
	res.Sources = src
	return &res, nil
}

// planReason says why tenant is on its plan in snap.
func planReason(snap *plansource.Snapshot, tenant string) string {
	var doc string
	switch name, assigned := snap.Document.Tenants()[tenant]; {
	case assigned:
		doc = fmt.Sprintf("tenants.%s: %s of the plans", tenant, name)
	case snap.Document.Default() != "":
		doc = fmt.Sprintf("default_plan: %s of the plans (the plans name no plan for %s)", snap.Document.Default(), tenant)
	default:
		doc = "no plan: the plans name none for it and have no default_plan"
	}
	o, ok := snap.Overrides[tenant]
	if !ok {
		return doc
	}
	if _, defined := snap.Document.Plan(o.Plan); !defined {
		return fmt.Sprintf("%s; its override to plan %s (%s) is not applied: the plans define no %s", doc, o.Plan, o.Setter(), o.Plan)
	}
	return fmt.Sprintf("override to plan %s, %s", o.Plan, o.Setter())
}

// queue reads tenant's queue now: how many jobs wait in each stream that holds some (its
// partition's stream, and older streams), and its oldest job, the first of the first of them.
func (ti *tenantInspector) queue(ctx context.Context, tenant string, at time.Time) (*wire.QueueState, string) {
	counted := time.Now().UTC()
	tq := ti.st.svc.QueueOf(ctx, tenant)
	q := &wire.QueueState{Waiting: tq.Jobs(), ListedAt: counted, Streams: tq.Where()}
	names := make([]string, len(tq.Streams))
	for i, sj := range tq.Streams {
		names[i] = sj.Stream
	}
	if tq.Err != nil {
		q.Error = tq.Err.Error()
	}
	if o, ok := tq.Oldest(); ok {
		stored := o.OldestAt.UTC()
		q.OldestAt, q.OldestSeq, q.OldestStream, q.OldestAgeMs = &stored, o.OldestSeq, o.Stream, max(at.Sub(stored).Milliseconds(), 0)
	}
	where := "stream " + strings.Join(names, "")
	if len(names) > 1 {
		where = "streams " + strings.Join(names, " then ")
	}
	return q, where + ", counted now by replica " + ti.st.replica
}

// inspectStatus is the HTTP status of an inspection's error (and of its NATS twin's reply).
func inspectStatus(err error) (int, wire.Code) {
	var re *wire.RequestError
	if errors.As(err, &re) {
		return wire.HTTPStatus(re.Code()), re.Code()
	}
	return http.StatusServiceUnavailable, wire.CodeLimiterUnavailable // the limiter did not answer in time
}

// ServeHTTP serves GET /inspect?tenant=NAME on ADMITTER_HTTP_ADDR.
func (ti *tenantInspector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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
	res, err := ti.inspect(ctx, tenant)
	if err != nil {
		status, _ := inspectStatus(err)
		http.Error(w, err.Error(), status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(res)
}

// startInspectResponder answers inspections over NATS on wire.InspectSubject, one replica per
// request; stop unsubscribes.
func startInspectResponder(nc *nats.Conn, ti *tenantInspector, consumer string, log *slog.Logger) (stop func(), err error) {
	sub, err := nc.QueueSubscribe(wire.InspectSubject(consumer), "inspect", func(m *nats.Msg) {
		if m.Reply == "" {
			return
		}
		out := &nats.Msg{Subject: m.Reply, Header: nats.Header{}}
		var req wire.InspectRequest
		var res *wire.TenantState
		err := json.Unmarshal(m.Data, &req)
		if err == nil && req.Tenant == "" {
			err = wire.Refuse(wire.CodeInvalidRequest, "the request names no tenant")
		} else if err != nil {
			err = wire.Refuse(wire.CodeInvalidRequest, "the request is not {\"tenant\": NAME}: %v", err)
		}
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), inspectTimeout)
			res, err = ti.inspect(ctx, req.Tenant)
			cancel()
		}
		if err != nil {
			status, code := inspectStatus(err)
			out.Header.Set(micro.ErrorCodeHeader, strconv.Itoa(status))
			out.Header.Set(micro.ErrorHeader, err.Error())
			out.Data = wire.ErrorBody{Error: code, Detail: err.Error()}.AppendJSON(nil)
		} else if out.Data, err = json.Marshal(res); err != nil {
			return
		}
		if err := nc.PublishMsg(out); err != nil {
			log.Warn("inspect over NATS: reply not sent", "err", err)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("inspect over NATS on %s: %w", wire.InspectSubject(consumer), err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

// runInspect is `admitter inspect TENANT`. It asks the running service, which knows the plan
// and pause in force and the tenant's queue: its HTTP endpoint (ADMITTER_HTTP_ADDR /inspect),
// else its NATS twin (wire.InspectSubject on ADMITTER_NATS_URL). Only when no replica answers
// does it read Redis itself (ADMITTER_REDIS_URL) under the plans it can read, and says so.
func runInspect(ctx context.Context, c *config, tenant string, w io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var tried []string
	if c.HTTPAddr != "off" {
		res, err := inspectHTTP(ctx, c, tenant)
		var refused *serviceRefusal
		switch {
		case err == nil:
			printInspection(w, res, "the admitter at "+c.HTTPAddr+" (ADMITTER_HTTP_ADDR)")
			return nil
		case errors.As(err, &refused):
			return err
		}
		tried = append(tried, fmt.Sprintf("HTTP at %s (ADMITTER_HTTP_ADDR): %v", c.HTTPAddr, err))
	} else {
		tried = append(tried, "HTTP: ADMITTER_HTTP_ADDR is off")
	}
	natsURL := c.NATSURL
	if natsURL == "" {
		natsURL = fmt.Sprintf("nats://127.0.0.1:%d", c.EmbeddedNATSPort)
	}
	res, err := inspectNATS(ctx, c, natsURL, tenant)
	var refused *serviceRefusal
	switch {
	case err == nil:
		printInspection(w, res, fmt.Sprintf("the admitter over NATS at %s (%s)", redact(natsURL), wire.InspectSubject(c.Consumer)))
		return nil
	case errors.As(err, &refused):
		return err
	}
	tried = append(tried, fmt.Sprintf("NATS at %s (ADMITTER_NATS_URL), %s: %v", redact(natsURL), wire.InspectSubject(c.Consumer), err))
	nobody := "no running admitter answered: " + strings.Join(tried, "; ")
	if c.RedisURL == "" {
		return errors.New(nobody + "; and ADMITTER_REDIS_URL is unset, so the limits cannot be read here either")
	}
	if c.PlansFile == "" && c.PlansKV == "" {
		return errors.New(nobody + "; ADMITTER_PLANS_FILE and ADMITTER_PLANS_KV are unset, so the plan in force cannot be known here (set the service's)")
	}
	return inspectRedis(ctx, c, natsURL, tenant, nobody, w)
}

// serviceRefusal is the running service's answer refusing an inspection (an unknown tenant):
// final, not a reason to ask elsewhere.
type serviceRefusal struct{ msg string }

func (e *serviceRefusal) Error() string { return e.msg }

// inspectHTTP asks the service's /inspect.
func inspectHTTP(ctx context.Context, c *config, tenant string) (*wire.TenantState, error) {
	u := "http://" + c.HTTPAddr + "/inspect?tenant=" + url.QueryEscape(tenant)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	if c.HTTPToken != "" {
		req.Header.Set("Authorization", "Bearer "+c.HTTPToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch {
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusBadRequest:
		return nil, &serviceRefusal{fmt.Sprintf("the admitter at %s: %s", c.HTTPAddr, strings.TrimSpace(string(body)))}
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	res := new(wire.TenantState)
	if err := json.Unmarshal(body, res); err != nil {
		return nil, fmt.Errorf("not an admitter's answer: %w", err)
	}
	return res, nil
}

// inspectNATS asks a replica over NATS.
func inspectNATS(ctx context.Context, c *config, natsURL, tenant string) (*wire.TenantState, error) {
	auth, err := c.natsOptions()
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(natsURL, append(auth, nats.Name("admitter-inspect"), nats.Timeout(3*time.Second))...)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	data, _ := json.Marshal(wire.InspectRequest{Tenant: tenant})
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	m, err := nc.RequestWithContext(rctx, wire.InspectSubject(c.Consumer), data)
	if err != nil {
		return nil, err
	}
	if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
		msg := fmt.Sprintf("the admitter over NATS: %s", m.Header.Get(micro.ErrorHeader))
		if code == "404" || code == "400" {
			return nil, &serviceRefusal{msg}
		}
		return nil, errors.New(msg)
	}
	res := new(wire.TenantState)
	if err := json.Unmarshal(m.Data, res); err != nil {
		return nil, fmt.Errorf("not an admitter's answer: %w", err)
	}
	return res, nil
}

// inspectRedis reads the tenant's limits from Redis under the plans this shell can read (the
// plans bucket or file, with the state bucket's overrides and pause when NATS answers), and says
// so: no queue is known.
func inspectRedis(ctx context.Context, c *config, natsURL, tenant, nobody string, w io.Writer) error {
	opt, err := c.redisClientOption()
	if err != nil {
		return err
	}
	r, err := bucket.DialRedisWith(opt, c.RedisPrefix, bucket.Options{})
	if err != nil {
		return fmt.Errorf("%s; connect to redis %s: %w", nobody, redactURL(c.RedisURL), err)
	}
	defer r.Close()
	snap, stateErr := plansHere(ctx, c, natsURL)
	if snap == nil {
		return fmt.Errorf("%s; %w", nobody, stateErr)
	}
	res, err := inspect(ctx, r, snap.Plans, tenant)
	if err != nil {
		return err
	}
	src := &wire.Sources{Plans: snap.Source + " as read here", Plan: planReason(snap, tenant), Limits: fmt.Sprintf("Redis %s, read here", redactURL(c.RedisURL)),
		Queue: "not known: " + nobody}
	if stateErr != nil {
		src.Plan += fmt.Sprintf(" (pauses and overrides not read: %v)", stateErr)
	}
	if until, paused := snap.PausedUntil(tenant, time.Now()); paused {
		res.PausedUntil = &until
		src.Pause = snap.Pauses[tenant].Setter()
	}
	res.Sources = src
	printInspection(w, res, "Redis "+redactURL(c.RedisURL))
	return nil
}

// plansHere is the plans as this shell reads them: the plans bucket (ADMITTER_PLANS_KV) or file,
// with the state bucket's overrides and pauses. When the state cannot be read it returns the
// plans alone and says why; when the plans cannot be read, nil.
func plansHere(ctx context.Context, c *config, natsURL string) (*plansource.Snapshot, error) {
	doc := plansource.DocumentSnapshot(c.plans, "file "+c.PlansFile)
	auth, err := c.natsOptions()
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(natsURL, append(auth, nats.Name("admitter-inspect"), nats.Timeout(3*time.Second))...)
	if err != nil {
		if c.PlansKV != "" {
			return nil, fmt.Errorf("read the plans bucket %s: connect to NATS at %s: %w", c.PlansKV, redact(natsURL), err)
		}
		return doc, fmt.Errorf("connect to NATS at %s: %w", redact(natsURL), err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	if c.PlansKV != "" {
		kv, err := plansource.OpenKV(ctx, js, c.PlansKV, c.StreamReplicas, plans.Parse, "", nil)
		if err != nil {
			return nil, err
		}
		if doc, err = kv.Load(ctx); err != nil {
			return nil, err
		}
	}
	state, err := plansource.LookupState(ctx, js, c.Consumer)
	if err != nil {
		return doc, err
	}
	ts, err := state.Load(ctx)
	if err != nil {
		return doc, err
	}
	return doc.With(ts), nil
}

// printInspection prints r, read from source: a header saying where every figure came from,
// the limits, then the queue, the pause, the pool, and why its jobs wait, in words.
func printInspection(w io.Writer, r *wire.TenantState, source string) {
	if src := r.Sources; src != nil && src.Replica != "" {
		source += " (replica " + src.Replica + ")"
	}
	fmt.Fprintf(w, "tenant %s, plan %s, read from %s at %s\n", r.Tenant, r.Plan, source, r.At.Format(time.RFC3339Nano))
	if src := r.Sources; src != nil {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  plan\t%s; plans: %s\n", src.Plan, src.Plans)
		fmt.Fprintf(tw, "  limits\t%s\n", src.Limits)
		fmt.Fprintf(tw, "  queue\t%s\n", src.Queue)
		if src.Pause != "" {
			fmt.Fprintf(tw, "  pause\t%s\n", src.Pause)
		}
		tw.Flush()
	}
	fmt.Fprintln(w)
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
	var facts bytes.Buffer // what is said between the table and why jobs wait
	f := &facts
	var waiting uint64
	if q := r.Queue; q != nil {
		waiting = q.Waiting
		fmt.Fprintf(f, "queue: %s waiting in the input", plural(q.Waiting, "job", "jobs"))
		if len(q.Streams) > 0 {
			fmt.Fprintf(f, " (%s)", q.Streams)
		}
		if !q.ListedAt.IsZero() {
			fmt.Fprintf(f, " (counted %s ago)", human(max(r.At.Sub(q.ListedAt), 0).Round(time.Millisecond)))
		}
		if q.OldestAt != nil {
			seq := strconv.FormatUint(q.OldestSeq, 10)
			if q.OldestStream != "" { // absent from an earlier version's answer
				seq += " of " + q.OldestStream
			}
			fmt.Fprintf(f, "; the oldest, sequence %s, was stored %s ago (%s)", seq, human((time.Duration(q.OldestAgeMs) * time.Millisecond).Round(time.Second)),
				q.OldestAt.Format(time.RFC3339))
		}
		fmt.Fprintln(f)
		if q.Error != "" {
			fmt.Fprintf(f, "queue: could not read everything: %s\n", q.Error)
		}
	}
	if r.Shadow {
		fmt.Fprintf(f, "plan %s is in shadow mode: its jobs are forwarded at once; the limits above are the trial's, and the waits what it would give\n", r.Plan)
	}
	if r.PausedUntil != nil {
		fmt.Fprintf(f, "paused until %s (%v from now): its jobs wait in its queue, in order, and its requests are denied\n",
			r.PausedUntil.UTC().Format(time.RFC3339), r.PausedUntil.Sub(r.At).Round(time.Second))
	}
	if r.DownstreamUntil != nil {
		fmt.Fprintf(f, "%s (%v from now): its queue's jobs wait (a done message's Admit-Retry-After)\n",
			bucket.DownstreamReason(*r.DownstreamUntil), r.DownstreamUntil.Sub(r.At).Round(time.Second))
	}
	if r.HeldUntil != nil {
		fmt.Fprintf(f, "queue: held by the replica deciding it for %v more (each of its decisions extends it; another replica admits none of its jobs before)\n",
			r.HeldUntil.Sub(r.At).Round(time.Millisecond))
	}
	if r.Reservations > 0 {
		fmt.Fprintf(f, "reservations booked by requests: %d", r.Reservations)
		if r.LatestSlot != nil {
			fmt.Fprintf(f, " (latest slot %s, %v from now)", r.LatestSlot.Format(time.RFC3339Nano), r.LatestSlot.Sub(r.At).Round(time.Millisecond))
		}
		fmt.Fprintln(f)
	}
	poolFull := false
	if p := r.Pool; p != nil {
		poolFull = printPool(f, r.Tenant, p)
	}
	if facts.Len() > 0 {
		fmt.Fprintf(w, "\n%s", facts.Bytes())
	}
	fmt.Fprintln(w)
	switch {
	case r.PausedUntil != nil:
		fmt.Fprintf(w, "why jobs wait: the tenant is paused for %v more", r.PausedUntil.Sub(r.At).Round(time.Second))
		if binding != nil && r.WaitMs > 0 {
			fmt.Fprintf(w, "; then limit %s (%s, %s) %s", binding.Limit, binding.Kind, binding.Rule, why(binding))
		}
		fmt.Fprintln(w)
	case r.DownstreamUntil != nil && waiting > 0:
		fmt.Fprintf(w, "why jobs wait: %s\n", bucket.DownstreamReason(*r.DownstreamUntil))
	case r.Pool != nil && r.Pool.DownstreamUntil != nil && waiting > 0:
		fmt.Fprintf(w, "why jobs wait: pool %s: %s\n", r.Pool.Name, bucket.DownstreamReason(*r.Pool.DownstreamUntil))
	case r.Pool != nil && r.Pool.Breaker == "open" && r.Pool.BreakerUntil != nil && waiting > 0:
		fmt.Fprintf(w, "why jobs wait: pool %s: breaker open for %v more (most of its recent jobs failed or were overloaded)\n", r.Pool.Name, r.Pool.BreakerUntil.Sub(r.At).Round(time.Second))
	case binding != nil && r.WaitMs > 0:
		fmt.Fprintf(w, "why jobs wait: limit %s (%s, %s) %s; a job of weight 1 fits in %s\n",
			binding.Limit, binding.Kind, binding.Rule, why(binding), human(time.Duration(r.WaitMs)*time.Millisecond))
	case poolFull && waiting > 0:
		fmt.Fprintf(w, "why jobs wait: its plan's limits let a job of weight 1 through now, but pool %s has no room: a job goes when one of the pool's is done or its lease ends\n", r.Pool.Name)
	case waiting > 0:
		fmt.Fprintln(w, "its limits let a job of weight 1 through now: the replica stepping its queue forwards the next at once")
	default:
		fmt.Fprintln(w, "a job of weight 1 would be admitted now")
	}
}

// plural is n with the noun for its number: "1 job", "25 jobs".
func plural(n uint64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// printPool says what the tenant's pool holds and whom it serves, in words; it reports whether
// the pool has no room now.
func printPool(w io.Writer, tenant string, p *wire.PoolState) (full bool) {
	var parts []string
	if p.Concurrency > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d in flight", p.InFlight, p.Concurrency))
		full = p.InFlight >= p.Concurrency
	}
	if p.Capacity > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d tokens left", max(p.Tokens, 0), p.Capacity))
		full = full || p.Tokens <= 0
	}
	fmt.Fprintf(w, "pool %s (%s): %s; %s waiting for it, with shares %d in all; %s's share is %d\n",
		p.Name, p.Rule, strings.Join(parts, ", "), plural(uint64(max(p.Waiting, 0)), "tenant", "tenants"), p.WaitingShares, tenant, p.Share)
	if p.Limit > 0 {
		floor := "not measured yet"
		if p.FloorMs > 0 {
			floor = human(msDuration(p.FloorMs))
		}
		fmt.Fprintf(w, "  adaptive: limit in force %d of %d (minimum %d), %s; time per job %s, floor %s\n",
			p.Limit, p.Concurrency, p.AdaptiveMin, p.LimitReason, human(msDuration(p.TimePerJobMs)), floor)
		full = full || p.InFlight >= p.Limit
	}
	if p.DownstreamUntil != nil {
		fmt.Fprintf(w, "  %s: no job of the pool is forwarded before\n", bucket.DownstreamReason(*p.DownstreamUntil))
		full = true
	}
	switch {
	case p.Breaker == "open" && p.BreakerUntil != nil:
		fmt.Fprintf(w, "  breaker open until %s: most of its recent jobs failed or were overloaded; nothing is forwarded before\n", p.BreakerUntil.UTC().Format(time.RFC3339))
		full = true
	case p.Breaker == "half-open":
		fmt.Fprintf(w, "  breaker half-open: %d probe jobs out; it closes when they come back ok\n", p.Probes)
	case p.Breaker != "":
		fmt.Fprintf(w, "  breaker %s\n", p.Breaker)
	}
	for _, t := range p.Tenants {
		state := "nothing waiting"
		if t.Waiting {
			state = fmt.Sprintf("waiting, share %d", t.Share)
		}
		fmt.Fprintf(w, "  %s: %s; received %d since it last had nothing waiting\n", t.Tenant, state, t.Received)
	}
	return full
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
