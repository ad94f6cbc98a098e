package config

import (
	"context"
	"fmt"
	"sync"
)

// MemoryDocuments is an in-memory Documents with fault injection, for tests
// and for compositions without durable storage.
type MemoryDocuments struct {
	mu      sync.Mutex
	docs    map[string]memoryDocument
	loadErr error
	store   storeFault
	onStore func(name string)
}

type memoryDocument struct {
	revision int64
	body     []byte
}

type storeFault struct {
	set     bool
	err     error // returned as is, nothing written
	unknown bool  // return an error wrapping ErrCommitOutcomeUnknown
	applied bool  // with unknown: whether the write happens
}

// NewMemoryDocuments returns an empty store.
func NewMemoryDocuments() *MemoryDocuments {
	return &MemoryDocuments{docs: map[string]memoryDocument{}}
}

// Load implements Documents.
func (m *MemoryDocuments) Load(_ context.Context, name string) (int64, []byte, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.loadErr; err != nil {
		m.loadErr = nil
		return 0, nil, false, err
	}
	d, ok := m.docs[name]
	if !ok {
		return 0, nil, false, nil
	}
	return d.revision, append([]byte(nil), d.body...), true, nil
}

// Store implements Documents. The OnStore hook, if set, runs first (outside
// the store's lock); then an injected fault, if any, applies.
func (m *MemoryDocuments) Store(_ context.Context, name string, prev, next int64, body []byte) error {
	m.mu.Lock()
	hook := m.onStore
	m.mu.Unlock()
	if hook != nil {
		hook(name)
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	fault := m.store
	m.store = storeFault{}
	if fault.set && !fault.unknown {
		return fault.err
	}
	cur := m.docs[name].revision
	if cur != prev {
		if fault.unknown {
			return fmt.Errorf("memory documents: %w", ErrCommitOutcomeUnknown)
		}
		return ErrRevisionMismatch
	}
	if next <= prev {
		return fmt.Errorf("memory documents: next revision %d not after %d", next, prev)
	}
	if !fault.unknown || fault.applied {
		m.docs[name] = memoryDocument{revision: next, body: append([]byte(nil), body...)}
	}
	if fault.unknown {
		return fmt.Errorf("memory documents: %w", ErrCommitOutcomeUnknown)
	}
	return nil
}

// FailNextStore makes the next Store return err without writing.
func (m *MemoryDocuments) FailNextStore(err error) {
	m.mu.Lock()
	m.store = storeFault{set: true, err: err}
	m.mu.Unlock()
}

// FailNextStoreUnknown makes the next Store return an error wrapping
// ErrCommitOutcomeUnknown; the write happens iff applied.
func (m *MemoryDocuments) FailNextStoreUnknown(applied bool) {
	m.mu.Lock()
	m.store = storeFault{set: true, unknown: true, applied: applied}
	m.mu.Unlock()
}

// FailNextLoad makes the next Load return err.
func (m *MemoryDocuments) FailNextLoad(err error) {
	m.mu.Lock()
	m.loadErr = err
	m.mu.Unlock()
}

// Corrupt replaces the stored body of a document, keeping its revision (a
// missing document gets revision 1).
func (m *MemoryDocuments) Corrupt(name string, body []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.docs[name]
	if d.revision == 0 {
		d.revision = 1
	}
	d.body = append([]byte(nil), body...)
	m.docs[name] = d
}

// OnStore installs a hook called at the start of every Store with the
// document name (nil removes it). The hook may block.
func (m *MemoryDocuments) OnStore(fn func(name string)) {
	m.mu.Lock()
	m.onStore = fn
	m.mu.Unlock()
}

// Document returns a copy of a stored document.
func (m *MemoryDocuments) Document(name string) (revision int64, body []byte, found bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.docs[name]
	if !ok {
		return 0, nil, false
	}
	return d.revision, append([]byte(nil), d.body...), true
}
