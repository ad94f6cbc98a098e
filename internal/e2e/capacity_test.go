package e2e_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/internal/messages"
	"github.com/maka-agent/maka/internal/modeltest"
	"github.com/maka-agent/maka/protocol"
)

// pendingCalls is how many approvals the capacity test's model asks for at
// once, each for a command of about padBytes.
const (
	pendingCalls = 9
	padBytes     = 4000
)

// Capacity check 3 over the socket: pending approvals and the message
// queue share one session snapshot (56 KiB). With nine large approvals
// pending, a follow-up that fits the queue's own bound but not the
// snapshot is refused session_busy "Session projection capacity is full",
// and the queue is left as it was; a smaller one is accepted.
func TestFollowupThatOverflowsTheSessionSnapshotIsRefused(t *testing.T) {
	h := newHost(t, func(req *modeltest.Request) modeltest.Reply {
		if len(req.ToolResultsSinceUser()) > 0 {
			return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "done"}}}
		}
		var chunks []modeltest.Chunk
		for i := range pendingCalls {
			cmd := fmt.Sprintf("touch f%d.txt # %s", i, strings.Repeat("p", padBytes))
			chunks = append(chunks, modeltest.Chunk{Call: &modeltest.Call{
				ID: fmt.Sprintf("call_%d", i), Name: "Bash", Arguments: fmt.Sprintf(`{"command":%q}`, cmd)}})
		}
		return modeltest.Reply{Chunks: chunks}
	})
	c := h.dial()
	const sid = "capacity"
	createSession(t, c, sid, protocol.PermissionModeAsk)
	w := watch(t, c, sid)
	s := startTurn(t, c, sid, "turn-1", "touch nine files")
	w.until(t, "nine pending approvals", func(frames []any) bool { return len(pendingOf(frames)) == pendingCalls })

	small := submit(t, c, sid, "small", strings.Repeat("s", 2000), protocol.PlacementNextTurn)
	if small.Disposition != protocol.DispositionFollowup {
		t.Fatalf("small follow-up: %+v", small)
	}
	_, err := c.SubmitMessage(opCtx(t), protocol.TurnMessageSubmitInput{
		OriginHostEpoch: c.HostEpoch(), SessionID: sid, MessageID: "large",
		Content: protocol.MessageContent{Text: strings.Repeat("l", 20000)}, Placement: protocol.PlacementNextTurn,
	})
	var opErr *client.OperationError
	if !errors.As(err, &opErr) || opErr.Code != protocol.ErrSessionBusy || opErr.Message != messages.MessageSessionFull {
		t.Fatalf("large follow-up: %v, want session_busy %q", err, messages.MessageSessionFull)
	}
	// A fresh subscription's snapshot is the session as it stands now.
	now, err := h.dial().OpenSubscription(opCtx(t), sid)
	if err != nil {
		t.Fatal(err)
	}
	snap := now.Open.Snapshot
	if q := snap.Queue; len(q.Followup) != 1 || q.Followup[0].MessageID != "small" || q.QueueRevision != small.QueueRevision {
		t.Fatalf("queue after the refusal: %+v", q)
	}
	if n := len(snap.Interactions.Pending); n != pendingCalls {
		t.Fatalf("%d approvals pending after the refusal", n)
	}
	if stopped, err := c.StopTurn(opCtx(t), protocol.TurnStopInput{SessionID: sid, TurnID: "turn-1", RunID: s.RunID}); err != nil || stopped.Status != protocol.TurnCancelled {
		t.Fatalf("stop: %+v %v", stopped, err)
	}
}
