package e2e_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/internal/cli"
	"github.com/maka-agent/maka/internal/modeltest"
	"github.com/maka-agent/maka/protocol"
)

// mcpServerEnv, when set, makes the test binary a stdio MCP server with one
// tool, echo, that answers with its text and its process id; each start
// appends its process id to the file the variable names.
const mcpServerEnv = "MAKA_E2E_MCP_SERVER"

type echoArgs struct {
	Text string `json:"text" jsonschema:"the text to echo"`
}

func mcpServerMain(startsFile string) int {
	f, err := os.OpenFile(startsFile, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Fprintf(f, "%d\n", os.Getpid())
	if err := f.Close(); err != nil {
		return 1
	}
	fmt.Fprintln(os.Stderr, "echo server ready")
	s := mcpsdk.NewServer(&mcpsdk.Implementation{Name: "e2e-echo", Version: "1"}, nil)
	mcpsdk.AddTool(s, &mcpsdk.Tool{Name: "echo", Description: "Echoes its text.",
		Annotations: &mcpsdk.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *mcpsdk.CallToolRequest, in echoArgs) (*mcpsdk.CallToolResult, any, error) {
			return &mcpsdk.CallToolResult{Content: []mcpsdk.Content{
				&mcpsdk.TextContent{Text: fmt.Sprintf("echo: %s pid=%d", in.Text, os.Getpid())}}}, nil, nil
		})
	if err := s.Run(context.Background(), &mcpsdk.StdioTransport{}); err != nil && !errors.Is(err, mcpsdk.ErrConnectionClosed) {
		fmt.Fprintln(os.Stderr, err)
	}
	return 0
}

const echoTool = "mcp__echo__echo"

// echoModel calls the echo tool with the user's message, then reports the
// result it received.
func echoModel(req *modeltest.Request) modeltest.Reply {
	results := req.ToolResultsSinceUser()
	if len(results) == 0 {
		return modeltest.Reply{Chunks: []modeltest.Chunk{{Call: &modeltest.Call{
			ID: "call_echo", Name: echoTool, Arguments: fmt.Sprintf(`{"text":%q}`, req.LastUser())}}}}
	}
	return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "result: " + results[0].Text()}}}
}

// mcpServers lists the host's MCP servers over the socket.
func mcpServers(t *testing.T, c *client.Conn) []protocol.MCPServer {
	t.Helper()
	res, err := c.Call(opCtx(t), protocol.OpMCPServersQuery, struct{}{})
	if err != nil {
		t.Fatalf("mcp.servers.query: %v", err)
	}
	return res.(protocol.MCPServersQueryResult).Servers
}

// startsOf reads the process ids of every start of the echo server.
func startsOf(t *testing.T, path string) []int {
	t.Helper()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, l := range strings.Fields(string(data)) {
		pid, err := strconv.Atoi(l)
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	return pids
}

// echoTurn runs one turn that calls the echo tool, approves the call
// and returns the tool result the model received.
func echoTurn(t *testing.T, h *testHost, c *client.Conn, w *watcher, sid, turnID, text string) string {
	t.Helper()
	startTurn(t, c, sid, turnID, text)
	frames := w.until(t, "pending approval of "+turnID, func(frames []any) bool {
		p := pendingOf(frames)
		return len(p) == 1 && p[0].TurnID == turnID
	})
	pending := pendingOf(frames)[0]
	p, ok := pending.Request.Prompt.(protocol.ToolPermissionPrompt)
	if !ok || p.ToolName != echoTool || p.Category != protocol.ToolCategoryCustomTool {
		t.Fatalf("prompt %+v", pending.Request.Prompt)
	}
	review, ok := p.Review.(protocol.ToolArgumentsReview)
	if !ok || !strings.Contains(review.Arguments.Text, text) || review.ServerReadOnlyHint == nil || !*review.ServerReadOnlyHint {
		t.Fatalf("review %+v: want the arguments and the server's read-only claim", p.Review)
	}
	if _, err := c.AnswerInteraction(opCtx(t), protocol.InteractionAnswerInput{InteractionID: pending.InteractionID,
		Answer: answer(protocol.InteractionDecisionAllow)}); err != nil {
		t.Fatalf("answer: %v", err)
	}
	frames = w.untilTerminal(t, turnID)
	if got := terminals(frames, turnID)[0].Snapshot.RootTurn.Status; got != protocol.TurnCompleted {
		t.Fatalf("%s ended %s", turnID, got)
	}
	seen := h.model.Seen()
	last := seen[len(seen)-1]
	results := last.ToolResultsSinceUser()
	if len(results) != 1 {
		t.Fatalf("the model's last request has %d tool results", len(results))
	}
	return results[0].Text()
}

// makaMCPList runs 'maka mcp list' against the host.
func makaMCPList(t *testing.T, h *testHost) string {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := cli.Main([]string{"mcp", "list", "--root", h.host.Root}, strings.NewReader(""), &out, &errOut); code != 0 {
		t.Fatalf("maka mcp list: exit %d: %s", code, errOut.String())
	}
	return out.String()
}

// pidOf is the process id an echo result names.
func pidOf(t *testing.T, result string) int {
	t.Helper()
	_, after, ok := strings.Cut(result, "pid=")
	if !ok {
		t.Fatalf("result %q names no pid", result)
	}
	pid, err := strconv.Atoi(strings.Fields(after)[0])
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// An MCP server configured with 'maka mcp add' is started on first use,
// its tool reaches the model with its schema, each call is approved and
// its result returned to the model; two sessions share its one process;
// killed, it is started again on the next call; the host's exit stops it.
func TestMCPServerToolsOverTheSocket(t *testing.T) {
	h := newHost(t, echoModel)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	starts := t.TempDir() + "/starts"
	var out, errOut bytes.Buffer
	code := cli.Main([]string{"mcp", "add", "echo", "--root", h.host.Root, "--env", mcpServerEnv + "=" + starts, "--", exe, "-test.run=^$"},
		strings.NewReader(""), &out, &errOut)
	if code != 0 {
		t.Fatalf("maka mcp add: exit %d: %s%s", code, out.String(), errOut.String())
	}
	a := h.dial()
	servers := mcpServers(t, a)
	if len(servers) != 1 || servers[0].State != protocol.MCPStateNotStarted || servers[0].Starts != 0 ||
		len(servers[0].EnvNames) != 1 || servers[0].EnvNames[0] != mcpServerEnv {
		t.Fatalf("servers after add: %+v", servers)
	}
	if secrets, err := os.ReadFile(h.host.Root + "/credentials.json"); err != nil || !strings.Contains(string(secrets), starts) {
		t.Fatalf("the env value is not in the credential vault (%v)", err)
	}
	if db, err := os.ReadFile(h.host.Root + "/maka.db"); err != nil || bytes.Contains(db, []byte(starts)) {
		t.Fatalf("the env value reached the database (%v)", err)
	}

	createSession(t, a, "mcp-a", protocol.PermissionModeAsk)
	wa := watch(t, a, "mcp-a")
	first := echoTurn(t, h, a, wa, "mcp-a", "turn-1", "hello")
	if !strings.HasPrefix(first, "echo: hello pid=") {
		t.Fatalf("tool result %q", first)
	}
	pid1 := pidOf(t, first)
	var offered bool
	for _, tool := range h.model.Seen()[0].Tools {
		if tool.Function.Name == echoTool {
			offered = strings.Contains(string(tool.Function.Parameters), `"text"`) && strings.Contains(tool.Function.Description, "Echoes its text.")
		}
	}
	if !offered {
		t.Fatalf("the model was not offered %s with its schema", echoTool)
	}
	servers = mcpServers(t, a)
	if s := servers[0]; s.State != protocol.MCPStateRunning || s.Starts != 1 || len(s.Tools) != 1 || s.Tools[0].Name != "echo" || !s.Tools[0].ReadOnlyHint {
		t.Fatalf("server after its first use: %+v", s)
	}

	if list := makaMCPList(t, h); !strings.Contains(list, "echo") || !strings.Contains(list, "running (started 1×)") ||
		!strings.Contains(list, echoTool+" (says read-only)") {
		t.Fatalf("maka mcp list:\n%s", list)
	}

	// A second session, from another client, uses the same process.
	b := h.dial()
	createSession(t, b, "mcp-b", protocol.PermissionModeAsk)
	wb := watch(t, b, "mcp-b")
	second := echoTurn(t, h, b, wb, "mcp-b", "turn-1", "again")
	if pid := pidOf(t, second); pid != pid1 {
		t.Fatalf("second session's call ran in process %d, the first in %d", pid, pid1)
	}
	if got := startsOf(t, starts); len(got) != 1 || got[0] != pid1 {
		t.Fatalf("server starts %v, want one (%d)", got, pid1)
	}

	// Killed, it is failed until its next use starts it again.
	if err := syscall.Kill(pid1, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(failAfter)
	for s := mcpServers(t, a)[0]; s.State != protocol.MCPStateFailed; s = mcpServers(t, a)[0] {
		if time.Now().After(deadline) {
			t.Fatalf("server after its process was killed: %+v", s)
		}
		time.Sleep(10 * time.Millisecond) // polls a state the host reports
	}
	if s := mcpServers(t, a)[0]; !strings.Contains(s.Reason, "killed") {
		t.Fatalf("failure reason %q", s.Reason)
	}
	if list := makaMCPList(t, h); !strings.Contains(list, "failed: the server was killed by signal") {
		t.Fatalf("maka mcp list after the kill:\n%s", list)
	}
	third := echoTurn(t, h, a, wa, "mcp-a", "turn-2", "restarted")
	pid2 := pidOf(t, third)
	if got := startsOf(t, starts); len(got) != 2 || got[1] != pid2 || pid2 == pid1 {
		t.Fatalf("server starts %v after the kill; the call ran in %d", got, pid2)
	}
	if s := mcpServers(t, a)[0]; s.State != protocol.MCPStateRunning || s.Starts != 2 {
		t.Fatalf("server after its restart: %+v", s)
	}

	// The host's exit stops it: no process of it is left.
	if err := h.host.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid2, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("the server's process %d outlived the host: %v", pid2, err)
	}
}
