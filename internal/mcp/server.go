package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/maka-agent/maka/internal/tools"
	"github.com/maka-agent/maka/protocol"
)

// Bounds of what a server lists (a server is untrusted input to the model).
const (
	toolDescriptionMaxBytes = 2048
	toolSchemaMaxBytes      = 16 << 10
)

// server is one configured server and its live connection.
type server struct {
	m   *Manager
	cfg Server
	// ctx ends when the server is stopped for good (shutdown).
	ctx    context.Context
	cancel context.CancelFunc
	// sem serialises starts and stops (a one-slot semaphore, so that a
	// waiter can give up with its context).
	sem chan struct{}

	// guarded by m.mu
	state    string
	reason   string
	conn     *connection // nil unless running
	listed   []toolInfo  // from the last start that listed them
	starts   int64
	failures int
	failedAt time.Time
	stopped  bool // removed, replaced or the manager closed
}

// connection is one started client session of a server.
type connection struct {
	sess      *mcpsdk.ClientSession
	proc      *process     // stdio only
	http      *http.Client // http only
	startedAt time.Time
	done      chan struct{} // closed once the watcher saw the session end
}

// toolInfo is one listed tool.
type toolInfo struct {
	name, description string
	schema            json.RawMessage
	readOnlyHint      bool
}

func (m *Manager) newServer(cfg Server) *server {
	ctx, cancel := context.WithCancel(m.ctx)
	return &server{m: m, cfg: cfg, ctx: ctx, cancel: cancel, sem: make(chan struct{}, 1), state: protocol.MCPStateNotStarted}
}

// needsFirstStart reports whether the server was never tried.
func (s *server) needsFirstStart() bool {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	return s.state == protocol.MCPStateNotStarted && !s.stopped
}

func (s *server) lock(ctx context.Context) error {
	select {
	case s.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-s.ctx.Done():
		return ErrClosed
	}
}

func (s *server) unlock() { <-s.sem }

// backoff is the wait before the next start after n consecutive failures.
func backoff(base time.Duration, n int) time.Duration {
	if n <= 0 {
		return 0
	}
	d := base << (n - 1)
	if d > restartMax || d <= 0 {
		d = restartMax
	}
	return d
}

// connect returns the running session, starting the server when it is
// not running (after the backoff its failures call for).
func (s *server) connect(ctx context.Context) (*mcpsdk.ClientSession, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.unlock()
	s.m.mu.Lock()
	if s.stopped {
		s.m.mu.Unlock()
		return nil, fmt.Errorf("the MCP server %s was removed or replaced, or the host is shutting down", s.cfg.Name)
	}
	if s.conn != nil {
		select {
		case <-s.conn.done:
		default:
			sess := s.conn.sess
			s.m.mu.Unlock()
			return sess, nil
		}
	}
	if s.failures >= maxFailures {
		err := fmt.Errorf("the MCP server %s failed %d times in a row and is not started again until it is set again or the host restarts; last: %s", s.cfg.Name, s.failures, s.reason)
		s.m.mu.Unlock()
		return nil, err
	}
	wait := time.Until(s.failedAt.Add(backoff(s.m.opts.RestartBase, s.failures)))
	s.m.mu.Unlock()
	if wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, context.Cause(ctx)
		case <-s.ctx.Done():
			t.Stop()
			return nil, ErrClosed
		}
	}
	return s.start()
}

// start starts the server once; the caller holds sem.
func (s *server) start() (*mcpsdk.ClientSession, error) {
	s.m.mu.Lock()
	s.starts++
	s.m.mu.Unlock()
	ctx, cancel := context.WithTimeout(s.ctx, s.m.opts.StartTimeout)
	defer cancel()
	c, listed, err := s.dial(ctx)
	s.m.mu.Lock()
	if err == nil && s.stopped {
		// Stopped while starting: nothing may outlive the stop.
		s.m.mu.Unlock()
		c.close()
		return nil, ErrClosed
	}
	defer s.m.mu.Unlock()
	if err != nil {
		s.state, s.reason = protocol.MCPStateFailed, protocol.TruncateUTF8(tools.Redact(err.Error()), protocol.MCPReasonMaxBytes)
		s.failures++
		s.failedAt = time.Now()
		s.m.log.Warn("mcp server did not start", "server", s.cfg.Name, "failures", s.failures, "err", s.reason)
		return nil, fmt.Errorf("the MCP server %s did not start: %s", s.cfg.Name, s.reason)
	}
	s.conn, s.listed, s.state, s.reason = c, listed, protocol.MCPStateRunning, ""
	s.m.log.Info("mcp server started", "server", s.cfg.Name, "tools", len(listed), "starts", s.starts)
	s.m.wg.Add(1)
	go s.watch(c)
	return c.sess, nil
}

// dial starts the process or the HTTP session and lists the tools.
func (s *server) dial(ctx context.Context) (*connection, []toolInfo, error) {
	c := &connection{done: make(chan struct{}), startedAt: time.Now()}
	var transport mcpsdk.Transport
	switch s.cfg.Transport {
	case protocol.MCPTransportStdio:
		env, err := s.m.env(s.cfg)
		if err != nil {
			return nil, nil, err
		}
		p, stdout, stdin, err := startProcess(s.cfg, env, s.m.log)
		if err != nil {
			return nil, nil, err
		}
		c.proc = p
		transport = &mcpsdk.IOTransport{Reader: stdout, Writer: stdin}
	case protocol.MCPTransportHTTP:
		h, err := s.m.headers(s.cfg)
		if err != nil {
			return nil, nil, err
		}
		c.http = httpClient(s.cfg.URL, h)
		transport = &mcpsdk.StreamableClientTransport{Endpoint: s.cfg.URL, HTTPClient: c.http, MaxRetries: 2, DisableStandaloneSSE: true}
	default:
		return nil, nil, fmt.Errorf("unknown transport %q", s.cfg.Transport)
	}
	sess, err := s.m.client.Connect(ctx, transport, nil)
	if err != nil {
		if c.proc != nil {
			c.proc.terminate()
			if r := c.proc.exitReason(); r != "" {
				err = fmt.Errorf("%w (%s)", err, r)
			}
		}
		c.closeHTTP()
		return nil, nil, err
	}
	c.sess = sess
	listed, err := s.list(ctx, sess)
	if err != nil {
		c.close()
		return nil, nil, fmt.Errorf("list tools: %w", err)
	}
	return c, listed, nil
}

// list reads the server's tools, keeping those the model can be given.
func (s *server) list(ctx context.Context, sess *mcpsdk.ClientSession) ([]toolInfo, error) {
	var out []toolInfo
	skipped := 0
	// Tool rules match names without regard to case: two tools whose
	// names differ only in case would share every rule, so the second is
	// left out.
	seen := map[string]bool{}
	for t, err := range sess.Tools(ctx, nil) {
		if err != nil {
			return nil, err
		}
		if len(out) >= protocol.MCPToolsMax {
			skipped++
			continue
		}
		info, ok := s.toolInfo(t)
		if !ok || seen[strings.ToLower(info.name)] {
			skipped++
			continue
		}
		seen[strings.ToLower(info.name)] = true
		out = append(out, info)
		if len(out)+skipped > 4*protocol.MCPToolsMax {
			break
		}
	}
	if skipped > 0 {
		s.m.log.Warn("mcp server tools left out (bad name, schema or description, or too many)", "server", s.cfg.Name, "skipped", skipped)
	}
	return out, nil
}

// toolInfo checks one listed tool: a name the model accepts in
// mcp__<server>__<tool> (at most 64 bytes), a JSON object schema within
// bounds; the description is cut.
func (s *server) toolInfo(t *mcpsdk.Tool) (toolInfo, bool) {
	if t == nil || !validToolName(t.Name) || len(ToolName(s.cfg.Name, t.Name)) > protocol.MCPToolNameMaxBytes {
		return toolInfo{}, false
	}
	schema, err := json.Marshal(t.InputSchema)
	if err != nil || len(schema) > toolSchemaMaxBytes {
		return toolInfo{}, false
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(schema, &obj) != nil {
		return toolInfo{}, false
	}
	if typ, ok := obj["type"]; ok && string(typ) != `"object"` {
		return toolInfo{}, false
	}
	info := toolInfo{name: t.Name, schema: schema,
		description: protocol.TruncateUTF8(t.Description, toolDescriptionMaxBytes)}
	if t.Annotations != nil {
		info.readOnlyHint = t.Annotations.ReadOnlyHint
	}
	return info, true
}

// watch waits for the session to end (the process died, the server
// closed it, or a stop), then releases what it held and records why.
func (s *server) watch(c *connection) {
	defer s.m.wg.Done()
	_ = c.sess.Wait()
	c.close()
	reason := "the connection to the server closed"
	if c.proc != nil {
		reason = c.proc.exitReason()
	}
	s.m.mu.Lock()
	if s.conn == c {
		s.conn = nil
		if !s.stopped {
			s.state, s.reason = protocol.MCPStateFailed, reason
			if time.Since(c.startedAt) >= healthyAfter {
				s.failures = 0
			}
			s.failures++
			s.failedAt = time.Now()
			s.m.log.Warn("mcp server stopped; it starts again on its next use", "server", s.cfg.Name, "reason", reason)
		}
	}
	s.m.mu.Unlock()
	close(c.done)
}

// close ends the session and the process group (idempotent).
func (c *connection) close() {
	if c.sess != nil {
		_ = c.sess.Close()
	}
	if c.proc != nil {
		c.proc.terminate()
	}
	c.closeHTTP()
}

func (c *connection) closeHTTP() {
	if c.http != nil {
		c.http.CloseIdleConnections()
	}
}

// shutdown stops the server for good and waits until its connection is
// released.
func (s *server) shutdown() {
	s.m.mu.Lock()
	s.stopped = true
	c := s.conn
	s.m.mu.Unlock()
	s.cancel()
	if c != nil {
		c.close()
		<-c.done
	}
	// A start in progress sees stopped and closes what it opened.
	s.sem <- struct{}{}
	<-s.sem
}

// status is the server's listing entry.
func (s *server) status() protocol.MCPServer {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	st := protocol.MCPServer{Name: s.cfg.Name, Transport: s.cfg.Transport, Command: s.cfg.Command, Args: s.cfg.Args,
		Cwd: s.cfg.Cwd, URL: s.cfg.URL, EnvNames: s.cfg.EnvNames, HeaderNames: s.cfg.HeaderNames,
		State: s.state, Reason: s.reason, Starts: s.starts}
	for _, t := range s.listed {
		st.Tools = append(st.Tools, protocol.MCPTool{Name: t.name, ReadOnlyHint: t.readOnlyHint,
			Description: protocol.TruncateUTF8(t.description, protocol.MCPToolDescriptionMaxBytes)})
	}
	return st
}

// modelTools are the server's listed tools as the model's tools.
func (s *server) modelTools() []tools.Tool {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	out := make([]tools.Tool, 0, len(s.listed))
	for _, t := range s.listed {
		out = append(out, &Tool{server: s, info: t})
	}
	return out
}

// call runs one tool call on the shared session.
func (s *server) call(ctx context.Context, name string, args map[string]any) (*mcpsdk.CallToolResult, error) {
	sess, err := s.connect(ctx)
	if err != nil {
		return nil, err
	}
	res, err := sess.CallTool(ctx, &mcpsdk.CallToolParams{Name: name, Arguments: args})
	if err != nil && errors.Is(err, mcpsdk.ErrConnectionClosed) {
		return nil, fmt.Errorf("the MCP server %s stopped during the call (it starts again on the next one): %w", s.cfg.Name, err)
	}
	return res, err
}
