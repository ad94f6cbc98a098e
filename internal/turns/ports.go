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

// RunInteractions is one run's interaction owner. Its RequestPermission
// blocks until a client answers, the request times out, or the run is
// closed or stopped. If it also implements tools.QuestionAsker, the
// question tool asks through it.
type RunInteractions interface {
	agent.Approver
	// Close durably closes every pending interaction of the run with
	// reason (ClosureTurnStopped, ClosureTurnTerminal); later requests of
	// the run are refused. The first reason wins; closing again is a
	// no-op. The caller is inside the session's lane.
	Close(ctx context.Context, reason string) error
	// Release is called once, after the run's terminal fact.
	Release()
}
