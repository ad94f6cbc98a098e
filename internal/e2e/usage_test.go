package e2e_test

import (
	"testing"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/internal/modeltest"
	"github.com/maka-agent/maka/protocol"
)

// TestTurnUsageNoticesEndToEnd: a subscriber that asked for notices gets
// one turn_usage notice after each model step, with the turn's usage so
// far and the step's stop reason, then one for the turn, all before the
// turn's terminal projection; a v0 subscriber gets none.
func TestTurnUsageNoticesEndToEnd(t *testing.T) {
	h := newHost(t, func(req *modeltest.Request) modeltest.Reply {
		if len(req.ToolResultsSinceUser()) == 0 {
			return modeltest.Reply{Chunks: []modeltest.Chunk{{Call: &modeltest.Call{ID: "c1", Name: "Glob", Arguments: `{"pattern":"*"}`}}},
				Usage: &modeltest.Usage{Prompt: 100, Completion: 7}}
		}
		return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "ok"}}, Usage: &modeltest.Usage{Prompt: 130, Completion: 9}}
	})
	c := h.conn
	createSession(t, c, "counted", protocol.PermissionModeBypass)
	w := watch(t, c, "counted", client.WithNotices())
	plain := watch(t, c, "counted")
	startTurn(t, c, "counted", "t1", "count")
	frames := w.untilTerminal(t, "t1")
	plain.untilTerminal(t, "t1")

	type step struct {
		reason  string
		final   bool
		in, out int64
		context int64
	}
	want := []step{
		{protocol.StopReasonToolUse, false, 100, 7, 107},
		{protocol.StopReasonEndTurn, false, 230, 16, 139},
		{protocol.StopReasonEndTurn, true, 230, 16, 139},
	}
	var got []protocol.SessionNotice
	lastUsage := -1
	for i, f := range frames {
		if n, ok := f.(protocol.NoticeFrame); ok && n.Notice.Kind == protocol.NoticeTurnUsage {
			got = append(got, n.Notice)
			lastUsage = i
		}
	}
	if len(got) != len(want) {
		t.Fatalf("turn_usage notices %+v, want %d", got, len(want))
	}
	for i, n := range got {
		wn := want[i]
		if n.TurnID != "t1" || n.StopReason != wn.reason || n.Final != wn.final || !n.HasUsage ||
			n.Usage != (protocol.TokenUsage{InputTokens: wn.in, OutputTokens: wn.out}) ||
			n.ContextTokens != wn.context || n.ContextWindow != 128000 || n.Message == "" {
			t.Errorf("notice %d = %+v, want %+v", i, n, wn)
		}
	}
	if terms := terminals(frames[lastUsage+1:], "t1"); len(terms) == 0 {
		t.Errorf("the turn's usage notice came after its terminal projection")
	}
	if n := noticeFrames(plain.snapshot()); n != 0 {
		t.Fatalf("a v0 subscriber got %d notices", n)
	}
}

// TestTurnUsageNoticeOfAStoppedTurn: a stopped turn's last notice says
// cancelled, with the usage of the steps that ended.
func TestTurnUsageNoticeOfAStoppedTurn(t *testing.T) {
	hold := make(chan struct{})
	defer close(hold)
	h := newHost(t, func(req *modeltest.Request) modeltest.Reply {
		if len(req.ToolResultsSinceUser()) == 0 {
			return modeltest.Reply{Chunks: []modeltest.Chunk{{Call: &modeltest.Call{ID: "c1", Name: "Glob", Arguments: `{"pattern":"*"}`}}},
				Usage: &modeltest.Usage{Prompt: 50, Completion: 5}}
		}
		return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "thinking about it"}, {Wait: hold}, {Text: "never"}}}
	})
	c := h.conn
	createSession(t, c, "stopped", protocol.PermissionModeBypass)
	w := watch(t, c, "stopped", client.WithNotices())
	startTurn(t, c, "stopped", "t1", "go")
	w.until(t, "the second step's text", func(frames []any) bool {
		for _, f := range frames {
			if d, ok := f.(protocol.DeltaFrame); ok && d.Delta.Text == "thinking about it" {
				return true
			}
		}
		return false
	})
	snap := queryTurn(t, c, "stopped", "t1")
	if _, err := c.StopTurn(opCtx(t), protocol.TurnStopInput{SessionID: "stopped", TurnID: "t1", RunID: snap.RunID}); err != nil {
		t.Fatal(err)
	}
	frames := w.untilTerminal(t, "t1")
	var last protocol.SessionNotice
	for _, f := range frames {
		if n, ok := f.(protocol.NoticeFrame); ok && n.Notice.Kind == protocol.NoticeTurnUsage {
			last = n.Notice
		}
	}
	if !last.Final || last.StopReason != protocol.StopReasonCancelled || !last.HasUsage ||
		last.Usage != (protocol.TokenUsage{InputTokens: 50, OutputTokens: 5}) {
		t.Fatalf("last turn_usage notice %+v, want final cancelled with the first step's usage", last)
	}
}
