package model

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/maka-agent/maka/internal/providerinfo"
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
	// Model is the model id; with the "openai" type and no declared
	// protocol it chooses between the Chat Completions and Responses APIs.
	Model string
	// Reasoning reports that the model reasons (its declared capability);
	// the Responses API then asks for reasoning summaries and gives the
	// model's encrypted reasoning back with later requests.
	Reasoning bool
	// HTTPClient defaults to http.DefaultClient.
	HTTPClient *http.Client
}

// The provider types that cannot serve turns (providerinfo, which the
// command line shares).
var (
	unsupportedTypes        = providerinfo.UnsupportedTypes
	unsupportedDefaultTypes = providerinfo.UnsupportedDefaultTypes
)

// New returns the Provider for cfg:
//   - the Anthropic Messages API for the "anthropic-messages" protocol and
//     the anthropic and anthropic-compatible provider types;
//   - the OpenAI Responses API for the "openai-responses" protocol, the
//     openai-responses-compatible type, and OpenAI's own gpt-5, o-series
//     and codex models (the openai type at its default endpoint) when no
//     protocol is declared;
//   - an error wrapping ErrUnsupportedProvider for provider types that need
//     a flow of their own (openai-codex, claude-subscription,
//     github-copilot, gemini-cli) or a protocol not implemented (google and
//     cohere unless a model declares one of the above);
//   - else OpenAI-style Chat Completions.
//
// An empty BaseURL takes the provider type's default; a type without one
// is an error.
func New(cfg Config) (Provider, error) {
	typ := strings.TrimSpace(cfg.ProviderType)
	proto := strings.TrimSpace(cfg.APIProtocol)
	switch {
	case unsupportedTypes[typ]:
		return nil, fmt.Errorf("%w: provider type %q", ErrUnsupportedProvider, typ)
	case proto == ProtocolOpenAIResponses, proto == ProtocolAnthropicMessages, proto == ProtocolOpenAIChat:
	case proto != "":
		return nil, fmt.Errorf("%w: unknown API protocol %q", ErrUnsupportedProvider, proto)
	case typ == "anthropic" || typ == "anthropic-compatible":
		proto = ProtocolAnthropicMessages
	case typ == "openai-responses-compatible" || (typ == "openai" && strings.TrimSpace(cfg.BaseURL) == "" && responsesOnly(cfg.Model)):
		proto = ProtocolOpenAIResponses
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
	oc := OpenAIConfig{BaseURL: base, APIKey: cfg.APIKey, HTTPClient: cfg.HTTPClient}
	switch proto {
	case ProtocolAnthropicMessages:
		return endpoint{NewAnthropic(AnthropicConfig{BaseURL: base, APIKey: cfg.APIKey, HTTPClient: cfg.HTTPClient}), base}, nil
	case ProtocolOpenAIResponses:
		return endpoint{NewOpenAIResponses(oc, cfg.Reasoning || reasoningModel(cfg.Model)), base}, nil
	}
	oc.Reasoning = cfg.Reasoning || reasoningModel(cfg.Model)
	return endpoint{NewOpenAIChat(oc), base}, nil
}

// endpoint names its configured base URL in a failure to reach it
// (AtEndpoint).
type endpoint struct {
	Provider
	base string
}

func (e endpoint) Stream(ctx context.Context, req Request, emit func(Event) error) (Finish, error) {
	fin, err := e.Provider.Stream(ctx, req, emit)
	return fin, AtEndpoint(err, e.base)
}

// responsesOnly reports whether an OpenAI model id is best (or only)
// served by the Responses API: the gpt-5 family, the o-series reasoning
// models and the codex models.
func responsesOnly(model string) bool {
	m := strings.ToLower(strings.TrimSpace(model))
	return strings.HasPrefix(m, "gpt-5") || strings.Contains(m, "codex") || reasoningModel(m)
}

// reasoningModel reports whether an OpenAI model id names a reasoning
// model (o1, o3, o4-mini, gpt-5 except its chat variants, codex).
func reasoningModel(model string) bool {
	m := strings.ToLower(strings.TrimSpace(model))
	switch {
	case len(m) >= 2 && m[0] == 'o' && m[1] >= '1' && m[1] <= '9':
		return true
	case strings.HasPrefix(m, "gpt-5"):
		return !strings.Contains(m, "chat")
	}
	return strings.Contains(m, "codex")
}

// Unsupported says why a connection of providerType cannot serve turns
// when none of its models declares an API protocol ("" when it can).
func Unsupported(providerType string) string { return providerinfo.Unsupported(providerType) }

// KeyOptional reports whether a connection of providerType may run with no
// API key stored: it then sends no credential at all.
func KeyOptional(providerType string) bool { return providerinfo.KeyOptional(providerType) }
