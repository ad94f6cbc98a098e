package turns

import (
	"database/sql"

	"github.com/maka-agent/maka/internal/runs"
	"github.com/maka-agent/maka/internal/store"
)

// Migration is schema version 4 of the store: root-turn admissions and run
// headers. A run's events live in the built-in run_events table.
//
// turn_admissions holds one row per admitted root turn; chain_seq numbers a
// session's admissions 1, 2, … in admission order (the last one is the tip)
// and previous_turn_id links each to its predecessor. runs holds one row
// per run once it started (internal/runs owns it).
var Migration = store.Migration{Version: 4, Up: migrate}

func migrate(tx *sql.Tx) error {
	for _, q := range []string{
		`CREATE TABLE turn_admissions (
			session_id       TEXT NOT NULL,
			turn_id          TEXT NOT NULL,
			chain_seq        INTEGER NOT NULL,
			run_id           TEXT NOT NULL UNIQUE,
			user_message_id  TEXT NULL,
			previous_turn_id TEXT NULL,
			kind             TEXT NOT NULL,
			content          TEXT NOT NULL,
			sources          TEXT NOT NULL,
			admitted_at      INTEGER NOT NULL,
			PRIMARY KEY (session_id, turn_id),
			UNIQUE (session_id, chain_seq)
		)`,
	} {
		if _, err := tx.Exec(q); err != nil {
			return err
		}
	}
	return runs.CreateSchema(tx)
}
