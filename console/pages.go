package console

import (
	"cmp"
	"context"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/admitter/admitter/activity"
	"github.com/admitter/admitter/admission"
	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/deadletter"
	"github.com/admitter/admitter/wire"
)

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"human": human,
	"ago": func(now, t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		if t.After(now) {
			return "in " + human(t.Sub(now))
		}
		return human(now.Sub(t)) + " ago"
	},
	"rfc3339": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339)
	},
	"clock": func(t any) string {
		switch v := t.(type) {
		case time.Time:
			return v.UTC().Format("15:04:05")
		case *time.Time:
			if v != nil {
				return v.UTC().Format("15:04:05")
			}
		}
		return ""
	},
	"rate": func(f float64) string { return strconv.FormatFloat(f, 'f', rateDigits(f), 64) },
	"pct": func(f float64) string {
		if f < 0 {
			return "—"
		}
		return strconv.FormatFloat(f*100, 'f', 0, 64) + "%"
	},
	"ms":    func(d time.Duration) string { return human(d) },
	"msf":   func(f float64) string { return human(time.Duration(f * float64(time.Millisecond))) },
	"msi":   func(n int64) string { return human(time.Duration(n) * time.Millisecond) },
	"join":  strings.Join,
	"list":  func(s ...string) []string { return s },
	"add":   func(a, b int) int { return a + b },
	"query": func(v url.Values) string { return v.Encode() },
	// fate is a fate's index in the per-fate counts, by its name (wire.Fate's String): a
	// template never spells the order out.
	"fate": func(name string) (int, error) {
		for f := range wire.NumFates {
			if f.String() == name {
				return int(f), nil
			}
		}
		return 0, fmt.Errorf("console: no fate %q", name)
	},
	// ints lists numbers (a replica's partitions): "0, 3".
	"ints": func(xs []int) string {
		s := make([]string, len(xs))
		for i, x := range xs {
			s[i] = strconv.Itoa(x)
		}
		return strings.Join(s, ", ")
	},
}

func rateDigits(f float64) int {
	switch {
	case f == 0 || f >= 100:
		return 0
	case f >= 10:
		return 1
	}
	return 2
}

// ---- Overview ----

type overviewData struct {
	Chart    chart
	Now      [wire.NumFates]float64 // per second over the last 10 s, every replica that answered
	Status   admission.Status
	Redis    string
	RedisOK  bool
	FailMode string
	Ready    string
	Recent   []activity.Second // the last 60 seconds, newest first, for the data table
	View     view
	Replicas []replicaRow
	// Pools are the plans' capacity pools as the limiter holds them now.
	Pools    []wire.PoolState
	PoolsErr string
	// Plans is how this replica's plans changed lately (nil: not known).
	Plans *PlansReport
}

// A replicaRow is one replica of the overview's table: its heartbeat, how its share came,
// and its decisions per second over the last 10 s.
type replicaRow struct {
	admission.Replica
	Share replicaShare
	State string // memory, answered, missing (live, no share), or gone
	Now   [wire.NumFates]float64
}

// perSecond is the jobs per second by fate over secs.
func perSecond(secs []activity.Second) [wire.NumFates]float64 {
	var out [wire.NumFates]float64
	for _, s := range secs {
		for k := range s.Jobs {
			out[k] += float64(s.Jobs[k]) / float64(len(secs))
		}
	}
	return out
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request, _ caller, b *Backend) {
	now := c.cfg.Now()
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	d := overviewData{FailMode: string(b.Policy.FailMode()), Status: b.Queue.Status(ctx)}
	d.View = c.gather(ctx, b, d.Status, activity.ShareRequest{Want: activity.WantOverview}, now)
	secs := activity.MergeSeries(now, 300, d.View.Shares())
	d.Chart, d.Now = drawChart(secs), perSecond(secs[len(secs)-10:])
	for i := len(secs) - 1; i >= len(secs)-60; i-- {
		d.Recent = append(d.Recent, secs[i])
	}
	for _, rp := range d.Status.Replicas {
		row := replicaRow{Replica: rp, State: "gone"}
		for _, rs := range d.View.Replicas {
			if rs.Name == rp.Name {
				row.Share, row.State = rs, rs.State()
				if rs.In {
					row.Now = perSecond(activity.MergeSeries(now, 10, []activity.Share{rs.Share}))
				}
			}
		}
		d.Replicas = append(d.Replicas, row)
	}
	if pools, err := b.Policy.Pools(ctx); err != nil {
		d.PoolsErr = err.Error()
	} else {
		d.Pools = pools
	}
	if b.PlansReport != nil {
		pr := b.PlansReport()
		d.Plans = &pr
	}
	if err := b.Policy.Ping(ctx); err != nil {
		d.Redis = "unreachable: " + err.Error()
	} else if b.Policy.LimiterDown() {
		d.Redis = "answering, but the last decision failed"
	} else {
		d.Redis, d.RedisOK = "answering", true
	}
	c.render(w, r, http.StatusOK, "overview", page{Title: "Overview", Nav: "overview", Data: d})
}

// ---- Tenants ----

// A row is one tenant of the tenants page.
type row struct {
	activity.Tenant
	// Replica decided its latest job ("" when no replica that answered did within
	// activity.Retention); Also are the others that decided some of its jobs.
	Replica  string
	Also     []string
	Rate     float64 // the plan's rate (weight/s); 0 when it has no plan
	Use      float64 // AdmittedPerSec / Rate; -1 without a plan
	Waiting  uint64
	Paused   time.Time
	Shadow   bool // its plan is in shadow mode: trialled, nothing held
	NoPlan   bool
	NextSlot time.Time
}

// columns the tenants table sorts by, and their comparisons (ascending).
var tenantSorts = map[string]func(a, b *row) int{
	"tenant":  func(a, b *row) int { return strings.Compare(a.Tenant.Tenant, b.Tenant.Tenant) },
	"plan":    func(a, b *row) int { return strings.Compare(a.Plan, b.Plan) },
	"rate":    func(a, b *row) int { return cmp.Compare(a.AdmittedPerSec, b.AdmittedPerSec) },
	"use":     func(a, b *row) int { return cmp.Compare(a.Use, b.Use) },
	"waiting": func(a, b *row) int { return cmp.Compare(a.Waiting, b.Waiting) },
	"delayed": func(a, b *row) int { return cmp.Compare(a.Delayed, b.Delayed) },
	"limit":   func(a, b *row) int { return strings.Compare(a.Latest.Limit, b.Latest.Limit) },
	"next":    func(a, b *row) int { return a.NextSlot.Compare(b.NextSlot) },
	"seen":    func(a, b *row) int { return a.LastSeen.Compare(b.LastSeen) },
	"replica": func(a, b *row) int { return strings.Compare(a.Replica, b.Replica) },
}

// ascending are the columns that sort ascending first (names); the others sort descending
// first (figures, times).
var ascending = map[string]bool{"tenant": true, "plan": true, "limit": true, "replica": true}

// PageSize is how many rows the tenants page shows at once.
const PageSize = 50

type tenantsData struct {
	Rows              []*row
	Total, Shown      int // rows matching the filter; all rows with activity
	Page, Pages       int
	Q, Show, Sort     string
	Desc              bool
	Columns           []column
	Prev, Next        string // links
	WaitingErr        string
	Tracked, MaxTrack int // tenants this replica's index keeps, and its bound
	View              view
}

type column struct {
	Key, Label, Href, Aria string
	Numeric                bool
}

func (c *Console) tenants(w http.ResponseWriter, r *http.Request, _ caller, b *Backend) {
	now := c.cfg.Now()
	q := r.URL.Query()
	d := tenantsData{Q: strings.TrimSpace(q.Get("q")), Show: q.Get("show"), Sort: q.Get("sort"), Desc: q.Get("dir") != "asc"}
	if _, ok := tenantSorts[d.Sort]; !ok {
		d.Sort = "waiting"
	}
	if ascending[d.Sort] {
		d.Desc = q.Get("dir") == "desc"
	}
	d.Page, _ = strconv.Atoi(q.Get("page"))
	d.Page = max(d.Page, 1)

	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	d.View = c.gather(ctx, b, b.Queue.Status(ctx), activity.ShareRequest{Want: activity.WantTenants}, now)
	d.Tracked, d.MaxTrack = d.View.Replicas[0].Share.Total, b.Activity.MaxTenants()
	merged := activity.MergeTenants(d.View.Shares())
	rows := make(map[string]*row, len(merged))
	for _, m := range merged {
		rows[m.Tenant.Tenant] = &row{Tenant: m.Tenant, Replica: m.Replica, Also: m.Others()}
	}
	waiting, err := c.waiting.get(now, 2*time.Second, func() (map[string]uint64, error) {
		return b.Queue.Waiting(ctx)
	})
	if err != nil {
		d.WaitingErr = err.Error()
	}
	for t, n := range waiting {
		rw := rows[t]
		if rw == nil {
			rw = &row{Tenant: activity.Tenant{Tenant: t}}
			rows[t] = rw
		}
		rw.Waiting = n
	}
	for t, until := range b.Policy.Pauses() {
		if !until.After(now) {
			continue
		}
		rw := rows[t]
		if rw == nil {
			rw = &row{Tenant: activity.Tenant{Tenant: t}}
			rows[t] = rw
		}
		rw.Paused = until
	}
	plans := b.Policy.Plans()
	rates := map[*bucket.Plan]float64{}
	needle := strings.ToLower(d.Q)
	list := make([]*row, 0, len(rows))
	for _, rw := range rows {
		if needle != "" && !strings.Contains(strings.ToLower(rw.Tenant.Tenant), needle) {
			continue
		}
		if p, err := plans.Lookup(rw.Tenant.Tenant); err == nil {
			rate, ok := rates[p]
			if !ok {
				rate = planRate(p)
				rates[p] = rate
			}
			rw.Plan, rw.Rate, rw.Shadow = p.Name, rate, p.Shadow
			rw.Use = rw.AdmittedPerSec / rate
		} else {
			rw.NoPlan, rw.Use = true, -1
		}
		if rw.Paused.IsZero() {
			if until, ok := b.Policy.PausedUntil(rw.Tenant.Tenant); ok {
				rw.Paused = until
			}
		}
		if rw.Waiting > 0 || !rw.Paused.IsZero() {
			rw.NextSlot = rw.Tenant.NextSlot()
		}
		switch d.Show {
		case "waiting":
			if rw.Waiting == 0 {
				continue
			}
		case "paused":
			if rw.Paused.IsZero() {
				continue
			}
		case "limited":
			if rw.Delayed == 0 && rw.Waiting == 0 {
				continue
			}
		default:
			d.Show = "all"
		}
		list = append(list, rw)
	}
	d.Shown, d.Total = len(rows), len(list)
	less := tenantSorts[d.Sort]
	slices.SortFunc(list, func(a, b *row) int {
		c := less(a, b)
		if d.Desc {
			c = -c
		}
		if c == 0 {
			c = strings.Compare(a.Tenant.Tenant, b.Tenant.Tenant)
		}
		return c
	})
	d.Pages = max(1, (len(list)+PageSize-1)/PageSize)
	d.Page = min(d.Page, d.Pages)
	d.Rows = list[(d.Page-1)*PageSize : min(d.Page*PageSize, len(list))]
	link := func(mod func(v url.Values)) string {
		v := url.Values{}
		for _, k := range []string{"q", "show", "sort", "dir"} {
			if x := q.Get(k); x != "" {
				v.Set(k, x)
			}
		}
		mod(v)
		return Prefix + "tenants?" + v.Encode()
	}
	if d.Page > 1 {
		d.Prev = link(func(v url.Values) { v.Set("page", strconv.Itoa(d.Page-1)) })
	}
	if d.Page < d.Pages {
		d.Next = link(func(v url.Values) { v.Set("page", strconv.Itoa(d.Page+1)) })
	}
	for _, col := range []column{{Key: "tenant", Label: "Tenant"}, {Key: "plan", Label: "Plan"}, {Key: "rate", Label: "Admitted/s", Numeric: true},
		{Key: "use", Label: "Of plan rate", Numeric: true}, {Key: "waiting", Label: "Waiting", Numeric: true}, {Key: "delayed", Label: "Delayed (10 s)", Numeric: true},
		{Key: "limit", Label: "Binding limit"}, {Key: "next", Label: "Next slot"}, {Key: "seen", Label: "Last decision"}, {Key: "replica", Label: "Decided by"}} {
		dir := "desc"
		if ascending[col.Key] {
			dir = "asc"
		}
		col.Aria = "none"
		if col.Key == d.Sort {
			col.Aria = "descending"
			if !d.Desc {
				col.Aria = "ascending"
			}
			if d.Desc {
				dir = "asc"
			} else {
				dir = "desc"
			}
		}
		col.Href = link(func(v url.Values) { v.Set("sort", col.Key); v.Set("dir", dir) })
		d.Columns = append(d.Columns, col)
	}
	c.render(w, r, http.StatusOK, "tenants", page{Title: "Tenants", Nav: "tenants", Data: d})
}

// ---- A tenant ----

type tenantData struct {
	Tenant  string
	State   wire.TenantState
	Err     string
	Weight  int64
	Why     Why
	Waiting uint64
	Paused  time.Time
	// Activity is its activity over every replica that answered (Seen: one did see it),
	// Replica the one that decided its latest job, Also the others that decided some.
	Activity  activity.Tenant
	Seen      bool
	Replica   string
	Also      []string
	Waits     []activity.ReplicaWait
	View      view
	Dead      []deadletter.Letter
	DeadErr   string
	PlanNames []string
	Override  string
	// PoolChart is the limit in force of the tenant's adaptive pool over time, beside its weight
	// in flight and time per job (nil: not adaptive, or no history).
	PoolChart *chart
}

func (c *Console) tenant(w http.ResponseWriter, r *http.Request, _ caller, b *Backend) {
	now := c.cfg.Now()
	name := r.PathValue("tenant")
	wgt, werr := weightParam(r.URL.Query().Get("w"))
	d := tenantData{Tenant: name, Weight: max(wgt, 1), PlanNames: b.Policy.Plans().Names()}
	if werr != nil {
		d.Err = werr.Error()
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	st, err := b.Policy.Inspect(ctx, name)
	if err != nil {
		if code, ok := wire.CodeOf(err); ok && (code == wire.CodeUnknownTenant || code == wire.CodeInvalidTenant) {
			c.message(w, r, http.StatusNotFound, "No such tenant", fmt.Sprintf("Tenant %q has no plan: %v.", name, err))
			return
		}
		d.Err = "The limiter could not be read: " + err.Error()
	}
	d.State = st
	if p := st.Pool; p != nil && p.Limit > 0 && b.PoolHistory != nil {
		if at, states := b.PoolHistory(p.Name); len(at) > 0 {
			ch := drawPoolChart(at, states, now)
			d.PoolChart = &ch
		}
	}
	if until, ok := b.Policy.PausedUntil(name); ok {
		d.Paused = until
		d.State.PausedUntil = &until
	}
	if d.Waiting, err = b.Queue.WaitingFor(ctx, name); err != nil {
		d.Err = strings.TrimSpace(d.Err + " The jobs waiting could not be counted: " + err.Error())
	}
	if len(st.Limits) > 0 {
		d.Why = explain(st, d.Weight, d.Waiting, d.Paused, now)
	}
	d.View = c.gather(ctx, b, b.Queue.Status(ctx), activity.ShareRequest{Want: activity.WantTenant, Tenant: name}, now)
	if m := activity.MergeTenants(d.View.Shares()); len(m) == 1 {
		d.Activity, d.Seen, d.Replica, d.Also = m[0].Tenant, true, m[0].Replica, m[0].Others()
	}
	d.Waits = activity.MergeWaits(d.View.Shares())
	if b.Dead != nil {
		letters, _, err := b.Dead.List(ctx, deadletter.Filter{Tenant: name, Limit: 10})
		if err != nil {
			d.DeadErr = err.Error()
		}
		d.Dead = letters
	} else {
		d.DeadErr = errNoDead.Error()
	}
	c.render(w, r, http.StatusOK, "tenant", page{Title: "Tenant " + name, Nav: "tenants", Data: d})
}

// ---- Dead letters ----

type deadData struct {
	Letters []deadletter.Letter
	Stats   deadletter.Stats
	Codes   []codeCount
	Code    string
	Tenant  string
	Limit   int
	Err     string
	Query   url.Values
}

type codeCount struct {
	Code  wire.Code
	Count int
}

// knownCodes are the dead-letter codes a filter offers even when none is listed.
var knownCodes = []wire.Code{wire.CodeInvalidWeight, wire.CodeWeightOverCapacity, wire.CodeUnknownTenant, wire.CodeInvalidTenant, wire.CodeTooLarge,
	wire.CodeForwardRejected, wire.CodeInvalidMaxWait, wire.CodeInvalidPriority, wire.CodeExpired}

func (c *Console) dead(w http.ResponseWriter, r *http.Request, _ caller, b *Backend) {
	q := r.URL.Query()
	d := deadData{Code: q.Get("code"), Tenant: strings.TrimSpace(q.Get("tenant")), Query: q}
	d.Limit, _ = strconv.Atoi(q.Get("limit"))
	if d.Limit <= 0 || d.Limit > 1000 {
		d.Limit = deadletter.DefaultLimit
	}
	if b.Dead == nil {
		d.Err = errNoDead.Error()
	} else {
		ctx, cancel := context.WithTimeout(r.Context(), 8*time.Second)
		defer cancel()
		var err error
		d.Letters, d.Stats, err = b.Dead.List(ctx, deadletter.Filter{Code: wire.Code(d.Code), Tenant: d.Tenant, Limit: d.Limit})
		if err != nil {
			d.Err = err.Error()
		}
	}
	seen := map[wire.Code]bool{}
	for code, n := range d.Stats.ByCode {
		d.Codes, seen[code] = append(d.Codes, codeCount{code, n}), true
	}
	for _, code := range knownCodes {
		if !seen[code] {
			d.Codes = append(d.Codes, codeCount{code, 0})
		}
	}
	slices.SortFunc(d.Codes, func(a, b codeCount) int {
		return cmp.Or(b.Count-a.Count, strings.Compare(string(a.Code), string(b.Code)))
	})
	c.render(w, r, http.StatusOK, "dead", page{Title: "Dead letters", Nav: "dead", Data: d})
}

type letterData struct {
	Letter  deadletter.Letter
	Headers [][2]string
	Payload string
	Binary  bool
	Cut     bool
}

func (c *Console) letter(w http.ResponseWriter, r *http.Request, _ caller, b *Backend) {
	seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
	if err != nil || b.Dead == nil {
		c.message(w, r, http.StatusNotFound, "No such dead letter", "There is no dead letter "+r.PathValue("seq")+".")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	l, data, err := b.Dead.Get(ctx, seq)
	if err != nil {
		c.message(w, r, http.StatusNotFound, "No such dead letter", err.Error())
		return
	}
	d := letterData{Letter: l}
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range l.Header {
			if !yield(k) {
				return
			}
		}
	}) {
		for _, v := range l.Header[k] {
			d.Headers = append(d.Headers, [2]string{k, v})
		}
	}
	const show = 4096
	if len(data) > show {
		data, d.Cut = data[:show], true
	}
	if utf8.Valid(data) {
		d.Payload = string(data)
	} else {
		d.Payload, d.Binary = fmt.Sprintf("% x", data), true
	}
	c.render(w, r, http.StatusOK, "letter", page{Title: fmt.Sprintf("Dead letter %d", seq), Nav: "dead", Data: d})
}

// ---- Actions ----

// pauseDurations are the pause form's choices.
var pauseDurations = map[string]time.Duration{"5m": 5 * time.Minute, "15m": 15 * time.Minute, "1h": time.Hour, "4h": 4 * time.Hour, "24h": 24 * time.Hour, "168h": 7 * 24 * time.Hour}

func (c *Console) pause(w http.ResponseWriter, r *http.Request, who caller, b *Backend) {
	tenant := r.PathValue("tenant")
	if b.Plans == nil {
		c.message(w, r, http.StatusConflict, "No state bucket", "Pauses live in the state bucket, which this replica could not open: see its log.")
		return
	}
	v := r.PostForm.Get("for")
	d, ok := pauseDurations[v]
	if !ok {
		var err error
		if d, err = time.ParseDuration(v); err != nil || d <= 0 || d > 365*24*time.Hour {
			c.message(w, r, http.StatusBadRequest, "Bad pause", fmt.Sprintf("A pause lasts a positive duration of at most a year (5m, 1h30m), got %q.", v))
			return
		}
	}
	until := c.cfg.Now().Add(d).UTC().Truncate(time.Second)
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	err := b.Plans.Pause(ctx, tenant, until, "console: "+who.Who())
	c.logAction(who, "pause", err, "tenant", tenant, "until", until.Format(time.RFC3339))
	if err != nil {
		c.message(w, r, http.StatusBadRequest, "Not paused", err.Error())
		return
	}
	c.back2(w, r, tenant, url.Values{"done": {"paused"}, "tenant": {tenant}, "until": {until.Format(time.RFC3339)}})
}

func (c *Console) resume(w http.ResponseWriter, r *http.Request, who caller, b *Backend) {
	tenant := r.PathValue("tenant")
	if b.Plans == nil {
		c.message(w, r, http.StatusConflict, "No state bucket", "Pauses live in the state bucket, which this replica could not open: see its log.")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	err := b.Plans.Resume(ctx, tenant)
	c.logAction(who, "resume", err, "tenant", tenant)
	if err != nil {
		c.message(w, r, http.StatusBadRequest, "Not resumed", err.Error())
		return
	}
	c.back2(w, r, tenant, url.Values{"done": {"resumed"}, "tenant": {tenant}})
}

func (c *Console) movePlan(w http.ResponseWriter, r *http.Request, who caller, b *Backend) {
	tenant := r.PathValue("tenant")
	if b.Plans == nil {
		c.message(w, r, http.StatusConflict, "No state bucket", "Overrides live in the state bucket, which this replica could not open: see its log.")
		return
	}
	plan := r.PostForm.Get("plan")
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	var err error
	if plan == "" {
		err = b.Plans.Unset(ctx, tenant)
	} else if _, ok := b.Policy.Plans().Plan(plan); !ok {
		err = fmt.Errorf("plan %q is not defined (the plans in force define %s)", plan, strings.Join(b.Policy.Plans().Names(), ", "))
	} else {
		err = b.Plans.Set(ctx, tenant, plan, "console: "+who.Who())
	}
	c.logAction(who, "move", err, "tenant", tenant, "plan", plan)
	if err != nil {
		c.message(w, r, http.StatusBadRequest, "Not moved", err.Error())
		return
	}
	c.back2(w, r, tenant, url.Values{"done": {"moved"}, "tenant": {tenant}, "plan": {plan}})
}

// back2 redirects to the tenant's page after an action, saying what was done.
func (c *Console) back2(w http.ResponseWriter, r *http.Request, tenant string, v url.Values) {
	http.Redirect(w, r, Prefix+"tenants/"+url.PathEscape(tenant)+"?"+v.Encode(), http.StatusSeeOther)
}

type replayData struct {
	Results []deadletter.Result
	DryRun  bool
	What    string
}

// replay replays the selected dead letters (seq, repeated), or all those listed for a code
// and/or a tenant (code, tenant), at most deadletter.DefaultScan looked through.
func (c *Console) replay(w http.ResponseWriter, r *http.Request, who caller, b *Backend) {
	if b.Dead == nil {
		c.message(w, r, http.StatusConflict, "No dead letters", errNoDead.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 9*time.Second)
	defer cancel()
	var seqs []uint64
	what := ""
	if vals := r.PostForm["seq"]; len(vals) > 0 {
		for _, v := range vals {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				c.message(w, r, http.StatusBadRequest, "Bad request", fmt.Sprintf("%q is not a sequence number.", v))
				return
			}
			seqs = append(seqs, n)
		}
		what = fmt.Sprintf("sequences %v", seqs)
	} else {
		code, tenant := r.PostForm.Get("code"), strings.TrimSpace(r.PostForm.Get("tenant"))
		if code == "" && tenant == "" {
			c.message(w, r, http.StatusBadRequest, "Nothing selected", "Select dead letters, or a code or a tenant, to replay.")
			return
		}
		letters, _, err := b.Dead.List(ctx, deadletter.Filter{Code: wire.Code(code), Tenant: tenant, Limit: deadletter.DefaultScan})
		if err != nil {
			c.message(w, r, http.StatusBadGateway, "Not replayed", err.Error())
			return
		}
		for i := len(letters) - 1; i >= 0; i-- { // oldest first: the order they came in
			if letters[i].Replay == nil {
				seqs = append(seqs, letters[i].Seq)
			}
		}
		what = fmt.Sprintf("all of code %q tenant %q (%d)", code, tenant, len(seqs))
	}
	slices.Sort(seqs)
	seqs = slices.Compact(seqs)
	dry := r.PostForm.Get("dry_run") != ""
	res := b.Dead.Replay(ctx, seqs, "console: "+who.Who(), dry)
	counts := map[deadletter.Outcome]int{}
	for _, x := range res {
		counts[x.Outcome]++
	}
	c.logAction(who, "replay", nil, "what", what, "dry_run", dry, "replayed", counts[deadletter.Replayed],
		"already", counts[deadletter.AlreadyDone], "not_replayable", counts[deadletter.NotReplayable], "failed", counts[deadletter.Failed])
	c.render(w, r, http.StatusOK, "replayed", page{Title: "Replay", Nav: "dead", Caller: who, Data: replayData{Results: res, DryRun: dry, What: what}})
}

// logAction logs one action with who asked and what became of it.
func (c *Console) logAction(who caller, action string, err error, args ...any) {
	args = append([]any{"action", action, "who", who.Who()}, args...)
	if err != nil {
		c.log.Warn("console action failed", append(args, "err", err)...)
		return
	}
	c.log.Info("console action", args...)
}
