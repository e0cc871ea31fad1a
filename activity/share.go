package activity

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"time"

	"github.com/admitter/admitter/wire"
)

// A replica's share is what it tells another replica's console of its recent activity: its
// series for the overview, its tenants for the tenants page, or one tenant and its waits for
// that tenant's page. Index.Share takes it from memory; AppendJSON writes it, bounded, as the
// JSON message one replica sends another (ParseShare reads it back). The message is small
// whatever the number of tenants: ShareTenants tenants at most, the ones seen most recently,
// and never more than ShareBytes; a share that leaves tenants out says so (Truncated, Total).
//
// The JSON (version 1), every time in Unix nanoseconds, every duration in nanoseconds:
//
//	{"v":1, "replica":"r2", "at_ns":…, "want":"overview"|"tenants"|"tenant",
//	 "series":[[second, n0, …, n7], …],   overview: the seconds with a decision, oldest first;
//	                                       n by wire.Fate (admitted, degraded, …, stored)
//	 "tenants":[{"tenant":"bob", "plan":"five", "last_ns":…, "weight":…, "admitted":…,
//	             "delayed":…, "dead":…, "latest":{wait}}, …],
//	 "total":1234, "truncated":true,      tenants: most recently seen first
//	 "waits":[{wait}, …]}                 tenant: its recent waits, newest first
//
// where a {wait} is {"at_ns":…, "fate":"delayed", "again":true, "weight":…, "wait_ns":…,
// "limit":"burst", "count":37, "first_ns":…} (zero fields left out; count and first_ns only for
// a run of identical waits, Wait.Count > 1, at_ns being its latest). A refusal is {"v":1, "replica":…, "at_ns":…,
// "error":"why"}. Readers ignore fields they do not know.

// Version and bounds of a share.
const (
	// ShareVersion is the version of the share's JSON written and read here.
	ShareVersion = 1
	// ShareSeconds is how many seconds of the replica's series an overview share carries (the
	// overview's chart spans 5 minutes).
	ShareSeconds = 300
	// ShareTenants is how many tenants a tenants share lists at most: those seen most
	// recently.
	ShareTenants = 1000
	// ShareBytes bounds a share's JSON: the tenants that would take it past are left out (a
	// tenant takes about 200 bytes, so ShareTenants of them fit unless their names are long).
	ShareBytes = 256 << 10
	// ShareRequestBytes bounds a request's JSON.
	ShareRequestBytes = 4 << 10
)

// A Want is what a share carries.
type Want uint8

const (
	// WantOverview: the replica's decisions per second over the last ShareSeconds.
	WantOverview Want = iota + 1
	// WantTenants: the tenants it saw within Retention, most recently seen first.
	WantTenants
	// WantTenant: one tenant (if seen within Retention) and its recent waits.
	WantTenant
)

var wantNames = [...]string{WantOverview: "overview", WantTenants: "tenants", WantTenant: "tenant"}

func (w Want) String() string {
	if int(w) < len(wantNames) && wantNames[w] != "" {
		return wantNames[w]
	}
	return "want(" + strconv.Itoa(int(w)) + ")"
}

func parseWant(s string) (Want, bool) {
	for w, name := range wantNames {
		if name != "" && name == s {
			return Want(w), true
		}
	}
	return 0, false
}

// A ShareRequest asks a replica for its share.
type ShareRequest struct {
	Want Want
	// Tenant is whose activity a WantTenant request asks for ("" for the others).
	Tenant string
}

type requestJSON struct {
	V      *int    `json:"v"`
	Want   *string `json:"want"`
	Tenant *string `json:"tenant,omitempty"`
}

// AppendJSON appends the request's JSON: {"v":1,"want":"tenant","tenant":"bob"}.
func (r ShareRequest) AppendJSON(b []byte) []byte {
	v, want := ShareVersion, r.Want.String()
	j := requestJSON{V: &v, Want: &want}
	if r.Tenant != "" {
		j.Tenant = &r.Tenant
	}
	out, _ := json.Marshal(j) // strings and an int always encode
	return append(b, out...)
}

// ParseShareRequest reads a request's JSON. Every refusal wraps ErrBadShareRequest and says
// what is wrong.
func ParseShareRequest(data []byte) (ShareRequest, error) {
	bad := func(format string, args ...any) (ShareRequest, error) {
		return ShareRequest{}, fmt.Errorf("%w: "+format, append([]any{ErrBadShareRequest}, args...)...)
	}
	if len(data) > ShareRequestBytes {
		return bad("%d bytes, more than the %d a request may have", len(data), ShareRequestBytes)
	}
	var j requestJSON
	if err := decodeJSON(data, &j); err != nil {
		return bad("%v", err)
	}
	if err := checkVersion(j.V); err != nil {
		return bad("%v", err)
	}
	if j.Want == nil {
		return bad(`no "want": overview, tenants or tenant`)
	}
	w, ok := parseWant(*j.Want)
	if !ok {
		return bad(`want %s: overview, tenants or tenant`, quote(*j.Want))
	}
	r := ShareRequest{Want: w}
	switch {
	case w == WantTenant && (j.Tenant == nil || *j.Tenant == ""):
		return bad(`want "tenant" without a tenant`)
	case w != WantTenant && j.Tenant != nil:
		return bad(`a tenant (%s) with want %q: only want "tenant" names one`, quote(*j.Tenant), w)
	case w == WantTenant:
		r.Tenant = *j.Tenant
	}
	return r, nil
}

// A Share is a replica's recent activity (see the package's share documentation).
type Share struct {
	// Replica is the replica's name, At when it took the share (its clock).
	Replica string
	At      time.Time
	Want    Want
	// Series (WantOverview) is the replica's counts of the ShareSeconds seconds before At's
	// second, oldest first, seconds without a decision included.
	Series []Second
	// Tenants (WantTenants) are the tenants it saw within Retention, most recently seen
	// first; (WantTenant) the tenant asked for, if it saw it.
	Tenants []Tenant
	// Total (WantTenants) is how many tenants it saw within Retention; Truncated: some of
	// them (Total - len(Tenants)) were left out to keep the share within its bounds.
	Total     int
	Truncated bool
	// Waits (WantTenant) are the tenant's recent waits, newest first.
	Waits []Wait
}

// Share returns this index's share for r as replica, at now, with every tenant it keeps (the
// bounds apply when it is written: AppendJSON).
func (x *Index) Share(replica string, r ShareRequest, now time.Time) Share {
	s := Share{Replica: replica, At: now, Want: r.Want}
	switch r.Want {
	case WantOverview:
		s.Series = x.Series(now, ShareSeconds)
	case WantTenants:
		s.Tenants = x.Tenants(now)
		slices.SortFunc(s.Tenants, func(a, b Tenant) int {
			return cmp.Or(b.LastSeen.Compare(a.LastSeen), cmp.Compare(a.Tenant, b.Tenant))
		})
		s.Total = len(s.Tenants)
	case WantTenant:
		if v, waits, ok := x.Tenant(r.Tenant, now); ok {
			s.Tenants, s.Waits = []Tenant{v}, waits
		}
	}
	return s
}

type tenantJSON struct {
	Tenant   string   `json:"tenant"`
	Plan     string   `json:"plan,omitempty"`
	LastNs   int64    `json:"last_ns"`
	Weight   int64    `json:"weight,omitempty"`
	Admitted int64    `json:"admitted,omitempty"`
	Delayed  int64    `json:"delayed,omitempty"`
	Dead     int64    `json:"dead,omitempty"`
	Latest   waitJSON `json:"latest"`
}

type waitJSON struct {
	AtNs   int64  `json:"at_ns"`
	Fate   string `json:"fate"`
	Again  bool   `json:"again,omitempty"`
	Weight int64  `json:"weight,omitempty"`
	WaitNs int64  `json:"wait_ns,omitempty"`
	Limit  string `json:"limit,omitempty"`
	// A run's: absent, a single wait (a share of an earlier version has neither).
	Count   int   `json:"count,omitempty"`
	FirstNs int64 `json:"first_ns,omitempty"`
}

func toWaitJSON(w Wait) waitJSON {
	j := waitJSON{AtNs: w.At.UnixNano(), Fate: w.Fate.String(), Again: w.Again, Weight: w.Weight, WaitNs: int64(w.Wait), Limit: w.Limit}
	if w.Count > 1 {
		j.Count, j.FirstNs = w.Count, w.First.UnixNano()
	}
	return j
}

// tail is room kept for what follows the tenants: `],"total":<int>,"truncated":true}`.
const tail = 64

// AppendJSON appends the share's JSON, within the bounds: for WantTenants at most ShareTenants
// tenants, in the order given, and Total (at least the tenants given); for WantTenant one
// tenant and RecentWaits waits. A tenant or wait that would take the message past ShareBytes
// is left out, and the message then says Truncated. The share's seconds outside the
// ShareSeconds before At are left out. The message stays within ShareBytes as long as the
// replica's name is shorter than 1 KiB.
func (s *Share) AppendJSON(b []byte) []byte {
	start := len(b)
	fits := func(enc []byte) bool { return len(b)-start+len(enc)+1+tail <= ShareBytes }
	b = appendHead(b, s.Replica, s.At)
	b = append(b, `,"want":`...)
	b = appendString(b, s.Want.String())
	truncated := s.Truncated
	switch s.Want {
	case WantOverview:
		end := s.At.Unix()
		b = append(b, `,"series":[`...)
		first := true
		for _, sec := range s.Series {
			at := sec.At.Unix()
			if at < end-ShareSeconds || at >= end || sec.Jobs == ([wire.NumFates]int64{}) {
				continue
			}
			if !first {
				b = append(b, ',')
			}
			first = false
			b = append(b, '[')
			b = strconv.AppendInt(b, at, 10)
			for _, n := range sec.Jobs {
				b = append(b, ',')
				b = strconv.AppendInt(b, n, 10)
			}
			b = append(b, ']')
		}
		b = append(b, ']')
	case WantTenants, WantTenant:
		most := ShareTenants
		if s.Want == WantTenant {
			most = 1
		}
		listed := 0
		b = append(b, `,"tenants":[`...)
		for _, t := range s.Tenants[:min(len(s.Tenants), most)] {
			enc, _ := json.Marshal(tenantJSON{Tenant: t.Tenant, Plan: t.Plan, LastNs: t.LastSeen.UnixNano(), Weight: t.AdmittedWeight,
				Admitted: t.Admitted, Delayed: t.Delayed, Dead: t.Dead, Latest: toWaitJSON(t.Latest)})
			if !fits(enc) {
				break
			}
			if listed > 0 {
				b = append(b, ',')
			}
			b = append(b, enc...)
			listed++
		}
		b = append(b, ']')
		if s.Want == WantTenants {
			total := max(s.Total, len(s.Tenants))
			truncated = listed < total
			b = append(b, `,"total":`...)
			b = strconv.AppendInt(b, int64(total), 10)
			break
		}
		truncated = truncated || listed < len(s.Tenants)
		b = append(b, `,"waits":[`...)
		for i, w := range s.Waits[:min(len(s.Waits), RecentWaits)] {
			enc, _ := json.Marshal(toWaitJSON(w))
			if !fits(enc) {
				truncated = true
				break
			}
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, enc...)
		}
		b = append(b, ']')
	}
	if truncated {
		b = append(b, `,"truncated":true`...)
	}
	return append(b, '}')
}

// AppendRefusal appends the JSON of a refusal: replica could not answer a request, because of
// why (one line).
func AppendRefusal(b []byte, replica string, at time.Time, why string) []byte {
	b = appendHead(b, replica, at)
	b = append(b, `,"error":`...)
	b = appendString(b, why)
	return append(b, '}')
}

func appendHead(b []byte, replica string, at time.Time) []byte {
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, ShareVersion, 10)
	b = append(b, `,"replica":`...)
	b = appendString(b, replica)
	b = append(b, `,"at_ns":`...)
	return strconv.AppendInt(b, at.UnixNano(), 10)
}

func appendString(b []byte, s string) []byte {
	enc, _ := json.Marshal(s) // a string always encodes
	return append(b, enc...)
}

type shareJSON struct {
	V         *int         `json:"v"`
	Replica   string       `json:"replica"`
	AtNs      int64        `json:"at_ns"`
	Want      string       `json:"want"`
	Error     *string      `json:"error"`
	Series    [][]int64    `json:"series"`
	Tenants   []tenantJSON `json:"tenants"`
	Total     int          `json:"total"`
	Truncated bool         `json:"truncated"`
	Waits     []waitJSON   `json:"waits"`
}

// MaxReplicaName bounds a replica's name in a share.
const MaxReplicaName = 256

// ParseShare reads a share's JSON. A refusal is an error wrapping ErrShareRefused, with the
// replica's reason; anything else that is not a valid share is an error wrapping ErrBadShare
// that says what is wrong, and where (the field, the tenant's index and name).
func ParseShare(data []byte) (Share, error) {
	bad := func(format string, args ...any) (Share, error) {
		return Share{}, fmt.Errorf("%w: "+format, append([]any{ErrBadShare}, args...)...)
	}
	if len(data) > ShareBytes {
		return bad("%d bytes, more than the %d a share may have", len(data), ShareBytes)
	}
	var j shareJSON
	if err := decodeJSON(data, &j); err != nil {
		return bad("%v", err)
	}
	if err := checkVersion(j.V); err != nil {
		return bad("%v", err)
	}
	switch {
	case j.Replica == "":
		return bad(`no "replica"`)
	case len(j.Replica) > MaxReplicaName:
		return bad("replica name of %d bytes, more than %d", len(j.Replica), MaxReplicaName)
	case j.AtNs <= 0:
		return bad("at_ns %d is not a time", j.AtNs)
	}
	if j.Error != nil {
		return Share{}, fmt.Errorf("%w: replica %s: %s", ErrShareRefused, j.Replica, *j.Error)
	}
	w, ok := parseWant(j.Want)
	if !ok {
		return bad("want %s: overview, tenants or tenant", quote(j.Want))
	}
	s := Share{Replica: j.Replica, At: time.Unix(0, j.AtNs), Want: w}
	switch {
	case w != WantOverview && j.Series != nil:
		return bad("series in a share of want %q: only overview has them", w)
	case w != WantTenants && j.Total != 0:
		return bad("total in a share of want %q: only tenants has it", w)
	case w != WantTenant && j.Waits != nil:
		return bad("waits in a share of want %q: only tenant has them", w)
	case w == WantOverview && j.Tenants != nil:
		return bad(`tenants in a share of want "overview"`)
	case w == WantTenant && len(j.Tenants) > 1:
		return bad(`%d tenants in a share of want "tenant": at most one`, len(j.Tenants))
	case len(j.Tenants) > ShareTenants:
		return bad("%d tenants, more than the %d a share lists", len(j.Tenants), ShareTenants)
	case len(j.Waits) > RecentWaits:
		return bad("%d waits, more than the %d a share lists", len(j.Waits), RecentWaits)
	case w == WantTenants && j.Total < len(j.Tenants):
		return bad("total %d is less than the %d tenants listed", j.Total, len(j.Tenants))
	case w == WantTenants && j.Truncated != (j.Total > len(j.Tenants)):
		return bad("truncated is %v with %d of %d tenants listed", j.Truncated, len(j.Tenants), j.Total)
	}
	s.Truncated, s.Total = j.Truncated, j.Total
	if w == WantOverview {
		var err error
		if s.Series, err = parseSeries(j.Series, s.At.Unix()); err != nil {
			return bad("%v", err)
		}
	}
	if w != WantOverview {
		s.Tenants = make([]Tenant, len(j.Tenants))
	}
	seen := make(map[string]bool, len(j.Tenants))
	for i, t := range j.Tenants {
		where := fmt.Sprintf("tenant %d (%s)", i, quote(t.Tenant))
		switch {
		case t.Tenant == "":
			return bad("tenant %d has no name", i)
		case seen[t.Tenant]:
			return bad("%s is listed twice", where)
		case t.LastNs <= 0:
			return bad("%s: last_ns %d is not a time", where, t.LastNs)
		case t.Weight < 0 || t.Admitted < 0 || t.Delayed < 0 || t.Dead < 0:
			return bad("%s: a negative count (weight %d, admitted %d, delayed %d, dead %d)", where, t.Weight, t.Admitted, t.Delayed, t.Dead)
		}
		seen[t.Tenant] = true
		latest, err := parseWait(t.Latest)
		if err != nil {
			return bad("%s: latest: %v", where, err)
		}
		s.Tenants[i] = Tenant{Tenant: t.Tenant, Plan: t.Plan, LastSeen: time.Unix(0, t.LastNs), AdmittedWeight: t.Weight,
			AdmittedPerSec: float64(t.Weight) / RateWindow.Seconds(), Admitted: t.Admitted, Delayed: t.Delayed, Dead: t.Dead, Latest: latest}
	}
	if w == WantTenant {
		s.Waits = make([]Wait, len(j.Waits))
	}
	for i, jw := range j.Waits {
		wt, err := parseWait(jw)
		if err != nil {
			return bad("wait %d: %v", i, err)
		}
		s.Waits[i] = wt
	}
	return s, nil
}

// parseSeries expands the wire's seconds with a decision into the ShareSeconds seconds
// before end (a Unix second), oldest first.
func parseSeries(in [][]int64, end int64) ([]Second, error) {
	if len(in) > ShareSeconds {
		return nil, fmt.Errorf("%d seconds in the series, more than %d", len(in), ShareSeconds)
	}
	out := make([]Second, ShareSeconds)
	from := end - ShareSeconds
	for i := range out {
		out[i].At = time.Unix(from+int64(i), 0)
	}
	prev := from - 1
	for i, sec := range in {
		if len(sec) != 1+int(wire.NumFates) {
			return nil, fmt.Errorf("series second %d has %d numbers, want %d (its Unix second, then a count per fate)", i, len(sec), 1+wire.NumFates)
		}
		at := sec[0]
		switch {
		case at < from || at >= end:
			return nil, fmt.Errorf("series second %d is %d, not within the %d seconds before at_ns (%d to %d)", i, at, ShareSeconds, from, end-1)
		case at <= prev:
			return nil, fmt.Errorf("series second %d is %d, not after the one before it (%d)", i, at, prev)
		}
		prev = at
		for f, n := range sec[1:] {
			if n < 0 {
				return nil, fmt.Errorf("series second %d: %s count %d is negative", i, wire.Fate(f), n)
			}
			out[at-from].Jobs[f] = n
		}
	}
	return out, nil
}

func parseWait(j waitJSON) (Wait, error) {
	f, ok := parseFate(j.Fate)
	switch {
	case !ok:
		return Wait{}, fmt.Errorf("fate %s is none of %s", quote(j.Fate), fateList)
	case j.AtNs <= 0:
		return Wait{}, fmt.Errorf("at_ns %d is not a time", j.AtNs)
	case j.Weight < 0:
		return Wait{}, fmt.Errorf("weight %d is negative", j.Weight)
	case j.WaitNs < 0:
		return Wait{}, fmt.Errorf("wait_ns %d is negative", j.WaitNs)
	case j.Count < 0:
		return Wait{}, fmt.Errorf("count %d is negative", j.Count)
	case j.Count <= 1 && j.FirstNs != 0:
		return Wait{}, fmt.Errorf("first_ns without a count above 1: only a run of waits has a first")
	case j.Count > 1 && (j.FirstNs <= 0 || j.FirstNs > j.AtNs):
		return Wait{}, fmt.Errorf("first_ns %d of a run of %d is not a time at or before at_ns %d", j.FirstNs, j.Count, j.AtNs)
	}
	w := Wait{At: time.Unix(0, j.AtNs), Fate: f, Again: j.Again, Weight: j.Weight, Wait: time.Duration(j.WaitNs), Limit: j.Limit, Count: 1}
	w.First = w.At
	if j.Count > 1 {
		w.Count, w.First = j.Count, time.Unix(0, j.FirstNs)
	}
	return w, nil
}

var fateList = func() string {
	var b []byte
	for f := range wire.NumFates {
		if f > 0 {
			b = append(b, ", "...)
		}
		b = append(b, f.String()...)
	}
	return string(b)
}()

func parseFate(s string) (wire.Fate, bool) {
	for f := range wire.NumFates {
		if f.String() == s {
			return f, true
		}
	}
	return 0, false
}

func checkVersion(v *int) error {
	switch {
	case v == nil:
		return errors.New(`no version ("v")`)
	case *v != ShareVersion:
		return fmt.Errorf("version %d: this replica reads version %d", *v, ShareVersion)
	}
	return nil
}

// decodeJSON reads exactly one JSON value into v, saying what is wrong in words and where.
func decodeJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		var syn *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.Is(err, io.EOF):
			return errors.New("no JSON value")
		case errors.Is(err, io.ErrUnexpectedEOF):
			return fmt.Errorf("the JSON ends early, at byte %d", len(data))
		case errors.As(err, &syn):
			return fmt.Errorf("malformed JSON after byte %d: %s", syn.Offset, syn.Error())
		case errors.As(err, &typ) && typ.Field == "":
			return fmt.Errorf("%s, ending at byte %d, where an object was expected", typ.Value, typ.Offset)
		case errors.As(err, &typ):
			return fmt.Errorf("field %q, ending at byte %d: %s where %s was expected", typ.Field, typ.Offset, typ.Value, kindName(typ.Type))
		}
		return fmt.Errorf("malformed JSON: %v", err)
	}
	if rest := bytes.TrimLeft(data[dec.InputOffset():], " \t\r\n"); len(rest) > 0 {
		return fmt.Errorf("more after the JSON value, at byte %d", len(data)-len(rest))
	}
	return nil
}

func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int64:
		return "an integer"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice:
		return "an array"
	case reflect.Struct:
		return "an object"
	case reflect.Pointer:
		return kindName(t.Elem())
	}
	return t.String()
}

// quote quotes s for an error message, shortened to 64 bytes.
func quote(s string) string {
	if len(s) > 64 {
		return strconv.Quote(s[:64]) + "…"
	}
	return strconv.Quote(s)
}
