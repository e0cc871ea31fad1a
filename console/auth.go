package console

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Who may do what. Reading is open unless ADMITTER_HTTP_TOKEN is set (then it needs that
// token or the console's); acting (pause, resume, move, replay) needs ADMITTER_CONSOLE_TOKEN,
// as a bearer token or through the sign-in form, which sets a signed cookie.
type role uint8

const (
	nobody role = iota
	viewer
	operator
)

// A caller is who sent a request, as far as the console can tell.
type caller struct {
	role role
	name string // as given at sign-in ("" for bearer tokens)
	via  string // "cookie", "bearer" or "open"
	addr string
	csrf string // the form token a cookie session must send back with every action
}

// Who names the caller in the log of actions: "alice (cookie) from 127.0.0.1:5555".
func (c caller) Who() string {
	name := c.name
	if name == "" {
		name = "anonymous"
	}
	return name + " (" + c.via + ") from " + c.addr
}

const (
	cookieName = "admitter_console"
	sessionTTL = 12 * time.Hour
	maxNameLen = 64
)

// auth holds the tokens and the key that signs sessions.
type auth struct {
	act, read []byte // ADMITTER_CONSOLE_TOKEN, ADMITTER_HTTP_TOKEN; empty when unset
	key       []byte
}

func newAuth(actToken, readToken string) *auth {
	h := sha256.New()
	h.Write([]byte("admitter console session\x00"))
	h.Write([]byte(actToken))
	h.Write([]byte{0})
	h.Write([]byte(readToken))
	return &auth{act: []byte(actToken), read: []byte(readToken), key: h.Sum(nil)}
}

// canAct: actions are possible at all (ADMITTER_CONSOLE_TOKEN is set).
func (a *auth) canAct() bool { return len(a.act) > 0 }

// readOpen: reading needs no token.
func (a *auth) readOpen() bool { return len(a.read) == 0 }

// roleOf is what a token lets its holder do.
func (a *auth) roleOf(token string) role {
	switch {
	case token == "":
		return nobody
	case len(a.act) > 0 && subtle.ConstantTimeCompare([]byte(token), a.act) == 1:
		return operator
	case len(a.read) > 0 && subtle.ConstantTimeCompare([]byte(token), a.read) == 1:
		return viewer
	}
	return nobody
}

// identify finds who sent r: a bearer token, else a valid session cookie, else nobody (a
// viewer when reading is open).
func (a *auth) identify(r *http.Request, now time.Time) caller {
	c := caller{addr: r.RemoteAddr, via: "open"}
	if h := r.Header.Get("Authorization"); h != "" {
		token, ok := strings.CutPrefix(h, "Bearer ")
		if ok {
			c.role, c.via = a.roleOf(token), "bearer"
		}
	} else if ck, err := r.Cookie(cookieName); err == nil {
		if rl, name, ok := a.verify(ck.Value, now); ok {
			c.role, c.name, c.via, c.csrf = rl, name, "cookie", a.mac("csrf|"+ck.Value)
		}
	}
	if c.role == nobody && a.readOpen() {
		c.role = viewer
	}
	return c
}

// session makes the value of a session cookie.
func (a *auth) session(rl role, name string, now time.Time) string {
	payload := strconv.Itoa(int(rl)) + "|" + strconv.FormatInt(now.Add(sessionTTL).Unix(), 10) + "|" + name
	p := base64.RawURLEncoding.EncodeToString([]byte(payload))
	return p + "." + a.mac(p)
}

// verify checks a session cookie's value.
func (a *auth) verify(v string, now time.Time) (role, string, bool) {
	p, sig, ok := strings.Cut(v, ".")
	if !ok || !hmac.Equal([]byte(sig), []byte(a.mac(p))) {
		return nobody, "", false
	}
	raw, err := base64.RawURLEncoding.DecodeString(p)
	if err != nil {
		return nobody, "", false
	}
	parts := strings.SplitN(string(raw), "|", 3)
	if len(parts) != 3 {
		return nobody, "", false
	}
	rl, err1 := strconv.Atoi(parts[0])
	exp, err2 := strconv.ParseInt(parts[1], 10, 64)
	if err1 != nil || err2 != nil || now.Unix() > exp || rl < int(viewer) || rl > int(operator) {
		return nobody, "", false
	}
	// A session of a role the tokens no longer give is void (the key changes with the tokens,
	// so this is belt and braces).
	if role(rl) == operator && !a.canAct() {
		return nobody, "", false
	}
	return role(rl), parts[2], true
}

func (a *auth) mac(s string) string {
	m := hmac.New(sha256.New, a.key)
	m.Write([]byte(s))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// cleanName keeps a sign-in name printable and short: it goes into logs and records.
func cleanName(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) && r != '|' {
			return r
		}
		return -1
	}, strings.TrimSpace(s))
	if len(s) > maxNameLen {
		s = s[:maxNameLen]
	}
	return s
}

// CSRF is the form token the caller's forms carry ("" without a session).
func (c caller) CSRF() string { return c.csrf }

// Name is the name the caller signed in with.
func (c caller) Name() string { return c.name }

// SignedIn: the caller has a session.
func (c caller) SignedIn() bool { return c.via == "cookie" }
