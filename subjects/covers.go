package subjects

import "strings"

// Covers reports whether every subject matching filter inner also matches filter outer, the
// question a stream's subjects must answer for the subjects admitter writes to it: "jobs.>"
// covers "jobs.admitted.*.>", "jobs.admitted.*.>" covers itself, while "jobs.admitted.*.*"
// does not cover "jobs.admitted.*.>" (a subject of five tokens escapes it). Filters no subject
// matches (see Overlap) cover nothing and are covered by nothing.
func Covers(outer, inner string) bool {
	if !validFilter(outer) || !validFilter(inner) {
		return false
	}
	for {
		to, ro, moreO := strings.Cut(outer, ".")
		ti, ri, moreI := strings.Cut(inner, ".")
		switch {
		case to == tailToken:
			return true // takes this token and any that follow, whatever inner has here
		case ti == tailToken:
			return false // inner may go on for any number of tokens; outer is fixed from here
		case to == starToken:
		case to != ti: // a literal covers only the same literal, not '*'
			return false
		}
		if !moreO || !moreI {
			return moreO == moreI
		}
		outer, inner = ro, ri
	}
}
