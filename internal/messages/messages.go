// Package messages owns the session message queue of one host epoch
// (domain.md §3): turn.message.submit, queue.retract and turn.interrupt,
// the per-session queue the running root turn steers from, the follow-ups
// that become the next root turn, the stop fence, and the durable
// receipts that make the three operations idempotent within an epoch.
//
// Where things happen:
//   - state.go: the per-session queue (revision, generation, phase,
//     entries, reservation, run, transition, stop fence) and its
//     projection.
//   - hooks.go: the lifecycle the root-turn coordinator drives
//     (turns.MessagePort) and the run's steering owner.
//   - capacity.go: the six admission checks of a queued message.
//   - submit.go, retract.go, interrupt.go: the handlers.
//   - receipts.go: the receipts table and same-epoch request sharing.
//   - refresh.go: the coalesced background continuity refresh every
//     queue mutation schedules.
package messages

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/google/uuid"

	"github.com/maka-agent/maka/internal/continuity"
	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/lane"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/internal/turns"
	"github.com/maka-agent/maka/protocol"
)

// Wire messages of the message operations.
const (
	MessageAuthorityFailed    = "Runtime Host message authority has failed"
	MessageSessionNotFound    = "Session does not exist"
	MessageSessionArchived    = "Session is archived"
	MessageIdentityConflict   = "Message identity has a different payload"
	MessageDispositionUnknown = "Message disposition cannot be proven in this Host Epoch"
	MessageAdmissionClosed    = "Message admission is closed for the active generation"
	MessageQueueFull          = "Message queue capacity is full"
	MessageProjectionFull     = "Message queue projection capacity is full"
	MessageSessionFull        = "Session projection capacity is full"
	MessageInterruptFull      = "Message queue interrupt result capacity is full"
	MessageNoFollowupTurn     = "Message queue cannot form a durable follow-up Turn"
	MessageQueueChanged       = "Message queue changed during admission"
	RetractIdentityConflict   = "Retract identity has a different payload"
	RetractOutcomeUnknown     = "Retract outcome is not durable across Host Epochs"
	RetractTooLarge           = "Retract result exceeds protocol capacity"
	InterruptIdentityConflict = "Interrupt identity has a different payload"
	InterruptOutcomeUnknown   = "Interrupt outcome is not durable across Host Epochs"
	InterruptMismatch         = "Interrupt does not match the active root Turn"
)

// Roots is the root-turn coordinator as the message queue uses it
// (implemented by *turns.Coordinator).
type Roots interface {
	// RootState reports the session's active root turn.
	RootState(sessionID string) (turnID, runID string, active bool)
	// StartFromMessage starts a root turn from a message submitted to an
	// idle session (caller inside the session's lane).
	StartFromMessage(ctx context.Context, in turns.MessageStart) (string, error)
	// ClaimInterrupt commits the stop fence and the interaction closure
	// of the active root (turnID, runID) and requests its stop; nil when
	// it is not the active root (caller inside the session's lane).
	ClaimInterrupt(ctx context.Context, sessionID, turnID, runID string) (*turns.Interruption, error)
}

var _ Roots = (*turns.Coordinator)(nil)

// Options configures a Coordinator.
type Options struct {
	// HostEpoch is this host process's epoch; receipts and the projection
	// belong to it.
	HostEpoch string
	Store     *store.Store
	Gate      *lane.Gate
	// Roots is the root-turn coordinator; it may instead be bound later
	// with Bind, before the first request.
	Roots Roots
	// Residency keeps the host alive while an accepted message waits
	// (host-level, one per entry).
	Residency func() host.Residency
	// Refresh republishes a session's canonical projection; it enters the
	// session's lane (continuity.Coordinator.Refresh). Every queue
	// mutation schedules one in the background.
	Refresh func(ctx context.Context, sessionID string) error
	// ReadProjection reads a session's canonical projection, to check
	// that a candidate queue still fits the session snapshot
	// (sessions.Service.ReadProjection; nil: not checked).
	ReadProjection continuity.ProjectionReader
	// RequestDrain asks the host to shut down when the authority fails.
	RequestDrain func()
	Log          *slog.Logger
	NewID        func() string
}

// Coordinator is the message authority of one host epoch. It implements
// turns.MessagePort.
type Coordinator struct {
	opts Options
	log  *slog.Logger

	baseCtx context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup // refresh goroutines

	mu         sync.Mutex
	roots      Roots
	sessions   map[string]*queueState
	flights    map[flightKey]*flight
	refreshing map[string]*refresher
	draining   bool
	failed     bool
	closed     bool
}

var _ turns.MessagePort = (*Coordinator)(nil)

// New returns a Coordinator.
func New(opts Options) *Coordinator {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.NewID == nil {
		opts.NewID = uuid.NewString
	}
	if opts.RequestDrain == nil {
		opts.RequestDrain = func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Coordinator{
		opts: opts, log: opts.Log, baseCtx: ctx, cancel: cancel, roots: opts.Roots,
		sessions: make(map[string]*queueState), flights: make(map[flightKey]*flight),
		refreshing: make(map[string]*refresher),
	}
}

// Bind sets the root-turn coordinator when it is built after the
// Coordinator (the two refer to each other).
func (c *Coordinator) Bind(roots Roots) {
	c.mu.Lock()
	c.roots = roots
	c.mu.Unlock()
}

func (c *Coordinator) rootPort() Roots {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.roots
}

// Handlers returns the handlers of turn.message.submit, queue.retract and
// turn.interrupt.
func (c *Coordinator) Handlers() host.Handlers {
	return host.Handlers{
		protocol.OpTurnMessageSubmit: c.handleSubmit,
		protocol.OpQueueRetract:      c.handleRetract,
		protocol.OpTurnInterrupt:     c.handleInterrupt,
	}
}

// BeginHostEpoch deletes the receipts of every other host epoch; the
// composition calls it once before serving.
func (c *Coordinator) BeginHostEpoch(ctx context.Context) error {
	return c.opts.Store.Write(ctx, func(tx *store.Tx) error {
		_, err := tx.Exec(`DELETE FROM message_receipts WHERE host_epoch <> ?`, c.opts.HostEpoch)
		return err
	})
}

// BeginDrain refuses new submits with host_draining; accepted messages
// stay until their turn's terminal stop fence, and no follow-up turn is
// started.
func (c *Coordinator) BeginDrain() {
	c.mu.Lock()
	c.draining = true
	c.mu.Unlock()
}

// Failed reports whether the authority failed stop.
func (c *Coordinator) Failed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failed
}

// failStop makes every later submit, retract and interrupt answer
// host_draining and asks the host to drain.
func (c *Coordinator) failStop(reason string, err error) {
	c.mu.Lock()
	first := !c.failed
	c.failed = true
	c.mu.Unlock()
	if first {
		c.log.Error("message authority failed; draining", "reason", reason, "err", err)
	}
	c.opts.RequestDrain()
}

// Close stops the background refreshes and fails if a session still has
// a reserved root, a run, a transition or accepted messages.
func (c *Coordinator) Close(ctx context.Context) error {
	c.mu.Lock()
	c.closed = true
	c.draining = true
	var live []string
	for id, st := range c.sessions {
		if st.reserved != nil || st.run != nil || st.transition != nil || st.live() > 0 {
			live = append(live, id)
		}
	}
	c.mu.Unlock()
	c.cancel()
	done := make(chan struct{})
	go func() { c.wg.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if len(live) > 0 {
		err = errors.Join(err, fmt.Errorf("messages: %d sessions still hold queue state at close: %v", len(live), live))
	}
	return err
}

// opFailure answers an operation that failed with err: host_draining once
// the authority has failed, else internal_failure (logged).
func (c *Coordinator) opFailure(what, sessionID, id string, err error) host.Outcome {
	if c.Failed() {
		return authorityFailed()
	}
	c.log.Error(what+" failed", "session", sessionID, "id", id, "err", err)
	return internalFailure()
}
