package messages

import (
	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/turns"
	"github.com/maka-agent/maka/protocol"
)

// entry is one accepted message. It holds a host residency until it is
// acked, retracted, discarded or handed to a successor turn.
type entry struct {
	id        string
	messageID string
	content   protocol.MessageContent
	placement protocol.MessagePlacement
	resid     host.Residency
	leaseID   string // set while in flight
}

func (e *entry) snapshot(state protocol.MessageState) protocol.MessageQueueEntrySnapshot {
	return protocol.MessageQueueEntrySnapshot{
		EntryID: e.id, MessageID: e.messageID, Content: e.content, Placement: e.placement, State: state,
	}
}

// source is the entry as a source of the next turn's admission.
func (e *entry) source() turns.SourceMessage {
	d := turns.SourceFollowup
	if e.placement == protocol.PlacementCurrentTurn {
		d = turns.SourceSteering
	}
	return turns.SourceMessage{MessageID: e.messageID, Content: e.content, Placement: e.placement, Disposition: d}
}

func (e *entry) release() {
	if e.resid != nil {
		e.resid.Release()
		e.resid = nil
	}
}

// rootID names one root turn.
type rootID struct{ turnID, runID string }

// transition is a terminal transition in progress: its batch is the
// follow-up list it snapshotted.
type transition struct {
	id    string
	batch []*entry
}

// stopFence is a committed stop fence and its result.
type stopFence struct {
	root   rootID
	result protocol.QueueRetractResult
}

// queueState is the queue of one session in this epoch. Guarded by
// Coordinator.mu.
type queueState struct {
	revision   int64
	generation int64
	open       bool // phase: messages are admitted
	steering   []*entry
	inFlight   []*entry // leased steering, in lease order
	followups  []*entry
	reserved   *rootID
	run        *runOwner
	transition *transition
	fence      *stopFence
}

// live counts the accepted entries (queued steering, in flight, queued
// follow-ups).
func (st *queueState) live() int { return len(st.steering) + len(st.inFlight) + len(st.followups) }

// idle reports whether st can be reclaimed.
func (st *queueState) idle() bool {
	return st.reserved == nil && st.run == nil && st.transition == nil && st.fence == nil && st.live() == 0
}

// state returns the queue of sessionID, creating it.
func (c *Coordinator) stateLocked(sessionID string) *queueState {
	st := c.sessions[sessionID]
	if st == nil {
		st = &queueState{}
		c.sessions[sessionID] = st
	}
	return st
}

// reclaimLocked drops an idle queue: its revision starts again at 0.
func (c *Coordinator) reclaimLocked(sessionID string, st *queueState) {
	if st.idle() && c.sessions[sessionID] == st {
		delete(c.sessions, sessionID)
	}
}

// mutatedLocked counts one mutation of st and schedules a continuity
// refresh of the session.
func (c *Coordinator) mutatedLocked(sessionID string, st *queueState) {
	st.revision++
	c.scheduleRefreshLocked(sessionID)
}

// retractQueuedLocked removes every queued entry (steering, then
// follow-ups), releases them and returns their retracted snapshots.
func (c *Coordinator) retractQueuedLocked(st *queueState) []protocol.RetractedMessageSnapshot {
	out := make([]protocol.RetractedMessageSnapshot, 0, len(st.steering)+len(st.followups))
	for _, list := range [][]*entry{st.steering, st.followups} {
		for _, e := range list {
			out = append(out, e.snapshot(protocol.MessageRetracted))
			e.release()
		}
	}
	st.steering, st.followups = nil, nil
	return out
}

// Projection is the message queue of sessionID as the session snapshot
// shows it: the steering list holds the in-flight entries first, then the
// queued ones; the follow-up list the queued next_turn entries. An idle
// session's queue is empty at revision 0.
func (c *Coordinator) Projection(sessionID string) protocol.SessionMessageQueueProjection {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := protocol.SessionMessageQueueProjection{
		HostEpoch: c.opts.HostEpoch, Steering: []protocol.MessageQueueEntrySnapshot{}, Followup: []protocol.MessageQueueEntrySnapshot{},
	}
	st := c.sessions[sessionID]
	if st == nil {
		return p
	}
	p.QueueRevision = st.revision
	for _, e := range st.inFlight {
		p.Steering = append(p.Steering, e.snapshot(protocol.MessageInFlight))
	}
	for _, e := range st.steering {
		p.Steering = append(p.Steering, e.snapshot(protocol.MessageQueued))
	}
	// During a terminal transition the follow-ups start with the folded
	// steering, which keeps its placement and so its list.
	for _, e := range st.followups {
		if e.placement == protocol.PlacementCurrentTurn {
			p.Steering = append(p.Steering, e.snapshot(protocol.MessageQueued))
		}
	}
	for _, e := range st.followups {
		if e.placement != protocol.PlacementCurrentTurn {
			p.Followup = append(p.Followup, e.snapshot(protocol.MessageQueued))
		}
	}
	return p
}
