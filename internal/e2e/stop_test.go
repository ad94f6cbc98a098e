package e2e_test

import (
	"slices"
	"testing"

	"github.com/maka-agent/maka/internal/modeltest"
	"github.com/maka-agent/maka/protocol"
)

// TestStopMidStream stops a turn while the model holds its stream after
// some text: turn.stop answers cancelled by turn.stop, the streamed text is
// kept, and the session's next turn runs with it in its history.
func TestStopMidStream(t *testing.T) {
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	h := newHost(t, func(req *modeltest.Request) modeltest.Reply {
		if req.LastUser() == "first" {
			return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "partial "}, {Wait: hold}, {Text: "never sent"}}}
		}
		return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "second answer"}}}
	})
	c := h.conn
	createSession(t, c, "stop", protocol.PermissionModeBypass)
	w := watch(t, c, "stop")
	started := startTurn(t, c, "stop", "turn-1", "first")
	w.until(t, "partial text", hasText("turn-1", "partial "))

	stopped, err := c.StopTurn(opCtx(t), protocol.TurnStopInput{SessionID: "stop", TurnID: "turn-1", RunID: started.RunID})
	if err != nil {
		t.Fatalf("turn.stop: %v", err)
	}
	if stopped.Status != protocol.TurnCancelled || stopped.AbortSource != "turn.stop" || stopped.RunID != started.RunID {
		t.Fatalf("turn.stop answered %+v", stopped)
	}
	frames := w.untilTerminal(t, "turn-1")
	if end := terminals(frames, "turn-1")[0].Snapshot.RootTurn; end.Status != protocol.TurnCancelled || end.AbortSource != "turn.stop" {
		t.Fatalf("terminal projection %+v", end)
	}
	if got := deltaText(frames, "turn-1"); got != "partial " {
		t.Fatalf("streamed %q", got)
	}
	if texts := textsOf(transcript(t, c, "stop"), protocol.TranscriptRoleAssistant); !slices.Equal(texts, []string{"partial "}) {
		t.Fatalf("assistant messages after the stop %q", texts)
	}

	startTurn(t, c, "stop", "turn-2", "second")
	frames = w.untilTerminal(t, "turn-2")
	if end := terminals(frames, "turn-2")[0].Snapshot.RootTurn; end.Status != protocol.TurnCompleted {
		t.Fatalf("next turn ended %+v", end)
	}
	if texts := textsOf(transcript(t, c, "stop"), protocol.TranscriptRoleAssistant); !slices.Equal(texts, []string{"partial ", "second answer"}) {
		t.Fatalf("assistant messages %q", texts)
	}
	seen := h.model.Seen()
	last := seen[len(seen)-1]
	var history []string
	for _, m := range last.Messages {
		if m.Role != "system" {
			history = append(history, m.Role+":"+m.Text())
		}
	}
	if want := []string{"user:first", "assistant:partial ", "user:second"}; !slices.Equal(history, want) {
		t.Fatalf("the next turn's request carries %q, want %q", history, want)
	}
}
