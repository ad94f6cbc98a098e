package store

import (
	"database/sql"
	"errors"
	"fmt"
)

// This file owns the documents table (created by the built-in migration 1):
// named, revisioned bodies with compare-and-set on the revision. No other
// package writes its SQL; they call ReadDocument and WriteDocument inside
// their own Read or Write.

// ErrRevisionMismatch is returned by WriteDocument when the stored revision
// of the document is not the expected one; nothing was written.
var ErrRevisionMismatch = errors.New("store: document revision mismatch")

// ReadDocument returns the stored revision and body of the document name;
// found is false (revision 0, body nil) when it does not exist.
func ReadDocument(q Querier, name string) (revision int64, body []byte, found bool, err error) {
	var text string
	switch err := q.QueryRow(`SELECT revision, body FROM documents WHERE name = ?`, name).Scan(&revision, &text); {
	case errors.Is(err, sql.ErrNoRows):
		return 0, nil, false, nil
	case err != nil:
		return 0, nil, false, err
	}
	return revision, []byte(text), true, nil
}

// WriteDocument stores body as revision expectedRevision+1 of the document
// name iff its stored revision is still expectedRevision (0 = absent, or
// present at revision 0) and returns the new revision. It returns
// ErrRevisionMismatch, writing nothing, when the stored revision differs.
func WriteDocument(tx *Tx, name string, body []byte, expectedRevision int64) (int64, error) {
	var current int64
	switch err := tx.QueryRow(`SELECT revision FROM documents WHERE name = ?`, name).Scan(&current); {
	case errors.Is(err, sql.ErrNoRows):
		current = 0
	case err != nil:
		return 0, err
	}
	if current != expectedRevision {
		return 0, fmt.Errorf("%w: %s is at revision %d, expected %d", ErrRevisionMismatch, name, current, expectedRevision)
	}
	next := expectedRevision + 1
	if _, err := tx.Exec(`INSERT INTO documents (name, revision, body) VALUES (?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET revision = excluded.revision, body = excluded.body`, name, next, string(body)); err != nil {
		return 0, err
	}
	return next, nil
}

// AdvanceDocument moves the document name to its next revision, keeping its
// body, in one statement; an absent document is created at revision 1 with
// the empty JSON object as its body. It suits a document whose revision is
// a counter, advanced by writes that need no compare-and-set.
func AdvanceDocument(tx *Tx, name string) error {
	_, err := tx.Exec(`INSERT INTO documents (name, revision, body) VALUES (?, 1, '{}')
		ON CONFLICT (name) DO UPDATE SET revision = revision + 1`, name)
	return err
}
