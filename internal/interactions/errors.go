package interactions

import (
	"errors"
	"fmt"

	"github.com/maka-agent/maka/protocol"
)

// Errors of the runtime-facing calls (RequestPermission, AskQuestions).
// Their text is shown to the model, so it says what happened in words.
var (
	// ErrClosed is matched by every ClosureError: the request, or its
	// run, was closed without an answer.
	ErrClosed = errors.New("the request was closed without an answer")
	// ErrCapacityExceeded refuses a request while its session already
	// has the maximum number of pending interactions.
	ErrCapacityExceeded = fmt.Errorf("the session already has %d interactions waiting for an answer (capacity_exceeded)",
		protocol.InteractionMaxPendingPerSession)
	// ErrInvalidRequest refuses a request that cannot be represented as
	// a valid interaction; nothing durable was written.
	ErrInvalidRequest = errors.New("the request cannot be shown for review (invalid_request)")
	// ErrPoisoned is matched by every error of a coordinator that
	// detected a broken invariant; it refuses all later work.
	ErrPoisoned = errors.New("the interaction authority has failed")
)

// ClosureError reports that a request was closed with Reason (one of the
// protocol closure reasons) instead of being answered.
type ClosureError struct {
	Reason string
}

func (e *ClosureError) Error() string {
	switch e.Reason {
	case protocol.InteractionClosureTurnStopped:
		return "the turn was stopped before an answer arrived (turn_stopped)"
	case protocol.InteractionClosureTurnTerminal:
		return "the turn ended before an answer arrived (turn_terminal)"
	case protocol.InteractionClosureTimedOut:
		return "no answer arrived in time (timed_out)"
	case protocol.InteractionClosureHostRestarted:
		return "the host restarted before an answer arrived (host_restarted)"
	}
	return "the request was closed (" + e.Reason + ")"
}

// Is makes a ClosureError match ErrClosed.
func (e *ClosureError) Is(target error) bool { return target == ErrClosed }

// poisonError is the first invariant break of a coordinator.
type poisonError struct{ cause error }

func (e *poisonError) Error() string { return ErrPoisoned.Error() + ": " + e.cause.Error() }
func (e *poisonError) Unwrap() []error {
	return []error{ErrPoisoned, e.cause}
}

// invalid wraps a reason a request cannot be represented.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidRequest, fmt.Sprintf(format, args...))
}
