package interactions

import (
	"database/sql"
	"errors"
	"fmt"

	"github.com/maka-agent/maka/internal/runs"
	"github.com/maka-agent/maka/internal/sessions"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/protocol"
)

// errCorrupt reports a stored interaction that does not decode as a valid
// snapshot.
var errCorrupt = errors.New("interactions: stored interaction is invalid")

// errNotPending reports an outcome commit that found its interaction no
// longer pending, which the session lane rules out.
var errNotPending = errors.New("interactions: interaction is no longer pending")

// record is one stored interaction.
type record struct {
	ID        string
	SessionID string
	TurnID    string
	RunID     string
	Request   protocol.InteractionRequest
	ScopeKey  string // "" when the request cannot be remembered
	Status    string
	Outcome   *protocol.InteractionCanonicalOutcome // nil while pending
	CreatedAt int64
}

// snapshot is the wire snapshot of r.
func (r record) snapshot() protocol.InteractionSnapshot {
	s := protocol.InteractionSnapshot{
		SchemaVersion: protocol.InteractionSchemaVersion,
		InteractionID: r.ID, SessionID: r.SessionID, TurnID: r.TurnID, RunID: r.RunID,
		Revision: protocol.InteractionPendingRevision, Request: r.Request, Status: r.Status,
	}
	if r.Status != protocol.InteractionStatusPending {
		s.Revision = protocol.InteractionResolvedRevision
		out := *r.Outcome
		s.Outcome = &out
	}
	return s
}

// before orders records by (createdAt, interactionId).
func (r record) before(o record) bool {
	if r.CreatedAt != o.CreatedAt {
		return r.CreatedAt < o.CreatedAt
	}
	return r.ID < o.ID
}

const recordColumns = `interaction_id, session_id, turn_id, run_id, request, scope_key, status, outcome, created_at`

// scanRecord decodes one row of recordColumns.
func scanRecord(scan func(dest ...any) error) (record, error) {
	var r record
	var request string
	var scope, outcome sql.NullString
	if err := scan(&r.ID, &r.SessionID, &r.TurnID, &r.RunID, &request, &scope, &r.Status, &outcome, &r.CreatedAt); err != nil {
		return r, err
	}
	r.ScopeKey = scope.String
	v, err := protocol.Parse([]byte(request))
	if err != nil {
		return r, fmt.Errorf("%w: %s request: %w", errCorrupt, r.ID, err)
	}
	if r.Request, err = protocol.DecodeInteractionRequest(v); err != nil {
		return r, fmt.Errorf("%w: %s request: %w", errCorrupt, r.ID, err)
	}
	switch r.Status {
	case protocol.InteractionStatusPending:
		if outcome.Valid {
			return r, fmt.Errorf("%w: %s is pending with an outcome", errCorrupt, r.ID)
		}
		return r, nil
	case protocol.InteractionStatusAnswered, protocol.InteractionStatusClosed:
	default:
		return r, fmt.Errorf("%w: %s has status %q", errCorrupt, r.ID, r.Status)
	}
	if !outcome.Valid {
		return r, fmt.Errorf("%w: %s is %s without an outcome", errCorrupt, r.ID, r.Status)
	}
	if v, err = protocol.Parse([]byte(outcome.String)); err != nil {
		return r, fmt.Errorf("%w: %s outcome: %w", errCorrupt, r.ID, err)
	}
	out, err := protocol.DecodeInteractionCanonicalOutcome(v)
	if err != nil {
		return r, fmt.Errorf("%w: %s outcome: %w", errCorrupt, r.ID, err)
	}
	if !protocol.OutcomeValidForRequest(r.Request, out) || statusOf(out) != r.Status {
		return r, fmt.Errorf("%w: %s outcome does not match its request or status", errCorrupt, r.ID)
	}
	r.Outcome = &out
	return r, nil
}

// statusOf is the status an outcome gives: closed for a closure, else
// answered.
func statusOf(out protocol.InteractionCanonicalOutcome) string {
	if out.Kind == protocol.InteractionOutcomeClosure {
		return protocol.InteractionStatusClosed
	}
	return protocol.InteractionStatusAnswered
}

// loadRecord reads one interaction by id.
func loadRecord(q store.Querier, id string) (record, bool, error) {
	r, err := scanRecord(q.QueryRow(`SELECT `+recordColumns+` FROM interactions WHERE interaction_id = ?`, id).Scan)
	if errors.Is(err, sql.ErrNoRows) {
		return r, false, nil
	}
	return r, err == nil, err
}

// queryRecords reads the records a query selects (in its order).
func queryRecords(q store.Querier, query string, args ...any) ([]record, error) {
	rows, err := q.Query(query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []record
	for rows.Next() {
		r, err := scanRecord(rows.Scan)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// pendingOfSession reads a session's pending interactions in (createdAt,
// interactionId) order.
func pendingOfSession(q store.Querier, sessionID string) ([]record, error) {
	return queryRecords(q, `SELECT `+recordColumns+` FROM interactions
		WHERE session_id = ? AND status = 'pending' ORDER BY created_at, interaction_id`, sessionID)
}

// pendingOfRun reads a run's pending interactions in (createdAt,
// interactionId) order.
func pendingOfRun(q store.Querier, runID string) ([]record, error) {
	return queryRecords(q, `SELECT `+recordColumns+` FROM interactions
		WHERE run_id = ? AND status = 'pending' ORDER BY created_at, interaction_id`, runID)
}

// Pending reads the pending interactions of sessionID for its canonical
// projection, inside the caller's store read, sorted by createdAt then
// interactionId. It has the signature of sessions.Options.Interactions.
func Pending(q store.Querier, sessionID string) (protocol.InteractionProjection, error) {
	recs, err := pendingOfSession(q, sessionID)
	if err != nil {
		return protocol.InteractionProjection{}, err
	}
	if len(recs) > protocol.InteractionMaxPendingPerSession {
		return protocol.InteractionProjection{}, fmt.Errorf("interactions: session %s has %d pending interactions", sessionID, len(recs))
	}
	return projection(recs), nil
}

// projection is the wire projection of pending records.
func projection(recs []record) protocol.InteractionProjection {
	p := protocol.InteractionProjection{Pending: make([]protocol.InteractionSnapshot, 0, len(recs))}
	for _, r := range recs {
		p.Pending = append(p.Pending, r.snapshot())
	}
	return p
}

// Pending reads the pending interactions of sessionID for its canonical
// projection, like the package function Pending.
func (c *Authority) Pending(q store.Querier, sessionID string) (protocol.InteractionProjection, error) {
	return Pending(q, sessionID)
}

// insertRecord stores a new interaction (pending, or already answered when
// a remembered allow settles it).
func insertRecord(tx *store.Tx, r record) error {
	req, err := protocol.Marshal(r.Request)
	if err != nil {
		return err
	}
	var scope, outcome, committed any
	if r.ScopeKey != "" {
		scope = r.ScopeKey
	}
	if r.Outcome != nil {
		b, err := protocol.Marshal(*r.Outcome)
		if err != nil {
			return err
		}
		outcome, committed = string(b), r.Outcome.CommittedAt
	}
	_, err = tx.Exec(`INSERT INTO interactions (interaction_id, session_id, turn_id, run_id, kind, request, scope_key, status, outcome, created_at, committed_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		r.ID, r.SessionID, r.TurnID, r.RunID, r.Request.Kind, string(req), scope, r.Status, outcome, r.CreatedAt, committed)
	return err
}

// resolveRecord commits out as the outcome of the pending interaction id.
func resolveRecord(tx *store.Tx, id string, out protocol.InteractionCanonicalOutcome) error {
	b, err := protocol.Marshal(out)
	if err != nil {
		return err
	}
	res, err := tx.Exec(`UPDATE interactions SET status = ?, outcome = ?, committed_at = ? WHERE interaction_id = ? AND status = 'pending'`,
		statusOf(out), string(b), out.CommittedAt, id)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return errors.Join(err, fmt.Errorf("%w: %s", errNotPending, id))
	}
	return nil
}

// markWaiting sets an open run, and its session, waiting_for_user.
func markWaiting(tx *store.Tx, sessionID, runID string, now int64) error {
	changed, err := runs.MarkWaiting(tx, runID, now)
	if err != nil || !changed {
		return err
	}
	_, err = sessions.SetSessionStatus(tx, sessionID, protocol.SessionWaitingForUser)
	return err
}

// markRunningIfSettled sets a run waiting for the user, and its session,
// back to running once none of the run's interactions is pending.
func markRunningIfSettled(tx *store.Tx, sessionID, runID string, now int64) error {
	var pending int
	if err := tx.QueryRow(`SELECT COUNT(*) FROM interactions WHERE run_id = ? AND status = 'pending'`, runID).Scan(&pending); err != nil {
		return err
	}
	if pending > 0 {
		return nil
	}
	changed, err := runs.MarkRunning(tx, runID, now)
	if err != nil || !changed {
		return err
	}
	_, err = sessions.SetSessionStatus(tx, sessionID, protocol.SessionRunning)
	return err
}
