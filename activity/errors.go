package activity

import "errors"

// Errors of reading a share (ParseShare) or a request for one (ParseShareRequest). Each is
// wrapped with what exactly was wrong, and where.
var (
	// ErrBadShare: the bytes are not a share this package reads (malformed, too large, of
	// another version, or with a value out of range).
	ErrBadShare = errors.New("activity: bad share")
	// ErrBadShareRequest: the bytes are not a request for a share.
	ErrBadShareRequest = errors.New("activity: bad share request")
	// ErrShareRefused: the replica answered, refusing the request (AppendRefusal); the error
	// carries its reason.
	ErrShareRefused = errors.New("activity: share refused")
)
