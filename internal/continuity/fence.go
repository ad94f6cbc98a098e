package continuity

import (
	"context"
	"fmt"

	"github.com/maka-agent/maka/protocol"
)

// The terminal publication fence makes the terminal snapshot of a root turn
// an exactly-once cut: while a root turn is fenced, a
// refresh that reads it as terminal is not committed, so subscribers keep
// its last non-terminal snapshot; PublishTerminal, called by the turn's
// terminal transition, publishes the terminal snapshot with the next
// revision and lifts the fence. Subscribers therefore see, in order, the
// admitted root, its live frames and projections, the terminal snapshot
// once, and then any successor.

// rootIdentity names one root turn.
type rootIdentity struct{ turnID, runID string }

// holdsBack reports whether the fence keeps root from being committed: it
// is the fenced turn, read as terminal.
func (f *rootIdentity) holdsBack(root *protocol.TurnSnapshot) bool {
	return f != nil && root != nil && root.TurnID == f.turnID && root.RunID == f.runID && root.Status.Terminal()
}

// Fence is the terminal publication fence of one root turn, held by the
// session owner (internal/turns) from the turn's launch until its terminal
// transition publishes it or its ownership ends without one.
type Fence struct {
	p         *Publisher
	sessionID string
	id        rootIdentity
}

// InstallFence fences the root turn (turnID, runID) of sessionID, publishes
// its current (non-terminal) snapshot to the session's subscribers and
// returns the fence. The caller must be inside the session's lane.
// Installing the same fence again returns it again; the canonical root
// must be that turn and not terminal, and no other fence may be held.
func (c *Publisher) InstallFence(ctx context.Context, sessionID, turnID, runID string) (*Fence, error) {
	if err := c.installFence(ctx, sessionID, turnID, runID); err != nil {
		return nil, err
	}
	return &Fence{p: c, sessionID: sessionID, id: rootIdentity{turnID, runID}}, nil
}

// PublishTerminal publishes the terminal snapshot of the fenced root turn
// and lifts the fence. The caller must be inside the session's lane, after
// the turn's terminal fact is durable.
func (f *Fence) PublishTerminal(ctx context.Context) error {
	return f.p.PublishTerminal(ctx, f.sessionID, f.id.turnID, f.id.runID)
}

// Release lifts the fence without publishing (a nil fence is a no-op), for
// a turn whose ownership ends without a terminal transition; a later
// refresh publishes whatever is canonical then.
func (f *Fence) Release() {
	if f != nil {
		f.p.ReleaseFence(f.sessionID, f.id.turnID, f.id.runID)
	}
}

func (c *Publisher) installFence(ctx context.Context, sessionID, turnID, runID string) error {
	p, found, err := c.read(ctx, sessionID)
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("continuity: fence of session %s: session not found", sessionID)
	}
	root := p.RootTurn
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	if st := c.sessions[sessionID]; st != nil && st.fence != nil {
		same := *st.fence == rootIdentity{turnID, runID}
		c.mu.Unlock()
		if same {
			return nil
		}
		return fmt.Errorf("continuity: session %s already fences turn %s", sessionID, st.fence.turnID)
	}
	if root == nil || root.TurnID != turnID || root.RunID != runID || root.Status.Terminal() {
		c.mu.Unlock()
		return fmt.Errorf("%w: fence of session %s turn %s run %s", ErrNotCanonicalRoot, sessionID, turnID, runID)
	}
	st, touched, err := c.commitLocked(sessionID, p, true)
	if err == nil {
		st.fence = &rootIdentity{turnID, runID}
		st.log = &turnLog{runID: runID}
	}
	c.mu.Unlock()
	pumpAll(touched)
	return err
}

// PublishTerminal publishes the terminal snapshot of the fenced root turn
// (turnID, runID) of sessionID and lifts the fence. The caller must be
// inside the session's lane, after the turn's terminal fact is durable.
func (c *Publisher) PublishTerminal(ctx context.Context, sessionID, turnID, runID string) error {
	p, found, err := c.read(ctx, sessionID)
	if err != nil {
		return err
	}
	c.mu.Lock()
	touched, err := c.publishTerminalLocked(sessionID, p, found, rootIdentity{turnID, runID})
	c.dropIfUnusedLocked(sessionID)
	c.mu.Unlock()
	pumpAll(touched)
	return err
}

func (c *Publisher) publishTerminalLocked(sessionID string, p Projection, found bool, id rootIdentity) ([]*subscriber, error) {
	st := c.sessions[sessionID]
	if c.closed || st == nil {
		return nil, nil
	}
	if st.fence == nil || *st.fence != id {
		return nil, fmt.Errorf("continuity: session %s holds no fence of turn %s", sessionID, id.turnID)
	}
	if !found || p.RootTurn == nil || p.RootTurn.TurnID != id.turnID || p.RootTurn.RunID != id.runID || !p.RootTurn.Status.Terminal() {
		return nil, fmt.Errorf("continuity: terminal publication of session %s turn %s: root is not terminal", sessionID, id.turnID)
	}
	st.fence, st.log = nil, nil
	_, touched, err := c.commitLocked(sessionID, p, false)
	return touched, err
}

// ReleaseFence lifts the fence of (turnID, runID) without publishing, for a
// turn that failed before its run started; a later refresh publishes
// whatever is canonical then.
func (c *Publisher) ReleaseFence(sessionID, turnID, runID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.sessions[sessionID]; st != nil && st.fence != nil && *st.fence == (rootIdentity{turnID, runID}) {
		st.fence, st.log = nil, nil
		c.dropIfUnusedLocked(sessionID)
	}
}
