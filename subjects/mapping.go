package subjects

import (
	"fmt"
	"strings"
)

// A Mapping rewrites subjects matched by an input template into subjects of an output
// template, keeping the tenant and the tokens matched by the wildcards: with input
// "jobs.submit.{tenant}.>" and output "jobs.admitted.{tenant}.>", "jobs.submit.acme.email.send"
// maps to "jobs.admitted.acme.email.send". The n-th '*' of the output gets what the n-th '*'
// of the input matched, and the output's '>' gets what the input's '>' matched.
//
// A Mapping is an immutable value, safe for concurrent use. The zero Mapping maps nothing:
// Map always fails with [ErrNoMatch].
type Mapping struct {
	in, out Template
}

// NewMapping pairs two templates. They must carry the same wildcards: as many '*' in each,
// and a trailing '>' in both or in neither. Errors wrap [ErrMapping] and quote both templates,
// or wrap [ErrTemplate] if either is the zero Template.
//
// NewMapping does not check whether the output could be consumed again as input; use
// [Overlap] on the templates' filters for that.
func NewMapping(in, out Template) (Mapping, error) {
	if len(in.toks) == 0 {
		return Mapping{}, fmt.Errorf("%w %q: the mapping's input is the zero Template", ErrTemplate, in.raw)
	}
	if len(out.toks) == 0 {
		return Mapping{}, fmt.Errorf("%w %q: the mapping's output is the zero Template", ErrTemplate, out.raw)
	}
	var why []string
	if in.stars != out.stars {
		why = append(why, fmt.Sprintf("input %q has %d \"*\" but output %q has %d", in.raw, in.stars, out.raw, out.stars))
	}
	if in.tail != out.tail {
		if in.tail {
			why = append(why, fmt.Sprintf("input %q ends in \">\" but output %q does not", in.raw, out.raw))
		} else {
			why = append(why, fmt.Sprintf("output %q ends in \">\" but input %q does not", out.raw, in.raw))
		}
	}
	if len(why) > 0 {
		return Mapping{}, fmt.Errorf("%w: %s", ErrMapping, strings.Join(why, "; "))
	}
	return Mapping{in: in, out: out}, nil
}

// In returns the mapping's input template.
func (m Mapping) In() Template { return m.in }

// Out returns the mapping's output template.
func (m Mapping) Out() Template { return m.out }

// Map returns the tenant of subject and the subject the output template gives for it. If
// subject does not match the input template (see [Template.Match]) the error wraps
// [ErrNoMatch], quotes the subject and the template, and says why. On success Map makes one
// allocation, for the mapped subject.
func (m Mapping) Map(subject string) (tenant, mapped string, err error) {
	var buf [8]string
	var caps []string
	if w := m.in.Wildcards(); w <= len(buf) {
		caps = buf[:w]
	} else {
		caps = make([]string, w)
	}
	tenant, ok := m.in.match(subject, caps)
	if !ok {
		return "", "", m.in.noMatch(subject)
	}
	return tenant, m.out.build(tenant, caps), nil
}

// noMatch returns the error for a subject that does not match t.
func (t Template) noMatch(subject string) error {
	why := t.mismatch(subject)
	if why == "" {
		why = "does not match" // unreachable if mismatch and match agree
	}
	return fmt.Errorf("%w: subject %q for template %q: %s", ErrNoMatch, subject, t.raw, why)
}

// mismatch says why subject does not match t, or "" if it does. It is the slow, explaining
// twin of match.
func (t Template) mismatch(subject string) string {
	if len(t.toks) == 0 {
		return "the zero Template matches nothing"
	}
	if subject == "" {
		return "subject is empty"
	}
	stoks := strings.Split(subject, ".")
	count := func() string {
		if t.tail {
			return fmt.Sprintf("has %d tokens, want at least %d", len(stoks), len(t.toks))
		}
		return fmt.Sprintf("has %d tokens, want %d", len(stoks), len(t.toks))
	}
	for i, tok := range t.toks {
		if i >= len(stoks) {
			return count()
		}
		s := stoks[i]
		switch tok {
		case tailToken:
			for j := i; j < len(stoks); j++ {
				if p := tokenProblem(stoks[j]); p != "" {
					return fmt.Sprintf("token %d (matched by \">\") %s", j+1, p)
				}
			}
			return ""
		case tenantToken:
			if p := tokenProblem(s); p != "" {
				return fmt.Sprintf("token %d (the tenant) %s", i+1, p)
			}
		case starToken:
			if p := tokenProblem(s); p != "" {
				return fmt.Sprintf("token %d (matched by \"*\") %s", i+1, p)
			}
		default:
			if s != tok {
				return fmt.Sprintf("token %d is %q, want %q", i+1, s, tok)
			}
		}
	}
	if len(stoks) != len(t.toks) {
		return count()
	}
	return ""
}
