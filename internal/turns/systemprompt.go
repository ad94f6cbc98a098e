package turns

import (
	"context"

	"github.com/maka-agent/maka/internal/model"
	"github.com/maka-agent/maka/internal/prompt"
	"github.com/maka-agent/maka/internal/sessions"
	"github.com/maka-agent/maka/internal/store"
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

// effort reads the session's reasoning effort; an unreadable or unknown
// one leaves the provider's default.
func (c *Owner) effort(ctx context.Context, sessionID string) model.Effort {
	var perms sessions.Permissions
	err := c.opts.Store.Read(ctx, func(q store.Querier) error {
		var err error
		perms, err = sessions.LoadPermissions(q, sessionID)
		return err
	})
	if err != nil {
		return model.EffortDefault
	}
	e, err := model.ParseEffort(perms.Thinking)
	if err != nil {
		c.log.Warn("unknown reasoning effort ignored", "session", sessionID, "thinking", perms.Thinking)
		return model.EffortDefault
	}
	return e
}
