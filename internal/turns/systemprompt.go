package turns

import (
	"context"

	"github.com/maka-agent/maka/internal/prompt"
	"github.com/maka-agent/maka/internal/tools"
)

// systemPrompt is the system prompt of a's turn: Options.System, or the
// one Options.Prompt builds for the workspace and the policy. What the
// builder left out is logged.
func (c *Owner) systemPrompt(ctx context.Context, a admission, workspace string, policy tools.Policy, reg *tools.Registry) string {
	if c.opts.Prompt == nil {
		return c.opts.System
	}
	var names []string
	if reg != nil {
		for _, t := range reg.Tools() {
			names = append(names, t.Name())
		}
	}
	shell, _ := tools.ShellPath()
	s, notes := c.opts.Prompt.Build(ctx, prompt.Input{
		Workspace: workspace, UserDir: c.opts.UserDir, Protected: c.opts.Protected,
		Now: c.opts.Now(), Shell: shell, Mode: string(policy.Mode),
		Sandbox: string(tools.NewEngine(policy).BashSandbox()), Tools: names,
	})
	notes.Log(c.log, "session", a.SessionID, "turn", a.TurnID)
	return s
}
