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
	root := p.RootTurn
	if root != nil {
		// The largest form of any root: cancelled, with a terminal event
		// id and an abort source at their bounds. It encodes longer than
		// the running form (two more fields) and than the failed one
		// ("cancelled" and "abortSource" together are two bytes longer
		// than "failed" and "failureClass").
		long := strings.Repeat("x", 128)
		largest := *root
		largest.Status, largest.TerminalEventID, largest.FailureClass, largest.AbortSource = protocol.TurnCancelled, long, "", long
		root = &largest
	}
	n, err := protocol.EncodedSize(protocol.SessionContinuitySnapshot{
		SchemaVersion: protocol.SessionContinuitySchemaVersion, Session: p.Session,
		ProjectionRevision: protocol.MaxSafeInteger, RootTurn: root, Queue: p.Queue, Interactions: p.Interactions,
	})
	return err == nil && n <= protocol.SessionContinuitySnapshotMaxBytes, err
}
