package turns

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/protocol"
)

// Execution kinds of an admission.
const (
	KindExternalMessage = "external_message"
)

// admission is the durable admission record of one root turn.
type admission struct {
	SessionID      string
	TurnID         string
	ChainSeq       int64
	RunID          string
	UserMessageID  string
	PreviousTurnID string // "" for the first turn of a session
	Kind           string
	Content        protocol.MessageContent
	contentJSON    string
	Sources        string // JSON array of source messages ("[]" when none)
	AdmittedAt     int64
}

const admissionColumns = `session_id, turn_id, chain_seq, run_id, user_message_id, previous_turn_id, kind, content, sources, admitted_at`

func scanAdmission(scan func(...any) error) (admission, error) {
	var a admission
	var user, prev sql.NullString
	if err := scan(&a.SessionID, &a.TurnID, &a.ChainSeq, &a.RunID, &user, &prev, &a.Kind, &a.contentJSON, &a.Sources, &a.AdmittedAt); err != nil {
		return a, err
	}
	a.UserMessageID, a.PreviousTurnID = user.String, prev.String
	// The stored content was encoded from normalized content; an input
	// aggregated from queued messages may exceed the wire bounds of one
	// message, so it is not decoded with the wire codec.
	if err := json.Unmarshal([]byte(a.contentJSON), &a.Content); err != nil {
		return a, fmt.Errorf("turns: admission %s/%s content: %w", a.SessionID, a.TurnID, err)
	}
	return a, nil
}

// loadAdmission reads the admission of (sessionID, turnID); found is false
// when there is none.
func loadAdmission(q store.Querier, sessionID, turnID string) (admission, bool, error) {
	a, err := scanAdmission(q.QueryRow(`SELECT `+admissionColumns+` FROM turn_admissions WHERE session_id = ? AND turn_id = ?`, sessionID, turnID).Scan)
	if errors.Is(err, sql.ErrNoRows) {
		return a, false, nil
	}
	return a, err == nil, err
}

// loadTip reads the last admission of sessionID.
func loadTip(q store.Querier, sessionID string) (admission, bool, error) {
	a, err := scanAdmission(q.QueryRow(`SELECT `+admissionColumns+` FROM turn_admissions WHERE session_id = ? ORDER BY chain_seq DESC LIMIT 1`, sessionID).Scan)
	if errors.Is(err, sql.ErrNoRows) {
		return a, false, nil
	}
	return a, err == nil, err
}

// insertAdmission appends a to its session's chain: its chain_seq and
// previous turn are those after the current tip.
func insertAdmission(tx *store.Tx, a *admission) error {
	tip, found, err := loadTip(tx, a.SessionID)
	if err != nil {
		return err
	}
	a.ChainSeq, a.PreviousTurnID = 1, ""
	if found {
		a.ChainSeq, a.PreviousTurnID = tip.ChainSeq+1, tip.TurnID
	}
	b, err := protocol.Marshal(a.Content)
	if err != nil {
		return err
	}
	a.contentJSON = string(b)
	if a.Sources == "" {
		a.Sources = "[]"
	}
	_, err = tx.Exec(`INSERT INTO turn_admissions (`+admissionColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		a.SessionID, a.TurnID, a.ChainSeq, a.RunID, nullString(a.UserMessageID), nullString(a.PreviousTurnID),
		a.Kind, a.contentJSON, a.Sources, a.AdmittedAt)
	return err
}

func nullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

// sameContent reports whether two normalized contents are the same
// (attachment and quote order included).
func sameContent(a, b protocol.MessageContent) bool {
	x, err1 := protocol.Marshal(a)
	y, err2 := protocol.Marshal(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}

// runRow is the header of a run; Status is empty when the run has not
// started.
type runRow struct {
	Status          sql.NullString
	TerminalEventID sql.NullString
	FailureClass    sql.NullString
	AbortSource     sql.NullString
}

// snapshot derives the canonical turn snapshot of an admission from its run:
// admitted until the run starts, then the run's status, with the terminal
// event and failure class or abort source of a terminal run.
func snapshot(q store.Querier, a admission) (protocol.TurnSnapshot, error) {
	var r runRow
	err := q.QueryRow(`SELECT status, terminal_event_id, failure_class, abort_source FROM runs WHERE run_id = ?`, a.RunID).
		Scan(&r.Status, &r.TerminalEventID, &r.FailureClass, &r.AbortSource)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return protocol.TurnSnapshot{}, err
	}
	return r.snapshot(a.SessionID, a.TurnID, a.RunID)
}

// snapshot derives the snapshot of turnID from its run header.
func (r runRow) snapshot(sessionID, turnID, runID string) (protocol.TurnSnapshot, error) {
	s := protocol.TurnSnapshot{SessionID: sessionID, TurnID: turnID, RunID: runID, Status: protocol.TurnAdmitted}
	if !r.Status.Valid {
		return s, nil
	}
	s.Status = protocol.TurnStatus(r.Status.String)
	switch s.Status {
	case protocol.TurnCreated, protocol.TurnRunning, protocol.TurnWaitingForUser:
		if r.TerminalEventID.Valid {
			return s, fmt.Errorf("turns: run %s is %s with a terminal event", runID, s.Status)
		}
	case protocol.TurnCompleted, protocol.TurnFailed, protocol.TurnCancelled:
		if !r.TerminalEventID.Valid {
			return s, fmt.Errorf("turns: run %s is %s without a terminal event", runID, s.Status)
		}
		s.TerminalEventID = r.TerminalEventID.String
		if s.Status == protocol.TurnFailed {
			s.FailureClass = truncate(r.FailureClass.String, 128)
		}
		if s.Status == protocol.TurnCancelled {
			s.AbortSource = truncate(r.AbortSource.String, 128)
		}
	default:
		return s, fmt.Errorf("turns: run %s has unknown status %q", runID, s.Status)
	}
	return s, nil
}

// truncate cuts s to at most n bytes on a rune boundary; an empty result
// becomes "unknown" (the wire needs a non-empty value).
func truncate(s string, n int) string {
	if s = protocol.TruncateUTF8(s, n); s == "" {
		return "unknown"
	}
	return s
}

// TipSnapshot reads the canonical root turn of a session inside a store
// read: the snapshot of its last admitted turn, or nil.
func TipSnapshot(q store.Querier, sessionID string) (*protocol.TurnSnapshot, error) {
	var turnID, runID string
	var r runRow
	err := q.QueryRow(`SELECT a.turn_id, a.run_id, r.status, r.terminal_event_id, r.failure_class, r.abort_source
		FROM turn_admissions a LEFT JOIN runs r ON r.run_id = a.run_id
		WHERE a.session_id = ? ORDER BY a.chain_seq DESC LIMIT 1`, sessionID).
		Scan(&turnID, &runID, &r.Status, &r.TerminalEventID, &r.FailureClass, &r.AbortSource)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, err
	}
	s, err := r.snapshot(sessionID, turnID, runID)
	if err != nil {
		return nil, err
	}
	return &s, nil
}

// terminalPayload is the payload of a run's terminal event.
type terminalPayload struct {
	TurnID       string `json:"turnId"`
	EventID      string `json:"eventId"`
	Status       string `json:"status"`
	StopReason   string `json:"stopReason,omitempty"`
	FailureClass string `json:"failureClass,omitempty"`
	AbortSource  string `json:"abortSource,omitempty"`
	Message      string `json:"message,omitempty"`
	Recovered    bool   `json:"recovered,omitempty"`
}

// Run event types written by the turn coordinator.
const (
	EventTurnTerminal       = "turn_terminal"
	EventTokenUsage         = "token_usage"
	EventPermissionDecision = "permission_decision"
)
