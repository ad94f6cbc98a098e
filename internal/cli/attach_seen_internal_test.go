package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/maka-agent/maka/protocol"
)

// A reopened subscription replays the running turn from its beginning;
// attach prints only what it had not printed yet.
func TestAttachPrintsAResumedReplayOnce(t *testing.T) {
	var out, errw bytes.Buffer
	a := &attachment{p: newPrinter(&out, &errw, true), turns: map[string]protocol.TurnStatus{}}
	delta := func(msg, text string) pushed {
		return pushed{frame: protocol.DeltaFrame{Delta: protocol.SessionAssistantDelta{
			Kind: protocol.DeltaText, TurnID: "t1", RunID: "r1", MessageID: msg, Text: text}}}
	}
	tool := func(typ, id string) pushed {
		return pushed{frame: protocol.EventFrame{Event: protocol.SessionToolEvent{
			Type: typ, ID: id, TurnID: "t1", ToolUseID: "u1", ToolName: "Glob", Status: "completed"}}}
	}
	ended := pushed{err: errors.New("subscription closed")}
	run := func(frames ...pushed) {
		ch := make(chan pushed, len(frames))
		for _, f := range frames {
			ch <- f
		}
		var lines <-chan string
		if _, done, err := a.loop(context.Background(), ch, &lines); done || err == nil {
			t.Fatalf("loop ended with done=%v err=%v", done, err)
		}
	}
	run(delta("m1", "Hel"), delta("m1", "lo"), tool(protocol.ToolStart, "e1"), ended)
	a.seen.resumed()
	// The replay: the message so far coalesced and longer, the tool start
	// again; then the live stream.
	run(delta("m1", "Hello wor"), tool(protocol.ToolStart, "e1"), delta("m1", "ld"), tool(protocol.ToolResult, "e2"), ended)

	var got []string
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatal(err)
		}
		s := ev["type"].(string)
		if text, ok := ev["text"].(string); ok {
			s += " " + text
		}
		got = append(got, s)
	}
	want := []string{"text Hel", "text lo", "tool_start", "text  wor", "text ld", "tool_result"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("printed %q, want %q", got, want)
	}
}
