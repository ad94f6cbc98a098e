package protocol

// ProtocolError is a framing or decoding failure. It is never sent on the
// wire: the host closes the offending connection, a client fails its own.
type ProtocolError struct {
	Code    string
	Message string
}

func (e *ProtocolError) Error() string { return "protocol " + e.Code + ": " + e.Message }

// Frame error codes: why a received frame was refused (docs/protocol.md,
// Frames). Each ends the connection.
const (
	CodeInvalidFrame  = "invalid_frame"
	CodeFrameTooLarge = "frame_too_large"
	CodeInvalidUTF8   = "invalid_utf8"
	CodeInvalidJSON   = "invalid_json"
)

// ErrorCode is an operation error code (HostOperationErrorCode).
type ErrorCode string

// The 13 operation error codes of protocol v0.
const (
	ErrHostNotReady         ErrorCode = "host_not_ready"
	ErrHostDraining         ErrorCode = "host_draining"
	ErrOperationUnavailable ErrorCode = "operation_unavailable"
	ErrNotFound             ErrorCode = "not_found"
	ErrSessionArchived      ErrorCode = "session_archived"
	ErrSessionBusy          ErrorCode = "session_busy"
	ErrOperationConflict    ErrorCode = "operation_conflict"
	ErrInvalidRequest       ErrorCode = "invalid_request"
	ErrPersistenceFailed    ErrorCode = "persistence_failed"
	ErrCommitOutcomeUnknown ErrorCode = "commit_outcome_unknown"
	ErrAlreadyResolved      ErrorCode = "already_resolved"
	ErrOutcomeUnknown       ErrorCode = "outcome_unknown"
	ErrInternalFailure      ErrorCode = "internal_failure"
)

// AllErrorCodes lists every operation error code.
var AllErrorCodes = []ErrorCode{
	ErrHostNotReady, ErrHostDraining, ErrOperationUnavailable, ErrNotFound, ErrSessionArchived,
	ErrSessionBusy, ErrOperationConflict, ErrInvalidRequest, ErrPersistenceFailed,
	ErrCommitOutcomeUnknown, ErrAlreadyResolved, ErrOutcomeUnknown, ErrInternalFailure,
}

// Standard messages the host uses for kernel-produced errors.
const (
	MessageHostDraining         = "Runtime Host is draining"
	MessageHostNotReady         = "Runtime Host is not ready"
	MessageOperationFailed      = "Runtime Host operation failed"
	MessageOperationUnavailable = "Runtime Host operation is unavailable in this composition"
)

// MessageOperationUnavailabe is the earlier, misspelled name of
// MessageOperationUnavailable.
//
// Deprecated: use MessageOperationUnavailable.
const MessageOperationUnavailabe = MessageOperationUnavailable

// OpError is the error half of a response: {"code", "message"}.
type OpError struct {
	Code    ErrorCode `json:"code"`
	Message string    `json:"message"`
}

func (e *OpError) Error() string { return string(e.Code) + ": " + e.Message }

// NewOpError builds an OpError.
func NewOpError(code ErrorCode, message string) *OpError {
	return &OpError{Code: code, Message: message}
}
