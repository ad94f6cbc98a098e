package tasks

import (
	"errors"
	"strconv"

	"github.com/maka-agent/maka/protocol"
)

// Sentinel errors of the write API. Detailed errors wrap one of them (test
// with errors.Is, read details with errors.As). Storage failures are the
// store's errors (store.ErrPersistenceFailed, store.ErrCommitOutcomeUnknown,
// store.ErrClosed), returned unchanged.
var (
	// ErrInvalidSession reports a session id that is not an entity id.
	ErrInvalidSession = errors.New("tasks: invalid session id")
	// ErrInvalidRef reports a task or parent reference that is neither a
	// safe task id nor a task key.
	ErrInvalidRef = errors.New("tasks: task reference is neither a task id nor a task key")
	// ErrNotFound reports that no task of the session matches a reference.
	ErrNotFound = errors.New("tasks: no such task")
	// ErrParentNotFound reports that a draft's parent does not exist.
	ErrParentNotFound = errors.New("tasks: no such parent task")
	// ErrInvalidText reports a subject, reason or evidence that is blank
	// once canonical or too long; see *TextError.
	ErrInvalidText = errors.New("tasks: invalid task text")
	// ErrInvalidStatus reports a status outside the six task statuses.
	ErrInvalidStatus = errors.New("tasks: invalid task status")
	// ErrInvalidOwner reports an owner with an unknown actor or an unsafe id.
	ErrInvalidOwner = errors.New("tasks: invalid task owner")
	// ErrInvalidMeta reports an unknown event source or actor.
	ErrInvalidMeta = errors.New("tasks: invalid mutation metadata")
	// ErrEmptyChange reports an update that changes nothing.
	ErrEmptyChange = errors.New("tasks: update must change at least one field")
	// ErrInvalidTransition reports a status change the ledger does not
	// allow; see *TransitionError.
	ErrInvalidTransition = errors.New("tasks: invalid task status transition")
	// ErrMissingEvidence reports a status without its required evidence;
	// see *EvidenceError.
	ErrMissingEvidence = errors.New("tasks: task status requires evidence")
	// ErrLimitExceeded reports a session that already holds
	// MaxTasksPerSession tasks; see *LimitError.
	ErrLimitExceeded = errors.New("tasks: task ledger limit reached")
	// ErrKeyExhausted reports a child whose key would be longer than
	// protocol.TaskKeyMaxLen (the hierarchy is too deep).
	ErrKeyExhausted = errors.New("tasks: task hierarchy is too deep to allocate a key")
)

// TextError details ErrInvalidText.
type TextError struct {
	Field  string // FieldSubject, FieldBlockedReason, …
	Reason string
}

func (e *TextError) Error() string { return "tasks: invalid task " + e.Field + ": " + e.Reason }

// Unwrap returns ErrInvalidText.
func (e *TextError) Unwrap() error { return ErrInvalidText }

// TransitionError details ErrInvalidTransition.
type TransitionError struct {
	TaskID, Key    string
	From, To       protocol.TaskStatus
	ExplicitReopen bool
}

func (e *TransitionError) Error() string {
	msg := "tasks: invalid task status transition from " + string(e.From) + " to " + string(e.To) + " for " + e.Key
	if (e.From == protocol.TaskCompleted || e.From == protocol.TaskCancelled) && !e.ExplicitReopen {
		msg += " (reopening requires an explicit reopen)"
	}
	return msg
}

// Unwrap returns ErrInvalidTransition.
func (e *TransitionError) Unwrap() error { return ErrInvalidTransition }

// EvidenceError details ErrMissingEvidence.
type EvidenceError struct {
	Status protocol.TaskStatus
	Field  string // the missing field
}

func (e *EvidenceError) Error() string {
	return "tasks: " + string(e.Status) + " tasks require " + e.Field
}

// Unwrap returns ErrMissingEvidence.
func (e *EvidenceError) Unwrap() error { return ErrMissingEvidence }

// LimitError details ErrLimitExceeded.
type LimitError struct {
	Limit int // MaxTasksPerSession
	Count int // tasks the session holds, terminal and archived included
}

func (e *LimitError) Error() string {
	return "tasks: task ledger is limited to " + itoa(e.Limit) + " tasks per session (currently " + itoa(e.Count) +
		"); completed, failed, cancelled and archived tasks still count"
}

// Unwrap returns ErrLimitExceeded.
func (e *LimitError) Unwrap() error { return ErrLimitExceeded }

func itoa(n int) string { return strconv.Itoa(n) }
