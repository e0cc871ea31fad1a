package subjects

import (
	"errors"
	"strings"
	"testing"
)

func TestNewMappingErrors(t *testing.T) {
	tests := []struct {
		in, out string
		want    string
	}{
		{"a.{tenant}.*", "b.{tenant}", `subjects: incompatible templates: input "a.{tenant}.*" has 1 "*" but output "b.{tenant}" has 0`},
		{"a.{tenant}", "b.{tenant}.*.*", `subjects: incompatible templates: input "a.{tenant}" has 0 "*" but output "b.{tenant}.*.*" has 2`},
		{"a.{tenant}.>", "b.{tenant}", `subjects: incompatible templates: input "a.{tenant}.>" ends in ">" but output "b.{tenant}" does not`},
		{"a.{tenant}", "b.{tenant}.>", `subjects: incompatible templates: output "b.{tenant}.>" ends in ">" but input "a.{tenant}" does not`},
		{"a.{tenant}.*.>", "b.{tenant}", `subjects: incompatible templates: input "a.{tenant}.*.>" has 1 "*" but output "b.{tenant}" has 0; input "a.{tenant}.*.>" ends in ">" but output "b.{tenant}" does not`},
		// A '>' is not interchangeable with a '*', even when both count one wildcard.
		{"a.{tenant}.*", "b.{tenant}.>", `subjects: incompatible templates: input "a.{tenant}.*" has 1 "*" but output "b.{tenant}.>" has 0; output "b.{tenant}.>" ends in ">" but input "a.{tenant}.*" does not`},
	}
	for _, tt := range tests {
		t.Run(tt.in+" "+tt.out, func(t *testing.T) {
			_, err := NewMapping(MustParse(tt.in), MustParse(tt.out))
			if err == nil {
				t.Fatal("NewMapping succeeded, want error")
			}
			if !errors.Is(err, ErrMapping) {
				t.Errorf("error %v does not wrap ErrMapping", err)
			}
			if err.Error() != tt.want {
				t.Errorf("error:\n got %s\nwant %s", err, tt.want)
			}
		})
	}
}

func TestNewMappingZeroTemplate(t *testing.T) {
	good := MustParse("a.{tenant}")
	for _, pair := range [][2]Template{{{}, good}, {good, {}}, {{}, {}}} {
		_, err := NewMapping(pair[0], pair[1])
		if !errors.Is(err, ErrTemplate) || !strings.Contains(err.Error(), "zero Template") {
			t.Errorf("NewMapping(%q, %q) error = %v, want ErrTemplate naming the zero Template", pair[0], pair[1], err)
		}
	}
}

func TestMap(t *testing.T) {
	tests := []struct {
		in, out, subject string
		tenant, mapped   string
	}{
		{"jobs.submit.{tenant}.>", "jobs.admitted.{tenant}.>", "jobs.submit.acme.email.send", "acme", "jobs.admitted.acme.email.send"},
		{"jobs.submit.{tenant}.>", "jobs.dead.{tenant}.>", "jobs.submit.acme.email", "acme", "jobs.dead.acme.email"},
		{"jobs.submit.{tenant}.>", "{tenant}.out.>", "jobs.submit.acme.a.b.c", "acme", "acme.out.a.b.c"},
		{"jobs.{tenant}", "out.{tenant}.x", "jobs.acme", "acme", "out.acme.x"},
		{"in.*.{tenant}.*", "out.{tenant}.*.mid.*", "in.x.acme.y", "acme", "out.acme.x.mid.y"},
		{"in.*.{tenant}.*.>", "*.*.{tenant}.>", "in.a.t.b.c.d", "t", "a.b.t.c.d"},
		{"jobs.submit.{tenant}.>", "jobs.submit.{tenant}.>", "jobs.submit.acme.x", "acme", "jobs.submit.acme.x"},
	}
	for _, tt := range tests {
		t.Run(tt.subject, func(t *testing.T) {
			m, err := NewMapping(MustParse(tt.in), MustParse(tt.out))
			if err != nil {
				t.Fatal(err)
			}
			if m.In().String() != tt.in || m.Out().String() != tt.out {
				t.Errorf("In, Out = %q, %q", m.In(), m.Out())
			}
			tenant, mapped, err := m.Map(tt.subject)
			if err != nil || tenant != tt.tenant || mapped != tt.mapped {
				t.Errorf("Map(%q) = %q, %q, %v; want %q, %q", tt.subject, tenant, mapped, err, tt.tenant, tt.mapped)
			}
		})
	}
}

func TestMapManyWildcards(t *testing.T) {
	// More '*' than Map keeps on its stack.
	in := MustParse("in.{tenant}" + strings.Repeat(".*", 20) + ".>")
	out := MustParse(strings.Repeat("*.", 20) + "{tenant}.>")
	m, err := NewMapping(in, out)
	if err != nil {
		t.Fatal(err)
	}
	subject := "in.t" + strings.Repeat(".x", 20) + ".y.z"
	tenant, mapped, err := m.Map(subject)
	want := strings.Repeat("x.", 20) + "t.y.z"
	if err != nil || tenant != "t" || mapped != want {
		t.Errorf("Map(%q) = %q, %q, %v; want %q, %q", subject, tenant, mapped, err, "t", want)
	}
}

func TestMapErrors(t *testing.T) {
	m, err := NewMapping(MustParse("jobs.submit.{tenant}.>"), MustParse("jobs.admitted.{tenant}.>"))
	if err != nil {
		t.Fatal(err)
	}
	star, err := NewMapping(MustParse("jobs.*.{tenant}"), MustParse("out.{tenant}.*"))
	if err != nil {
		t.Fatal(err)
	}
	const tmpl = `for template "jobs.submit.{tenant}.>": `
	tests := []struct {
		m       Mapping
		subject string
		want    string
	}{
		{m, "", `subjects: no match: subject "" ` + tmpl + `subject is empty`},
		{m, "jobs", `subjects: no match: subject "jobs" ` + tmpl + `has 1 tokens, want at least 4`},
		{m, "jobs.submit.acme", `subjects: no match: subject "jobs.submit.acme" ` + tmpl + `has 3 tokens, want at least 4`},
		{m, "jobs.admitted.acme.x", `subjects: no match: subject "jobs.admitted.acme.x" ` + tmpl + `token 2 is "admitted", want "submit"`},
		{m, "jobs.submit..x", `subjects: no match: subject "jobs.submit..x" ` + tmpl + `token 3 (the tenant) is empty`},
		{m, "jobs.submit.*.x", `subjects: no match: subject "jobs.submit.*.x" ` + tmpl + `token 3 (the tenant) is a wildcard`},
		{m, "jobs.submit.a b.x", `subjects: no match: subject "jobs.submit.a b.x" ` + tmpl + `token 3 (the tenant) contains whitespace`},
		{m, "jobs.submit.acme.", `subjects: no match: subject "jobs.submit.acme." ` + tmpl + `token 4 (matched by ">") is empty`},
		{m, "jobs.submit.acme.x..y", `subjects: no match: subject "jobs.submit.acme.x..y" ` + tmpl + `token 5 (matched by ">") is empty`},
		{m, "jobs.submit.acme.x.>", `subjects: no match: subject "jobs.submit.acme.x.>" ` + tmpl + `token 5 (matched by ">") is a wildcard`},
		{star, "jobs.acme", `subjects: no match: subject "jobs.acme" for template "jobs.*.{tenant}": has 2 tokens, want 3`},
		{star, "jobs.x.acme.y", `subjects: no match: subject "jobs.x.acme.y" for template "jobs.*.{tenant}": has 4 tokens, want 3`},
		{star, "jobs..acme", `subjects: no match: subject "jobs..acme" for template "jobs.*.{tenant}": token 2 (matched by "*") is empty`},
		{star, "jobs.\t.acme", `subjects: no match: subject "jobs.\t.acme" for template "jobs.*.{tenant}": token 2 (matched by "*") contains whitespace`},
		{Mapping{}, "a.b", `subjects: no match: subject "a.b" for template "": the zero Template matches nothing`},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			tenant, mapped, err := tt.m.Map(tt.subject)
			if err == nil {
				t.Fatalf("Map(%q) = %q, %q, want error", tt.subject, tenant, mapped)
			}
			if tenant != "" || mapped != "" {
				t.Errorf("Map(%q) returned %q, %q with its error", tt.subject, tenant, mapped)
			}
			if !errors.Is(err, ErrNoMatch) {
				t.Errorf("error %v does not wrap ErrNoMatch", err)
			}
			if err.Error() != tt.want {
				t.Errorf("error:\n got %s\nwant %s", err, tt.want)
			}
		})
	}
}

func TestAllocs(t *testing.T) {
	m, err := NewMapping(MustParse("jobs.submit.{tenant}.*.>"), MustParse("jobs.admitted.{tenant}.*.>"))
	if err != nil {
		t.Fatal(err)
	}
	const subject = "jobs.submit.acme.email.send.now"
	var sinkTenant, sinkMapped string
	var sinkOK bool
	if n := testing.AllocsPerRun(100, func() {
		sinkTenant, sinkMapped, err = m.Map(subject)
	}); n > 1 {
		t.Errorf("Map allocates %v times per call, want ≤ 1", n)
	}
	if err != nil || sinkTenant != "acme" || sinkMapped != "jobs.admitted.acme.email.send.now" {
		t.Errorf("Map(%q) = %q, %q, %v", subject, sinkTenant, sinkMapped, err)
	}
	if n := testing.AllocsPerRun(100, func() {
		sinkTenant, sinkOK = m.In().Match(subject)
	}); n != 0 {
		t.Errorf("Match allocates %v times per call, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() {
		sinkTenant, sinkOK = m.In().Match("jobs.submit.acme")
	}); n != 0 {
		t.Errorf("Match of a non-matching subject allocates %v times per call, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() {
		sinkOK = Overlap("jobs.submit.*.*.>", "jobs.*.acme.>")
	}); n != 0 {
		t.Errorf("Overlap allocates %v times per call, want 0", n)
	}
	_ = sinkOK
}

func BenchmarkMap(b *testing.B) {
	m, err := NewMapping(MustParse("jobs.submit.{tenant}.>"), MustParse("jobs.admitted.{tenant}.>"))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := m.Map("jobs.submit.acme.email.send"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMatch(b *testing.B) {
	tmpl := MustParse("jobs.submit.{tenant}.>")
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := tmpl.Match("jobs.submit.acme.email.send"); !ok {
			b.Fatal("no match")
		}
	}
}
