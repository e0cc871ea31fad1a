package main

import (
	"net/url"
	"strings"
	"testing"
)

// FuzzRedactURL: whatever a password holds, written raw or percent-encoded in a URL, the masked
// URL does not show it and keeps the host; a percent-encoded one passes checkURL and reads back
// whole, and a raw one either passes and reads back whole (or, holding '%', as its escapes say)
// or is refused without being quoted.
func FuzzRedactURL(f *testing.F) {
	for _, s := range [][2]string{
		{"svc", "Kx9w@Lp2q#Zr5t:Mn6y/Vb3u%Ty8i? Hj4o"}, {"", "p@ss#1"}, {"u", "12#34"}, {"u", "a/b?c"},
		{"u@x", "p"}, {"", "100%"}, {"user", "with space"}, {"", "x@y@z"}, {"", "%41bc"}, {"u", "pässwörd"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, user, pw string) {
		if len(pw) < 4 || strings.ContainsAny(user, ":@/?#") {
			return // too short to tell from the rest of the URL; a user name is not a secret
		}
		const rest = "127.0.0.1:6379/2"
		enc := url.UserPassword(user, pw).String()
		encPW := enc[strings.IndexByte(enc, ':')+1:]
		if visible := "redis://" + url.User(user).String() + "redis://" + user + ":" + masked + "@" + rest; strings.Contains(visible, pw) || strings.Contains(visible, encPW) {
			return // the password is also a piece of what may be shown
		}
		for i, raw := range []string{"redis://" + enc + "@" + rest, "redis://" + user + ":" + pw + "@" + rest} {
			m := redactURL(raw)
			if strings.Contains(m, pw) || strings.Contains(m, encPW) {
				t.Fatalf("redactURL(%q) = %q shows the password", raw, m)
			}
			if !strings.HasSuffix(m, "@"+rest) {
				t.Fatalf("redactURL(%q) = %q lost the host", raw, m)
			}
			u, err := checkURL("X", raw, "X_PASSWORD")
			if err != nil {
				// Besides the masked URL, checked above, the error is fixed words: a short password
				// may be one of them.
				if rest := strings.ReplaceAll(err.Error(), m, ""); len(pw) >= 16 && (strings.Contains(rest, pw) || strings.Contains(rest, encPW)) {
					t.Fatalf("checkURL(%q) error shows the password: %v", raw, err)
				}
				if i == 0 {
					t.Fatalf("checkURL refused a percent-encoded URL %q: %v", raw, err)
				}
				continue
			}
			if i == 1 && strings.Contains(pw, "%") {
				continue // a raw "%41" is an escape: the URL means "A"
			}
			if got, _ := u.User.Password(); got != pw || u.Host != "127.0.0.1:6379" {
				t.Fatalf("checkURL(%q) accepted it as password %q at %q, want %q at 127.0.0.1:6379", raw, got, u.Host, pw)
			}
		}
	})
}
