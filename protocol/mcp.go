package protocol

import (
	"regexp"
	"strings"
	"sync"
)

// This file owns the MCP extension operations of docs/protocol.md:
// mcp.servers.query (the root's MCP servers with their state and tools),
// mcp.servers.set (add or replace one) and mcp.servers.remove.

// The MCP extension operations.
const (
	OpMCPServersQuery  Operation = "mcp.servers.query"
	OpMCPServersSet    Operation = "mcp.servers.set"
	OpMCPServersRemove Operation = "mcp.servers.remove"
)

// MCP bounds.
const (
	MCPServersMax              = 16
	MCPServerNameMaxBytes      = 32
	MCPCommandMaxBytes         = 4096
	MCPArgsMax                 = 64
	MCPArgMaxBytes             = 4096
	MCPPairsMax                = 32 // env variables, or headers
	MCPPairNameMaxBytes        = 128
	MCPSecretMaxBytes          = 8192
	MCPURLMaxBytes             = 2048
	MCPToolsMax                = 64 // tools a server may offer the model
	MCPToolNameMaxBytes        = 64
	MCPToolDescriptionMaxBytes = 256 // in a listing
	MCPReasonMaxBytes          = 512
)

// MCP transports.
const (
	MCPTransportStdio = "stdio" // a command the host starts, over stdin/stdout
	MCPTransportHTTP  = "http"  // the streamable HTTP transport
)

// MCP server states.
const (
	MCPStateNotStarted = "not_started"
	MCPStateRunning    = "running"
	MCPStateFailed     = "failed"
)

var (
	// mcpServerNamePattern: a server name becomes part of tool names
	// (mcp__<server>__<tool>), so it holds no "__" either.
	mcpServerNamePattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$`) })
	mcpEnvNamePattern    = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`) })
	mcpHeaderNamePattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile("^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}$") })
	mcpToolNamePattern   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`) })
)

// ValidMCPServerName reports whether name may name an MCP server.
func ValidMCPServerName(name string) bool {
	return mcpServerNamePattern().MatchString(name) && !strings.Contains(name, "__") && !strings.HasSuffix(name, "_")
}

// MCPPair is an environment variable or an HTTP header of a server, with
// its value; values are kept in the credential vault, never returned.
type MCPPair struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// MCPServersSetInput adds the server Name, or replaces it (its state and
// connection start again). Transport stdio takes Command, Args, Cwd and
// Env; http takes URL and Headers.
type MCPServersSetInput struct {
	Name      string    `json:"name"`
	Transport string    `json:"transport"`
	Command   string    `json:"command,omitempty"`
	Args      []string  `json:"args,omitempty"`
	Cwd       string    `json:"cwd,omitempty"`
	Env       []MCPPair `json:"env,omitempty"`
	URL       string    `json:"url,omitempty"`
	Headers   []MCPPair `json:"headers,omitempty"`
}

// MCPServersRemoveInput removes the server Name.
type MCPServersRemoveInput struct {
	Name string `json:"name"`
}

// MCPServersRemoveResult says whether the server existed.
type MCPServersRemoveResult struct {
	Name    string `json:"name"`
	Removed bool   `json:"removed"`
}

// MCPTool is one tool a server offers, as listed: its name on the server,
// its description (cut to MCPToolDescriptionMaxBytes) and whether the
// server claims it only reads (a hint, never trusted).
type MCPTool struct {
	Name         string `json:"name"`
	Description  string `json:"description,omitempty"`
	ReadOnlyHint bool   `json:"readOnlyHint,omitempty"`
}

// MCPServer is one configured server with its live state in this host:
// the names (never the values) of its environment variables and headers,
// how many times the host started it, the tools it listed, and why it
// failed. ToolsOmitted counts the tools left out of the listing to keep
// the result within a frame.
type MCPServer struct {
	Name         string    `json:"name"`
	Transport    string    `json:"transport"`
	Command      string    `json:"command,omitempty"`
	Args         []string  `json:"args"`
	Cwd          string    `json:"cwd,omitempty"`
	URL          string    `json:"url,omitempty"`
	EnvNames     []string  `json:"envNames"`
	HeaderNames  []string  `json:"headerNames"`
	State        string    `json:"state"`
	Reason       string    `json:"reason,omitempty"`
	Starts       int64     `json:"starts"`
	Tools        []MCPTool `json:"tools"`
	ToolsOmitted int64     `json:"toolsOmitted,omitempty"`
}

// MarshalJSON writes nil lists as [].
func (s MCPServer) MarshalJSON() ([]byte, error) {
	type plain MCPServer
	s.Args, s.EnvNames, s.HeaderNames = nonNilStrings(s.Args), nonNilStrings(s.EnvNames), nonNilStrings(s.HeaderNames)
	if s.Tools == nil {
		s.Tools = []MCPTool{}
	}
	return Marshal(plain(s))
}

// MCPServersQueryResult lists the root's servers by name.
type MCPServersQueryResult struct {
	Servers []MCPServer `json:"servers"`
}

// MarshalJSON writes a nil list as [].
func (r MCPServersQueryResult) MarshalJSON() ([]byte, error) {
	if r.Servers == nil {
		r.Servers = []MCPServer{}
	}
	type plain MCPServersQueryResult
	return Marshal(plain(r))
}

func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func init() {
	DefineExtension(OpMCPServersQuery, ModeQuery, AvailabilityReady,
		sessionErrors(ErrPersistenceFailed),
		decodeEmptyInput, decodeMCPServersQueryResult)
	DefineExtension(OpMCPServersSet, ModeCommand, AvailabilityReady,
		sessionErrors(ErrInvalidRequest, ErrPersistenceFailed, ErrCommitOutcomeUnknown),
		decodeMCPServersSetInput, decodeMCPServerResult)
	DefineExtension(OpMCPServersRemove, ModeCommand, AvailabilityReady,
		sessionErrors(ErrInvalidRequest, ErrPersistenceFailed, ErrCommitOutcomeUnknown),
		decodeMCPServersRemoveInput, decodeMCPServersRemoveResult)
}

func decodeMCPServerName(d *D, o Obj, key string) string {
	v, p := o.Get(key)
	name := d.Pattern(v, p, mcpServerNamePattern())
	if !d.Failed() && strings.Contains(name, "__") {
		d.Fail(p, `a server name holds no "__"`)
	}
	return name
}

// mcpText decodes a string of 1..max bytes without NUL or line breaks
// (when oneLine).
func mcpText(d *D, o Obj, key string, max int, oneLine bool) string {
	s := o.StringBytes(key, 1, max)
	if d.Failed() {
		return ""
	}
	bad := "\x00"
	if oneLine {
		bad = "\x00\r\n"
	}
	if strings.ContainsAny(s, bad) {
		d.Fail(o.Path()+"."+key, "holds a NUL or a line break")
		return ""
	}
	return s
}

func decodeMCPArgs(d *D, o Obj, key string, min int) []string {
	v, p := o.Get(key)
	items := d.Array(v, p, min, MCPArgsMax)
	out := make([]string, 0, len(items))
	for i, item := range items {
		s := d.StringBytes(item, Index(p, i), 0, MCPArgMaxBytes)
		if !d.Failed() && strings.Contains(s, "\x00") {
			d.Fail(Index(p, i), "holds a NUL")
		}
		if d.Failed() {
			return nil
		}
		out = append(out, s)
	}
	return out
}

func decodeMCPPairs(d *D, o Obj, key string, names *regexp.Regexp, oneLine bool) []MCPPair {
	v, p := o.Get(key)
	items := d.Array(v, p, 1, MCPPairsMax)
	out := make([]MCPPair, 0, len(items))
	seen := map[string]bool{}
	for i, item := range items {
		po := d.Exact(item, Index(p, i), "name", "value")
		nv, np := po.Get("name")
		pair := MCPPair{Name: d.Pattern(nv, np, names)}
		pair.Value = po.StringBytes("value", 0, MCPSecretMaxBytes)
		if !d.Failed() && (strings.Contains(pair.Value, "\x00") || oneLine && strings.ContainsAny(pair.Value, "\r\n")) {
			d.Fail(Index(p, i)+".value", "holds a NUL or a line break")
		}
		if !d.Failed() && seen[strings.ToLower(pair.Name)] {
			d.Fail(np, "repeats %q", pair.Name)
		}
		if d.Failed() {
			return nil
		}
		seen[strings.ToLower(pair.Name)] = true
		out = append(out, pair)
	}
	return out
}

func decodeMCPURL(d *D, o Obj, key string) string {
	u := mcpText(d, o, key, MCPURLMaxBytes, true)
	if !d.Failed() && !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
		d.Fail(o.Path()+"."+key, "not an http or https URL")
		return ""
	}
	return u
}

func decodeMCPCwd(d *D, o Obj, key string) string {
	c := mcpText(d, o, key, WorkspacePathMaxBytes, false)
	if !d.Failed() && !strings.HasPrefix(c, "/") {
		d.Fail(o.Path()+"."+key, "not an absolute path")
		return ""
	}
	return c
}

func decodeMCPServersSetInput(d *D, v Value) any {
	o := d.Closed(v, "input", []string{"name", "transport"}, []string{"command", "args", "cwd", "env", "url", "headers"})
	in := MCPServersSetInput{Name: decodeMCPServerName(d, o, "name"), Transport: o.Enum("transport", MCPTransportStdio, MCPTransportHTTP)}
	if d.Failed() {
		return in
	}
	switch in.Transport {
	case MCPTransportStdio:
		if o.Has("url") || o.Has("headers") {
			d.Fail("input", "a stdio server takes no url or headers")
			return in
		}
		in.Command = mcpText(d, o, "command", MCPCommandMaxBytes, false)
		if o.Has("args") {
			in.Args = decodeMCPArgs(d, o, "args", 1)
		}
		if o.Has("cwd") {
			in.Cwd = decodeMCPCwd(d, o, "cwd")
		}
		if o.Has("env") {
			in.Env = decodeMCPPairs(d, o, "env", mcpEnvNamePattern(), false)
		}
	case MCPTransportHTTP:
		if o.Has("command") || o.Has("args") || o.Has("cwd") || o.Has("env") {
			d.Fail("input", "an http server takes no command, args, cwd or env")
			return in
		}
		in.URL = decodeMCPURL(d, o, "url")
		if o.Has("headers") {
			in.Headers = decodeMCPPairs(d, o, "headers", mcpHeaderNamePattern(), true)
		}
	}
	return in
}

func decodeMCPServersRemoveInput(d *D, v Value) any {
	o := d.Exact(v, "input", "name")
	return MCPServersRemoveInput{Name: decodeMCPServerName(d, o, "name")}
}

func decodeMCPServersRemoveResult(d *D, v Value) any {
	o := d.Exact(v, "result", "name", "removed")
	return MCPServersRemoveResult{Name: decodeMCPServerName(d, o, "name"), Removed: o.Bool("removed")}
}

func decodeMCPServerResult(d *D, v Value) any { return decodeMCPServer(d, v, "result") }

func decodeMCPServersQueryResult(d *D, v Value) any {
	o := d.Exact(v, "result", "servers")
	sv, sp := o.Get("servers")
	items := d.Array(sv, sp, 0, MCPServersMax)
	out := MCPServersQueryResult{Servers: make([]MCPServer, 0, len(items))}
	for i, item := range items {
		s := decodeMCPServer(d, item, Index(sp, i))
		if d.Failed() {
			return MCPServersQueryResult{}
		}
		out.Servers = append(out.Servers, s)
	}
	return out
}

func decodeMCPNames(d *D, o Obj, key string, names *regexp.Regexp) []string {
	v, p := o.Get(key)
	items := d.Array(v, p, 0, MCPPairsMax)
	out := make([]string, 0, len(items))
	for i, item := range items {
		s := d.Pattern(item, Index(p, i), names)
		if d.Failed() {
			return nil
		}
		out = append(out, s)
	}
	return out
}

func decodeMCPServer(d *D, v Value, path string) MCPServer {
	o := d.Closed(v, path, []string{"name", "transport", "args", "envNames", "headerNames", "state", "starts", "tools"},
		[]string{"command", "cwd", "url", "reason", "toolsOmitted"})
	s := MCPServer{Name: decodeMCPServerName(d, o, "name"), Transport: o.Enum("transport", MCPTransportStdio, MCPTransportHTTP)}
	if d.Failed() {
		return MCPServer{}
	}
	if s.Transport == MCPTransportStdio {
		s.Command = mcpText(d, o, "command", MCPCommandMaxBytes, false)
		if o.Has("cwd") {
			s.Cwd = decodeMCPCwd(d, o, "cwd")
		}
		if o.Has("url") {
			d.Fail(path, "a stdio server has no url")
		}
	} else {
		s.URL = decodeMCPURL(d, o, "url")
		if o.Has("command") || o.Has("cwd") {
			d.Fail(path, "an http server has no command or cwd")
		}
	}
	s.Args = decodeMCPArgs(d, o, "args", 0)
	s.EnvNames = decodeMCPNames(d, o, "envNames", mcpEnvNamePattern())
	s.HeaderNames = decodeMCPNames(d, o, "headerNames", mcpHeaderNamePattern())
	s.State = o.Enum("state", MCPStateNotStarted, MCPStateRunning, MCPStateFailed)
	if o.Has("reason") {
		s.Reason = o.StringBytes("reason", 1, MCPReasonMaxBytes)
	}
	s.Starts = o.Count("starts")
	tv, tp := o.Get("tools")
	items := d.Array(tv, tp, 0, MCPToolsMax)
	s.Tools = make([]MCPTool, 0, len(items))
	for i, item := range items {
		to := d.Closed(item, Index(tp, i), []string{"name"}, []string{"description", "readOnlyHint"})
		nv, np := to.Get("name")
		t := MCPTool{Name: d.Pattern(nv, np, mcpToolNamePattern())}
		if to.Has("description") {
			t.Description = to.StringBytes("description", 1, MCPToolDescriptionMaxBytes)
		}
		if to.Has("readOnlyHint") {
			if t.ReadOnlyHint = to.Bool("readOnlyHint"); !t.ReadOnlyHint && !d.Failed() {
				d.Fail(Index(tp, i)+".readOnlyHint", "is written only when true")
			}
		}
		if d.Failed() {
			return MCPServer{}
		}
		s.Tools = append(s.Tools, t)
	}
	if o.Has("toolsOmitted") {
		s.ToolsOmitted = o.PosCount("toolsOmitted")
	}
	if d.Failed() {
		return MCPServer{}
	}
	return s
}
