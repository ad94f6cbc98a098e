package e2e_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/internal/modeltest"
	"github.com/maka-agent/maka/internal/turns"
	"github.com/maka-agent/maka/protocol"
)

// compactWindow is the context window the fake model's connection declares
// in the compaction tests: about 3,000 of its tokens go to the system
// prompt and the tools, and every turn below adds about 2,000.
const compactWindow = 16000

// toolTokens estimates the tool declarations of every turn's request,
// which the fake model does not see.
const toolTokens = 2500

// summaryRequest reports whether req is the host's request for a summary:
// the fake recognises it by its instruction text.
func summaryRequest(req *modeltest.Request) bool {
	return strings.Contains(req.LastUser(), "Write a summary of the conversation above")
}

// requestTokens estimates the tokens of what req carries (bytes/3, as the
// host estimates), its tool declarations aside.
func requestTokens(req *modeltest.Request) int {
	n := 0
	for _, m := range req.Messages {
		n += len(m.Text()) + 16
		for _, c := range m.ToolCalls {
			n += len(c.Function.Arguments) + len(c.Function.Name) + 16
		}
	}
	return n / 3
}

// bigPrompt is the user message of turn i: a marker and about 2 KB.
func bigPrompt(i int) string {
	return fmt.Sprintf("turn-%02d-marker: ", i) + strings.Repeat("please keep this in mind. ", 160)
}

type compactModel struct {
	mu        sync.Mutex
	summaries []*modeltest.Request
	turns     []*modeltest.Request
	fail      bool // answer summary requests with an error
}

func (m *compactModel) reply(req *modeltest.Request) modeltest.Reply {
	m.mu.Lock()
	defer m.mu.Unlock()
	if summaryRequest(req) {
		m.summaries = append(m.summaries, req)
		if m.fail {
			return modeltest.Reply{Status: 400, Body: `{"error":{"message":"summaries are refused here","type":"invalid_request_error"}}`}
		}
		return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: fmt.Sprintf("SUMMARY-%d: the user sent long marked turns and wants them kept in mind.", len(m.summaries))}}}
	}
	m.turns = append(m.turns, req)
	marker, _, _ := strings.Cut(req.LastUser(), ":")
	return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "noted " + marker + ". " + strings.Repeat("an answer of some length. ", 80)}}}
}

func (m *compactModel) seen() (summaries, turns []*modeltest.Request) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]*modeltest.Request(nil), m.summaries...), append([]*modeltest.Request(nil), m.turns...)
}

func noticesOf(frames []any) []protocol.SessionNotice {
	var out []protocol.SessionNotice
	for _, f := range frames {
		if n, ok := f.(protocol.NoticeFrame); ok && n.Notice.Kind != protocol.NoticeTurnUsage {
			out = append(out, n.Notice)
		}
	}
	return out
}

// noticeFrames counts the notice frames among frames, of every kind.
func noticeFrames(frames []any) int {
	n := 0
	for _, f := range frames {
		if _, ok := f.(protocol.NoticeFrame); ok {
			n++
		}
	}
	return n
}

// runTurns runs turns from..to of sid, each to its completion.
func runTurns(t *testing.T, c *client.Conn, w *watcher, sid string, from, to int) {
	t.Helper()
	for i := from; i <= to; i++ {
		id := fmt.Sprintf("turn-%d", i)
		startTurn(t, c, sid, id, bigPrompt(i))
		w.untilTerminal(t, id)
		if got := queryTurn(t, c, sid, id); got.Status != protocol.TurnCompleted {
			t.Fatalf("%s: %+v", id, got)
		}
	}
}

// TestCompactionEndToEnd: a session longer than the model's small context
// window is compacted by a summary the same model writes; it keeps
// working, each later request stays under the window and starts with the
// summary instead of the oldest turns, subscribers that asked for notices
// are told, and the transcript still holds every message.
func TestCompactionEndToEnd(t *testing.T) {
	m := &compactModel{}
	h := newHostWindow(t, "", "openai-compatible", compactWindow, m.reply)
	c := h.conn
	createSession(t, c, "long", protocol.PermissionModeBypass)
	w := watch(t, c, "long", client.WithNotices())
	plain := watch(t, c, "long") // a v0 subscriber
	const n = 12
	runTurns(t, c, w, "long", 1, n)

	summaries, reqs := m.seen()
	if len(summaries) == 0 {
		t.Fatalf("no summary was requested in %d turns", n)
	}
	first := summaries[0]
	if len(first.Tools) != 0 || !strings.Contains(first.LastUser(), "turn-01-marker") {
		t.Fatalf("the summary request has %d tools and covers %q…", len(first.Tools), first.LastUser()[:200])
	}
	// A later summary starts from the previous one: replay honours the
	// recorded compaction instead of summarising the whole record again.
	if len(summaries) < 2 || len(summaries) > n/2 {
		t.Fatalf("%d summary requests in %d turns", len(summaries), n)
	}
	for i, s := range summaries[1:] {
		if !strings.Contains(s.LastUser(), fmt.Sprintf("SUMMARY-%d", i+1)) || strings.Contains(s.LastUser(), "turn-01-marker") {
			t.Fatalf("summary request %d does not start from summary %d: %.300q", i+2, i+1, s.LastUser())
		}
	}
	notices := noticesOf(w.snapshot())
	if len(notices) != len(summaries) {
		t.Fatalf("%d notices for %d summaries; frames: %s", len(notices), len(summaries), describe(w.snapshot()))
	}
	for _, nt := range notices {
		if nt.Kind != protocol.NoticeContextCompacted || nt.AfterTokens >= nt.BeforeTokens || nt.BeforeTokens*100 <= compactWindow*80 ||
			nt.Message != fmt.Sprintf("context compacted (%d → %d tokens)", nt.BeforeTokens, nt.AfterTokens) {
			t.Fatalf("notice %+v", nt)
		}
	}
	if got := noticeFrames(plain.snapshot()); got != 0 {
		t.Fatalf("a v0 subscriber got %d notices", got)
	}
	// Every request of a turn stays under the window; those after the
	// first compaction carry a summary and none of the first turn.
	compacted := false
	for i, req := range reqs {
		if tokens := requestTokens(req) + toolTokens; tokens >= compactWindow {
			t.Errorf("request %d carries about %d tokens, over the window of %d", i, tokens, compactWindow)
		}
		body := ""
		for _, msg := range req.Messages {
			body += msg.Text() + "\n"
		}
		if strings.Contains(body, turns.SummaryNote) {
			compacted = true
			if !strings.Contains(body, "SUMMARY-") || strings.Contains(body, "turn-01-marker") {
				t.Errorf("request %d after compaction: %.300q", i, body)
			}
		} else if compacted {
			t.Errorf("request %d has no summary after a compaction", i)
		}
	}
	if !compacted {
		t.Fatal("no request carried a summary")
	}
	last := reqs[len(reqs)-1]
	if !strings.HasPrefix(last.LastUser(), fmt.Sprintf("turn-%02d-marker", n)) {
		t.Fatalf("last request asks %.40q", last.LastUser())
	}
	// The transcript keeps every original message.
	msgs := transcript(t, c, "long")
	users, answers := textsOf(msgs, protocol.TranscriptRoleUser), textsOf(msgs, protocol.TranscriptRoleAssistant)
	if len(users) != n || len(answers) != n {
		t.Fatalf("transcript has %d user and %d assistant messages, want %d each", len(users), len(answers), n)
	}
	for i, u := range users {
		if u != bigPrompt(i+1) || !strings.HasPrefix(answers[i], fmt.Sprintf("noted turn-%02d-marker.", i+1)) {
			t.Fatalf("transcript message %d: %.40q / %.40q", i, u, answers[i])
		}
	}
}

// TestCompactionFallbackEndToEnd: when the model refuses the summary, the
// oldest exchanges are left out as before, the notice says so, and the
// turn completes.
func TestCompactionFallbackEndToEnd(t *testing.T) {
	m := &compactModel{fail: true}
	h := newHostWindow(t, "", "openai-compatible", compactWindow, m.reply)
	c := h.conn
	createSession(t, c, "refused", protocol.PermissionModeBypass)
	w := watch(t, c, "refused", client.WithNotices())
	runTurns(t, c, w, "refused", 1, 7)

	summaries, reqs := m.seen()
	notices := noticesOf(w.snapshot())
	if len(summaries) == 0 || len(notices) == 0 {
		t.Fatalf("%d summary requests, notices %+v", len(summaries), notices)
	}
	for _, nt := range notices {
		if nt.Kind != protocol.NoticeContextCompactionFailed || !strings.Contains(nt.Message, "left out") || nt.AfterTokens >= nt.BeforeTokens {
			t.Fatalf("notice %+v", nt)
		}
	}
	last := reqs[len(reqs)-1]
	if !strings.HasPrefix(last.Messages[1].Text(), strings.TrimSpace(turns.OmittedNote)) {
		t.Fatalf("the request after a failed summary starts %.120q", last.Messages[1].Text())
	}
	if got := len(textsOf(transcript(t, c, "refused"), protocol.TranscriptRoleUser)); got != 7 {
		t.Fatalf("transcript has %d user messages", got)
	}
}

// TestCompactOnDemandEndToEnd: session.compact summarises all but the
// newest exchange of an idle session, answers the token counts, is refused
// while a turn runs, and the next turn sends the summary.
func TestCompactOnDemandEndToEnd(t *testing.T) {
	m := &compactModel{}
	hold := make(chan struct{})
	h := newHost(t, func(req *modeltest.Request) modeltest.Reply {
		if strings.HasPrefix(req.LastUser(), "hold") {
			return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "holding"}, {Wait: hold}}}
		}
		return m.reply(req)
	})
	c := h.conn
	createSession(t, c, "manual", protocol.PermissionModeBypass)
	w := watch(t, c, "manual", client.WithNotices())
	runTurns(t, c, w, "manual", 1, 3)

	res, err := c.CompactSession(opCtx(t), protocol.SessionCompactInput{SessionID: "manual"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Compacted || res.AfterTokens >= res.BeforeTokens || res.AfterTokens == 0 {
		t.Fatalf("session.compact %+v", res)
	}
	w.until(t, "the compaction notice", func(frames []any) bool {
		ns := noticesOf(frames)
		return len(ns) == 1 && ns[0].Kind == protocol.NoticeContextCompacted && ns[0].TurnID == "" &&
			ns[0].BeforeTokens == res.BeforeTokens && ns[0].AfterTokens == res.AfterTokens
	})
	summaries, _ := m.seen()
	if len(summaries) != 1 || !strings.Contains(summaries[0].LastUser(), "turn-02-marker") || strings.Contains(summaries[0].LastUser(), "turn-03-marker") {
		t.Fatalf("%d summary requests", len(summaries))
	}
	runTurns(t, c, w, "manual", 4, 4)
	_, reqs := m.seen()
	body := ""
	for _, msg := range reqs[len(reqs)-1].Messages {
		body += msg.Text() + "\n"
	}
	if !strings.Contains(body, "SUMMARY-1") || strings.Contains(body, "turn-01-marker") || !strings.Contains(body, "turn-03-marker") {
		t.Fatalf("the turn after session.compact sent %.300q", body)
	}

	startTurn(t, c, "manual", "turn-held", "hold on")
	w.until(t, "the held turn's text", hasText("turn-held", "holding"))
	if _, err := c.CompactSession(opCtx(t), protocol.SessionCompactInput{SessionID: "manual"}); !client.IsCode(err, protocol.ErrSessionBusy) {
		t.Fatalf("session.compact while a turn runs: %v", err)
	}
	close(hold)
	w.untilTerminal(t, "turn-held")
	if _, err := c.CompactSession(opCtx(t), protocol.SessionCompactInput{SessionID: "missing"}); !client.IsCode(err, protocol.ErrNotFound) {
		t.Fatalf("session.compact of a missing session: %v", err)
	}
}
