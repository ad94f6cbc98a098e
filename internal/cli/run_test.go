package cli_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/internal/control"
	"github.com/maka-agent/maka/internal/modeltest"
	"github.com/maka-agent/maka/internal/storageroot"
	"github.com/maka-agent/maka/protocol"
)

// runWith runs maka to completion with stdin.
func (s *sandbox) runWith(stdin string, args ...string) result {
	s.t.Helper()
	r, err := s.execMaka(makaBin, strings.NewReader(stdin), args)
	if err != nil {
		s.t.Fatalf("maka %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// spawnedRoot returns a storage root path that does not exist yet; at
// cleanup the hosts spawned for it are stopped and its control directory
// is removed.
func spawnedRoot(t *testing.T) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "root")
	t.Cleanup(func() {
		c, err := storageroot.Discover(root)
		if err != nil {
			return
		}
		stopRegisteredHost(t, c.RootID())
		removeRootArtifacts(t, c.RootID())
	})
	return root
}

// stopRegisteredHost stops the host registered for rootID, if any, and
// waits until it has exited.
func stopRegisteredHost(t *testing.T, rootID string) {
	t.Helper()
	reg, found, err := control.ReadRegistration(controlDir(t, rootID))
	if err != nil || !found {
		return
	}
	pid := int(reg.PID)
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return
	}
	if !waitPidExit(t, pid, exitTimeout) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		waitPidExit(t, pid, exitTimeout)
		t.Errorf("host %d did not exit after SIGTERM", pid)
	}
}

// waitPidExit waits, through a pidfd, until process pid has exited (a
// zombie counts); false when it still runs after timeout.
func waitPidExit(t *testing.T, pid int, timeout time.Duration) bool {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return true
	}
	if err != nil {
		t.Fatalf("pidfd_open %d: %v", pid, err)
	}
	defer unix.Close(fd)
	deadline := time.Now().Add(timeout)
	for {
		ms := int(time.Until(deadline).Milliseconds())
		if ms <= 0 {
			return false
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, ms)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			t.Fatalf("poll pidfd: %v", err)
		}
		if n > 0 {
			return true
		}
	}
}

// liveHostPIDs lists the running (not zombie) `maka host serve` candidate
// processes of rootID.
func liveHostPIDs(t *testing.T, rootID string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte("--expected-root-id\x00"+rootID)) {
			continue
		}
		if isZombie(pid) {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

func isZombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z'
}

// hostLog returns the log of the hosts spawned for rootID.
func hostLog(t *testing.T, rootID string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(controlDir(t, rootID), client.HostLogFile))
	if err != nil {
		t.Fatalf("host log: %v", err)
	}
	return string(b)
}

func writeScript(t *testing.T, script string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "script.json")
	if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// echoScript answers every turn with "scripted: " and the prompt.
const echoScript = `{"steps":[{"events":[{"text":"scripted: "},{"echo":true}]}]}`

func rootIDOf(t *testing.T, root string) string {
	t.Helper()
	c, err := storageroot.Discover(root)
	if err != nil {
		t.Fatal(err)
	}
	return c.RootID()
}

// addFakeConnection configures the openai-compatible server as the
// root's default model target with the key from stdin.
func addFakeConnection(t *testing.T, s *sandbox, root, baseURL, key string) result {
	t.Helper()
	r := s.runWith(key+"\n", "connection", "add", "--root", root, "--provider", "openai-compatible",
		"--base-url", baseURL, "--model", "m1")
	if r.code != 0 {
		t.Fatalf("connection add = %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	return r
}

func TestRunSpawnsOneHostAndStreams(t *testing.T) {
	srv := modeltest.New(t, func(req *modeltest.Request) modeltest.Reply {
		return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "Hello"}, {Text: ", "}, {Text: req.LastUser()}}}
	})
	s := newSandbox(t)
	root := spawnedRoot(t)
	add := addFakeConnection(t, s, root, srv.BaseURL(), "sk-test-key")
	if !strings.Contains(add.stdout, "stored its API key") || !strings.Contains(add.stdout, "default model: openai-compatible m1") {
		t.Errorf("connection add output %q", add.stdout)
	}
	rootID := rootIDOf(t, root)
	first, code := s.statusJSON("--root", root)
	if code != 0 || !first.Running {
		t.Fatalf("no host after connection add: %+v", first)
	}

	r := s.run("run", "--root", root, "world")
	if r.code != 0 || r.stdout != "Hello, world\n" {
		t.Fatalf("run = %d %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = s.run("run", "--root", root, "again")
	if r.code != 0 || r.stdout != "Hello, again\n" {
		t.Fatalf("second run = %d %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	second, code := s.statusJSON("--root", root)
	if code != 0 || second.Registration.PID != first.Registration.PID || second.Status.HostEpoch != first.Status.HostEpoch {
		t.Fatalf("host changed between runs: %d/%s then %d/%s", first.Registration.PID, first.Status.HostEpoch,
			second.Registration.PID, second.Status.HostEpoch)
	}
	if pids := liveHostPIDs(t, rootID); len(pids) != 1 || pids[0] != int(first.Registration.PID) {
		t.Fatalf("host processes %v, want only %d", pids, first.Registration.PID)
	}
	if n := strings.Count(hostLog(t, rootID), `msg="runtime host ready"`); n != 1 {
		t.Fatalf("%d hosts became ready, want 1; log:\n%s", n, hostLog(t, rootID))
	}
	seen := srv.Seen()
	if len(seen) != 2 || seen[0].Authorization != "Bearer sk-test-key" || seen[0].Model != "m1" {
		t.Fatalf("model requests %d, first %+v", len(seen), seen[0])
	}

	// The connection commands see what add stored.
	var list struct {
		Default     *protocol.ConnectionTarget `json:"defaultTarget"`
		Connections []struct {
			Slug          string   `json:"slug"`
			Models        []string `json:"enabledModelIds"`
			KeyConfigured bool     `json:"keyConfigured"`
		} `json:"connections"`
	}
	lr := s.run("connection", "list", "--root", root, "--json")
	if err := json.Unmarshal([]byte(lr.stdout), &list); err != nil || lr.code != 0 {
		t.Fatalf("connection list = %d %q: %v", lr.code, lr.stdout, err)
	}
	if len(list.Connections) != 1 || list.Connections[0].Slug != "openai-compatible" || !list.Connections[0].KeyConfigured ||
		!slices.Equal(list.Connections[0].Models, []string{"m1"}) || list.Default == nil || list.Default.ModelID != "m1" {
		t.Fatalf("connection list %+v", list)
	}
	if dup := s.runWith("k", "connection", "add", "--root", root, "--provider", "openai-compatible", "--base-url", srv.BaseURL(),
		"--model", "m2"); dup.code != 1 || !strings.Contains(dup.stderr, "exists") {
		t.Fatalf("adding a duplicate = %d %q", dup.code, dup.stderr)
	}
}

func TestRunSpawnedHostExitsAfterIdleGrace(t *testing.T) {
	s := newSandbox(t)
	root := spawnedRoot(t)
	script := writeScript(t, echoScript)
	r := s.run("run", "--root", root, "--host-arg=--model-script="+script, "--host-arg=--idle-grace=1s", "ping")
	if r.code != 0 || r.stdout != "scripted: ping\n" {
		t.Fatalf("run = %d %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	rootID := rootIDOf(t, root)
	reg, found := readRegistration(t, rootID)
	if !found {
		t.Fatal("no registration right after the run")
	}
	if !waitPidExit(t, int(reg.PID), exitTimeout) {
		t.Fatalf("spawned host %d still runs %v after its idle grace", reg.PID, exitTimeout)
	}
	if _, found := readRegistration(t, rootID); found {
		t.Error("registration left behind by the idle exit")
	}
	if log := hostLog(t, rootID); !strings.Contains(log, "runtime host stopped") {
		t.Errorf("host log does not show a clean stop:\n%s", log)
	}
}

func TestRunConcurrentColdStartsShareOneHost(t *testing.T) {
	s := newSandbox(t)
	root := spawnedRoot(t)
	script := writeScript(t, echoScript)
	const n = 10
	var wg sync.WaitGroup
	results := make([]result, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i] = s.runNoFatal("run", "--root", root, "--host-arg=--model-script="+script, "--cwd", t.TempDir(), "ping "+strconv.Itoa(i))
		}()
	}
	close(start)
	wg.Wait()
	for i, r := range results {
		if want := "scripted: ping " + strconv.Itoa(i) + "\n"; r.code != 0 || r.stdout != want {
			t.Errorf("run %d = %d %q (want %q), stderr %q", i, r.code, r.stdout, want, r.stderr)
		}
	}
	rootID := rootIDOf(t, root)
	reg, found := readRegistration(t, rootID)
	if !found {
		t.Fatal("no host registered")
	}
	// A losing candidate may still be on its way out when the last run
	// ends (the runs never wait for it); each must exit on its own.
	pids := liveHostPIDs(t, rootID)
	if !slices.Contains(pids, int(reg.PID)) {
		t.Fatalf("host processes %v do not include the registered %d", pids, reg.PID)
	}
	for _, pid := range pids {
		if pid != int(reg.PID) && !waitPidExit(t, pid, exitTimeout) {
			t.Fatalf("candidate host %d still runs %v after the runs ended (registered: %d)", pid, exitTimeout, reg.PID)
		}
	}
	log := hostLog(t, rootID)
	if ready := strings.Count(log, `msg="runtime host ready"`); ready != 1 {
		t.Fatalf("%d hosts became ready, want 1; log:\n%s", ready, log)
	}
	// Every other candidate found the root owned and said so.
	if started, losers := strings.Count(log, `msg="runtime host listening"`), strings.Count(log, "already owns"); started > 1 {
		t.Fatalf("%d hosts listened (%d losers); log:\n%s", started, losers, log)
	}
}

// runNoFatal is run for use off the test goroutine: failures to start
// are reported as exit code -1.
func (s *sandbox) runNoFatal(args ...string) result {
	r, _ := s.execMaka(makaBin, nil, args)
	return r
}

func TestRunProviderFailureExitsOne(t *testing.T) {
	srv := modeltest.New(t, func(*modeltest.Request) modeltest.Reply {
		return modeltest.Reply{Status: 401, Body: `{"error":{"message":"invalid api key","type":"invalid_request_error"}}`}
	})
	s := newSandbox(t)
	root := spawnedRoot(t)
	addFakeConnection(t, s, root, srv.BaseURL(), "sk-wrong")
	r := s.run("run", "--root", root, "hello")
	if r.code != 1 {
		t.Fatalf("run = %d, want 1; stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "(auth)") || !strings.Contains(r.stderr, "maka connection set-key openai-compatible") {
		t.Errorf("failure message %q does not say what to do", r.stderr)
	}
	if want := `(auth): HTTP 401 Unauthorized: {"error":{"message":"invalid api key","type":"invalid_request_error"}}; `; !strings.Contains(r.stderr, want) {
		t.Errorf("failure message %q does not show the status and body (%q)", r.stderr, want)
	}
	if strings.Contains(r.stderr, "attempt ") {
		t.Errorf("an auth failure was retried: %q", r.stderr)
	}
	j := s.run("run", "--root", root, "--json", "hello")
	events := parseEvents(t, j.stdout)
	last := events[len(events)-1]
	if j.code != 1 || last["type"] != "result" || last["status"] != "failed" || last["failureClass"] != "auth" || last["exitCode"] != 1.0 {
		t.Fatalf("json run = %d, last event %v", j.code, last)
	}
}

func TestRunWithoutConnectionSaysHowToAddOne(t *testing.T) {
	s := newSandbox(t)
	root := spawnedRoot(t)
	r := s.run("run", "--root", root, "hello")
	if r.code != 1 {
		t.Fatalf("run = %d, want 1; stderr %q", r.code, r.stderr)
	}
	want := "maka connection add --root " + root + " --provider openai-compatible --base-url"
	if !strings.Contains(r.stderr, "no model connection is configured") || !strings.Contains(r.stderr, want) {
		t.Fatalf("message %q lacks the command %q", r.stderr, want)
	}
	if r.stdout != "" {
		t.Errorf("stdout %q, want nothing", r.stdout)
	}
	if l := s.run("connection", "list", "--root", root); l.code != 0 || !strings.Contains(l.stderr, "maka connection add") {
		t.Errorf("connection list on an empty catalog = %d %q", l.code, l.stderr)
	}
}

func TestRunUsageErrors(t *testing.T) {
	s := newSandbox(t)
	untouched := filepath.Join(t.TempDir(), "untouched")
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"run"},
		{"run", "a", "b"},
		{"run", "   "},
		{"run", "--bogus", "x"},
		{"run", "--session", "s1", "--continue", "x"},
		{"run", "--session", "not an id", "x"},
		{"run", "--permission-mode", "yolo", "x"},
		{"run", "--allow", "Bash(", "x"},
		{"run", "--deny", "category:nope", "x"},
		{"run", "--timeout", "-1s", "x"},
		{"run", "--timeout", "soon", "x"},
		{"run", "--cwd", filepath.Join(untouched, "missing"), "x"},
		{"run", "--cwd", file, "x"},
		{"run", "--connection", "Not_A_Slug", "x"},
		{"sessions", "bogus"},
		{"sessions", "show"},
		{"sessions", "show", "bad id"},
		{"sessions", "list", "--limit", "-1"},
		{"attach"},
		{"attach", "bad id"},
		{"connection", "bogus"},
		{"connection", "add", "--model", "m"},
		{"connection", "add", "--provider", "nope", "--model", "m"},
		{"connection", "add", "--provider", "openai-compatible", "--model", "m"},
		{"connection", "add", "--provider", "openai", "--model", "m", "--model", "m"},
		{"connection", "add", "BAD", "--provider", "openai", "--model", "m"},
		{"connection", "add", "--provider", "openai", "--model", "m", "--key-env", "MAKA_TEST_UNSET_VARIABLE"},
		{"connection", "set-key", "x"},
		{"connection", "remove"},
	} {
		r := s.runWith("", append(args, "--root", untouched)...)
		if r.code != 2 || !strings.HasPrefix(r.stderr, "maka: ") {
			t.Errorf("maka %s = %d %q, want exit 2 with a message", strings.Join(args, " "), r.code, r.stderr)
		}
	}
	if r := s.runWith("", "run", "-", "--root", untouched); r.code != 2 || !strings.Contains(r.stderr, "empty") {
		t.Errorf("run - with empty stdin = %d %q", r.code, r.stderr)
	}
	assertNotExist(t, untouched, "root created by a rejected command")
}

// parseEvents parses --json output line by line.
func parseEvents(t *testing.T, out string) []map[string]any {
	t.Helper()
	var events []map[string]any
	for i, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("line %d %q is not JSON: %v", i+1, line, err)
		}
		if ev["type"] == nil {
			t.Fatalf("line %d %q has no type", i+1, line)
		}
		events = append(events, ev)
	}
	if len(events) == 0 {
		t.Fatal("no events")
	}
	return events
}

func eventTypes(events []map[string]any) []string {
	var out []string
	for _, ev := range events {
		if typ := ev["type"].(string); len(out) == 0 || out[len(out)-1] != typ {
			out = append(out, typ)
		}
	}
	return out
}

// toolScript lists files with Bash, then answers.
const toolScript = `{"steps":[
 {"events":[{"text":"Listing. "},{"toolCall":{"id":"call_1","name":"Bash","input":{"command":"echo listed | tee /dev/null"}}}]},
 {"events":[{"text":"Done."}]}]}`

func TestRunJSONAndToolActivity(t *testing.T) {
	s := newSandbox(t)
	root := spawnedRoot(t)
	script := writeScript(t, toolScript)
	r := s.run("run", "--root", root, "--host-arg=--model-script="+script, "--permission-mode", "bypass", "--json", "list")
	if r.code != 0 {
		t.Fatalf("run = %d, stderr %q", r.code, r.stderr)
	}
	events := parseEvents(t, r.stdout)
	want := []string{"session", "turn_started", "text", "tool_start", "tool_result", "text", "result"}
	if got := eventTypes(events); !slices.Equal(got, want) {
		t.Fatalf("event types %v, want %v\n%s", got, want, r.stdout)
	}
	var text strings.Builder
	for _, ev := range events {
		if ev["v"] != 1.0 {
			t.Errorf("event without the schema version: %v", ev)
		}
		switch ev["type"] {
		case "text":
			text.WriteString(ev["text"].(string))
		case "tool_start":
			if ev["toolName"] != "Bash" || ev["toolUseId"] == "" || ev["input"] != "echo listed | tee /dev/null" {
				t.Errorf("tool_start %v", ev)
			}
		case "tool_result":
			if ev["toolName"] != "Bash" || ev["status"] != "completed" || ev["durationMs"] == nil || !strings.Contains(fmt.Sprint(ev["output"]), "listed") {
				t.Errorf("tool_result %v", ev)
			}
		case "session":
			if ev["created"] != true || ev["permissionMode"] != "bypass" {
				t.Errorf("session %v", ev)
			}
		case "result":
			if ev["status"] != "completed" || ev["exitCode"] != 0.0 || ev["sessionId"] != events[0]["sessionId"] ||
				ev["text"] != "Listing. Done." || ev["durationMs"] == nil {
				t.Errorf("result %v", ev)
			}
		}
	}
	if text.String() != "Listing. Done." {
		t.Errorf("text %q", text.String())
	}
	if r.stderr != "" {
		t.Errorf("--json wrote to stderr: %q", r.stderr)
	}

	// The same turn as text: the answer on stdout, one line per tool
	// start and result on stderr.
	r = s.run("run", "--root", root, "--permission-mode", "bypass", "list")
	if r.code != 0 || r.stdout != "Listing. Done.\n" {
		t.Fatalf("text run = %d %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	if len(lines) != 3 || lines[0] != "maka: permission mode: bypass" || lines[1] != "▸ Bash echo listed | tee /dev/null" ||
		!strings.HasPrefix(lines[2], "✓ Bash (") || !strings.HasSuffix(lines[2], " ms)") {
		t.Fatalf("tool lines %q", lines)
	}

	// In ask mode the command needs approval. The host decides with the
	// session's rules, which maka run sends it: without a matching --allow
	// the prompt reaches the run, which denies it and says which --allow
	// would permit it; with one the command runs without a prompt; a
	// matching --deny wins, also without a prompt.
	for _, tc := range []struct {
		name     string
		rules    []string
		prompted bool
		status   string
		stderr   string
	}{
		{"no rule", nil, true, "errored", "to allow it, run again with --allow 'Bash(echo listed | tee /dev/null)'"},
		{"allowed", []string{"--allow", "Bash(echo  listed | tee /dev/null)"}, false, "completed", "✓ Bash ("},
		{"deny wins", []string{"--allow", "category:shell_unsafe", "--deny", "Bash"}, false, "errored", "✗ Bash"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"run", "--root", root, "--permission-mode", "ask"}, tc.rules...)
			j := s.run(append(args, "--json", "list")...)
			if j.code != 0 {
				t.Fatalf("run = %d, stderr %q", j.code, j.stderr)
			}
			var interaction, result map[string]any
			for _, ev := range parseEvents(t, j.stdout) {
				switch ev["type"] {
				case "interaction":
					interaction = ev
				case "tool_result":
					result = ev
				}
			}
			switch {
			case tc.prompted && (interaction == nil || interaction["decision"] != "deny" || interaction["toolName"] != "Bash" ||
				interaction["command"] != "echo listed | tee /dev/null" || interaction["kind"] != "permission"):
				t.Fatalf("interaction %v", interaction)
			case !tc.prompted && interaction != nil:
				t.Fatalf("the host left a prompt to the run: %v", interaction)
			}
			if result == nil || result["status"] != tc.status {
				t.Fatalf("tool result %v, want %s", result, tc.status)
			}
			text := s.run(append(args, "list")...)
			if text.code != 0 || !strings.Contains(text.stderr, tc.stderr) {
				t.Fatalf("text run = %d, stderr %q lacks %q", text.code, text.stderr, tc.stderr)
			}
		})
	}
}

// lineProc is a maka process whose stdout is read line by line.
type lineProc struct {
	cmd    *exec.Cmd
	lines  chan string
	stderr *notifyBuffer
	done   chan struct{}
}

// notifyBuffer is a buffer safe for concurrent use that signals writes.
type notifyBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
}

func (b *notifyBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case b.changed <- struct{}{}:
	default:
	}
	return b.buf.Write(p)
}

func (b *notifyBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (lp *lineProc) stderrText() string { return lp.stderr.String() }

// stderrChanged fires after a write to stderr.
func (lp *lineProc) stderrChanged() <-chan struct{} { return lp.stderr.changed }

func (s *sandbox) startLines(args ...string) *lineProc {
	s.t.Helper()
	return s.startLinesIn(nil, args...)
}

// startLinesIn is startLines with stdin (nil: /dev/null).
func (s *sandbox) startLinesIn(stdin *os.File, args ...string) *lineProc {
	s.t.Helper()
	cmd := exec.Command(makaBin, args...)
	cmd.Env = s.env
	if stdin != nil {
		cmd.Stdin = stdin
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		s.t.Fatal(err)
	}
	lp := &lineProc{cmd: cmd, lines: make(chan string, 256), stderr: &notifyBuffer{changed: make(chan struct{}, 1)}, done: make(chan struct{})}
	cmd.Stderr = lp.stderr
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	go func() {
		defer close(lp.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lp.lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, out)
		close(lp.lines)
		_ = cmd.Wait()
	}()
	s.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-lp.done
	})
	return lp
}

// next returns the next stdout line.
func (lp *lineProc) next(t *testing.T) string {
	t.Helper()
	select {
	case line, ok := <-lp.lines:
		if !ok {
			<-lp.done
			t.Fatalf("stdout ended; stderr %q", lp.stderrText())
		}
		return line
	case <-time.After(turnTimeout):
		t.Fatalf("no output within %v", turnTimeout)
		return ""
	}
}

// until returns the first JSON event of the given type.
func (lp *lineProc) until(t *testing.T, typ string) map[string]any {
	t.Helper()
	for {
		var ev map[string]any
		line := lp.next(t)
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("%q is not JSON: %v", line, err)
		}
		if ev["type"] == typ {
			return ev
		}
	}
}

// rest returns the remaining lines and the exit code.
func (lp *lineProc) rest(t *testing.T) ([]string, int) {
	t.Helper()
	var lines []string
	for {
		select {
		case line, ok := <-lp.lines:
			if !ok {
				<-lp.done
				return lines, lp.cmd.ProcessState.ExitCode()
			}
			lines = append(lines, line)
		case <-time.After(turnTimeout):
			t.Fatalf("process did not end within %v", turnTimeout)
		}
	}
}

func TestRunInterruptStopsTheTurn(t *testing.T) {
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	srv := modeltest.New(t, func(*modeltest.Request) modeltest.Reply {
		return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "thinking about it"}, {Wait: hold}, {Text: "never"}}}
	})
	s := newSandbox(t)
	root := spawnedRoot(t)
	addFakeConnection(t, s, root, srv.BaseURL(), "sk")
	p := s.startLines("run", "--root", root, "--json", "take your time")
	started := p.until(t, "turn_started")
	if text := p.until(t, "text"); text["text"] != "thinking about it" {
		t.Fatalf("first text %v", text)
	}
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	lines, code := p.rest(t)
	if code != 130 {
		t.Fatalf("exit code %d, want 130; stderr %q", code, p.stderrText())
	}
	if len(lines) == 0 {
		t.Fatal("no result event after the interrupt")
	}
	var last map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
		t.Fatal(err)
	}
	if last["type"] != "result" || last["status"] != "cancelled" || last["exitCode"] != 130.0 {
		t.Fatalf("last event %v", last)
	}
	conn, _, _ := connect(t, root)
	got, err := conn.QueryTurn(turnCtx(t), protocol.TurnQueryInput{SessionID: started["sessionId"].(string), TurnID: started["turnId"].(string)})
	if err != nil || got.Status != protocol.TurnCancelled || got.AbortSource != "turn.stop" {
		t.Fatalf("turn after the interrupt: %+v %v", got, err)
	}
}

// BenchmarkColdStartRun measures `maka run` on a root without a host, from
// the process start to the first byte of streamed text, with the scripted
// model (--host-arg=--model-script). Every iteration uses a fresh root and
// stops its host afterwards. It reports the p50 and p90 in milliseconds.
func BenchmarkColdStartRun(b *testing.B) {
	script := filepath.Join(b.TempDir(), "script.json")
	if err := os.WriteFile(script, []byte(echoScript), 0o600); err != nil {
		b.Fatal(err)
	}
	env := append(os.Environ(), "XDG_CONFIG_HOME="+b.TempDir())
	var samples []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		root := filepath.Join(b.TempDir(), "root")
		cmd := exec.Command(makaBin, "run", "--root", root, "--host-arg=--model-script="+script, "--host-arg=--idle-grace=10s", "ping")
		cmd.Env = env
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		begin := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		first := make([]byte, 1)
		if _, err := io.ReadFull(out, first); err != nil {
			b.Fatalf("no output: %v", err)
		}
		samples = append(samples, time.Since(begin))
		rest, _ := io.ReadAll(out)
		if err := cmd.Wait(); err != nil || string(first)+string(rest) != "scripted: ping\n" {
			b.Fatalf("run: %v, output %q", err, string(first)+string(rest))
		}
		b.StopTimer()
		stopBenchHost(b, root)
		b.StartTimer()
	}
	b.StopTimer()
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	pct := func(p float64) float64 {
		return float64(samples[int(p*float64(len(samples)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.5), "p50-ms")
	b.ReportMetric(pct(0.9), "p90-ms")
}

// stopBenchHost stops the host of root and removes its control directory.
func stopBenchHost(b *testing.B, root string) {
	c, err := storageroot.Discover(root)
	if err != nil {
		b.Fatal(err)
	}
	ns, err := storageroot.ControlNamespace()
	if err != nil {
		b.Fatal(err)
	}
	dir := filepath.Join(ns, c.RootID())
	defer os.RemoveAll(dir)
	reg, found, err := control.ReadRegistration(dir)
	if err != nil || !found {
		b.Fatalf("no host registered: %v", err)
	}
	if err := syscall.Kill(int(reg.PID), syscall.SIGTERM); err != nil {
		b.Fatal(err)
	}
	fd, err := unix.PidfdOpen(int(reg.PID), 0)
	if err != nil {
		return // already gone
	}
	defer unix.Close(fd)
	for {
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, int(exitTimeout.Milliseconds()))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n == 0 {
			b.Fatalf("host %d did not exit: %v", reg.PID, err)
		}
		return
	}
}

func TestRunTimeoutStopsTheTurn(t *testing.T) {
	srv, _ := heldModel(t)
	s := newSandbox(t)
	root := spawnedRoot(t)
	addFakeConnection(t, s, root, srv.BaseURL(), "sk")
	r := s.run("run", "--root", root, "--timeout", "700ms", "--json", "slow")
	if r.code != 1 || !strings.Contains(r.stderr, "timed out after 700ms") {
		t.Fatalf("run = %d, stderr %q", r.code, r.stderr)
	}
	events := parseEvents(t, r.stdout)
	last := events[len(events)-1]
	if last["type"] != "result" || last["status"] != "cancelled" || last["message"] != "timed out" {
		t.Fatalf("last event %v", last)
	}
	var text strings.Builder
	for _, ev := range events {
		if ev["type"] == "text" {
			text.WriteString(ev["text"].(string))
		}
	}
	if text.String() != "before " {
		t.Fatalf("streamed %q before the timeout", text.String())
	}
}

// maka host stop names the running turns and waits for them; a turn still
// running when the wait ends keeps the host up, and --cancel-turns stops it.
func TestHostStopListsAndWaitsForRunningTurns(t *testing.T) {
	hold := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(hold) }) }
	t.Cleanup(release)
	srv := modeltest.New(t, func(*modeltest.Request) modeltest.Reply {
		return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "working"}, {Wait: hold}, {Text: " done"}}}
	})
	s := newSandbox(t)
	root := spawnedRoot(t)
	addFakeConnection(t, s, root, srv.BaseURL(), "sk")
	p := s.startLines("run", "--root", root, "--json", "take your time")
	started := p.until(t, "turn_started")
	p.until(t, "text")
	sessionID := started["sessionId"].(string)

	// The wait ends with the turn still running: the host stays up.
	r := s.run("host", "stop", "--root", root, "--wait", "300ms")
	if r.code != 1 || !strings.Contains(r.stderr, "1 running turn") || !strings.Contains(r.stderr, sessionID) ||
		!strings.Contains(r.stderr, "still running") {
		t.Fatalf("stop with a running turn = %d, stderr %q; want exit 1 naming the session", r.code, r.stderr)
	}
	if r := s.run("host", "status", "--root", root); r.code != 0 {
		t.Fatalf("the host is gone after a stop that gave up: status exit %d", r.code)
	}

	// A turn that finishes within the wait: stop waits, then stops.
	stop := s.startLines("host", "stop", "--root", root, "--wait", "1m")
	for !strings.Contains(stop.stderrText(), "waiting up to 1m0s") {
		select {
		case <-stop.stderrChanged():
		case <-stop.done:
			t.Fatalf("stop ended before the turn did: stderr %q", stop.stderrText())
		case <-time.After(turnTimeout):
			t.Fatalf("stop does not say it waits: stderr %q", stop.stderrText())
		}
	}
	release()
	out, code := stop.rest(t)
	if code != 0 || len(out) == 0 || !strings.Contains(out[len(out)-1], "stopped runtime host") {
		t.Fatalf("stop that waited = %d, stdout %q, stderr %q", code, out, stop.stderrText())
	}
	lines, code := p.rest(t)
	if code != 0 || len(lines) == 0 || !strings.Contains(lines[len(lines)-1], `"status":"completed"`) {
		t.Fatalf("the waited-for turn: exit %d, last events %q", code, lines)
	}
}

// maka host stop --cancel-turns stops running turns at once, saying so.
func TestHostStopCancelTurns(t *testing.T) {
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	srv := modeltest.New(t, func(*modeltest.Request) modeltest.Reply {
		return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "working"}, {Wait: hold}, {Text: "never"}}}
	})
	s := newSandbox(t)
	root := spawnedRoot(t)
	addFakeConnection(t, s, root, srv.BaseURL(), "sk")
	p := s.startLines("run", "--root", root, "--json", "take your time")
	started := p.until(t, "turn_started")
	p.until(t, "text")
	r := s.run("host", "stop", "--root", root, "--cancel-turns")
	if r.code != 0 || !strings.Contains(r.stderr, "1 running turn") || !strings.Contains(r.stderr, "end cancelled") {
		t.Fatalf("stop --cancel-turns = %d, stderr %q", r.code, r.stderr)
	}
	p.rest(t)
	// The record says why the turn ended (a new host answers).
	s.serve(root)
	conn, _, _ := connect(t, root)
	got, err := conn.QueryTurn(turnCtx(t), protocol.TurnQueryInput{SessionID: started["sessionId"].(string), TurnID: started["turnId"].(string)})
	if err != nil || got.Status != protocol.TurnCancelled || got.AbortSource != "host_shutdown" {
		t.Fatalf("turn after stop --cancel-turns: %+v %v", got, err)
	}
}

func TestRunThinkingReachesTheModel(t *testing.T) {
	srv := modeltest.New(t, func(req *modeltest.Request) modeltest.Reply {
		return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "effort " + req.ReasoningEffort}}}
	})
	s := newSandbox(t)
	root := spawnedRoot(t)
	// o4-mini is a reasoning model: reasoning_effort is sent to it.
	if r := s.runWith("sk-test-key\n", "connection", "add", "--root", root, "--provider", "openai-compatible",
		"--base-url", srv.BaseURL(), "--model", "o4-mini"); r.code != 0 {
		t.Fatalf("connection add = %d %s", r.code, r.stderr)
	}
	r := s.run("run", "--root", root, "--thinking", "high", "think hard")
	if r.code != 0 || r.stdout != "effort high\n" {
		t.Fatalf("run = %d %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	// The effort is the session's: a later turn of it sends it again.
	r = s.run("run", "--root", root, "--continue", "and again")
	if r.code != 0 || r.stdout != "effort high\n" {
		t.Fatalf("continued run = %d %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	// --thinking on an existing session changes its effort from this turn on.
	r = s.run("run", "--root", root, "--continue", "--thinking", "low", "lighter")
	if r.code != 0 || r.stdout != "effort low\n" || strings.Contains(r.stderr, "keeps its reasoning effort") || !strings.Contains(r.stderr, "reasoning effort: low") {
		t.Fatalf("continued run with --thinking = %d %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = s.run("run", "--root", root, "--continue", "and on")
	if r.code != 0 || r.stdout != "effort low\n" {
		t.Fatalf("run after --thinking low = %d %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	// A new session without --thinking sends none.
	r = s.run("run", "--root", root, "plain")
	if r.code != 0 || r.stdout != "effort \n" {
		t.Fatalf("run without --thinking = %d %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := s.run("run", "--root", root, "--thinking", "max", "x"); r.code != 2 || !strings.Contains(r.stderr, "invalid --thinking") {
		t.Fatalf("--thinking max = %d %q", r.code, r.stderr)
	}
	seen := srv.Seen()
	if len(seen) != 5 || seen[0].ReasoningEffort != "high" || seen[1].ReasoningEffort != "high" ||
		seen[2].ReasoningEffort != "low" || seen[3].ReasoningEffort != "low" || seen[4].ReasoningEffort != "" {
		t.Fatalf("requests: %d", len(seen))
	}
}
