package subjects

import "strings"

// Overlap reports whether some concrete subject matches both NATS subject filters a and b,
// where '*' as a whole token matches any one token and '>' as the last token matches one or
// more tokens. For example "jobs.submit.*.>" and "jobs.*.acme.email" overlap, while
// "jobs.submit.*.>" and "jobs.admitted.*.>" do not, nor do "a.*" and "a.*.*".
//
// A filter that no subject can match — empty, with an empty token, with '>' before the last
// token, or with a token containing whitespace — overlaps nothing. A literal is compared
// byte for byte, so "a*" is a literal, as it is for NATS. Overlap does not allocate.
func Overlap(a, b string) bool {
	if !validFilter(a) || !validFilter(b) {
		return false
	}
	for {
		ta, ra, moreA := strings.Cut(a, ".")
		tb, rb, moreB := strings.Cut(b, ".")
		if ta == tailToken || tb == tailToken {
			// '>' is the last token of its filter and takes one or more tokens; the other
			// filter has at least this token left, and any remaining tokens of it can be
			// filled in.
			return true
		}
		if ta != tb && ta != starToken && tb != starToken {
			return false
		}
		if !moreA || !moreB {
			return moreA == moreB
		}
		a, b = ra, rb
	}
}

// validFilter reports whether some subject matches filter f.
func validFilter(f string) bool {
	if f == "" {
		return false
	}
	for {
		tok, rest, more := strings.Cut(f, ".")
		switch tok {
		case starToken:
		case tailToken:
			if more {
				return false
			}
		default:
			if !validToken(tok) {
				return false
			}
		}
		if !more {
			return true
		}
		f = rest
	}
}
