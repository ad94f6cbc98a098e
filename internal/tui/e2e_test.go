package tui

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/internal/domain"
	"github.com/maka-agent/maka/internal/domaintest"
	llm "github.com/maka-agent/maka/internal/model"
	"github.com/maka-agent/maka/protocol"
)

// runHost starts a full host with the scripted model on a fresh storage
// root and returns a connection to it; everything is shut down when the
// test ends.
func runHost(t *testing.T, script string) *client.Conn {
	t.Helper()
	s, err := llm.ParseScript([]byte(script))
	if err != nil {
		t.Fatal(err)
	}
	return domaintest.Start(t, "", domain.Options{Script: s}).Connect(t, protocol.SurfaceTUI, 10*time.Second)
}

// syncBuffer is an output shared by the program's renderer and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// observer keeps the latest state a running program reported.
type observer struct {
	mu     sync.Mutex
	last   state
	notify chan struct{}
}

func newObserver() *observer { return &observer{notify: make(chan struct{}, 1)} }

func (o *observer) set(s state) {
	o.mu.Lock()
	o.last = s
	o.mu.Unlock()
	select {
	case o.notify <- struct{}{}:
	default:
	}
}

// wait returns the first reported state satisfying cond, or fails.
func (o *observer) wait(t *testing.T, what string, cond func(state) bool) state {
	t.Helper()
	s, ok := o.waitFor(cond)
	if !ok {
		t.Fatalf("timed out waiting for %s; last view:\n%s", what, s.view)
	}
	return s
}

func (o *observer) waitFor(cond func(state) bool) (state, bool) {
	deadline := time.NewTimer(waitLimit)
	defer deadline.Stop()
	for {
		o.mu.Lock()
		s := o.last
		o.mu.Unlock()
		if cond(s) {
			return s, true
		}
		select {
		case <-o.notify:
		case <-deadline.C:
			return s, false
		}
	}
}

// program is one Run of the interface driven through a pipe.
type program struct {
	t    *testing.T
	keys *io.PipeWriter
	out  *syncBuffer
	obs  *observer
	done chan error
}

func startProgram(t *testing.T, opts Options) *program {
	t.Helper()
	in, keys := io.Pipe()
	p := &program{t: t, keys: keys, out: &syncBuffer{}, obs: newObserver(), done: make(chan error, 1)}
	opts.In, opts.Out, opts.observe = in, p.out, p.obs.set
	opts.Width, opts.Height, opts.Inline = 100, 40, true
	go func() { p.done <- Run(context.Background(), opts) }()
	t.Cleanup(func() { keys.Close() })
	return p
}

// press types keys into the program.
func (p *program) press(s string) {
	p.t.Helper()
	if _, err := io.WriteString(p.keys, s); err != nil {
		p.t.Fatalf("typing %q: %v", s, err)
	}
}

// quit presses Ctrl-D and waits for Run to return.
func (p *program) quit() {
	p.t.Helper()
	p.press("\x04")
	select {
	case err := <-p.done:
		if err != nil {
			p.t.Fatalf("Run: %v", err)
		}
	case <-time.After(waitLimit):
		p.t.Fatal("the program did not quit")
	}
	p.keys.Close()
}

func texts(s state, kind entryKind) []string {
	var out []string
	for _, e := range s.entries {
		if e.kind == kind {
			out = append(out, e.text)
		}
	}
	return out
}

func workspace(t *testing.T) string {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestEndToEndStreamsAndResumes runs the interface against a real host:
// a typed prompt creates a session and a turn whose streamed answer is
// drawn; a second run resuming the session shows the same transcript.
func TestEndToEndStreamsAndResumes(t *testing.T) {
	const answer = "Hello from the scripted model."
	conn := runHost(t, `{"steps":[{"events":[
		{"thinking":"Greeting the user."},
		{"text":"Hello "},{"text":"from the "},{"text":"scripted model."}]}]}`)
	ws := workspace(t)

	p := startProgram(t, Options{Conn: conn, Workspace: ws, PermissionMode: "ask"})
	p.press("say hello")
	p.press("\r")
	done := p.obs.wait(t, "the streamed answer", func(s state) bool {
		return s.turnStatus == protocol.TurnCompleted && !s.busy && strings.Join(texts(s, entryAssistant), "") == answer
	})
	if got := texts(done, entryUser); len(got) != 1 || got[0] != "say hello" {
		t.Fatalf("user messages %q", got)
	}
	if got := texts(done, entryThinking); len(got) != 1 || got[0] != "Greeting the user." {
		t.Fatalf("thinking %q", got)
	}
	if !strings.Contains(done.view, answer) {
		t.Fatalf("view lacks the answer:\n%s", done.view)
	}
	sessionID := done.sessionID
	p.quit()
	if out := p.out.String(); !strings.Contains(out, answer) || !strings.Contains(out, "say hello") {
		t.Fatalf("the answer was not drawn; output:\n%q", out)
	}

	r := startProgram(t, Options{Conn: conn, Workspace: ws, ResumeSessionID: sessionID})
	again := r.obs.wait(t, "the resumed transcript", func(s state) bool {
		return s.sessionID == sessionID && s.attached && !s.busy && len(s.entries) > 0
	})
	if got := texts(again, entryUser); len(got) != 1 || got[0] != "say hello" {
		t.Fatalf("resumed user messages %q", got)
	}
	if got := strings.Join(texts(again, entryAssistant), ""); got != answer {
		t.Fatalf("resumed answer %q", got)
	}
	if !strings.Contains(again.view, answer) || !strings.Contains(again.view, "turn completed") {
		t.Fatalf("resumed view:\n%s", again.view)
	}
	r.quit()
	if out := r.out.String(); !strings.Contains(out, answer) {
		t.Fatalf("the resumed answer was not drawn; output:\n%q", out)
	}
}

// TestEndToEndApprovesABashCall answers a permission prompt with y: the
// command runs, its card completes and the turn finishes. It is skipped
// when the host denies the call without asking.
func TestEndToEndApprovesABashCall(t *testing.T) {
	conn := runHost(t, `{"steps":[
		{"events":[{"text":"Running it. "},{"toolCall":{"id":"call_touch","name":"Bash","input":{"command":"touch approved.txt"}}}]},
		{"events":[{"text":"It ran."}]}]}`)
	ws := workspace(t)
	p := startProgram(t, Options{Conn: conn, Workspace: ws, PermissionMode: "ask"})
	p.press("please run it")
	p.press("\r")

	card := func(s state) *entryState {
		for i := range s.entries {
			if e := &s.entries[i]; e.kind == entryTool && e.id == "call_touch" {
				return e
			}
		}
		return nil
	}
	s := p.obs.wait(t, "a permission prompt or the call's end", func(s state) bool {
		c := card(s)
		return s.prompt != nil || c != nil && c.toolStatus != toolRunning || s.turnStatus.Terminal()
	})
	if s.prompt == nil {
		p.quit()
		t.Skip("the host denied the Bash call without a pending interaction (no interaction authority)")
	}
	if s.prompt.Request.Kind != protocol.InteractionKindPermission {
		t.Fatalf("prompt %+v", s.prompt)
	}
	for _, want := range []string{"Permission needed", "Bash", "touch approved.txt", "[y] allow"} {
		if !strings.Contains(s.view, want) {
			t.Fatalf("the card lacks %q:\n%s", want, s.view)
		}
	}
	p.press("y")
	end := p.obs.wait(t, "the approved call to complete", func(s state) bool {
		c := card(s)
		return c != nil && c.toolStatus == protocol.TranscriptToolCompleted && s.turnStatus == protocol.TurnCompleted && !s.busy && s.prompt == nil
	})
	if got := strings.Join(texts(end, entryAssistant), ""); got != "Running it. It ran." {
		t.Fatalf("assistant text %q", got)
	}
	if _, err := os.Stat(filepath.Join(ws, "approved.txt")); err != nil {
		t.Fatalf("the approved command did not run: %v", err)
	}
	p.quit()
}

// TestEndToEndShowsTheModelsTasks runs a turn against a real host in which
// the scripted model creates two tasks and starts one: the task panel shows
// them as the host's ledger holds them, with no prompt in explore mode.
func TestEndToEndShowsTheModelsTasks(t *testing.T) {
	conn := runHost(t, `{"steps":[
		{"events":[{"toolCall":{"id":"c1","name":"task_create","input":{"subject":"Write the parser"}}}]},
		{"events":[{"toolCall":{"id":"c2","name":"task_create","input":{"subject":"Test the parser"}}}]},
		{"events":[{"toolCall":{"id":"c3","name":"task_update","input":{"taskRef":"T1","status":"in_progress"}}}]},
		{"events":[{"text":"Planned."}]}]}`)
	p := startProgram(t, Options{Conn: conn, Workspace: workspace(t), PermissionMode: "explore"})
	p.press("plan it")
	p.press("\r")
	s := p.obs.wait(t, "the task panel", func(s state) bool {
		return s.turnStatus == protocol.TurnCompleted && !s.busy && strings.Contains(s.view, "◐ T1 Write the parser")
	})
	if !strings.Contains(s.view, "Tasks: 2 open") || !strings.Contains(s.view, "○ T2 Test the parser") || s.prompt != nil {
		t.Fatalf("view:\n%s", s.view)
	}
	p.quit()
}

// TestEndToEndCommandsChangeTheSession runs /thinking, /mode and /compact
// against a real host: the host records the new effort and mode, and the
// compaction's answer is drawn.
func TestEndToEndCommandsChangeTheSession(t *testing.T) {
	conn := runHost(t, `{"steps":[{"events":[{"text":"First answer."}]}]}`)
	ws := workspace(t)
	p := startProgram(t, Options{Conn: conn, Workspace: ws, PermissionMode: "ask"})
	p.press("  name me\r")
	done := p.obs.wait(t, "the answer", func(s state) bool {
		return s.turnStatus == protocol.TurnCompleted && !s.busy && strings.Contains(s.view, "First answer.")
	})
	for _, c := range []struct{ command, shown string }{
		{"/thinking high", "thinking: high (from the next turn)"},
		{"/mode explore", "permission mode: explore (from the next turn)"},
		{"/compact", "context compacted ("},
	} {
		p.press(c.command + "\r")
		p.obs.wait(t, c.command, func(s state) bool {
			return strings.Contains(s.view, c.shown) || c.command == "/compact" && strings.Contains(s.view, "nothing to compact")
		})
	}
	p.obs.wait(t, "the compaction's notice to go", func(s state) bool { return !strings.Contains(s.view, "compacting the conversation") })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := conn.Call(ctx, protocol.OpSessionPermissionsQuery, protocol.SessionPermissionsQueryInput{SessionID: done.sessionID})
	if err != nil {
		t.Fatal(err)
	}
	perms := res.(protocol.SessionPermissions)
	if perms.Thinking != "high" || perms.PermissionMode != protocol.PermissionModeExplore {
		t.Fatalf("the host holds %+v", perms)
	}
	res, err = conn.Call(ctx, protocol.OpSessionCatalogQuery, protocol.SessionCatalogQueryInput{Kind: protocol.SessionCatalogGet, SessionID: done.sessionID})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.(protocol.SessionCatalogQueryResult).Session; got == nil || got.Name != "name me" {
		t.Fatalf("the session is named %+v", got)
	}
	p.quit()
}

// TestEndToEndStatusLineShowsUsage runs a two-step turn against a real
// host: while its Write call waits for approval the status line shows the
// first step's usage and the context held; once the turn ends, the whole
// turn's.
func TestEndToEndStatusLineShowsUsage(t *testing.T) {
	conn := runHost(t, `{"steps":[
		{"events":[{"toolCall":{"id":"call_w","name":"Write","input":{"path":"n.txt","content":"x"}}}],
		 "usage":{"input":12300,"output":845,"cacheRead":12000,"reasoning":100}},
		{"events":[{"text":"Written."}],"usage":{"input":13400,"output":20}}]}`)
	p := startProgram(t, Options{Conn: conn, Workspace: workspace(t), PermissionMode: "ask"})
	p.press("write it")
	p.press("\r")
	status := func(s state) string { return strings.SplitN(s.view, "\n", 2)[0] }
	s := p.obs.wait(t, "the prompt or the turn's end", func(s state) bool { return s.prompt != nil || s.turnStatus.Terminal() })
	if s.prompt == nil {
		p.quit()
		t.Skip("the host decided the Write call without asking")
	}
	s = p.obs.wait(t, "the first step's usage", func(s state) bool { return strings.Contains(status(s), "12.3k in · 845 out") })
	if !strings.Contains(status(s), "ctx 13.1k/128k") {
		t.Fatalf("status line lacks the context held: %q", status(s))
	}
	p.press("y")
	s = p.obs.wait(t, "the turn's usage", func(s state) bool {
		return s.turnStatus == protocol.TurnCompleted && strings.Contains(status(s), "25.7k in · 865 out")
	})
	if !strings.Contains(status(s), "ctx 13.4k/128k") || strings.Contains(s.view, "end_turn") {
		t.Fatalf("status line %q; view:\n%s", status(s), s.view)
	}
	p.quit()
}
