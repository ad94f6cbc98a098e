package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/internal/exitcode"
	"github.com/maka-agent/maka/protocol"
)

type sessionsOptions struct {
	host  hostFlags
	json  bool
	all   bool
	limit int
}

func newSessionsCommand() *cobra.Command {
	var o sessionsOptions
	cmd := &cobra.Command{
		Use:     "sessions",
		Aliases: []string{"session"},
		Short:   "List, show and archive agent sessions",
		Long: `Agent sessions of the storage root, most recently used first. Without a
subcommand, 'maka sessions' lists them.`,
		Example: `  maka sessions                      # list the active sessions
  maka sessions list --all --json    # archived ones too, as JSON
  maka sessions show 3f2a…           # a session and the end of its transcript
  maka sessions archive 3f2a…
  maka run --session 3f2a… "go on"   # continue one`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return sessionsList(cmd, &o) },
	}
	pf := cmd.PersistentFlags()
	o.host.register(pf)
	pf.BoolVar(&o.json, "json", false, "print JSON")
	cmd.Flags().BoolVar(&o.all, "all", false, "include archived sessions")
	cmd.Flags().IntVar(&o.limit, "limit", 50, "list at most this many sessions (0: all)")

	list := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List sessions, most recently used first",
		Example: `  maka sessions list
  maka sessions list --all --limit 0 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return sessionsList(cmd, &o) },
	}
	list.Flags().BoolVar(&o.all, "all", false, "include archived sessions")
	list.Flags().IntVar(&o.limit, "limit", 50, "list at most this many sessions (0: all)")

	var messages int
	show := &cobra.Command{
		Use:   "show SESSION",
		Short: "Show a session and the end of its transcript",
		Example: `  maka sessions show 3f2a…
  maka sessions show 3f2a… --messages 0 --json   # the whole transcript`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeSessionIDs(&o.host),
		RunE: func(cmd *cobra.Command, args []string) error {
			return sessionsShow(cmd, &o, args[0], messages)
		},
	}
	show.Flags().IntVar(&messages, "messages", 20, "show the last N transcript entries (0: all)")

	archive := lifecycleCommand(&o, protocol.SessionActionArchive, "Archive a session (it is hidden from lists and cannot run turns)")
	unarchive := lifecycleCommand(&o, protocol.SessionActionUnarchive, "Restore an archived session")
	cmd.AddCommand(list, show, archive, unarchive)
	return cmd
}

func sessionIDArg(id string) error {
	if !protocol.IsEntityID(id) {
		return exitf(2, "invalid session id %q (see 'maka sessions list')", id)
	}
	return nil
}

// minSessionPrefix is the shortest session id prefix a command accepts.
const minSessionPrefix = 4

// getSession returns a session of the catalog by its id or by a unique
// prefix of at least minSessionPrefix characters; a missing session, or a
// prefix several sessions share (they are listed), is an error naming what
// to do (exit 2).
func getSession(ctx context.Context, c *client.Conn, id string) (protocol.SessionSummary, error) {
	res, err := c.Call(ctx, protocol.OpSessionCatalogQuery, protocol.SessionCatalogQueryInput{Kind: protocol.SessionCatalogGet, SessionID: id})
	if err != nil {
		return protocol.SessionSummary{}, callError(ctx, "cannot read session "+id, err)
	}
	if r, ok := res.(protocol.SessionCatalogQueryResult); ok && r.Session != nil {
		return *r.Session, nil
	}
	if len(id) < minSessionPrefix {
		return protocol.SessionSummary{}, exitf(2, "no session %s (give the id or at least %d of its first characters; see 'maka sessions list --all')", id, minSessionPrefix)
	}
	found, err := listSessions(ctx, c, true, 0, func(s protocol.SessionSummary) bool { return strings.HasPrefix(s.SessionID, id) })
	if err != nil {
		return protocol.SessionSummary{}, callError(ctx, "cannot list sessions", err)
	}
	switch len(found) {
	case 0:
		return protocol.SessionSummary{}, exitf(2, "no session %s (see 'maka sessions list --all')", id)
	case 1:
		return found[0], nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d sessions start with %s; give more of the id:", len(found), id)
	for _, s := range found {
		fmt.Fprintf(&b, "\n  %s  %s", s.SessionID, sessionLabel(s))
	}
	return protocol.SessionSummary{}, &exitcode.Error{Code: 2, Err: errAmbiguousSession{b.String()}}
}

// errAmbiguousSession is a session prefix several sessions share: always
// a usage error (exit 2), even where a missing session exits 1.
type errAmbiguousSession struct{ msg string }

func (e errAmbiguousSession) Error() string { return e.msg }

// missingSessionExits1 turns getSession's "no session" (exit 2) into exit
// 1, for commands where a missing session is not a usage error; an
// ambiguous prefix stays exit 2.
func missingSessionExits1(err error) error {
	var ee *exitcode.Error
	var amb errAmbiguousSession
	if errors.As(err, &ee) && ee.Code == 2 && !errors.As(err, &amb) {
		ee.Code = 1
	}
	return err
}

// sessionListAttempts bounds the restarts of a listing that races with
// catalog changes.
const sessionListAttempts = 4

// listSessions returns, most recently used first, up to limit sessions
// (0: all) that keep accepts (nil: all).
func listSessions(ctx context.Context, c *client.Conn, includeArchived bool, limit int, keep func(protocol.SessionSummary) bool) ([]protocol.SessionSummary, error) {
	for range sessionListAttempts {
		out, changed, err := listSessionsOnce(ctx, c, includeArchived, limit, keep)
		if err != nil || !changed {
			return out, err
		}
	}
	return nil, errors.New("the session catalog keeps changing; try again")
}

func listSessionsOnce(ctx context.Context, c *client.Conn, includeArchived bool, limit int, keep func(protocol.SessionSummary) bool) ([]protocol.SessionSummary, bool, error) {
	var out []protocol.SessionSummary
	in := protocol.SessionCatalogQueryInput{Kind: protocol.SessionCatalogListStart, IncludeArchived: includeArchived}
	for {
		res, err := c.Call(ctx, protocol.OpSessionCatalogQuery, in)
		if err != nil {
			return nil, false, err
		}
		page, ok := res.(protocol.SessionCatalogQueryResult)
		if !ok {
			return nil, false, fmt.Errorf("session.catalog.query: unexpected result %T", res)
		}
		if page.Kind == protocol.SessionCatalogKindRevisionChanged {
			return nil, true, nil
		}
		for _, s := range page.Sessions {
			if keep == nil || keep(s) {
				out = append(out, s)
				if limit > 0 && len(out) >= limit {
					return out, false, nil
				}
			}
		}
		if page.NextCursor == nil {
			return out, false, nil
		}
		in = protocol.SessionCatalogQueryInput{Kind: protocol.SessionCatalogListContinue, Revision: page.Revision, Cursor: *page.NextCursor}
	}
}

func sessionsList(cmd *cobra.Command, o *sessionsOptions) error {
	if o.limit < 0 {
		return exitf(2, "--limit must not be negative")
	}
	ctx, conn, done, err := o.host.open(cmd)
	if err != nil {
		return err
	}
	defer done()
	list, err := listSessions(ctx, conn, o.all, o.limit, nil)
	if err != nil {
		return callError(ctx, "cannot list sessions", err)
	}
	out := cmd.OutOrStdout()
	if o.json {
		if list == nil {
			list = []protocol.SessionSummary{}
		}
		return writeJSON(out, struct {
			Sessions []protocol.SessionSummary `json:"sessions"`
		}{list})
	}
	if len(list) == 0 {
		fmt.Fprintln(cmd.ErrOrStderr(), "no sessions yet; start one with: maka run \"PROMPT\"")
		return nil
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tSTATUS\tLAST USED\tWORKSPACE\tNAME")
	for _, s := range list {
		status := string(s.Status)
		if s.IsArchived {
			status += " (archived)"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", s.SessionID, status, formatMillis(s.LastUsedAt), s.Workspace.Path, oneLine(s.Name, 60))
	}
	return w.Flush()
}

func formatMillis(ms int64) string {
	return time.UnixMilli(ms).Local().Format("2006-01-02 15:04")
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// transcriptTail returns the last n entries of a session's transcript
// (n == 0: all of it).
func transcriptTail(ctx context.Context, c *client.Conn, sessionID string, n int) ([]protocol.TranscriptMessage, error) {
	var ring []protocol.TranscriptMessage
	in := protocol.SessionTranscriptPageInput{SessionID: sessionID, Limit: protocol.SessionTranscriptMaxLimit}
	for {
		res, err := c.Call(ctx, protocol.OpSessionTranscriptPage, in)
		if err != nil {
			return nil, err
		}
		page, ok := res.(protocol.SessionTranscriptPage)
		if !ok {
			return nil, fmt.Errorf("session.transcript.page: unexpected result %T", res)
		}
		ring = append(ring, page.Messages...)
		if n > 0 && len(ring) > n {
			ring = append(ring[:0:0], ring[len(ring)-n:]...)
		}
		if page.NextCursor == nil {
			return ring, nil
		}
		in.Cursor = *page.NextCursor
	}
}

func sessionsShow(cmd *cobra.Command, o *sessionsOptions, id string, messages int) error {
	if err := sessionIDArg(id); err != nil {
		return err
	}
	if messages < 0 {
		return exitf(2, "--messages must not be negative")
	}
	ctx, conn, done, err := o.host.open(cmd)
	if err != nil {
		return err
	}
	defer done()
	sum, err := getSession(ctx, conn, id)
	if err != nil {
		return missingSessionExits1(err)
	}
	id = sum.SessionID
	msgs, err := transcriptTail(ctx, conn, id, messages)
	if err != nil {
		return callError(ctx, "cannot read the transcript", err)
	}
	out := cmd.OutOrStdout()
	if o.json {
		if msgs == nil {
			msgs = []protocol.TranscriptMessage{}
		}
		return writeJSON(out, struct {
			Session  protocol.SessionSummary      `json:"session"`
			Messages []protocol.TranscriptMessage `json:"messages"`
		}{sum, msgs})
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "session\t%s\n", sum.SessionID)
	if sum.Name != "" {
		fmt.Fprintf(w, "name\t%s\n", sum.Name)
	}
	fmt.Fprintf(w, "workspace\t%s\n", sum.Workspace.Path)
	fmt.Fprintf(w, "status\t%s\n", sum.Status)
	fmt.Fprintf(w, "model\t%s\n", describeTarget(sum.ModelTarget))
	fmt.Fprintf(w, "permission mode\t%s\n", sum.PermissionMode)
	fmt.Fprintf(w, "created\t%s\n", formatMillis(sum.CreatedAt))
	fmt.Fprintf(w, "last used\t%s\n", formatMillis(sum.LastUsedAt))
	if sum.ArchivedAt != nil {
		fmt.Fprintf(w, "archived\t%s\n", formatMillis(*sum.ArchivedAt))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	printTranscript(out, msgs)
	return nil
}

func describeTarget(t protocol.ModelTarget) string {
	if t.Kind == protocol.ModelTargetExplicit {
		return t.ConnectionSlug + " " + t.Model
	}
	return "the default target"
}

// printTranscript prints transcript entries; the parts of a split text
// are joined.
func printTranscript(w io.Writer, msgs []protocol.TranscriptMessage) {
	for i, m := range msgs {
		continued := i > 0 && m.Part > 1 && msgs[i-1].MessageID == m.MessageID && msgs[i-1].Role == m.Role
		if continued {
			fmt.Fprint(w, m.Text)
			if i+1 == len(msgs) || msgs[i+1].MessageID != m.MessageID {
				fmt.Fprintln(w)
			}
			continue
		}
		switch m.Role {
		case protocol.TranscriptRoleTool:
			mark := "✓"
			if m.Status != protocol.TranscriptToolCompleted {
				mark = "✗"
			}
			fmt.Fprintf(w, "\n%s %s (%s)\n", mark, m.ToolName, m.Status)
			if m.Output != "" {
				for _, line := range strings.Split(strings.TrimRight(m.Output, "\n"), "\n") {
					fmt.Fprintln(w, "  "+line)
				}
				if m.Truncated {
					fmt.Fprintln(w, "  …")
				}
			}
		default:
			fmt.Fprintf(w, "\n── %s · %s\n", m.Role, time.UnixMilli(m.CreatedAt).Local().Format("15:04:05"))
			fmt.Fprint(w, m.Text)
			if i+1 == len(msgs) || msgs[i+1].MessageID != m.MessageID || msgs[i+1].Part <= 1 {
				fmt.Fprintln(w)
			}
		}
	}
}

func lifecycleCommand(o *sessionsOptions, action protocol.SessionLifecycleAction, short string) *cobra.Command {
	verb := string(action)
	return &cobra.Command{
		Use:               verb + " SESSION",
		Short:             short,
		Example:           "  maka sessions " + verb + " 3f2a…",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeSessionIDs(&o.host),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if err := sessionIDArg(id); err != nil {
				return err
			}
			ctx, conn, done, err := o.host.open(cmd)
			if err != nil {
				return err
			}
			defer done()
			sum, err := getSession(ctx, conn, id)
			if err != nil {
				return missingSessionExits1(err)
			}
			id = sum.SessionID
			res, err := conn.Call(ctx, protocol.OpSessionLifecycleSet, protocol.SessionLifecycleSetInput{SessionID: id, Action: action})
			switch {
			case client.IsCode(err, protocol.ErrNotFound):
				return exitf(1, "no session %s (see 'maka sessions list --all%s')", id, o.host.rootHint())
			case client.IsCode(err, protocol.ErrSessionBusy):
				return exitf(1, "session %s is running a turn; wait for it to end (maka attach %s%s) and try again", id, id, o.host.rootHint())
			case err != nil:
				return callError(ctx, "cannot "+verb+" session "+id, err)
			}
			if o.json {
				return writeJSON(cmd.OutOrStdout(), res)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%sd session %s\n", verb, id)
			return nil
		},
	}
}

// existingConn connects, within a second, to a host that already runs
// (for shell completions, which must never start one).
func existingConn(parent context.Context, h *hostFlags) (*client.Conn, context.Context, context.CancelFunc) {
	root, err := rootFlag(h.root)
	if err != nil {
		return nil, nil, nil
	}
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithTimeout(parent, time.Second)
	res, err := client.ConnectExisting(ctx, client.Options{RootPath: root, Surface: protocol.SurfaceInspect})
	if err != nil || res.Kind != client.Connected {
		cancel()
		return nil, nil, nil
	}
	return res.Conn, ctx, cancel
}

// completeFromHost completes from a running host (it never starts one),
// for the flag named flag or, on a command without it, for the first
// argument: list reads the candidates.
func completeFromHost(h *hostFlags, flag string, list func(context.Context, *client.Conn) ([]string, error)) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 && cmd.Flags().Lookup(flag) == nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		conn, ctx, cancel := existingConn(cmd.Context(), h)
		if conn == nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		defer cancel()
		defer conn.Close()
		out, err := list(ctx, conn)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeSessionIDs completes session ids, with their names.
func completeSessionIDs(h *hostFlags) cobra.CompletionFunc {
	return completeFromHost(h, "session", func(ctx context.Context, conn *client.Conn) ([]string, error) {
		list, err := listSessions(ctx, conn, false, 100, nil)
		out := make([]string, 0, len(list))
		for _, s := range list {
			out = append(out, s.SessionID+"\t"+oneLine(s.Name, 50))
		}
		return out, err
	})
}
