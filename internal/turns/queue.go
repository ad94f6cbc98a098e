package turns

import (
	"strings"

	"github.com/maka-agent/maka/internal/agent"
	"github.com/maka-agent/maka/internal/continuity"
	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/protocol"
)

// This file is the message queue of one live session (turn.message.submit,
// queue.retract, turn.interrupt; see docs/architecture.md, "The session
// owner"): the steering the running root turn pulls, the follow-ups that
// become the next root turn, and the stop fence. The queue is a part of
// the session owner (session.go): it has no map and no lock of its own;
// Owner.mu guards it and every change goes through a method of the
// owner, inside the session's lane, except the running loop's pulls, acks
// and nacks (steering, below).

// Wire messages of a refused queue admission.
const (
	MessageAdmissionClosed = "Message admission is closed for the active generation"
	MessageQueueFull       = "Message queue capacity is full"
	MessageProjectionFull  = "Message queue projection capacity is full"
	MessageSessionFull     = "Session projection capacity is full"
	MessageInterruptFull   = "Message queue interrupt result capacity is full"
	MessageNoFollowupTurn  = "Message queue cannot form a durable follow-up Turn"
	MessageQueueChanged    = "Message queue changed during admission"
	MessageRetractTooLarge = "Retract result exceeds protocol capacity"
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
func (e *entry) source() SourceMessage {
	d := SourceFollowup
	if e.placement == protocol.PlacementCurrentTurn {
		d = SourceSteering
	}
	return SourceMessage{MessageID: e.messageID, Content: e.content, Placement: e.placement, Disposition: d}
}

func (e *entry) release() {
	if e.resid != nil {
		e.resid.Release()
		e.resid = nil
	}
}

// queue is the message queue of one session in this epoch.
type queue struct {
	revision   int64
	generation int64
	open       bool // messages are admitted for the active root
	steering   []*entry
	inFlight   []*entry // leased steering, in lease order
	followups  []*entry
	// fence is the committed stop fence of the active root and its
	// result (nil: none).
	fence *protocol.QueueRetractResult
	// batch is set during a terminal transition: the follow-ups it
	// snapshotted for the next turn.
	batch []*entry
}

// live counts the accepted entries (queued steering, in flight, queued
// follow-ups).
func (q *queue) live() int { return len(q.steering) + len(q.inFlight) + len(q.followups) }

// retractQueued removes every queued entry (steering, then follow-ups),
// releases them and returns their retracted snapshots.
func (q *queue) retractQueued() []protocol.RetractedMessageSnapshot {
	out := make([]protocol.RetractedMessageSnapshot, 0, len(q.steering)+len(q.followups))
	for _, list := range [][]*entry{q.steering, q.followups} {
		for _, e := range list {
			out = append(out, e.snapshot(protocol.MessageRetracted))
			e.release()
		}
	}
	q.steering, q.followups = nil, nil
	return out
}

// foldSteering closes the queue for a terminal transition: unpulled
// steering goes ahead of the follow-ups, and they become the batch.
// changed reports whether steering was folded.
func (q *queue) foldSteering() (changed bool) {
	q.open = false
	if len(q.steering) > 0 {
		q.followups = append(append([]*entry(nil), q.steering...), q.followups...)
		q.steering = nil
		changed = true
	}
	q.batch = append([]*entry{}, q.followups...)
	return changed
}

// handOn ends a terminal transition: the batch's entries are released
// (they are now the next turn's input, or there were none) and the
// generation advances.
func (q *queue) handOn() {
	for _, e := range q.batch {
		e.release()
	}
	q.followups, q.steering, q.batch, q.fence = nil, nil, nil, nil
	q.generation++
}

// projection is the queue as the session snapshot shows it: the steering
// list holds the in-flight entries first, then the queued ones; the
// follow-up list the queued next_turn entries.
func (q *queue) projection(hostEpoch string) protocol.SessionMessageQueueProjection {
	p := protocol.SessionMessageQueueProjection{
		HostEpoch: hostEpoch, QueueRevision: q.revision,
		Steering: []protocol.MessageQueueEntrySnapshot{}, Followup: []protocol.MessageQueueEntrySnapshot{},
	}
	for _, e := range q.inFlight {
		p.Steering = append(p.Steering, e.snapshot(protocol.MessageInFlight))
	}
	for _, e := range q.steering {
		p.Steering = append(p.Steering, e.snapshot(protocol.MessageQueued))
	}
	// During a terminal transition the follow-ups start with the folded
	// steering, which keeps its placement and so its list.
	for _, e := range q.followups {
		if e.placement == protocol.PlacementCurrentTurn {
			p.Steering = append(p.Steering, e.snapshot(protocol.MessageQueued))
		}
	}
	for _, e := range q.followups {
		if e.placement != protocol.PlacementCurrentTurn {
			p.Followup = append(p.Followup, e.snapshot(protocol.MessageQueued))
		}
	}
	return p
}

// Every state the queue can reach must still encode within the protocol's
// bounds, in the worst case it can turn into: every steering entry leased
// (in_flight), revisions at their maximum, an interrupt that retracts
// everything and answers a failed turn with maximal identities. A message
// is admitted only if the queue with it passes the checks below, in
// order; a refusal changes nothing.

// queueCut is what the checks read of a session's queue, and the
// fingerprint that detects a change while they ran.
type queueCut struct {
	root                 *activeRoot
	revision, generation int64
	open                 bool
	steering             []*entry // in flight, then queued
	followups            []*entry
}

func (s *session) cut() queueCut {
	q := &s.queue
	cut := queueCut{root: s.root, revision: q.revision, generation: q.generation, open: q.open}
	cut.steering = append(append(cut.steering, q.inFlight...), q.steering...)
	cut.followups = append(cut.followups, q.followups...)
	return cut
}

// same reports whether s is still at cut.
func (cut queueCut) same(s *session) bool {
	return s != nil && s.root == cut.root && s.queue.revision == cut.revision &&
		s.queue.generation == cut.generation && s.queue.open == cut.open
}

// with returns the cut's lists with the candidate appended to its own.
func (cut queueCut) with(e *entry) (steering, followups []*entry) {
	steering, followups = cut.steering, cut.followups
	if e.placement == protocol.PlacementCurrentTurn {
		steering = append(append([]*entry(nil), steering...), e)
	} else {
		followups = append(append([]*entry(nil), followups...), e)
	}
	return steering, followups
}

// worstQueue is the candidate projection with every steering entry in
// flight and the maximal revision.
func worstQueue(hostEpoch string, steering, followups []*entry) protocol.SessionMessageQueueProjection {
	p := protocol.SessionMessageQueueProjection{
		HostEpoch: hostEpoch, QueueRevision: protocol.MaxSafeInteger,
		Steering: make([]protocol.MessageQueueEntrySnapshot, 0, len(steering)),
		Followup: make([]protocol.MessageQueueEntrySnapshot, 0, len(followups)),
	}
	for _, e := range steering {
		p.Steering = append(p.Steering, e.snapshot(protocol.MessageInFlight))
	}
	for _, e := range followups {
		p.Followup = append(p.Followup, e.snapshot(protocol.MessageQueued))
	}
	return p
}

// worstInterrupt is the largest interrupt result the candidate queue can
// produce: everything retracted, a failed turn with maximal identities and
// a failure class of 128 NULs (each escaped to six bytes).
func worstInterrupt(steering, followups []*entry) protocol.TurnInterruptResult {
	id := strings.Repeat("x", 128)
	r := protocol.TurnInterruptResult{
		QueueRevision: protocol.MaxSafeInteger,
		Retracted:     make([]protocol.RetractedMessageSnapshot, 0, len(steering)+len(followups)),
		Turn: protocol.TurnSnapshot{SessionID: id, TurnID: id, RunID: id, Status: protocol.TurnFailed,
			TerminalEventID: id, FailureClass: strings.Repeat("\x00", 128)},
	}
	for _, list := range [][]*entry{steering, followups} {
		for _, e := range list {
			r.Retracted = append(r.Retracted, e.snapshot(protocol.MessageRetracted))
		}
	}
	return r
}

func encodedOver(v any, limit int) (bool, error) {
	n, err := protocol.EncodedSize(v)
	return n > limit, err
}

// admissionRefusal runs the capacity checks of candidate against cut, in
// order, and returns the wire message of the first that fails ("" when
// all pass). p is the session's canonical projection (nil: the session
// snapshot is not checked).
func admissionRefusal(hostEpoch string, p *continuity.Projection, cut queueCut, candidate *entry) (string, error) {
	// 1. Entry count.
	if len(cut.steering)+len(cut.followups) >= protocol.MessageQueueMaxEntries {
		return MessageQueueFull, nil
	}
	steering, followups := cut.with(candidate)
	// 2. The queue projection.
	q := worstQueue(hostEpoch, steering, followups)
	if over, err := encodedOver(q, protocol.MessageQueueProjectionMaxBytes); over || err != nil {
		return MessageProjectionFull, err
	}
	// 3. The whole session snapshot.
	if p != nil {
		p.Queue = q
		if fits, err := continuity.SnapshotFits(*p); !fits || err != nil {
			return MessageSessionFull, err
		}
	}
	// 4. The interrupt result.
	if over, err := encodedOver(worstInterrupt(steering, followups), protocol.MessageOperationResultMaxBytes); over || err != nil {
		return MessageInterruptFull, err
	}
	// 5. The follow-up turn every live entry could become.
	sources := make([]SourceMessage, 0, len(steering)+len(followups))
	for _, list := range [][]*entry{steering, followups} {
		for _, e := range list {
			sources = append(sources, e.source())
		}
	}
	if err := CheckSources(sources); err != nil {
		return MessageNoFollowupTurn, nil
	}
	return "", nil
}

// steering is the steering owner of one run: the agent loop pulls, acks
// and nacks through it, and release is called once after the loop ended.
type steering struct {
	c          *Owner
	s          *session
	root       *activeRoot
	generation int64
	released   bool // guarded by c.mu
}

var _ agent.Steering = (*steering)(nil)

// liveLocked returns the session's queue when o's run is still the
// session's active root and not released.
func (o *steering) liveLocked() *queue {
	if o.released || o.s.root != o.root {
		return nil
	}
	return &o.s.queue
}

// Pull leases every queued steering message to the run, when the queue is
// open and the run belongs to the current generation.
func (o *steering) Pull() []agent.SteeringMessage {
	c := o.c
	c.mu.Lock()
	defer c.mu.Unlock()
	q := o.liveLocked()
	if q == nil || !q.open || o.generation != q.generation || len(q.steering) == 0 {
		return nil
	}
	out := make([]agent.SteeringMessage, 0, len(q.steering))
	for _, e := range q.steering {
		e.leaseID = c.opts.NewID()
		q.inFlight = append(q.inFlight, e)
		out = append(out, agent.SteeringMessage{LeaseID: e.leaseID, MessageID: e.messageID, Content: e.content})
	}
	q.steering = nil
	c.mutatedLocked(o.s)
	return out
}

// take removes the in-flight entries with the given lease ids, in lease
// order.
func (q *queue) take(leaseIDs []string) []*entry {
	want := make(map[string]bool, len(leaseIDs))
	for _, id := range leaseIDs {
		want[id] = true
	}
	var taken []*entry
	kept := q.inFlight[:0]
	for _, e := range q.inFlight {
		if want[e.leaseID] {
			taken = append(taken, e)
		} else {
			kept = append(kept, e)
		}
	}
	clear(q.inFlight[len(kept):])
	q.inFlight = kept
	return taken
}

// Ack ends the leases of delivered (durably recorded) messages.
func (o *steering) Ack(leaseIDs []string) {
	c := o.c
	c.mu.Lock()
	defer c.mu.Unlock()
	q := o.liveLocked()
	if q == nil {
		return
	}
	taken := q.take(leaseIDs)
	for _, e := range taken {
		e.release()
	}
	if len(taken) > 0 {
		c.mutatedLocked(o.s)
	}
}

// Nack returns undelivered messages to the front of the queue, in their
// order, unless a stop fence intervened: they are then discarded.
func (o *steering) Nack(leaseIDs []string) {
	c := o.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if q := o.liveLocked(); q != nil {
		o.nackLocked(q, q.take(leaseIDs))
	}
}

func (o *steering) nackLocked(q *queue, taken []*entry) {
	if len(taken) == 0 {
		return
	}
	if q.open && o.generation == q.generation {
		for _, e := range taken {
			e.leaseID = ""
		}
		q.steering = append(taken, q.steering...)
	} else {
		for _, e := range taken {
			e.release()
		}
	}
	o.c.mutatedLocked(o.s)
}

// release ends the owner after the run's loop ended; a lease the loop
// left open is nacked first. Releasing again is a no-op.
func (o *steering) release() {
	c := o.c
	c.mu.Lock()
	defer c.mu.Unlock()
	q := o.liveLocked()
	if q == nil {
		o.released = true
		return
	}
	if len(q.inFlight) > 0 {
		c.log.Warn("run released with steering in flight", "session", o.s.id, "run", o.root.runID, "n", len(q.inFlight))
		taken := q.inFlight
		q.inFlight = nil
		o.nackLocked(q, taken)
	}
	o.released = true
}
