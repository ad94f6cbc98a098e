// Package turns is the session owner (docs/architecture.md, "The session
// owner"): the live state of every session of one host epoch — its active
// root turn and its message queue — and root turns: turn.start, turn.query
// and turn.stop, the durable admission chain of each session, the
// execution of a turn by the agent loop (internal/agent) with its record
// and live events, the exactly-once terminal transition and successor,
// and recovery of the runs a crash left open. It builds its parts, session
// continuity and the interaction authority, and calls them.
//
// Where things happen:
//   - session.go: the live sessions, their state changes and the queue
//     operations the message handlers call (Submit, Retract).
//   - queue.go: the message queue of one session, its capacity checks and
//     the running loop's steering owner.
//   - coordinator.go: the turn handlers, the projection reader, stop and
//     close.
//   - execution.go: launch, one goroutine per running turn from run start
//     to the terminal transition, and the successor.
//   - sink.go: each event of a running turn is persisted to the run record
//     and then published to session continuity.
//   - recovery.go: before the host is ready, open runs end failed /
//     app_restarted and an admitted turn that never started is started.
package turns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/maka-agent/maka/internal/failpoint"

	"github.com/google/uuid"

	"github.com/maka-agent/maka/internal/agent"
	"github.com/maka-agent/maka/internal/continuity"
	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/interactions"
	"github.com/maka-agent/maka/internal/lane"
	"github.com/maka-agent/maka/internal/model"
	"github.com/maka-agent/maka/internal/prompt"
	"github.com/maka-agent/maka/internal/sessions"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/internal/tools"
	"github.com/maka-agent/maka/protocol"
)

// Wire messages of turn operations.
const (
	MessageSessionNotFound   = "Session does not exist"
	MessageSessionArchived   = "Cannot start a new Turn in an archived Session"
	MessageSessionBusy       = "Session already has an active root Turn"
	MessageKindConflict      = "Turn identity belongs to a different execution kind"
	MessagePayloadConflict   = "Turn identity was already admitted with a different payload"
	MessageTurnNotAdmitted   = "Turn was not admitted"
	MessageRunMismatch       = "Run identity does not match the admitted Turn"
	MessageOtherRootActive   = "A different root Turn owns the active Session execution"
	MessageOperationFailed   = protocol.MessageOperationFailed
	abortSourceTurnStop      = "turn.stop"
	abortSourceTurnInterrupt = "turn.interrupt"
	abortSourceHostShutdown  = "host_shutdown"
)

// Interaction closure reasons a turn gives.
const (
	ClosureTurnStopped  = "turn_stopped"
	ClosureTurnTerminal = "turn_terminal"
)

// Resolved is the model a turn runs with.
type Resolved struct {
	Provider       model.Provider
	Model          string
	ConnectionSlug string
	// ContextWindow is the model's context window in tokens (0: not
	// known; DefaultContextWindow is assumed). The replayed history is cut
	// to fit it.
	ContextWindow int64
}

// Resolver resolves a session's model target into a provider. Its error
// message is shown to the user as the turn's failure, so it must say what
// to do (and never contain a secret).
type Resolver func(ctx context.Context, target protocol.ModelTarget) (Resolved, error)

// Options configures a Owner.
type Options struct {
	Store *store.Store
	Gate  *lane.Gate
	// Residency keeps the host alive while a turn runs (host-level: a turn
	// outlives the connection that started it).
	Residency func() host.Residency
	// RequestDrain asks the host to shut down after a broken invariant or
	// a durable write that failed in a way only a restart repairs.
	RequestDrain func()
	Resolve      Resolver
	Tools        *tools.Registry
	// ToolSource, when set, adds a turn's dynamic tools (the MCP servers')
	// after Tools when the turn starts.
	ToolSource func(ctx context.Context) []tools.Tool
	// Protected are the paths the host owns (storage root, control
	// directory, credentials file), out of every tool's reach.
	Protected []string
	// SandboxAvailable reports whether Bash calls can run sandboxed on
	// this machine (nil: they cannot).
	SandboxAvailable func() bool
	// Interactions configures the interaction authority the coordinator
	// builds (its Store, Gate, Continuity, ReadProjection and Log are the
	// coordinator's own; OnPoison defaults to RequestDrain).
	Interactions interactions.Options
	// HostEpoch is this host process's epoch; the queue projection and
	// session continuity belong to it.
	HostEpoch string
	// System is the system prompt of every turn when Prompt is nil.
	System string
	// Prompt builds each turn's system prompt (instruction files,
	// environment); UserDir is the directory of the user's own AGENTS.md
	// ("": none).
	Prompt   *prompt.Builder
	UserDir  string
	MaxSteps int
	Step     model.StepOptions
	// DeltaFlush is how often streamed text is written to the record while
	// a message streams (0 = 250 ms); the final text is always written.
	DeltaFlush time.Duration
	// HistoryCacheBytes bounds the sessions' conversations kept between
	// turns for replay (0 = DefaultHistoryCacheBytes).
	HistoryCacheBytes int
	Log               *slog.Logger
	Now               func() time.Time
	NewID             func() string

	// Tail renders the note sent at the tail of every model request of a
	// session's turn (the open tasks of its ledger); "" sends none. Nil:
	// no note.
	Tail func(ctx context.Context, sessionID string) string
}

// Owner is the session owner of one host epoch (session.go): the
// live state of every session, and its parts — session continuity (the
// publication of each session's projection to its subscribers) and the
// interaction authority — which it builds and calls.
type Owner struct {
	opts  Options
	log   *slog.Logger
	cont  *continuity.Publisher
	inter *interactions.Authority

	baseCtx context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup // execution goroutines
	// abandoned tracks the tool calls the turns abandoned at a stop
	// until they return; Close waits for them.
	abandoned agent.Abandoned

	// histories keeps the sessions' replayed conversations.
	histories historyCache

	refreshes sync.WaitGroup // background queue refreshes (session.go)

	mu       sync.Mutex
	sessions map[string]*session // the live sessions (session.go)
	draining bool
	failed   bool // a root kept accepted messages it could not hand on
	closed   bool
}

// activeRoot is the one execution a session may have.
type activeRoot struct {
	sessionID, turnID, runID string

	started  chan struct{} // closed once the run started, or failed to
	startErr error         // set before started is closed
	done     chan struct{} // closed after the terminal transition
	doneErr  error         // set before done is closed

	stopOnce sync.Once
	stop     context.CancelCauseFunc
	resid    host.Residency

	// steering is the run's steering owner.
	steering *steering
	// inter is the run's interaction owner.
	inter *interactions.Run
	// fence holds the root's terminal snapshot back until its terminal
	// transition (nil until the launch installed it).
	fence *continuity.Fence
	// stuck (guarded by Owner.mu) marks a root whose ownership
	// could not end without losing accepted messages: it stays the
	// session's active root and keeps its residency until the process
	// exits.
	stuck bool
}

func (ar *activeRoot) requestStop(source string) {
	ar.stopOnce.Do(func() { ar.stop(&agent.StopCause{Source: source}) })
}

// New returns a Owner.
func New(opts Options) *Owner {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.NewID == nil {
		opts.NewID = uuid.NewString
	}
	if opts.DeltaFlush <= 0 {
		opts.DeltaFlush = 250 * time.Millisecond
	}
	if opts.RequestDrain == nil {
		opts.RequestDrain = func() {}
	}
	if opts.HistoryCacheBytes <= 0 {
		opts.HistoryCacheBytes = DefaultHistoryCacheBytes
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Owner{opts: opts, log: opts.Log, baseCtx: ctx, cancel: cancel, sessions: make(map[string]*session)}
	c.histories.max = opts.HistoryCacheBytes
	c.cont = continuity.New(opts.HostEpoch, c.ReadProjection, opts.Gate, opts.Log)
	io := opts.Interactions
	io.Store, io.Gate, io.Continuity, io.ReadProjection, io.Log = opts.Store, opts.Gate, c.cont, c.ReadProjection, opts.Log
	if io.OnPoison == nil {
		io.OnPoison = func(err error) {
			opts.Log.Error("interaction authority poisoned; draining", "err", err)
			opts.RequestDrain()
		}
	}
	c.inter = interactions.New(io)
	return c
}

// Continuity returns the session continuity the coordinator publishes
// through (the kernel's connection observer).
func (c *Owner) Continuity() *continuity.Publisher { return c.cont }

// Interactions returns the interaction authority.
func (c *Owner) Interactions() *interactions.Authority { return c.inter }

// ReadProjection reads the canonical projection of sessionID: its
// identity, its root turn and its pending interactions in one store read,
// then its live message queue (the newest authority, read last). found is
// false when the session does not exist.
func (c *Owner) ReadProjection(ctx context.Context, sessionID string) (continuity.Projection, bool, error) {
	var p continuity.Projection
	err := c.opts.Store.Read(ctx, func(q store.Querier) error {
		var err error
		if p.Session, err = sessions.LoadIdentity(q, sessionID); err != nil {
			return err
		}
		if p.RootTurn, err = TipSnapshot(q, sessionID); err != nil {
			return err
		}
		p.Interactions, err = interactions.Pending(q, sessionID)
		return err
	})
	switch {
	case errors.Is(err, sessions.ErrSessionNotFound):
		return continuity.Projection{}, false, nil
	case err != nil:
		return continuity.Projection{}, false, err
	}
	p.Queue = c.QueueProjection(sessionID)
	return p, true, nil
}

// Handlers returns the handlers of turn.start, turn.query and turn.stop,
// and those of its parts: subscription.open and subscription.close
// (continuity), interaction.query and interaction.answer.
func (c *Owner) Handlers() host.Handlers {
	hs := host.Handlers{
		protocol.OpTurnStart: c.handleStart,
		protocol.OpTurnQuery: c.handleQuery,
		protocol.OpTurnStop:  c.handleStop,
		// session.compact belongs to the session owner: it refuses a
		// session whose root turn runs (compaction.go).
		protocol.OpSessionCompact: c.handleCompact,
	}
	for _, part := range []host.Handlers{c.cont.Handlers(), c.inter.Handlers()} {
		maps.Copy(hs, part)
	}
	return hs
}

func (c *Owner) now() int64 { return max(c.opts.Now().UnixMilli(), 0) }

// ActiveRoot reports whether sessionID has an active root turn.
func (c *Owner) ActiveRoot(sessionID string) bool {
	return c.root(sessionID) != nil
}

// root returns the active root turn of sessionID (nil: none).
func (c *Owner) root(sessionID string) *activeRoot {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.sessions[sessionID]; s != nil {
		return s.root
	}
	return nil
}

// readSnapshot reads the snapshot of one admitted turn.
func (c *Owner) readSnapshot(ctx context.Context, sessionID, turnID string) (protocol.TurnSnapshot, bool, error) {
	var s protocol.TurnSnapshot
	var found bool
	err := c.opts.Store.Read(ctx, func(q store.Querier) error {
		a, ok, err := loadAdmission(q, sessionID, turnID)
		if err != nil || !ok {
			return err
		}
		found = true
		s, err = snapshot(q, a)
		return err
	})
	return s, found, err
}

func internalFailure() host.Outcome {
	return host.Fail(protocol.ErrInternalFailure, MessageOperationFailed)
}

// opFailure answers err: store faults keep their meaning for the log, the
// client gets internal_failure (turn operations declare no storage codes).
func (c *Owner) opFailure(op, sessionID string, err error) host.Outcome {
	c.log.Error("turn operation failed", "op", op, "session", sessionID, "err", err)
	return internalFailure()
}

// handleStart serves turn.start: an idempotent retry of an admitted turn
// answers its snapshot, a new turn of an idle session is admitted and
// started in one durable write, and a busy or archived session refuses.
func (c *Owner) handleStart(ctx context.Context, call *host.Call) host.Outcome {
	in := call.Input.(protocol.TurnStartInput)
	var (
		ar     *activeRoot
		result *protocol.TurnSnapshot
		fail   *host.Outcome
	)
	err := c.opts.Gate.Run(ctx, in.SessionID, func(ctx context.Context, _ *lane.Lease) error {
		c.mu.Lock()
		draining := c.draining
		c.mu.Unlock()
		if draining {
			// Nothing new is admitted once shutdown began (the kernel
			// refuses most such requests before they get here).
			fail = ptr(host.Fail(protocol.ErrHostDraining, protocol.MessageHostDraining))
			return nil
		}
		if c.compacting(in.SessionID) {
			fail = ptr(host.Fail(protocol.ErrSessionBusy, MessageSessionBusy))
			return nil
		}
		if !c.ActiveRoot(in.SessionID) {
			// The common case, a fresh turn of an idle session: checked,
			// admitted and started in one durable write.
			a, sum, err := c.admitFresh(ctx, in)
			switch {
			case err == nil:
				failpoint.Hit(failpoint.TurnAdmitted)
				ar, err = c.launch(ctx, a, &sum, nil)
				return err
			case errors.Is(err, sessions.ErrSessionNotFound):
				fail = ptr(host.Fail(protocol.ErrNotFound, MessageSessionNotFound))
				return nil
			case errors.Is(err, errArchived):
				fail = ptr(host.Fail(protocol.ErrSessionArchived, MessageSessionArchived))
				return nil
			case !errors.Is(err, errAdmitted):
				c.opts.RequestDrain() // the admission chain is uncertain
				return err
			}
		}
		var a admission
		var found bool
		var sum protocol.SessionSummary
		err := c.opts.Store.Read(ctx, func(q store.Querier) error {
			var err error
			if a, found, err = loadAdmission(q, in.SessionID, in.TurnID); err != nil || found {
				return err
			}
			sum, err = sessions.LoadSummary(q, in.SessionID)
			return err
		})
		switch {
		case errors.Is(err, sessions.ErrSessionNotFound):
			fail = ptr(host.Fail(protocol.ErrNotFound, MessageSessionNotFound))
			return nil
		case err != nil:
			return err
		}
		if found {
			if a.Kind != KindExternalMessage {
				fail = ptr(host.Fail(protocol.ErrOperationConflict, MessageKindConflict))
				return nil
			}
			if !sameContent(a.Content, in.Content) || a.Sources != "[]" {
				fail = ptr(host.Fail(protocol.ErrOperationConflict, MessagePayloadConflict))
				return nil
			}
		} else {
			// Not admitted, and the session has an active root (an idle
			// session took the fresh path above).
			if sum.IsArchived || sum.Status == protocol.SessionArchived {
				fail = ptr(host.Fail(protocol.ErrSessionArchived, MessageSessionArchived))
				return nil
			}
			fail = ptr(host.Fail(protocol.ErrSessionBusy, MessageSessionBusy))
			return nil
		}
		var o *host.Outcome
		ar, result, o, err = c.prepare(ctx, a)
		fail = o
		return err
	})
	if err != nil {
		// A turn.start that failed inside the lane may have left its
		// admission or run in a state only a restart resolves: the host
		// drains and the next host's recovery repairs it.
		if !errors.Is(err, lane.ErrClosed) && ctx.Err() == nil {
			c.opts.RequestDrain()
		}
		return c.opFailure("turn.start", in.SessionID, err)
	}
	if fail != nil {
		return *fail
	}
	if result != nil {
		return host.OK(*result)
	}
	return c.awaitStart(ctx, ar)
}

func ptr[T any](v T) *T { return &v }

// Refusals of admitFresh.
var (
	errAdmitted = errors.New("turns: the turn is already admitted")
	errArchived = errors.New("turns: the session is archived")
)

// admitFresh admits a new turn of an idle session and starts its run in
// one durable write: errAdmitted when (sessionId, turnId) is already
// admitted (the caller answers it as a retry), sessions.ErrSessionNotFound
// or errArchived when the session cannot take a turn. Nothing is written
// on a refusal.
func (c *Owner) admitFresh(ctx context.Context, in protocol.TurnStartInput) (admission, protocol.SessionSummary, error) {
	a := admission{
		SessionID: in.SessionID, TurnID: in.TurnID, RunID: c.opts.NewID(), UserMessageID: c.opts.NewID(),
		Kind: KindExternalMessage, Content: in.Content, AdmittedAt: c.now(),
	}
	var sum protocol.SessionSummary
	err := c.opts.Store.Write(ctx, func(tx *store.Tx) error {
		var n int
		if err := tx.QueryRow(`SELECT COUNT(*) FROM turn_admissions WHERE session_id = ? AND turn_id = ?`, in.SessionID, in.TurnID).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return errAdmitted
		}
		var err error
		if sum, err = sessions.LoadSummary(tx, in.SessionID); err != nil {
			return err
		}
		if sum.IsArchived || sum.Status == protocol.SessionArchived {
			return errArchived
		}
		if err := insertAdmission(tx, &a); err != nil {
			return err
		}
		return beginRun(tx, a)
	})
	return a, sum, err
}

// prepare continues a turn.start with its durable admission, inside the
// session's lane: a finished turn answers its terminal snapshot, a running
// one is waited for, and a turn without a run is started.
func (c *Owner) prepare(ctx context.Context, a admission) (*activeRoot, *protocol.TurnSnapshot, *host.Outcome, error) {
	var snap protocol.TurnSnapshot
	err := c.opts.Store.Read(ctx, func(q store.Querier) error {
		var err error
		snap, err = snapshot(q, a)
		return err
	})
	if err != nil {
		return nil, nil, nil, err
	}
	cur := c.root(a.SessionID)
	switch {
	case snap.Status.Terminal() && (cur == nil || cur.turnID != a.TurnID):
		return nil, &snap, nil, nil
	case cur != nil && cur.turnID == a.TurnID && cur.runID == a.RunID:
		return cur, nil, nil, nil
	case cur != nil:
		return nil, nil, ptr(host.Fail(protocol.ErrSessionBusy, MessageSessionBusy)), nil
	case snap.Status != protocol.TurnAdmitted:
		return nil, nil, nil, fmt.Errorf("turns: run %s of session %s is %s without an active execution", a.RunID, a.SessionID, snap.Status)
	}
	ar, err := c.launch(ctx, a, nil, nil)
	return ar, nil, nil, err
}

// awaitStart waits until the run started, then answers its snapshot; a
// turn already terminal is answered after its terminal transition.
func (c *Owner) awaitStart(ctx context.Context, ar *activeRoot) host.Outcome {
	select {
	case <-ar.started:
	case <-ctx.Done():
		return internalFailure()
	}
	if ar.startErr != nil {
		return c.opFailure("turn.start", ar.sessionID, ar.startErr)
	}
	snap, _, err := c.readSnapshot(ctx, ar.sessionID, ar.turnID)
	if err != nil {
		return c.opFailure("turn.start", ar.sessionID, err)
	}
	if snap.Status.Terminal() {
		select {
		case <-ar.done:
		case <-ctx.Done():
			return internalFailure()
		}
		if snap, _, err = c.readSnapshot(ctx, ar.sessionID, ar.turnID); err != nil {
			return c.opFailure("turn.start", ar.sessionID, err)
		}
	}
	return host.OK(snap)
}

// handleQuery serves turn.query: in the lane, so an admission in progress
// is observed.
func (c *Owner) handleQuery(ctx context.Context, call *host.Call) host.Outcome {
	in := call.Input.(protocol.TurnQueryInput)
	var snap protocol.TurnSnapshot
	var found bool
	err := c.opts.Gate.Run(ctx, in.SessionID, func(ctx context.Context, _ *lane.Lease) error {
		var err error
		snap, found, err = c.readSnapshot(ctx, in.SessionID, in.TurnID)
		return err
	})
	switch {
	case err != nil:
		c.log.Error("turn query failed", "session", in.SessionID, "err", err)
		return internalFailure()
	case !found:
		return host.Fail(protocol.ErrNotFound, MessageTurnNotAdmitted)
	}
	return host.OK(snap)
}

// handleStop serves turn.stop: the stop intent is
// delivered once, and the answer is the turn's snapshot after its terminal
// transition (normally cancelled).
func (c *Owner) handleStop(ctx context.Context, call *host.Call) host.Outcome {
	in := call.Input.(protocol.TurnStopInput)
	var (
		ar   *activeRoot
		snap protocol.TurnSnapshot
		fail *host.Outcome
	)
	err := c.opts.Gate.Run(ctx, in.SessionID, func(ctx context.Context, _ *lane.Lease) error {
		var a admission
		var found bool
		err := c.opts.Store.Read(ctx, func(q store.Querier) error {
			var err error
			if a, found, err = loadAdmission(q, in.SessionID, in.TurnID); err != nil || !found {
				return err
			}
			snap, err = snapshot(q, a)
			return err
		})
		switch {
		case err != nil:
			return err
		case !found:
			fail = ptr(host.Fail(protocol.ErrNotFound, MessageTurnNotAdmitted))
			return nil
		case a.RunID != in.RunID:
			fail = ptr(host.Fail(protocol.ErrOperationConflict, MessageRunMismatch))
			return nil
		}
		cur := c.root(in.SessionID)
		switch {
		case cur != nil && cur.turnID == in.TurnID && cur.runID == in.RunID:
			ar = cur
			if c.isStuck(ar) {
				return nil // its done reports why it cannot stop
			}
			if _, err := c.stopRoot(ctx, ar, abortSourceTurnStop); err != nil {
				return err
			}
		case snap.Status.Terminal():
		case cur == nil:
			return fmt.Errorf("turns: run %s of session %s is %s without an active execution", a.RunID, in.SessionID, snap.Status)
		default:
			fail = ptr(host.Fail(protocol.ErrOperationConflict, MessageOtherRootActive))
		}
		return nil
	})
	switch {
	case err != nil:
		c.opts.RequestDrain()
		return c.opFailure("turn.stop", in.SessionID, err)
	case fail != nil:
		return *fail
	case ar == nil:
		return host.OK(snap)
	}
	select {
	case <-ar.done:
	case <-ctx.Done():
		return internalFailure()
	}
	if ar.doneErr != nil && !errors.Is(ar.doneErr, errStartFailed) {
		return c.opFailure("turn.stop", in.SessionID, ar.doneErr)
	}
	snap, _, err = c.readSnapshot(ctx, in.SessionID, in.TurnID)
	if err != nil {
		return c.opFailure("turn.stop", in.SessionID, err)
	}
	return host.OK(snap)
}

// stopRoot declares the stop of an active root, inside its session's
// lane: the message queue's stop fence is committed (queued messages are
// retracted and no message is admitted until the terminal transition),
// its pending interactions are closed (turn_stopped), and the stop is
// delivered to the running loop (once). It returns the fence's result.
func (c *Owner) stopRoot(ctx context.Context, ar *activeRoot, source string) (protocol.QueueRetractResult, error) {
	c.mu.Lock()
	var fence protocol.QueueRetractResult
	var err error
	if s := c.sessions[ar.sessionID]; s != nil && s.root == ar {
		fence, err = c.stopFenceLocked(s)
	} else {
		err = fmt.Errorf("turns: stop of turn %s of session %s, which is not its active root", ar.turnID, ar.sessionID)
	}
	c.mu.Unlock()
	if err != nil {
		return fence, err
	}
	// The stop reaches the loop even when the interactions cannot be
	// closed (the authority failed): the error still drains the host.
	err = ar.inter.Close(ctx, ClosureTurnStopped)
	ar.requestStop(source)
	return fence, err
}

func (c *Owner) isStuck(ar *activeRoot) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return ar.stuck
}

// BeginDrain refuses new executions and new queued messages; running
// turns go on until Close.
func (c *Owner) BeginDrain() {
	c.mu.Lock()
	c.draining = true
	c.mu.Unlock()
}

// Close stops every active root turn (they end cancelled with abortSource
// host_shutdown), waits for their terminal transitions, and repeats until
// none is left, then waits for the tool calls the turns abandoned at a
// stop, or until ctx ends. It fails when a root is stuck with accepted
// messages it could not hand on.
func (c *Owner) Close(ctx context.Context) error {
	// Subscriptions end once the turns' terminal snapshots are published.
	defer c.cont.Close()
	c.BeginDrain()
	var stuck int
	for {
		c.mu.Lock()
		roots := make([]*activeRoot, 0, len(c.sessions))
		stuck = 0
		for _, s := range c.sessions {
			ar := s.root
			if ar == nil {
				continue
			}
			if ar.stuck {
				stuck++
				continue
			}
			roots = append(roots, ar)
		}
		c.mu.Unlock()
		if len(roots) == 0 {
			break
		}
		for _, ar := range roots {
			err := c.opts.Gate.Run(ctx, ar.sessionID, func(ctx context.Context, _ *lane.Lease) error {
				_, err := c.stopRoot(ctx, ar, abortSourceHostShutdown)
				return err
			})
			if err != nil {
				c.log.Warn("stop at shutdown", "session", ar.sessionID, "err", err)
				ar.requestStop(abortSourceHostShutdown)
			}
		}
		for _, ar := range roots {
			select {
			case <-ar.done:
			case <-ctx.Done():
				c.cancel()
				return fmt.Errorf("turns: %d turns still running at shutdown: %w", len(roots), ctx.Err())
			}
		}
	}
	c.mu.Lock()
	c.closed = true
	var held []string
	for id, s := range c.sessions {
		if s.root == nil && (s.queue.live() > 0 || s.queue.batch != nil) {
			held = append(held, id)
		}
	}
	c.mu.Unlock()
	c.cancel()
	done := make(chan struct{})
	go func() { c.wg.Wait(); c.refreshes.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := c.abandoned.Wait(ctx); err != nil {
		return fmt.Errorf("turns: %d tool calls abandoned at a stop are still running at shutdown: %w", c.abandoned.Running(), err)
	}
	if stuck > 0 {
		return fmt.Errorf("turns: %d root turns keep accepted messages they could not hand on", stuck)
	}
	if len(held) > 0 {
		return fmt.Errorf("turns: %d sessions still hold queue state at close: %v", len(held), held)
	}
	return nil
}

// WaitIdle waits until sessionID has no active root turn (its current
// execution, and any successor, ended) or ctx ends.
func (c *Owner) WaitIdle(ctx context.Context, sessionID string) error {
	for {
		c.mu.Lock()
		var ar *activeRoot
		if s := c.sessions[sessionID]; s != nil {
			ar = s.root
		}
		stuck := ar != nil && ar.stuck
		c.mu.Unlock()
		if ar == nil {
			return nil
		}
		if stuck {
			return fmt.Errorf("turns: the active root turn %s of session %s is stuck", ar.turnID, sessionID)
		}
		select {
		case <-ar.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
