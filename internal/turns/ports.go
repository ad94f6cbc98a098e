package turns

import (
	"context"

	"github.com/maka-agent/maka/internal/agent"
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
