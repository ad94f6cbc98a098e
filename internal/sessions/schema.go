package sessions

import (
	"database/sql"

	"github.com/maka-agent/maka/internal/store"
)

// catalogDocument names the document of the store's documents table whose
// revision is the session catalog revision (CatalogRevision of
// docs/protocol.md): it advances (store.AdvanceDocument) on every session
// create and every change of a catalog field (lifecycle, status,
// lastUsedAt). Before the first change it does not exist and the revision
// is 0.
const catalogDocument = "session_catalog"

// Migration is schema version 2 of the store: the session catalog indexes
// and the transcript table. It relies only on the built-in version 1 table
// sessions. (Databases migrated before the store owned the documents table
// also hold the catalog document at revision 0, which reads the same as an
// absent one.)
//
// messages holds one row per transcript message of a session, in the order
// the session produced them (seq, 1, 2, … per session). role is user,
// assistant, thinking or tool; body is a JSON object with the tool fields of
// a tool message or the text of a text message still being streamed (see
// messageBody). The final text of a text message is not copied: event_seq
// names the run_events row (run_id, event_seq) whose payload carries it.
var Migration = store.Migration{Version: 2, Up: migrate}

func migrate(tx *sql.Tx) error {
	for _, q := range []string{
		// Newest-first catalog pages: ORDER BY last_used_at DESC, session_id
		// walks these indexes without sorting; the partial one serves the
		// default listing that hides archived sessions.
		`CREATE INDEX sessions_catalog ON sessions (last_used_at DESC, session_id)`,
		`CREATE INDEX sessions_catalog_active ON sessions (last_used_at DESC, session_id) WHERE archived_at IS NULL`,
		`CREATE TABLE messages (
			session_id TEXT NOT NULL,
			seq        INTEGER NOT NULL,
			message_id TEXT NOT NULL,
			turn_id    TEXT NOT NULL,
			run_id     TEXT NOT NULL,
			role       TEXT NOT NULL,
			created_at INTEGER NOT NULL,
			body       TEXT NOT NULL,
			event_seq  INTEGER NULL,
			PRIMARY KEY (session_id, seq)
		)`,
		// Finishing a streamed message or a tool call finds its row by id.
		`CREATE INDEX messages_by_id ON messages (session_id, message_id)`,
	} {
		if _, err := tx.Exec(q); err != nil {
			return err
		}
	}
	return nil
}
