package subjects

import "errors"

// Sentinel errors. Every error returned by this package wraps exactly one of these with
// details (the template or subject quoted, and what is wrong where); test with errors.Is.
var (
	// ErrTemplate: a template does not follow the grammar (see the package documentation).
	ErrTemplate = errors.New("subjects: invalid template")
	// ErrMapping: two templates cannot be paired in a Mapping because their wildcards differ.
	ErrMapping = errors.New("subjects: incompatible templates")
	// ErrNoMatch: a subject does not match the template it was given to.
	ErrNoMatch = errors.New("subjects: no match")
	// ErrSubject: Template.Subject was given a tenant or captures that do not form a subject
	// the template matches.
	ErrSubject = errors.New("subjects: cannot build subject")
)
