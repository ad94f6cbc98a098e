package model

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/maka-agent/maka/protocol"
)

// API protocols a connection's model may declare.
const (
	ProtocolOpenAIChat        = "openai-chat"
	ProtocolOpenAIResponses   = "openai-responses"
	ProtocolAnthropicMessages = "anthropic-messages"
)

// ErrUnsupportedProvider is wrapped by New for a provider type or protocol
// that has no implementation yet.
var ErrUnsupportedProvider = errors.New("model provider not supported")

// Config selects and configures a Provider for one connection and model.
type Config struct {
	// ProviderType is the connection's provider type ("openai",
	// "anthropic", "ollama", "deepseek", "openai-compatible", ...).
	ProviderType string
	// BaseURL overrides the provider type's default endpoint.
	BaseURL string
	// APIKey may be empty for keyless local servers.
	APIKey string
	// APIProtocol is the model's declared protocol, or "".
	APIProtocol string
	// HTTPClient defaults to http.DefaultClient.
	HTTPClient *http.Client
}

// unsupportedTypes need an authentication flow or wire protocol that is not
// implemented, whatever protocol the model declares.
var unsupportedTypes = map[string]bool{
	"openai-codex":        true,
	"claude-subscription": true,
	"github-copilot":      true,
	"gemini-cli":          true,
}

// unsupportedDefaultTypes have no Chat Completions or Messages endpoint
// unless the model declares one of those protocols.
var unsupportedDefaultTypes = map[string]bool{
	"openai-responses-compatible": true,
	"google":                      true,
	"cohere":                      true,
}

// New returns the Provider for cfg: the Anthropic Messages API for the
// "anthropic-messages" protocol and the anthropic and anthropic-compatible
// provider types; an error wrapping ErrUnsupportedProvider for the OpenAI
// Responses API and for provider types that need it or a flow of their own
// (openai-responses-compatible, openai-codex, claude-subscription,
// github-copilot, gemini-cli, google, cohere); else OpenAI-style Chat
// Completions (the "openai" type included). An empty BaseURL takes the
// provider type's default; a type without one is an error.
func New(cfg Config) (Provider, error) {
	typ := strings.TrimSpace(cfg.ProviderType)
	proto := strings.TrimSpace(cfg.APIProtocol)
	anthropicWire := false
	switch {
	case unsupportedTypes[typ]:
		return nil, fmt.Errorf("%w: provider type %q", ErrUnsupportedProvider, typ)
	case proto == ProtocolOpenAIResponses:
		return nil, fmt.Errorf("%w: the %s protocol (OpenAI Responses API) is not implemented; declare %s to use Chat Completions", ErrUnsupportedProvider, proto, ProtocolOpenAIChat)
	case proto == ProtocolAnthropicMessages:
		anthropicWire = true
	case proto == ProtocolOpenAIChat:
	case proto != "":
		return nil, fmt.Errorf("%w: unknown API protocol %q", ErrUnsupportedProvider, proto)
	case typ == "anthropic" || typ == "anthropic-compatible":
		anthropicWire = true
	case unsupportedDefaultTypes[typ]:
		return nil, fmt.Errorf("%w: provider type %q", ErrUnsupportedProvider, typ)
	}
	base := strings.TrimSpace(cfg.BaseURL)
	if base == "" {
		base = protocol.ProviderDefaultBaseURL[typ]
	}
	if base == "" {
		return nil, errors.New("connection has no base URL")
	}
	if anthropicWire {
		return NewAnthropic(AnthropicConfig{BaseURL: base, APIKey: cfg.APIKey, HTTPClient: cfg.HTTPClient}), nil
	}
	return NewOpenAIChat(OpenAIConfig{BaseURL: base, APIKey: cfg.APIKey, HTTPClient: cfg.HTTPClient}), nil
}
