package cli_test

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/internal/failpoint"
	"github.com/maka-agent/maka/internal/modeltest"
	"github.com/maka-agent/maka/protocol"
)

// TestCrashMatrix kills the real host (SIGKILL, through a failpoint) at
// each durable step of a turn and checks the recovery invariants after a
// restart: the turn is terminal (failed / app_restarted unless its
// terminal fact was durable), a tool call cut short keeps an unknown
// outcome and is not retried, a finished one keeps its result, the
// session is idle with an empty queue and no pending interaction, the next
// turn works, and a second restart changes nothing.
func TestCrashMatrix(t *testing.T) {
	cases := []struct {
		point      string
		status     protocol.TurnStatus
		toolStatus string // transcript status of the Bash call ("" = no call recorded)
		ran        bool   // the command's file exists
	}{
		{failpoint.TurnAdmitted, protocol.TurnFailed, "", false},
		{failpoint.TurnStreaming, protocol.TurnFailed, "", false},
		{failpoint.ToolStarted, protocol.TurnFailed, protocol.TranscriptToolUnknown, false},
		{failpoint.ToolFinished, protocol.TurnFailed, protocol.TranscriptToolCompleted, true},
		{failpoint.TurnTerminal, protocol.TurnCompleted, protocol.TranscriptToolCompleted, true},
		{failpoint.MessageAccepted, protocol.TurnFailed, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.point, func(t *testing.T) {
			release := make(chan struct{})
			var once sync.Once
			t.Cleanup(func() { once.Do(func() { close(release) }) })
			srv := modeltest.New(t, func(req *modeltest.Request) modeltest.Reply {
				switch {
				case req.LastUser() == "next":
					return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "next done"}}}
				case len(req.ToolResultsSinceUser()) > 0:
					return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "finished"}}}
				case tc.point == failpoint.MessageAccepted:
					return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "starting "}, {Wait: release}}}
				}
				return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "starting "},
					{Call: &modeltest.Call{ID: "call_1", Name: "Bash", Arguments: `{"command":"echo ran > out.txt"}`}}}}
			})
			root, _ := newRoot(t)
			ws := t.TempDir()
			armed := newSandbox(t, failpoint.Env+"="+tc.point)
			p := armed.serve(root, "--idle-grace", "0")
			conn, _, _ := connect(t, root)
			epoch := conn.HostEpoch()
			configureFakeModel(t, conn, srv.BaseURL())
			if _, err := conn.Call(turnCtx(t), protocol.OpSessionCreate, protocol.SessionCreateInput{
				SessionID: "s", Workspace: protocol.HostPathWorkspace(ws), PermissionMode: protocol.PermissionModeBypass,
			}); err != nil {
				t.Fatal(err)
			}
			sub, err := conn.OpenSubscription(turnCtx(t), "s")
			if err != nil {
				t.Fatal(err)
			}
			_, startErr := conn.StartTurn(turnCtx(t), protocol.TurnStartInput{SessionID: "s", TurnID: "turn-1", Content: protocol.MessageContent{Text: "work"}})
			if tc.point == failpoint.MessageAccepted {
				if startErr != nil {
					t.Fatalf("turn.start: %v", startErr)
				}
				nextUntil(t, sub, "a streamed delta", isDelta)
				_, err := conn.SubmitMessage(turnCtx(t), protocol.TurnMessageSubmitInput{OriginHostEpoch: epoch, SessionID: "s",
					MessageID: "m-later", Content: protocol.MessageContent{Text: "later"}, Placement: protocol.PlacementNextTurn})
				if err == nil {
					t.Fatal("the submit was answered although the host died before its receipt")
				}
			}
			if code := p.waitExit(); code != -1 { // -1: ended by a signal
				t.Fatalf("the host was not killed at %s (exit code %d); stderr:\n%s", tc.point, code, p.stderrText())
			}
			conn.Close()
			once.Do(func() { close(release) })

			check := func(c *client.Conn) protocol.TurnSnapshot {
				t.Helper()
				got, err := c.QueryTurn(turnCtx(t), protocol.TurnQueryInput{SessionID: "s", TurnID: "turn-1"})
				if err != nil {
					t.Fatalf("turn.query after restart: %v", err)
				}
				if got.Status != tc.status || (tc.status == protocol.TurnFailed && got.FailureClass != "app_restarted") {
					t.Fatalf("turn after restart: %+v, want %s", got, tc.status)
				}
				msgs := transcriptOf(t, c, "s")
				var toolStatus string
				for _, m := range msgs {
					if m.Role == protocol.TranscriptRoleTool {
						toolStatus = m.Status
					}
				}
				if toolStatus != tc.toolStatus {
					t.Fatalf("tool call status %q, want %q; transcript %+v", toolStatus, tc.toolStatus, msgs)
				}
				if users := roleTexts(msgs, protocol.TranscriptRoleUser); len(users) == 0 || users[0] != "work" {
					t.Fatalf("user messages %q", users)
				}
				sub, err := c.OpenSubscription(turnCtx(t), "s")
				if err != nil {
					t.Fatal(err)
				}
				snap := sub.Open.Snapshot
				if snap.ProjectionRevision != 1 || snap.Queue.QueueRevision != 0 || len(snap.Queue.Steering)+len(snap.Queue.Followup) != 0 ||
					len(snap.Interactions.Pending) != 0 || snap.RootTurn == nil || !snap.RootTurn.Status.Terminal() {
					t.Fatalf("snapshot after restart: %+v", snap)
				}
				_ = sub.Close(turnCtx(t))
				return got
			}

			s := newSandbox(t)
			p2 := s.serve(root, "--idle-grace", "0")
			c2, _, _ := connect(t, root)
			first := check(c2)
			_, statErr := os.Stat(filepath.Join(ws, "out.txt"))
			if (statErr == nil) != tc.ran {
				t.Fatalf("command ran = %v, want %v", statErr == nil, tc.ran)
			}
			if tc.point == failpoint.MessageAccepted {
				_, err := c2.SubmitMessage(turnCtx(t), protocol.TurnMessageSubmitInput{OriginHostEpoch: epoch, SessionID: "s",
					MessageID: "m-later", Content: protocol.MessageContent{Text: "later"}, Placement: protocol.PlacementNextTurn})
				if !client.IsCode(err, protocol.ErrOutcomeUnknown) {
					t.Fatalf("old-epoch retry of the lost submit: %v", err)
				}
			}
			// The next turn works.
			sub2, err := c2.OpenSubscription(turnCtx(t), "s")
			if err != nil {
				t.Fatal(err)
			}
			startTextTurn(t, c2, "s", "turn-2", "next")
			if text := nextUntil(t, sub2, "the end of turn-2", endsTurn("turn-2")); text != "next done" {
				t.Fatalf("turn-2 streamed %q", text)
			}
			c2.Close()

			// Recovery happened once: a graceful restart changes nothing.
			p2.kill()
			if !p2.hasExited() {
				t.Fatal("the second host did not stop")
			}
			s.serve(root, "--idle-grace", "0")
			c3, _, _ := connect(t, root)
			again, err := c3.QueryTurn(turnCtx(t), protocol.TurnQueryInput{SessionID: "s", TurnID: "turn-1"})
			if err != nil || again != first {
				t.Fatalf("turn-1 after a second restart: %+v %v, want %+v", again, err, first)
			}
		})
	}
}
