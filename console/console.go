// Package console is the admitter's web console: the pages an operator keeps open, served by
// the admitter itself under /console/ on ADMITTER_HTTP_ADDR. Overview (the replica's decisions
// per second, jobs waiting, the consumer's backlog, Redis and NATS, the replicas), Tenants (one
// row per tenant with activity, sortable, filterable, paged), a tenant (every limit now, why a
// new job would wait, its recent waits and dead letters, pause/resume and move-to-plan), and
// Dead letters (by code and tenant, with their headers, replayed exactly once).
//
// The overview, tenants and tenant pages show every live replica's decisions: this replica's
// from memory, the others' as they answer a NATS request for their activity share within a
// bound (Shares, share.go), each labelled with the replica that decided it; a replica that did
// not answer is named on the page (a partial view), never left out in silence.
//
// Pages are rendered on the server with html/template from templates embedded in the binary;
// the tables work without script, and a small script refreshes the live parts. It reads: the
// activity index (package activity) and the other replicas' shares, the policy (plans,
// pauses, Inspect), the queue's status, and the dead stream (package deadletter). It acts only
// through the state bucket (package plansource) and deadletter's Replay, and only for a caller
// holding ADMITTER_CONSOLE_TOKEN; every action is logged, and recorded with the pause or
// override, with who asked.
package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/admitter/admitter/activity"
	"github.com/admitter/admitter/admission"
	"github.com/admitter/admitter/bucket"
	"github.com/admitter/admitter/deadletter"
	"github.com/admitter/admitter/policy"
	"github.com/admitter/admitter/wire"
)

//go:embed web
var webFS embed.FS

// Prefix is where the console is served.
const Prefix = "/console/"

// Queue is what the console reads of the queue; *admission.Service implements it.
type Queue interface {
	Status(ctx context.Context) admission.Status
	Waiting(ctx context.Context) (map[string]uint64, error)
	QueueOf(ctx context.Context, tenant string) admission.TenantQueue
}

// PlanControl changes tenants' plans and pauses, saying who asked (by); *plansource.State
// implements it. Set does not check the plan: the console does, against the plans in force.
type PlanControl interface {
	Set(ctx context.Context, tenant, plan, by string) error
	Unset(ctx context.Context, tenant string) error
	Pause(ctx context.Context, tenant string, until time.Time, by string) error
	Resume(ctx context.Context, tenant string) error
}

// DeadLetters reads and replays dead letters; *deadletter.Store implements it.
type DeadLetters interface {
	List(ctx context.Context, f deadletter.Filter) ([]deadletter.Letter, deadletter.Stats, error)
	Get(ctx context.Context, seq uint64) (deadletter.Letter, []byte, error)
	Replay(ctx context.Context, seqs []uint64, by string, dryRun bool) []deadletter.Result
}

var _ Queue = (*admission.Service)(nil)

// PlansReport is where the plans in force come from and how their latest changes went.
type PlansReport struct {
	// Source says where the document was read ("file /etc/admitter/plans.yaml", "kv bucket
	// plans"), Revision its revision (0 for a file), State the state bucket and its revision.
	Source   string
	Revision uint64
	State    string
	// Applied is when a new version was last applied and Changes what it changed (zero: none
	// since the replica started).
	Applied time.Time
	Changes []string
	// Refused is when a version was last refused and Why (zero: none since start).
	Refused time.Time
	Why     string
	// Ignored is what of the per-tenant state is not applied, and why.
	Ignored []string
}

// Backend is what the console shows and acts on, once the service runs.
type Backend struct {
	Activity *activity.Index // required
	Policy   *policy.Policy  // required
	Queue    Queue           // required
	// Dead is nil when the dead letters cannot be read; Plans nil when the state bucket cannot
	// be opened (then there are no pause, resume or move controls).
	Dead  DeadLetters
	Plans PlanControl
	// Shares asks the other live replicas for their activity (see StartShares); nil: the pages
	// show this replica's activity only, and say that the others' is missing.
	Shares *Shares
	// PlansReport says how this replica's plans changed lately; nil: not shown.
	PlansReport func() PlansReport
	// PoolHistory is what this replica saw of a pool lately, a state a second, oldest first
	// (admission.Service.PoolHistory); nil: no chart of an adaptive pool's limit.
	PoolHistory func(pool string) ([]time.Time, []bucket.PoolState)
}

// Config is what a Console needs from the start.
type Config struct {
	// ActToken is ADMITTER_CONSOLE_TOKEN: when empty, the console is read-only (no controls,
	// actions answer 403).
	ActToken string
	// ReadToken is ADMITTER_HTTP_TOKEN: when set, reading needs it (or ActToken) too.
	ReadToken string
	// Logger receives every action with who asked (default slog.Default()).
	Logger *slog.Logger
	// Now reads the clock (default time.Now).
	Now func() time.Time
	// Starting says why the service is not running yet, until Attach.
	Starting func(context.Context) error
}

// Console serves the pages. Create it with New; it answers 503 with the reason until Attach.
type Console struct {
	cfg     Config
	auth    *auth
	log     *slog.Logger
	back    atomic.Pointer[Backend]
	pages   map[string]*template.Template
	mux     *http.ServeMux
	waiting cache[map[string]uint64]
}

// New parses the templates and returns a console.
func New(c Config) (*Console, error) {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	con := &Console{cfg: c, auth: newAuth(c.ActToken, c.ReadToken), log: c.Logger, pages: map[string]*template.Template{}}
	for _, p := range []string{"overview", "tenants", "tenant", "dead", "letter", "replayed", "login", "message"} {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(webFS, "web/layout.html", "web/"+p+".html")
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", p, err)
		}
		con.pages[p] = t
	}
	static, _ := fs.Sub(webFS, "web/static")
	m := http.NewServeMux()
	m.Handle("GET "+Prefix+"static/", http.StripPrefix(Prefix+"static/", staticHandler(http.FileServerFS(static))))
	m.HandleFunc("GET "+Prefix+"{$}", con.read(con.overview))
	m.HandleFunc("GET "+Prefix+"tenants", con.read(con.tenants))
	m.HandleFunc("GET "+Prefix+"tenants/{tenant}", con.read(con.tenant))
	m.HandleFunc("GET "+Prefix+"dead", con.read(con.dead))
	m.HandleFunc("GET "+Prefix+"dead/{seq}", con.read(con.letter))
	m.HandleFunc("POST "+Prefix+"tenants/{tenant}/pause", con.act(con.pause))
	m.HandleFunc("POST "+Prefix+"tenants/{tenant}/resume", con.act(con.resume))
	m.HandleFunc("POST "+Prefix+"tenants/{tenant}/plan", con.act(con.movePlan))
	m.HandleFunc("POST "+Prefix+"dead/replay", con.act(con.replay))
	m.HandleFunc("GET "+Prefix+"login", con.loginForm)
	m.HandleFunc("POST "+Prefix+"login", con.login)
	m.HandleFunc("POST "+Prefix+"logout", con.logout)
	m.HandleFunc(Prefix, func(w http.ResponseWriter, r *http.Request) {
		con.message(w, r, http.StatusNotFound, "Not found", "There is no such page of the console.")
	})
	con.mux = m
	return con, nil
}

// Attach gives the console the running service: from now on it shows it.
func (c *Console) Attach(b *Backend) { c.back.Store(b) }

// ServeHTTP serves the console's pages under Prefix.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	c.mux.ServeHTTP(w, r)
}

func staticHandler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=300")
		h.ServeHTTP(w, r)
	})
}

// page is what every page's template gets.
type page struct {
	Title, Nav string
	Caller     caller
	CanAct     bool   // ADMITTER_CONSOLE_TOKEN is set
	Operator   bool   // the caller may act
	Plans      bool   // the state bucket is open: pause/move controls
	Replica    string // this replica's name, when it shares ("" otherwise)
	Now        time.Time
	Flash      string
	Data       any
}

func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	p.Now = c.cfg.Now()
	if p.Caller.addr == "" {
		p.Caller = c.auth.identify(r, p.Now)
	}
	p.CanAct = c.auth.canAct()
	p.Operator = p.Caller.role == operator
	if b := c.back.Load(); b != nil {
		p.Plans = b.Plans != nil
		if b.Shares != nil {
			p.Replica = b.Shares.Replica()
		}
	}
	if p.Flash == "" {
		p.Flash = flash(r.URL.Query())
	}
	var buf strings.Builder
	if err := c.pages[name].ExecuteTemplate(&buf, "layout.html", p); err != nil {
		c.log.Error("console: render", "page", name, "err", err)
		http.Error(w, "console: render "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(buf.String()))
}

func (c *Console) message(w http.ResponseWriter, r *http.Request, status int, title, text string) {
	c.render(w, r, status, "message", page{Title: title, Data: text})
}

// read wraps a page: the caller must be allowed to read, and the service must run.
func (c *Console) read(h func(http.ResponseWriter, *http.Request, caller, *Backend)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		who := c.auth.identify(r, c.cfg.Now())
		if who.role == nobody {
			if r.Header.Get("Authorization") != "" {
				w.Header().Set("WWW-Authenticate", `Bearer realm="admitter"`)
				c.message(w, r, http.StatusUnauthorized, "Unauthorized", "This token does not open the console.")
				return
			}
			http.Redirect(w, r, Prefix+"login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		b := c.back.Load()
		if b == nil {
			why := "starting"
			if c.cfg.Starting != nil {
				if err := c.cfg.Starting(r.Context()); err != nil {
					why = err.Error()
				}
			}
			w.Header().Set("Retry-After", "1")
			c.message(w, r, http.StatusServiceUnavailable, "Starting", "The admitter is not running yet: "+why+".")
			return
		}
		h(w, r, who, b)
	}
}

// act wraps an action: ADMITTER_CONSOLE_TOKEN must be set and held (a bearer token, or a
// session whose form token comes back), and the service must run. Every action is logged by
// the handler with the caller's Who.
func (c *Console) act(h func(http.ResponseWriter, *http.Request, caller, *Backend)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !c.auth.canAct() {
			c.log.Warn("console: action refused: ADMITTER_CONSOLE_TOKEN is unset", "path", r.URL.Path, "addr", r.RemoteAddr)
			c.message(w, r, http.StatusForbidden, "Read-only", "The console is read-only: set ADMITTER_CONSOLE_TOKEN to enable its actions.")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
		if err := r.ParseForm(); err != nil {
			c.message(w, r, http.StatusBadRequest, "Bad request", "The form could not be read: "+err.Error())
			return
		}
		who := c.auth.identify(r, c.cfg.Now())
		switch {
		case who.role != operator:
			c.log.Warn("console: action refused: not signed in with ADMITTER_CONSOLE_TOKEN", "path", r.URL.Path, "who", who.Who())
			c.message(w, r, http.StatusForbidden, "Forbidden", "This action needs ADMITTER_CONSOLE_TOKEN: sign in with it, or send it as a bearer token.")
			return
		case who.via == "cookie" && !validCSRF(r.PostForm.Get("csrf"), who.csrf):
			c.log.Warn("console: action refused: the form token is missing or wrong", "path", r.URL.Path, "who", who.Who())
			c.message(w, r, http.StatusForbidden, "Forbidden", "The form is stale: reload the page and try again.")
			return
		}
		b := c.back.Load()
		if b == nil {
			c.message(w, r, http.StatusServiceUnavailable, "Starting", "The admitter is not running yet.")
			return
		}
		h(w, r, who, b)
	}
}

func validCSRF(got, want string) bool {
	return got != "" && want != "" && len(got) == len(want) && strings.Compare(got, want) == 0
}

// flash is the message a redirect after an action asks the next page to show.
func flash(q url.Values) string {
	t := q.Get("tenant")
	switch q.Get("done") {
	case "paused":
		return "Paused " + t + " until " + q.Get("until") + "."
	case "resumed":
		return "Resumed " + t + "."
	case "moved":
		if p := q.Get("plan"); p != "" {
			return "Moved " + t + " to plan " + p + "."
		}
		return t + " is back on the document's plan."
	case "signedin":
		return "Signed in."
	case "signedout":
		return "Signed out."
	}
	return ""
}

func (c *Console) loginForm(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, http.StatusOK, "login", page{Title: "Sign in", Data: loginData{Next: safeNext(r.URL.Query().Get("next"))}})
}

type loginData struct {
	Next, Error, Name string
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		c.message(w, r, http.StatusBadRequest, "Bad request", "The form could not be read.")
		return
	}
	name, next := cleanName(r.PostForm.Get("name")), safeNext(r.PostForm.Get("next"))
	rl := c.auth.roleOf(r.PostForm.Get("token"))
	if rl == nobody {
		c.log.Warn("console: sign-in refused", "name", name, "addr", r.RemoteAddr)
		c.render(w, r, http.StatusUnauthorized, "login", page{Title: "Sign in", Data: loginData{Next: next, Name: name, Error: "That token opens nothing here."}})
		return
	}
	now := c.cfg.Now()
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: c.auth.session(rl, name, now), Path: Prefix, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil, Expires: now.Add(sessionTTL)})
	c.log.Info("console: signed in", "who", name, "operator", rl == operator, "addr", r.RemoteAddr)
	sep := "?"
	if strings.Contains(next, "?") {
		sep = "&"
	}
	http.Redirect(w, r, next+sep+"done=signedin", http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: Prefix, MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, Prefix+"?done=signedout", http.StatusSeeOther)
}

// safeNext keeps a redirect target within the console.
func safeNext(s string) string {
	if !strings.HasPrefix(s, Prefix) || strings.HasPrefix(s, "//") || strings.ContainsAny(s, "\\\r\n") {
		return Prefix
	}
	return s
}

// cache holds one value computed at most every ttl, shared by concurrent readers.
type cache[T any] struct {
	v atomic.Pointer[cached[T]]
}

type cached[T any] struct {
	at  time.Time
	val T
	err error
}

func (c *cache[T]) get(now time.Time, ttl time.Duration, f func() (T, error)) (T, error) {
	if p := c.v.Load(); p != nil && now.Sub(p.at) < ttl {
		return p.val, p.err
	}
	v, err := f()
	c.v.Store(&cached[T]{at: now, val: v, err: err})
	return v, err
}

// planRate is the plan's rate in weight per second as the console compares tenants against
// it: its slowest bucket (a bucket paces), else its slowest limit.
func planRate(p *bucket.Plan) float64 {
	rate := 0.0
	for _, l := range p.Limits {
		if l.Kind == bucket.KindBucket && (rate == 0 || l.PerSecond() < rate) {
			rate = l.PerSecond()
		}
	}
	if rate > 0 {
		return rate
	}
	for _, l := range p.Limits {
		if rate == 0 || l.PerSecond() < rate {
			rate = l.PerSecond()
		}
	}
	return rate
}

// weightParam reads the weight of the tenant page's question (default 1).
func weightParam(s string) (int64, error) {
	if s == "" {
		return 1, nil
	}
	w, err := strconv.ParseInt(s, 10, 64)
	if err != nil || w < 1 || w > wire.MaxWeight {
		return 0, fmt.Errorf("the weight must be an integer from 1 to %d, got %q", int64(wire.MaxWeight), s)
	}
	return w, nil
}

var errNoDead = errors.New("the dead letters cannot be read here")
