package domain

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/maka-agent/maka/internal/config"
	"github.com/maka-agent/maka/internal/store"
)

// storeDocuments keeps the configuration documents (runtime policy,
// connection catalog, credential vault metadata) in the store's documents
// table, with compare-and-set on their revision.
type storeDocuments struct {
	st *store.Store
}

var _ config.Documents = storeDocuments{}

func (d storeDocuments) Load(ctx context.Context, name string) (revision int64, body []byte, found bool, err error) {
	err = d.st.Read(ctx, func(q store.Querier) error {
		var text string
		switch err := q.QueryRow(`SELECT revision, body FROM documents WHERE name = ?`, name).Scan(&revision, &text); {
		case errors.Is(err, sql.ErrNoRows):
			return nil
		case err != nil:
			return err
		}
		body, found = []byte(text), true
		return nil
	})
	return revision, body, found, err
}

func (d storeDocuments) Store(ctx context.Context, name string, prev, next int64, body []byte) error {
	err := d.st.Write(ctx, func(tx *store.Tx) error {
		var current int64
		switch err := tx.QueryRow(`SELECT revision FROM documents WHERE name = ?`, name).Scan(&current); {
		case errors.Is(err, sql.ErrNoRows):
			current = 0
		case err != nil:
			return err
		}
		if current != prev {
			return config.ErrRevisionMismatch
		}
		_, err := tx.Exec(`INSERT INTO documents (name, revision, body) VALUES (?, ?, ?)
			ON CONFLICT (name) DO UPDATE SET revision = excluded.revision, body = excluded.body`, name, next, string(body))
		return err
	})
	if errors.Is(err, store.ErrCommitOutcomeUnknown) {
		return fmt.Errorf("%w: %w", config.ErrCommitOutcomeUnknown, err)
	}
	return err
}
