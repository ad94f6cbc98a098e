package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Migration is one forward-only schema step. Up runs inside its own
// transaction together with the bookkeeping row in schema_version; an error
// rolls both back and fails Open.
type Migration struct {
	Version int
	Up      func(tx *sql.Tx) error
}

// BaseSchemaVersion is the schema version of the built-in migrations.
// Options.Migrations continue from BaseSchemaVersion+1.
const BaseSchemaVersion = 1

// builtinMigrations are the tables the host needs first.
var builtinMigrations = []Migration{
	{Version: 1, Up: execAll(
		`CREATE TABLE sessions (
			session_id   TEXT PRIMARY KEY,
			created_at   INTEGER NOT NULL,
			last_used_at INTEGER NOT NULL,
			status       TEXT NOT NULL,
			archived_at  INTEGER NULL,
			document     TEXT NOT NULL
		)`,
		`CREATE TABLE run_events (
			session_id TEXT NOT NULL,
			run_id     TEXT NOT NULL,
			seq        INTEGER NOT NULL,
			ts         INTEGER NOT NULL,
			type       TEXT NOT NULL,
			payload    TEXT NOT NULL,
			PRIMARY KEY (run_id, seq)
		)`,
		`CREATE INDEX run_events_by_session ON run_events (session_id)`,
		`CREATE TABLE documents (
			name     TEXT PRIMARY KEY,
			revision INTEGER NOT NULL,
			body     TEXT NOT NULL
		)`,
	)},
}

// execAll returns a migration body executing the statements in order.
func execAll(stmts ...string) func(tx *sql.Tx) error {
	return func(tx *sql.Tx) error {
		for _, q := range stmts {
			if _, err := tx.Exec(q); err != nil {
				return err
			}
		}
		return nil
	}
}

// allMigrations validates extra and appends it to the built-in migrations.
func allMigrations(extra []Migration) ([]Migration, error) {
	all := make([]Migration, 0, len(builtinMigrations)+len(extra))
	all = append(all, builtinMigrations...)
	all = append(all, extra...)
	for i, m := range all {
		if m.Version != i+1 {
			return nil, fmt.Errorf("store: migration %d has version %d, want %d (versions must continue from %d without gaps)",
				i+1, m.Version, i+1, BaseSchemaVersion)
		}
		if m.Up == nil {
			return nil, fmt.Errorf("store: migration %d has no Up function", m.Version)
		}
	}
	return all, nil
}

// migrate brings the database to the last version of migrations, one
// transaction per missing migration, and returns the resulting version.
func migrate(ctx context.Context, db *sql.DB, migrations []Migration) (int, error) {
	current, err := schemaVersion(ctx, db)
	if err != nil {
		return 0, err
	}
	if current > len(migrations) {
		return 0, fmt.Errorf("%w: database is at version %d, this program knows versions up to %d",
			ErrSchemaTooNew, current, len(migrations))
	}
	for _, m := range migrations[current:] {
		if err := applyMigration(ctx, db, m); err != nil {
			return 0, err
		}
		current = m.Version
	}
	return current, nil
}

// schemaVersion creates the schema_version table when missing and returns
// the highest applied version (0 for a fresh database).
func schemaVersion(ctx context.Context, db *sql.DB) (int, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, persistenceError("migrate: begin", err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_version (
		version    INTEGER PRIMARY KEY,
		applied_at INTEGER NOT NULL
	)`); err != nil {
		return 0, persistenceError("migrate: create schema_version", err)
	}
	var v sql.NullInt64
	if err := tx.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_version`).Scan(&v); err != nil {
		return 0, persistenceError("migrate: read schema_version", err)
	}
	if err := tx.Commit(); err != nil {
		return 0, persistenceError("migrate: commit", err)
	}
	return int(v.Int64), nil
}

func applyMigration(ctx context.Context, db *sql.DB, m Migration) (err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return persistenceError(fmt.Sprintf("migrate to version %d: begin", m.Version), err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if err := callMigration(m, tx); err != nil {
		return classify(fmt.Errorf("store: migrate to version %d: %w", m.Version, err))
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_version (version, applied_at) VALUES (?, ?)`,
		m.Version, time.Now().UnixMilli()); err != nil {
		return persistenceError(fmt.Sprintf("migrate to version %d: record version", m.Version), err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("%w: migrate to version %d: commit: %w", ErrCommitOutcomeUnknown, m.Version, err)
	}
	return nil
}

// callMigration runs m.Up, turning a panic into an error.
func callMigration(m Migration, tx *sql.Tx) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("migration panicked: %v", r)
		}
	}()
	return m.Up(tx)
}
