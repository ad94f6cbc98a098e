package e2e_test

import (
	"slices"
	"testing"

	"github.com/maka-agent/maka/internal/modeltest"
	"github.com/maka-agent/maka/protocol"
)

// TestSubscriptionOpenedMidTurnReplaysIt opens a plain v0 subscription
// (no options) on another connection while a turn holds its stream after
// text and a tool call: it receives, after its snapshot and in one gapless
// sequence, the turn's text and tool events so far, then the rest; the
// same content, in the same order, as a subscriber that watched from the
// start, and no frame a v0 client does not know.
func TestSubscriptionOpenedMidTurnReplaysIt(t *testing.T) {
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	h := newHost(t, func(req *modeltest.Request) modeltest.Reply {
		if len(req.ToolResultsSinceUser()) == 0 {
			return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "looking "}, {Text: "first. "},
				{Call: &modeltest.Call{ID: "call_1", Name: "Glob", Arguments: `{"pattern":"*.go"}`}}}}
		}
		return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "found "}, {Wait: hold}, {Text: "nothing."}}}
	})
	c := h.conn
	createSession(t, c, "replay", protocol.PermissionModeBypass)
	early := watch(t, c, "replay")
	startTurn(t, c, "replay", "turn-1", "look")
	early.until(t, "text after the tool", hasText("turn-1", "first. found "))

	late := watch(t, h.dial(), "replay")
	if r := late.sub.Open.Snapshot.RootTurn; r == nil || r.TurnID != "turn-1" || r.Status.Terminal() {
		t.Fatalf("late snapshot root %+v", r)
	}
	late.until(t, "the replayed text", hasText("turn-1", "first. found "))
	hold <- struct{}{}
	earlyFrames := early.untilTerminal(t, "turn-1")
	lateFrames := late.untilTerminal(t, "turn-1")
	early.checkGapless(t, earlyFrames)
	late.checkGapless(t, lateFrames)

	for name, frames := range map[string][]any{"early": earlyFrames, "late": lateFrames} {
		if got := deltaText(frames, "turn-1"); got != "looking first. found nothing." {
			t.Errorf("%s subscriber saw text %q", name, got)
		}
		for _, f := range frames {
			if _, ok := f.(protocol.NoticeFrame); ok {
				t.Errorf("%s subscriber got a notice it never asked for", name)
			}
		}
	}
	// The late subscriber saw the turn's text and tools from the
	// beginning, in the order the early one saw them live.
	content := func(frames []any) []string {
		var out []string
		for _, s := range outline(frames) {
			if s == "text" || s == "tool_start:Glob" || s == "tool_result:Glob" {
				out = append(out, s)
			}
		}
		return out
	}
	want := []string{"text", "tool_start:Glob", "tool_result:Glob", "text"}
	if got := content(earlyFrames); !slices.Equal(got, want) {
		t.Fatalf("early subscriber: %v, want %v (%s)", got, want, describe(earlyFrames))
	}
	if got := content(lateFrames); !slices.Equal(got, want) {
		t.Fatalf("late subscriber: %v, want %v (%s)", got, want, describe(lateFrames))
	}
}
