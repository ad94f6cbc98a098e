package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/internal/modeltest"
	"github.com/maka-agent/maka/protocol"
)

// turnTimeout bounds each wait of the turn tests; it never orders events.
const turnTimeout = 20 * time.Second

func turnCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), turnTimeout)
	t.Cleanup(cancel)
	return ctx
}

// configureFakeModel makes the openai-compatible server at baseURL the
// host's default model target.
func configureFakeModel(t *testing.T, c *client.Conn, baseURL string) {
	t.Helper()
	if err := modeltest.Configure(turnCtx(t), c, baseURL, "sk-crash-test"); err != nil {
		t.Fatal(err)
	}
}

func createTurnSession(t *testing.T, c *client.Conn, sessionID string) {
	t.Helper()
	_, err := c.Call(turnCtx(t), protocol.OpSessionCreate, protocol.SessionCreateInput{
		SessionID: sessionID, Workspace: protocol.HostPathWorkspace(t.TempDir()), PermissionMode: protocol.PermissionModeBypass,
	})
	if err != nil {
		t.Fatalf("session create: %v", err)
	}
}

func startTextTurn(t *testing.T, c *client.Conn, sessionID, turnID, text string) protocol.TurnSnapshot {
	t.Helper()
	snap, err := c.StartTurn(turnCtx(t), protocol.TurnStartInput{SessionID: sessionID, TurnID: turnID, Content: protocol.MessageContent{Text: text}})
	if err != nil {
		t.Fatalf("turn.start %s: %v", turnID, err)
	}
	return snap
}

// nextUntil reads frames of sub until cond accepts one, and returns the
// text of the deltas read on the way.
func nextUntil(t *testing.T, sub *client.Subscription, what string, cond func(frame any) bool) string {
	t.Helper()
	ctx := turnCtx(t)
	var text strings.Builder
	for {
		f, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if d, ok := f.(protocol.DeltaFrame); ok {
			text.WriteString(d.Delta.Text)
		}
		if cond(f) {
			return text.String()
		}
	}
}

// isDelta accepts a text delta.
func isDelta(f any) bool { _, ok := f.(protocol.DeltaFrame); return ok }

// endsTurn accepts the terminal projection of turnID.
func endsTurn(turnID string) func(any) bool {
	return func(f any) bool {
		p, ok := f.(protocol.ProjectionFrame)
		return ok && p.Snapshot.RootTurn != nil && p.Snapshot.RootTurn.TurnID == turnID && p.Snapshot.RootTurn.Status.Terminal()
	}
}

func transcriptOf(t *testing.T, c *client.Conn, sessionID string) []protocol.TranscriptMessage {
	t.Helper()
	res, err := c.Call(turnCtx(t), protocol.OpSessionTranscriptPage, protocol.SessionTranscriptPageInput{SessionID: sessionID})
	if err != nil {
		t.Fatalf("transcript: %v", err)
	}
	page := res.(protocol.SessionTranscriptPage)
	if page.NextCursor != nil {
		t.Fatalf("transcript of %s has more than one page", sessionID)
	}
	return page.Messages
}

func roleTexts(msgs []protocol.TranscriptMessage, role protocol.TranscriptRole) []string {
	var out []string
	for _, m := range msgs {
		if m.Role == role {
			out = append(out, m.Text)
		}
	}
	return out
}

// TestTurnKilledMidStreamIsRecovered SIGKILLs the host while a turn's model
// stream is held, restarts it on the same root, and checks that the turn
// ended failed / app_restarted with its user message kept, and that the
// session's next turn runs with that message in its history.
func TestTurnKilledMidStreamIsRecovered(t *testing.T) {
	const (
		firstPrompt  = "remember the number 42"
		secondPrompt = "what was the number?"
	)
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	srv := modeltest.New(t, func(req *modeltest.Request) modeltest.Reply {
		if req.LastUser() == firstPrompt {
			return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "let me think "}, {Wait: hold}, {Text: "never sent"}}}
		}
		return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "it was 42"}}}
	})
	s := newSandbox(t)
	root, _ := newRoot(t)
	p := s.serve(root, "--idle-grace", "0")
	conn, _, _ := connect(t, root)
	configureFakeModel(t, conn, srv.BaseURL())
	createTurnSession(t, conn, "crash")
	sub, err := conn.OpenSubscription(turnCtx(t), "crash")
	if err != nil {
		t.Fatal(err)
	}
	first := startTextTurn(t, conn, "crash", "turn-1", firstPrompt)
	nextUntil(t, sub, "a streamed delta", isDelta)

	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.waitExit()
	conn.Close()

	s.serve(root, "--idle-grace", "0")
	conn2, _, _ := connect(t, root)
	got, err := conn2.QueryTurn(turnCtx(t), protocol.TurnQueryInput{SessionID: "crash", TurnID: "turn-1"})
	if err != nil {
		t.Fatalf("turn.query after restart: %v", err)
	}
	if got.Status != protocol.TurnFailed || got.FailureClass != "app_restarted" || got.RunID != first.RunID {
		t.Fatalf("turn.query after restart: %+v (run %s)", got, first.RunID)
	}
	if users := roleTexts(transcriptOf(t, conn2, "crash"), protocol.TranscriptRoleUser); !slices.Equal(users, []string{firstPrompt}) {
		t.Fatalf("user messages after restart %q", users)
	}

	sub2, err := conn2.OpenSubscription(turnCtx(t), "crash")
	if err != nil {
		t.Fatal(err)
	}
	startTextTurn(t, conn2, "crash", "turn-2", secondPrompt)
	if text := nextUntil(t, sub2, "the end of turn-2", endsTurn("turn-2")); text != "it was 42" {
		t.Fatalf("turn-2 streamed %q", text)
	}
	if got, err := conn2.QueryTurn(turnCtx(t), protocol.TurnQueryInput{SessionID: "crash", TurnID: "turn-2"}); err != nil || got.Status != protocol.TurnCompleted {
		t.Fatalf("turn-2: %+v %v", got, err)
	}
	seen := srv.Seen()
	last := seen[len(seen)-1]
	var users []string
	for _, m := range last.Messages {
		if m.Role == "user" {
			users = append(users, m.Text())
		}
	}
	if !slices.Equal(users, []string{firstPrompt, secondPrompt}) {
		t.Fatalf("the model's request for turn-2 carries the user messages %q", users)
	}
	if texts := roleTexts(transcriptOf(t, conn2, "crash"), protocol.TranscriptRoleAssistant); !slices.Contains(texts, "it was 42") {
		t.Fatalf("assistant messages %q", texts)
	}
}

// TestScriptedModelHost runs a turn on `maka host serve --model-script`:
// the scripted provider answers instead of the connection catalog.
func TestScriptedModelHost(t *testing.T) {
	script := filepath.Join(t.TempDir(), "script.json")
	if err := os.WriteFile(script, []byte(`{"steps":[{"events":[{"text":"scripted: "},{"echo":true}]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	s := newSandbox(t)
	root, _ := newRoot(t)
	s.serve(root, "--idle-grace", "0", "--model-script", script)
	conn, _, _ := connect(t, root)
	createTurnSession(t, conn, "scripted")
	sub, err := conn.OpenSubscription(turnCtx(t), "scripted")
	if err != nil {
		t.Fatal(err)
	}
	startTextTurn(t, conn, "scripted", "turn-1", "ping")
	if text := nextUntil(t, sub, "the end of the turn", endsTurn("turn-1")); text != "scripted: ping" {
		t.Fatalf("streamed %q", text)
	}
	got, err := conn.QueryTurn(turnCtx(t), protocol.TurnQueryInput{SessionID: "scripted", TurnID: "turn-1"})
	if err != nil || got.Status != protocol.TurnCompleted {
		t.Fatalf("turn.query: %+v %v", got, err)
	}
	if texts := roleTexts(transcriptOf(t, conn, "scripted"), protocol.TranscriptRoleAssistant); !slices.Equal(texts, []string{"scripted: ping"}) {
		t.Fatalf("assistant messages %q", texts)
	}
}

// TestPendingApprovalAtAKillIsClosedHostRestarted SIGKILLs the host while
// a turn waits for an approval; after the restart the interaction reads
// closed / host_restarted, answering it is already_resolved, and the turn
// reads failed / app_restarted.
func TestPendingApprovalAtAKillIsClosedHostRestarted(t *testing.T) {
	srv := modeltest.New(t, func(req *modeltest.Request) modeltest.Reply {
		if len(req.ToolResultsSinceUser()) == 0 {
			return modeltest.Reply{Chunks: []modeltest.Chunk{{Call: &modeltest.Call{ID: "call_1", Name: "Bash", Arguments: `{"command":"true > /dev/null; touch x"}`}}}}
		}
		return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "done"}}}
	})
	s := newSandbox(t)
	root, _ := newRoot(t)
	p := s.serve(root, "--idle-grace", "0")
	conn, _, _ := connect(t, root)
	configureFakeModel(t, conn, srv.BaseURL())
	if _, err := conn.Call(turnCtx(t), protocol.OpSessionCreate, protocol.SessionCreateInput{
		SessionID: "ask", Workspace: protocol.HostPathWorkspace(t.TempDir()), PermissionMode: protocol.PermissionModeAsk,
	}); err != nil {
		t.Fatal(err)
	}
	sub, err := conn.OpenSubscription(turnCtx(t), "ask")
	if err != nil {
		t.Fatal(err)
	}
	startTextTurn(t, conn, "ask", "turn-1", "run true")
	var interactionID string
	nextUntil(t, sub, "a pending approval", func(f any) bool {
		if pr, ok := f.(protocol.ProjectionFrame); ok && len(pr.Snapshot.Interactions.Pending) == 1 {
			interactionID = pr.Snapshot.Interactions.Pending[0].InteractionID
			return true
		}
		return false
	})
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.waitExit()
	conn.Close()

	s.serve(root, "--idle-grace", "0")
	conn2, _, _ := connect(t, root)
	q, err := conn2.QueryInteraction(turnCtx(t), protocol.InteractionQueryInput{SessionID: "ask", InteractionID: interactionID})
	if err != nil || q.Status != protocol.InteractionStatusClosed || q.Outcome == nil || q.Outcome.Reason != protocol.InteractionClosureHostRestarted {
		t.Fatalf("interaction after restart: %+v %v", q, err)
	}
	_, err = conn2.AnswerInteraction(turnCtx(t), protocol.InteractionAnswerInput{InteractionID: interactionID,
		Answer: protocol.InteractionAnswer{Kind: protocol.InteractionKindPermission, Decision: protocol.InteractionDecisionAllow}})
	if !client.IsCode(err, protocol.ErrAlreadyResolved) {
		t.Fatalf("answer after restart: %v", err)
	}
	got, err := conn2.QueryTurn(turnCtx(t), protocol.TurnQueryInput{SessionID: "ask", TurnID: "turn-1"})
	if err != nil || got.Status != protocol.TurnFailed || got.FailureClass != "app_restarted" {
		t.Fatalf("turn after restart: %+v %v", got, err)
	}
}
