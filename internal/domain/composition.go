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
	"net/http"
	"path/filepath"
	"time"

	"github.com/maka-agent/maka/internal/config"
	"github.com/maka-agent/maka/internal/continuity"
	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/interactions"
	"github.com/maka-agent/maka/internal/lane"
	"github.com/maka-agent/maka/internal/mcp"
	"github.com/maka-agent/maka/internal/messages"
	"github.com/maka-agent/maka/internal/model"
	"github.com/maka-agent/maka/internal/prompt"
	"github.com/maka-agent/maka/internal/sandbox"
	"github.com/maka-agent/maka/internal/sessions"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/internal/tasks"
	"github.com/maka-agent/maka/internal/tools"
	"github.com/maka-agent/maka/internal/turns"
	"github.com/maka-agent/maka/protocol"
)

// Files of the domain inside the storage root.
const (
	DatabaseFile = "maka.db"          // the SQLite database (plus -wal and -shm)
	SecretsFile  = "credentials.json" // credential secrets, 0600, never in the database
)

// Migrations are the domain schema steps after the store's built-in schema.
var Migrations = []store.Migration{sessions.Migration, tasks.Migration, turns.Migration, interactions.Migration, messages.Migration,
	turns.CompactionMigration}

// Options configures the domain beyond its storage root.
type Options struct {
	// Script, when set, makes every turn use the scripted model provider
	// with this script instead of the connection catalog (offline demos,
	// tests and benchmarks).
	Script *model.Script
	// Provider, when set, answers every turn (before Script); for tests
	// and benchmarks that drive the model themselves.
	Provider model.Provider
	// HTTPClient is the model providers' client (nil: a default one).
	HTTPClient *http.Client
	// MaxSteps caps the model steps of a turn (0: unlimited).
	MaxSteps int
	// Step overrides the retry and watchdog options of model steps.
	Step model.StepOptions
	// Resolve, when set, resolves every turn's model instead of Provider,
	// Script and the connection catalog (tests that check what the record
	// says of the model).
	Resolve turns.Resolver
	// Tools are registered after the built-in tools (tests).
	Tools []tools.Tool
	// Interactions overrides the interaction authority's clock, ids and
	// permission timeout (tests); its other fields are the domain's own.
	Interactions interactions.Options
}

// Composition is the running domain of one host epoch.
type Composition struct {
	log      *slog.Logger
	st       *store.Store
	gate     *lane.Gate
	cont     *continuity.Publisher
	config   *config.Settings
	sessions *sessions.Service
	tasks    *tasks.Ledger
	turns    *turns.Owner // the session owner; it owns cont
	msgs     *messages.Receipts
	mcp      *mcp.Manager // the root's MCP servers
	secrets  *config.SecretFile
	// forgetSecrets stops tool results being redacted for this vault.
	forgetSecrets func()
	handlers      host.Handlers

	scripted   model.Provider
	httpClient *http.Client
}

var _ host.Composition = (*Composition)(nil)

// Factory returns the composition factory of the storage root at rootPath.
func Factory(rootPath string, log *slog.Logger, opts Options) host.CompositionFactory {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return func(ctx context.Context, k *host.Kernel) (host.Composition, error) {
		h := Host{Epoch: k.HostEpoch(), RequestDrain: k.RequestDrain, Residency: k.AcquireResidency,
			Protected: []string{k.ControlDirectory(), k.Endpoint()}}
		return Open(ctx, rootPath, h, log, opts)
	}
}

// Host is what the domain uses of the host kernel.
type Host struct {
	Epoch string
	// RequestDrain is called when the domain can no longer serve safely.
	RequestDrain func()
	// Residency keeps the host alive while a turn runs (nil: never).
	Residency func() host.Residency
	// Protected are the host's paths outside the storage root (the
	// control directory, the socket) that no tool may reach.
	Protected []string
}

// Open opens the domain of rootPath for the host epoch h.Epoch.
func Open(ctx context.Context, rootPath string, h Host, log *slog.Logger, opts Options) (*Composition, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	hostEpoch, requestDrain := h.Epoch, h.RequestDrain
	if requestDrain == nil {
		requestDrain = func() {}
	}
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
	c := &Composition{log: log, st: st, gate: lane.New(), config: cfg, secrets: secrets, httpClient: opts.HTTPClient}
	c.mcp, err = mcp.New(ctx, mcp.Options{Store: st, Secrets: secrets, Log: log})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("mcp servers: %w", err), st.Close(ctx))
	}
	switch {
	case opts.Provider != nil:
		c.scripted = opts.Provider
	case opts.Script != nil:
		c.scripted = model.NewScripted(opts.Script, nil)
	}
	resolve := c.resolveModel
	if opts.Resolve != nil {
		resolve = opts.Resolve
	}
	c.tasks = tasks.New(st, tasks.Options{Lane: c.gate, Logger: log})
	// The session owner next (after the task ledger, which its tools and
	// request tail use): it builds its parts (session continuity and the
	// interaction authority); the session catalog and the message
	// operations then use it.
	c.turns = turns.New(turns.Options{
		Store: st, Gate: c.gate, Residency: h.Residency, RequestDrain: requestDrain, HostEpoch: hostEpoch,
		Resolve: resolve, System: systemPrompt, Prompt: prompt.New(), UserDir: prompt.UserDir(),
		Protected:        protectedPaths(rootPath, h.Protected),
		SandboxAvailable: func() bool { ok, _ := sandboxStatus(); return ok },
		Tools:            tools.NewRegistry(append(append(append(tools.Builtins(), tools.NewAskUserQuestion()), tools.NewTaskTools(c.tasks)...), opts.Tools...)...),
		ToolSource:       c.mcp.Tools,
		Tail:             c.tasks.Tail,
		MaxSteps:         opts.MaxSteps, Step: opts.Step, Log: log, Interactions: opts.Interactions,
	})
	c.cont = c.turns.Continuity()
	c.sessions = sessions.New(st, c.gate, sessions.Options{
		SandboxStatus:         sandboxStatus,
		DefaultPermissionMode: c.defaultPermissionMode,
		OnChange:              c.refresh,
		ActiveRoot:            c.turns.ActiveRoot,
		Archived:              c.turns.ForgetHistory,
	})
	c.msgs = messages.New(messages.Options{HostEpoch: hostEpoch, Store: st, Gate: c.gate, Sessions: c.turns, RequestDrain: requestDrain, Log: log})
	if err := c.msgs.BeginHostEpoch(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("message receipts: %w", err), c.Close(ctx))
	}

	c.handlers = host.Handlers{}
	for _, hs := range []host.Handlers{cfg.Handlers(), c.sessions.Handlers(), c.tasks.Handlers(), c.turns.Handlers(), c.msgs.Handlers(), c.mcp.Handlers()} {
		for op, h := range hs {
			if _, dup := c.handlers[op]; dup {
				return nil, errors.Join(fmt.Errorf("domain: two handlers for %s", op), c.Close(ctx))
			}
			c.handlers[op] = h
		}
	}
	c.forgetSecrets = tools.AddKnownSecrets(secrets.Values)
	return c, nil
}

// protectedPaths are the paths no tool may reach: the storage root (and
// so the database and the credentials file) and the host's other paths,
// each also by its real path.
func protectedPaths(rootPath string, more []string) []string {
	var out []string
	for _, p := range append([]string{rootPath, filepath.Join(rootPath, SecretsFile)}, more...) {
		if p == "" || p == "." {
			continue
		}
		if abs, err := filepath.Abs(p); err == nil {
			p = abs
		}
		out = append(out, p)
		if real, err := filepath.EvalSymlinks(p); err == nil && real != p {
			out = append(out, real)
		}
	}
	return out
}

// errSandboxedPeer refuses a connection from inside a sandboxed tool call.
var errSandboxedPeer = errors.New("the peer runs inside a sandboxed tool call")

// RefuseSandboxedPeer is the host's peer check (host.Options.RefusePeer):
// a process of a sandboxed Bash call may not talk to the host, which
// would let it answer its own approvals. Landlock cannot refuse a
// connect to a socket by path on most kernels, so the host does. While a
// sandboxed call runs, a peer that cannot be shown to be outside every
// call (it exited, its ancestry cannot be read) is refused too.
func RefuseSandboxedPeer(p host.Peer) error {
	if sandbox.IsCallPeer(p.PID, p.PIDFD) {
		return errSandboxedPeer
	}
	return nil
}

// sandboxStatus reports whether this machine can sandbox Bash calls.
func sandboxStatus() (bool, string) {
	st := sandbox.Status()
	return st.Available, st.Reason
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

// Recover implements host.Composition: interactions left pending are
// closed (host_restarted), runs a crash left open end failed
// (app_restarted), and an admitted turn that never started is started.
func (c *Composition) Recover(ctx context.Context) error {
	return c.turns.Recover(ctx)
}

// BeginDrain implements host.Composition.
func (c *Composition) BeginDrain() { c.turns.BeginDrain() }

// Close implements host.Composition: running turns are stopped (they end
// cancelled), subscriptions end, queued lane work is refused, and the store
// is closed after its queued writes.
func (c *Composition) Close(ctx context.Context) error {
	err := c.turns.Close(ctx)
	// After the turns: no call uses a server any more.
	err = errors.Join(err, c.mcp.Close())
	if c.forgetSecrets != nil {
		c.forgetSecrets()
	}
	return errors.Join(err, c.gate.Close(ctx), c.st.Close(ctx))
}

// Turns returns the session owner.
func (c *Composition) Turns() *turns.Owner { return c.turns }

// Gate returns the session lanes.
func (c *Composition) Gate() *lane.Gate { return c.gate }
