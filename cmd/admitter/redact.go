package main

import (
	"fmt"
	"net/url"
	"strings"
)

// masked stands for a secret wherever one would be printed.
const masked = "xxxxx"

// urlParts is a server URL cut by its structure, not by a URL parser: [scheme "://"]
// [userinfo "@"] rest. The user information ends at the last '@', so a password holding '@',
// '#', '/', '?' or ':' is found whole, where a URL parser ends the authority at the first '/',
// '?' or '#' and would leave the rest of the password in the host, the path or the fragment.
type urlParts struct {
	scheme   string // "" when the URL has none ("host:4222")
	userinfo string // raw, as written
	hasUser  bool
	rest     string // host, port, path, query, fragment
}

func cutURL(s string) urlParts {
	var p urlParts
	after := s
	if i := strings.Index(s, "://"); i > 0 && isScheme(s[:i]) {
		p.scheme, after = s[:i], s[i+len("://"):]
	}
	if at := strings.LastIndexByte(after, '@'); at >= 0 {
		p.userinfo, p.hasUser, p.rest = after[:at], true, after[at+1:]
	} else {
		p.rest = after
	}
	return p
}

// isScheme reports whether s is a URL scheme: a letter, then letters, digits, '+', '-' or '.'.
func isScheme(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return s != ""
}

// String is the URL with its password (or its token: a user information without ':') masked.
func (p urlParts) String() string {
	var b strings.Builder
	if p.scheme != "" {
		b.WriteString(p.scheme + "://")
	}
	if p.hasUser {
		if user, _, hasPass := strings.Cut(p.userinfo, ":"); hasPass {
			b.WriteString(user + ":" + masked + "@")
		} else {
			b.WriteString(masked + "@")
		}
	}
	b.WriteString(p.rest)
	return b.String()
}

// redactURL is one URL with its password or token masked, whatever characters they hold.
func redactURL(s string) string { return cutURL(strings.TrimSpace(s)).String() }

// redact masks the password or token of each URL in a comma-separated list (ADMITTER_NATS_URL;
// a Redis URL is one URL: redactURL).
func redact(list string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		parts[i] = redactURL(p)
	}
	return strings.Join(parts, ",")
}

// userinfoProblem says what, in a URL's user name and password, a URL cannot carry as is, or
// "" when nothing. '@' is accepted: the user information ends at the last one, for net/url (which
// both clients use) as for cutURL.
func userinfoProblem(userinfo string) string {
	for i := 0; i < len(userinfo); i++ {
		c := userinfo[i]
		switch {
		case c == '%':
			if i+2 >= len(userinfo) || !isHex(userinfo[i+1]) || !isHex(userinfo[i+2]) {
				return "a '%' that does not start a percent-escape such as %25"
			}
			i += 2
		case c == '#' || c == '/' || c == '?':
			return fmt.Sprintf("'%c', which ends a server's address in a URL (the rest of the password would be taken for a path or a fragment)", c)
		case c == ' ':
			return "a space"
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', strings.IndexByte("-._~!$&'()*+,;=:@", c) >= 0:
		case c < 0x20 || c == 0x7f:
			return "a control character"
		case c >= 0x80:
			return "a character outside ASCII"
		default:
			return fmt.Sprintf("'%c', which a URL cannot carry as is", c)
		}
	}
	return ""
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// checkURL validates one server URL of variable name without ever putting its credentials in
// an error: the user information is checked by its structure, the rest by parsing the URL with
// the credentials masked (parse errors quote the URL they parse). passwordVar names the
// variable to use instead of the URL for a password. It returns the URL parsed.
func checkURL(name, s, passwordVar string) (*url.URL, error) {
	p := cutURL(s)
	if p.hasUser {
		if why := userinfoProblem(p.userinfo); why != "" {
			return nil, fmt.Errorf("%s: the user name or password in %s holds %s: percent-encode it (url.QueryEscape, encodeURIComponent), or set the password in %s instead", name, p, why, passwordVar)
		}
	}
	if _, err := url.Parse(p.String()); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	u, err := url.Parse(s)
	if err != nil { // the masked URL parsed, so this is the user information: never quote it
		return nil, fmt.Errorf("%s: the user name or password in %s does not parse: percent-encode it, or set the password in %s instead", name, p, passwordVar)
	}
	return u, nil
}
