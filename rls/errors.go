package rls

import "errors"

// ErrNoPolicy: New was given no policy to decide with.
var ErrNoPolicy = errors.New("rls: no policy")
