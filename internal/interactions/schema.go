package interactions

import (
	"database/sql"

	"github.com/maka-agent/maka/internal/store"
)

// Migration is schema version 5 of the store: the durable interactions.
//
// interactions holds one row per interaction. request is the encoded wire
// InteractionRequest; scope_key is the remember-for-turn scope of a
// permission that may be remembered (NULL otherwise); status is pending,
// answered or closed; outcome is the encoded canonical outcome (NULL while
// pending) and committed_at its commit time. A row never goes back to
// pending and its outcome never changes once set: the first durable
// outcome wins.
var Migration = store.Migration{Version: 5, Up: migrate}

func migrate(tx *sql.Tx) error {
	for _, q := range []string{
		`CREATE TABLE interactions (
			interaction_id TEXT PRIMARY KEY,
			session_id     TEXT NOT NULL,
			turn_id        TEXT NOT NULL,
			run_id         TEXT NOT NULL,
			kind           TEXT NOT NULL,
			request        TEXT NOT NULL,
			scope_key      TEXT NULL,
			status         TEXT NOT NULL,
			outcome        TEXT NULL,
			created_at     INTEGER NOT NULL,
			committed_at   INTEGER NULL
		)`,
		// The session projection and recovery list a session's pending
		// interactions in (created_at, interaction_id) order.
		`CREATE INDEX interactions_pending_by_session ON interactions (session_id, created_at, interaction_id) WHERE status = 'pending'`,
		// Closing a run and remembering an allow find the run's pending ones.
		`CREATE INDEX interactions_pending_by_run ON interactions (run_id, created_at, interaction_id) WHERE status = 'pending'`,
	} {
		if _, err := tx.Exec(q); err != nil {
			return err
		}
	}
	return nil
}
