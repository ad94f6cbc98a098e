package cli_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/maka-agent/maka/protocol"
)

type sessionJSON struct {
	SessionID  string `json:"sessionId"`
	Name       string `json:"name"`
	Status     string `json:"status"`
	IsArchived bool   `json:"isArchived"`
	Workspace  struct {
		Path string `json:"path"`
	} `json:"workspace"`
	PermissionMode string `json:"permissionMode"`
}

func (s *sandbox) sessionsJSON(args ...string) []sessionJSON {
	s.t.Helper()
	r := s.run(append([]string{"sessions", "list", "--json"}, args...)...)
	var out struct {
		Sessions []sessionJSON `json:"sessions"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || r.code != 0 {
		s.t.Fatalf("sessions list = %d %q: %v (stderr %q)", r.code, r.stdout, err, r.stderr)
	}
	return out.Sessions
}

func ids(list []sessionJSON) []string {
	var out []string
	for _, s := range list {
		out = append(out, s.SessionID)
	}
	return out
}

func TestSessionsContinueShowAndArchive(t *testing.T) {
	s := newSandbox(t)
	root := spawnedRoot(t)
	script := writeScript(t, echoScript)
	dirA, dirB, dirC := t.TempDir(), t.TempDir(), t.TempDir()
	runJSON := func(args ...string) []map[string]any {
		t.Helper()
		r := s.run(append([]string{"run", "--root", root, "--host-arg=--model-script=" + script, "--json"}, args...)...)
		if r.code != 0 {
			t.Fatalf("run %v = %d %q", args, r.code, r.stderr)
		}
		return parseEvents(t, r.stdout)
	}
	a1 := runJSON("--cwd", dirA, "--permission-mode", "explore", "first in A")[0]["sessionId"].(string)
	a2 := runJSON("--cwd", dirA, "second in A")[0]["sessionId"].(string)
	b1 := runJSON("--cwd", dirB, "first in B")[0]["sessionId"].(string)

	list := s.sessionsJSON("--root", root)
	if got := ids(list); strings.Join(got, " ") != strings.Join([]string{b1, a2, a1}, " ") {
		t.Fatalf("sessions %v, want newest first %v", got, []string{b1, a2, a1})
	}
	if list[2].Name != "first in A" || list[2].PermissionMode != "explore" || list[2].Workspace.Path != mustEval(t, dirA) {
		t.Errorf("session %+v", list[2])
	}

	// --continue picks the most recently used session of the directory.
	ev := runJSON("--cwd", dirA, "--continue", "third in A")[0]
	if ev["sessionId"] != a2 || ev["created"] != false {
		t.Fatalf("--continue used %v (created %v), want %s", ev["sessionId"], ev["created"], a2)
	}
	if r := s.run("run", "--root", root, "--cwd", dirC, "--continue", "x"); r.code != 2 || !strings.Contains(r.stderr, "no session has the workspace") {
		t.Fatalf("--continue without a session = %d %q", r.code, r.stderr)
	}

	show := s.run("sessions", "show", a2, "--root", root, "--json")
	var shown struct {
		Session  sessionJSON `json:"session"`
		Messages []struct {
			Role string `json:"role"`
			Text string `json:"text"`
		} `json:"messages"`
	}
	if err := json.Unmarshal([]byte(show.stdout), &shown); err != nil || show.code != 0 {
		t.Fatalf("show = %d %q: %v", show.code, show.stdout, err)
	}
	var texts []string
	for _, m := range shown.Messages {
		texts = append(texts, m.Role+":"+m.Text)
	}
	want := "user:second in A|assistant:scripted: second in A|user:third in A|assistant:scripted: third in A"
	if shown.Session.SessionID != a2 || strings.Join(texts, "|") != want {
		t.Fatalf("show %s: %q, want %q", shown.Session.SessionID, texts, want)
	}
	if tail := s.run("sessions", "show", a2, "--root", root, "--messages", "1"); tail.code != 0 ||
		!strings.Contains(tail.stdout, "scripted: third in A") || strings.Count(tail.stdout, "── ") != 1 ||
		!strings.Contains(tail.stdout, "workspace") {
		t.Fatalf("show --messages 1 = %d %q", tail.code, tail.stdout)
	}

	if r := s.run("sessions", "archive", a1, "--root", root); r.code != 0 || !strings.Contains(r.stdout, "archived session "+a1) {
		t.Fatalf("archive = %d %q %q", r.code, r.stdout, r.stderr)
	}
	if got := ids(s.sessionsJSON("--root", root)); len(got) != 2 || strings.Contains(strings.Join(got, " "), a1) {
		t.Fatalf("sessions after archive %v", got)
	}
	all := s.sessionsJSON("--root", root, "--all")
	if len(all) != 3 {
		t.Fatalf("sessions --all %v", ids(all))
	}
	for _, x := range all {
		if x.SessionID == a1 && !x.IsArchived {
			t.Fatalf("archived session listed as %+v", x)
		}
	}
	if r := s.run("run", "--root", root, "--session", a1, "x"); r.code != 1 || !strings.Contains(r.stderr, "maka sessions unarchive "+a1) {
		t.Fatalf("run on an archived session = %d %q", r.code, r.stderr)
	}
	if r := s.run("sessions", "unarchive", a1, "--root", root); r.code != 0 {
		t.Fatalf("unarchive = %d %q", r.code, r.stderr)
	}
	if r := s.run("run", "--root", root, "--session", a1, "back"); r.code != 0 || r.stdout != "scripted: back\n" {
		t.Fatalf("run after unarchive = %d %q %q", r.code, r.stdout, r.stderr)
	}

	// Shell completion offers the session ids of the running host.
	if c := s.run("__complete", "sessions", "show", "--root", root, ""); c.code != 0 || !strings.Contains(c.stdout, a1+"\tfirst in A") ||
		!strings.Contains(c.stdout, b1) {
		t.Errorf("completion = %d %q", c.code, c.stdout)
	}

	// Text listing and errors.
	text := s.run("sessions", "--root", root)
	if text.code != 0 || !strings.HasPrefix(text.stdout, "ID ") || !strings.Contains(text.stdout, a1) || !strings.Contains(text.stdout, "first in B") {
		t.Fatalf("sessions = %d %q", text.code, text.stdout)
	}
	for _, args := range [][]string{{"sessions", "show", "missing"}, {"sessions", "archive", "missing"}} {
		if r := s.run(append(args, "--root", root)...); r.code != 1 || !strings.Contains(r.stderr, "missing") {
			t.Errorf("%v = %d %q", args, r.code, r.stderr)
		}
	}
	if r := s.run("run", "--root", root, "--session", "missing", "x"); r.code != 2 || !strings.Contains(r.stderr, "no session missing") {
		t.Errorf("run --session missing = %d %q", r.code, r.stderr)
	}
}

func mustEval(t *testing.T, dir string) string {
	t.Helper()
	p, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestHelpAndCompletionScripts(t *testing.T) {
	s := newSandbox(t)
	help := s.run("--help")
	for _, want := range []string{"run ", "sessions", "attach", "connection", "host", "completion", "maka connection add --provider"} {
		if help.code != 0 || !strings.Contains(help.stdout, want) {
			t.Errorf("maka --help = %d, lacks %q:\n%s", help.code, want, help.stdout)
		}
	}
	for _, cmd := range [][]string{{"run"}, {"sessions"}, {"attach"}, {"connection"}, {"connection", "add"}, {"connection", "set-key"}} {
		r := s.run(append(cmd, "--help")...)
		if r.code != 0 || !strings.Contains(r.stdout, "Examples:") {
			t.Errorf("maka %s --help = %d, no examples:\n%s", strings.Join(cmd, " "), r.code, r.stdout)
		}
		if strings.Contains(r.stdout, "host-arg") {
			t.Errorf("maka %s --help shows the hidden --host-arg", strings.Join(cmd, " "))
		}
	}
	for shell, marker := range map[string]string{"bash": "__start_maka", "zsh": "#compdef maka", "fish": "complete -c maka"} {
		if r := s.run("completion", shell); r.code != 0 || !strings.Contains(r.stdout, marker) {
			t.Errorf("maka completion %s = %d, lacks %q", shell, r.code, marker)
		}
	}
	if r := s.run("__complete", "run", "--permission-mode", ""); r.code != 0 || !strings.Contains(r.stdout, "bypass") {
		t.Errorf("permission mode completion = %d %q", r.code, r.stdout)
	}
	if r := s.run("__complete", "connection", "add", "--provider", "openai-c"); r.code != 0 || !strings.Contains(r.stdout, "openai-compatible") {
		t.Errorf("provider completion = %d %q", r.code, r.stdout)
	}
}

// Every command that takes a session id takes a unique prefix of at least
// four characters; an ambiguous one lists the candidates and exits 2.
func TestSessionIDPrefixes(t *testing.T) {
	s := newSandbox(t)
	root := spawnedRoot(t)
	script := writeScript(t, echoScript)
	first := s.run("run", "--root", root, "--host-arg=--model-script="+script, "--json", "hello")
	if first.code != 0 {
		t.Fatalf("run = %d %q", first.code, first.stderr)
	}
	conn, _, _ := connect(t, root)
	for _, id := range []string{"abcd1111-x", "abcd2222-y"} {
		if _, err := conn.Call(turnCtx(t), protocol.OpSessionCreate, protocol.SessionCreateInput{
			SessionID: id, Workspace: protocol.HostPathWorkspace(t.TempDir()), Name: "named " + id,
		}); err != nil {
			t.Fatal(err)
		}
	}
	if r := s.run("sessions", "show", "--root", root, "abcd1", "--json"); r.code != 0 || !strings.Contains(r.stdout, `"abcd1111-x"`) {
		t.Fatalf("show by prefix = %d %q %q", r.code, r.stdout, r.stderr)
	}
	r := s.run("sessions", "show", "--root", root, "abcd")
	if r.code != 2 || !strings.Contains(r.stderr, "abcd1111-x") || !strings.Contains(r.stderr, "abcd2222-y") {
		t.Fatalf("ambiguous prefix = %d %q, want exit 2 listing both", r.code, r.stderr)
	}
	if r := s.run("sessions", "show", "--root", root, "abc"); r.code != 1 || !strings.Contains(r.stderr, "at least 4") {
		t.Fatalf("3-character prefix = %d %q", r.code, r.stderr)
	}
	if r := s.run("run", "--root", root, "--host-arg=--model-script="+script, "--session", "abcd2", "--json", "go on"); r.code != 0 ||
		!strings.Contains(r.stdout, `"sessionId":"abcd2222-y"`) {
		t.Fatalf("run --session by prefix = %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := s.run("run", "--root", root, "--host-arg=--model-script="+script, "--session", "abcd", "go on"); r.code != 2 || !strings.Contains(r.stderr, "give more of the id") {
		t.Fatalf("run --session with an ambiguous prefix = %d %q", r.code, r.stderr)
	}
	if r := s.run("sessions", "archive", "--root", root, "abcd1"); r.code != 0 {
		t.Fatalf("archive by prefix = %d %q", r.code, r.stderr)
	}
	if r := s.run("attach", "--root", root, "--exit-after-turn", "--no-input", "abcd"); r.code != 2 {
		t.Fatalf("attach with an ambiguous prefix = %d %q", r.code, r.stderr)
	}
}

// Every run says the permission mode in force; --permission-mode changes
// an existing session's mode durably; bypass is never inherited: a later
// run without --permission-mode bypass uses the root's default and says so.
func TestRunPermissionModeOfAnExistingSession(t *testing.T) {
	s := newSandbox(t)
	root := spawnedRoot(t)
	script := writeScript(t, echoScript)
	dir := t.TempDir()
	run := func(args ...string) result {
		t.Helper()
		r := s.run(append([]string{"run", "--root", root, "--host-arg=--model-script=" + script, "--cwd", dir}, args...)...)
		if r.code != 0 {
			t.Fatalf("run %v = %d %q", args, r.code, r.stderr)
		}
		return r
	}
	mode := func() string {
		t.Helper()
		list := s.sessionsJSON("--root", root)
		if len(list) != 1 {
			t.Fatalf("%d sessions", len(list))
		}
		return list[0].PermissionMode
	}
	if r := run("--permission-mode", "explore", "first"); !strings.Contains(r.stderr, "permission mode: explore") {
		t.Fatalf("a new session's run does not say its mode: %q", r.stderr)
	}
	if r := run("--continue", "--permission-mode", "execute", "second"); !strings.Contains(r.stderr, "permission mode: execute (was explore)") || mode() != "execute" {
		t.Fatalf("changing the mode: stderr %q, mode %s", r.stderr, mode())
	}
	if r := run("--continue", "third"); !strings.Contains(r.stderr, "permission mode: execute") || mode() != "execute" {
		t.Fatalf("an unchanged mode: stderr %q, mode %s", r.stderr, mode())
	}
	run("--continue", "--permission-mode", "bypass", "fourth")
	if mode() != "bypass" {
		t.Fatalf("mode %s after --permission-mode bypass", mode())
	}
	r := run("--continue", "fifth")
	if !strings.Contains(r.stderr, "the session was in bypass") || mode() == "bypass" {
		t.Fatalf("bypass was inherited: stderr %q, mode %s", r.stderr, mode())
	}
}
