package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/maka-agent/maka/protocol"
)

func newMCPCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Manage the MCP servers whose tools sessions may use",
		Long: `An MCP server is a program (started by the runtime host over stdio) or an
HTTP endpoint (the streamable HTTP transport) that offers tools. The host
starts a server on first use and shares it with every session of the storage
root; its tools reach the model as mcp__<server>__<tool> and ask for approval
before each call in every mode but bypass, unless a permission rule such as
'allow mcp__github__list_issues' allows them. Environment and header values
are kept in the root's credential vault, never in the database.`,
		Example: `  maka mcp add files -- npx -y @modelcontextprotocol/server-filesystem /home/me/notes
  maka mcp add github --env GITHUB_TOKEN=$GITHUB_TOKEN -- github-mcp-server stdio
  maka mcp add remote --url https://mcp.example.com/mcp --header "Authorization: Bearer $TOKEN"
  maka mcp list
  maka mcp remove files`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newMCPAddCommand(), newMCPListCommand(), newMCPRemoveCommand())
	return cmd
}

func newMCPAddCommand() *cobra.Command {
	var h hostFlags
	var env, headers []string
	var url string
	cmd := &cobra.Command{
		Use:   "add NAME [--env K=V]... -- COMMAND [ARGS...] | add NAME --url URL [--header K:V]...",
		Short: "Add or replace an MCP server",
		Example: `  maka mcp add files -- npx -y @modelcontextprotocol/server-filesystem /home/me/notes
  maka mcp add remote --url https://mcp.example.com/mcp --header "Authorization: Bearer $TOKEN"`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, err := mcpAddInput(args, cmd.ArgsLenAtDash(), env, url, headers)
			if err != nil {
				return err
			}
			ctx, conn, done, err := h.open(cmd)
			if err != nil {
				return err
			}
			defer done()
			res, err := conn.Call(ctx, protocol.OpMCPServersSet, in)
			if err != nil {
				return callError(ctx, "cannot add the MCP server", err)
			}
			s, _ := res.(protocol.MCPServer)
			fmt.Fprintf(cmd.OutOrStdout(), "added MCP server %s (%s); it starts when a session first uses it\n", s.Name, s.Transport)
			return nil
		},
	}
	h.register(cmd.Flags())
	cmd.Flags().StringArrayVar(&env, "env", nil, "an environment variable of the server's command, K=V (repeatable; the value is kept in the credential vault)")
	cmd.Flags().StringVar(&url, "url", "", "the server's streamable HTTP endpoint (instead of a command)")
	cmd.Flags().StringArrayVar(&headers, "header", nil, "an HTTP header sent to the server, 'Name: value' (repeatable; the value is kept in the credential vault)")
	return cmd
}

// mcpAddInput builds the set input of 'maka mcp add'; dash is the index of
// the first argument after "--" (-1: none).
func mcpAddInput(args []string, dash int, env []string, url string, headers []string) (protocol.MCPServersSetInput, error) {
	name := args[0]
	if !protocol.ValidMCPServerName(name) {
		return protocol.MCPServersSetInput{}, exitf(2, `invalid MCP server name %q: letters, digits, "-" and "_" (no "__"), at most 32, starting with a letter or digit`, name)
	}
	in := protocol.MCPServersSetInput{Name: name}
	switch {
	case url != "":
		if dash >= 0 || len(args) > 1 || len(env) > 0 {
			return in, exitf(2, "an MCP server is either a command (after --) or a --url, not both; --env is for commands")
		}
		in.Transport, in.URL = protocol.MCPTransportHTTP, url
		for _, hv := range headers {
			k, v, ok := strings.Cut(hv, ":")
			if !ok || strings.TrimSpace(k) == "" {
				return in, exitf(2, "--header %q is not 'Name: value'", hv)
			}
			in.Headers = append(in.Headers, protocol.MCPPair{Name: strings.TrimSpace(k), Value: strings.TrimSpace(v)})
		}
	default:
		if dash != 1 || len(args) < 2 {
			return in, exitf(2, "give the server's command after --: maka mcp add %s -- COMMAND [ARGS...] (or --url URL)", name)
		}
		if len(headers) > 0 {
			return in, exitf(2, "--header is for --url servers")
		}
		in.Transport, in.Command = protocol.MCPTransportStdio, args[1]
		if len(args) > 2 {
			in.Args = args[2:]
		}
		if wd, err := os.Getwd(); err == nil && filepath.IsAbs(wd) {
			in.Cwd = wd
		}
		for _, kv := range env {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return in, exitf(2, "--env %q is not K=V", kv)
			}
			in.Env = append(in.Env, protocol.MCPPair{Name: k, Value: v})
		}
	}
	return in, nil
}

func newMCPListCommand() *cobra.Command {
	var h hostFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the MCP servers, their state and their tools",
		Example: `  maka mcp list
  maka mcp list --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, conn, done, err := h.open(cmd)
			if err != nil {
				return err
			}
			defer done()
			res, err := conn.Call(ctx, protocol.OpMCPServersQuery, struct{}{})
			if err != nil {
				return callError(ctx, "cannot list the MCP servers", err)
			}
			list, _ := res.(protocol.MCPServersQueryResult)
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(list)
			}
			if len(list.Servers) == 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "no MCP servers; add one with 'maka mcp add%s NAME -- COMMAND [ARGS...]'\n", h.rootHint())
				return nil
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			for _, s := range list.Servers {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Name, mcpTarget(s), mcpState(s))
				for _, t := range s.Tools {
					ro := ""
					if t.ReadOnlyHint {
						ro = " (says read-only)"
					}
					fmt.Fprintf(tw, "  %s%s\t%s\t\n", "mcp__"+s.Name+"__"+t.Name, ro, oneLine(t.Description, 60))
				}
				if s.ToolsOmitted > 0 {
					fmt.Fprintf(tw, "  … %d more tools\t\t\n", s.ToolsOmitted)
				}
			}
			return tw.Flush()
		},
	}
	h.register(cmd.Flags())
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func mcpTarget(s protocol.MCPServer) string {
	if s.Transport == protocol.MCPTransportHTTP {
		return s.URL
	}
	return oneLine(strings.Join(append([]string{shellQuote(s.Command)}, quoteAll(s.Args)...), " "), 60)
}

func quoteAll(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = shellQuote(a)
	}
	return out
}

func mcpState(s protocol.MCPServer) string {
	switch s.State {
	case protocol.MCPStateRunning:
		return fmt.Sprintf("running (started %d×)", s.Starts)
	case protocol.MCPStateFailed:
		return "failed: " + oneLine(s.Reason, 120)
	}
	return "not started"
}

func newMCPRemoveCommand() *cobra.Command {
	var h hostFlags
	cmd := &cobra.Command{
		Use:     "remove NAME",
		Aliases: []string{"rm"},
		Short:   "Remove an MCP server (it is stopped) and its stored values",
		Example: `  maka mcp remove files`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !protocol.ValidMCPServerName(args[0]) {
				return exitf(2, "invalid MCP server name %q", args[0])
			}
			ctx, conn, done, err := h.open(cmd)
			if err != nil {
				return err
			}
			defer done()
			res, err := conn.Call(ctx, protocol.OpMCPServersRemove, protocol.MCPServersRemoveInput{Name: args[0]})
			if err != nil {
				return callError(ctx, "cannot remove the MCP server", err)
			}
			if r, _ := res.(protocol.MCPServersRemoveResult); !r.Removed {
				return exitf(1, "no MCP server named %s", args[0])
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed MCP server %s\n", args[0])
			return nil
		},
	}
	h.register(cmd.Flags())
	return cmd
}
