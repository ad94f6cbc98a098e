package domain

import (
	"context"
	"fmt"
	"slices"

	"github.com/maka-agent/maka/internal/config"
	"github.com/maka-agent/maka/internal/model"
	"github.com/maka-agent/maka/internal/turns"
	"github.com/maka-agent/maka/protocol"
)

// resolveModel turns a session's model target into a provider: the
// scripted provider when the host runs with a script, else the connection
// of the catalog (the default target, or the explicit connection by slug)
// with its credential from the vault. Errors say what to do next; they
// never contain a secret.
func (c *Composition) resolveModel(ctx context.Context, target protocol.ModelTarget) (turns.Resolved, error) {
	if c.scripted != nil {
		return turns.Resolved{Provider: c.scripted, Model: "scripted", ConnectionSlug: "scripted"}, nil
	}
	cat, err := c.config.Catalog(ctx)
	if err != nil {
		return turns.Resolved{}, fmt.Errorf("the connection catalog could not be read")
	}
	var conn *config.Connection
	var modelID string
	switch target.Kind {
	case protocol.ModelTargetExplicit:
		i := slices.IndexFunc(cat.Connections, func(x config.Connection) bool { return x.Slug == target.ConnectionSlug })
		if i < 0 {
			return turns.Resolved{}, fmt.Errorf("no connection %q is configured; add one with `maka connection add`", target.ConnectionSlug)
		}
		conn, modelID = &cat.Connections[i], target.Model
	default:
		if cat.DefaultTarget == nil {
			return turns.Resolved{}, fmt.Errorf("no model connection is configured; add one with `maka connection add` (see README: Model connections)")
		}
		i := slices.IndexFunc(cat.Connections, func(x config.Connection) bool { return x.ConnectionID == cat.DefaultTarget.ConnectionID })
		if i < 0 {
			return turns.Resolved{}, fmt.Errorf("the default model target names a connection that no longer exists; set a new default")
		}
		conn, modelID = &cat.Connections[i], cat.DefaultTarget.ModelID
	}
	if !conn.Enabled {
		return turns.Resolved{}, fmt.Errorf("connection %q is disabled; enable it or choose another", conn.Slug)
	}
	if modelID == "" {
		return turns.Resolved{}, fmt.Errorf("no model is chosen for connection %q", conn.Slug)
	}
	cfg := model.Config{ProviderType: conn.ProviderType, BaseURL: conn.BaseURL, Model: modelID, HTTPClient: c.httpClient}
	contextWindow := conn.ContextWindow // declared; a discovered model's own wins
	for _, m := range conn.Models {
		if m.ID == modelID {
			cfg.APIProtocol = m.APIProtocol
			cfg.Reasoning = m.Capabilities != nil && m.Capabilities.Reasoning != nil && *m.Capabilities.Reasoning
			if m.ContextWindow > 0 {
				contextWindow = m.ContextWindow
			}
		}
	}
	switch protocol.ProviderAuth(conn.ProviderType) {
	case protocol.AuthNone:
	default:
		kind := protocol.CredentialKindAPIKey
		if protocol.ProviderAuth(conn.ProviderType) == protocol.AuthOAuthToken {
			kind = protocol.CredentialKindOAuthToken
		}
		key, ok := c.secrets.Get(protocol.ConnectionCredential(conn.ConnectionID, kind))
		if !ok && !model.KeyOptional(conn.ProviderType) {
			return turns.Resolved{}, fmt.Errorf("no API key stored for connection %q; set one with `maka connection set-key %s`", conn.Slug, conn.Slug)
		}
		cfg.APIKey = key
	}
	p, err := model.New(cfg)
	if err != nil {
		return turns.Resolved{}, fmt.Errorf("connection %q: %v", conn.Slug, err)
	}
	return turns.Resolved{Provider: p, Model: modelID, ConnectionSlug: conn.Slug, ContextWindow: contextWindow}, nil
}
