// Package tools holds the host's built-in tools (Read, Write, Edit, Bash,
// Glob, Grep, WebFetch), the permission engine that decides whether a call may run
// (docs/security.md, What a model can make tools do), and the settlement rules around a call (argument
// checks, the repeated-identical-failure gate, output caps, redaction).
package tools

import (
	"context"
	"encoding/json"

	"github.com/maka-agent/maka/internal/sandbox"
)

// ActivityKind values: the activityKind of a subscription's tool_start event.
const (
	ActivityRead     = "read"
	ActivitySearch   = "search"
	ActivityEdit     = "edit"
	ActivityCommand  = "command"
	ActivityTool     = "tool"
	ActivityWebFetch = "webfetch"
)

// Env is what a tool call may use of its session.
type Env struct {
	SessionID string
	RunID     string
	TurnID    string
	ToolUseID string
	// Workspace is the session's workspace directory (absolute, cleaned);
	// file tools are confined to it.
	Workspace string
	// Output receives live output chunks (Bash); stream is "stdout" or
	// "stderr". Chunks are redacted, hold whole lines where possible and
	// are at most 8192 bytes; calls for one tool call never overlap. May be
	// nil.
	Output func(stream, chunk string)
	// Questions asks the user questions for the AskUserQuestion tool (nil:
	// no client can answer them in this session).
	Questions QuestionAsker
	// Sandbox confines a Bash call (decided with its permission: the
	// session's sandbox mode, read-only for a safe command in explore, off
	// for an approved escalation).
	Sandbox sandbox.Policy
	// Protected are the paths the host owns (the storage root, the control
	// directory, the credentials file): every file tool treats them as
	// outside the workspace, whatever the path, and the sandbox hides them.
	Protected []string
	// DenyRead reports whether a permission rule denies reading rel, a
	// workspace-relative slash-separated path; the walks of Glob and Grep
	// skip what it names, silently. May be nil.
	DenyRead func(rel string) bool
	// Web is what the permission policy allows of the URLs a WebFetch
	// call is redirected to, and which hosts it may reach at non-public
	// addresses. Nil: no redirect to another host is followed and no
	// non-public address is reached.
	Web WebPolicy
}

// Result is a settled tool call.
type Result struct {
	// Content is the result as shown to clients and stored: a JSON object
	// with a "kind" (text, json, file_write, file_diff, terminal, ...).
	Content json.RawMessage
	// ModelText is the result as the model reads it.
	ModelText string
	// IsError marks a failed call; the turn continues.
	IsError bool
}

// Tool is one built-in tool.
type Tool interface {
	Name() string
	Description() string
	// Parameters is the JSON Schema of the arguments object.
	Parameters() json.RawMessage
	// PermissionRequired reports whether the permission engine must
	// approve a call (Read, Glob and Grep need no approval).
	PermissionRequired() bool
	ActivityKind() string
	// Run executes one call. Invalid arguments, refusals and failures are
	// error Results, not Go errors; a Go error means the call could not be
	// settled at all (it is reported to the model as an error result too).
	// ctx is cancelled when the turn stops; the tool must return promptly.
	Run(ctx context.Context, env Env, args json.RawMessage) (Result, error)
}
