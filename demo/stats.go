package demo

import (
	"math"
	"slices"
	"sync"
	"time"

	"github.com/admitter/admitter/bucket"
)

// tenantInfo is a tenant with its plan resolved.
type tenantInfo struct {
	Tenant
	plan     *bucket.Plan
	limit    int     // index of the binding limit over the run's duration
	rate     float64 // that limit's tokens per second
	capacity int64   // that limit's capacity
}

// newTenantInfo resolves t's plan; the binding limit is the one binding over duration.
func newTenantInfo(t Tenant, plan *bucket.Plan, duration time.Duration) tenantInfo {
	i := Binding(plan, duration)
	return tenantInfo{Tenant: t, plan: plan, limit: i, rate: plan.Limits[i].PerSecond(), capacity: plan.Limits[i].Capacity}
}

// arrival is one admitted job as seen downstream.
type arrival struct {
	at       time.Time // when the downstream consumer received it
	weight   int64
	attempts int64         // Admit-Attempts: the times it was asked about at the head of its queue
	delay    time.Duration // Admit-Delay-Ms
}

// tick is one admission in the last second.
type tick struct {
	at     time.Time
	weight int64
}

// tenantStats is what is known of one tenant's jobs. Jobs are identified by their input stream
// sequence: published ones from the PubAck, admitted and dead ones from the Nats-Msg-Id admitter
// derives from it. The same sequence seen twice downstream (a forward repeated after a crash)
// counts once.
type tenantStats struct {
	info            tenantInfo
	published       map[uint64]int64 // sequence → weight
	publishedTokens int64
	publishErrors   int64
	firstPublish    time.Time // when the first job was sent; zero before
	admitted        map[uint64]arrival
	dead            map[uint64]string // sequence → Admit-Error
	attempts        int64             // sum over admitted
	delays          []time.Duration   // of admitted, in arrival order
	recent          []tick            // admissions of the last second, oldest first
}

// Stats collects the demo's counts. All methods are safe for concurrent use; every time is
// passed in, so that tests need no clock.
type Stats struct {
	mu      sync.Mutex
	tenants []*tenantStats
	byName  map[string]*tenantStats
}

// newStats returns empty stats for tenants, in their order.
func newStats(tenants []tenantInfo) *Stats {
	s := &Stats{byName: make(map[string]*tenantStats, len(tenants))}
	for _, t := range tenants {
		ts := &tenantStats{info: t, published: map[uint64]int64{}, admitted: map[uint64]arrival{}, dead: map[uint64]string{}}
		s.tenants = append(s.tenants, ts)
		s.byName[t.Name] = ts
	}
	return s
}

// sent records that tenant's publisher sent a job at at (before its PubAck).
func (s *Stats) sent(tenant string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ts := s.byName[tenant]; ts != nil && ts.firstPublish.IsZero() {
		ts.firstPublish = at
	}
}

// published records a job stored on the input stream at sequence seq.
func (s *Stats) published(tenant string, seq uint64, weight int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ts := s.byName[tenant]; ts != nil {
		if _, dup := ts.published[seq]; !dup {
			ts.published[seq] = weight
			ts.publishedTokens += weight
		}
	}
}

// publishFailed records a job whose publish failed or was not acknowledged.
func (s *Stats) publishFailed(tenant string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ts := s.byName[tenant]; ts != nil {
		ts.publishErrors++
	}
}

// admittedJob records a job of input sequence seq received downstream at at. It reports false
// for an unknown tenant or a sequence already seen.
func (s *Stats) admittedJob(tenant string, seq uint64, a arrival) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ts := s.byName[tenant]
	if ts == nil {
		return false
	}
	if _, dup := ts.admitted[seq]; dup {
		return false
	}
	ts.admitted[seq] = a
	ts.attempts += a.attempts
	ts.delays = append(ts.delays, a.delay)
	ts.recent = append(ts.recent, tick{at: a.at, weight: a.weight})
	return true
}

// deadJob records a dead-lettered job of input sequence seq.
func (s *Stats) deadJob(tenant string, seq uint64, code string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ts := s.byName[tenant]; ts != nil {
		ts.dead[seq] = code
	}
}

// Row is one tenant's line of the live table.
type Row struct {
	Tenant, Plan, Profile string
	Published             int64 // jobs stored on the input stream (PubAck received)
	Admitted              int64 // jobs seen downstream
	Dead                  int64
	Waiting               int64 // Published − Admitted − Dead, never below 0
	JobsLastSecond        int64 // admitted in the last second
	TokensLastSecond      int64
	PlanRate              float64 // tokens/s of the binding limit
	Limit                 string  // the binding limit's label
	MeanAttempts          float64 // mean Admit-Attempts, attempts per admitted job; NaN when nothing was admitted
	P50, P99              time.Duration
}

// rows returns the live table at now. "The last second" is (now − 1s, now].
func (s *Stats) rows(now time.Time) []Row {
	s.mu.Lock()
	defer s.mu.Unlock()
	cutoff := now.Add(-time.Second)
	out := make([]Row, 0, len(s.tenants))
	for _, ts := range s.tenants {
		i := 0
		for i < len(ts.recent) && !ts.recent[i].at.After(cutoff) {
			i++
		}
		ts.recent = ts.recent[i:]
		r := Row{
			Tenant: ts.info.Name, Plan: ts.info.plan.Name, Profile: ts.info.Profile.String(),
			Published: int64(len(ts.published)), Admitted: int64(len(ts.admitted)), Dead: int64(len(ts.dead)),
			PlanRate: ts.info.rate, Limit: limitLabel(ts.info.plan, ts.info.limit),
			MeanAttempts: math.NaN(), P50: -1, P99: -1,
		}
		r.Waiting = max(r.Published-r.Admitted-r.Dead, 0)
		for _, t := range ts.recent {
			if !t.at.After(now) {
				r.JobsLastSecond++
				r.TokensLastSecond += t.weight
			}
		}
		if n := len(ts.delays); n > 0 {
			r.MeanAttempts = float64(ts.attempts) / float64(n)
			sorted := slices.Clone(ts.delays)
			slices.Sort(sorted)
			r.P50, r.P99 = percentile(sorted, 50), percentile(sorted, 99)
		}
		out = append(out, r)
	}
	return out
}

// unresolved returns, per tenant, the published jobs not (yet) seen admitted or dead.
func (s *Stats) unresolved() map[string][]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]uint64, len(s.tenants))
	for _, ts := range s.tenants {
		var seqs []uint64
		for seq := range ts.published {
			if _, ok := ts.admitted[seq]; ok {
				continue
			}
			if _, ok := ts.dead[seq]; ok {
				continue
			}
			seqs = append(seqs, seq)
		}
		slices.Sort(seqs)
		out[ts.info.Name] = seqs
	}
	return out
}

// percentile returns the p-th percentile (nearest rank) of sorted, which is not empty.
func percentile(sorted []time.Duration, p float64) time.Duration {
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// Summary is the outcome of a run.
type Summary struct {
	// LoadSeconds is how long the load ran: the duration, or less when interrupted.
	LoadSeconds float64 `json:"load_seconds"`
	// Interrupted reports that the context ended the load before the duration.
	Interrupted bool `json:"interrupted"`
	// SettleSeconds is how long the pipeline was given after the load before counting.
	SettleSeconds float64 `json:"settle_seconds"`
	// Tenants in the configured order.
	Tenants []TenantSummary `json:"tenants"`
	// Totals over the tenants.
	Published int64 `json:"published"`
	Admitted  int64 `json:"admitted"`
	Dead      int64 `json:"dead"`
	Waiting   int64 `json:"waiting"`
	Unchecked int64 `json:"unchecked"`
	Lost      int64 `json:"lost"`
}

// TenantSummary is one tenant's outcome. Counts are of jobs this run published (stored on the
// input stream, PubAck received); tokens are the sum of their weights.
type TenantSummary struct {
	Tenant  string  `json:"tenant"`
	Plan    string  `json:"plan"`
	Profile Profile `json:"profile"`

	Published       int64 `json:"published"`
	PublishedTokens int64 `json:"published_tokens"`
	PublishErrors   int64 `json:"publish_errors"` // sends without a PubAck: not counted as published
	Admitted        int64 `json:"admitted"`
	AdmittedTokens  int64 `json:"admitted_tokens"`
	Dead            int64 `json:"dead"`
	// Waiting is how many published jobs, neither admitted nor dead, are still stored on the
	// input stream, each looked up there.
	Waiting int64 `json:"waiting"`
	// Unchecked is how many could not be looked up (an error); they are not counted lost.
	Unchecked int64 `json:"unchecked"`
	// Lost = Published − Admitted − Dead − Waiting − Unchecked: jobs nowhere to be found.
	Lost int64 `json:"lost"`
	// Unmatched counts admitted jobs of the tenant whose publish this run did not see
	// acknowledged (a publish that timed out but was stored, or a job of an earlier run).
	Unmatched int64 `json:"unmatched"`

	MeanAttempts float64 `json:"mean_attempts"` // mean Admit-Attempts (attempts per admitted job); 0 when nothing was admitted
	WaitP50Ms    int64   `json:"wait_p50_ms"`   // -1 when nothing was admitted
	WaitP99Ms    int64   `json:"wait_p99_ms"`

	// The pacing check: over the window from the tenant's first publish to the end of the load,
	// the tokens admitted (received downstream within the window) against the most the plan
	// allows in that time from full buckets, capacity + rate × window, of the limit allowing
	// the fewest (Limit).
	WindowSeconds  float64 `json:"window_seconds"`
	WindowTokens   int64   `json:"window_tokens"`
	Limit          string  `json:"limit"`
	Capacity       int64   `json:"capacity"`
	Rate           float64 `json:"rate"`
	Allowance      float64 `json:"allowance"`
	PercentAllowed float64 `json:"percent_of_allowance"` // 100 × WindowTokens / Allowance
	// Busy reports that the tenant kept its bucket busy: it published at least its allowance
	// and still had jobs waiting at the end. Only then should WindowTokens come close to the
	// allowance; a tenant under its plan gets what it publishes.
	Busy bool `json:"busy"`
}

// summary computes the outcome. loadEnd is when the load stopped; waiting holds, per tenant, the
// unresolved jobs found stored on the input stream, and unchecked those that could not be looked
// up.
func (s *Stats) summary(loadEnd time.Time, waiting, unchecked map[string]map[uint64]bool) []TenantSummary {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]TenantSummary, 0, len(s.tenants))
	for _, ts := range s.tenants {
		info := ts.info
		t := TenantSummary{
			Tenant: info.Name, Plan: info.plan.Name, Profile: info.Profile,
			Published: int64(len(ts.published)), PublishedTokens: ts.publishedTokens, PublishErrors: ts.publishErrors,
			WaitP50Ms: -1, WaitP99Ms: -1,
		}
		var delays []time.Duration
		var attempts int64
		for seq, a := range ts.admitted {
			w, ok := ts.published[seq]
			if !ok {
				t.Unmatched++
				continue
			}
			t.Admitted++
			t.AdmittedTokens += w
			attempts += a.attempts
			delays = append(delays, a.delay)
			if !a.at.After(loadEnd) {
				t.WindowTokens += w
			}
		}
		for seq := range ts.dead {
			if _, ok := ts.published[seq]; ok {
				if _, adm := ts.admitted[seq]; !adm {
					t.Dead++
				}
			}
		}
		// A job is counted once: admitted, else dead, else waiting, else unchecked.
		unresolved := func(seq uint64) bool {
			_, pub := ts.published[seq]
			_, adm := ts.admitted[seq]
			_, dead := ts.dead[seq]
			return pub && !adm && !dead
		}
		for seq := range waiting[info.Name] {
			if unresolved(seq) {
				t.Waiting++
			}
		}
		for seq := range unchecked[info.Name] {
			if unresolved(seq) && !waiting[info.Name][seq] {
				t.Unchecked++
			}
		}
		t.Lost = t.Published - t.Admitted - t.Dead - t.Waiting - t.Unchecked
		if len(delays) > 0 {
			slices.Sort(delays)
			t.MeanAttempts = float64(attempts) / float64(len(delays))
			t.WaitP50Ms = percentile(delays, 50).Milliseconds()
			t.WaitP99Ms = percentile(delays, 99).Milliseconds()
		}
		var window time.Duration
		if !ts.firstPublish.IsZero() && loadEnd.After(ts.firstPublish) {
			window = loadEnd.Sub(ts.firstPublish)
		}
		li := Binding(info.plan, window)
		l := info.plan.Limits[li]
		t.WindowSeconds = window.Seconds()
		t.Limit, t.Capacity, t.Rate = limitLabel(info.plan, li), l.Capacity, l.PerSecond()
		if !ts.firstPublish.IsZero() {
			t.Allowance = limitAllowance(l, window)
			t.PercentAllowed = 100 * float64(t.WindowTokens) / t.Allowance
			t.Busy = float64(t.PublishedTokens) >= t.Allowance && t.Waiting > 0
		}
		out = append(out, t)
	}
	return out
}
