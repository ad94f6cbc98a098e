package continuity

import (
	"strings"
	"testing"

	"github.com/maka-agent/maka/protocol"
)

// A projection that fits while its root runs but not once the root is
// terminal with the longest failure class is refused: the terminal
// publication must never be the frame that does not fit.
func TestSnapshotFitsAccountsForTheTerminalRoot(t *testing.T) {
	withPadding := func(n int) Projection {
		p := projection("s1")
		var entries []protocol.MessageQueueEntrySnapshot
		for i := 0; n > 0; i++ {
			chunk := min(n, protocol.MessageTextMaxBytes)
			n -= chunk
			entries = append(entries, protocol.MessageQueueEntrySnapshot{
				EntryID: "e" + strings.Repeat("0", 3) + string(rune('a'+i)), MessageID: "m" + string(rune('a'+i)),
				Content: protocol.MessageContent{Text: strings.Repeat("x", chunk)}, Placement: protocol.PlacementNextTurn, State: protocol.MessageQueued,
			})
		}
		p.Queue.Followup = entries
		return p
	}
	size := func(p Projection) int {
		n, err := protocol.EncodedSize(protocol.SessionContinuitySnapshot{SchemaVersion: 1, Session: p.Session,
			ProjectionRevision: protocol.MaxSafeInteger, RootTurn: p.RootTurn, Queue: p.Queue, Interactions: p.Interactions})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// The largest padding whose running snapshot fits exactly.
	pad := protocol.SessionContinuitySnapshotMaxBytes - size(withPadding(0))
	for size(withPadding(pad)) > protocol.SessionContinuitySnapshotMaxBytes {
		pad--
	}
	if fits, err := SnapshotFits(withPadding(pad)); err != nil || fits {
		t.Fatalf("a snapshot that fits only while the root runs: fits=%v err=%v", fits, err)
	}
	if fits, err := SnapshotFits(withPadding(pad - 300)); err != nil || !fits {
		t.Fatalf("a snapshot with room for the terminal root: fits=%v err=%v", fits, err)
	}
}
