package deadletter

import "errors"

// ErrEdit is wrapped by every refusal of a header edit (Edit.Validate, ParseSetHeader): the
// message names the header and why it cannot be changed.
var ErrEdit = errors.New("deadletter: header edit refused")
