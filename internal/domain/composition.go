// Package domain composes the host's domain for one host epoch: the durable
// store, the session catalog and run record, the task ledger, the runtime
// policy / connection catalog / credential vault, and session continuity.
// The kernel builds it once the owner lock is held (host.CompositionFactory).
package domain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/maka-agent/maka/internal/config"
	"github.com/maka-agent/maka/internal/continuity"
	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/lane"
	"github.com/maka-agent/maka/internal/sessions"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/internal/tasks"
	"github.com/maka-agent/maka/protocol"
)

// Files of the domain inside the storage root.
const (
	DatabaseFile = "maka.db"          // the SQLite database (plus -wal and -shm)
	SecretsFile  = "credentials.json" // credential secrets, 0600, never in the database
)

// Migrations are the domain schema steps after the store's built-in schema.
var Migrations = []store.Migration{sessions.Migration, tasks.Migration}

// Composition is the running domain of one host epoch.
type Composition struct {
	log      *slog.Logger
	st       *store.Store
	gate     *lane.Gate
	cont     *continuity.Coordinator
	config   *config.Coordinator
	sessions *sessions.Service
	tasks    *tasks.Ledger
	handlers host.Handlers
}

var _ host.Composition = (*Composition)(nil)

// Factory returns the composition factory of the storage root at rootPath.
func Factory(rootPath string, log *slog.Logger) host.CompositionFactory {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return func(ctx context.Context, k *host.Kernel) (host.Composition, error) {
		return Open(ctx, rootPath, k.HostEpoch(), k.RequestDrain, log)
	}
}

// Open opens the domain of rootPath for hostEpoch; requestDrain is called
// when the domain can no longer serve safely (a poisoned configuration
// gate).
func Open(ctx context.Context, rootPath, hostEpoch string, requestDrain func(), log *slog.Logger) (*Composition, error) {
	st, err := store.Open(ctx, filepath.Join(rootPath, DatabaseFile), store.Options{Migrations: Migrations})
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	secrets, err := config.OpenSecretFile(filepath.Join(rootPath, SecretsFile))
	if err != nil {
		return nil, errors.Join(fmt.Errorf("open secrets: %w", err), st.Close(ctx))
	}
	cfg, err := config.New(storeDocuments{st: st}, secrets, config.Options{
		OnPoison: func(err error) {
			log.Error("runtime configuration gate poisoned; draining", "err", err)
			requestDrain()
		},
	})
	if err != nil {
		return nil, errors.Join(err, st.Close(ctx))
	}
	c := &Composition{log: log, st: st, gate: lane.New(), config: cfg}
	c.sessions = sessions.New(st, c.gate, sessions.Options{
		HostEpoch:             hostEpoch,
		DefaultPermissionMode: c.defaultPermissionMode,
		OnChange:              c.refresh,
	})
	c.cont = continuity.New(hostEpoch, c.sessions.ReadProjection, c.gate, log)
	c.tasks = tasks.New(st, tasks.Options{Lane: c.gate, Logger: log})

	c.handlers = host.Handlers{}
	for _, hs := range []host.Handlers{cfg.Handlers(), c.sessions.Handlers(), c.tasks.Handlers(), c.cont.Handlers()} {
		for op, h := range hs {
			if _, dup := c.handlers[op]; dup {
				return nil, errors.Join(fmt.Errorf("domain: two handlers for %s", op), c.Close(ctx))
			}
			c.handlers[op] = h
		}
	}
	return c, nil
}

// defaultPermissionMode reads the runtime policy's chat default.
func (c *Composition) defaultPermissionMode() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	snap, err := c.config.Policy(ctx)
	if err != nil {
		c.log.Warn("runtime policy unreadable; using the default permission mode", "err", err)
		return protocol.DefaultRuntimePolicy().ChatDefaults.PermissionMode
	}
	return snap.Policy.ChatDefaults.PermissionMode
}

// refresh republishes a session's canonical projection after a durable
// change.
func (c *Composition) refresh(ctx context.Context, sessionID string) {
	if err := c.cont.Refresh(ctx, sessionID); err != nil {
		c.log.Error("session projection refresh failed", "session", sessionID, "err", err)
	}
}

// Handlers implements host.Composition.
func (c *Composition) Handlers() host.Handlers { return c.handlers }

// Continuity implements host.Composition.
func (c *Composition) Continuity() host.ConnectionObserver { return c.cont }

// Store returns the durable store.
func (c *Composition) Store() *store.Store { return c.st }

// Recover implements host.Composition. Nothing runs across restarts yet:
// every durable record is complete when its write returns.
func (c *Composition) Recover(context.Context) error { return nil }

// BeginDrain implements host.Composition.
func (c *Composition) BeginDrain() {}

// Close implements host.Composition: subscriptions end, queued lane work is
// refused, and the store is closed after its queued writes.
func (c *Composition) Close(ctx context.Context) error {
	c.cont.Close()
	return errors.Join(c.gate.Close(ctx), c.st.Close(ctx))
}
