package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/protocol"
)

func newCompactCommand() *cobra.Command {
	var h hostFlags
	cmd := &cobra.Command{
		Use:   "compact SESSION",
		Short: "Summarise a session's older conversation for the model",
		Long: `Ask the session's model to summarise all but the newest exchange of an idle
session. Later turns send the summary in place of the older messages; the
transcript keeps every message. A turn compacts by itself when its request
would exceed 80% of the model's context window.`,
		Example: `  maka compact 0b6f1f7e-5a9e-4d3b-9a40-3f1c2b7d8e90`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !protocol.IsEntityID(args[0]) {
				return exitf(2, "invalid session id %q (see 'maka sessions')", args[0])
			}
			ctx, conn, done, err := h.open(cmd)
			if err != nil {
				return err
			}
			defer done()
			res, err := conn.CompactSession(ctx, protocol.SessionCompactInput{SessionID: args[0]})
			switch {
			case client.IsCode(err, protocol.ErrNotFound):
				return exitf(1, "no session %s (see 'maka sessions%s')", args[0], h.rootHint())
			case client.IsCode(err, protocol.ErrSessionBusy):
				return exitf(1, "session %s is running a turn; compact it once the turn ended", args[0])
			case err != nil:
				return callError(ctx, "cannot compact the session", err)
			}
			out := cmd.OutOrStdout()
			if !res.Compacted {
				fmt.Fprintf(out, "nothing to compact (%d tokens)\n", res.BeforeTokens)
				return nil
			}
			fmt.Fprintf(out, "context compacted (%d → %d tokens)\n", res.BeforeTokens, res.AfterTokens)
			return nil
		},
	}
	h.register(cmd.Flags())
	return cmd
}

func newConnectionEditCommand() *cobra.Command {
	var h hostFlags
	var window int64
	cmd := &cobra.Command{
		Use:               "edit SLUG --context-window TOKENS",
		Short:             "Change what a connection declares about its models",
		Example:           `  maka connection edit local --context-window 32000`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeConnectionSlugs(&h),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := slugArg(args); err != nil {
				return err
			}
			if window <= 0 || window > protocol.MaxSafeInteger {
				return exitf(2, "--context-window must be a positive number of tokens")
			}
			ctx, stop := interruptible(cmd.Context())
			defer stop()
			conn, _, c, err := findConnection(ctx, &h, args[0])
			if err != nil {
				return err
			}
			defer conn.Close()
			for attempt := 0; ; attempt++ {
				res, err := conn.UpdateConnection(ctx, protocol.CatalogUpdateInput{
					Expected: protocol.ConnectionVersionBasis{ConnectionID: c.ConnectionID, Revision: c.Revision},
					Changes: protocol.ConnectionChanges{Name: c.Name, BaseURL: c.BaseURL, Enabled: c.Enabled,
						EnabledModelIDs: c.EnabledModelIDs, ContextWindow: window},
				})
				if err != nil {
					return callError(ctx, "cannot change the connection", err)
				}
				if _, ok := res.(protocol.CatalogConnectionCommitted); ok {
					break
				}
				if attempt+1 >= catalogReadAttempts {
					return exitf(1, "connection %s keeps changing; try again", c.Slug)
				}
				_, _, again, err := findConnection(ctx, &h, args[0])
				if err != nil {
					return err
				}
				c = again
			}
			fmt.Fprintf(cmd.OutOrStdout(), "connection %s: context window %d tokens\n", c.Slug, window)
			return nil
		},
	}
	h.register(cmd.Flags())
	cmd.Flags().Int64Var(&window, "context-window", 0, "context window of the connection's models, in tokens (required)")
	_ = cmd.MarkFlagRequired("context-window")
	return cmd
}
