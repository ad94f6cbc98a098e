package model

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestNewSelectsProvider(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		want    string // "openai", "anthropic", or an error substring
		wantErr bool
	}{
		{name: "openai default", cfg: Config{ProviderType: "openai", APIKey: "k"}, want: "openai"},
		{name: "ollama default", cfg: Config{ProviderType: "ollama"}, want: "openai"},
		{name: "anthropic default", cfg: Config{ProviderType: "anthropic", APIKey: "k"}, want: "anthropic"},
		{name: "anthropic-compatible", cfg: Config{ProviderType: "anthropic-compatible", BaseURL: "https://relay.example/v1"}, want: "anthropic"},
		{name: "declared messages protocol", cfg: Config{ProviderType: "openrouter", BaseURL: "https://relay.example", APIProtocol: "anthropic-messages"}, want: "anthropic"},
		{name: "declared chat protocol on google", cfg: Config{ProviderType: "google", BaseURL: "https://g.example/v1beta/openai", APIProtocol: "openai-chat"}, want: "openai"},
		{name: "compatible with base", cfg: Config{ProviderType: "deepseek", BaseURL: "https://api.deepseek.com"}, want: "openai"},
		{name: "responses protocol", cfg: Config{ProviderType: "openai", APIProtocol: "openai-responses", Model: "gpt-4o"}, want: "responses"},
		{name: "responses-compatible", cfg: Config{ProviderType: "openai-responses-compatible", BaseURL: "https://x"}, want: "responses"},
		{name: "openai gpt-5", cfg: Config{ProviderType: "openai", Model: "gpt-5-mini"}, want: "responses reasoning"},
		{name: "openai gpt-5 chat variant", cfg: Config{ProviderType: "openai", Model: "gpt-5-chat-latest"}, want: "responses"},
		{name: "openai o3", cfg: Config{ProviderType: "openai", Model: "o3"}, want: "responses reasoning"},
		{name: "openai codex", cfg: Config{ProviderType: "openai", Model: "gpt-5.1-codex-max"}, want: "responses reasoning"},
		{name: "openai gpt-4o", cfg: Config{ProviderType: "openai", Model: "gpt-4o"}, want: "openai"},
		{name: "openai gpt-5 declared chat", cfg: Config{ProviderType: "openai", Model: "gpt-5", APIProtocol: "openai-chat"}, want: "openai"},
		{name: "declared reasoning", cfg: Config{ProviderType: "openai-responses-compatible", BaseURL: "https://x", Model: "gpt-oss-120b", Reasoning: true}, want: "responses reasoning"},
		{name: "openai gpt-5 at another endpoint stays chat", cfg: Config{ProviderType: "openai", BaseURL: "https://proxy.example/v1", Model: "gpt-5"}, want: "openai"},
		{name: "gpt-5 elsewhere stays chat", cfg: Config{ProviderType: "openrouter", BaseURL: "https://openrouter.ai/api/v1", Model: "openai/gpt-5"}, want: "openai"},
		{name: "codex", cfg: Config{ProviderType: "openai-codex"}, want: `"openai-codex"`, wantErr: true},
		{name: "claude subscription even as messages", cfg: Config{ProviderType: "claude-subscription", APIProtocol: "anthropic-messages"}, want: `"claude-subscription"`, wantErr: true},
		{name: "copilot", cfg: Config{ProviderType: "github-copilot"}, want: `"github-copilot"`, wantErr: true},
		{name: "gemini-cli", cfg: Config{ProviderType: "gemini-cli"}, want: `"gemini-cli"`, wantErr: true},
		{name: "google", cfg: Config{ProviderType: "google", APIKey: "k"}, want: `"google"`, wantErr: true},
		{name: "cohere", cfg: Config{ProviderType: "cohere", APIKey: "k"}, want: `"cohere"`, wantErr: true},
		{name: "unknown protocol", cfg: Config{ProviderType: "openai", APIProtocol: "grpc"}, want: `unknown API protocol "grpc"`, wantErr: true},
		{name: "no base URL", cfg: Config{ProviderType: "deepseek", APIKey: "k"}, want: "connection has no base URL", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(tt.cfg)
			if tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("New = %T, %v; want an error containing %q", p, err, tt.want)
				}
				if tt.want != "connection has no base URL" && !errors.Is(err, ErrUnsupportedProvider) {
					t.Fatalf("error %v does not wrap ErrUnsupportedProvider", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got string
			p = p.(endpoint).Provider
			switch p.(type) {
			case *openAIChat:
				got = "openai"
			case *anthropicProvider:
				got = "anthropic"
			case *openAIResponses:
				got = "responses"
				if p.(*openAIResponses).reasoning {
					got += " reasoning"
				}
			}
			if got != tt.want {
				t.Fatalf("New = %T, want %s", p, tt.want)
			}
		})
	}
}

func TestNewUsesConfiguredEndpoint(t *testing.T) {
	srv := newWireServer(t, sse(openAITextStream, false))
	p, err := New(Config{ProviderType: "lm-studio", BaseURL: srv.URL + "/v1", HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Stream(context.Background(), Request{Model: "m"}, discard); err != nil {
		t.Fatal(err)
	}
	if c := srv.calls(); len(c) != 1 || c[0].Path != "/v1/chat/completions" || c[0].Header.Get("Authorization") != "" {
		t.Fatalf("requests %+v", c)
	}

	srv2 := newWireServer(t, sse(anthropicTextStream, false))
	p, err = New(Config{ProviderType: "anthropic", BaseURL: srv2.URL + "/v1", APIKey: "sk-ant", HTTPClient: srv2.Client()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Stream(context.Background(), Request{Model: "claude"}, discard); err != nil {
		t.Fatal(err)
	}
	if c := srv2.calls(); len(c) != 1 || c[0].Path != "/v1/messages" || c[0].Header.Get("x-api-key") != "sk-ant" {
		t.Fatalf("requests %+v", c)
	}
}
