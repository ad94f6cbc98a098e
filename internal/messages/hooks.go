package messages

import (
	"errors"
	"fmt"

	"github.com/maka-agent/maka/internal/agent"
	"github.com/maka-agent/maka/internal/turns"
	"github.com/maka-agent/maka/protocol"
)

// errInvariant marks a lifecycle call that breaks the queue's invariants.
var errInvariant = errors.New("messages: queue invariant broken")

func invariant(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errInvariant}, args...)...)
}

// ReserveRoot implements turns.MessagePort: the session's queue opens for
// the root (turnID, runID). Reserving the same root again is a no-op.
func (c *Coordinator) ReserveRoot(sessionID, turnID, runID string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.stateLocked(sessionID)
	id := rootID{turnID, runID}
	switch {
	case st.reserved != nil && *st.reserved == id:
		return nil
	case st.reserved != nil:
		return invariant("session %s is reserved for turn %s, not %s", sessionID, st.reserved.turnID, turnID)
	case st.run != nil || st.transition != nil:
		return invariant("session %s has a run or a transition without a reservation", sessionID)
	}
	st.reserved = &id
	st.open = true
	return nil
}

// BindRun implements turns.MessagePort: the reserved root's run gets its
// steering owner, bound to the current generation.
func (c *Coordinator) BindRun(sessionID, turnID, runID string) (turns.RunSteering, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.sessions[sessionID]
	id := rootID{turnID, runID}
	switch {
	case st == nil || st.reserved == nil || *st.reserved != id:
		return nil, invariant("bind run %s of session %s without its reservation", runID, sessionID)
	case st.run != nil:
		return nil, invariant("session %s already has a bound run", sessionID)
	case !st.open && (st.fence == nil || st.fence.root != id):
		return nil, invariant("bind run %s of session %s while its queue is closed", runID, sessionID)
	}
	o := &runOwner{c: c, sessionID: sessionID, root: id, generation: st.generation}
	st.run = o
	return o, nil
}

// AbandonReservation implements turns.MessagePort. Abandoning a
// reservation that still has accepted messages or a transition fails
// stop: those messages must not be lost.
func (c *Coordinator) AbandonReservation(sessionID, turnID, runID string) error {
	c.mu.Lock()
	st := c.sessions[sessionID]
	id := rootID{turnID, runID}
	switch {
	case st == nil || st.reserved == nil:
		c.mu.Unlock()
		return nil
	case *st.reserved != id:
		c.mu.Unlock()
		return invariant("abandon turn %s of session %s reserved for turn %s", turnID, sessionID, st.reserved.turnID)
	case st.run != nil && !st.run.released:
		c.mu.Unlock()
		return invariant("abandon turn %s of session %s with a live run", turnID, sessionID)
	case st.transition != nil || st.live() > 0:
		n := st.live()
		c.mu.Unlock()
		err := fmt.Errorf("messages: turn %s of session %s ended without a transition while %d accepted messages wait", turnID, sessionID, n)
		c.failStop("abandoned reservation with accepted messages", err)
		return err
	}
	st.reserved, st.run, st.fence = nil, nil, nil
	st.open = false
	c.reclaimLocked(sessionID, st)
	c.mu.Unlock()
	return nil
}

// CommitStopFence implements turns.MessagePort (the stop fence of
// turn.stop, turn.interrupt and shutdown): the queue closes, every queued
// message is retracted, in-flight steering stays with the run, and the
// generation advances so that a late nack discards instead of re-queuing.
func (c *Coordinator) CommitStopFence(sessionID, turnID, runID string) (protocol.QueueRetractResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.commitStopFenceLocked(sessionID, rootID{turnID, runID})
}

func (c *Coordinator) commitStopFenceLocked(sessionID string, id rootID) (protocol.QueueRetractResult, error) {
	st := c.sessions[sessionID]
	switch {
	case st == nil || st.reserved == nil || *st.reserved != id:
		return protocol.QueueRetractResult{}, invariant("stop fence of turn %s of session %s without its reservation", id.turnID, sessionID)
	case st.fence != nil && st.fence.root == id:
		return st.fence.result, nil
	case st.fence != nil:
		return protocol.QueueRetractResult{}, invariant("session %s already fences turn %s", sessionID, st.fence.root.turnID)
	case st.transition != nil:
		return protocol.QueueRetractResult{}, invariant("stop fence of turn %s of session %s during its transition", id.turnID, sessionID)
	}
	st.open = false
	retracted := c.retractQueuedLocked(st)
	st.generation++
	c.mutatedLocked(sessionID, st)
	st.fence = &stopFence{root: id, result: protocol.QueueRetractResult{QueueRevision: st.revision, Retracted: retracted}}
	return st.fence.result, nil
}

// BeginTerminalTransition implements turns.MessagePort. While draining,
// the stop fence is committed first, so no follow-up turn starts.
func (c *Coordinator) BeginTerminalTransition(sessionID, turnID, runID string) (turns.FollowupBatch, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.sessions[sessionID]
	id := rootID{turnID, runID}
	switch {
	case st == nil || st.reserved == nil || *st.reserved != id:
		return turns.FollowupBatch{}, invariant("transition of turn %s of session %s without its reservation", turnID, sessionID)
	case st.run == nil || !st.run.released:
		return turns.FollowupBatch{}, invariant("transition of turn %s of session %s before its run was released", turnID, sessionID)
	case len(st.inFlight) > 0:
		return turns.FollowupBatch{}, invariant("transition of turn %s of session %s with steering in flight", turnID, sessionID)
	case st.transition != nil:
		return turns.FollowupBatch{}, invariant("session %s already transitions", sessionID)
	case !st.open && st.fence == nil:
		return turns.FollowupBatch{}, invariant("transition of turn %s of session %s with a closed queue", turnID, sessionID)
	}
	if c.draining && st.fence == nil {
		if _, err := c.commitStopFenceLocked(sessionID, id); err != nil {
			return turns.FollowupBatch{}, err
		}
	}
	st.open = false
	if len(st.steering) > 0 {
		st.followups = append(append([]*entry(nil), st.steering...), st.followups...)
		st.steering = nil
		c.mutatedLocked(sessionID, st)
	}
	tr := &transition{id: c.opts.NewID(), batch: append([]*entry(nil), st.followups...)}
	st.transition = tr
	batch := turns.FollowupBatch{ID: tr.id}
	if len(tr.batch) > 0 {
		batch.Sources = make([]turns.SourceMessage, len(tr.batch))
		for i, e := range tr.batch {
			batch.Sources[i] = e.source()
		}
		batch.Content = turns.AggregateContent(batch.Sources)
	}
	return batch, nil
}

// CommitNextRoot implements turns.MessagePort: the batch's messages are
// now the next turn's input; the queue opens for it in a new generation.
func (c *Coordinator) CommitNextRoot(sessionID string, batch turns.FollowupBatch, turnID, runID string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, err := c.transitionLocked(sessionID, batch)
	if err != nil {
		return err
	}
	c.endTransitionLocked(st)
	st.reserved = &rootID{turnID, runID}
	st.open = true
	c.mutatedLocked(sessionID, st)
	return nil
}

// CompleteIdle implements turns.MessagePort: the session's queue goes
// idle (and is reclaimed).
func (c *Coordinator) CompleteIdle(sessionID string, batch turns.FollowupBatch) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, err := c.transitionLocked(sessionID, batch)
	if err != nil {
		return err
	}
	if len(st.transition.batch) > 0 {
		return invariant("session %s goes idle with %d follow-ups", sessionID, len(st.transition.batch))
	}
	c.endTransitionLocked(st)
	st.reserved = nil
	st.open = false
	c.mutatedLocked(sessionID, st)
	c.reclaimLocked(sessionID, st)
	return nil
}

func (c *Coordinator) transitionLocked(sessionID string, batch turns.FollowupBatch) (*queueState, error) {
	st := c.sessions[sessionID]
	if st == nil || st.transition == nil || st.transition.id != batch.ID {
		return nil, invariant("session %s has no transition %s", sessionID, batch.ID)
	}
	return st, nil
}

// endTransitionLocked hands the batch on: its entries are released and the
// generation advances.
func (c *Coordinator) endTransitionLocked(st *queueState) {
	for _, e := range st.transition.batch {
		e.release()
	}
	st.followups, st.steering = nil, nil
	st.transition, st.fence, st.run = nil, nil, nil
	st.generation++
}

// runOwner is the steering owner of one run.
type runOwner struct {
	c          *Coordinator
	sessionID  string
	root       rootID
	generation int64
	released   bool // guarded by c.mu
}

var _ turns.RunSteering = (*runOwner)(nil)

// liveLocked returns the session's queue when o is its live run.
func (o *runOwner) liveLocked() *queueState {
	st := o.c.sessions[o.sessionID]
	if st == nil || st.run != o || o.released {
		return nil
	}
	return st
}

// Pull leases every queued steering message to the run, when the queue is
// open and the run belongs to the current generation.
func (o *runOwner) Pull() []agent.SteeringMessage {
	c := o.c
	c.mu.Lock()
	defer c.mu.Unlock()
	st := o.liveLocked()
	if st == nil || !st.open || o.generation != st.generation || len(st.steering) == 0 {
		return nil
	}
	out := make([]agent.SteeringMessage, 0, len(st.steering))
	for _, e := range st.steering {
		e.leaseID = c.opts.NewID()
		st.inFlight = append(st.inFlight, e)
		out = append(out, agent.SteeringMessage{LeaseID: e.leaseID, MessageID: e.messageID, Content: e.content})
	}
	st.steering = nil
	c.mutatedLocked(o.sessionID, st)
	return out
}

// takeLocked removes the in-flight entries with the given lease ids, in
// lease order.
func takeLocked(st *queueState, leaseIDs []string) []*entry {
	want := make(map[string]bool, len(leaseIDs))
	for _, id := range leaseIDs {
		want[id] = true
	}
	var taken []*entry
	kept := st.inFlight[:0]
	for _, e := range st.inFlight {
		if want[e.leaseID] {
			taken = append(taken, e)
		} else {
			kept = append(kept, e)
		}
	}
	clear(st.inFlight[len(kept):])
	st.inFlight = kept
	return taken
}

// Ack ends the leases of delivered (durably recorded) messages.
func (o *runOwner) Ack(leaseIDs []string) {
	c := o.c
	c.mu.Lock()
	defer c.mu.Unlock()
	st := o.liveLocked()
	if st == nil {
		return
	}
	taken := takeLocked(st, leaseIDs)
	for _, e := range taken {
		e.release()
	}
	if len(taken) > 0 {
		c.mutatedLocked(o.sessionID, st)
	}
}

// Nack returns undelivered messages to the front of the queue, in their
// order, unless a stop fence intervened: they are then discarded.
func (o *runOwner) Nack(leaseIDs []string) {
	c := o.c
	c.mu.Lock()
	defer c.mu.Unlock()
	st := o.liveLocked()
	if st == nil {
		return
	}
	c.nackLocked(o, st, takeLocked(st, leaseIDs))
}

func (c *Coordinator) nackLocked(o *runOwner, st *queueState, taken []*entry) {
	if len(taken) == 0 {
		return
	}
	if st.open && o.generation == st.generation {
		for _, e := range taken {
			e.leaseID = ""
		}
		st.steering = append(taken, st.steering...)
	} else {
		for _, e := range taken {
			e.release()
		}
	}
	c.mutatedLocked(o.sessionID, st)
}

// Release ends the owner after the run's loop ended; a lease the loop
// left open is nacked first.
func (o *runOwner) Release() {
	c := o.c
	c.mu.Lock()
	defer c.mu.Unlock()
	st := o.liveLocked()
	if st == nil {
		return
	}
	if len(st.inFlight) > 0 {
		c.log.Warn("run released with steering in flight", "session", o.sessionID, "run", o.root.runID, "n", len(st.inFlight))
		taken := st.inFlight
		st.inFlight = nil
		c.nackLocked(o, st, taken)
	}
	o.released = true
}
