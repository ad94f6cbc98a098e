package turns

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/maka-agent/maka/internal/model"
	"github.com/maka-agent/maka/internal/tools"
)

type bigTool struct {
	name   string
	schema json.RawMessage
}

func (b bigTool) Name() string                { return b.name }
func (b bigTool) Description() string         { return "big" }
func (b bigTool) Parameters() json.RawMessage { return b.schema }
func (b bigTool) PermissionRequired() bool    { return true }
func (b bigTool) ActivityKind() string        { return tools.ActivityTool }
func (b bigTool) Run(context.Context, tools.Env, json.RawMessage) (tools.Result, error) {
	return tools.TextResult(""), nil
}

// The estimate that decides compaction counts every declaration the
// request carries: the MCP servers' tools and the note at its tail too.
func TestCompactionEstimateCountsTheTurnsToolsAndTail(t *testing.T) {
	schema := json.RawMessage(`{"type":"object","description":"` + strings.Repeat("x", 16000) + `"}`)
	var dyn []tools.Tool
	for i := range 40 {
		dyn = append(dyn, bigTool{name: "mcp__srv__t" + string(rune('a'+i%26)) + string(rune('a'+i/26)), schema: schema})
	}
	c := New(Options{ToolSource: func(context.Context) []tools.Tool { return dyn }})
	reg := c.turnTools(context.Background())
	sent := 0
	for _, s := range reg.Specs() {
		sent += len(s.Name) + len(s.Description) + len(s.Parameters)
	}
	tail := strings.Repeat("t", 8000)
	fixed := fixedBytes("system", reg, tail)
	if fixed < sent+len(tail) {
		t.Fatalf("the estimate counts %d bytes of a request that carries %d of tools and %d of tail", fixed, sent, len(tail))
	}
	// A history at 70 % of the window plus those declarations is over the
	// 80 % trigger.
	window := int64(128000)
	conv := conversation{msgs: []model.Message{{Role: model.RoleUser, Text: strings.Repeat("h", int(window*bytesPerToken*70/100))}}}
	if tok := c.requestTokens(conv, fixed, "next"); tok*100 <= window*compactTrigger {
		t.Fatalf("estimate %d tokens: no compaction, though the request is over %d%% of %d", tok, compactTrigger, window)
	}
}
