package turns

import (
	"context"

	"github.com/maka-agent/maka/internal/tools"
)

// turnTools is the registry of one turn: the host's tools, then the
// dynamic tools of Options.ToolSource (which never replace a host tool).
func (c *Owner) turnTools(ctx context.Context) *tools.Registry {
	if c.opts.ToolSource == nil {
		return c.opts.Tools
	}
	return c.opts.Tools.With(c.opts.ToolSource(ctx)...)
}
