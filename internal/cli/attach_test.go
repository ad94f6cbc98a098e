package cli_test

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/maka-agent/maka/internal/modeltest"
	"github.com/maka-agent/maka/protocol"
)

// heldModel streams "before ", holds until release, then streams "after".
func heldModel(t *testing.T) (*modeltest.Server, func()) {
	t.Helper()
	hold := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(hold) }) }
	t.Cleanup(release)
	srv := modeltest.New(t, func(*modeltest.Request) modeltest.Reply {
		return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "before "}, {Wait: hold}, {Text: "after"}}}
	})
	return srv, release
}

func decodeLines(t *testing.T, lines []string) []map[string]any {
	t.Helper()
	return parseEvents(t, strings.Join(lines, "\n")+"\n")
}

func TestAttachFollowsARunningTurn(t *testing.T) {
	srv, release := heldModel(t)
	s := newSandbox(t)
	root := spawnedRoot(t)
	addFakeConnection(t, s, root, srv.BaseURL(), "sk")
	run := s.startLines("run", "--root", root, "--json", "go")
	started := run.until(t, "turn_started")
	run.until(t, "text")
	sessionID := started["sessionId"].(string)

	att := s.startLines("attach", sessionID, "--root", root, "--json", "--exit-after-turn")
	if ev := att.until(t, "attached"); ev["status"] != "running" {
		t.Fatalf("attached %v", ev)
	}
	if ev := att.until(t, "turn_started"); ev["turnId"] != started["turnId"] {
		t.Fatalf("attach follows turn %v, want %v", ev["turnId"], started["turnId"])
	}
	release()
	lines, code := att.rest(t)
	if code != 0 {
		t.Fatalf("attach exit %d, stderr %q", code, att.stderrText())
	}
	events := decodeLines(t, lines)
	var text strings.Builder
	for _, ev := range events {
		if ev["type"] == "text" {
			text.WriteString(ev["text"].(string))
		}
	}
	last := events[len(events)-1]
	// What the turn streamed before the attachment is replayed first.
	if text.String() != "before after" || last["type"] != "result" || last["status"] != "completed" || last["turnId"] != started["turnId"] {
		t.Fatalf("attach saw text %q, last %v", text.String(), last)
	}
	if _, code := run.rest(t); code != 0 {
		t.Fatalf("run exit %d, stderr %q", code, run.stderrText())
	}
}

// An attachment during a turn shows the turn from its beginning: the text
// and the tool call streamed while nobody watched, each once and in
// order, then the rest as it comes.
func TestAttachReplaysTheRunningTurn(t *testing.T) {
	hold := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(hold) }) }
	t.Cleanup(release)
	srv := modeltest.New(t, func(req *modeltest.Request) modeltest.Reply {
		if len(req.ToolResultsSinceUser()) == 0 {
			return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "before "}, {Text: "the tool. "},
				{Call: &modeltest.Call{ID: "call_1", Name: "Glob", Arguments: `{"pattern":"*.txt"}`}}}}
		}
		return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "middle "}, {Wait: hold}, {Text: "after"}}}
	})
	s := newSandbox(t)
	root := spawnedRoot(t)
	addFakeConnection(t, s, root, srv.BaseURL(), "sk")
	run := s.startLines("run", "--root", root, "--json", "go")
	started := run.until(t, "turn_started")
	sessionID := started["sessionId"].(string)
	for ev := run.until(t, "text"); ev["text"] != "middle "; ev = run.until(t, "text") {
	}

	att := s.startLines("attach", sessionID, "--root", root, "--json", "--exit-after-turn")
	// The replay comes before anything the model streams after it.
	var lines []string
	for {
		line := att.next(t)
		lines = append(lines, line)
		if strings.Contains(line, `"middle "`) {
			break
		}
	}
	release()
	rest, code := att.rest(t)
	if code != 0 {
		t.Fatalf("attach exit %d, stderr %q", code, att.stderrText())
	}
	var got []string
	var result map[string]any
	for _, ev := range decodeLines(t, append(lines, rest...)) {
		switch ev["type"] {
		case "text":
			if n := len(got); n > 0 && strings.HasPrefix(got[n-1], "text ") {
				got[n-1] += ev["text"].(string)
			} else {
				got = append(got, "text "+ev["text"].(string))
			}
		case "tool_start", "tool_result":
			got = append(got, fmt.Sprintf("%s %s %s %v", ev["type"], ev["toolUseId"], ev["toolName"], ev["status"]))
		case "turn_started":
			if ev["turnId"] != started["turnId"] {
				t.Fatalf("attach follows turn %v, want %v", ev["turnId"], started["turnId"])
			}
			got = append(got, "turn_started")
		case "result":
			result = ev
			got = append(got, "result "+ev["status"].(string))
		}
	}
	want := []string{
		"turn_started",
		"text before the tool. ",
		"tool_start call_1 Glob <nil>",
		"tool_result call_1 Glob completed",
		"text middle after",
		"result completed",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("attach showed\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if result["text"] != "before the tool. middle after" {
		t.Fatalf("result text %q", result["text"])
	}
	if _, code := run.rest(t); code != 0 {
		t.Fatalf("run exit %d, stderr %q", code, run.stderrText())
	}
}

func TestAttachWaitsForTheNextTurnAndDetaches(t *testing.T) {
	s := newSandbox(t)
	root := spawnedRoot(t)
	script := writeScript(t, echoScript)
	first := s.run("run", "--root", root, "--host-arg=--model-script="+script, "--json", "one")
	sessionID := parseEvents(t, first.stdout)[0]["sessionId"].(string)

	// Text mode: the assistant text on stdout, turn changes on stderr.
	att := s.startLines("attach", sessionID, "--root", root, "--exit-after-turn")
	follow := s.startLines("attach", sessionID, "--root", root, "--json")
	follow.until(t, "attached")
	// Both attachments subscribed before the turn: the JSON one says so;
	// the text one is subscribed once its own header is written.
	waitStderr(t, att, "attached to session "+sessionID)
	if r := s.run("run", "--root", root, "--session", sessionID, "two"); r.code != 0 || r.stdout != "scripted: two\n" {
		t.Fatalf("run = %d %q %q", r.code, r.stdout, r.stderr)
	}
	lines, code := att.rest(t)
	if code != 0 || strings.Join(lines, "\n") != "scripted: two" {
		t.Fatalf("attach = %d %q, stderr %q", code, lines, att.stderrText())
	}
	if !strings.Contains(att.stderrText(), "completed") {
		t.Errorf("attach stderr %q does not report the turn's end", att.stderrText())
	}
	// Without --exit-after-turn it keeps following until interrupted.
	if ev := follow.until(t, "result"); ev["status"] != "completed" {
		t.Fatalf("result %v", ev)
	}
	if err := follow.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if _, code := follow.rest(t); code != 0 {
		t.Fatalf("detach exit %d, want 0; stderr %q", code, follow.stderrText())
	}

	if r := s.run("attach", "missing-session", "--root", root); r.code != 1 || !strings.Contains(r.stderr, "maka sessions list") {
		t.Fatalf("attach to a missing session = %d %q", r.code, r.stderr)
	}
}

// waitStderr waits until the process's stderr contains want.
func waitStderr(t *testing.T, lp *lineProc, want string) {
	t.Helper()
	timer := time.NewTimer(turnTimeout)
	defer timer.Stop()
	for !strings.Contains(lp.stderrText(), want) {
		select {
		case <-lp.done:
			t.Fatalf("process ended before writing %q; stderr %q", want, lp.stderrText())
		case <-lp.stderrChanged():
		case <-timer.C:
			t.Fatalf("stderr %q never contained %q", lp.stderrText(), want)
		}
	}
}

func TestAttachShowsPendingApprovals(t *testing.T) {
	s := newSandbox(t)
	root := spawnedRoot(t)
	script := writeScript(t, toolScript)
	first := s.run("run", "--root", root, "--host-arg=--model-script="+script, "--permission-mode", "ask", "--json", "list")
	if first.code != 0 {
		t.Fatalf("run = %d %q", first.code, first.stderr)
	}
	sessionID := parseEvents(t, first.stdout)[0]["sessionId"].(string)

	// A turn started by another client waits for approval.
	conn, _, _ := connect(t, root)
	turn := startTextTurn(t, conn, sessionID, "turn-pending", "list")
	att := s.startLines("attach", sessionID, "--root", root, "--json", "--exit-after-turn", "--no-input")
	ev := att.until(t, "interaction")
	if ev["kind"] != "permission" || ev["status"] != "pending" || ev["toolName"] != "Bash" || ev["command"] != "echo listed | tee /dev/null" ||
		ev["turnId"] != turn.TurnID {
		t.Fatalf("interaction %v", ev)
	}
	snap, err := conn.AnswerInteraction(turnCtx(t), protocol.InteractionAnswerInput{InteractionID: ev["interactionId"].(string),
		Answer: protocol.InteractionAnswer{Kind: protocol.InteractionKindPermission, Decision: protocol.InteractionDecisionAllow}})
	if err != nil || snap.Status != protocol.InteractionStatusAnswered {
		t.Fatalf("answer: %+v %v", snap, err)
	}
	lines, code := att.rest(t)
	if code != 0 {
		t.Fatalf("attach exit %d, stderr %q", code, att.stderrText())
	}
	events := decodeLines(t, lines)
	var tool, last map[string]any
	for _, ev := range events {
		if ev["type"] == "tool_result" {
			tool = ev
		}
		last = ev
	}
	if tool == nil || tool["status"] != "completed" || last["type"] != "result" || last["status"] != "completed" {
		t.Fatalf("after the approval: tool %v, last %v", tool, last)
	}
}

// openPTY returns the two ends of a new pseudo-terminal.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	slave, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slave.Close() })
	return master, slave
}

func TestAttachAsksOnTheTerminal(t *testing.T) {
	s := newSandbox(t)
	root := spawnedRoot(t)
	script := writeScript(t, toolScript)
	first := s.run("run", "--root", root, "--host-arg=--model-script="+script, "--permission-mode", "ask", "--json", "list")
	if first.code != 0 {
		t.Fatalf("run = %d %q", first.code, first.stderr)
	}
	sessionID := parseEvents(t, first.stdout)[0]["sessionId"].(string)
	conn, _, _ := connect(t, root)
	startTextTurn(t, conn, sessionID, "turn-asked", "list")

	master, slave := openPTY(t)
	// The terminal echoes what is typed; nobody needs it.
	go func() { _, _ = io.Copy(io.Discard, master) }()
	att := s.startLinesIn(slave, "attach", sessionID, "--root", root, "--exit-after-turn")
	waitStderr(t, att, "? Allow Bash `echo listed | tee /dev/null` [shell_unsafe]  [y]es / [n]o / [a]lways this turn: ")
	if _, err := master.WriteString("maybe\n"); err != nil {
		t.Fatal(err)
	}
	waitStderr(t, att, "this turn: ? Allow Bash")
	if _, err := master.WriteString("a\n"); err != nil {
		t.Fatal(err)
	}
	lines, code := att.rest(t)
	// The turn's text from its beginning: replayed, then live.
	// (the prompt ended its line).
	if code != 0 || strings.Join(lines, "") != "Listing. Done." {
		t.Fatalf("attach = %d %q, stderr %q", code, lines, att.stderrText())
	}
	if !strings.Contains(att.stderrText(), "✓ Bash") {
		t.Errorf("attach stderr %q lacks the tool result", att.stderrText())
	}
	page := transcriptOf(t, conn, sessionID)
	ok := false
	for _, m := range page {
		if m.TurnID == "turn-asked" && m.Role == protocol.TranscriptRoleTool && m.Status == protocol.TranscriptToolCompleted {
			ok = true
		}
	}
	if !ok {
		t.Fatalf("the approved command did not run: %+v", page)
	}
}

// maka attach shows the retries of the turn it follows, as maka run does.
func TestAttachShowsRetries(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	srv := modeltest.New(t, func(req *modeltest.Request) modeltest.Reply {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if req.LastUser() == "flaky" && calls == 2 {
			return modeltest.Reply{Status: 500, Body: `{"error":{"message":"try again"}}`}
		}
		return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "ok"}}}
	})
	s := newSandbox(t)
	root := spawnedRoot(t)
	addConnectionWith(t, s, root, srv.BaseURL(), fastRetries)
	first := s.run("run", "--root", root, "--json", "first")
	if first.code != 0 {
		t.Fatalf("run = %d %q", first.code, first.stderr)
	}
	sessionID := parseEvents(t, first.stdout)[0]["sessionId"].(string)
	att := s.startLines("attach", sessionID, "--root", root, "--json", "--exit-after-turn")
	att.until(t, "attached")
	if r := s.run("run", "--root", root, "--session", sessionID, "flaky"); r.code != 0 {
		t.Fatalf("run = %d %q", r.code, r.stderr)
	}
	lines, code := att.rest(t)
	if code != 0 {
		t.Fatalf("attach exit %d, stderr %q", code, att.stderrText())
	}
	retried := false
	for _, ev := range decodeLines(t, lines) {
		if ev["type"] == "retry" && strings.Contains(fmt.Sprint(ev["message"]), "HTTP 500") {
			retried = true
		}
	}
	if !retried {
		t.Fatalf("attach showed no retry: %q", lines)
	}
}
