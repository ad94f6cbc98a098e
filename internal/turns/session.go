package turns

import (
	"context"
	"errors"
	"fmt"

	"github.com/maka-agent/maka/internal/continuity"
	"github.com/maka-agent/maka/internal/lane"
	"github.com/maka-agent/maka/protocol"
)

// This file is the session owner (docs/architecture.md, "The session
// owner"): one session value per live session holds everything this host
// epoch knows of it that is not durable — its active root turn, its message
// queue (queue.go) with the stop fence, and its background refresh. The
// session's lane serialises its state changes, each one a method of the
// Owner:
//
//	start        handleStart, StartFromMessage → launch
//	steer, follow-up  Submit (enqueue)
//	retract      Retract
//	stop         handleStop, ClaimInterrupt, Close → stopRoot
//	terminal     finishTransition → transition
//	successor    transition → admitSuccessor → launch
//	recovery     Recover → launch
//
// Owner.mu guards the map and every session's fields, because the
// running loop (steering pulls, acks and nacks) and projection readers
// read them outside the lane. A session without a root and without
// accepted messages is dropped; its queue revision then starts again at 0.

// session is one live session.
type session struct {
	id    string
	root  *activeRoot // nil: no active root turn
	queue queue
	// compacting is set while session.compact summarises the session
	// outside its lane: no root turn starts meanwhile.
	compacting bool
	// refreshing is set while a background refresh runs; dirty asks it
	// to refresh once more. A session dropped meanwhile keeps its
	// goroutine until it ends.
	refreshing, dirty bool
}

// idle reports whether s can be dropped.
func (s *session) idle() bool {
	return s.root == nil && s.queue.live() == 0 && s.queue.batch == nil && !s.compacting
}

// beginCompacting marks an idle session compacting (false: it has a root
// turn or is compacting already). The caller is inside the session's lane.
func (c *Owner) beginCompacting(sessionID string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sessionLocked(sessionID)
	if s.root != nil || s.compacting {
		return false
	}
	s.compacting = true
	return true
}

// compacting reports whether session.compact is summarising sessionID.
func (c *Owner) compacting(sessionID string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sessions[sessionID]
	return s != nil && s.compacting
}

// endCompacting ends what beginCompacting began.
func (c *Owner) endCompacting(sessionID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.sessions[sessionID]; s != nil {
		s.compacting = false
		c.reclaimLocked(s)
	}
}

// sessionLocked returns the live session id, creating it.
func (c *Owner) sessionLocked(id string) *session {
	s := c.sessions[id]
	if s == nil {
		s = &session{id: id}
		c.sessions[id] = s
	}
	return s
}

// reclaimLocked drops s when it is idle.
func (c *Owner) reclaimLocked(s *session) {
	if s.idle() && c.sessions[s.id] == s {
		delete(c.sessions, s.id)
	}
}

// mutatedLocked counts one change of s's queue and schedules a
// continuity refresh of the session.
func (c *Owner) mutatedLocked(s *session) {
	s.queue.revision++
	if c.closed {
		return
	}
	if s.refreshing {
		s.dirty = true
		return
	}
	s.refreshing = true
	c.refreshes.Add(1)
	go c.runRefresh(s)
}

// runRefresh republishes s until no change is pending or the coordinator
// closes: at most one such goroutine runs per session.
func (c *Owner) runRefresh(s *session) {
	defer c.refreshes.Done()
	for {
		err := c.cont.Refresh(c.baseCtx, s.id)
		if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, lane.ErrClosed) && !errors.Is(err, continuity.ErrClosed) {
			c.log.Warn("queue refresh failed", "session", s.id, "err", err)
		}
		c.mu.Lock()
		if s.dirty && !c.closed {
			s.dirty = false
			c.mu.Unlock()
			continue
		}
		s.refreshing, s.dirty = false, false
		c.mu.Unlock()
		return
	}
}

// QueueProjection is the message queue of sessionID as the session
// snapshot shows it; an idle session's queue is empty at revision 0.
func (c *Owner) QueueProjection(sessionID string) protocol.SessionMessageQueueProjection {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.sessions[sessionID]; s != nil {
		return s.queue.projection(c.opts.HostEpoch)
	}
	var q queue
	return q.projection(c.opts.HostEpoch)
}

// Draining reports whether the host began to shut down: no new turn and
// no new message is admitted.
func (c *Owner) Draining() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.draining
}

// Failed reports whether the session owner failed stop: a root turn kept
// accepted messages it could not hand on. Every later message operation
// is refused and the host drains.
func (c *Owner) Failed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failed
}

// Submitted is what a submission became: a new root turn (TurnID), or an
// entry of the active root's queue (QueueRevision), or a refusal with its
// wire message (session_busy).
type Submitted struct {
	Disposition   string
	TurnID        string
	QueueRevision int64
	Refusal       string
}

// Submit is the steer and follow-up state change of a message submitted to
// a session that exists and is not archived (turn.message.submit after its
// receipt checks). In an idle session the
// message starts a root turn (StartFromMessage); with an active root it
// is queued, steering for current_turn and a follow-up for next_turn,
// when the queue is open and the queue with it passes the capacity
// checks. The caller is inside the session's lane. Errors: ErrDraining,
// and store errors.
func (c *Owner) Submit(ctx context.Context, in MessageStart) (Submitted, error) {
	c.mu.Lock()
	s := c.sessions[in.SessionID]
	active := s != nil && s.root != nil
	c.mu.Unlock()
	if !active {
		turnID, err := c.StartFromMessage(ctx, in)
		if err != nil {
			return Submitted{}, err
		}
		return Submitted{Disposition: protocol.DispositionTurnStarted, TurnID: turnID}, nil
	}
	c.mu.Lock()
	if !s.queue.open || s.root == nil {
		c.mu.Unlock()
		return Submitted{Refusal: MessageAdmissionClosed}, nil
	}
	cut := s.cut()
	c.mu.Unlock()
	e := &entry{id: c.opts.NewID(), messageID: in.MessageID, content: in.Content, placement: in.Placement}
	var p *continuity.Projection
	proj, found, err := c.ReadProjection(ctx, in.SessionID)
	if err != nil {
		return Submitted{}, err
	}
	if found {
		p = &proj
	}
	refusal, err := admissionRefusal(c.opts.HostEpoch, p, cut, e)
	switch {
	case err != nil:
		return Submitted{}, err
	case refusal != "":
		return Submitted{Refusal: refusal}, nil
	}
	out := Submitted{Disposition: protocol.DispositionFollowup}
	if in.Placement == protocol.PlacementCurrentTurn {
		out.Disposition = protocol.DispositionSteering
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s = c.sessions[in.SessionID]
	switch {
	case c.failed:
		return Submitted{}, errFailed
	case !cut.same(s):
		return Submitted{Refusal: MessageQueueChanged}, nil
	}
	if c.opts.Residency != nil {
		e.resid = c.opts.Residency()
	}
	if out.Disposition == protocol.DispositionSteering {
		s.queue.steering = append(s.queue.steering, e)
	} else {
		s.queue.followups = append(s.queue.followups, e)
	}
	c.mutatedLocked(s)
	out.QueueRevision = s.queue.revision
	return out, nil
}

// errFailed refuses a change after the owner failed stop.
var errFailed = errors.New("turns: the session owner failed stop")

// ErrFailed reports errFailed to the message operations.
func ErrFailed(err error) bool { return errors.Is(err, errFailed) }

// Retract is the retract state change: every queued message of sessionID
// (steering and follow-ups, not the ones in flight, none while a terminal
// transition owns them) is retracted, unless the result would exceed the
// protocol's bound (refused). The caller is inside the session's lane.
func (c *Owner) Retract(sessionID string) (r protocol.QueueRetractResult, refused bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r = protocol.QueueRetractResult{Retracted: []protocol.RetractedMessageSnapshot{}}
	s := c.sessions[sessionID]
	if s == nil {
		return r, false, nil
	}
	q := &s.queue
	r.QueueRevision = q.revision
	if q.batch != nil || len(q.steering)+len(q.followups) == 0 {
		return r, false, nil
	}
	preview := r
	preview.QueueRevision++
	for _, list := range [][]*entry{q.steering, q.followups} {
		for _, e := range list {
			preview.Retracted = append(preview.Retracted, e.snapshot(protocol.MessageRetracted))
		}
	}
	if over, err := encodedOver(preview, protocol.MessageOperationResultMaxBytes); over || err != nil {
		return r, true, err
	}
	r.Retracted = q.retractQueued()
	c.mutatedLocked(s)
	r.QueueRevision = q.revision
	c.reclaimLocked(s)
	return r, false, nil
}

// stopFenceLocked commits the stop fence of s's active root (turn.stop,
// turn.interrupt, shutdown, and a terminal transition while draining):
// the queue closes, every queued message is retracted, in-flight steering
// stays with the run, and the generation advances so that a late nack
// discards instead of re-queuing. It is idempotent and returns the first
// commit's result.
func (c *Owner) stopFenceLocked(s *session) (protocol.QueueRetractResult, error) {
	q := &s.queue
	switch {
	case q.fence != nil:
		return *q.fence, nil
	case q.batch != nil:
		return protocol.QueueRetractResult{}, fmt.Errorf("turns: stop fence of session %s during its terminal transition", s.id)
	}
	q.open = false
	retracted := q.retractQueued()
	q.generation++
	c.mutatedLocked(s)
	q.fence = &protocol.QueueRetractResult{QueueRevision: q.revision, Retracted: retracted}
	return *q.fence, nil
}
