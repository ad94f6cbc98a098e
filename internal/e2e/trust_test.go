package e2e_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/internal/modeltest"
	"github.com/maka-agent/maka/internal/proctest"
	"github.com/maka-agent/maka/internal/sandbox"
	"github.com/maka-agent/maka/protocol"
)

// The trust boundary, end to end: the fake model makes the hostile calls and
// the host is driven over its socket as any client would drive it.

// callsThenDone is a model that makes calls one at a time (the next once
// the previous result is back) and then answers "done".
func callsThenDone(calls ...modeltest.Call) func(*modeltest.Request) modeltest.Reply {
	return func(req *modeltest.Request) modeltest.Reply {
		n := len(req.ToolResultsSinceUser())
		if n < len(calls) {
			call := calls[n]
			return modeltest.Reply{Chunks: []modeltest.Chunk{{Call: &call}}}
		}
		return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "done"}}}
	}
}

// bashCall is a Bash call of command.
func bashCall(t *testing.T, id, command string) modeltest.Call {
	return modeltest.Call{ID: id, Name: "Bash", Arguments: args(t, map[string]any{"command": command})}
}

// lastResults returns the tool results the model received last.
func lastResults(t *testing.T, h *testHost) []modeltest.Message {
	t.Helper()
	seen := h.model.Seen()
	if len(seen) == 0 {
		t.Fatal("the model got no request")
	}
	return seen[len(seen)-1].ToolResultsSinceUser()
}

// runTurn starts a turn and waits for its end, answering nothing.
func runTurn(t *testing.T, h *testHost, sid, turnID, prompt string) []any {
	t.Helper()
	w := watch(t, h.conn, sid)
	startTurn(t, h.conn, sid, turnID, prompt)
	return w.untilTerminal(t, turnID)
}

// setPermissions calls session.permissions.set.
func setPermissions(t *testing.T, c *client.Conn, in protocol.SessionPermissionsSetInput) protocol.SessionPermissions {
	t.Helper()
	res, err := c.Call(opCtx(t), protocol.OpSessionPermissionsSet, in)
	if err != nil {
		t.Fatalf("session.permissions.set: %v", err)
	}
	return res.(protocol.SessionPermissions)
}

// pendingPrompts returns the prompts of the interactions that were ever
// pending in frames, in order, once each.
func pendingPrompts(frames []any) []protocol.InteractionSnapshot {
	seen := map[string]bool{}
	var out []protocol.InteractionSnapshot
	for _, f := range frames {
		p, ok := f.(protocol.ProjectionFrame)
		if !ok {
			continue
		}
		for _, in := range p.Snapshot.Interactions.Pending {
			if !seen[in.InteractionID] {
				seen[in.InteractionID] = true
				out = append(out, in)
			}
		}
	}
	return out
}

// Item 1: an approval remembered for the turn covers the exact command
// approved, not a command that shares its first 512 bytes, and not the same
// words split over two lines.
func TestRememberedApprovalCoversOnlyTheApprovedCall(t *testing.T) {
	outside := t.TempDir()
	long := "echo " + strings.Repeat("Z", 600) + " | tee /dev/null"
	escaped := filepath.Join(outside, "escaped")
	h := newHost(t, callsThenDone(
		bashCall(t, "c1", long+" && echo first"),
		bashCall(t, "c2", long+" ; touch "+escaped),
		bashCall(t, "c3", "echo a\ntouch "+escaped),
	))
	sid := "remember"
	createSession(t, h.conn, sid, protocol.PermissionModeAsk)
	setPermissions(t, h.conn, protocol.SessionPermissionsSetInput{SessionID: sid, Sandbox: protocol.SandboxOff})
	w := watch(t, h.conn, sid)
	startTurn(t, h.conn, sid, "turn-1", "go")
	answered := map[string]bool{}
	var prompts []string
	w.until(t, "the turn's end", func(frames []any) bool {
		for _, in := range pendingOf(frames) {
			if answered[in.InteractionID] {
				continue
			}
			answered[in.InteractionID] = true
			p, _ := in.Request.Prompt.(protocol.ToolPermissionPrompt)
			cmd, _ := p.Review.(protocol.CommandReview)
			prompts = append(prompts, cmd.Command)
			ans := protocol.InteractionAnswer{Kind: protocol.InteractionKindPermission, Decision: protocol.InteractionDecisionAllow, RememberForTurn: true}
			if len(prompts) > 1 {
				ans = answer(protocol.InteractionDecisionDeny)
			}
			go h.conn.AnswerInteraction(opCtx(t), protocol.InteractionAnswerInput{InteractionID: in.InteractionID, Answer: ans})
		}
		return len(terminals(frames, "turn-1")) > 0
	})
	if len(prompts) != 3 {
		t.Fatalf("%d prompts, want one for each command (%q)", len(prompts), prompts)
	}
	if _, err := os.Stat(escaped); !os.IsNotExist(err) {
		t.Fatalf("a command that was never approved ran: %v", err)
	}
	res := lastResults(t, h)
	if len(res) != 3 || !strings.Contains(res[0].Text(), "first") || !strings.Contains(res[1].Text(), "declined") {
		t.Fatalf("results %q", res)
	}
}

// Item 2: with the storage root inside the workspace, no tool hands the
// credential vault to the model, and the secret never reaches the record.
func TestHostFilesAreOutsideEveryWorkspace(t *testing.T) {
	home, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(home, ".config", "Maka")
	if err := os.MkdirAll(filepath.Dir(root), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "notes.txt"), []byte("api_key is kept elsewhere\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h := newHostAt(t, root, "openai-compatible", callsThenDone(
		modeltest.Call{ID: "c1", Name: "Read", Arguments: args(t, map[string]any{"path": ".config/Maka/credentials.json"})},
		modeltest.Call{ID: "c2", Name: "Read", Arguments: args(t, map[string]any{"path": root + "/credentials.json"})},
		modeltest.Call{ID: "c3", Name: "Grep", Arguments: args(t, map[string]any{"pattern": "sk-", "path": ".config/Maka"})},
		modeltest.Call{ID: "c4", Name: "Grep", Arguments: args(t, map[string]any{"pattern": "e2e-fake"})},
		modeltest.Call{ID: "c5", Name: "Glob", Arguments: args(t, map[string]any{"pattern": "**/credentials.json"})},
		modeltest.Call{ID: "c6", Name: "Glob", Arguments: args(t, map[string]any{"pattern": "*", "cwd": ".config/Maka"})},
	))
	sid := "vault"
	res, err := h.conn.Call(opCtx(t), protocol.OpSessionCreate, protocol.SessionCreateInput{
		SessionID: sid, Workspace: protocol.HostPathWorkspace(home), PermissionMode: protocol.PermissionModeExplore})
	if err != nil {
		t.Fatal(err, res)
	}
	runTurn(t, h, sid, "turn-1", "look around")
	results := lastResults(t, h)
	if len(results) != 6 {
		t.Fatalf("%d results", len(results))
	}
	for i, r := range results {
		text := r.Text()
		if strings.Contains(text, apiKey) || strings.Contains(text, "e2e-fake") {
			t.Errorf("result %d hands the secret to the model: %q", i+1, text)
		}
		if strings.Contains(text, "credentials.json") && i >= 4 {
			t.Errorf("Glob %d lists the host's files: %q", i+1, text)
		}
	}
	for _, i := range []int{0, 1, 2} {
		if !strings.Contains(results[i].Text(), "host") {
			t.Errorf("result %d does not say the path belongs to the host: %q", i+1, results[i].Text())
		}
	}
	for _, m := range transcript(t, h.conn, sid) {
		if strings.Contains(m.Output, apiKey) || strings.Contains(m.Text, apiKey) {
			t.Fatalf("the transcript holds the secret: %+v", m)
		}
	}
	if err := h.host.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"maka.db", "maka.db-wal"} {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(apiKey)) {
			t.Fatalf("%s holds the secret", name)
		}
	}
}

// Item 3: a FIFO (or any file that is not regular) is refused before it is
// opened, so the turn ends, and interrupting a session still answers.
func TestNonRegularFilesAreRefused(t *testing.T) {
	h := newHost(t, callsThenDone(
		modeltest.Call{ID: "c1", Name: "Read", Arguments: args(t, map[string]any{"path": "pipe"})},
		modeltest.Call{ID: "c2", Name: "Grep", Arguments: args(t, map[string]any{"pattern": "x", "path": "pipe"})},
		modeltest.Call{ID: "c3", Name: "Edit", Arguments: args(t, map[string]any{"path": "pipe", "old_string": "a", "new_string": "b"})},
		modeltest.Call{ID: "c4", Name: "Write", Arguments: args(t, map[string]any{"path": "pipe", "content": "x"})},
	))
	sid := "fifo"
	ws := createSession(t, h.conn, sid, protocol.PermissionModeBypass)
	if err := syscall.Mkfifo(filepath.Join(ws, "pipe"), 0o600); err != nil {
		t.Fatal(err)
	}
	frames := runTurn(t, h, sid, "turn-1", "read the pipe")
	if end := terminals(frames, "turn-1")[0].Snapshot.RootTurn; end.Status != protocol.TurnCompleted {
		t.Fatalf("turn ended %+v", end)
	}
	for i, r := range lastResults(t, h) {
		if !strings.Contains(r.Text(), "not a regular file") {
			t.Errorf("result %d: %q", i+1, r.Text())
		}
	}
	if fi, err := os.Lstat(filepath.Join(ws, "pipe")); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("the FIFO was replaced: %v %v", fi, err)
	}
}

// startedOutput reports whether a frame is the live output line
// "started" of the Bash call.
func startedOutput(frames []any) bool {
	for _, f := range frames {
		if e, ok := f.(protocol.EventFrame); ok && e.Event.Type == "tool_output_delta" && strings.Contains(e.Event.Chunk, "started") {
			return true
		}
	}
	return false
}

// noneLeft waits until no process carries marker: processes of other
// programs give no event when they end, so this polls, bounded by
// failAfter.
func noneLeft(t *testing.T, marker string) {
	t.Helper()
	deadline := time.Now().Add(failAfter)
	for {
		pids := proctest.Marked(t, marker)
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes %v outlived the call", pids)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Item 4: whatever a command forks, setsid's or daemonises dies with the
// call: when it returns, when the turn is stopped or interrupted, and when
// the host exits.
func TestBashProcessesDieWithTheCall(t *testing.T) {
	for _, end := range []string{"return", "stop", "interrupt", "host exit"} {
		t.Run(end, func(t *testing.T) {
			marker := "maka-e2e-escape-" + uuid.NewString()
			then := "sleep 1000"
			if end == "return" {
				then = "echo " + marker + "-done"
			}
			h := newHost(t, callsThenDone(bashCall(t, "c1", proctest.EscapingCommand(marker, then))))
			sid := "end-" + strings.ReplaceAll(end, " ", "-")
			createSession(t, h.conn, sid, protocol.PermissionModeBypass)
			w := watch(t, h.conn, sid)
			started := startTurn(t, h.conn, sid, "turn-1", "go")
			if end == "return" {
				w.untilTerminal(t, "turn-1")
				if pids := proctest.Marked(t, marker); len(pids) > 0 {
					t.Fatalf("processes %v outlived the call", pids)
				}
				if !strings.Contains(lastResults(t, h)[0].Text(), marker+"-done") {
					t.Fatalf("the command did not run to its end: %q", lastResults(t, h)[0].Text())
				}
				return
			}
			w.until(t, "every escaping process running", startedOutput)
			if n := len(proctest.Marked(t, marker)); n < proctest.Escapes {
				t.Fatalf("%d escaping processes run, want %d", n, proctest.Escapes)
			}
			switch end {
			case "stop":
				if _, err := h.conn.StopTurn(opCtx(t), protocol.TurnStopInput{SessionID: sid, TurnID: "turn-1", RunID: started.RunID}); err != nil {
					t.Fatal(err)
				}
				w.untilTerminal(t, "turn-1")
			case "interrupt":
				if _, err := h.conn.InterruptTurn(opCtx(t), protocol.TurnInterruptInput{OriginHostEpoch: h.conn.HostEpoch(), SessionID: sid,
					InterruptID: "i1", TurnID: "turn-1", RunID: started.RunID}); err != nil {
					t.Fatal(err)
				}
				w.untilTerminal(t, "turn-1")
			case "host exit":
				if err := h.host.Stop(); err != nil {
					t.Fatal(err)
				}
			}
			noneLeft(t, marker)
		})
	}
}

// Item 5: refusals and paths read as written.
func TestRefusalsAreNotRedacted(t *testing.T) {
	long := "/" + strings.Repeat("task-management-dashboard-service/", 4) + "0123456789abcdef0123456789abcdef01234567"
	h := newHost(t, callsThenDone(
		modeltest.Call{ID: "c1", Name: "Read", Arguments: args(t, map[string]any{"path": "/etc/passwd"})},
		modeltest.Call{ID: "c2", Name: "Read", Arguments: args(t, map[string]any{"path": long})},
	))
	createSession(t, h.conn, "redact", protocol.PermissionModeBypass)
	runTurn(t, h, "redact", "turn-1", "go")
	res := lastResults(t, h)
	if len(res) != 2 {
		t.Fatalf("results %q", res)
	}
	if got := res[0].Text(); strings.Contains(got, "[REDACTED]") || !strings.Contains(got, "/etc/passwd") {
		t.Errorf("Read /etc/passwd: %q", got)
	}
	if got := res[1].Text(); strings.Contains(got, "[REDACTED]") {
		t.Errorf("a long path was redacted: %q", got)
	}
}

// Item 6: rules are the session's durable policy, decided by the host for
// every client: a rule set by a client that has gone still allows its
// command, a deny rule refuses even in bypass, and root rules apply to
// every session.
func TestRulesAreDecidedByTheHost(t *testing.T) {
	h := newHost(t, callsThenDone(
		bashCall(t, "c1", "touch allowed.txt"),
		modeltest.Call{ID: "c2", Name: "Read", Arguments: args(t, map[string]any{"path": "allowed.txt"})},
	))
	sid := "rules"
	ws := createSession(t, h.conn, sid, protocol.PermissionModeAsk)
	setter := h.dial()
	got := setPermissions(t, setter, protocol.SessionPermissionsSetInput{SessionID: sid,
		AddRules: []protocol.PermissionRule{{Effect: "allow", Rule: "Bash(touch allowed.txt)"}}})
	if len(got.Rules) != 1 || got.Rules[0].Rule != "Bash(touch allowed.txt)" || got.PermissionMode != protocol.PermissionModeAsk {
		t.Fatalf("permissions %+v", got)
	}
	setter.Close()
	frames := runTurn(t, h, sid, "turn-1", "touch it")
	if p := pendingPrompts(frames); len(p) != 0 {
		t.Fatalf("a rule-allowed call prompted: %+v", p)
	}
	if _, err := os.Stat(filepath.Join(ws, "allowed.txt")); err != nil {
		t.Fatalf("the allowed command did not run: %v", err)
	}

	// A root deny rule wins over bypass in every session.
	if _, err := h.conn.Call(opCtx(t), protocol.OpRootPermissionsSet, protocol.RootPermissionsSetInput{
		ReplaceRules: true, Rules: []protocol.PermissionRule{{Effect: "deny", Rule: "Read(*.txt)"}}}); err != nil {
		t.Fatal(err)
	}
	other := "rules-bypass"
	ows := createSession(t, h.conn, other, protocol.PermissionModeBypass)
	if err := os.WriteFile(filepath.Join(ows, "allowed.txt"), []byte("secret words"), 0o600); err != nil {
		t.Fatal(err)
	}
	runTurn(t, h, other, "turn-1", "read it")
	res := lastResults(t, h)
	if len(res) != 2 || strings.Contains(res[1].Text(), "secret words") || !strings.Contains(res[1].Text(), "deny Read(*.txt)") {
		t.Fatalf("results %q", res)
	}
	q, err := h.conn.Call(opCtx(t), protocol.OpSessionPermissionsQuery, protocol.SessionPermissionsQueryInput{SessionID: other})
	if err != nil {
		t.Fatal(err)
	}
	if p := q.(protocol.SessionPermissions); len(p.RootRules) != 1 || len(p.Rules) != 0 || p.PermissionMode != protocol.PermissionModeBypass {
		t.Fatalf("query %+v", p)
	}
	// A rule that does not parse is refused with the reason.
	_, err = h.conn.Call(opCtx(t), protocol.OpSessionPermissionsSet, protocol.SessionPermissionsSetInput{SessionID: sid,
		AddRules: []protocol.PermissionRule{{Effect: "allow", Rule: "Bash(a; b:*)"}}})
	var oe *client.OperationError
	if !client.IsCode(err, protocol.ErrInvalidRequest) || !errors.As(err, &oe) || !strings.Contains(oe.Message, "simple command") {
		t.Fatalf("invalid rule: %v", err)
	}
}

// Item 7: read-only commands run in explore; others are refused with the
// reason and the mode that would run them.
func TestExploreRunsReadOnlyCommands(t *testing.T) {
	h := newHost(t, callsThenDone(
		bashCall(t, "c1", "ls"),
		bashCall(t, "c2", "pwd && cat notes.txt | wc -l"),
		bashCall(t, "c3", "rm notes.txt"),
		bashCall(t, "c4", "ls > listing.txt"),
	))
	sid := "explore"
	ws := createSession(t, h.conn, sid, string(protocol.PermissionModeExplore))
	if err := os.WriteFile(filepath.Join(ws, "notes.txt"), []byte("one\ntwo\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	frames := runTurn(t, h, sid, "turn-1", "look")
	if p := pendingPrompts(frames); len(p) != 0 {
		t.Fatalf("explore prompted: %+v", p)
	}
	res := lastResults(t, h)
	if len(res) != 4 {
		t.Fatalf("results %q", res)
	}
	if !strings.Contains(res[0].Text(), "notes.txt") || !strings.Contains(res[1].Text(), ws) || !strings.Contains(res[1].Text(), "2") {
		t.Errorf("read-only commands: %q / %q", res[0].Text(), res[1].Text())
	}
	for _, r := range res[2:] {
		if text := r.Text(); !strings.Contains(text, "explore") || !strings.Contains(text, "ask mode") {
			t.Errorf("refusal without its reason and remedy: %q", text)
		}
	}
	if _, err := os.Stat(filepath.Join(ws, "notes.txt")); err != nil {
		t.Fatal("explore removed a file")
	}
	if _, err := os.Stat(filepath.Join(ws, "listing.txt")); !os.IsNotExist(err) {
		t.Fatal("explore wrote a file")
	}
}

// outsideTemp is a fresh directory outside the temporary directory (which
// sandboxed commands may write), under the home directory, removed when
// the test ends.
func outsideTemp(t *testing.T) string {
	t.Helper()
	home, err := os.UserHomeDir()
	if err != nil {
		t.Skipf("no home directory: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(home, ".cache"), 0o700); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(filepath.Join(home, ".cache"), "maka-e2e-outside-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// Item 8: in execute mode a sandboxed command runs without a prompt and
// cannot write outside the workspace; leaving the sandbox asks, once.
func TestExecuteRunsSandboxedCommands(t *testing.T) {
	st := sandbox.Status()
	t.Logf("sandbox on this machine: available=%v ABI=%d %s", st.Available, st.ABI, st.Reason)
	if !st.Available {
		t.Skipf("landlock unavailable: %s", st.Reason)
	}
	outside := outsideTemp(t)
	h := newHost(t, callsThenDone(
		bashCall(t, "c1", "touch inside.txt && echo made"),
		bashCall(t, "c2", "touch "+filepath.Join(outside, "escaped.txt")),
		modeltest.Call{ID: "c3", Name: "Bash", Arguments: args(t, map[string]any{"command": "touch " + filepath.Join(outside, "asked.txt"), "sandbox": false})},
	))
	sid := "execute"
	ws := createSession(t, h.conn, sid, protocol.PermissionModeExecute)
	w := watch(t, h.conn, sid)
	startTurn(t, h.conn, sid, "turn-1", "go")
	var prompts []protocol.InteractionSnapshot
	w.until(t, "the turn's end", func(frames []any) bool {
		for _, in := range pendingOf(frames) {
			if len(prompts) == 0 || prompts[len(prompts)-1].InteractionID != in.InteractionID {
				prompts = append(prompts, in)
				go h.conn.AnswerInteraction(opCtx(t), protocol.InteractionAnswerInput{InteractionID: in.InteractionID, Answer: answer(protocol.InteractionDecisionAllow)})
			}
		}
		return len(terminals(frames, "turn-1")) > 0
	})
	if len(prompts) != 1 {
		t.Fatalf("%d prompts, want one (leaving the sandbox)", len(prompts))
	}
	if p, ok := prompts[0].Request.Prompt.(protocol.SandboxEscalationPrompt); !ok || !strings.Contains(p.Command, "asked.txt") || p.Cwd != ws {
		t.Fatalf("prompt %#v", prompts[0].Request.Prompt)
	}
	if _, err := os.Stat(filepath.Join(ws, "inside.txt")); err != nil {
		t.Fatalf("the sandboxed command did not write its workspace: %v", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "escaped.txt")); !os.IsNotExist(err) {
		t.Fatalf("a sandboxed command wrote outside the workspace: %v", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "asked.txt")); err != nil {
		t.Fatalf("the approved escalation did not run: %v", err)
	}
}

// A sandboxed command cannot reach the host's socket (Landlock does not
// refuse a connect by path on this kernel; the host refuses the peer), so
// it cannot answer its own approvals; an unsandboxed command can.
func TestSandboxedCommandsCannotTalkToTheHost(t *testing.T) {
	st := sandbox.Status()
	if !st.Available {
		t.Skipf("landlock unavailable: %s", st.Reason)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var endpoint string
	h := newHost(t, func(req *modeltest.Request) modeltest.Reply {
		cmd := fmt.Sprintf("%s=%s %s", dialEnv, endpoint, self)
		return callsThenDone(bashCall(t, "c1", cmd))(req)
	})
	endpoint = h.host.Kernel.Endpoint()
	for _, tc := range []struct {
		mode, want string
	}{
		{protocol.PermissionModeExecute, "refused"},
		{protocol.PermissionModeBypass, "accepted"},
	} {
		sid := "dial-" + tc.mode
		createSession(t, h.conn, sid, tc.mode)
		runTurn(t, h, sid, "turn-1", "dial")
		res := lastResults(t, h)
		if len(res) != 1 || !strings.Contains(res[0].Text(), tc.want) {
			t.Fatalf("%s: %q, want %s", tc.mode, res, tc.want)
		}
	}
}

// A deny Read rule protects the file's contents from every tool: Read, a
// sandboxed `cat`, and Grep and Glob of an enclosing directory (they skip
// it).
func TestDenyReadRuleProtectsContents(t *testing.T) {
	st := sandbox.Status()
	if !st.Available {
		t.Skipf("landlock unavailable: %s", st.Reason)
	}
	h := newHost(t, callsThenDone(
		modeltest.Call{ID: "c1", Name: "Read", Arguments: args(t, map[string]any{"path": "secrets/token.txt"})},
		bashCall(t, "c2", "cat secrets/token.txt; cat notes.txt"),
		modeltest.Call{ID: "c3", Name: "Grep", Arguments: args(t, map[string]any{"pattern": "VALUE|notes"})},
		modeltest.Call{ID: "c4", Name: "Glob", Arguments: args(t, map[string]any{"pattern": "**"})},
	))
	sid := "deny-read"
	ws := createSession(t, h.conn, sid, protocol.PermissionModeExecute)
	if err := os.Mkdir(filepath.Join(ws, "secrets"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"secrets/token.txt": "TOPSECRET-VALUE\n", "notes.txt": "plain notes\n"} {
		if err := os.WriteFile(filepath.Join(ws, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	setPermissions(t, h.conn, protocol.SessionPermissionsSetInput{SessionID: sid,
		AddRules: []protocol.PermissionRule{{Effect: "deny", Rule: "Read(secrets/**)"}}})
	runTurn(t, h, sid, "turn-1", "read")
	res := lastResults(t, h)
	if len(res) != 4 {
		t.Fatalf("results %q", res)
	}
	for i, r := range res {
		if strings.Contains(r.Text(), "TOPSECRET") || i >= 2 && strings.Contains(r.Text(), "token.txt") {
			t.Errorf("result %d reads the denied file: %q", i+1, r.Text())
		}
	}
	if !strings.Contains(res[1].Text(), "plain notes") || !strings.Contains(res[2].Text(), "notes.txt") || !strings.Contains(res[3].Text(), "notes.txt") {
		t.Errorf("the tools could not read what no rule denies: %q", res[1:])
	}
}
