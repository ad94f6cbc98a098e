package e2e_test

import (
	"slices"
	"testing"

	"github.com/maka-agent/maka/internal/modeltest"
	"github.com/maka-agent/maka/protocol"
)

// TestTurnOutlivesTheClientThatStartedIt starts a turn, closes the
// starting client while the model holds its stream, then releases the
// model: the turn completes anyway, and a client connected afterwards sees
// it completed, reads the whole answer, and gets the same run back when it
// retries the same turn.start.
func TestTurnOutlivesTheClientThatStartedIt(t *testing.T) {
	release := make(chan struct{})
	h := newHost(t, func(req *modeltest.Request) modeltest.Reply {
		return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "part one, "}, {Wait: release}, {Text: "part two."}}}
	})
	first := h.dial()
	createSession(t, first, "detach", protocol.PermissionModeBypass)
	w := watch(t, first, "detach")
	started := startTurn(t, first, "detach", "turn-1", "answer in two parts")
	w.until(t, "first part", hasText("turn-1", "part one, "))
	first.Close()
	close(release)

	second := h.dial()
	w2 := watch(t, second, "detach")
	w2.untilTerminal(t, "turn-1")
	got := queryTurn(t, second, "detach", "turn-1")
	if got.Status != protocol.TurnCompleted || got.RunID != started.RunID {
		t.Fatalf("turn.query after the starting client left: %+v (started %+v)", got, started)
	}
	msgs := transcript(t, second, "detach")
	if texts := textsOf(msgs, protocol.TranscriptRoleAssistant); !slices.Equal(texts, []string{"part one, part two."}) {
		t.Fatalf("assistant messages %q", texts)
	}
	if texts := textsOf(msgs, protocol.TranscriptRoleUser); !slices.Equal(texts, []string{"answer in two parts"}) {
		t.Fatalf("user messages %q", texts)
	}

	retry, err := second.StartTurn(opCtx(t), startInput("detach", "turn-1", "answer in two parts"))
	if err != nil {
		t.Fatalf("retried turn.start: %v", err)
	}
	if retry.RunID != started.RunID || retry.Status != protocol.TurnCompleted {
		t.Fatalf("retried turn.start answered %+v, want run %s completed", retry, started.RunID)
	}
	if n := h.model.Requests(); n != 1 {
		t.Fatalf("the model got %d requests, want 1 (a retry must not run the turn again)", n)
	}
}
