package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/maka-agent/maka/internal/tools"
	"github.com/maka-agent/maka/protocol"
)

// ResultMaxBytes caps the text of a tool result the model reads.
const ResultMaxBytes = 64 << 10

// ToolPrefix begins the model's name of every MCP tool.
const ToolPrefix = "mcp__"

// toolNamePattern is a server tool's name; it never starts with '_', and a
// server name never ends with one (protocol.ValidMCPServerName), so that
// mcp__<server>__<tool> names one server's tool only.
var toolNamePattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9-][A-Za-z0-9_-]{0,63}$`) })

func validToolName(n string) bool { return toolNamePattern().MatchString(n) }

// ToolName is the model's name of a server's tool: mcp__<server>__<tool>.
func ToolName(server, tool string) string { return ToolPrefix + server + "__" + tool }

// Tool is one tool of a server as the model's tool. Its calls go through
// the permission engine like any tool's; it asks for approval in every
// mode but bypass unless a rule allows it (tools.AlwaysPrompt), and the
// server's read-only hint is shown in the review, never trusted.
type Tool struct {
	server *server
	info   toolInfo
}

var (
	_ tools.Tool         = (*Tool)(nil)
	_ tools.AlwaysPrompt = (*Tool)(nil)
	_ tools.Categorizer  = (*Tool)(nil)
	_ tools.ServerHinted = (*Tool)(nil)
)

// Name implements tools.Tool.
func (t *Tool) Name() string { return ToolName(t.server.cfg.Name, t.info.name) }

// Description implements tools.Tool.
func (t *Tool) Description() string {
	d := strings.TrimSpace(t.info.description)
	if d == "" {
		d = "(no description)"
	}
	return fmt.Sprintf("%s\n\n(Tool %q of the MCP server %q.)", d, t.info.name, t.server.cfg.Name)
}

// Parameters implements tools.Tool.
func (t *Tool) Parameters() json.RawMessage { return t.info.schema }

// PermissionRequired implements tools.Tool.
func (t *Tool) PermissionRequired() bool { return true }

// ActivityKind implements tools.Tool.
func (t *Tool) ActivityKind() string { return tools.ActivityTool }

// Category implements tools.Categorizer: custom_tool, whatever the
// server says of it.
func (t *Tool) Category(json.RawMessage) string { return protocol.ToolCategoryCustomTool }

// PromptBelowBypass implements tools.AlwaysPrompt.
func (t *Tool) PromptBelowBypass() bool { return true }

// ReadOnlyHint implements tools.ServerHinted.
func (t *Tool) ReadOnlyHint() bool { return t.info.readOnlyHint }

// Run implements tools.Tool: the call goes to the server's shared
// session (started now if it is not running); the result's text is
// capped at ResultMaxBytes (the settlement redacts it).
func (t *Tool) Run(ctx context.Context, _ tools.Env, raw json.RawMessage) (tools.Result, error) {
	args := map[string]any{}
	if len(strings.TrimSpace(string(raw))) > 0 {
		if err := json.Unmarshal(raw, &args); err != nil || args == nil {
			return tools.ErrorResult("the arguments of " + t.Name() + " must be a JSON object"), nil
		}
	}
	res, err := t.server.call(ctx, t.info.name, args)
	if err != nil {
		if ctx.Err() != nil {
			return tools.ErrorResult(t.Name() + " was stopped"), nil
		}
		return tools.ErrorResult(fmt.Sprintf("%s failed: %v", t.Name(), err)), nil
	}
	text := resultText(res)
	if res.IsError {
		return tools.ErrorResult(text), nil
	}
	return tools.TextResult(text), nil
}

// resultText renders a call's content as text for the model, capped.
func resultText(res *mcpsdk.CallToolResult) string {
	var b strings.Builder
	for i, c := range res.Content {
		if i > 0 {
			b.WriteString("\n")
		}
		switch c := c.(type) {
		case *mcpsdk.TextContent:
			b.WriteString(c.Text)
		case *mcpsdk.ImageContent:
			fmt.Fprintf(&b, "[image %s, %d bytes, not shown]", c.MIMEType, len(c.Data))
		case *mcpsdk.AudioContent:
			fmt.Fprintf(&b, "[audio %s, %d bytes, not shown]", c.MIMEType, len(c.Data))
		case *mcpsdk.ResourceLink:
			fmt.Fprintf(&b, "[resource %s]", c.URI)
		case *mcpsdk.EmbeddedResource:
			if c.Resource != nil && c.Resource.Text != "" {
				b.WriteString(c.Resource.Text)
			} else if c.Resource != nil {
				fmt.Fprintf(&b, "[resource %s, not shown]", c.Resource.URI)
			}
		default:
			b.WriteString("[content not shown]")
		}
		if b.Len() > ResultMaxBytes {
			break
		}
	}
	if len(res.Content) == 0 && res.StructuredContent != nil {
		if v, err := json.Marshal(res.StructuredContent); err == nil {
			b.Write(v)
		}
	}
	s := b.String()
	if len(s) > ResultMaxBytes {
		s = protocol.TruncateUTF8(s, ResultMaxBytes) + fmt.Sprintf("\n[result cut: %d of %d bytes shown]", ResultMaxBytes, len(b.String()))
	}
	return s
}
