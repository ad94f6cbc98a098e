package e2e_test

import (
	"slices"
	"sync"
	"testing"

	"github.com/maka-agent/maka/internal/modeltest"
	"github.com/maka-agent/maka/protocol"
)

// TestProviderErrorsEndToEnd drives provider failures through the real
// OpenAI-compatible client: a rejected key fails the turn with
// failureClass auth at once, and a server error followed by a success is
// retried (after the provider backoff of about a second) and completes.
func TestProviderErrorsEndToEnd(t *testing.T) {
	var mu sync.Mutex
	attempts := map[string]int{}
	h := newHost(t, func(req *modeltest.Request) modeltest.Reply {
		mu.Lock()
		attempts[req.LastUser()]++
		n := attempts[req.LastUser()]
		mu.Unlock()
		switch {
		case req.LastUser() == "bad key":
			return modeltest.Reply{Status: 401, Body: `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}`}
		case n == 1:
			return modeltest.Reply{Status: 500}
		}
		return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "recovered"}}}
	})
	c := h.conn
	createSession(t, c, "auth", protocol.PermissionModeBypass)
	createSession(t, c, "flaky", protocol.PermissionModeBypass)
	wAuth, wFlaky := watch(t, c, "auth"), watch(t, c, "flaky")
	startTurn(t, c, "auth", "turn-1", "bad key")
	startTurn(t, c, "flaky", "turn-1", "flaky server")

	t.Run("401 fails the turn as auth", func(t *testing.T) {
		wAuth.untilTerminal(t, "turn-1")
		got := queryTurn(t, c, "auth", "turn-1")
		if got.Status != protocol.TurnFailed || got.FailureClass != "auth" {
			t.Fatalf("turn.query %+v", got)
		}
		mu.Lock()
		n := attempts["bad key"]
		mu.Unlock()
		if n != 1 {
			t.Fatalf("a rejected key was tried %d times", n)
		}
		if texts := textsOf(transcript(t, c, "auth"), protocol.TranscriptRoleUser); !slices.Equal(texts, []string{"bad key"}) {
			t.Fatalf("user messages %q", texts)
		}
	})
	t.Run("500 then success completes", func(t *testing.T) {
		frames := wFlaky.untilTerminal(t, "turn-1")
		got := queryTurn(t, c, "flaky", "turn-1")
		if got.Status != protocol.TurnCompleted {
			t.Fatalf("turn.query %+v", got)
		}
		mu.Lock()
		n := attempts["flaky server"]
		mu.Unlock()
		if n != 2 {
			t.Fatalf("the model was asked %d times, want 2", n)
		}
		if text := deltaText(frames, "turn-1"); text != "recovered" {
			t.Fatalf("streamed %q", text)
		}
		if texts := textsOf(transcript(t, c, "flaky"), protocol.TranscriptRoleAssistant); !slices.Equal(texts, []string{"recovered"}) {
			t.Fatalf("assistant messages %q", texts)
		}
	})
}
