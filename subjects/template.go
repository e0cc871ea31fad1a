package subjects

import (
	"fmt"
	"strings"
	"unicode"
)

// The special tokens of a template. Literals can contain none of '*', '>', '{', '}', so a token
// equal to one of these is never a literal.
const (
	tenantToken = "{tenant}"
	starToken   = "*"
	tailToken   = ">"
)

// A Template is a parsed subject template such as "jobs.submit.{tenant}.>". Build one with
// [Parse] or [MustParse].
//
// A Template is an immutable value: copies share nothing mutable, and all methods are safe for
// concurrent use. The zero Template is not a valid template: its String and Filter are empty,
// it matches no subject, Subject fails with [ErrSubject] and [NewMapping] refuses it. Templates
// are not comparable with ==; compare their String.
type Template struct {
	raw    string
	filter string
	// toks are the tokens as written: literals, tenantToken, starToken or tailToken.
	toks []string
	// tenant is the index of tenantToken in toks.
	tenant int
	// stars is the number of starToken in toks.
	stars int
	// tail reports whether the last token is tailToken.
	tail bool
}

// Parse parses a subject template. Errors wrap [ErrTemplate] and quote the template, naming
// the offending token by its 1-based position.
func Parse(s string) (Template, error) {
	if s == "" {
		return Template{}, templateError(s, "template is empty")
	}
	toks := strings.Split(s, ".")
	t := Template{raw: s, toks: toks, tenant: -1}
	for i, tok := range toks {
		n := i + 1
		switch tok {
		case "":
			return Template{}, templateError(s, "token %d is empty", n)
		case tenantToken:
			if t.tenant >= 0 {
				return Template{}, templateError(s, "{tenant} appears twice (tokens %d and %d)", t.tenant+1, n)
			}
			t.tenant = i
			continue
		case starToken:
			t.stars++
			continue
		case tailToken:
			if n != len(toks) {
				return Template{}, templateError(s, "token %d: \">\" must be the last token", n)
			}
			t.tail = true
			continue
		}
		if problem := literalProblem(tok); problem != "" {
			return Template{}, templateError(s, "token %d %q %s", n, tok, problem)
		}
	}
	if t.tenant < 0 {
		return Template{}, templateError(s, "no {tenant} token")
	}
	filter := make([]string, len(toks))
	copy(filter, toks)
	filter[t.tenant] = starToken
	t.filter = strings.Join(filter, ".")
	return t, nil
}

// MustParse is like [Parse] but panics if the template is invalid. It is meant for templates
// written in code, such as package-level variables and tests.
func MustParse(s string) Template {
	t, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return t
}

// literalProblem says what makes tok (not one of the special tokens) an invalid literal, or ""
// if it is a valid one.
func literalProblem(tok string) string {
	switch {
	case tok[0] == '{' && tok[len(tok)-1] == '}':
		return "is not a known placeholder (the only one is {tenant})"
	case strings.ContainsAny(tok, "{}"):
		return "contains \"{\" or \"}\" (allowed only in the whole token {tenant})"
	case strings.ContainsRune(tok, '*'):
		return "contains \"*\" (a wildcard must be a whole token)"
	case strings.ContainsRune(tok, '>'):
		return "contains \">\" (a wildcard must be a whole token)"
	case strings.IndexFunc(tok, unicode.IsSpace) >= 0:
		return "contains whitespace"
	}
	return ""
}

func templateError(s, format string, args ...any) error {
	return fmt.Errorf("%w %q: %s", ErrTemplate, s, fmt.Sprintf(format, args...))
}

// String returns the template as written.
func (t Template) String() string { return t.raw }

// Filter returns the NATS subject filter matching every subject the template matches: the
// template with {tenant} replaced by '*' ("jobs.submit.*.>" for "jobs.submit.{tenant}.>").
// It is "" for the zero Template.
func (t Template) Filter() string { return t.filter }

// TenantFilter returns the NATS subject filter matching every subject of the template for
// tenant: the template with {tenant} replaced by tenant, its wildcards kept
// ("jobs.submit.acme.>" for "jobs.submit.{tenant}.>" and tenant "acme"). Errors wrap
// [ErrSubject]: the zero Template, or a tenant that is not a valid token.
func (t Template) TenantFilter(tenant string) (string, error) {
	if len(t.toks) == 0 {
		return "", fmt.Errorf("%w: the zero Template has no subjects", ErrSubject)
	}
	if p := tokenProblem(tenant); p != "" {
		return "", fmt.Errorf("%w from template %q: tenant %q %s", ErrSubject, t.raw, tenant, p)
	}
	toks := make([]string, len(t.toks))
	copy(toks, t.toks)
	toks[t.tenant] = tenant
	return strings.Join(toks, "."), nil
}

// Wildcards returns the number of captures the template's wildcards make: one for each '*'
// plus one for a trailing '>'. It is the number of captures [Template.Subject] takes and
// [Template.MatchCaptures] returns.
func (t Template) Wildcards() int {
	if t.tail {
		return t.stars + 1
	}
	return t.stars
}

// Match reports whether subject matches the template and, if it does, returns the token in
// the {tenant} position. A subject matches when it has the template's literal tokens in their
// positions, a valid token (see the package documentation) for {tenant} and each '*', and, if
// the template ends in '>', one or more valid tokens in its place. Match does not allocate.
func (t Template) Match(subject string) (tenant string, ok bool) {
	return t.match(subject, nil)
}

// MatchCaptures is like [Template.Match] but also returns what the wildcards matched, in
// template order: one token for each '*', and for a trailing '>' all the remaining tokens
// joined by '.' (e.g. "email.send"). The captures are substrings of subject, in the form
// [Template.Subject] takes: t.Subject(tenant, captures...) gives back subject. The slice is
// newly allocated; it is nil when the template has no wildcards or the subject does not match.
func (t Template) MatchCaptures(subject string) (tenant string, captures []string, ok bool) {
	if w := t.Wildcards(); w > 0 {
		captures = make([]string, w)
	}
	tenant, ok = t.match(subject, captures)
	if !ok {
		return "", nil, false
	}
	return tenant, captures, true
}

// match is Match, storing the captures in caps when caps is not nil (it then has
// t.Wildcards() elements). It does not allocate.
func (t Template) match(subject string, caps []string) (tenant string, ok bool) {
	if len(t.toks) == 0 {
		return "", false
	}
	pos, end, k := 0, len(subject), 0 // pos > end: the subject's tokens are used up
	for _, tok := range t.toks {
		if pos > end {
			return "", false
		}
		if tok == tailToken {
			rest := subject[pos:]
			if tailProblem(rest) != "" {
				return "", false
			}
			if caps != nil {
				caps[k] = rest
			}
			return tenant, true
		}
		var s string
		if i := strings.IndexByte(subject[pos:], '.'); i >= 0 {
			s, pos = subject[pos:pos+i], pos+i+1
		} else {
			s, pos = subject[pos:], end+1
		}
		switch tok {
		case tenantToken:
			if !validToken(s) {
				return "", false
			}
			tenant = s
		case starToken:
			if !validToken(s) {
				return "", false
			}
			if caps != nil {
				caps[k] = s
			}
			k++
		default:
			if s != tok {
				return "", false
			}
		}
	}
	if pos <= end {
		return "", false // tokens left over
	}
	return tenant, true
}

// Subject builds the concrete subject the template gives for tenant and captures, in the form
// [Template.MatchCaptures] returns them: one capture per wildcard in template order, a single
// token for each '*' and one or more '.'-separated tokens for a trailing '>'. For example
// "jobs.submit.{tenant}.>" with tenant "acme" and capture "email.send" gives
// "jobs.submit.acme.email.send". The result always matches the template, with the same tenant
// and captures.
//
// Errors wrap [ErrSubject]: the template is the zero Template, the number of captures differs
// from [Template.Wildcards], or the tenant or a capture is not valid for its position.
func (t Template) Subject(tenant string, captures ...string) (string, error) {
	if len(t.toks) == 0 {
		return "", fmt.Errorf("%w: the zero Template has no subjects", ErrSubject)
	}
	if p := tokenProblem(tenant); p != "" {
		return "", fmt.Errorf("%w from template %q: tenant %q %s", ErrSubject, t.raw, tenant, p)
	}
	if w := t.Wildcards(); len(captures) != w {
		return "", fmt.Errorf("%w from template %q: got %d captures, want %d (one per wildcard)", ErrSubject, t.raw, len(captures), w)
	}
	for i, c := range captures {
		if t.tail && i == len(captures)-1 {
			if p := tailProblem(c); p != "" {
				return "", fmt.Errorf("%w from template %q: capture %d %q for \">\": %s", ErrSubject, t.raw, i+1, c, p)
			}
		} else if p := tokenProblem(c); p != "" {
			return "", fmt.Errorf("%w from template %q: capture %d %q for \"*\" %s", ErrSubject, t.raw, i+1, c, p)
		}
	}
	return t.build(tenant, captures), nil
}

// build writes the subject for tenant and captures, which are valid and as many as
// t.Wildcards(), with a single allocation.
func (t Template) build(tenant string, caps []string) string {
	n := len(t.toks) - 1 // dots
	k := 0
	for _, tok := range t.toks {
		switch tok {
		case tenantToken:
			n += len(tenant)
		case starToken, tailToken:
			n += len(caps[k])
			k++
		default:
			n += len(tok)
		}
	}
	var b strings.Builder
	b.Grow(n)
	k = 0
	for i, tok := range t.toks {
		if i > 0 {
			b.WriteByte('.')
		}
		switch tok {
		case tenantToken:
			b.WriteString(tenant)
		case starToken, tailToken:
			b.WriteString(caps[k])
			k++
		default:
			b.WriteString(tok)
		}
	}
	return b.String()
}

// validToken reports whether s is a valid concrete subject token: non-empty, free of the
// whitespace NATS rejects, and not a lone wildcard.
func validToken(s string) bool {
	if len(s) == 1 {
		switch s[0] {
		case '*', '>', ' ', '\t', '\n', '\f', '\r':
			return false
		}
		return true
	}
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case ' ', '\t', '\n', '\f', '\r':
			return false
		}
	}
	return len(s) > 0
}

// tokenProblem says why s is not a valid single subject token, or "" if it is one.
func tokenProblem(s string) string {
	switch {
	case s == "":
		return "is empty"
	case strings.IndexByte(s, '.') >= 0:
		return "contains \".\""
	case s == starToken || s == tailToken:
		return "is a wildcard"
	case !validToken(s):
		return "contains whitespace"
	}
	return ""
}

// tailProblem says why s is not one or more valid subject tokens separated by '.', or "" if it
// is. It does not allocate when s is valid.
func tailProblem(s string) string {
	if s == "" {
		return "is empty"
	}
	for n := 1; ; n++ {
		tok, rest, more := strings.Cut(s, ".")
		if p := tokenProblem(tok); p != "" {
			return fmt.Sprintf("token %d %s", n, p)
		}
		if !more {
			return ""
		}
		s = rest
	}
}
