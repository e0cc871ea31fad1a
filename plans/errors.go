package plans

import (
	"errors"
	"strconv"
	"strings"
)

// ErrFile: the plans file cannot be read or is malformed. Every error of Parse and Load wraps
// it; a malformed file's error is also an *Error saying where.
var ErrFile = errors.New("plans: bad plans file")

// Error is a problem at a place in a plans file. It wraps ErrFile and its cause, if any (a
// *bucket.LimitError, bucket.ErrInvalidTenant, the YAML parser's error).
type Error struct {
	// File is the file's name as given to Parse or Load.
	File string
	// Line is the 1-based line of the problem; 0 when it has none (an empty file).
	Line int
	// Field is the path of the field at fault, such as plans.gold.limits[1].rate; "" when the
	// problem concerns the file as a whole.
	Field string
	// Plan is the plan the problem lies in; "" when none.
	Plan string
	// Limit is the index of the failing limit in Plan's limits; -1 when the problem does not lie
	// in one limit.
	Limit int
	// Msg says what is wrong, without the place.
	Msg string
	// Err is the cause, or nil.
	Err error
}

// Error reads "plans: FILE:LINE: FIELD: MSG", without LINE or FIELD when there are none.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("plans: ")
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns ErrFile and the cause.
func (e *Error) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrFile, e.Err}
	}
	return []error{ErrFile}
}
