package store

import (
	"errors"
	"fmt"
	"syscall"

	"modernc.org/sqlite"
)

// Sentinel errors. Errors returned by the store wrap one of these (test with
// errors.Is) together with the underlying cause.
var (
	// ErrPersistenceFailed reports a storage failure before a transaction
	// reached COMMIT (begin, I/O while executing statements, an aborted
	// transaction) or while reading. Nothing of the failed write is durable.
	// It maps to the protocol error code persistence_failed.
	ErrPersistenceFailed = errors.New("store: persistence failed")

	// ErrCommitOutcomeUnknown reports that the COMMIT of a write transaction
	// itself failed: the write may or may not be durable and must be
	// verified by reading it back. It maps to the protocol error code
	// commit_outcome_unknown.
	ErrCommitOutcomeUnknown = errors.New("store: commit outcome unknown")

	// ErrFailStop is wrapped (together with ErrPersistenceFailed) by every
	// write after a COMMIT failed in a way that leaves the durability of
	// later commits in doubt (a failed fsync, corruption). Reads keep
	// working; writes need a fresh Open of the database.
	ErrFailStop = errors.New("store: writer stopped after an unrecoverable storage failure; reopen the database")

	// ErrClosed is returned by Write and Read once Close has started.
	ErrClosed = errors.New("store: closed")

	// ErrSchemaTooNew is returned by Open when the database was migrated by
	// a newer program than this one.
	ErrSchemaTooNew = errors.New("store: database schema is newer than this program supports")

	// ErrInsecureFile is returned by Open when the database file (or one of
	// its -wal/-shm companions) is not a regular file owned by the current
	// user with no group or other permission bits.
	ErrInsecureFile = errors.New("store: database file is not private to the current user")

	// ErrTxControl is returned by Tx.Exec and friends for transaction
	// control statements (BEGIN, COMMIT, ROLLBACK, SAVEPOINT, RELEASE, END):
	// the store owns the transaction.
	ErrTxControl = errors.New("store: transaction control statements are not allowed inside Write")

	// ErrTxDone is returned when a Tx or Querier is used after the function
	// it was passed to has returned.
	ErrTxDone = errors.New("store: transaction handle used outside its function")
)

// SQLite primary and extended result codes used for classification.
const (
	sqlitePerm      = 3
	sqliteBusy      = 5
	sqliteLocked    = 6
	sqliteNoMem     = 7
	sqliteReadOnly  = 8
	sqliteInterrupt = 9
	sqliteIOErr     = 10
	sqliteCorrupt   = 11
	sqliteFull      = 13
	sqliteCantOpen  = 14
	sqliteProtocol  = 15
	sqliteNotADB    = 26

	sqliteIOErrWrite = sqliteIOErr | 3<<8
)

// sqliteCode returns the extended SQLite result code carried by err, or 0.
func sqliteCode(err error) int {
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code()
	}
	return 0
}

// isStorageFault reports whether err is a failure of the storage medium or
// of SQLite's file handling rather than of the SQL itself (syntax,
// constraints) or of the caller's logic.
func isStorageFault(err error) bool {
	if err == nil {
		return false
	}
	switch sqliteCode(err) & 0xff {
	case sqlitePerm, sqliteBusy, sqliteLocked, sqliteNoMem, sqliteReadOnly,
		sqliteIOErr, sqliteCorrupt, sqliteFull, sqliteCantOpen, sqliteProtocol, sqliteNotADB:
		return true
	}
	var errno syscall.Errno
	return errors.As(err, &errno)
}

// commitFailureIsClean reports whether a failed COMMIT left the writer in a
// state from which later commits are trustworthy: SQLite rolled the
// transaction back and no fsync was lost. Disk full, a read-only medium, lock
// contention and a failing write(2) qualify; anything else (a failed fsync,
// corruption, unknown errors) puts the store into fail-stop, because the
// kernel may have dropped dirty pages that a later successful fsync would no
// longer cover.
func commitFailureIsClean(err error) bool {
	if code := sqliteCode(err); code != 0 {
		switch code & 0xff {
		case sqliteFull, sqliteReadOnly, sqliteBusy, sqliteLocked, sqliteNoMem, sqliteInterrupt:
			return true
		}
		return code == sqliteIOErrWrite
	}
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.EROFS)
}

// persistenceError wraps cause with ErrPersistenceFailed.
func persistenceError(what string, cause error) error {
	if errors.Is(cause, ErrPersistenceFailed) || errors.Is(cause, ErrCommitOutcomeUnknown) {
		return cause
	}
	return fmt.Errorf("%w: %s: %w", ErrPersistenceFailed, what, cause)
}

// classify wraps storage faults returned by caller functions with
// ErrPersistenceFailed and leaves every other error untouched.
func classify(err error) error {
	if err == nil || errors.Is(err, ErrPersistenceFailed) || errors.Is(err, ErrCommitOutcomeUnknown) {
		return err
	}
	if isStorageFault(err) {
		return fmt.Errorf("%w: %w", ErrPersistenceFailed, err)
	}
	return err
}
