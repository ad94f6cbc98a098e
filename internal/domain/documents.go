package domain

import (
	"context"
	"errors"
	"fmt"

	"github.com/maka-agent/maka/internal/config"
	"github.com/maka-agent/maka/internal/store"
)

// storeDocuments keeps the configuration documents (runtime policy,
// connection catalog, credential vault metadata) in the store's documents
// table (store.ReadDocument, store.WriteDocument), with compare-and-set on
// their revision.
type storeDocuments struct {
	st *store.Store
}

var _ config.Documents = storeDocuments{}

func (d storeDocuments) Load(ctx context.Context, name string) (revision int64, body []byte, found bool, err error) {
	err = d.st.Read(ctx, func(q store.Querier) error {
		revision, body, found, err = store.ReadDocument(q, name)
		return err
	})
	return revision, body, found, err
}

func (d storeDocuments) Store(ctx context.Context, name string, prev, next int64, body []byte) error {
	if next != prev+1 {
		return fmt.Errorf("documents: %s: next revision %d is not %d", name, next, prev+1)
	}
	err := d.st.Write(ctx, func(tx *store.Tx) error {
		_, err := store.WriteDocument(tx, name, body, prev)
		return err
	})
	switch {
	case errors.Is(err, store.ErrRevisionMismatch):
		return config.ErrRevisionMismatch
	case errors.Is(err, store.ErrCommitOutcomeUnknown):
		return fmt.Errorf("%w: %w", config.ErrCommitOutcomeUnknown, err)
	}
	return err
}
