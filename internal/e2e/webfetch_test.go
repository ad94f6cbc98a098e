package e2e_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/maka-agent/maka/internal/modeltest"
	"github.com/maka-agent/maka/protocol"
)

// WebFetch over the real socket: a page on this machine is refused by
// default, with the rule that would allow it; once a session rule allows
// the host the page's Markdown reaches the model's next request, without a
// prompt; in ask mode without a rule the approval prompt shows the URL.
func TestWebFetchReachesTheModelOnlyWhenARuleAllowsTheHost(t *testing.T) {
	var hits atomic.Int64
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<html><body><h1>Changelog</h1><p>Version <code>4.2</code> adds <a href="/faq">the FAQ</a>.</p></body></html>`)
	}))
	t.Cleanup(page.Close)
	url := page.URL + "/changelog"
	h := newHost(t, callsThenDone(modeltest.Call{ID: "fetch", Name: "WebFetch",
		Arguments: args(t, map[string]any{"url": url, "prompt": "Which version?"})}))

	sid := "web"
	createSession(t, h.conn, sid, protocol.PermissionModeExecute)
	runTurn(t, h, sid, "turn-1", "read the changelog")
	res := lastResults(t, h)
	if len(res) != 1 || !strings.Contains(res[0].Text(), "127.0.0.1 is a loopback address") ||
		!strings.Contains(res[0].Text(), "WebFetch(domain:127.0.0.1)") || strings.Contains(res[0].Text(), "Changelog") {
		t.Fatalf("the model received %q", res)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("%d requests reached the page", n)
	}

	setPermissions(t, h.conn, protocol.SessionPermissionsSetInput{SessionID: sid,
		AddRules: []protocol.PermissionRule{{Effect: "allow", Rule: "WebFetch(domain:127.0.0.1)"}}})
	setPermissions(t, h.conn, protocol.SessionPermissionsSetInput{SessionID: sid, PermissionMode: protocol.PermissionModeAsk})
	frames := runTurn(t, h, sid, "turn-2", "read it again")
	if p := pendingPrompts(frames); len(p) != 0 {
		t.Fatalf("a rule-allowed fetch prompted: %+v", p)
	}
	res = lastResults(t, h)
	if len(res) != 1 {
		t.Fatalf("the model received %d results", len(res))
	}
	got := res[0].Text()
	for _, want := range []string{"# Changelog", "`4.2`", "[the FAQ](" + page.URL + "/faq)", "Which version?"} {
		if !strings.Contains(got, want) {
			t.Errorf("the model's request lacks %q:\n%s", want, got)
		}
	}
	if n := hits.Load(); n != 1 {
		t.Fatalf("%d requests reached the page, want 1", n)
	}

	// Without the rule, ask mode asks, and the review shows the URL.
	other := "web-ask"
	createSession(t, h.conn, other, protocol.PermissionModeAsk)
	w := watch(t, h.conn, other)
	startTurn(t, h.conn, other, "turn-1", "read the changelog")
	frames = w.until(t, "pending approval", func(frames []any) bool { return len(pendingOf(frames)) == 1 })
	pending := pendingOf(frames)[0]
	prompt, ok := pending.Request.Prompt.(protocol.ToolPermissionPrompt)
	if !ok || prompt.ToolName != "WebFetch" || prompt.Category != protocol.ToolCategoryWebRead {
		t.Fatalf("prompt %+v", pending.Request.Prompt)
	}
	if r, ok := prompt.Review.(protocol.WebReview); !ok || r.TargetKind != "url" || r.Target != url {
		t.Fatalf("review %+v", prompt.Review)
	}
	if _, err := h.conn.AnswerInteraction(opCtx(t), protocol.InteractionAnswerInput{InteractionID: pending.InteractionID,
		Answer: answer(protocol.InteractionDecisionAllow)}); err != nil {
		t.Fatal(err)
	}
	w.untilTerminal(t, "turn-1")
	// An approval is not a rule: the host is still refused.
	if res := lastResults(t, h); len(res) != 1 || !strings.Contains(res[0].Text(), "loopback") {
		t.Fatalf("the model received %q", res)
	}
	if n := hits.Load(); n != 1 {
		t.Fatalf("%d requests reached the page, want 1", n)
	}
}
