package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/internal/providerinfo"
	"github.com/maka-agent/maka/protocol"
)

func newConnectionCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "connection",
		Aliases: []string{"connections"},
		Short:   "Manage model connections (providers, models, API keys)",
		Long: `A connection is a model provider endpoint with the models it may use and
its API key. New sessions use the catalog's default target (a connection and
one of its models) unless 'maka run' names another with --connection and
--model. API keys are stored by the runtime host in the storage root's
credential vault; they are read from stdin or from an environment variable,
never from the command line.`,
		Example: `  maka connection add --provider openai --model gpt-4.1 --key-env OPENAI_API_KEY
  maka connection add local --provider openai-compatible --base-url http://localhost:8080/v1 --model qwen3 < key.txt
  maka connection list
  maka connection default local qwen3
  maka connection set-key openai --key-env OPENAI_API_KEY
  maka connection remove local`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newConnectionAddCommand(), newConnectionListCommand(), newConnectionRemoveCommand(),
		newConnectionDefaultCommand(), newConnectionSetKeyCommand(), newConnectionEditCommand())
	return cmd
}

// ---------------------------------------------------------------------------
// Catalog

// catalogConnection is one connection of the catalog with its enabled
// model ids.
type catalogConnection struct {
	protocol.CatalogConnectionHeader
	EnabledModelIDs []string
}

// catalogView is the whole connection catalog at one revision.
type catalogView struct {
	Revision      int64
	DefaultTarget *protocol.ConnectionTarget
	Connections   []catalogConnection
}

func (v catalogView) bySlug(slug string) *catalogConnection {
	for i := range v.Connections {
		if v.Connections[i].Slug == slug {
			return &v.Connections[i]
		}
	}
	return nil
}

func (v catalogView) byID(id string) *catalogConnection {
	for i := range v.Connections {
		if v.Connections[i].ConnectionID == id {
			return &v.Connections[i]
		}
	}
	return nil
}

func (v catalogView) slugs() []string {
	out := make([]string, 0, len(v.Connections))
	for _, c := range v.Connections {
		out = append(out, c.Slug)
	}
	return out
}

// catalogReadAttempts bounds the restarts of a catalog read that races
// with changes.
const catalogReadAttempts = 4

// readCatalog reads every page of the connection catalog at one revision.
func readCatalog(ctx context.Context, c *client.Conn) (catalogView, error) {
	for range catalogReadAttempts {
		v, changed, err := readCatalogOnce(ctx, c)
		if err != nil || !changed {
			return v, err
		}
	}
	return catalogView{}, errors.New("the connection catalog keeps changing; try again")
}

func readCatalogOnce(ctx context.Context, c *client.Conn) (catalogView, bool, error) {
	var v catalogView
	byIndex := map[int64]int{}
	in := protocol.CatalogQueryInput{}
	for pages := 0; ; pages++ {
		if pages > protocol.ConnectionCatalogMaxConnections*8 {
			return v, false, errors.New("the connection catalog does not end")
		}
		res, err := c.QueryConnectionCatalog(ctx, in)
		if err != nil {
			return v, false, err
		}
		page, ok := res.(protocol.CatalogPage)
		if !ok {
			return v, true, nil // revision_changed
		}
		if pages == 0 {
			v.Revision, v.DefaultTarget = page.Revision, page.DefaultTarget
		}
		for _, item := range page.Items {
			switch it := item.(type) {
			case protocol.CatalogConnectionHeader:
				byIndex[it.ConnectionIndex] = len(v.Connections)
				v.Connections = append(v.Connections, catalogConnection{CatalogConnectionHeader: it})
			case protocol.CatalogEnabledModelIDItem:
				if i, ok := byIndex[it.ConnectionIndex]; ok {
					v.Connections[i].EnabledModelIDs = append(v.Connections[i].EnabledModelIDs, it.ModelID)
				}
			}
		}
		if page.NextCursor == nil {
			return v, false, nil
		}
		in = protocol.CatalogQueryInput{Revision: v.Revision, Cursor: page.NextCursor}
	}
}

// noConnectionMessage says exactly how to add a connection.
func noConnectionMessage(ctx context.Context, rootHint string) string {
	if found := discoverLocal(ctx, localCandidates); len(found) > 0 {
		var b strings.Builder
		b.WriteString("no model connection is configured, but a local model server answers:")
		for _, f := range found {
			fmt.Fprintf(&b, "\n  %s at %s (models: %s); add it with:\n    %s", f.Name, f.BaseURL, strings.Join(f.Models[:min(len(f.Models), 5)], ", "), f.addCommand(rootHint))
		}
		return b.String()
	}
	return fmt.Sprintf(`no model connection is configured. Add one, for example:
  maka connection add%[1]s --provider openai --model MODEL_ID --key-env OPENAI_API_KEY
  maka connection add%[1]s --provider anthropic --model MODEL_ID --key-env ANTHROPIC_API_KEY
  maka connection add%[1]s --provider openai-compatible --base-url http://localhost:8080/v1 --model MODEL_ID --no-key
(the API key is read from the environment variable named by --key-env, or from stdin; a
local server that needs none takes --no-key),
then run the command again. 'maka connection add --help' lists the providers.`, rootHint)
}

// resolveModelTarget turns --connection and --model into an explicit
// model target: a missing connection is the default target's (or the
// only one), a missing model the connection's first enabled model.
func resolveModelTarget(ctx context.Context, c *client.Conn, slug, model, rootHint string) (protocol.ModelTarget, error) {
	cat, err := readCatalog(ctx, c)
	if err != nil {
		return protocol.ModelTarget{}, callError(ctx, "cannot read the connection catalog", err)
	}
	if len(cat.Connections) == 0 {
		return protocol.ModelTarget{}, exitf(2, "%s", noConnectionMessage(ctx, rootHint))
	}
	var conn *catalogConnection
	switch {
	case slug != "":
		conn = cat.bySlug(slug)
		if conn == nil {
			return protocol.ModelTarget{}, exitf(2, "no connection %q; the connections are %s (see 'maka connection list%s')",
				slug, strings.Join(cat.slugs(), ", "), rootHint)
		}
	case cat.DefaultTarget != nil && cat.byID(cat.DefaultTarget.ConnectionID) != nil:
		conn = cat.byID(cat.DefaultTarget.ConnectionID)
	case len(cat.Connections) == 1:
		conn = &cat.Connections[0]
	default:
		return protocol.ModelTarget{}, exitf(2, "there is no default connection: give --connection (one of %s)", strings.Join(cat.slugs(), ", "))
	}
	if model == "" {
		switch {
		case cat.DefaultTarget != nil && cat.DefaultTarget.ConnectionID == conn.ConnectionID:
			model = cat.DefaultTarget.ModelID
		case len(conn.EnabledModelIDs) > 0:
			model = conn.EnabledModelIDs[0]
		default:
			return protocol.ModelTarget{}, exitf(2, "connection %s has no enabled model: give --model", conn.Slug)
		}
	}
	return protocol.ModelTarget{Kind: protocol.ModelTargetExplicit, ConnectionSlug: conn.Slug, Model: model}, nil
}

// explainFailure says why a turn failed and what to do next.
func explainFailure(ctx context.Context, c *client.Conn, snap protocol.TurnSnapshot, rootHint string) string {
	return explainFailureWith(ctx, c, snap, rootHint, "")
}

// explainFailureWith is explainFailure with what the model request said
// when it failed ("HTTP 500 Internal Server Error: …", "connection
// refused at …"), when known.
func explainFailureWith(ctx context.Context, c *client.Conn, snap protocol.TurnSnapshot, rootHint, detail string) string {
	class := snap.FailureClass
	prefix := "the turn failed (" + class + "): "
	if detail = oneLine(detail, 600); detail != "" {
		prefix += detail + "; "
	}
	switch class {
	case "model_unavailable":
		return explainModelUnavailable(ctx, c, snap.SessionID, rootHint)
	case "auth":
		slug := "SLUG"
		if t, err := sessionTarget(ctx, c, snap.SessionID); err == nil && t.conn != nil {
			slug = t.conn.Slug
		}
		return prefix + "the provider rejected the credentials; store a valid key with 'maka connection set-key " + slug + rootHint + "'"
	case "rate_limit":
		return prefix + "the provider is rate limiting requests; try again later"
	case "provider_billing":
		return prefix + "the provider reports a billing or quota problem with the account"
	case "network", "timeout":
		return prefix + "the provider could not be reached; check the connection's base URL ('maka connection list" + rootHint + "') and the network"
	case "provider_unavailable":
		return prefix + "the provider answered with a server error; try again later"
	case "context_overflow":
		return prefix + "the conversation no longer fits the model's context; start a new session (run without --session/--continue)"
	case "step_limit":
		return prefix + "the turn reached its step limit; continue it with 'maka run --session " + snap.SessionID + rootHint + " ...'"
	case "content_filter":
		return prefix + "the provider's content filter stopped the answer"
	case "app_restarted":
		return prefix + "the runtime host restarted during the turn; run it again"
	case "runtime_error":
		return prefix + "the host could not record the turn; see 'maka host status" + rootHint + "' and the host log"
	}
	return prefix + "see 'maka sessions show " + snap.SessionID + rootHint + "'"
}

// target is the connection and model a session's turns use, as the host
// resolves its model target; conn is nil when the target names none.
type target struct {
	cat      *catalogView
	conn     *catalogConnection
	model    string
	explicit bool // the session names its connection (else the default)
}

// sessionTarget reads the session's model target and the catalog.
func sessionTarget(ctx context.Context, c *client.Conn, sessionID string) (target, error) {
	var t target
	sum, err := getSession(ctx, c, sessionID)
	if err != nil {
		return t, err
	}
	cat, err := readCatalog(ctx, c)
	if err != nil {
		return t, err
	}
	t.cat = &cat
	if sum.ModelTarget.Kind == protocol.ModelTargetExplicit {
		t.explicit, t.conn, t.model = true, cat.bySlug(sum.ModelTarget.ConnectionSlug), sum.ModelTarget.Model
		return t, nil
	}
	if cat.DefaultTarget != nil {
		t.conn, t.model = cat.byID(cat.DefaultTarget.ConnectionID), cat.DefaultTarget.ModelID
	}
	return t, nil
}

// explainModelUnavailable says what keeps the session's model from being
// used: its own connection when it names one, else the default target.
func explainModelUnavailable(ctx context.Context, c *client.Conn, sessionID, rootHint string) string {
	generic := "the model could not be used; check 'maka connection list" + rootHint + "'"
	t, err := sessionTarget(ctx, c, sessionID)
	if err != nil {
		return generic
	}
	cat := t.cat
	switch {
	case len(cat.Connections) == 0:
		return noConnectionMessage(ctx, rootHint)
	case t.explicit && t.conn == nil:
		return "the session's connection no longer exists; continue in a new session or add the connection again (connections: " +
			strings.Join(cat.slugs(), ", ") + ")"
	case cat.DefaultTarget == nil && !t.explicit:
		return "no default model is set; choose one with 'maka connection default " + cat.slugs()[0] + " [MODEL]" + rootHint + "' (connections: " +
			strings.Join(cat.slugs(), ", ") + ")"
	case t.conn == nil:
		return generic
	}
	conn := t.conn
	if !conn.Enabled {
		return "connection " + conn.Slug + " is disabled; enable it, or choose another default with 'maka connection default SLUG" + rootHint + "' (connections: " +
			strings.Join(cat.slugs(), ", ") + ")"
	}
	if why := providerinfo.Unsupported(conn.ProviderType); why != "" {
		return "connection " + conn.Slug + ": " + why
	}
	if !slices.Contains(conn.EnabledModelIDs, t.model) {
		return "model " + t.model + " is not enabled on connection " + conn.Slug + " (enabled: " + strings.Join(conn.EnabledModelIDs, ", ") + ")"
	}
	if !providerinfo.KeyOptional(conn.ProviderType) {
		if configured, err := credentialConfigured(ctx, c, conn); err == nil && !configured {
			return "no API key is stored for connection " + conn.Slug + "; set one with 'maka connection set-key " + conn.Slug + rootHint + "' (the key is read from stdin)"
		}
	}
	return generic + " (connection " + conn.Slug + ", model " + t.model + "; the host log says more)"
}

func credentialKind(providerType string) string {
	if protocol.ProviderAuth(providerType) == protocol.AuthOAuthToken {
		return protocol.CredentialKindOAuthToken
	}
	return protocol.CredentialKindAPIKey
}

// credentialStatus returns the stored credential of a connection.
func credentialStatus(ctx context.Context, c *client.Conn, conn *catalogConnection) (protocol.CredentialStatus, error) {
	res, err := c.QueryCredential(ctx, protocol.CredentialVaultQueryInput{
		Locator: protocol.ConnectionCredential(conn.ConnectionID, credentialKind(conn.ProviderType)),
	})
	if err != nil {
		return protocol.CredentialStatus{}, err
	}
	st, ok := res.(protocol.CredentialStatusResult)
	if !ok {
		return protocol.CredentialStatus{}, fmt.Errorf("connection %s no longer exists", conn.Slug)
	}
	return st.Status, nil
}

func credentialConfigured(ctx context.Context, c *client.Conn, conn *catalogConnection) (bool, error) {
	st, err := credentialStatus(ctx, c, conn)
	return st.Configured, err
}

// storeKey sets a connection's key, replacing the stored one.
func storeKey(ctx context.Context, c *client.Conn, conn *catalogConnection, key string) error {
	for range catalogReadAttempts {
		st, err := credentialStatus(ctx, c, conn)
		if err != nil {
			return err
		}
		in := protocol.CredentialVaultSetInput{Locator: st.Locator, Secret: key}
		if st.Configured && st.CredentialID != nil && st.Revision != nil {
			in.Expected = &protocol.CredentialExpectation{CredentialID: *st.CredentialID, Revision: *st.Revision}
		}
		res, err := c.SetCredential(ctx, in)
		if err != nil {
			return err
		}
		switch res.(type) {
		case protocol.CredentialCommitted:
			return nil
		case protocol.CredentialConnectionNotFound:
			return fmt.Errorf("connection %s no longer exists", conn.Slug)
		}
		// stale: another client changed the key meanwhile; retry.
	}
	return errors.New("the key keeps changing under another client; try again")
}

// ---------------------------------------------------------------------------
// add

type connectionAddOptions struct {
	host     hostFlags
	provider string
	baseURL  string
	models   []string
	name     string
	keyEnv   string
	noKey    bool
	setDef   bool
	window   int64
}

func newConnectionAddCommand() *cobra.Command {
	var o connectionAddOptions
	cmd := &cobra.Command{
		Use:   "add [SLUG] --provider TYPE --model ID [--model ID ...]",
		Short: "Add a model connection and, optionally, its API key",
		Long: `Add a model connection. SLUG (lowercase letters, digits and '-') names it;
it defaults to the provider type. The first --model becomes the default
target when none is set yet (or always, with --default).

The API key is read from the environment variable named by --key-env, or
else from stdin: piped in, or typed at a prompt that does not echo it (an
empty answer stores no key). It is never taken from the command line.

Providers: ` + strings.Join(protocol.ProviderTypes, ", ") + `.`,
		Example: `  maka connection add --provider openai --model gpt-4.1 --key-env OPENAI_API_KEY
  maka connection add --provider anthropic --model claude-sonnet-4-5 < ~/.secrets/anthropic
  maka connection add local --provider openai-compatible --base-url http://localhost:8080/v1 --model qwen3 --no-key
  maka connection add --provider ollama --model llama3.2`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return connectionAdd(cmd, o, args) },
	}
	f := cmd.Flags()
	o.host.register(f)
	f.StringVar(&o.provider, "provider", "", "provider type (required; see above)")
	f.StringVar(&o.baseURL, "base-url", "", "endpoint of the provider (required for openai-compatible and other providers without a default)")
	f.StringArrayVar(&o.models, "model", nil, "model id to enable (repeatable; at least one)")
	f.StringVar(&o.name, "name", "", "display name (default: the slug)")
	f.StringVar(&o.keyEnv, "key-env", "", "read the API key from this environment variable instead of stdin")
	f.BoolVar(&o.noKey, "no-key", false, "store no API key (set one later with 'maka connection set-key')")
	f.BoolVar(&o.setDef, "default", false, "make the first --model the default target even if one is set")
	f.Int64Var(&o.window, "context-window", 0, "context window of the models, in tokens, where the provider does not say (default: 128000)")
	_ = cmd.MarkFlagRequired("provider")
	_ = cmd.MarkFlagRequired("model")
	cmd.MarkFlagsMutuallyExclusive("key-env", "no-key")
	_ = cmd.RegisterFlagCompletionFunc("provider", cobra.FixedCompletions(protocol.ProviderTypes, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func connectionAdd(cmd *cobra.Command, o connectionAddOptions, args []string) error {
	if !slices.Contains(protocol.ProviderTypes, o.provider) {
		return exitf(2, "unknown --provider %q; one of: %s", o.provider, strings.Join(protocol.ProviderTypes, ", "))
	}
	if why := providerinfo.Unsupported(o.provider); why != "" {
		return exitf(2, "%s", why)
	}
	slug := o.provider
	if len(args) == 1 {
		slug = args[0]
	}
	if !protocol.IsConnectionSlug(slug) {
		return exitf(2, "invalid connection name %q: use 2-64 lowercase letters, digits and '-'", slug)
	}
	baseURL, err := protocol.NormalizeConnectionBaseURL(o.baseURL, o.provider)
	if err != nil {
		return exitf(2, "invalid --base-url: %v", err)
	}
	if baseURL == "" && protocol.ProviderDefaultBaseURL[o.provider] == "" {
		return exitf(2, "provider %s has no default endpoint: give --base-url", o.provider)
	}
	if len(o.models) > protocol.ConnectionMutationMaxEnabledIDs {
		return exitf(2, "at most %d --model per command", protocol.ConnectionMutationMaxEnabledIDs)
	}
	for i, m := range o.models {
		if strings.TrimSpace(m) == "" || protocol.UTF16Len(m) > protocol.ConnectionModelIDMaxLength {
			return exitf(2, "invalid --model %q", m)
		}
		if slices.Contains(o.models[:i], m) {
			return exitf(2, "--model %s is given twice", m)
		}
	}
	if o.window < 0 || o.window > protocol.MaxSafeInteger {
		return exitf(2, "--context-window must be a positive number of tokens")
	}
	name := o.name
	if name == "" {
		name = slug
	}
	if protocol.UTF16Len(name) > protocol.ConnectionNameMaxLength {
		return exitf(2, "--name is longer than %d characters", protocol.ConnectionNameMaxLength)
	}
	auth := protocol.ProviderAuth(o.provider)
	var key string
	if !o.noKey && auth != protocol.AuthNone {
		if key, err = readKey(cmd, o.keyEnv, "API key for "+slug+" (input hidden; empty to skip): "); err != nil {
			return err
		}
	}

	ctx, conn, done, err := o.host.open(cmd)
	if err != nil {
		return err
	}
	defer done()
	hint := o.host.rootHint()
	endpoint := baseURL
	if endpoint == "" {
		endpoint = protocol.ProviderDefaultBaseURL[o.provider]
	}
	if listed, err := listModels(ctx, o.provider, endpoint, key); err == nil {
		for _, m := range o.models {
			if note := modelNote(m, listed); note != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "maka: warning: %s\n", note)
			}
		}
	}
	created, hadDefault, err := createConnection(ctx, conn, protocol.ConnectionDraft{Slug: slug, Name: name, ProviderType: o.provider,
		BaseURL: baseURL, Enabled: true, EnabledModelIDs: o.models}, hint)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "added connection %s (%s, models %s)\n", slug, o.provider, strings.Join(o.models, ", "))
	if o.window > 0 {
		if err := setContextWindow(ctx, conn, created.Connection, o.window); err != nil {
			return exitf(1, "the connection was added but not its context window: %v; retry with 'maka connection edit %s --context-window %d%s'", err, slug, o.window, hint)
		}
		fmt.Fprintf(out, "context window: %d tokens\n", o.window)
	}
	added := &catalogConnection{CatalogConnectionHeader: protocol.CatalogConnectionHeader{
		ConnectionID: created.Connection.ConnectionID, Slug: slug, ProviderType: o.provider}}
	if key != "" {
		if err := storeKey(ctx, conn, added, key); err != nil {
			return exitf(1, "the connection was added but its key was not stored: %v; retry with 'maka connection set-key %s%s'", err, slug, hint)
		}
		fmt.Fprintln(out, "stored its API key")
	} else if providerinfo.KeyOptional(o.provider) {
		if auth != protocol.AuthNone {
			fmt.Fprintf(out, "no API key stored: requests are sent without one (set one with 'maka connection set-key %s%s' if the server needs it)\n", slug, hint)
		}
	} else {
		fmt.Fprintf(out, "no API key stored; %s needs one: set it with 'maka connection set-key %s%s' (reads stdin)\n", o.provider, slug, hint)
	}
	if !hadDefault || o.setDef {
		if err := setDefault(ctx, conn, added.ConnectionID, o.models[0]); err != nil {
			return exitf(1, "the connection was added but not made the default: %v; retry with 'maka connection default %s%s'", err, slug, hint)
		}
		fmt.Fprintf(out, "default model: %s %s\n", slug, o.models[0])
	}
	return nil
}

// createConnection adds draft to the catalog (retrying while the catalog
// changes) and reports whether a default target was set before.
func createConnection(ctx context.Context, conn *client.Conn, draft protocol.ConnectionDraft, hint string) (protocol.CatalogConnectionCommitted, bool, error) {
	slug := draft.Slug
	for attempt := 0; ; attempt++ {
		cat, err := readCatalog(ctx, conn)
		if err != nil {
			return protocol.CatalogConnectionCommitted{}, false, callError(ctx, "cannot read the connection catalog", err)
		}
		if cat.bySlug(slug) != nil {
			return protocol.CatalogConnectionCommitted{}, false, exitf(1, "a connection named %s exists; remove it first ('maka connection remove %s%s') or give another name: maka connection add NAME ...", slug, slug, hint)
		}
		hadDefault := cat.DefaultTarget != nil
		res, err := conn.CreateConnection(ctx, protocol.CatalogCreateInput{ExpectedCatalogRevision: cat.Revision, Connection: draft})
		if err != nil {
			return protocol.CatalogConnectionCommitted{}, false, callError(ctx, "cannot add the connection", err)
		}
		switch r := res.(type) {
		case protocol.CatalogConnectionCommitted:
			return r, hadDefault, nil
		case protocol.ConnectionExists:
			return protocol.CatalogConnectionCommitted{}, false, exitf(1, "a connection named %s exists; remove it first ('maka connection remove %s%s') or give another name", r.Slug, r.Slug, hint)
		}
		if attempt+1 >= catalogReadAttempts {
			return protocol.CatalogConnectionCommitted{}, false, exitf(1, "the connection catalog keeps changing; try again")
		}
	}
}

// setDefault makes connectionID/modelID the default target.
func setDefault(ctx context.Context, c *client.Conn, connectionID, modelID string) error {
	for range catalogReadAttempts {
		cat, err := readCatalog(ctx, c)
		if err != nil {
			return err
		}
		res, err := c.SetDefaultConnectionTarget(ctx, protocol.CatalogSetDefaultTargetInput{
			ExpectedCatalogRevision: cat.Revision,
			Target:                  &protocol.ConnectionTarget{ConnectionID: connectionID, ModelID: modelID},
		})
		if err != nil {
			return err
		}
		switch r := res.(type) {
		case protocol.CatalogCommitted:
			return nil
		case protocol.InvalidDefaultTarget:
			return fmt.Errorf("model %s is not an enabled model of an enabled connection", r.Target.ModelID)
		}
	}
	return errors.New("the connection catalog keeps changing; try again")
}

// readKey reads an API key: from the environment variable envName when
// given, else from stdin (a prompt without echo on a terminal). An empty
// key means none.
func readKey(cmd *cobra.Command, envName, prompt string) (string, error) {
	if envName != "" {
		v, ok := os.LookupEnv(envName)
		if !ok || strings.TrimSpace(v) == "" {
			return "", exitf(2, "environment variable %s is not set or empty", envName)
		}
		return checkKey(strings.TrimSpace(v))
	}
	in := cmd.InOrStdin()
	if f, ok := in.(*os.File); ok && isTerminal(f) {
		key, err := readHidden(f, cmd.ErrOrStderr(), prompt)
		if err != nil {
			return "", exitf(2, "cannot read the key: %v", err)
		}
		return checkKey(strings.TrimSpace(key))
	}
	b, err := io.ReadAll(io.LimitReader(in, protocol.CredentialSecretMaxBytes+2))
	if err != nil {
		return "", exitf(2, "cannot read the key from stdin: %v", err)
	}
	return checkKey(strings.TrimSpace(string(b)))
}

func checkKey(key string) (string, error) {
	if len(key) > protocol.CredentialSecretMaxBytes {
		return "", exitf(2, "the key is longer than %d bytes", protocol.CredentialSecretMaxBytes)
	}
	if strings.ContainsAny(key, "\r\n") {
		return "", exitf(2, "the key spans several lines; give one key")
	}
	return key, nil
}

// ---------------------------------------------------------------------------
// list, remove, default, set-key

func newConnectionListCommand() *cobra.Command {
	var h hostFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the model connections",
		Example: `  maka connection list
  maka connection list --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, conn, done, err := h.open(cmd)
			if err != nil {
				return err
			}
			defer done()
			cat, err := readCatalog(ctx, conn)
			if err != nil {
				return callError(ctx, "cannot read the connection catalog", err)
			}
			type row struct {
				ConnectionID    string   `json:"connectionId"`
				Slug            string   `json:"slug"`
				Name            string   `json:"name"`
				ProviderType    string   `json:"providerType"`
				BaseURL         string   `json:"baseUrl,omitempty"`
				Enabled         bool     `json:"enabled"`
				EnabledModelIDs []string `json:"enabledModelIds"`
				KeyConfigured   bool     `json:"keyConfigured"`
				Default         string   `json:"defaultModel,omitempty"`
			}
			rows := make([]row, 0, len(cat.Connections))
			for i := range cat.Connections {
				c := &cat.Connections[i]
				r := row{ConnectionID: c.ConnectionID, Slug: c.Slug, Name: c.Name, ProviderType: c.ProviderType,
					BaseURL: c.BaseURL, Enabled: c.Enabled, EnabledModelIDs: c.EnabledModelIDs}
				if r.EnabledModelIDs == nil {
					r.EnabledModelIDs = []string{}
				}
				if protocol.ProviderAuth(c.ProviderType) != protocol.AuthNone {
					r.KeyConfigured, _ = credentialConfigured(ctx, conn, c)
				}
				if t := cat.DefaultTarget; t != nil && t.ConnectionID == c.ConnectionID {
					r.Default = t.ModelID
				}
				rows = append(rows, r)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(struct {
					Revision    int64                      `json:"revision"`
					Default     *protocol.ConnectionTarget `json:"defaultTarget"`
					Connections []row                      `json:"connections"`
				}{cat.Revision, cat.DefaultTarget, rows})
			}
			if len(rows) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), noConnectionMessage(cmd.Context(), h.rootHint()))
				return nil
			}
			w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "SLUG\tPROVIDER\tMODELS\tKEY\tDEFAULT")
			for _, r := range rows {
				key := "-"
				switch {
				case protocol.ProviderAuth(r.ProviderType) == protocol.AuthNone:
					key = "not needed"
				case r.KeyConfigured:
					key = "stored"
				case providerinfo.KeyOptional(r.ProviderType):
					key = "none"
				default:
					key = "missing"
				}
				def := ""
				if r.Default != "" {
					def = "* " + r.Default
				}
				provider := r.ProviderType
				if r.BaseURL != "" {
					provider += " " + r.BaseURL
				}
				if !r.Enabled {
					provider += " (disabled)"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", r.Slug, provider, strings.Join(r.EnabledModelIDs, ", "), key, def)
			}
			return w.Flush()
		},
	}
	h.register(cmd.Flags())
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// findConnection connects and finds a connection by slug.
func findConnection(ctx context.Context, h *hostFlags, slug string) (*client.Conn, catalogView, *catalogConnection, error) {
	conn, err := h.connect(ctx, protocol.SurfaceInspect)
	if err != nil {
		return nil, catalogView{}, nil, err
	}
	cat, err := readCatalog(ctx, conn)
	if err != nil {
		conn.Close()
		return nil, cat, nil, callError(ctx, "cannot read the connection catalog", err)
	}
	c := cat.bySlug(slug)
	if c == nil {
		conn.Close()
		if len(cat.Connections) == 0 {
			return nil, cat, nil, exitf(1, "no connection %q: %s", slug, noConnectionMessage(ctx, h.rootHint()))
		}
		return nil, cat, nil, exitf(1, "no connection %q; the connections are %s", slug, strings.Join(cat.slugs(), ", "))
	}
	return conn, cat, c, nil
}

func slugArg(args []string) error {
	if !protocol.IsConnectionSlug(args[0]) {
		return exitf(2, "invalid connection name %q (see 'maka connection list')", args[0])
	}
	return nil
}

func newConnectionRemoveCommand() *cobra.Command {
	var h hostFlags
	cmd := &cobra.Command{
		Use:               "remove SLUG",
		Aliases:           []string{"rm"},
		Short:             "Remove a model connection and its stored key",
		Example:           `  maka connection remove local`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeConnectionSlugs(&h),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := slugArg(args); err != nil {
				return err
			}
			ctx, stop := interruptible(cmd.Context())
			defer stop()
			conn, cat, c, err := findConnection(ctx, &h, args[0])
			if err != nil {
				return err
			}
			defer conn.Close()
			wasDefault := cat.DefaultTarget != nil && cat.DefaultTarget.ConnectionID == c.ConnectionID
			for attempt := 0; ; attempt++ {
				res, err := conn.RemoveConnection(ctx, protocol.CatalogRemoveInput{
					Expected: protocol.ConnectionVersionBasis{ConnectionID: c.ConnectionID, Revision: c.Revision}})
				if err != nil {
					return callError(ctx, "cannot remove the connection", err)
				}
				if _, ok := res.(protocol.CatalogCommitted); ok {
					break
				}
				stale := res.(protocol.ConnectionStale)
				if stale.Actual == nil {
					break // removed by someone else
				}
				if attempt+1 >= catalogReadAttempts {
					return exitf(1, "connection %s keeps changing; try again", c.Slug)
				}
				c.Revision = stale.Actual.Revision
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "removed connection %s\n", c.Slug)
			if wasDefault {
				fmt.Fprintf(out, "there is no default model now; choose one with 'maka connection default SLUG%s'\n", h.rootHint())
			}
			return nil
		},
	}
	h.register(cmd.Flags())
	return cmd
}

func newConnectionDefaultCommand() *cobra.Command {
	var h hostFlags
	cmd := &cobra.Command{
		Use:   "default SLUG [MODEL]",
		Short: "Choose the default model target of new sessions",
		Long: `Make a connection and one of its enabled models the default target of new
sessions. MODEL defaults to the connection's first enabled model.`,
		Example: `  maka connection default openai
  maka connection default local qwen3`,
		Args:              cobra.RangeArgs(1, 2),
		ValidArgsFunction: completeConnectionSlugs(&h),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := slugArg(args); err != nil {
				return err
			}
			ctx, stop := interruptible(cmd.Context())
			defer stop()
			conn, _, c, err := findConnection(ctx, &h, args[0])
			if err != nil {
				return err
			}
			defer conn.Close()
			var model string
			switch {
			case len(args) == 2:
				model = args[1]
				if !slices.Contains(c.EnabledModelIDs, model) {
					return exitf(1, "model %s is not enabled for %s (enabled: %s)", model, c.Slug, strings.Join(c.EnabledModelIDs, ", "))
				}
			case len(c.EnabledModelIDs) > 0:
				model = c.EnabledModelIDs[0]
			default:
				return exitf(1, "connection %s has no enabled model", c.Slug)
			}
			if err := setDefault(ctx, conn, c.ConnectionID, model); err != nil {
				return callError(ctx, "cannot set the default model", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "default model: %s %s\n", c.Slug, model)
			return nil
		},
	}
	h.register(cmd.Flags())
	return cmd
}

func newConnectionSetKeyCommand() *cobra.Command {
	var h hostFlags
	var keyEnv string
	cmd := &cobra.Command{
		Use:   "set-key SLUG",
		Short: "Store or replace the API key of a connection",
		Long: `Store the API key of a connection, replacing any stored one. The key is read
from the environment variable named by --key-env, or from stdin (piped in, or
typed at a prompt that does not echo it); never from the command line.`,
		Example: `  maka connection set-key openai --key-env OPENAI_API_KEY
  pass show openai | maka connection set-key openai
  maka connection set-key openai            # prompts for the key`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeConnectionSlugs(&h),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := slugArg(args); err != nil {
				return err
			}
			key, err := readKey(cmd, keyEnv, "API key for "+args[0]+" (input hidden): ")
			if err != nil {
				return err
			}
			if key == "" {
				return exitf(2, "no key given (pipe it to stdin or use --key-env VAR)")
			}
			ctx, stop := interruptible(cmd.Context())
			defer stop()
			conn, _, c, err := findConnection(ctx, &h, args[0])
			if err != nil {
				return err
			}
			defer conn.Close()
			if protocol.ProviderAuth(c.ProviderType) == protocol.AuthNone {
				return exitf(1, "connection %s (%s) uses no API key", c.Slug, c.ProviderType)
			}
			if err := storeKey(ctx, conn, c, key); err != nil {
				return callError(ctx, "cannot store the key", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "stored the API key of %s\n", c.Slug)
			return nil
		},
	}
	h.register(cmd.Flags())
	cmd.Flags().StringVar(&keyEnv, "key-env", "", "read the key from this environment variable instead of stdin")
	return cmd
}

// completeConnectionSlugs completes connection slugs.
func completeConnectionSlugs(h *hostFlags) cobra.CompletionFunc {
	return completeFromHost(h, "connection", func(ctx context.Context, conn *client.Conn) ([]string, error) {
		cat, err := readCatalog(ctx, conn)
		return cat.slugs(), err
	})
}
