package turns

import (
	"errors"
	"fmt"

	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/protocol"
)

// This file is the run record: the only code that writes the runs table
// (its schema is in schema.go), and the run status machine. Other packages
// change a run through the verbs below, inside their own store.Write.
//
//	(no row) ──BeginRun──▶ running ◀──MarkRunning── waiting_for_user
//	                          │ ──MarkWaiting──▶        │
//	                          └──────────Terminate──────┴──▶ completed | failed | cancelled
//
// A run is open until Terminate sets its terminal event; nothing changes a
// terminated run.

// runTransitions lists, for each status a verb sets, the statuses the run
// may have before it.
var runTransitions = map[protocol.TurnStatus][]protocol.TurnStatus{
	protocol.TurnWaitingForUser: {protocol.TurnRunning, protocol.TurnWaitingForUser},
	protocol.TurnRunning:        {protocol.TurnWaitingForUser},
}

// errNoOpenRun reports a terminal write for a run that has no open header.
var errNoOpenRun = errors.New("turns: the run has no open header")

// beginRunRow writes the header of a run that starts now: running.
func beginRunRow(tx *store.Tx, runID, sessionID, turnID string, at int64) error {
	_, err := tx.Exec(`INSERT INTO runs (run_id, session_id, turn_id, status, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)`,
		runID, sessionID, turnID, string(protocol.TurnRunning), at, at)
	return err
}

// setRunStatus moves an open run to status when the machine allows it
// from the status it has; changed is false when the run was elsewhere
// (already there and not re-enterable, terminated, or absent).
func setRunStatus(tx *store.Tx, runID string, status protocol.TurnStatus, now int64) (changed bool, err error) {
	from := runTransitions[status]
	if len(from) == 0 {
		return false, fmt.Errorf("turns: no transition sets a run %s", status)
	}
	args := []any{string(status), now, runID}
	marks := ""
	for i, s := range from {
		if i > 0 {
			marks += ", "
		}
		marks += "?"
		args = append(args, string(s))
	}
	res, err := tx.Exec(`UPDATE runs SET status = ?, updated_at = ? WHERE run_id = ? AND terminal_event_id IS NULL AND status IN (`+marks+`)`, args...)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// MarkWaiting sets an open run waiting for the user (a prompt or question
// is pending); changed is false when it was not open.
func MarkWaiting(tx *store.Tx, runID string, now int64) (changed bool, err error) {
	return setRunStatus(tx, runID, protocol.TurnWaitingForUser, now)
}

// MarkRunning sets a run waiting for the user back to running; changed is
// false when it was not waiting.
func MarkRunning(tx *store.Tx, runID string, now int64) (changed bool, err error) {
	return setRunStatus(tx, runID, protocol.TurnRunning, now)
}

// runTerminal is the terminal fact of a run.
type runTerminal struct {
	Status, EventID                       string
	StopReason, FailureClass, AbortSource string
	Message, Model, ConnectionSlug        string
	At                                    int64
}

// terminateRunRow records the terminal fact of an open run.
func terminateRunRow(tx *store.Tx, runID string, t runTerminal) error {
	res, err := tx.Exec(`UPDATE runs SET status = ?, terminal_event_id = ?, stop_reason = ?, failure_class = ?, abort_source = ?,
		failure_message = ?, completed_at = ?, updated_at = ?, model = COALESCE(?, model), connection_slug = COALESCE(?, connection_slug)
		WHERE run_id = ? AND terminal_event_id IS NULL`,
		t.Status, t.EventID, nullString(t.StopReason), nullString(t.FailureClass), nullString(t.AbortSource),
		nullString(t.Message), t.At, t.At, nullString(t.Model), nullString(t.ConnectionSlug), runID)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return errors.Join(err, fmt.Errorf("%w: %s", errNoOpenRun, runID))
	}
	return nil
}
