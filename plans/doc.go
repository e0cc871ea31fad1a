// Package plans reads plans files: the YAML that says which limits each plan has and which
// tenant is on which plan. It turns a file into the runtime *bucket.Plans, checking it strictly
// and naming the file, line and field of the first problem (an *Error, which also carries the
// plan and the failing limit's index). It does not decide anything: package bucket does, with
// the plans it returns.
//
// A file looks like this:
//
//	plans:
//	  free:
//	    limits:
//	      - {capacity: 5, rate: 2/s}
//	  pro:
//	    max_wait: 1h   # optional: a job not admitted within an hour is dead-lettered (expired)
//	    priority_aging: 10m  # optional: a waiting job's Admit-Priority rises one level per 10 minutes
//	    limits:
//	      - {name: burst,   capacity: 20, rate: 10/s}                  # kind: bucket, the default
//	      - {name: hourly,  kind: window, limit: 1000, window: 1h}     # at most 1000 in ANY hour
//	      - {name: monthly, kind: quota,  limit: 100000, period: month} # per calendar month, UTC
//	tenants:
//	  acme: pro
//	  bob: free
//	default_plan: free   # optional; when absent, jobs of unknown tenants are rejected
//
// The top level holds plans (required, at least one), tenants and default_plan (both optional;
// an explicit null means absent). A plan holds limits (required, at least one), and optionally
// mode (enforce, the default, or shadow), pool and share (below), and max_wait: the longest a job
// of the plan may wait, from its store in the input, before it is dead-lettered as expired (a
// duration as a window's, see ParseWindow; absent: no bound). A job's own Admit-Max-Wait header
// may bound it further: the smaller wins (bucket.Plan.MaxWait, package policy). And optionally
// priority_aging, a duration as a window's: a job waiting in its tenant's queue rises one
// priority level (its Admit-Priority header, 1 first to 5 last) per period waited, from its
// store in the input, so that a low priority cannot starve (bucket.Plan.PriorityAging; absent:
// priorities never change). Every limit has
// an optional name (unnamed limits are labelled by their index, so a name must not be all
// digits; names are unique within a plan) and an optional kind, which decides its other fields:
//
//   - bucket (the default): capacity, an integer ≥ 1 (the burst), and rate (see ParseRate).
//   - window: limit, an integer from 1 to 10^15 (at most that much weight in any interval of the
//     window's length), and window, a duration (see ParseWindow).
//   - quota: limit, as for a window (at most that much weight per calendar period), period, one
//     of minute, hour, day, week (ISO: from Monday) or month, and timezone, optional, an IANA
//     time zone name (default UTC) whose calendar the periods follow. The zone database is
//     compiled in, so a file means the same on every machine.
//
// Pools (optional, top level) are capacity downstream that the tenants of several plans share
// (see bucket.Pool):
//
//	pools:
//	  workers: {concurrency: 8, lease: 30s}   # at most 8 weighted jobs in flight, all tenants
//	  partner-api: {capacity: 100, rate: 50/s} # a bucket shared by the pool's tenants
//
// A pool takes concurrency (1 to 1000) with lease (a duration), capacity and rate (as a
// bucket's), or all four. A plan names its pool with pool: NAME and its share with share: W (an
// integer from 1 to 1000, default 1; a share needs a pool): when the pool is the bottleneck,
// what it frees goes to the waiting tenants in proportion to their shares.
//
// A field of another kind (rate on a window, capacity on a quota) is an error that says which
// kind it belongs to. Plan and tenant names are non-empty strings; tenant names must not contain
// '{' or '}'. Keys are checked strictly: unknown and duplicate keys are errors, and so are YAML
// aliases and more than one non-empty YAML document.
package plans
