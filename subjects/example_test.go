package subjects_test

import (
	"errors"
	"fmt"

	"github.com/admitter/admitter/subjects"
)

func ExampleParse() {
	in, err := subjects.Parse("jobs.submit.{tenant}.>")
	if err != nil {
		panic(err)
	}
	fmt.Println(in)
	fmt.Println(in.Filter())

	_, err = subjects.Parse("jobs..{tenant}")
	fmt.Println(err)
	fmt.Println(errors.Is(err, subjects.ErrTemplate))
	// Output:
	// jobs.submit.{tenant}.>
	// jobs.submit.*.>
	// subjects: invalid template "jobs..{tenant}": token 2 is empty
	// true
}

func ExampleTemplate_Match() {
	in := subjects.MustParse("jobs.submit.{tenant}.>")
	tenant, ok := in.Match("jobs.submit.acme.email.send")
	fmt.Printf("%q %v\n", tenant, ok)
	tenant, ok = in.Match("jobs.submit.acme") // '>' needs at least one token
	fmt.Printf("%q %v\n", tenant, ok)
	// Output:
	// "acme" true
	// "" false
}

func ExampleTemplate_MatchCaptures() {
	in := subjects.MustParse("jobs.*.{tenant}.>")
	tenant, captures, ok := in.MatchCaptures("jobs.eu.acme.email.send")
	fmt.Printf("%s %q %v\n", tenant, captures, ok)
	// Output:
	// acme ["eu" "email.send"] true
}

func ExampleTemplate_Subject() {
	in := subjects.MustParse("jobs.submit.{tenant}.>")
	s, err := in.Subject("acme", "email.send")
	fmt.Println(s, err)

	_, err = in.Subject("acme")
	fmt.Println(err)
	// Output:
	// jobs.submit.acme.email.send <nil>
	// subjects: cannot build subject from template "jobs.submit.{tenant}.>": got 0 captures, want 1 (one per wildcard)
}

func ExampleMapping_Map() {
	m, err := subjects.NewMapping(
		subjects.MustParse("jobs.submit.{tenant}.>"),
		subjects.MustParse("jobs.admitted.{tenant}.>"),
	)
	if err != nil {
		panic(err)
	}
	fmt.Println(m.Map("jobs.submit.acme.email.send"))

	_, _, err = m.Map("jobs.submit.acme")
	fmt.Println(err)
	fmt.Println(errors.Is(err, subjects.ErrNoMatch))
	// Output:
	// acme jobs.admitted.acme.email.send <nil>
	// subjects: no match: subject "jobs.submit.acme" for template "jobs.submit.{tenant}.>": has 3 tokens, want at least 4
	// true
}

func ExampleNewMapping() {
	_, err := subjects.NewMapping(
		subjects.MustParse("jobs.submit.{tenant}.>"),
		subjects.MustParse("jobs.admitted.{tenant}"),
	)
	fmt.Println(err)
	// Output:
	// subjects: incompatible templates: input "jobs.submit.{tenant}.>" ends in ">" but output "jobs.admitted.{tenant}" does not
}

func ExampleOverlap() {
	in := subjects.MustParse("jobs.{tenant}.>")
	out := subjects.MustParse("jobs.{tenant}.admitted.>")
	if subjects.Overlap(in.Filter(), out.Filter()) {
		fmt.Printf("refusing: %s would consume what %s produces\n", in, out)
	}
	fmt.Println(subjects.Overlap("jobs.submit.*.>", "jobs.admitted.*.>"))
	// Output:
	// refusing: jobs.{tenant}.> would consume what jobs.{tenant}.admitted.> produces
	// false
}
