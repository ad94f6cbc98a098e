package modeltest

import (
	"context"
	"fmt"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/protocol"
)

// Configure makes the OpenAI-compatible endpoint at baseURL, model "m1",
// the default model target of the host c is connected to: it creates the
// connection "fake" (Chat Completions), sets the default target and stores
// apiKey.
func Configure(ctx context.Context, c *client.Conn, baseURL, apiKey string) error {
	return ConfigureProvider(ctx, c, "openai-compatible", baseURL, apiKey)
}

// ConfigureProvider is Configure with the connection's provider type:
// "openai-responses-compatible" makes the host speak the Responses API.
func ConfigureProvider(ctx context.Context, c *client.Conn, providerType, baseURL, apiKey string) error {
	return ConfigureWindow(ctx, c, providerType, baseURL, apiKey, 0)
}

// ConfigureWindow is ConfigureProvider with the context window the
// connection declares for its model (0: none).
func ConfigureWindow(ctx context.Context, c *client.Conn, providerType, baseURL, apiKey string, window int64) error {
	q, err := c.QueryConnectionCatalog(ctx, protocol.CatalogQueryInput{})
	if err != nil {
		return fmt.Errorf("catalog query: %w", err)
	}
	page, ok := q.(protocol.CatalogPage)
	if !ok {
		return fmt.Errorf("catalog query: %#v", q)
	}
	created, err := c.CreateConnection(ctx, protocol.CatalogCreateInput{
		ExpectedCatalogRevision: page.Revision,
		Connection: protocol.ConnectionDraft{
			Slug: "fake", Name: "Fake model", ProviderType: providerType,
			BaseURL: baseURL, Enabled: true, EnabledModelIDs: []string{"m1"},
		},
	})
	if err != nil {
		return fmt.Errorf("connection create: %w", err)
	}
	conn, ok := created.(protocol.CatalogConnectionCommitted)
	if !ok {
		return fmt.Errorf("connection create: %#v", created)
	}
	if window > 0 {
		set, err := c.SetConnectionContextWindow(ctx, protocol.ConnectionContextWindowSetInput{Expected: conn.Connection, ContextWindow: window})
		if err != nil {
			return fmt.Errorf("context window: %w", err)
		}
		if conn, ok = set.(protocol.CatalogConnectionCommitted); !ok {
			return fmt.Errorf("context window: %#v", set)
		}
	}
	set, err := c.SetDefaultConnectionTarget(ctx, protocol.CatalogSetDefaultTargetInput{
		ExpectedCatalogRevision: conn.CatalogRevision,
		Target:                  &protocol.ConnectionTarget{ConnectionID: conn.Connection.ConnectionID, ModelID: "m1"},
	})
	if err != nil {
		return fmt.Errorf("set default target: %w", err)
	}
	if _, ok := set.(protocol.CatalogCommitted); !ok {
		return fmt.Errorf("set default target: %#v", set)
	}
	cred, err := c.SetCredential(ctx, protocol.CredentialVaultSetInput{
		Locator: protocol.ConnectionCredential(conn.Connection.ConnectionID, protocol.CredentialKindAPIKey),
		Secret:  apiKey,
	})
	if err != nil {
		return fmt.Errorf("credential set: %w", err)
	}
	if st, ok := cred.(protocol.CredentialCommitted); !ok || !st.Status.Configured {
		return fmt.Errorf("credential set: %#v", cred)
	}
	return nil
}
