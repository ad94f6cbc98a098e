package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/maka-agent/maka/internal/config"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/internal/tools"
	"github.com/maka-agent/maka/protocol"
)

// modeEnv makes the test binary a stdio MCP server; its value is a file
// whose content says how it behaves: "echo" serves the echo tool, "exit"
// exits at once with status 3 after a line on stderr.
const modeEnv = "MAKA_MCP_TEST_SERVER"

func TestMain(m *testing.M) {
	if path := os.Getenv(modeEnv); path != "" {
		os.Exit(serverMain(path))
	}
	goleak.VerifyTestMain(m)
}

type echoIn struct {
	Text string `json:"text"`
}

func serverMain(modeFile string) int {
	mode, err := os.ReadFile(modeFile)
	if err != nil {
		return 2
	}
	if strings.TrimSpace(string(mode)) == "exit" {
		fmt.Fprintln(os.Stderr, "refusing to start")
		return 3
	}
	s := mcpsdk.NewServer(&mcpsdk.Implementation{Name: "echo", Version: "1"}, nil)
	mcpsdk.AddTool(s, &mcpsdk.Tool{Name: "echo", Description: "Echoes."},
		func(_ context.Context, _ *mcpsdk.CallToolRequest, in echoIn) (*mcpsdk.CallToolResult, any, error) {
			if in.Text == "fail" {
				return &mcpsdk.CallToolResult{IsError: true, Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: "it failed"}}}, nil, nil
			}
			return &mcpsdk.CallToolResult{Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: fmt.Sprintf("%s pid=%d", in.Text, os.Getpid())}}}, nil, nil
		})
	_ = s.Run(context.Background(), &mcpsdk.StdioTransport{})
	return 0
}

// fixture is a manager on a fresh store and credentials file.
type fixture struct {
	m       *Manager
	st      *store.Store
	secrets *config.SecretFile
	dir     string
	logMu   *sync.Mutex
	log     *bytes.Buffer
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(context.Background(), filepath.Join(dir, "maka.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close(context.Background()) })
	secrets, err := config.OpenSecretFile(filepath.Join(dir, "credentials.json"))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, nil))
	m, err := New(context.Background(), Options{Store: st, Secrets: secrets, Log: log, RestartBase: time.Millisecond, StartTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return &fixture{m: m, st: st, secrets: secrets, dir: dir, logMu: &mu, log: &buf}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// addEcho configures the test binary as the stdio server name, behaving as
// its mode file says.
func (f *fixture) addEcho(t *testing.T, name, mode string) string {
	t.Helper()
	modeFile := filepath.Join(f.dir, name+".mode")
	if err := os.WriteFile(modeFile, []byte(mode), 0o600); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.m.Set(context.Background(), protocol.MCPServersSetInput{Name: name, Transport: protocol.MCPTransportStdio,
		Command: exe, Env: []protocol.MCPPair{{Name: modeEnv, Value: modeFile}}}); err != nil {
		t.Fatal(err)
	}
	return modeFile
}

func statusOf(m *Manager, name string) protocol.MCPServer {
	for _, s := range m.Status() {
		if s.Name == name {
			return s
		}
	}
	return protocol.MCPServer{}
}

func call(t *testing.T, tool tools.Tool, args string) tools.Result {
	t.Helper()
	res, err := tool.Run(context.Background(), tools.Env{}, json.RawMessage(args))
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// A server that cannot start fails only its own tools: the others are
// offered and run, and the listing says why it failed.
func TestAFailedServerFailsOnlyItsOwnTools(t *testing.T) {
	f := newFixture(t)
	f.addEcho(t, "good", "echo")
	if _, err := f.m.Set(context.Background(), protocol.MCPServersSetInput{Name: "bad", Transport: protocol.MCPTransportStdio,
		Command: "/nonexistent/mcp-server"}); err != nil {
		t.Fatal(err)
	}
	got := f.m.Tools(context.Background())
	if len(got) != 1 || got[0].Name() != "mcp__good__echo" {
		t.Fatalf("tools %v", got)
	}
	if res := call(t, got[0], `{"text":"hi"}`); res.IsError || !strings.HasPrefix(res.ModelText, "hi pid=") {
		t.Fatalf("call: %+v", res)
	}
	if res := call(t, got[0], `{"text":"fail"}`); !res.IsError || res.ModelText != "it failed" {
		t.Fatalf("a failing call: %+v", res)
	}
	if res := call(t, got[0], `[1]`); !res.IsError {
		t.Fatalf("arguments that are not an object: %+v", res)
	}
	if s := statusOf(f.m, "bad"); s.State != protocol.MCPStateFailed || !strings.Contains(s.Reason, "no such file") || s.Starts != 1 {
		t.Fatalf("bad server: %+v", s)
	}
	if s := statusOf(f.m, "good"); s.State != protocol.MCPStateRunning || len(s.Tools) != 1 {
		t.Fatalf("good server: %+v", s)
	}
}

// A server that died is started again by the next call; one that keeps
// failing is given up after maxFailures starts, and its tools' calls say
// why.
func TestRestartsAreBoundedAndTheReasonReachesTheCall(t *testing.T) {
	f := newFixture(t)
	modeFile := f.addEcho(t, "echo", "echo")
	tool := f.m.Tools(context.Background())[0]
	pid := 0
	if _, err := fmt.Sscanf(call(t, tool, `{"text":"a"}`).ModelText, "a pid=%d", &pid); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitState(t, f.m, "echo", protocol.MCPStateFailed)
	if res := call(t, tool, `{"text":"b"}`); res.IsError || strings.HasSuffix(res.ModelText, fmt.Sprint(pid)) {
		t.Fatalf("call after the kill: %+v", res)
	}
	if s := statusOf(f.m, "echo"); s.Starts != 2 || s.State != protocol.MCPStateRunning {
		t.Fatalf("after the restart: %+v", s)
	}

	// From now on it refuses to start.
	if err := os.WriteFile(modeFile, []byte("exit"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Sscanf(call(t, tool, `{"text":"c"}`).ModelText, "c pid=%d", &pid); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitState(t, f.m, "echo", protocol.MCPStateFailed)
	var last tools.Result
	for range maxFailures + 2 {
		last = call(t, tool, `{"text":"d"}`)
		if !last.IsError {
			t.Fatalf("a call of a server that cannot start: %+v", last)
		}
	}
	if !strings.Contains(last.ModelText, "failed 5 times in a row") || !strings.Contains(last.ModelText, "status 3") {
		t.Fatalf("the last call's error does not say why: %s", last.ModelText)
	}
	// Both deaths count: a server that keeps dying within healthyAfter of
	// its start is as bounded as one that cannot start.
	if s := statusOf(f.m, "echo"); s.Starts != maxFailures {
		t.Fatalf("starts %d, want %d", s.Starts, maxFailures)
	}
	// Setting it again starts afresh.
	if err := os.WriteFile(modeFile, []byte("echo"), 0o600); err != nil {
		t.Fatal(err)
	}
	f.addEcho(t, "echo", "echo")
	if res := call(t, f.m.Tools(context.Background())[0], `{"text":"e"}`); res.IsError {
		t.Fatalf("after it was set again: %+v", res)
	}
	if !strings.Contains(logText(f), "refusing to start") {
		t.Fatal("the server's stderr is not in the host log")
	}
}

func logText(f *fixture) string {
	f.logMu.Lock()
	defer f.logMu.Unlock()
	return f.log.String()
}

func waitState(t *testing.T, m *Manager, name, state string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for statusOf(m, name).State != state {
		if time.Now().After(deadline) {
			t.Fatalf("server %s: %+v, want %s", name, statusOf(m, name), state)
		}
		time.Sleep(5 * time.Millisecond) // polls the state the manager reports
	}
}

// Environment values live in the credentials file, never in the store's
// document; removing the server removes them and stops its process.
func TestValuesStayInTheCredentialsFile(t *testing.T) {
	f := newFixture(t)
	f.addEcho(t, "echo", "echo")
	modeFile := filepath.Join(f.dir, "echo.mode")
	var body []byte
	if err := f.st.Read(context.Background(), func(q store.Querier) error {
		_, b, _, err := store.ReadDocument(q, DocServers)
		body = b
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(body, []byte(modeFile)) || !bytes.Contains(body, []byte(modeEnv)) {
		t.Fatalf("document %s", body)
	}
	if v, ok := f.secrets.GetKey(secretKey("echo", "env", modeEnv)); !ok || v != modeFile {
		t.Fatalf("credentials file: %q %v", v, ok)
	}
	tool := f.m.Tools(context.Background())[0]
	pid := 0
	if _, err := fmt.Sscanf(call(t, tool, `{"text":"a"}`).ModelText, "a pid=%d", &pid); err != nil {
		t.Fatal(err)
	}
	removed, err := f.m.Remove(context.Background(), "echo")
	if err != nil || !removed {
		t.Fatalf("remove: %v %v", removed, err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("the removed server's process is alive: %v", err)
	}
	if _, ok := f.secrets.GetKey(secretKey("echo", "env", modeEnv)); ok {
		t.Fatal("the removed server's value is still in the credentials file")
	}
	if res := call(t, tool, `{"text":"b"}`); !res.IsError {
		t.Fatalf("a call of a removed server: %+v", res)
	}
	// A new manager on the same root reads the configuration back.
	f.addEcho(t, "again", "echo")
	m2, err := New(context.Background(), Options{Store: f.st, Secrets: f.secrets})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	if s := m2.Status(); len(s) != 1 || s[0].Name != "again" || s[0].State != protocol.MCPStateNotStarted {
		t.Fatalf("reloaded: %+v", s)
	}
}

// An http server gets its configured headers on every request.
func TestHTTPServerGetsItsHeaders(t *testing.T) {
	srv := mcpsdk.NewServer(&mcpsdk.Implementation{Name: "h", Version: "1"}, nil)
	mcpsdk.AddTool(srv, &mcpsdk.Tool{Name: "ping"}, func(context.Context, *mcpsdk.CallToolRequest, struct{}) (*mcpsdk.CallToolResult, any, error) {
		return &mcpsdk.CallToolResult{Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: "pong"}}}, nil, nil
	})
	handler := mcpsdk.NewStreamableHTTPHandler(func(*http.Request) *mcpsdk.Server { return srv }, nil)
	var mu sync.Mutex
	var auths []string
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auths = append(auths, r.Header.Get("Authorization"))
		mu.Unlock()
		handler.ServeHTTP(w, r)
	}))
	defer hs.Close()
	f := newFixture(t)
	if _, err := f.m.Set(context.Background(), protocol.MCPServersSetInput{Name: "remote", Transport: protocol.MCPTransportHTTP,
		URL: hs.URL, Headers: []protocol.MCPPair{{Name: "Authorization", Value: "Bearer tok-123"}}}); err != nil {
		t.Fatal(err)
	}
	got := f.m.Tools(context.Background())
	if len(got) != 1 || got[0].Name() != "mcp__remote__ping" {
		t.Fatalf("tools %v; status %+v", got, f.m.Status())
	}
	if res := call(t, got[0], `{}`); res.IsError || res.ModelText != "pong" {
		t.Fatalf("call: %+v", res)
	}
	if err := f.m.Close(); err != nil {
		t.Fatal(err)
	}
	hs.CloseClientConnections()
	mu.Lock()
	defer mu.Unlock()
	if len(auths) == 0 {
		t.Fatal("no request reached the server")
	}
	for _, a := range auths {
		if a != "Bearer tok-123" {
			t.Fatalf("a request without the header: %q", a)
		}
	}
}

// A server's stderr reaches the log in bounded lines, redacted.
func TestStderrIsLoggedInBoundedLines(t *testing.T) {
	var in strings.Builder
	in.WriteString(strings.Repeat("x", 5000) + "\n")
	in.WriteString("token sk-ant-api03-" + strings.Repeat("a", 40) + "\n")
	for i := range stderrMaxLines + 50 {
		fmt.Fprintf(&in, "line %d\n", i)
	}
	var out bytes.Buffer
	logStderr(strings.NewReader(in.String()), slog.New(slog.NewJSONHandler(&out, nil)))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != stderrMaxLines+1 {
		t.Fatalf("%d log lines, want %d", len(lines), stderrMaxLines+1)
	}
	var first struct{ Line string }
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil || len(first.Line) > stderrLineMaxBytes+8 || !strings.HasSuffix(first.Line, "…") {
		t.Fatalf("an over-long line is logged as %d bytes (%v)", len(first.Line), err)
	}
	if strings.Contains(lines[1], "sk-ant-api03") {
		t.Fatalf("a secret reached the log: %s", lines[1])
	}
	if !strings.Contains(lines[len(lines)-1], "further lines are not logged") {
		t.Fatalf("last log line %s", lines[len(lines)-1])
	}
}

// Replacing a running server stops its process; the new configuration
// starts on its next use.
func TestReplacingAServerStopsItsProcess(t *testing.T) {
	f := newFixture(t)
	f.addEcho(t, "echo", "echo")
	pid := 0
	if _, err := fmt.Sscanf(call(t, f.m.Tools(context.Background())[0], `{"text":"a"}`).ModelText, "a pid=%d", &pid); err != nil {
		t.Fatal(err)
	}
	f.addEcho(t, "echo", "echo")
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("the replaced server's process is alive: %v", err)
	}
	if s := statusOf(f.m, "echo"); s.State != protocol.MCPStateNotStarted || s.Starts != 0 {
		t.Fatalf("after the replace: %+v", s)
	}
}

// A configuration document that does not decode leaves the host without
// servers instead of failing it; the next set replaces it.
func TestAnUndecodableConfigurationIsReplaced(t *testing.T) {
	f := newFixture(t)
	if err := f.st.Write(context.Background(), func(tx *store.Tx) error {
		_, err := store.WriteDocument(tx, DocServers, []byte(`{"servers":7}`), 0)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	m, err := New(context.Background(), Options{Store: f.st, Secrets: f.secrets})
	if err != nil {
		t.Fatalf("a bad document fails the manager: %v", err)
	}
	defer m.Close()
	if len(m.Status()) != 0 {
		t.Fatalf("servers %+v", m.Status())
	}
	if _, err := m.Set(context.Background(), protocol.MCPServersSetInput{Name: "x", Transport: protocol.MCPTransportHTTP, URL: "http://127.0.0.1:1"}); err != nil {
		t.Fatalf("set over a bad document: %v", err)
	}
}
