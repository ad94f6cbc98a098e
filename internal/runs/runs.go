// Package runs owns the run record: the runs table, one header per run of
// a root turn, and its status machine. It is the only code that writes the
// table; the session owner (internal/turns) and the interaction authority
// (internal/interactions) change a run through the verbs below, inside
// their own store.Write.
//
//	(no row) ──Begin──▶ running ◀──MarkRunning── waiting_for_user
//	                       │ ──MarkWaiting──▶        │
//	                       └──────────Terminate──────┴──▶ completed | failed | cancelled
//
// A run is open until Terminate sets its terminal event; nothing changes a
// terminated run. A run's events live in the run_events table
// (internal/sessions).
package runs

import (
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/protocol"
)

// CreateSchema creates the runs table inside a migration (schema version 4,
// with the turn admissions of internal/turns). status is running or
// waiting_for_user until the terminal fact, which sets status,
// terminal_event_id and the outcome columns in the same transaction as
// the terminal run event.
func CreateSchema(tx *sql.Tx) error {
	for _, q := range []string{
		`CREATE TABLE runs (
			run_id            TEXT PRIMARY KEY,
			session_id        TEXT NOT NULL,
			turn_id           TEXT NOT NULL,
			status            TEXT NOT NULL,
			created_at        INTEGER NOT NULL,
			updated_at        INTEGER NOT NULL,
			completed_at      INTEGER NULL,
			terminal_event_id TEXT NULL,
			stop_reason       TEXT NULL,
			failure_class     TEXT NULL,
			abort_source      TEXT NULL,
			failure_message   TEXT NULL,
			connection_slug   TEXT NULL,
			model             TEXT NULL
		)`,
		// Recovery finds the runs a crash left open.
		`CREATE INDEX runs_open ON runs (status) WHERE terminal_event_id IS NULL`,
	} {
		if _, err := tx.Exec(q); err != nil {
			return err
		}
	}
	return nil
}

// transitions lists, for each status a verb sets, the statuses the run
// may have before it.
var transitions = map[protocol.TurnStatus][]protocol.TurnStatus{
	protocol.TurnWaitingForUser: {protocol.TurnRunning, protocol.TurnWaitingForUser},
	protocol.TurnRunning:        {protocol.TurnWaitingForUser},
}

// ErrNoOpenRun reports a terminal write for a run that has no open header.
var ErrNoOpenRun = errors.New("runs: the run has no open header")

// Begin writes the header of a run that starts now: running.
func Begin(tx *store.Tx, runID, sessionID, turnID string, at int64) error {
	_, err := tx.Exec(`INSERT INTO runs (run_id, session_id, turn_id, status, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)`,
		runID, sessionID, turnID, string(protocol.TurnRunning), at, at)
	return err
}

// setStatus moves an open run to status when the machine allows it from
// the status it has; changed is false when the run was elsewhere (already
// there and not re-enterable, terminated, or absent).
func setStatus(tx *store.Tx, runID string, status protocol.TurnStatus, now int64) (changed bool, err error) {
	from := transitions[status]
	if len(from) == 0 {
		return false, fmt.Errorf("runs: no transition sets a run %s", status)
	}
	args := []any{string(status), now, runID}
	for _, s := range from {
		args = append(args, string(s))
	}
	marks := strings.TrimSuffix(strings.Repeat("?, ", len(from)), ", ")
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
	return setStatus(tx, runID, protocol.TurnWaitingForUser, now)
}

// MarkRunning sets a run waiting for the user back to running; changed is
// false when it was not waiting.
func MarkRunning(tx *store.Tx, runID string, now int64) (changed bool, err error) {
	return setStatus(tx, runID, protocol.TurnRunning, now)
}

// Terminal is the terminal fact of a run.
type Terminal struct {
	Status, EventID                       string
	StopReason, FailureClass, AbortSource string
	Message, Model, ConnectionSlug        string
	At                                    int64
}

// Terminate records the terminal fact of an open run (ErrNoOpenRun when
// it has none).
func Terminate(tx *store.Tx, runID string, t Terminal) error {
	res, err := tx.Exec(`UPDATE runs SET status = ?, terminal_event_id = ?, stop_reason = ?, failure_class = ?, abort_source = ?,
		failure_message = ?, completed_at = ?, updated_at = ?, model = COALESCE(?, model), connection_slug = COALESCE(?, connection_slug)
		WHERE run_id = ? AND terminal_event_id IS NULL`,
		t.Status, t.EventID, null(t.StopReason), null(t.FailureClass), null(t.AbortSource),
		null(t.Message), t.At, t.At, null(t.Model), null(t.ConnectionSlug), runID)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return errors.Join(err, fmt.Errorf("%w: %s", ErrNoOpenRun, runID))
	}
	return nil
}

func null(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }
