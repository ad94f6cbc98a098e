package e2e_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/internal/modeltest"
	"github.com/maka-agent/maka/protocol"
)

// TestCompactionDuringALongTurn: a turn whose own tool result outgrows the
// small context window is compacted before its next step: the host asks
// for a summary of the conversation before the turn, the step's request
// carries it and no longer the oldest turns, the turn completes, and the
// transcript keeps every message.
func TestCompactionDuringALongTurn(t *testing.T) {
	var mu sync.Mutex
	var summaries, afterTool []*modeltest.Request
	reply := func(req *modeltest.Request) modeltest.Reply {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case summaryRequest(req):
			summaries = append(summaries, req)
			return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "SUMMARY-MID: earlier marked turns."}}}
		case strings.HasPrefix(req.LastUser(), "read the big file") && len(req.ToolResultsSinceUser()) == 0:
			return modeltest.Reply{Chunks: []modeltest.Chunk{{Call: &modeltest.Call{ID: "call-big", Name: "Read", Arguments: `{"path":"big.txt"}`}}}}
		case strings.HasPrefix(req.LastUser(), "read the big file"):
			afterTool = append(afterTool, req)
			return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "read it"}}}
		}
		marker, _, _ := strings.Cut(req.LastUser(), ":")
		return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "noted " + marker + ". " + strings.Repeat("an answer of some length. ", 80)}}}
	}
	h := newHostWindow(t, "", "openai-compatible", compactWindow, reply)
	c := h.conn
	dir := createSession(t, c, "long", protocol.PermissionModeBypass)
	w := watch(t, c, "long", client.WithNotices())
	// Four turns fit the window with room to spare (no compaction at the
	// big turn's start); the file read in the fifth does not.
	runTurns(t, c, w, "long", 1, 4)
	if err := os.WriteFile(filepath.Join(dir, "big.txt"), []byte(strings.Repeat("line of the big file\n", 1300)), 0o644); err != nil {
		t.Fatal(err)
	}
	startTurn(t, c, "long", "turn-big", "read the big file and say what it holds")
	w.untilTerminal(t, "turn-big")
	if got := queryTurn(t, c, "long", "turn-big"); got.Status != protocol.TurnCompleted {
		t.Fatalf("the big turn: %+v", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(summaries) != 1 || !strings.Contains(summaries[0].LastUser(), "turn-01-marker") {
		t.Fatalf("%d summary requests during the big turn", len(summaries))
	}
	if len(afterTool) != 1 {
		t.Fatalf("%d requests after the tool result", len(afterTool))
	}
	var sent strings.Builder
	for _, m := range afterTool[0].Messages {
		sent.WriteString(m.Text())
	}
	if !strings.Contains(sent.String(), "SUMMARY-MID") || strings.Contains(sent.String(), "turn-01-marker") ||
		!strings.Contains(sent.String(), "line of the big file") {
		t.Fatalf("the step after the tool result does not send the summary instead of the oldest turns with the result")
	}
	found := false
	for _, n := range noticesOf(w.snapshot()) {
		if n.Kind == "context_compacted" && n.TurnID == "turn-big" {
			found = true
		}
	}
	if !found {
		t.Fatal("no context_compacted notice for the big turn")
	}
	var all strings.Builder
	for _, m := range transcript(t, c, "long") {
		all.WriteString(m.Text)
	}
	for i := 1; i <= 4; i++ {
		if !strings.Contains(all.String(), fmt.Sprintf("turn-%02d-marker", i)) {
			t.Fatalf("the transcript lost turn %d", i)
		}
	}
}
