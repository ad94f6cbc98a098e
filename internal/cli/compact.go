package cli

import (
	"context"
	"errors"
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
			basis := protocol.ConnectionVersionBasis{ConnectionID: c.ConnectionID, Revision: c.Revision}
			if err := setContextWindow(ctx, conn, basis, window); err != nil {
				return exitf(1, "cannot change connection %s: %v", c.Slug, err)
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

// setContextWindow declares the context window of a connection's models;
// a connection changed meanwhile is read again, a few times.
func setContextWindow(ctx context.Context, conn *client.Conn, basis protocol.ConnectionVersionBasis, window int64) error {
	for range catalogReadAttempts {
		res, err := conn.SetConnectionContextWindow(ctx, protocol.ConnectionContextWindowSetInput{Expected: basis, ContextWindow: window})
		if err != nil {
			return err
		}
		switch r := res.(type) {
		case protocol.CatalogConnectionCommitted:
			return nil
		case protocol.ConnectionStale:
			if r.Actual == nil {
				return errors.New("the connection was removed")
			}
			basis = *r.Actual
		default:
			return fmt.Errorf("unexpected answer %T", res)
		}
	}
	return errors.New("the connection keeps changing; try again")
}
