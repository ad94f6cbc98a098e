package tui

import (
	"errors"
	"slices"
	"strings"
	"testing"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/maka-agent/maka/protocol"
)

func userMsg(id, turnID, text string) protocol.TranscriptMessage {
	return protocol.TranscriptMessage{MessageID: id, TurnID: turnID, Role: protocol.TranscriptRoleUser, Part: 1, Text: text}
}

func assistantMsg(id, turnID, text string) protocol.TranscriptMessage {
	return protocol.TranscriptMessage{MessageID: id, TurnID: turnID, Role: protocol.TranscriptRoleAssistant, Part: 1, Text: text}
}

func delta(kind, turnID, messageID, text string) protocol.DeltaFrame {
	return protocol.DeltaFrame{SessionID: "s1", Delta: protocol.SessionAssistantDelta{
		Kind: kind, TurnID: turnID, RunID: "run-" + turnID, MessageID: messageID, Text: text}}
}

func toolEvent(ev protocol.SessionToolEvent) protocol.EventFrame {
	ev.TurnID = "t1"
	return protocol.EventFrame{SessionID: "s1", RunID: "run-t1", Event: ev}
}

func projection(s protocol.SessionContinuitySnapshot) protocol.ProjectionFrame {
	return protocol.ProjectionFrame{Snapshot: s}
}

// running attaches a harness to session s1 whose turn t1 is running.
func running(t *testing.T, transcript ...protocol.TranscriptMessage) (*harness, *fakeBackend) {
	t.Helper()
	be := newFakeBackend()
	be.addSession(summary("s1", "first"), snapshot("s1", 1, turn("s1", "t1", protocol.TurnRunning)))
	be.setTranscript("s1", transcript)
	h := newHarness(t, be, Options{ResumeSessionID: "s1", Workspace: "/work"})
	h.attached()
	return h, be
}

func kinds(es []*entry) []string {
	var out []string
	for _, e := range es {
		s := [...]string{"user", "assistant", "thinking", "tool", "note"}[e.kind]
		out = append(out, s+":"+e.id)
	}
	return out
}

func TestDeltasAppendToTheInProgressMessage(t *testing.T) {
	h, _ := running(t, userMsg("u1", "t1", "say hello"))
	h.push(
		delta(protocol.DeltaThinking, "t1", "th1", "pondering "),
		delta(protocol.DeltaThinking, "t1", "th1", "greetings"),
		delta(protocol.DeltaText, "t1", "a1", "Hel"),
		delta(protocol.DeltaText, "t1", "a1", "lo, "),
		delta(protocol.DeltaText, "t1", "a1", "world"),
	)
	if got, want := kinds(h.m.entries), []string{"user:u1", "thinking:th1", "assistant:a1"}; !slices.Equal(got, want) {
		t.Fatalf("entries %v, want %v", got, want)
	}
	if got := h.m.entries[2].text; got != "Hello, world" {
		t.Fatalf("assistant text %q", got)
	}
	if got := h.m.entries[1].text; got != "pondering greetings" {
		t.Fatalf("thinking text %q", got)
	}
	v := h.m.View()
	for _, want := range []string{"say hello", "Hello, world", "thinking", "pondering greetings", "turn running"} {
		if !strings.Contains(v, want) {
			t.Fatalf("view lacks %q:\n%s", want, v)
		}
	}
}

func TestToolEventsUpdateCards(t *testing.T) {
	dur := int64(12)
	tests := []struct {
		name       string
		events     []protocol.SessionToolEvent
		wantStatus string
		wantOutput string
		wantView   []string
	}{
		{
			name: "started",
			events: []protocol.SessionToolEvent{
				{Type: protocol.ToolStart, ID: "e1", ToolUseID: "call1", ToolName: "Bash", DisplayName: "ls -la"},
			},
			wantStatus: toolRunning,
			wantView:   []string{"⚙ Bash", "ls -la", "running"},
		},
		{
			name: "output and result",
			events: []protocol.SessionToolEvent{
				{Type: protocol.ToolStart, ID: "e1", ToolUseID: "call1", ToolName: "Bash"},
				{Type: protocol.ToolOutputDelta, ID: "e2", ToolUseID: "call1", Seq: 1, Stream: "stdout", Chunk: "line one\n"},
				{Type: protocol.ToolOutputDelta, ID: "e3", ToolUseID: "call1", Seq: 2, Stream: "stdout", Chunk: "line two\n"},
				{Type: protocol.ToolResult, ID: "e4", ToolUseID: "call1", Status: "completed", DurationMs: &dur},
			},
			wantStatus: "completed",
			wantOutput: "line one\nline two\n",
			wantView:   []string{"⚙ Bash", "line one", "line two", "completed"},
		},
		{
			name: "errored",
			events: []protocol.SessionToolEvent{
				{Type: protocol.ToolStart, ID: "e1", ToolUseID: "call1", ToolName: "Read"},
				{Type: protocol.ToolProgress, ID: "e2", ToolUseID: "call1", Chunk: "reading"},
				{Type: protocol.ToolResult, ID: "e3", ToolUseID: "call1", Status: "errored"},
			},
			wantStatus: "errored",
			wantView:   []string{"⚙ Read", "errored"},
		},
		{
			name: "result of a call whose start was missed",
			events: []protocol.SessionToolEvent{
				{Type: protocol.ToolResult, ID: "e3", ToolUseID: "call1", Status: "completed"},
			},
			wantStatus: "completed",
			wantView:   []string{"completed"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := running(t)
			var frames []any
			for _, ev := range tc.events {
				frames = append(frames, toolEvent(ev))
			}
			h.push(frames...)
			if len(h.m.entries) != 1 || h.m.entries[0].kind != entryTool {
				t.Fatalf("entries %v", kinds(h.m.entries))
			}
			card := h.m.entries[0].tool
			if card.status != tc.wantStatus || card.output != tc.wantOutput {
				t.Fatalf("card %+v", card)
			}
			v := h.m.View()
			for _, want := range tc.wantView {
				if !strings.Contains(v, want) {
					t.Fatalf("view lacks %q:\n%s", want, v)
				}
			}
		})
	}
}

func TestTerminalProjectionReloadsTheTranscript(t *testing.T) {
	h, be := running(t, userMsg("u1", "t1", "question"))
	be.mu.Lock()
	be.pageSize = 2 // the reload reads several pages
	be.mu.Unlock()
	h.push(
		delta(protocol.DeltaText, "t1", "a1", "streamed "),
		toolEvent(protocol.SessionToolEvent{Type: protocol.ToolStart, ID: "e1", ToolUseID: "call1", ToolName: "Bash"}),
		toolEvent(protocol.SessionToolEvent{Type: protocol.ToolResult, ID: "e2", ToolUseID: "call1", Status: "completed"}),
		delta(protocol.DeltaText, "t1", "a2", "answer"),
	)
	if got, want := kinds(h.m.entries), []string{"user:u1", "assistant:a1", "tool:call1", "assistant:a2"}; !slices.Equal(got, want) {
		t.Fatalf("live entries %v, want %v", got, want)
	}
	// The host records the turn; the terminal projection makes the view
	// follow the record.
	be.setTranscript("s1", []protocol.TranscriptMessage{
		userMsg("u1", "t1", "question"),
		assistantMsg("a1", "t1", "streamed "),
		{MessageID: "call1", TurnID: "t1", Role: protocol.TranscriptRoleTool, Part: 1, ToolUseID: "call1", ToolName: "Bash",
			Status: "completed", Output: "recorded output", Truncated: false},
		assistantMsg("a2", "t1", "answer, "),
		{MessageID: "a2", TurnID: "t1", Role: protocol.TranscriptRoleAssistant, Part: 2, Text: "\n\n- in full"},
	})
	calls := get(be, func() int { return be.pageCalls })
	h.push(projection(snapshot("s1", 2, turn("s1", "t1", protocol.TurnCompleted))))

	if got := get(be, func() int { return be.pageCalls }); got != calls+3 {
		t.Fatalf("the reload read %d pages, want 3", got-calls)
	}
	if got, want := kinds(h.m.entries), []string{"user:u1", "assistant:a1", "tool:call1", "assistant:a2"}; !slices.Equal(got, want) {
		t.Fatalf("reloaded entries %v, want %v", got, want)
	}
	for _, e := range h.m.entries {
		if e.live {
			t.Fatalf("entry %s still live after the reload", e.key())
		}
	}
	if got := h.m.entries[3].text; got != "answer, \n\n- in full" {
		t.Fatalf("split message joined as %q", got)
	}
	v := h.m.View()
	// The record is shown as rendered markdown (a list item gets a bullet).
	if !strings.Contains(v, "recorded output") || !strings.Contains(v, "• in full") || strings.Contains(v, "- in full") {
		t.Fatalf("view does not show the rendered record:\n%s", v)
	}
	if !strings.Contains(v, "turn completed") {
		t.Fatalf("status line lacks the turn status:\n%s", v)
	}
}

func TestEnterStartsSteersOrFollowsUp(t *testing.T) {
	t.Run("idle starts a turn", func(t *testing.T) {
		be := newFakeBackend()
		be.addSession(summary("s1", "first"), snapshot("s1", 1, turn("s1", "t0", protocol.TurnCompleted)))
		h := newHarness(t, be, Options{ResumeSessionID: "s1"})
		h.attached()
		h.typ("hello there")
		h.key(tea.KeyEnter)
		h.until("turn.start", func() bool { return !h.m.sending })
		started := get(be, func() []protocol.TurnStartInput { return slices.Clone(be.started) })
		if len(started) != 1 || started[0].SessionID != "s1" || started[0].Content.Text != "hello there" || started[0].TurnID == "" || started[0].TurnID == "t0" {
			t.Fatalf("turn.start calls %+v", started)
		}
		if n := len(get(be, func() []protocol.TurnMessageSubmitInput { return be.submitted })); n != 0 {
			t.Fatalf("%d submits when idle", n)
		}
		if h.m.input.Value() != "" {
			t.Fatalf("input not cleared: %q", h.m.input.Value())
		}
		if !strings.Contains(h.m.View(), "hello there") {
			t.Fatalf("the sent message is not shown:\n%s", h.m.View())
		}
	})
	for _, tc := range []struct {
		name string
		tabs int
		want protocol.MessagePlacement
	}{
		{"running steers", 0, protocol.PlacementCurrentTurn},
		{"tab queues a follow-up", 1, protocol.PlacementNextTurn},
		{"tab twice steers again", 2, protocol.PlacementCurrentTurn},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, be := running(t)
			for range tc.tabs {
				h.key(tea.KeyTab)
			}
			h.typ("also this")
			h.key(tea.KeyEnter)
			h.until("turn.message.submit", func() bool { return !h.m.sending })
			sub := get(be, func() []protocol.TurnMessageSubmitInput { return slices.Clone(be.submitted) })
			if len(sub) != 1 {
				t.Fatalf("%d submits", len(sub))
			}
			s := sub[0]
			if s.Placement != tc.want || s.Content.Text != "also this" || s.SessionID != "s1" || s.OriginHostEpoch != be.epoch || s.MessageID == "" {
				t.Fatalf("submit %+v", s)
			}
			if n := len(get(be, func() []protocol.TurnStartInput { return be.started })); n != 0 {
				t.Fatalf("%d turn starts while running", n)
			}
		})
	}
}

func TestFailedStartRestoresTheMessage(t *testing.T) {
	be := newFakeBackend()
	be.addSession(summary("s1", "first"), snapshot("s1", 1, nil))
	be.startErr = errors.New("session_busy")
	h := newHarness(t, be, Options{ResumeSessionID: "s1"})
	h.attached()
	h.typ("retry me")
	h.key(tea.KeyEnter)
	h.until("the failure", func() bool { return !h.m.sending })
	if h.m.input.Value() != "retry me" || len(h.m.entries) != 1 || h.m.entries[0].kind != entryNote || !h.m.noticeErr {
		t.Fatalf("input %q entries %v notice %q", h.m.input.Value(), kinds(h.m.entries), h.m.notice)
	}
	// The error stays in the transcript after the next key.
	h.typ("!")
	if v := h.m.View(); !strings.Contains(v, "start turn: session_busy") {
		t.Fatalf("the error left the transcript:\n%s", v)
	}
}

func TestQueuedMessagesAreShown(t *testing.T) {
	h, _ := running(t)
	s := snapshot("s1", 2, turn("s1", "t1", protocol.TurnRunning))
	s.Queue.Steering = []protocol.MessageQueueEntrySnapshot{{EntryID: "q1", MessageID: "m1", Content: protocol.MessageContent{Text: "look at foo"},
		Placement: protocol.PlacementCurrentTurn, State: protocol.MessageInFlight}}
	s.Queue.Followup = []protocol.MessageQueueEntrySnapshot{{EntryID: "q2", MessageID: "m2", Content: protocol.MessageContent{Text: "then bar"},
		Placement: protocol.PlacementNextTurn, State: protocol.MessageQueued}}
	h.push(projection(s))
	v := h.m.View()
	for _, want := range []string{"steer: look at foo (delivering)", "next turn: then bar", "queue 2"} {
		if !strings.Contains(v, want) {
			t.Fatalf("view lacks %q:\n%s", want, v)
		}
	}
}

func permission(id string, remember bool) protocol.InteractionSnapshot {
	cwd := "/work/s1"
	return protocol.InteractionSnapshot{
		SchemaVersion: 1, InteractionID: id, SessionID: "s1", TurnID: "t1", RunID: "run-t1", Revision: 1,
		Status: protocol.InteractionStatusPending,
		Request: protocol.InteractionRequest{Kind: protocol.InteractionKindPermission, ToolUseID: "call-" + id, Prompt: protocol.ToolPermissionPrompt{
			ToolName: "Bash", Category: protocol.ToolCategoryShellUnsafe, Reason: protocol.PermissionReasonShellDangerous,
			Review: protocol.CommandReview{Command: "rm -rf build", Cwd: &cwd}, RememberForTurnAllowed: remember,
		}},
	}
}

func waiting(pending ...protocol.InteractionSnapshot) protocol.ProjectionFrame {
	s := snapshot("s1", 2, turn("s1", "t1", protocol.TurnWaitingForUser))
	s.Interactions.Pending = pending
	return projection(s)
}

func TestApprovalKeysAnswerThePermission(t *testing.T) {
	tests := []struct {
		name     string
		remember bool
		keys     string
		want     *protocol.InteractionAnswer // nil: no answer
	}{
		{"y allows", true, "y", &protocol.InteractionAnswer{Kind: "permission", Decision: "allow"}},
		{"n denies", true, "n", &protocol.InteractionAnswer{Kind: "permission", Decision: "deny"}},
		{"a allows for the turn", true, "a", &protocol.InteractionAnswer{Kind: "permission", Decision: "allow", RememberForTurn: true}},
		{"a is refused when remembering is not allowed", false, "a", nil},
		{"other keys are swallowed", true, "xq", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, be := running(t)
			h.push(waiting(permission("i1", tc.remember)))
			v := h.m.View()
			for _, want := range []string{"Permission needed", "Bash", "shell_unsafe", "$ rm -rf build", "cwd: /work/s1", "[y] allow"} {
				if !strings.Contains(v, want) {
					t.Fatalf("card lacks %q:\n%s", want, v)
				}
			}
			if strings.Contains(v, "[a] allow for the rest of the turn") != tc.remember {
				t.Fatalf("allow-for-turn offered = %v:\n%s", !tc.remember, v)
			}
			for _, r := range tc.keys {
				h.typ(string(r))
			}
			if tc.want == nil {
				if h.m.prompt == nil || h.m.input.Value() != "" || h.m.quitting {
					t.Fatalf("prompt %v input %q quit %v", h.m.prompt, h.m.input.Value(), h.m.quitting)
				}
				if n := len(get(be, func() []protocol.InteractionAnswerInput { return be.answers })); n != 0 {
					t.Fatalf("%d answers", n)
				}
				return
			}
			h.until("the answer", func() bool { return len(get(be, func() []protocol.InteractionAnswerInput { return be.answers })) == 1 })
			got := get(be, func() protocol.InteractionAnswerInput { return be.answers[0] })
			if got.InteractionID != "i1" || got.Answer.Kind != tc.want.Kind || got.Answer.Decision != tc.want.Decision || got.Answer.RememberForTurn != tc.want.RememberForTurn {
				t.Fatalf("answer %+v, want %+v", got, tc.want)
			}
			if h.m.prompt != nil {
				t.Fatal("the prompt is still shown after answering")
			}
			// The same projection again does not bring the answered prompt back.
			h.push(waiting(permission("i1", tc.remember)))
			if h.m.prompt != nil {
				t.Fatal("an answered prompt came back")
			}
		})
	}
}

func TestQuestionPromptPicksAnOptionPerQuestion(t *testing.T) {
	h, be := running(t)
	q := protocol.InteractionSnapshot{
		SchemaVersion: 1, InteractionID: "q1", SessionID: "s1", TurnID: "t1", RunID: "run-t1", Revision: 1,
		Status: protocol.InteractionStatusPending,
		Request: protocol.InteractionRequest{Kind: protocol.InteractionKindQuestion, ToolUseID: "ask1", Questions: []protocol.InteractionQuestion{
			{Question: "Which language?", Options: []protocol.InteractionOption{{Label: "Go"}, {Label: "Rust", Description: "memory safe"}}},
			{Question: "Tabs or spaces?", Options: []protocol.InteractionOption{{Label: "tabs"}, {Label: "spaces"}, {Label: "both"}}},
			{Question: "Anything else?", Options: []protocol.InteractionOption{{Label: "yes"}, {Label: "no"}}},
		}},
	}
	h.push(waiting(q))
	if v := h.m.View(); !strings.Contains(v, "Which language?") || !strings.Contains(v, "2) Rust — memory safe") {
		t.Fatalf("first question not shown:\n%s", v)
	}
	h.typ("2")
	if v := h.m.View(); !strings.Contains(v, "Tabs or spaces?") || !strings.Contains(v, "Question 2 of 3") {
		t.Fatalf("second question not shown:\n%s", v)
	}
	h.typ("7") // no such option
	h.typ("3")
	h.typ("s")
	h.until("the answer", func() bool { return len(get(be, func() []protocol.InteractionAnswerInput { return be.answers })) == 1 })
	got := get(be, func() protocol.InteractionAnswerInput { return be.answers[0] })
	if got.InteractionID != "q1" || got.Answer.Kind != protocol.InteractionKindQuestion || len(got.Answer.Answers) != 3 ||
		*got.Answer.Answers[0] != "Rust" || *got.Answer.Answers[1] != "both" || got.Answer.Answers[2] != nil {
		t.Fatalf("answer %+v", got)
	}
}

func TestStopAndQuitKeys(t *testing.T) {
	for _, tc := range []struct {
		key        tea.KeyType
		secondQuit bool
	}{{tea.KeyEsc, false}, {tea.KeyCtrlC, true}} {
		t.Run("stop with "+tc.key.String(), func(t *testing.T) {
			h, be := running(t)
			h.key(tc.key)
			h.key(tc.key) // a second press while stopping sends nothing more
			if h.m.quitting != tc.secondQuit {
				t.Fatalf("quitting %v after a second %s", h.m.quitting, tc.key)
			}
			h.until("turn.stop", func() bool { return !h.m.stopping })
			stopped := get(be, func() []protocol.TurnStopInput { return slices.Clone(be.stopped) })
			if len(stopped) != 1 || stopped[0] != (protocol.TurnStopInput{SessionID: "s1", TurnID: "t1", RunID: "run-t1"}) {
				t.Fatalf("turn.stop calls %+v", stopped)
			}
		})
	}
	t.Run("ctrl+d quits only with an empty input", func(t *testing.T) {
		h, _ := running(t)
		h.typ("ab")
		h.send(tea.KeyMsg{Type: tea.KeyLeft})
		h.key(tea.KeyCtrlD) // deletes "b"
		if h.m.quitting || h.m.input.Value() != "a" {
			t.Fatalf("quit %v input %q", h.m.quitting, h.m.input.Value())
		}
		h.key(tea.KeyBackspace)
		h.key(tea.KeyCtrlD)
		if !h.m.quitting {
			t.Fatal("ctrl+d on an empty input did not quit")
		}
	})
	t.Run("ctrl+c when idle clears, asks, then quits", func(t *testing.T) {
		be := newFakeBackend()
		h := newHarness(t, be, Options{Workspace: "/w"})
		h.typ("draft")
		h.key(tea.KeyCtrlC)
		if h.m.quitting || h.m.input.Value() != "" {
			t.Fatalf("quit %v input %q", h.m.quitting, h.m.input.Value())
		}
		h.key(tea.KeyCtrlC)
		if h.m.quitting || !strings.Contains(h.m.View(), "press Ctrl-C again to quit") {
			t.Fatalf("ctrl+c on an idle empty input did not ask first:\n%s", h.m.View())
		}
		h.key(tea.KeyCtrlC)
		if !h.m.quitting {
			t.Fatal("a second ctrl+c did not quit")
		}
	})
}

func TestFirstMessageCreatesTheSession(t *testing.T) {
	be := newFakeBackend()
	h := newHarness(t, be, Options{Workspace: "/home/me/project", PermissionMode: "ask"})
	if !strings.Contains(h.m.View(), "new session") {
		t.Fatalf("no new-session state:\n%s", h.m.View())
	}
	h.typ("first words")
	h.key(tea.KeyEnter)
	h.until("the turn to start", func() bool {
		return len(get(be, func() []protocol.TurnStartInput { return be.started })) == 1 && !h.m.sending
	})
	created := get(be, func() []protocol.SessionCreateInput { return slices.Clone(be.created) })
	if len(created) != 1 || created[0].Workspace.Path != "/home/me/project" || created[0].PermissionMode != "ask" {
		t.Fatalf("session.create %+v", created)
	}
	st := get(be, func() protocol.TurnStartInput { return be.started[0] })
	if st.SessionID != created[0].SessionID || st.Content.Text != "first words" {
		t.Fatalf("turn.start %+v", st)
	}
	if h.m.stream == nil || h.m.stream.(*fakeStream).sessionID != st.SessionID {
		t.Fatal("the new session is not subscribed")
	}
}

func TestSessionListSwitchesSessions(t *testing.T) {
	be := newFakeBackend()
	be.catalogPage = 1 // the listing reads every page
	be.addSession(summary("s1", "first"), snapshot("s1", 1, nil))
	be.addSession(summary("s2", "second"), snapshot("s2", 1, nil))
	be.setTranscript("s1", []protocol.TranscriptMessage{userMsg("u1", "t1", "from the first")})
	be.setTranscript("s2", []protocol.TranscriptMessage{userMsg("u2", "t2", "from the second")})
	h := newHarness(t, be, Options{ResumeSessionID: "s1"})
	first := h.attached()
	if !strings.Contains(h.m.View(), "from the first") {
		t.Fatalf("first transcript not shown:\n%s", h.m.View())
	}
	h.key(tea.KeyCtrlS)
	h.until("the session list", func() bool { return !h.m.list.loading })
	v := h.m.View()
	if !strings.Contains(v, "first") || !strings.Contains(v, "second") || !strings.Contains(v, "acme/m1") {
		t.Fatalf("list view:\n%s", v)
	}
	h.key(tea.KeyDown)
	h.key(tea.KeyEnter)
	h.until("the second session", func() bool {
		return h.m.stream != nil && h.m.stream.(*fakeStream).sessionID == "s2" && !h.m.loading
	})
	h.until("the first subscription to close", first.isClosed)
	v = h.m.View()
	if !strings.Contains(v, "from the second") || strings.Contains(v, "from the first") {
		t.Fatalf("view after switching:\n%s", v)
	}
}

func TestResumingAMissingSessionOpensTheList(t *testing.T) {
	be := newFakeBackend()
	be.addSession(summary("s1", "first"), snapshot("s1", 1, nil))
	h := newHarness(t, be, Options{ResumeSessionID: "nope"})
	h.until("the list", func() bool { return h.m.list.open && !h.m.list.loading })
	if !strings.Contains(h.m.notice, "nope does not exist") {
		t.Fatalf("notice %q", h.m.notice)
	}
}

func TestAnEndedSubscriptionIsReopened(t *testing.T) {
	h, be := running(t, userMsg("u1", "t1", "hi"))
	old := h.m.stream.(*fakeStream)
	h.push(protocol.ClosedFrame{Reason: protocol.CloseSlowConsumer})
	old.Close(h.ctx)
	h.until("a new subscription", func() bool {
		return h.m.stream != nil && h.m.stream != old && !h.m.loading
	})
	if n := len(get(be, func() []*fakeStream { return be.streams })); n != 2 {
		t.Fatalf("%d subscriptions opened", n)
	}
	if !strings.Contains(h.m.View(), "hi") {
		t.Fatalf("transcript lost:\n%s", h.m.View())
	}
}

// TestStatusLineShowsTheSandboxInForce reads the session's permissions and
// shows its mode and the sandbox its commands run in.
func TestStatusLineShowsTheSandboxInForce(t *testing.T) {
	for _, tc := range []struct {
		name      string
		mode      protocol.PermissionMode
		available bool
		want      string
	}{
		{"execute sandboxed", protocol.PermissionModeExecute, true, "execute · sandbox workspace-write"},
		{"explore reads only", protocol.PermissionModeExplore, true, "explore · sandbox read-only"},
		{"no landlock", protocol.PermissionModeAsk, false, "ask · sandbox unavailable"},
		{"bypass", protocol.PermissionModeBypass, true, "bypass · sandbox off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be := newFakeBackend()
			be.sandboxAvailable = tc.available
			s := summary("s1", "first")
			s.PermissionMode = tc.mode
			be.addSession(s, snapshot("s1", 1, nil))
			h := newHarness(t, be, Options{ResumeSessionID: "s1", Width: 200, Height: 30})
			h.until("the sandbox in the status line", func() bool { return strings.Contains(h.m.View(), tc.want) })
		})
	}
}
