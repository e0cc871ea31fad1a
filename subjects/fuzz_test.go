package subjects

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// The fuzz targets check the package against plain reference implementations (refParse,
// refMatch, refMatchFilter) and against its own round trips. Seeds live in
// testdata/fuzz/<FuzzName>/.

func FuzzParse(f *testing.F) {
	f.Add("jobs.submit.{tenant}.>")
	f.Add("*.{tenant}.*.>")
	f.Fuzz(func(t *testing.T, s string) {
		tmpl, err := Parse(s)
		if wantOK := refParseOK(s); (err == nil) != wantOK {
			t.Fatalf("Parse(%q) error = %v, reference says valid = %v", s, err, wantOK)
		}
		if err != nil {
			if !errors.Is(err, ErrTemplate) {
				t.Fatalf("Parse(%q) error %v does not wrap ErrTemplate", s, err)
			}
			if prefix := "subjects: invalid template " + strconv.Quote(s) + ": "; !strings.HasPrefix(err.Error(), prefix) {
				t.Fatalf("Parse(%q) error %q does not start with %q", s, err, prefix)
			}
			if tmpl.String() != "" || tmpl.Filter() != "" || len(tmpl.toks) != 0 {
				t.Fatalf("Parse(%q) returned a non-zero Template with its error", s)
			}
			return
		}
		if tmpl.String() != s {
			t.Fatalf("String() = %q, want %q", tmpl.String(), s)
		}
		if want := strings.Replace(s, "{tenant}", "*", 1); tmpl.Filter() != want {
			t.Fatalf("Filter() = %q, want %q", tmpl.Filter(), want)
		}
		if !Overlap(tmpl.Filter(), tmpl.Filter()) {
			t.Fatalf("Filter() %q does not overlap itself", tmpl.Filter())
		}
		caps := make([]string, tmpl.Wildcards())
		for i := range caps {
			caps[i] = "c" + strconv.Itoa(i)
		}
		subject, err := tmpl.Subject("t", caps...)
		if err != nil {
			t.Fatalf("Subject(%q, %q): %v", "t", caps, err)
		}
		tenant, got, ok := tmpl.MatchCaptures(subject)
		if !ok || tenant != "t" || !slices.Equal(got, caps) {
			t.Fatalf("MatchCaptures(%q) = %q, %q, %v; want %q, %q", subject, tenant, got, ok, "t", caps)
		}
		if !Overlap(tmpl.Filter(), subject) {
			t.Fatalf("Filter() %q does not overlap %q", tmpl.Filter(), subject)
		}
	})
}

func FuzzMatch(f *testing.F) {
	f.Add("jobs.submit.{tenant}.>", "jobs.submit.acme.email.send")
	f.Add("jobs.*.{tenant}", "jobs.x.acme")
	f.Fuzz(func(t *testing.T, s, subject string) {
		tmpl, err := Parse(s)
		if err != nil {
			return
		}
		tenant, ok := tmpl.Match(subject)
		wantTenant, wantCaps, wantOK := refMatch(s, subject)
		if ok != wantOK || tenant != wantTenant {
			t.Fatalf("Parse(%q).Match(%q) = %q, %v; reference says %q, %v", s, subject, tenant, ok, wantTenant, wantOK)
		}
		tenant2, caps, ok2 := tmpl.MatchCaptures(subject)
		if ok2 != ok || tenant2 != tenant || !slices.Equal(caps, wantCaps) {
			t.Fatalf("MatchCaptures(%q) = %q, %q, %v; want %q, %q, %v", subject, tenant2, caps, ok2, wantTenant, wantCaps, wantOK)
		}
		if why := tmpl.mismatch(subject); (why == "") != ok {
			t.Fatalf("mismatch(%q) = %q, but Match says %v", subject, why, ok)
		}
		// Subjects made of valid tokens are exactly those Overlap treats as literal filters.
		if refValidSubject(subject) && Overlap(tmpl.Filter(), subject) != ok {
			t.Fatalf("Overlap(%q, %q) = %v, but Match says %v", tmpl.Filter(), subject, !ok, ok)
		}
		if !ok {
			return
		}
		if !refValidSubject(subject) {
			t.Fatalf("Match accepted %q, which has an invalid token", subject)
		}
		if back, err := tmpl.Subject(tenant, caps...); err != nil || back != subject {
			t.Fatalf("Subject(%q, %q) = %q, %v; want %q", tenant, caps, back, err, subject)
		}
	})
}

func FuzzMapping(f *testing.F) {
	f.Add("jobs.submit.{tenant}.>", "jobs.admitted.{tenant}.>", "jobs.submit.acme.email.send", "acme", "email.send")
	f.Add("in.*.{tenant}.*", "out.{tenant}.*.*", "in.a.t.b", "t", "x/y")
	f.Fuzz(func(t *testing.T, inS, outS, subject, tenant, capsS string) {
		in, err := Parse(inS)
		if err != nil {
			return
		}
		out, err := Parse(outS)
		if err != nil {
			return
		}
		m, err := NewMapping(in, out)
		compatible := in.stars == out.stars && in.tail == out.tail
		if (err == nil) != compatible {
			t.Fatalf("NewMapping(%q, %q) error = %v, want compatible = %v", inS, outS, err, compatible)
		}
		if err != nil {
			if !errors.Is(err, ErrMapping) || !strings.Contains(err.Error(), strconv.Quote(inS)) || !strings.Contains(err.Error(), strconv.Quote(outS)) {
				t.Fatalf("NewMapping(%q, %q) error %q does not wrap ErrMapping and quote both", inS, outS, err)
			}
			return
		}

		// Map a subject as given.
		gotTenant, mapped, err := m.Map(subject)
		wantTenant, caps, ok := in.MatchCaptures(subject)
		if (err == nil) != ok || gotTenant != wantTenant {
			t.Fatalf("Map(%q) = %q, %q, %v; Match says %q, %v", subject, gotTenant, mapped, err, wantTenant, ok)
		}
		if err != nil {
			if !errors.Is(err, ErrNoMatch) || !strings.Contains(err.Error(), strconv.Quote(subject)) || !strings.Contains(err.Error(), strconv.Quote(inS)) {
				t.Fatalf("Map(%q) error %q does not wrap ErrNoMatch and quote subject and template", subject, err)
			}
		} else {
			checkMapped(t, m, gotTenant, caps, mapped)
		}

		// Map a subject built from a tenant and captures.
		caps = strings.Split(capsS, "/")
		for len(caps) < in.Wildcards() {
			caps = append(caps, "x")
		}
		caps = caps[:in.Wildcards()]
		built, err := in.Subject(tenant, caps...)
		valid := refValidToken(tenant)
		for i, c := range caps {
			if in.tail && i == len(caps)-1 {
				valid = valid && refValidSubject(c)
			} else {
				valid = valid && refValidToken(c)
			}
		}
		if (err == nil) != valid {
			t.Fatalf("Parse(%q).Subject(%q, %q) = %q, %v; reference says valid = %v", inS, tenant, caps, built, err, valid)
		}
		if err != nil {
			if !errors.Is(err, ErrSubject) {
				t.Fatalf("Subject error %v does not wrap ErrSubject", err)
			}
			return
		}
		gotTenant, mapped, err = m.Map(built)
		if err != nil || gotTenant != tenant {
			t.Fatalf("Map(%q) = %q, %q, %v; want tenant %q", built, gotTenant, mapped, err, tenant)
		}
		checkMapped(t, m, tenant, caps, mapped)
	})
}

// checkMapped checks that mapped is what m's output gives for tenant and caps.
func checkMapped(t *testing.T, m Mapping, tenant string, caps []string, mapped string) {
	t.Helper()
	if want, err := m.Out().Subject(tenant, caps...); err != nil || mapped != want {
		t.Fatalf("mapped %q, but Out().Subject(%q, %q) = %q, %v", mapped, tenant, caps, want, err)
	}
	gotTenant, gotCaps, ok := m.Out().MatchCaptures(mapped)
	if !ok || gotTenant != tenant || !slices.Equal(gotCaps, caps) {
		t.Fatalf("Out().MatchCaptures(%q) = %q, %q, %v; want %q, %q", mapped, gotTenant, gotCaps, ok, tenant, caps)
	}
	if !Overlap(m.Out().Filter(), mapped) {
		t.Fatalf("mapped %q does not match the output filter %q", mapped, m.Out().Filter())
	}
}

// refParseOK is the template grammar, written plainly.
func refParseOK(s string) bool {
	toks := strings.Split(s, ".")
	tenants := 0
	for i, tok := range toks {
		switch {
		case tok == "{tenant}":
			tenants++
		case tok == "*":
		case tok == ">":
			if i != len(toks)-1 {
				return false
			}
		case tok == "", strings.ContainsAny(tok, "*>{}"), strings.IndexFunc(tok, unicode.IsSpace) >= 0:
			return false
		}
	}
	return tenants == 1
}

// refMatch matches subject against template s (valid), written plainly.
func refMatch(s, subject string) (tenant string, caps []string, ok bool) {
	toks := strings.Split(s, ".")
	st := strings.Split(subject, ".")
	for i, tok := range toks {
		if i >= len(st) {
			return "", nil, false
		}
		switch tok {
		case ">":
			rest := strings.Join(st[i:], ".")
			if !refValidSubject(rest) {
				return "", nil, false
			}
			return tenant, append(caps, rest), true
		case "{tenant}":
			if !refValidToken(st[i]) {
				return "", nil, false
			}
			tenant = st[i]
		case "*":
			if !refValidToken(st[i]) {
				return "", nil, false
			}
			caps = append(caps, st[i])
		default:
			if st[i] != tok {
				return "", nil, false
			}
		}
	}
	if len(st) != len(toks) {
		return "", nil, false
	}
	return tenant, caps, true
}

// refValidSubject reports whether s is a concrete subject: one or more valid tokens.
func refValidSubject(s string) bool {
	for _, tok := range strings.Split(s, ".") {
		if !refValidToken(tok) {
			return false
		}
	}
	return true
}
