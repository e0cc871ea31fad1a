package subjects

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in        string
		filter    string
		wildcards int
	}{
		{"jobs.submit.{tenant}.>", "jobs.submit.*.>", 1},
		{"jobs.admitted.{tenant}.>", "jobs.admitted.*.>", 1},
		{"{tenant}", "*", 0},
		{"{tenant}.>", "*.>", 1},
		{"jobs.{tenant}", "jobs.*", 0},
		{"jobs.*.{tenant}.*.x", "jobs.*.*.*.x", 2},
		{"*.{tenant}.*.>", "*.*.*.>", 3},
		{"jobs.Ünïcode.{tenant}", "jobs.Ünïcode.*", 0},
		{"a-b_c.{tenant}.$JS.x:y", "a-b_c.*.$JS.x:y", 0},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			tmpl, err := Parse(tt.in)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.in, err)
			}
			if got := tmpl.String(); got != tt.in {
				t.Errorf("String() = %q, want %q", got, tt.in)
			}
			if got := tmpl.Filter(); got != tt.filter {
				t.Errorf("Filter() = %q, want %q", got, tt.filter)
			}
			if got := tmpl.Wildcards(); got != tt.wildcards {
				t.Errorf("Wildcards() = %d, want %d", got, tt.wildcards)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		in   string
		want string // the whole error message
	}{
		{"", `subjects: invalid template "": template is empty`},
		{"jobs..x", `subjects: invalid template "jobs..x": token 2 is empty`},
		{".jobs.{tenant}", `subjects: invalid template ".jobs.{tenant}": token 1 is empty`},
		{"jobs.{tenant}.", `subjects: invalid template "jobs.{tenant}.": token 3 is empty`},
		{".", `subjects: invalid template ".": token 1 is empty`},
		{"...", `subjects: invalid template "...": token 1 is empty`},
		{"jobs.{tenant}.{tenant}", `subjects: invalid template "jobs.{tenant}.{tenant}": {tenant} appears twice (tokens 2 and 3)`},
		{"jobs.>.x", `subjects: invalid template "jobs.>.x": token 2: ">" must be the last token`},
		{">.{tenant}", `subjects: invalid template ">.{tenant}": token 1: ">" must be the last token`},
		{"jobs.submit", `subjects: invalid template "jobs.submit": no {tenant} token`},
		{"jobs.*.>", `subjects: invalid template "jobs.*.>": no {tenant} token`},
		{"jobs.{tenant}x", `subjects: invalid template "jobs.{tenant}x": token 2 "{tenant}x" contains "{" or "}" (allowed only in the whole token {tenant})`},
		{"jobs.x{tenant}", `subjects: invalid template "jobs.x{tenant}": token 2 "x{tenant}" contains "{" or "}" (allowed only in the whole token {tenant})`},
		{"jobs.{tenant}.a}", `subjects: invalid template "jobs.{tenant}.a}": token 3 "a}" contains "{" or "}" (allowed only in the whole token {tenant})`},
		{"jobs.{type}.{tenant}", `subjects: invalid template "jobs.{type}.{tenant}": token 2 "{type}" is not a known placeholder (the only one is {tenant})`},
		{"jobs.{Tenant}", `subjects: invalid template "jobs.{Tenant}": token 2 "{Tenant}" is not a known placeholder (the only one is {tenant})`},
		{"jobs.{}", `subjects: invalid template "jobs.{}": token 2 "{}" is not a known placeholder (the only one is {tenant})`},
		{"jobs.{tenant}.a*", `subjects: invalid template "jobs.{tenant}.a*": token 3 "a*" contains "*" (a wildcard must be a whole token)`},
		{"jobs.{tenant}.**", `subjects: invalid template "jobs.{tenant}.**": token 3 "**" contains "*" (a wildcard must be a whole token)`},
		{"jobs.{tenant}.>>", `subjects: invalid template "jobs.{tenant}.>>": token 3 ">>" contains ">" (a wildcard must be a whole token)`},
		{"jobs.{tenant}.a b", `subjects: invalid template "jobs.{tenant}.a b": token 3 "a b" contains whitespace`},
		{"jobs.{tenant}.x\t", `subjects: invalid template "jobs.{tenant}.x\t": token 3 "x\t" contains whitespace`},
		{"jobs.{tenant}. ", `subjects: invalid template "jobs.{tenant}. ": token 3 " " contains whitespace`},
		{"jobs.{tenant}.a\u00a0b", `subjects: invalid template "jobs.{tenant}.a\u00a0b": token 3 "a\u00a0b" contains whitespace`},
		{" jobs.{tenant}", `subjects: invalid template " jobs.{tenant}": token 1 " jobs" contains whitespace`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			tmpl, err := Parse(tt.in)
			if err == nil {
				t.Fatalf("Parse(%q) = %q, want error", tt.in, tmpl.String())
			}
			if !errors.Is(err, ErrTemplate) {
				t.Errorf("Parse(%q) error %v does not wrap ErrTemplate", tt.in, err)
			}
			if err.Error() != tt.want {
				t.Errorf("Parse(%q) error:\n got %s\nwant %s", tt.in, err, tt.want)
			}
			if tmpl.String() != "" || tmpl.Filter() != "" {
				t.Errorf("Parse(%q) returned a non-zero Template with its error", tt.in)
			}
		})
	}
}

func TestMustParse(t *testing.T) {
	if got := MustParse("a.{tenant}").String(); got != "a.{tenant}" {
		t.Errorf("MustParse = %q", got)
	}
	defer func() {
		r := recover()
		err, ok := r.(error)
		if !ok || !errors.Is(err, ErrTemplate) {
			t.Errorf("MustParse of a bad template panicked with %v, want an ErrTemplate error", r)
		}
	}()
	MustParse("a.b")
}

func TestMatch(t *testing.T) {
	tests := []struct {
		tmpl, subject string
		ok            bool
		tenant        string
		captures      []string
	}{
		{"jobs.submit.{tenant}.>", "jobs.submit.acme.email.send", true, "acme", []string{"email.send"}},
		{"jobs.submit.{tenant}.>", "jobs.submit.acme.email", true, "acme", []string{"email"}},
		{"jobs.submit.{tenant}.>", "jobs.submit.acme", false, "", nil},
		{"jobs.submit.{tenant}.>", "jobs.submit.acme.", false, "", nil},
		{"jobs.submit.{tenant}.>", "jobs.submit.acme.email.", false, "", nil},
		{"jobs.submit.{tenant}.>", "jobs.submit.acme.email..send", false, "", nil},
		{"jobs.submit.{tenant}.>", "jobs.submit..email", false, "", nil},
		{"jobs.submit.{tenant}.>", "jobs.submit.*.email", false, "", nil},
		{"jobs.submit.{tenant}.>", "jobs.submit.>.email", false, "", nil},
		{"jobs.submit.{tenant}.>", "jobs.submit.acme.>", false, "", nil},
		{"jobs.submit.{tenant}.>", "jobs.submit.acme.a.*", false, "", nil},
		{"jobs.submit.{tenant}.>", "jobs.submit.ac me.email", false, "", nil},
		{"jobs.submit.{tenant}.>", "jobs.submit.acme.em\tail", false, "", nil},
		{"jobs.submit.{tenant}.>", "jobs.submit.acme.a\rb", false, "", nil},
		{"jobs.submit.{tenant}.>", "jobs.admitted.acme.email", false, "", nil},
		{"jobs.submit.{tenant}.>", "jobs.submitx.acme.email", false, "", nil},
		{"jobs.submit.{tenant}.>", "", false, "", nil},
		{"jobs.submit.{tenant}.>", ".", false, "", nil},
		{"jobs.submit.{tenant}.>", "jobs", false, "", nil},
		// Tokens NATS accepts as literals are passed through.
		{"jobs.submit.{tenant}.>", "jobs.submit.a*.b>", true, "a*", []string{"b>"}},
		{"jobs.submit.{tenant}.>", "jobs.submit.{x}.é\u00a0\xff", true, "{x}", []string{"é\u00a0\xff"}},
		{"jobs.{tenant}", "jobs.acme", true, "acme", nil},
		{"jobs.{tenant}", "jobs.acme.x", false, "", nil},
		{"jobs.{tenant}", "jobs.", false, "", nil},
		{"jobs.{tenant}", "jobs", false, "", nil},
		{"{tenant}", "acme", true, "acme", nil},
		{"{tenant}", "", false, "", nil},
		{"{tenant}", "*", false, "", nil},
		{"{tenant}", "a.b", false, "", nil},
		{"jobs.*.{tenant}.*", "jobs.x.acme.y", true, "acme", []string{"x", "y"}},
		{"jobs.*.{tenant}.*", "jobs.x.acme.y.z", false, "", nil},
		{"jobs.*.{tenant}.*", "jobs.x.acme", false, "", nil},
		{"jobs.*.{tenant}.*", "jobs..acme.y", false, "", nil},
		{"*.{tenant}.*.>", "a.b.c.d.e", true, "b", []string{"a", "c", "d.e"}},
	}
	for _, tt := range tests {
		t.Run(tt.tmpl+" "+tt.subject, func(t *testing.T) {
			tmpl := MustParse(tt.tmpl)
			tenant, ok := tmpl.Match(tt.subject)
			if ok != tt.ok || tenant != tt.tenant {
				t.Errorf("Match(%q) = %q, %v; want %q, %v", tt.subject, tenant, ok, tt.tenant, tt.ok)
			}
			tenant, caps, ok := tmpl.MatchCaptures(tt.subject)
			if ok != tt.ok || tenant != tt.tenant || !slices.Equal(caps, tt.captures) {
				t.Errorf("MatchCaptures(%q) = %q, %q, %v; want %q, %q, %v", tt.subject, tenant, caps, ok, tt.tenant, tt.captures, tt.ok)
			}
			if !ok {
				return
			}
			if tmpl.Wildcards() == 0 && caps != nil {
				t.Errorf("MatchCaptures(%q) captures = %#v, want nil", tt.subject, caps)
			}
			if s, err := tmpl.Subject(tenant, caps...); err != nil || s != tt.subject {
				t.Errorf("Subject(%q, %q) = %q, %v; want %q", tenant, caps, s, err, tt.subject)
			}
		})
	}
}

func TestSubject(t *testing.T) {
	tests := []struct {
		tmpl     string
		tenant   string
		captures []string
		want     string
	}{
		{"jobs.submit.{tenant}.>", "acme", []string{"email.send"}, "jobs.submit.acme.email.send"},
		{"jobs.submit.{tenant}.>", "acme", []string{"email"}, "jobs.submit.acme.email"},
		{"jobs.{tenant}", "acme", nil, "jobs.acme"},
		{"{tenant}", "acme", nil, "acme"},
		{"*.{tenant}.*.>", "t", []string{"a", "b", "c.d.e"}, "a.t.b.c.d.e"},
		{"jobs.{tenant}.>", "ünï", []string{"a*.b>"}, "jobs.ünï.a*.b>"},
	}
	for _, tt := range tests {
		got, err := MustParse(tt.tmpl).Subject(tt.tenant, tt.captures...)
		if err != nil || got != tt.want {
			t.Errorf("Parse(%q).Subject(%q, %q) = %q, %v; want %q", tt.tmpl, tt.tenant, tt.captures, got, err, tt.want)
		}
	}
}

func TestSubjectErrors(t *testing.T) {
	tests := []struct {
		tmpl     string
		tenant   string
		captures []string
		want     string
	}{
		{"jobs.{tenant}.>", "", []string{"x"}, `subjects: cannot build subject from template "jobs.{tenant}.>": tenant "" is empty`},
		{"jobs.{tenant}.>", "a.b", []string{"x"}, `subjects: cannot build subject from template "jobs.{tenant}.>": tenant "a.b" contains "."`},
		{"jobs.{tenant}.>", "*", []string{"x"}, `subjects: cannot build subject from template "jobs.{tenant}.>": tenant "*" is a wildcard`},
		{"jobs.{tenant}.>", ">", []string{"x"}, `subjects: cannot build subject from template "jobs.{tenant}.>": tenant ">" is a wildcard`},
		{"jobs.{tenant}.>", "a b", []string{"x"}, `subjects: cannot build subject from template "jobs.{tenant}.>": tenant "a b" contains whitespace`},
		{"jobs.{tenant}.>", "a\n", []string{"x"}, `subjects: cannot build subject from template "jobs.{tenant}.>": tenant "a\n" contains whitespace`},
		{"jobs.{tenant}.>", "acme", nil, `subjects: cannot build subject from template "jobs.{tenant}.>": got 0 captures, want 1 (one per wildcard)`},
		{"jobs.{tenant}", "acme", []string{"x"}, `subjects: cannot build subject from template "jobs.{tenant}": got 1 captures, want 0 (one per wildcard)`},
		{"jobs.{tenant}.>", "acme", []string{""}, `subjects: cannot build subject from template "jobs.{tenant}.>": capture 1 "" for ">": is empty`},
		{"jobs.{tenant}.>", "acme", []string{"a..b"}, `subjects: cannot build subject from template "jobs.{tenant}.>": capture 1 "a..b" for ">": token 2 is empty`},
		{"jobs.{tenant}.>", "acme", []string{"a."}, `subjects: cannot build subject from template "jobs.{tenant}.>": capture 1 "a." for ">": token 2 is empty`},
		{"jobs.{tenant}.>", "acme", []string{"a.*"}, `subjects: cannot build subject from template "jobs.{tenant}.>": capture 1 "a.*" for ">": token 2 is a wildcard`},
		{"jobs.{tenant}.>", "acme", []string{"a b"}, `subjects: cannot build subject from template "jobs.{tenant}.>": capture 1 "a b" for ">": token 1 contains whitespace`},
		{"*.{tenant}.>", "acme", []string{"a.b", "c"}, `subjects: cannot build subject from template "*.{tenant}.>": capture 1 "a.b" for "*" contains "."`},
		{"*.{tenant}.>", "acme", []string{"", "c"}, `subjects: cannot build subject from template "*.{tenant}.>": capture 1 "" for "*" is empty`},
		{"*.{tenant}.*", "acme", []string{"a", ">"}, `subjects: cannot build subject from template "*.{tenant}.*": capture 2 ">" for "*" is a wildcard`},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			got, err := MustParse(tt.tmpl).Subject(tt.tenant, tt.captures...)
			if err == nil {
				t.Fatalf("Subject(%q, %q) = %q, want error", tt.tenant, tt.captures, got)
			}
			if !errors.Is(err, ErrSubject) {
				t.Errorf("error %v does not wrap ErrSubject", err)
			}
			if err.Error() != tt.want {
				t.Errorf("error:\n got %s\nwant %s", err, tt.want)
			}
		})
	}
}

func TestZeroTemplate(t *testing.T) {
	var z Template
	if z.String() != "" || z.Filter() != "" || z.Wildcards() != 0 {
		t.Errorf("zero Template: String %q, Filter %q, Wildcards %d", z.String(), z.Filter(), z.Wildcards())
	}
	for _, s := range []string{"", "a", "a.b"} {
		if tenant, ok := z.Match(s); ok {
			t.Errorf("zero Template matched %q with tenant %q", s, tenant)
		}
		if _, caps, ok := z.MatchCaptures(s); ok || caps != nil {
			t.Errorf("zero Template MatchCaptures(%q) = %q, %v", s, caps, ok)
		}
	}
	if _, err := z.Subject("acme"); !errors.Is(err, ErrSubject) {
		t.Errorf("zero Template Subject error = %v, want ErrSubject", err)
	}
}

// TestConcurrentUse exercises a shared Template and Mapping from several goroutines, for the
// race detector.
func TestConcurrentUse(t *testing.T) {
	m, err := NewMapping(MustParse("jobs.submit.{tenant}.>"), MustParse("jobs.admitted.{tenant}.>"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	for g := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 200 {
				subject := fmt.Sprintf("jobs.submit.t%d.x%d", g, i)
				tenant, mapped, err := m.Map(subject)
				if err != nil || tenant != fmt.Sprintf("t%d", g) || !strings.HasPrefix(mapped, "jobs.admitted.") {
					t.Errorf("Map(%q) = %q, %q, %v", subject, tenant, mapped, err)
					return
				}
				if _, caps, ok := m.In().MatchCaptures(subject); !ok || len(caps) != 1 {
					t.Errorf("MatchCaptures(%q) = %q, %v", subject, caps, ok)
					return
				}
			}
		}()
	}
	for range 4 {
		<-done
	}
}

func TestTenantFilter(t *testing.T) {
	for _, tc := range []struct{ tmpl, tenant, want string }{
		{"jobs.submit.{tenant}.>", "acme", "jobs.submit.acme.>"},
		{"{tenant}.jobs.*.x", "acme", "acme.jobs.*.x"},
		{"jobs.waiting.{tenant}", "bob", "jobs.waiting.bob"},
	} {
		got, err := MustParse(tc.tmpl).TenantFilter(tc.tenant)
		if err != nil || got != tc.want {
			t.Errorf("%s for %q = %q, %v; want %q", tc.tmpl, tc.tenant, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "a.b", "*", ">", "a b"} {
		if _, err := MustParse("jobs.{tenant}.>").TenantFilter(bad); !errors.Is(err, ErrSubject) {
			t.Errorf("tenant %q: err %v, want ErrSubject", bad, err)
		}
	}
	if _, err := (Template{}).TenantFilter("acme"); !errors.Is(err, ErrSubject) {
		t.Errorf("zero template: %v", err)
	}
}
