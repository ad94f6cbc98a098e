package mcp

import (
	"testing"

	"github.com/maka-agent/maka/protocol"
)

// mcp__<server>__<tool> names one tool of one server: a server name never
// ends with '_' and a tool name never starts with one.
func TestToolNamesNameOneServersTool(t *testing.T) {
	for _, n := range []string{"a_", "x__y"} {
		if protocol.ValidMCPServerName(n) {
			t.Errorf("server name %q accepted", n)
		}
	}
	for _, n := range []string{"_b", "__b"} {
		if validToolName(n) {
			t.Errorf("tool name %q accepted", n)
		}
	}
	for _, n := range []string{"a", "a_b", "a-b"} {
		if !protocol.ValidMCPServerName(n) || !validToolName(n) {
			t.Errorf("name %q refused", n)
		}
	}
}
