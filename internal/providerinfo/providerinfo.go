// Package providerinfo is what the command line knows of model providers
// without linking them (their SDKs belong to the host, internal/model):
// the provider types that cannot serve turns, those that may run without
// an API key, and the reasoning efforts a turn may ask for.
package providerinfo

import (
	"fmt"

	"github.com/maka-agent/maka/protocol"
)

// UnsupportedTypes need an authentication flow or wire protocol that is not
// implemented, whatever protocol the model declares.
var UnsupportedTypes = map[string]bool{
	"openai-codex":        true,
	"claude-subscription": true,
	"github-copilot":      true,
	"gemini-cli":          true,
}

// UnsupportedDefaultTypes have no Chat Completions, Responses or Messages
// endpoint unless the model declares one of those protocols.
var UnsupportedDefaultTypes = map[string]bool{
	"google": true,
	"cohere": true,
}

// Unsupported says why a connection of providerType cannot serve turns
// when none of its models declares an API protocol ("" when it can): the
// sign-in providers need a flow that is not implemented, and google and
// cohere speak protocols of their own.
func Unsupported(providerType string) string {
	switch {
	case UnsupportedTypes[providerType]:
		return "provider " + providerType + " needs a sign-in flow, which is not supported yet"
	case UnsupportedDefaultTypes[providerType]:
		return "provider " + providerType + " speaks an API that is not supported yet; use an OpenAI- or Anthropic-compatible endpoint of it with --provider openai-compatible or anthropic-compatible"
	}
	return ""
}

// keylessTypes are the provider types whose servers are often run without
// a key: local servers and self-hosted compatible endpoints.
var keylessTypes = map[string]bool{
	"openai-compatible": true, "openai-responses-compatible": true, "anthropic-compatible": true,
}

// KeyOptional reports whether a connection of providerType may run with no
// API key stored: it then sends no credential at all.
func KeyOptional(providerType string) bool {
	switch protocol.ProviderAuth(providerType) {
	case protocol.AuthNone, protocol.AuthOptionalAPIKey:
		return true
	}
	return keylessTypes[providerType]
}

// Efforts are the reasoning efforts a turn may ask for ("" is the
// model's default).
var Efforts = []string{"", "off", "low", "medium", "high"}

// CheckEffort checks a reasoning effort: off, low, medium, high or "".
func CheckEffort(s string) error {
	for _, e := range Efforts {
		if e == s {
			return nil
		}
	}
	return fmt.Errorf("reasoning effort %q is not off, low, medium or high", s)
}
