package tui

import (
	"bytes"
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/maka-agent/maka/protocol"
)

func filePrompt(id string, review protocol.PathReview) protocol.InteractionSnapshot {
	it := permission(id, true)
	tool := "Write"
	if review.Operation == "edit" {
		tool = "Edit"
	}
	it.Request.Prompt = protocol.ToolPermissionPrompt{ToolName: tool, Category: protocol.ToolCategoryFileWrite,
		Reason: protocol.PermissionReasonForCategory(protocol.ToolCategoryFileWrite), Review: review, RememberForTurnAllowed: true}
	return it
}

func TestWriteAndEditApprovalsShowWhatTheyWrite(t *testing.T) {
	h, _ := running(t)
	h.push(waiting(filePrompt("w1", protocol.PathReview{Operation: "write", Path: "hello.go",
		Content: &protocol.ReviewLinesPreview{Lines: []string{"package hello", "", "func Hi() {}"}, Bytes: 28}})))
	v := h.m.View()
	for _, want := range []string{"write hello.go", "content (28 bytes):", "package hello", "func Hi() {}", "[y] allow"} {
		if !strings.Contains(v, want) {
			t.Fatalf("the Write card lacks %q:\n%s", want, v)
		}
	}
	h.typ("y")
	h.push(waiting(filePrompt("e1", protocol.PathReview{Operation: "edit", Path: "main.go",
		OldString: &protocol.ReviewLinesPreview{Lines: []string{"func main() {", "\tprintln(1)", "}"}, Bytes: 26},
		NewString: &protocol.ReviewLinesPreview{Lines: []string{"func main() {", "\tprintln(2)", "}"}, Bytes: 26}})))
	v = h.m.View()
	for _, want := range []string{"edit main.go", "--- main.go", "+++ main.go", "@@ -1,3 +1,3 @@", " func main() {", "-\tprintln(1)", "+\tprintln(2)"} {
		if !strings.Contains(v, strings.ReplaceAll(want, "\t", "    ")) {
			t.Fatalf("the Edit card lacks %q:\n%s", want, v)
		}
	}
}

func TestUnifiedDiff(t *testing.T) {
	got := unifiedDiff([]string{"a", "b", "c", "d"}, []string{"a", "x", "c", "d", "e"})
	want := []string{"@@ -1,4 +1,5 @@", " a", "-b", "+x", " c", " d", "+e"}
	if !slices.Equal(got, want) {
		t.Fatalf("diff %q, want %q", got, want)
	}
	if got := unifiedDiff(nil, []string{"new"}); !slices.Equal(got, []string{"@@ -1,0 +1,1 @@", "+new"}) {
		t.Fatalf("diff of an empty old string %q", got)
	}
}

// TestToolCardsKeepTheirCommandAndExpand: a card keeps the command it ran
// after the transcript is reloaded at the end of the turn, and ctrl+o
// shows the whole output.
func TestToolCardsKeepTheirCommandAndExpand(t *testing.T) {
	h, be := running(t, userMsg("u1", "t1", "go"))
	var out strings.Builder
	for i := range 20 {
		out.WriteString("line " + string(rune('a'+i)) + "\n")
	}
	h.push(
		toolEvent(protocol.SessionToolEvent{Type: protocol.ToolStart, ID: "e1", ToolUseID: "c1", ToolName: "Bash", DisplayName: "ls -la /srv"}),
		toolEvent(protocol.SessionToolEvent{Type: protocol.ToolOutputDelta, ID: "e2", ToolUseID: "c1", Chunk: out.String()}),
		toolEvent(protocol.SessionToolEvent{Type: protocol.ToolResult, ID: "e3", ToolUseID: "c1", Status: protocol.TranscriptToolCompleted}),
	)
	be.setTranscript("s1", []protocol.TranscriptMessage{userMsg("u1", "t1", "go"),
		{MessageID: "c1", TurnID: "t1", Role: protocol.TranscriptRoleTool, Part: 1, ToolUseID: "c1", ToolName: "Bash",
			Status: protocol.TranscriptToolCompleted, Output: out.String()}})
	h.push(projection(snapshot("s1", 3, turn("s1", "t1", protocol.TurnCompleted))))
	v := h.m.View()
	if !strings.Contains(v, "⚙ Bash ls -la /srv") || !strings.Contains(v, "✓ completed") {
		t.Fatalf("the completed card lost its command:\n%s", v)
	}
	if strings.Contains(v, "line a") || !strings.Contains(v, "line t") || !strings.Contains(v, "ctrl+o expands") {
		t.Fatalf("the collapsed card shows:\n%s", v)
	}
	h.key(tea.KeyCtrlO)
	if v := h.m.View(); !strings.Contains(v, "line a") || !strings.Contains(v, "line t") {
		t.Fatalf("the expanded card shows:\n%s", v)
	}
	h.key(tea.KeyCtrlO)
	if v := h.m.View(); strings.Contains(v, "line a") {
		t.Fatalf("the card did not collapse:\n%s", v)
	}
}

func TestHelpOverlay(t *testing.T) {
	h := newHarness(t, newFakeBackend(), Options{Workspace: "/w", Width: 80, Height: 24})
	h.until("the size", func() bool { return h.m.height == 24 })
	h.typ("?")
	v := h.m.View()
	for _, want := range []string{"Keys", "Commands", "/compact", "/thinking LEVEL", "ctrl+o", "esc closes this help"} {
		if !strings.Contains(v, want) {
			t.Fatalf("help lacks %q:\n%s", want, v)
		}
	}
	if h.m.input.Value() != "" {
		t.Fatalf("? was typed: %q", h.m.input.Value())
	}
	h.key(tea.KeyEsc)
	if v := h.m.View(); strings.Contains(v, "esc closes this help") {
		t.Fatalf("esc did not close the help:\n%s", v)
	}
	// In a message, ? is a character.
	h.typ("why?")
	if h.m.help || h.m.input.Value() != "why?" {
		t.Fatalf("help %v input %q", h.m.help, h.m.input.Value())
	}
}

func TestSlashCompletion(t *testing.T) {
	be := newFakeBackend()
	be.models = Models{Default: ModelChoice{"acme", "m1"}, Connections: []ModelConnection{
		{Slug: "acme", Enabled: true, Models: []string{"m1", "m2"}}, {Slug: "off", Models: []string{"x"}}}}
	h := newHarness(t, be, Options{Workspace: "/w"})
	h.until("the models", func() bool { return h.m.models != nil })
	for _, tc := range []struct{ typed, want string }{
		{"/co", "/compact"},
		{"/mo", "/mode"}, // /mode and /model
		{"/th", "/thinking "},
		{"/thinking h", "/thinking high"},
		{"/mode ex", "/mode ex"}, // explore and execute
		{"/model a", "/model acme/m"},
		{"/model acme/m2", "/model acme/m2"},
		{"/zz", "/zz"},
	} {
		h.m.input.SetValue(tc.typed)
		h.key(tea.KeyTab)
		if got := h.m.input.Value(); got != tc.want {
			t.Fatalf("tab after %q: %q, want %q", tc.typed, got, tc.want)
		}
	}
	if h.m.followUp {
		t.Fatal("tab on a command toggled the send mode")
	}
	h.m.input.SetValue("/m")
	h.typ("o")
	if v := h.m.View(); !strings.Contains(v, "/mode MODE — set the permission mode") || !strings.Contains(v, "/model [CONNECTION/MODEL]") {
		t.Fatalf("no suggestions:\n%s", v)
	}
}

// TestSlashCommandsOnASession: /mode and /thinking change the session
// through session.permissions.set; /compact reports the token counts.
func TestSlashCommandsOnASession(t *testing.T) {
	be := newFakeBackend()
	be.addSession(summary("s1", "first"), snapshot("s1", 1, nil))
	be.compactResult = protocol.SessionCompactResult{Compacted: true, BeforeTokens: 12000, AfterTokens: 3400}
	h := newHarness(t, be, Options{ResumeSessionID: "s1"})
	h.attached()
	command := func(text string) {
		t.Helper()
		h.m.input.SetValue(text)
		h.key(tea.KeyEnter)
	}
	command("/mode execute")
	h.until("the mode", func() bool { return h.m.session.PermissionMode == protocol.PermissionModeExecute })
	command("/thinking high")
	h.until("the effort", func() bool { return h.m.perms != nil && h.m.perms.Thinking == "high" })
	sets := get(be, func() []protocol.SessionPermissionsSetInput { return slices.Clone(be.permSets) })
	if len(sets) != 2 || sets[0].SessionID != "s1" || sets[0].PermissionMode != "execute" || sets[0].Thinking != "" ||
		sets[1].Thinking != "high" || sets[1].PermissionMode != "" {
		t.Fatalf("permission sets %+v", sets)
	}
	v := h.m.View()
	for _, want := range []string{"execute", "thinking high", "thinking: high (from the next turn)"} {
		if !strings.Contains(v, want) {
			t.Fatalf("view lacks %q:\n%s", want, v)
		}
	}
	command("/compact")
	h.until("the compaction", func() bool { return !h.m.compacting })
	if got := get(be, func() []string { return be.compacts }); !slices.Equal(got, []string{"s1"}) {
		t.Fatalf("compacts %v", got)
	}
	if v := h.m.View(); !strings.Contains(v, "context compacted (12000 → 3400 tokens)") {
		t.Fatalf("no compaction line:\n%s", v)
	}
	command("/mode yolo")
	if !h.m.noticeErr || !strings.Contains(h.m.View(), "/mode takes explore") {
		t.Fatalf("a bad mode: %q", h.m.notice)
	}
	command("/bogus")
	if !strings.Contains(h.m.notice, "unknown command /bogus") {
		t.Fatalf("unknown command: %q", h.m.notice)
	}
	if n := len(get(be, func() []protocol.TurnStartInput { return be.started })); n != 0 {
		t.Fatalf("a command started %d turns", n)
	}
	command("/new")
	if h.m.session != nil {
		t.Fatal("/new kept the session")
	}
	command("/quit")
	if !h.m.quitting {
		t.Fatal("/quit did not quit")
	}
}

// TestNewSessionSettings: /model, /thinking and /mode before the first
// message shape the session it creates, which is named after the message.
func TestNewSessionSettings(t *testing.T) {
	be := newFakeBackend()
	be.models = Models{Default: ModelChoice{"acme", "m1"}, Connections: []ModelConnection{{Slug: "acme", Enabled: true, Models: []string{"m1", "m2"}}}}
	h := newHarness(t, be, Options{Workspace: "/w"})
	h.until("the models", func() bool { return h.m.models != nil })
	if v := h.m.View(); !strings.Contains(v, "acme/m1") {
		t.Fatalf("the status line does not name the default model:\n%s", v)
	}
	for _, c := range []string{"/model", "/model acme/m2", "/thinking low", "/mode explore"} {
		h.m.input.SetValue(c)
		h.key(tea.KeyEnter)
	}
	v := h.m.View()
	for _, want := range []string{"acme/m1 (default)", "model of the new session: acme/m2", "acme/m2 · explore · thinking low"} {
		if !strings.Contains(v, want) {
			t.Fatalf("view lacks %q:\n%s", want, v)
		}
	}
	h.m.input.SetValue("  Fix the   flaky test\nin the parser, please")
	h.key(tea.KeyEnter)
	h.until("the session", func() bool { return len(get(be, func() []protocol.SessionCreateInput { return be.created })) == 1 })
	c := get(be, func() protocol.SessionCreateInput { return be.created[0] })
	if c.Name != "Fix the flaky test" || c.Thinking != "low" || c.PermissionMode != "explore" ||
		c.ModelTarget == nil || *c.ModelTarget != (protocol.ModelTarget{Kind: protocol.ModelTargetExplicit, ConnectionSlug: "acme", Model: "m2"}) {
		t.Fatalf("created %+v", c)
	}
}

// TestStatusLineShowsARunningTurnAndNotices: a spinner with the elapsed
// time while the turn runs, and a host notice once it arrives.
func TestStatusLineShowsARunningTurnAndNotices(t *testing.T) {
	h, _ := running(t)
	start := time.Now()
	h.m.runSince = start
	h.m.now = func() time.Time { return start.Add(75 * time.Second) }
	h.push(protocol.NoticeFrame{SessionID: "s1", Notice: protocol.SessionNotice{Kind: protocol.NoticeContextCompacted,
		TurnID: "t1", BeforeTokens: 9000, AfterTokens: 2000, Message: "context compacted: 9000 → 2000 tokens"}})
	status := strings.SplitN(h.m.View(), "\n", 2)[0]
	for _, want := range []string{"turn running 1m15s", "context compacted: 9000 → 2000 tokens", "acme/m1", "ask"} {
		if !strings.Contains(status, want) {
			t.Fatalf("status line lacks %q: %q", want, status)
		}
	}
	if !strings.Contains(h.m.View(), "context compacted (9000 → 2000 tokens)") {
		t.Fatalf("the notice is not in the transcript:\n%s", h.m.View())
	}
	if !h.m.spinning {
		t.Fatal("no spinner while the turn runs")
	}
}

// TestFailedTurnExplainsItself: a failed turn leaves its class and what
// to do in the transcript, and later keys do not remove it.
func TestFailedTurnExplainsItself(t *testing.T) {
	h, _ := running(t, userMsg("u1", "t1", "hi"))
	ft := turn("s1", "t1", protocol.TurnFailed)
	ft.FailureClass = "auth"
	h.push(projection(snapshot("s1", 3, ft)))
	h.typ("x")
	h.key(tea.KeyBackspace)
	v := h.m.View()
	for _, want := range []string{"the turn failed (auth)", "maka connection set-key acme"} {
		if !strings.Contains(v, want) {
			t.Fatalf("view lacks %q:\n%s", want, v)
		}
	}
}

// TestRunRefusesInputThatIsNotATerminal: input from a file that is not a
// terminal fails at once, and nothing is drawn.
func TestRunRefusesInputThatIsNotATerminal(t *testing.T) {
	in, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	var out bytes.Buffer
	err = Run(context.Background(), Options{Backend: newFakeBackend(), Workspace: "/w", In: in, Out: &out})
	if !errors.Is(err, ErrNotATerminal) || out.Len() != 0 {
		t.Fatalf("Run over /dev/null: %v, wrote %q", err, out.String())
	}
}

// TestSessionsCommandFiltersTheList: /sessions opens the list on the
// current session; / filters it by name and Enter opens the match.
func TestSessionsCommandFiltersTheList(t *testing.T) {
	be := newFakeBackend()
	for _, s := range []string{"alpha work", "beta chores", "gamma notes"} {
		id := strings.Fields(s)[0]
		be.addSession(summary(id, s), snapshot(id, 1, nil))
	}
	be.setTranscript("gamma", []protocol.TranscriptMessage{userMsg("u1", "t1", "from gamma")})
	h := newHarness(t, be, Options{ResumeSessionID: "beta"})
	h.attached()
	h.m.input.SetValue("/sessions")
	h.key(tea.KeyEnter)
	h.until("the list", func() bool { return h.m.list.open && !h.m.list.loading })
	v := h.m.View()
	for _, want := range []string{"Sessions", "alpha work", "• beta chores", "gamma notes", "3 sessions"} {
		if !strings.Contains(v, want) {
			t.Fatalf("list lacks %q:\n%s", want, v)
		}
	}
	if it := h.m.list.l.SelectedItem().(sessionItem); it.s.SessionID != "beta" {
		t.Fatalf("the list starts on %s", it.s.SessionID)
	}
	h.typ("/")
	h.typ("gam")
	h.until("the filter", func() bool { return len(h.m.list.l.VisibleItems()) == 1 })
	h.key(tea.KeyEnter) // accept the filter
	if v := h.m.View(); strings.Contains(v, "alpha work") || !strings.Contains(v, "gamma notes") {
		t.Fatalf("filtered list:\n%s", v)
	}
	h.key(tea.KeyEnter)
	h.until("gamma", func() bool { return h.m.stream != nil && h.m.stream.(*fakeStream).sessionID == "gamma" && !h.m.loading })
	if v := h.m.View(); !strings.Contains(v, "from gamma") {
		t.Fatalf("after opening:\n%s", v)
	}
}
