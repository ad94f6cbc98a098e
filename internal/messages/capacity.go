package messages

import (
	"context"
	"github.com/maka-agent/maka/internal/continuity"
	"strings"

	"github.com/maka-agent/maka/internal/turns"
	"github.com/maka-agent/maka/protocol"
)

// Every state the queue can reach must still encode within the protocol's
// bounds, in the worst case it can turn into: every steering entry leased
// (in_flight), revisions at their maximum, an interrupt that retracts
// everything and answers a failed turn with maximal identities. A message
// is admitted only if the queue with it passes the checks below, in
// order; a refusal changes nothing.

// queueCut is what the checks read of a session's queue, and the
// fingerprint that detects a change while they ran.
type queueCut struct {
	revision, generation int64
	open                 bool
	reserved             rootID
	steering             []*entry // in flight, then queued
	followups            []*entry
}

func (c *Coordinator) cutLocked(st *queueState) queueCut {
	cut := queueCut{revision: st.revision, generation: st.generation, open: st.open, reserved: *st.reserved}
	cut.steering = append(append(cut.steering, st.inFlight...), st.steering...)
	cut.followups = append(cut.followups, st.followups...)
	return cut
}

// same reports whether st is still at cut.
func (cut queueCut) same(st *queueState) bool {
	return st != nil && st.reserved != nil && *st.reserved == cut.reserved &&
		st.revision == cut.revision && st.generation == cut.generation && st.open == cut.open
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
func (c *Coordinator) worstQueue(steering, followups []*entry) protocol.SessionMessageQueueProjection {
	p := protocol.SessionMessageQueueProjection{
		HostEpoch: c.opts.HostEpoch, QueueRevision: protocol.MaxSafeInteger,
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
// all pass). The session snapshot check reads the session's canonical
// projection; its errors are returned.
func (c *Coordinator) admissionRefusal(ctx context.Context, sessionID string, cut queueCut, candidate *entry) (string, error) {
	// 1. Entry count.
	if len(cut.steering)+len(cut.followups) >= protocol.MessageQueueMaxEntries {
		return MessageQueueFull, nil
	}
	steering, followups := cut.with(candidate)
	// 2. The queue projection.
	queue := c.worstQueue(steering, followups)
	if over, err := encodedOver(queue, protocol.MessageQueueProjectionMaxBytes); over || err != nil {
		return MessageProjectionFull, err
	}
	// 3. The whole session snapshot.
	if c.opts.ReadProjection != nil {
		p, found, err := c.opts.ReadProjection(ctx, sessionID)
		if err != nil {
			return "", err
		}
		if found {
			p.Queue = queue
			if fits, err := continuity.SnapshotFits(p); !fits || err != nil {
				return MessageSessionFull, err
			}
		}
	}
	// 4. The interrupt result.
	if over, err := encodedOver(worstInterrupt(steering, followups), protocol.MessageOperationResultMaxBytes); over || err != nil {
		return MessageInterruptFull, err
	}
	// 5. The follow-up turn every live entry could become.
	sources := make([]turns.SourceMessage, 0, len(steering)+len(followups))
	for _, list := range [][]*entry{steering, followups} {
		for _, e := range list {
			sources = append(sources, e.source())
		}
	}
	if err := turns.CheckSources(sources); err != nil {
		return MessageNoFollowupTurn, nil
	}
	return "", nil
}
