package continuity

import (
	"strings"

	"github.com/maka-agent/maka/protocol"
)

// SnapshotFits reports whether p can be published as a wire snapshot for
// as long as its root turn lives: with the largest projection revision and
// with its root turn at its largest terminal form (a terminal event id, a
// failure class or abort source at their wire bounds). Producers check a
// candidate projection (one more queued message, one more pending
// interaction) with it before they make the candidate canonical, so that
// every later refresh, the terminal publication included, still fits.
func SnapshotFits(p Projection) (bool, error) {
	variants := []*protocol.TurnSnapshot{p.RootTurn}
	if p.RootTurn != nil {
		long := strings.Repeat("x", 128)
		failed, cancelled := *p.RootTurn, *p.RootTurn
		failed.Status, failed.TerminalEventID, failed.FailureClass, failed.AbortSource = protocol.TurnFailed, long, long, ""
		cancelled.Status, cancelled.TerminalEventID, cancelled.FailureClass, cancelled.AbortSource = protocol.TurnCancelled, long, "", long
		variants = append(variants, &failed, &cancelled)
	}
	for _, root := range variants {
		n, err := protocol.EncodedSize(protocol.SessionContinuitySnapshot{
			SchemaVersion: protocol.SessionContinuitySchemaVersion, Session: p.Session,
			ProjectionRevision: protocol.MaxSafeInteger, RootTurn: root, Queue: p.Queue, Interactions: p.Interactions,
		})
		if err != nil || n > protocol.SessionContinuitySnapshotMaxBytes {
			return false, err
		}
	}
	return true, nil
}
