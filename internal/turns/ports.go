package turns

import (
	"context"

	"github.com/maka-agent/maka/internal/agent"
	"github.com/maka-agent/maka/protocol"
)

// Interaction closure reasons a turn gives.
const (
	ClosureTurnStopped  = "turn_stopped"
	ClosureTurnTerminal = "turn_terminal"
)

// InteractionPort is the host's interaction authority as turns use it:
// the approvals and questions of a run are asked through it, and a run's
// pending interactions are closed when the turn stops or ends.
type InteractionPort interface {
	// BindRun returns the interaction owner of a run that starts.
	BindRun(sessionID, turnID, runID string) RunInteractions
	// CloseRun durably closes every pending interaction of runID with
	// reason (ClosureTurnStopped, ClosureTurnTerminal); later requests of
	// the run are refused. The first reason wins; closing again is a
	// no-op. The caller is inside the session's lane.
	CloseRun(ctx context.Context, sessionID, runID, reason string) error
}

// RunInteractions is one run's interaction owner. Its RequestPermission
// blocks until a client answers, the request times out, or the run is
// closed or stopped. If it also implements tools.QuestionAsker, the
// question tool asks through it.
type RunInteractions interface {
	agent.Approver
	// Release is called once, after the run's terminal fact.
	Release()
}

// MessagePort is the host's message-queue authority as root turns use it
// (the per-session queue of turn.message.submit). Every method is called
// inside the session's lane, except RunSteering's methods (from the run's
// agent loop) and BeginDrain.
type MessagePort interface {
	// ReserveRoot reserves the session's queue for the root turn (turnID,
	// runID) before it runs; reserving it again is a no-op.
	ReserveRoot(sessionID, turnID, runID string) error
	// BindRun binds the reserved root's run and returns its steering
	// owner.
	BindRun(sessionID, turnID, runID string) (RunSteering, error)
	// AbandonReservation ends a reservation whose turn will not reach a
	// terminal transition. It fails (and the authority fails stop) while
	// accepted messages would be lost. Abandoning a reservation that does
	// not exist is a no-op.
	AbandonReservation(sessionID, turnID, runID string) error
	// CommitStopFence closes the queue of the reserved root and retracts
	// every queued message; in-flight steering stays with the run. It is
	// idempotent for the same root and returns the first commit's result.
	CommitStopFence(sessionID, turnID, runID string) (protocol.QueueRetractResult, error)
	// BeginTerminalTransition closes the queue of the reserved root after
	// its run was released, folds its unpulled steering ahead of its
	// follow-ups, and returns them as the batch of the next turn (empty:
	// the session goes idle).
	BeginTerminalTransition(sessionID, turnID, runID string) (FollowupBatch, error)
	// CommitNextRoot hands the batch to the durably admitted next root
	// (turnID, runID), which becomes the reserved root.
	CommitNextRoot(sessionID string, batch FollowupBatch, turnID, runID string) error
	// CompleteIdle ends the transition of an empty batch: the session's
	// queue goes idle.
	CompleteIdle(sessionID string, batch FollowupBatch) error
	// BeginDrain refuses new messages; accepted ones stay until the
	// terminal stop fence.
	BeginDrain()
}

// RunSteering is one run's steering owner: the agent loop pulls, acks and
// nacks through it, and Release is called once after the loop ended.
type RunSteering interface {
	agent.Steering
	Release()
}

// noMessages is the MessagePort of a coordinator without a message queue.
type noMessages struct{}

func (noMessages) ReserveRoot(string, string, string) error            { return nil }
func (noMessages) BindRun(string, string, string) (RunSteering, error) { return nil, nil }
func (noMessages) AbandonReservation(string, string, string) error     { return nil }
func (noMessages) BeginTerminalTransition(string, string, string) (FollowupBatch, error) {
	return FollowupBatch{}, nil
}
func (noMessages) CommitStopFence(string, string, string) (protocol.QueueRetractResult, error) {
	return protocol.QueueRetractResult{}, nil
}
func (noMessages) CommitNextRoot(string, FollowupBatch, string, string) error { return nil }
func (noMessages) CompleteIdle(string, FollowupBatch) error                   { return nil }
func (noMessages) BeginDrain()                                                {}
