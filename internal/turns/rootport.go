package turns

import (
	"context"
	"errors"
	"fmt"

	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/protocol"
)

// This file is the root-turn side the message queue uses: the active root
// of a session, the turn a message starts in an idle session, and the stop
// claimed by turn.interrupt.

// ErrSessionBusy refuses a start in a session that has an active root.
var ErrSessionBusy = errors.New("turns: session already has an active root turn")

// RootState reports the active root turn of sessionID, if any. A root
// stays active from its reservation until its terminal transition ended.
func (c *Owner) RootState(sessionID string) (turnID, runID string, active bool) {
	ar := c.root(sessionID)
	if ar == nil {
		return "", "", false
	}
	return ar.turnID, ar.runID, true
}

// MessageStart is a message submitted to an idle session: it becomes the
// input of a new root turn.
type MessageStart struct {
	SessionID string
	MessageID string
	Content   protocol.MessageContent
	Placement protocol.MessagePlacement
}

// StartFromMessage admits a new root turn whose only source is the
// message (disposition turn_started) and whose user message id is the
// message id, and launches it with a host residency. It returns the new
// turn id once the turn is reserved, without waiting for its run to
// start. The caller is inside the session's lane and checked that the
// session exists and is not archived. Errors: ErrSessionBusy, ErrDraining,
// and store errors (the host then drains).
func (c *Owner) StartFromMessage(ctx context.Context, in MessageStart) (string, error) {
	c.mu.Lock()
	draining := c.draining
	c.mu.Unlock()
	busy := c.root(in.SessionID) != nil || c.compacting(in.SessionID)
	switch {
	case busy:
		return "", ErrSessionBusy
	case draining:
		return "", ErrDraining
	}
	sources, err := encodeSources([]SourceMessage{{
		MessageID: in.MessageID, Content: in.Content, Placement: in.Placement, Disposition: SourceTurnStarted,
	}})
	if err != nil {
		return "", err
	}
	a := admission{
		SessionID: in.SessionID, TurnID: c.opts.NewID(), RunID: c.opts.NewID(), UserMessageID: in.MessageID,
		Kind: KindExternalMessage, Content: in.Content, Sources: sources, AdmittedAt: c.now(),
	}
	var sum protocol.SessionSummary
	err = c.opts.Store.Write(context.WithoutCancel(ctx), func(tx *store.Tx) error {
		if err := insertAdmission(tx, &a); err != nil {
			return err
		}
		var err error
		sum, err = beginTx(tx, a)
		return err
	})
	if err != nil {
		c.opts.RequestDrain() // the admission chain is uncertain
		return "", err
	}
	if _, err := c.launch(ctx, a, &sum, nil); err != nil {
		c.opts.RequestDrain()
		return "", err
	}
	return a.TurnID, nil
}

// Interruption is the stop of an active root claimed by turn.interrupt.
type Interruption struct {
	// Fence is the result of the root's stop fence: the queue revision
	// and the messages it retracted.
	Fence protocol.QueueRetractResult
	c     *Owner
	ar    *activeRoot
}

// ClaimInterrupt stops the active root (turnID, runID) of sessionID: its
// message queue's stop fence is committed, its pending interactions are
// closed (turn_stopped) and the stop is delivered (once). It returns nil
// when (turnID, runID) is not the session's active root. The caller is
// inside the session's lane. An error drains the host.
func (c *Owner) ClaimInterrupt(ctx context.Context, sessionID, turnID, runID string) (*Interruption, error) {
	ar := c.root(sessionID)
	if ar == nil || ar.turnID != turnID || ar.runID != runID || c.isStuck(ar) {
		return nil, nil
	}
	select {
	case <-ar.started:
		if ar.startErr != nil {
			return nil, nil
		}
	default:
	}
	fence, err := c.stopRoot(ctx, ar, abortSourceTurnInterrupt)
	if err != nil {
		c.opts.RequestDrain()
		return nil, err
	}
	return &Interruption{Fence: fence, c: c, ar: ar}, nil
}

// Wait waits until the interrupted turn's terminal transition ended and
// returns its terminal snapshot.
func (i *Interruption) Wait(ctx context.Context) (protocol.TurnSnapshot, error) {
	ar := i.ar
	select {
	case <-ar.done:
	case <-ctx.Done():
		return protocol.TurnSnapshot{}, ctx.Err()
	}
	if ar.doneErr != nil {
		return protocol.TurnSnapshot{}, ar.doneErr
	}
	snap, found, err := i.c.readSnapshot(ctx, ar.sessionID, ar.turnID)
	switch {
	case err != nil:
		return snap, err
	case !found || !snap.Status.Terminal():
		return snap, fmt.Errorf("turns: interrupted turn %s of session %s is not terminal after its transition", ar.turnID, ar.sessionID)
	}
	return snap, nil
}
