package admission

import (
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrConfig: the service configuration is invalid; the wrapping error names the field.
var ErrConfig = errors.New("admission: bad configuration")

// ErrSetup: the streams or consumer cannot be used as configured without losing jobs; the
// wrapping error says what to change.
var ErrSetup = errors.New("admission: unusable stream set-up")

// JetStream API error codes the publisher tells apart that package jetstream does not name
// (nats-server's names, server/jetstream_errors_generated.go).
const (
	// errCodeInsufficientResources is JSInsufficientResourcesErr: the server has no room.
	errCodeInsufficientResources jetstream.ErrorCode = 10023
	// errCodeStoreFailed is JSStreamStoreFailedF: the stream refused the message; its
	// description says why ("maximum messages exceeded", "message too large", ...).
	errCodeStoreFailed jetstream.ErrorCode = 10077
	// errCodeHeaderExceedsMaximum is JSStreamHeaderExceedsMaximumErr: headers over 64 KiB.
	errCodeHeaderExceedsMaximum jetstream.ErrorCode = 10097
)

// Errors of a message delete (nats-server's names).
const (
	// errCodeSequenceNotFound is JSSequenceNotFoundErrF: no message at that sequence.
	errCodeSequenceNotFound jetstream.ErrorCode = 10043
	// errCodeMsgDeleteFailed is JSStreamMsgDeleteFailedF; its description says why ("no
	// message found", "message delete not permitted", ...).
	errCodeMsgDeleteFailed jetstream.ErrorCode = 10057
)
