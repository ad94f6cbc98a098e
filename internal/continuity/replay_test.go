package continuity

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/maka-agent/maka/protocol"
)

func (h *harness) fence(sessionID string) {
	h.t.Helper()
	if err := h.inLane(sessionID, func(ctx context.Context) error {
		_, err := h.c.InstallFence(ctx, sessionID, "turn-"+sessionID, "run-"+sessionID)
		return err
	}); err != nil {
		h.t.Fatal(err)
	}
}

func toolEvent(sessionID, typ, id string) Event {
	ev := protocol.SessionToolEvent{Type: typ, ID: id, TurnID: "turn-" + sessionID, TS: 1700000000000, ToolUseID: "tool-use-1"}
	switch typ {
	case protocol.ToolStart:
		ev.ToolName = "Bash"
	case protocol.ToolOutputDelta:
		ev.Seq, ev.Stream, ev.Chunk, ev.CreatedAt = 1, "stdout", "listed\n", 1700000000001
	case protocol.ToolResult:
		ev.Status = "completed"
	}
	return Event{Type: typ, TurnID: "turn-" + sessionID, Tool: ev}
}

// contents describes the delta and event frames as a client sees them:
// one line per frame, "text/MESSAGE: TEXT" or "TYPE ID".
func contents(t *testing.T, frames []any) []string {
	t.Helper()
	var out []string
	for _, fr := range frames {
		switch f := fr.(type) {
		case protocol.DeltaFrame:
			if f.Delta.TurnID != "turn-s1" || f.Delta.RunID != "run-s1" || f.SessionID != "s1" {
				t.Fatalf("delta of another turn: %+v", f)
			}
			out = append(out, fmt.Sprintf("%s/%s: %s", f.Delta.Kind, f.Delta.MessageID, f.Delta.Text))
		case protocol.EventFrame:
			if f.Event.TurnID != "turn-s1" || f.RunID != "run-s1" || f.SessionID != "s1" {
				t.Fatalf("event of another turn: %+v", f)
			}
			out = append(out, f.Event.Type+" "+f.Event.ID)
		}
	}
	return out
}

func requireContents(t *testing.T, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("frames:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A subscription opened during a turn gets, after its snapshot, what the
// turn produced while nobody watched (its text coalesced), then the live
// stream: each event once, in order, in one gapless sequence.
func TestOpenDuringATurnReplaysItsEventsBeforeTheLiveOnes(t *testing.T) {
	h := newHarness(t)
	h.store.add("s1")
	h.fence("s1")
	h.accept("s1", textEvent("s1", "Hel"))
	h.accept("s1", textEvent("s1", "lo "))
	h.accept("s1", Event{Type: ThinkingDelta, TurnID: "turn-s1", MessageID: "message-s1", Text: "hmm"})
	h.accept("s1", toolEvent("s1", protocol.ToolStart, "e1"))
	h.accept("s1", toolEvent("s1", protocol.ToolOutputDelta, "e2"))
	h.accept("s1", toolEvent("s1", protocol.ToolResult, "e3"))
	h.accept("s1", Event{Type: TextDelta, TurnID: "turn-s1", MessageID: "m2", Text: "wor"})
	h.accept("s1", Event{Type: TextDelta, TurnID: "turn-s1", MessageID: "m2", Text: "ld"})

	conn := newFakeConn(t, "conn-a")
	res, activate := h.openInactive(conn, "s1")
	if res.NextSequence != 1 || res.Snapshot.RootTurn == nil || res.Snapshot.RootTurn.TurnID != "turn-s1" {
		t.Fatalf("open result %+v", res)
	}
	// Live events before the response is queued follow the replay.
	h.accept("s1", Event{Type: TextDelta, TurnID: "turn-s1", MessageID: "m2", Text: "!"})
	if n := conn.sentCount(); n != 0 {
		t.Fatalf("%d frames before the open response was queued", n)
	}
	activate(nil)
	h.accept("s1", toolEvent("s1", protocol.ToolStart, "e4"))
	conn.flushAll()
	frames := conn.framesOf(res.SubscriptionID)
	requireGapless(t, res.SubscriptionID, frames)
	requireContents(t, contents(t, frames),
		"text/message-s1: Hello ",
		"thinking/message-s1: hmm",
		"tool_start e1", "tool_output_delta e2", "tool_result e3",
		"text/m2: world",
		"text/m2: !",
		"tool_start e4")
	// The frames are those of a v0 host: each decodes with its codec.
	for _, fr := range frames {
		if _, ok := fr.(protocol.NoticeFrame); ok {
			t.Fatal("a notice reached a subscriber that did not ask for notices")
		}
	}

	// A second subscriber sees the same turn from its beginning, with
	// the events the first one saw live coalesced too.
	late := newFakeConn(t, "conn-b")
	lateRes := h.openActive(late, "s1")
	late.flushAll()
	lateFrames := late.framesOf(lateRes.SubscriptionID)
	requireGapless(t, lateRes.SubscriptionID, lateFrames)
	requireContents(t, contents(t, lateFrames),
		"text/message-s1: Hello ",
		"thinking/message-s1: hmm",
		"tool_start e1", "tool_output_delta e2", "tool_result e3",
		"text/m2: world!",
		"tool_start e4")
}

// The replay of a long turn is held outside the subscriber's bounds: more
// text than 32 frames or 256 KiB arrives whole, in deltas of at most
// 16 KiB, and live frames follow it.
func TestReplayOfALongTurnFitsTheSubscriberBounds(t *testing.T) {
	h := newHarness(t)
	h.store.add("s1")
	h.fence("s1")
	var want strings.Builder
	for i := range 6000 {
		s := fmt.Sprintf("line %04d of a long answer, with €uro signs\n", i)
		want.WriteString(s)
		h.accept("s1", textEvent("s1", s))
	}
	if want.Len() <= SubscriberMaxBytes || want.Len() > TurnReplayMaxBytes {
		t.Fatalf("test text of %d bytes does not exceed the subscriber bound", want.Len())
	}
	conn := newFakeConn(t, "conn-a")
	res := h.openActive(conn, "s1")
	// The client reads slowly while the turn goes on: the live frames
	// wait in the bounded queue behind the replay.
	for i := range 10 {
		conn.flush("", 1)
		h.accept("s1", toolEvent("s1", protocol.ToolStart, fmt.Sprintf("live-%d", i)))
	}
	conn.flushAll()
	frames := conn.framesOf(res.SubscriptionID)
	requireGapless(t, res.SubscriptionID, frames)
	var text strings.Builder
	deltas, live := 0, 0
	for _, fr := range frames {
		switch f := fr.(type) {
		case protocol.DeltaFrame:
			if live > 0 {
				t.Fatal("replayed text after a live event")
			}
			if len(f.Delta.Text) > protocol.SessionLiveDeltaMaxBytes {
				t.Fatalf("delta of %d bytes", len(f.Delta.Text))
			}
			deltas++
			text.WriteString(f.Delta.Text)
		case protocol.EventFrame:
			if f.Event.ID != fmt.Sprintf("live-%d", live) {
				t.Fatalf("live event %d is %s", live, f.Event.ID)
			}
			live++
		case protocol.ClosedFrame:
			t.Fatalf("subscriber closed: %s", f.Reason)
		}
	}
	if text.String() != want.String() || live != 10 {
		t.Fatalf("replayed %d of %d bytes, %d live events", text.Len(), want.Len(), live)
	}
	if most := (want.Len() + protocol.SessionLiveDeltaMaxBytes - 1) / protocol.SessionLiveDeltaMaxBytes; deltas > most {
		t.Fatalf("%d deltas for %d bytes, want at most %d", deltas, want.Len(), most)
	}
}

// A slow subscriber is still evicted during its replay, with the sequence
// after the last frame it received; nothing after it.
func TestSlowConsumerIsEvictedDuringItsReplay(t *testing.T) {
	h := newHarness(t)
	h.store.add("s1")
	h.fence("s1")
	for i := range 4 {
		h.accept("s1", toolEvent("s1", protocol.ToolStart, fmt.Sprintf("old-%d", i)))
	}
	conn := newFakeConn(t, "conn-a")
	res := h.openActive(conn, "s1")
	// One replay frame is in flight; the live stream fills the queue.
	for i := range SubscriberMaxFrames {
		h.accept("s1", toolEvent("s1", protocol.ToolStart, fmt.Sprintf("live-%d", i)))
	}
	conn.flushAll()
	frames := conn.framesOf(res.SubscriptionID)
	requireGapless(t, res.SubscriptionID, frames)
	if len(frames) != 2 {
		t.Fatalf("frames %s, want the replay frame in flight and the closing frame", describe(frames))
	}
	requireContents(t, contents(t, frames[:1]), "tool_start old-0")
	if f, ok := frames[1].(protocol.ClosedFrame); !ok || f.Reason != protocol.CloseSlowConsumer {
		t.Fatalf("last frame %#v", frames[1])
	}
	requireStats(t, h.c, 0, 1)
}

// The log ends with the turn: after the terminal publication a new
// subscriber gets no replay, and the successor's log starts empty.
func TestReplayEndsAtTheTerminalTransition(t *testing.T) {
	h := newHarness(t)
	h.store.add("s1")
	h.fence("s1")
	h.accept("s1", textEvent("s1", "first turn"))
	h.store.update("s1", func(p *Projection) {
		p.RootTurn.Status, p.RootTurn.TerminalEventID = protocol.TurnCompleted, "terminal-1"
		p.Session.Status = protocol.SessionActive
	})
	if err := h.inLane("s1", func(ctx context.Context) error { return h.c.PublishTerminal(ctx, "s1", "turn-s1", "run-s1") }); err != nil {
		t.Fatal(err)
	}
	requireStats(t, h.c, 0, 0)
	conn := newFakeConn(t, "conn-a")
	res := h.openActive(conn, "s1")
	conn.flushAll()
	if frames := conn.framesOf(res.SubscriptionID); len(frames) != 0 {
		t.Fatalf("after the turn a subscriber got %s", describe(frames))
	}
	h.closeSub(conn, res.SubscriptionID)

	// A fence released without a terminal drops its log too.
	h.store.update("s1", func(p *Projection) {
		p.RootTurn.Status, p.RootTurn.TerminalEventID = protocol.TurnRunning, ""
		p.Session.Status = protocol.SessionRunning
	})
	h.fence("s1")
	h.accept("s1", textEvent("s1", "second"))
	h.c.ReleaseFence("s1", "turn-s1", "run-s1")
	h.fence("s1")
	h.accept("s1", textEvent("s1", "third"))
	res = h.openActive(conn, "s1")
	conn.flushAll()
	requireContents(t, contents(t, conn.framesOf(res.SubscriptionID)), "text/message-s1: third")
}

// The log is bounded: a turn that outgrows it keeps its newest events,
// and its replay still joins the live stream without a gap.
func TestReplayLogIsBounded(t *testing.T) {
	h := newHarness(t)
	h.store.add("s1")
	h.fence("s1")
	h.accept("s1", toolEvent("s1", protocol.ToolStart, "first"))
	line := strings.Repeat("x", 1023) + "\n"
	var all strings.Builder
	for range TurnReplayMaxBytes/len(line) + 200 {
		all.WriteString(line)
		h.accept("s1", textEvent("s1", line))
	}
	h.accept("s1", textEvent("s1", "€nd"))
	all.WriteString("€nd")
	conn := newFakeConn(t, "conn-a")
	res := h.openActive(conn, "s1")
	h.accept("s1", toolEvent("s1", protocol.ToolStart, "live"))
	conn.flushAll()
	frames := conn.framesOf(res.SubscriptionID)
	requireGapless(t, res.SubscriptionID, frames)
	var text strings.Builder
	for _, fr := range frames[:len(frames)-1] {
		f, ok := fr.(protocol.DeltaFrame)
		if !ok {
			t.Fatalf("replay frame %T: the oldest event was kept", fr)
		}
		text.WriteString(f.Delta.Text)
	}
	if text.Len() > TurnReplayMaxBytes || text.Len() < TurnReplayMaxBytes/2 || !strings.HasSuffix(all.String(), text.String()) {
		t.Fatalf("replayed %d bytes, not the newest %d or fewer of %d", text.Len(), TurnReplayMaxBytes, all.Len())
	}
	requireContents(t, contents(t, frames[len(frames)-1:]), "tool_start live")
}
