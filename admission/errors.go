package admission

import "errors"

// ErrConfig: the service configuration is invalid; the wrapping error names the field.
var ErrConfig = errors.New("admission: bad configuration")

// ErrSetup: the streams or consumer cannot be used as configured without losing jobs; the
// wrapping error says what to change.
var ErrSetup = errors.New("admission: unusable stream set-up")
