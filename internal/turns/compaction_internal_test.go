package turns

import (
	"strings"
	"testing"

	"github.com/maka-agent/maka/internal/model"
	"github.com/maka-agent/maka/internal/sessions"
)

// at places a record event at (chain, seq).
func at(ev recordEvent, chain, seq int64) recordEvent {
	ev.chainSeq, ev.seq = chain, seq
	return ev
}

// compactedHistory is three turns: the first calls a tool, each reports
// usage.
func compactedHistory(t *testing.T) *history {
	t.Helper()
	h := newHistory()
	for _, ev := range []recordEvent{
		at(userMsg(t, "one"), 1, 1),
		at(rec(t, sessions.EventToolCallStarted, sessions.ToolCallStartedPayload{TurnID: "t1", ToolUseID: "c1", ToolName: "Read", StepID: "s1"}), 1, 2),
		at(rec(t, sessions.EventToolCallFinished, sessions.ToolCallFinishedPayload{TurnID: "t1", ToolUseID: "c1", ToolName: "Read", Output: "file"}), 1, 3),
		at(rec(t, EventTokenUsage, model.Usage{InputTokens: 100, OutputTokens: 5}), 1, 4),
		at(rec(t, sessions.EventTextComplete, sessions.MessagePayload{TurnID: "t1", MessageID: "s2", Text: "read it"}), 1, 5),
		at(userMsg(t, "two"), 2, 1),
		at(rec(t, sessions.EventTextComplete, sessions.MessagePayload{TurnID: "t2", MessageID: "s3", Text: "answer two"}), 2, 2),
		at(rec(t, EventTokenUsage, model.Usage{InputTokens: 300, OutputTokens: 7}), 2, 3),
		at(userMsg(t, "three"), 3, 1),
		at(rec(t, sessions.EventTextComplete, sessions.MessagePayload{TurnID: "t3", MessageID: "s4", Text: "answer three"}), 3, 2),
	} {
		if err := h.add(ev); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

func TestConversationHonoursTheLatestCompaction(t *testing.T) {
	h := compactedHistory(t)
	plain := h.conversation(compactionRecord{})
	if len(plain.msgs) != 8 || plain.summarized || plain.usage != 307 || plain.usageAt != 6 {
		t.Fatalf("without a compaction: %d messages, usage %d at %d", len(plain.msgs), plain.usage, plain.usageAt)
	}
	// Kept from turn 2's user message: the summary opens it, turn 1 is gone.
	conv := h.conversation(compactionRecord{found: true, keep: recordPos{2, 1}, usageFrom: 2, summary: "S"})
	if len(conv.msgs) != 4 || !conv.summarized || conv.msgs[0].Text != SummaryNote+"S"+summaryEnd+"two" ||
		conv.msgs[3].Text != "answer three" || conv.pos[0] != (recordPos{2, 1}) {
		t.Fatalf("compacted: %+v", conv.msgs)
	}
	// Turn 2's usage measured the compacted conversation (usageFrom 2).
	if conv.usage != 307 || conv.usageAt != 2 {
		t.Fatalf("usage %d at %d", conv.usage, conv.usageAt)
	}
	// A compaction made after turn 2 (on demand): its usage no longer counts.
	later := h.conversation(compactionRecord{found: true, keep: recordPos{3, 1}, usageFrom: 3, summary: "S"})
	if later.usage != 0 || len(later.msgs) != 2 {
		t.Fatalf("later compaction: usage %d, %d messages", later.usage, len(later.msgs))
	}
	// Everything summarised: the summary stands alone.
	all := h.conversation(compactionRecord{found: true, keep: recordPos{4, 0}, usageFrom: 4, summary: "S"})
	if len(all.msgs) != 1 || all.msgs[0].Role != model.RoleUser || all.msgs[0].Text != SummaryNote+"S" {
		t.Fatalf("all summarised: %+v", all.msgs)
	}
}

func TestConversationDropsAResultWhoseCallWasSummarised(t *testing.T) {
	h := newHistory()
	for _, ev := range []recordEvent{
		at(userMsg(t, "one"), 1, 1),
		at(rec(t, sessions.EventToolCallStarted, sessions.ToolCallStartedPayload{TurnID: "t1", ToolUseID: "c1", ToolName: "Bash", StepID: "s1"}), 1, 2),
		at(rec(t, sessions.EventSteeringMessage, sessions.MessagePayload{TurnID: "t1", MessageID: "st", Text: "steer"}), 1, 3),
		at(rec(t, sessions.EventToolCallFinished, sessions.ToolCallFinishedPayload{TurnID: "t1", ToolUseID: "c1", Output: "late"}), 1, 4),
	} {
		if err := h.add(ev); err != nil {
			t.Fatal(err)
		}
	}
	conv := h.conversation(compactionRecord{found: true, keep: recordPos{1, 3}, summary: "S"})
	for _, m := range conv.msgs {
		if m.Role == model.RoleTool {
			t.Fatalf("a result without its call was kept: %+v", conv.msgs)
		}
	}
}

func TestRequestTokensPreferTheProvidersUsage(t *testing.T) {
	c := &Owner{}
	system := strings.Repeat("s", 300)
	conv := conversation{msgs: []model.Message{{Role: model.RoleUser, Text: strings.Repeat("u", 284)}, {Role: model.RoleAssistant, Text: strings.Repeat("a", 584)}}}
	if got := c.requestTokens(conv, len(system), ""); got != (300+300+600)/bytesPerToken {
		t.Fatalf("estimate %d", got)
	}
	conv.usage, conv.usageAt = 1000, 1
	if got := c.requestTokens(conv, len(system), strings.Repeat("p", 284)); got != 1000+(600+300)/bytesPerToken {
		t.Fatalf("with usage %d", got)
	}
	// A provider that reports less than the estimate is not believed.
	conv.usage = 5
	if got := c.requestTokens(conv, len(system), strings.Repeat("p", 284)); got != (300+300+600+300)/bytesPerToken {
		t.Fatalf("with a usage below the estimate %d", got)
	}
}

func TestRenderForSummaryKeepsThePreviousSummaryAndTheNewest(t *testing.T) {
	old := []model.Message{{Role: model.RoleUser, Text: SummaryNote + "PREVIOUS"}}
	for i := range 50 {
		old = append(old, model.Message{Role: model.RoleUser, Text: strings.Repeat("x", 500) + string(rune('A'+i%26))})
	}
	old = append(old, model.Message{Role: model.RoleUser, Text: "NEWEST"})
	got := renderForSummary(old, 6000)
	if len(got) > 6000 || !strings.Contains(got, "PREVIOUS") || !strings.Contains(got, "NEWEST") || !strings.Contains(got, "earlier messages left out") {
		t.Fatalf("%d bytes: %.200q … %.100q", len(got), got, got[max(len(got)-100, 0):])
	}
}
