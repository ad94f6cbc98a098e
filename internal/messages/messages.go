// Package messages serves the message operations of one host epoch:
// turn.message.submit, queue.retract and turn.interrupt, with the durable
// receipts that make them idempotent within an epoch and the proofs that
// answer a retry from another epoch. The queue itself is a part of the
// session owner (internal/turns, session.go and queue.go); each handler
// checks receipts and proofs, then asks the owner for the one state
// change inside the session's lane.
//
// Where things happen:
//   - submit.go, retract.go, interrupt.go: the handlers.
//   - receipts.go: the receipts table and same-epoch request sharing.
package messages

import (
	"context"
	"log/slog"
	"sync"

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
	MessageAdmissionClosed    = turns.MessageAdmissionClosed
	MessageQueueFull          = turns.MessageQueueFull
	MessageProjectionFull     = turns.MessageProjectionFull
	MessageSessionFull        = turns.MessageSessionFull
	MessageInterruptFull      = turns.MessageInterruptFull
	MessageNoFollowupTurn     = turns.MessageNoFollowupTurn
	MessageQueueChanged       = turns.MessageQueueChanged
	RetractIdentityConflict   = "Retract identity has a different payload"
	RetractOutcomeUnknown     = "Retract outcome is not durable across Host Epochs"
	RetractTooLarge           = turns.MessageRetractTooLarge
	InterruptIdentityConflict = "Interrupt identity has a different payload"
	InterruptOutcomeUnknown   = "Interrupt outcome is not durable across Host Epochs"
	InterruptMismatch         = "Interrupt does not match the active root Turn"
)

// Options configures a Receipts.
type Options struct {
	// HostEpoch is this host process's epoch; receipts belong to it.
	HostEpoch string
	Store     *store.Store
	Gate      *lane.Gate
	// Sessions is the session owner, whose queue the operations change.
	Sessions *turns.Owner
	// RequestDrain asks the host to shut down when the authority fails.
	RequestDrain func()
	Log          *slog.Logger
}

// Receipts serves the message operations of one host epoch.
type Receipts struct {
	opts Options
	log  *slog.Logger

	mu      sync.Mutex
	flights map[flightKey]*flight
	failed  bool
}

// New returns a Receipts.
func New(opts Options) *Receipts {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.RequestDrain == nil {
		opts.RequestDrain = func() {}
	}
	return &Receipts{opts: opts, log: opts.Log, flights: make(map[flightKey]*flight)}
}

// Handlers returns the handlers of turn.message.submit, queue.retract and
// turn.interrupt.
func (c *Receipts) Handlers() host.Handlers {
	return host.Handlers{
		protocol.OpTurnMessageSubmit: c.handleSubmit,
		protocol.OpQueueRetract:      c.handleRetract,
		protocol.OpTurnInterrupt:     c.handleInterrupt,
	}
}

// BeginHostEpoch deletes the receipts of every other host epoch; the
// composition calls it once before serving.
func (c *Receipts) BeginHostEpoch(ctx context.Context) error {
	return c.opts.Store.Write(ctx, func(tx *store.Tx) error {
		_, err := tx.Exec(`DELETE FROM message_receipts WHERE host_epoch <> ?`, c.opts.HostEpoch)
		return err
	})
}

// Failed reports whether the authority failed stop: a receipt could not
// be written, or the session owner failed.
func (c *Receipts) Failed() bool {
	c.mu.Lock()
	failed := c.failed
	c.mu.Unlock()
	return failed || c.opts.Sessions.Failed()
}

// failStop makes every later submit, retract and interrupt answer
// host_draining and asks the host to drain.
func (c *Receipts) failStop(reason string, err error) {
	c.mu.Lock()
	first := !c.failed
	c.failed = true
	c.mu.Unlock()
	if first {
		c.log.Error("message authority failed; draining", "reason", reason, "err", err)
	}
	c.opts.RequestDrain()
}

// opFailure answers an operation that failed with err: host_draining once
// the authority has failed, else internal_failure (logged).
func (c *Receipts) opFailure(what, sessionID, id string, err error) host.Outcome {
	if c.Failed() {
		return authorityFailed()
	}
	c.log.Error(what+" failed", "session", sessionID, "id", id, "err", err)
	return internalFailure()
}
