// Package plans reads plans files: the YAML that says which limits each plan has and which
// tenant is on which plan. It turns a file into the runtime *bucket.Plans, checking it strictly
// and naming the file, line and field of the first problem (an *Error). It does not decide
// anything: package bucket does, with the plans it returns.
//
// A file looks like this:
//
//	plans:
//	  free:
//	    limits:
//	      - {capacity: 5, rate: 2/s}
//	  gold:
//	    limits:
//	      - {name: burst, capacity: 20, rate: 10/s}
//	      - {name: daily, capacity: 100000, rate: 100000/d}
//	tenants:
//	  acme: gold
//	  bob: free
//	default_plan: free   # optional; when absent, jobs of unknown tenants are rejected
//
// The top level holds plans (required, at least one), tenants and default_plan (both optional;
// an explicit null means absent). A plan holds limits (required, at least one); a limit holds
// capacity (an integer ≥ 1), rate (see [ParseRate]) and name (optional: unnamed limits are
// labelled by their index, so a name must not be all digits; names are unique within a plan).
// Plan and tenant names are non-empty strings; tenant names must not contain '{' or '}'. Keys are
// checked strictly: unknown and duplicate keys are errors, and so are YAML aliases and more than
// one non-empty YAML document.
package plans
