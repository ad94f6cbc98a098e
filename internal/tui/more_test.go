package tui

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/maka-agent/maka/protocol"
)

// TestAnotherClientsTurnIsShownLive attaches to an idle session in which
// another client then starts a turn: the new turn's user message comes from
// the transcript, its streamed text from the subscription, and a reload in
// the middle of the turn keeps what was streamed but not yet recorded.
func TestAnotherClientsTurnIsShownLive(t *testing.T) {
	be := newFakeBackend()
	be.addSession(summary("s1", "shared"), snapshot("s1", 1, turn("s1", "t1", protocol.TurnCompleted)))
	be.setTranscript("s1", []protocol.TranscriptMessage{userMsg("u1", "t1", "old question"), assistantMsg("a1", "t1", "old answer")})
	h := newHarness(t, be, Options{ResumeSessionID: "s1"})
	h.attached()

	be.setTranscript("s1", []protocol.TranscriptMessage{
		userMsg("u1", "t1", "old question"), assistantMsg("a1", "t1", "old answer"), userMsg("u2", "t2", "their question"),
	})
	now := snapshot("s1", 2, turn("s1", "t2", protocol.TurnRunning))
	be.mu.Lock()
	be.snapshots["s1"] = now
	be.mu.Unlock()
	h.push(projection(now))
	h.push(delta(protocol.DeltaText, "t2", "a2", "their "), delta(protocol.DeltaText, "t2", "a2", "answer"))
	if got, want := kinds(h.m.entries), []string{"user:u1", "assistant:a1", "user:u2", "assistant:a2"}; !slices.Equal(got, want) {
		t.Fatalf("entries %v, want %v", got, want)
	}
	// A reload while the turn runs (here: the subscription is re-opened)
	// keeps the streamed text the record does not hold yet.
	h.m.stream.(*fakeStream).Close(h.ctx)
	h.until("the re-opened subscription", func() bool {
		return h.m.stream != nil && !h.m.stream.(*fakeStream).isClosed() && !h.m.loading
	})
	if got, want := kinds(h.m.entries), []string{"user:u1", "assistant:a1", "user:u2", "assistant:a2"}; !slices.Equal(got, want) {
		t.Fatalf("entries after the reload %v, want %v", got, want)
	}
	if got := h.m.entries[3].text; got != "their answer" {
		t.Fatalf("streamed text after the reload %q", got)
	}
}

func TestMergeLive(t *testing.T) {
	live := func(kind entryKind, id, turnID, text string) *entry {
		return &entry{kind: kind, id: id, turnID: turnID, text: text, live: true}
	}
	tests := []struct {
		name    string
		loaded  []*entry
		current []*entry
		active  map[string]bool
		want    []string // key=text
	}{
		{
			name:    "finished turn: the record wins",
			loaded:  []*entry{{kind: entryAssistant, id: "a", turnID: "t", text: "full"}},
			current: []*entry{live(entryAssistant, "a", "t", "partial"), live(entryAssistant, "b", "t", "stray")},
			want:    []string{"assistant:a=full"},
		},
		{
			name:    "running turn keeps the longer live text and unrecorded entries",
			loaded:  []*entry{{kind: entryAssistant, id: "a", turnID: "t", text: "par"}},
			current: []*entry{live(entryAssistant, "a", "t", "partial"), live(entryThinking, "b", "t", "hmm")},
			active:  map[string]bool{"t": true},
			want:    []string{"assistant:a=partial", "thinking:b=hmm"},
		},
		{
			name:    "the local user message gives way to the recorded one",
			loaded:  []*entry{{kind: entryUser, id: "u", turnID: "t", text: "hi"}},
			current: []*entry{{kind: entryUser, id: "local-t", turnID: "t", text: "hi", live: true, local: true}},
			active:  map[string]bool{"t": true},
			want:    []string{"user:u=hi"},
		},
		{
			name:    "the local user message stays until recorded",
			current: []*entry{{kind: entryUser, id: "local-t", turnID: "t", text: "hi", live: true, local: true}},
			active:  map[string]bool{"t": true},
			want:    []string{"user:local-t=hi"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, e := range mergeLive(tc.loaded, tc.current, tc.active) {
				got = append(got, e.key()+"="+e.text)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestConnectionLossEndsTheProgram(t *testing.T) {
	be := newFakeBackend()
	h := newHarness(t, be, Options{Workspace: "/w"})
	close(be.done)
	h.until("the program to quit", func() bool { return h.m.quitting })
	if h.m.fatal == nil || !strings.Contains(h.m.fatal.Error(), "connection lost") {
		t.Fatalf("fatal %v", h.m.fatal)
	}
}

func TestEditor(t *testing.T) {
	runes := func(s string) tea.KeyMsg { return tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(s)} }
	k := func(t tea.KeyType) tea.KeyMsg { return tea.KeyMsg{Type: t} }
	e := newLook(io.Discard, "").newInput()
	for i, s := range []struct {
		key  tea.KeyMsg
		want string
	}{
		{runes("hello"), "hello"},
		{k(tea.KeySpace), "hello "},
		{runes("wörld"), "hello wörld"},
		{k(tea.KeyCtrlW), "hello "},
		{k(tea.KeyCtrlJ), "hello \n"},
		{runes("two"), "hello \ntwo"},
		{tea.KeyMsg{Type: tea.KeyEnter, Alt: true}, "hello \ntwo\n"},
		{tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("pasted\r\nlines\tx"), Paste: true}, "hello \ntwo\npasted\nlines    x"},
		{k(tea.KeyCtrlU), "hello \ntwo\npasted\n"},
		{k(tea.KeyBackspace), "hello \ntwo\npasted"},
	} {
		e.Update(s.key)
		if got := e.Value(); got != s.want {
			t.Fatalf("step %d (%v): %q, want %q", i, s.key, got, s.want)
		}
	}
	if e.Height() != 3 {
		t.Fatalf("a three-line message shows %d rows", e.Height())
	}
	// The box grew with the paste: its first line is still in view.
	if v := e.View(); !strings.HasPrefix(v, "> hello") || !strings.Contains(v, "pasted") {
		t.Fatalf("view %q", v)
	}
	e.Reset()
	if got := e.View(); !strings.Contains(got, "Message maka") || e.Height() != 1 {
		t.Fatalf("no placeholder, or the box did not shrink: %q", got)
	}
}

// TestInputHistory sends three messages and walks back and forth through
// them with Up and Down; the draft comes back after the newest; another
// session has its own history.
func TestInputHistory(t *testing.T) {
	h, _ := running(t)
	for _, msg := range []string{"first", "second\nline", "third"} {
		h.m.input.SetValue(msg)
		h.key(tea.KeyEnter)
		h.until("the message to be sent", func() bool { return !h.m.sending })
	}
	h.typ("draft")
	walk := []struct {
		key  tea.KeyType
		want string
	}{
		{tea.KeyUp, "third"},
		{tea.KeyUp, "second\nline"},
		{tea.KeyUp, "second\nline"}, // the cursor moves to the first line
		{tea.KeyUp, "first"},
		{tea.KeyUp, "first"},          // the oldest
		{tea.KeyDown, "second\nline"}, // the cursor is on its last line
		{tea.KeyDown, "third"},
		{tea.KeyDown, "draft"},
	}
	for i, w := range walk {
		h.key(w.key)
		if got := h.m.input.Value(); got != w.want {
			t.Fatalf("step %d (%s): %q, want %q", i, w.key, got, w.want)
		}
	}
	if !strings.Contains(h.m.View(), "draft") {
		t.Fatalf("the draft is not shown:\n%s", h.m.View())
	}
	// A new session starts with no history.
	h.m.input.Reset()
	h.key(tea.KeyCtrlN)
	h.key(tea.KeyUp)
	if got := h.m.input.Value(); got != "" {
		t.Fatalf("a new session recalled %q", got)
	}
}

func TestHistoryIsBounded(t *testing.T) {
	var hs histories
	for i := range maxHistorySessions + 5 {
		hist := hs.of(fmt.Sprint("s", i))
		for j := range maxHistoryEntries + 10 {
			hist.add(fmt.Sprint(j))
		}
		if len(hist.entries) != maxHistoryEntries || hist.entries[0] != "10" {
			t.Fatalf("history holds %d entries from %q", len(hist.entries), hist.entries[0])
		}
	}
	if len(hs.by) != maxHistorySessions || len(hs.order) != maxHistorySessions {
		t.Fatalf("%d histories kept", len(hs.by))
	}
}

func TestSanitize(t *testing.T) {
	tests := map[string]string{
		"plain\ntext":                    "plain\ntext",
		"\x1b[31mred\x1b[0m":             "red",
		"progress 10%\rprogress 100%\n":  "progress 100%\n",
		"tab\there":                      "tab    here",
		"bell\x07 and \x1b]0;title\x07.": "bell and .",
	}
	for in, want := range tests {
		if got := sanitize(in); got != want {
			t.Errorf("sanitize(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestAnswerFailureShowsThePromptAgain(t *testing.T) {
	h, _ := running(t)
	h.push(waiting(permission("i1", false)))
	h.m.answered["i1"] = true // as if answered; the host refused it
	h.send(answeredMsg{gen: h.m.gen, interactionID: "i1", err: errors.New("conflict")})
	if h.m.prompt == nil || h.m.prompt.it.InteractionID != "i1" || !h.m.noticeErr {
		t.Fatalf("prompt %v notice %q", h.m.prompt, h.m.notice)
	}
}

// TestEditorGrowsWithAPaste: a paste of several lines into an empty box
// grows it and shows the paste from its first line.
func TestEditorGrowsWithAPaste(t *testing.T) {
	e := newLook(io.Discard, "").newInput()
	e.SetValue("an earlier\nmessage")
	e.Reset()
	e.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("one\ntwo\nthree"), Paste: true})
	if v := e.View(); e.Height() != 3 || !strings.HasPrefix(v, "> one") || !strings.Contains(v, "three") {
		t.Fatalf("%d rows: %q", e.Height(), v)
	}
}
