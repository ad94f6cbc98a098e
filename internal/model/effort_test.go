package model

import (
	"context"
	"encoding/json"
	"testing"
)

// sentBody streams req through p against srv and returns the JSON body of
// the one request it sent.
func sentBody(t *testing.T, srv *wireServer, p Provider, req Request) map[string]json.RawMessage {
	t.Helper()
	var events []Event
	if _, err := p.Stream(context.Background(), req, collect(&events)); err != nil {
		t.Fatal(err)
	}
	calls := srv.calls()
	if len(calls) == 0 {
		t.Fatal("no request sent")
	}
	var body map[string]json.RawMessage
	if err := json.Unmarshal(calls[len(calls)-1].Body, &body); err != nil {
		t.Fatal(err)
	}
	return body
}

func TestParseEffort(t *testing.T) {
	for _, s := range []string{"", "off", "low", "medium", "high"} {
		if e, err := ParseEffort(s); err != nil || string(e) != s {
			t.Errorf("ParseEffort(%q) = %q, %v", s, e, err)
		}
	}
	for _, s := range []string{"max", "HIGH", " low", "minimal"} {
		if _, err := ParseEffort(s); err == nil {
			t.Errorf("ParseEffort(%q) accepted", s)
		}
	}
}

func TestAnthropicEffortIsExtendedThinking(t *testing.T) {
	cases := []struct {
		effort            Effort
		budget, maxTokens int64 // budget 0: no thinking field
	}{
		{EffortDefault, 0, DefaultAnthropicMaxTokens},
		{EffortOff, 0, DefaultAnthropicMaxTokens},
		{EffortLow, 1024, 1024 + DefaultAnthropicMaxTokens},
		{EffortMedium, 4096, 4096 + DefaultAnthropicMaxTokens},
		{EffortHigh, 16384, 16384 + DefaultAnthropicMaxTokens},
	}
	for _, c := range cases {
		t.Run(string(c.effort)+"_", func(t *testing.T) {
			srv := newWireServer(t, sse(anthropicTextStream, false))
			p := NewAnthropic(AnthropicConfig{BaseURL: srv.URL, HTTPClient: srv.Client()})
			body := sentBody(t, srv, p, Request{Model: "claude-sonnet-4-5", Effort: c.effort,
				Messages: []Message{{Role: RoleUser, Text: "hi"}}})
			jsonEqual(t, "max_tokens", body["max_tokens"], jsonNumber(c.maxTokens))
			th, ok := body["thinking"]
			if c.budget == 0 {
				if ok {
					t.Fatalf("thinking sent for effort %q: %s", c.effort, th)
				}
				return
			}
			jsonEqual(t, "thinking", th, `{"type":"enabled","budget_tokens":`+jsonNumber(c.budget)+`}`)
		})
	}
}

func TestAnthropicEffortKeepsALargerMaxTokens(t *testing.T) {
	srv := newWireServer(t, sse(anthropicTextStream, false))
	p := NewAnthropic(AnthropicConfig{BaseURL: srv.URL, HTTPClient: srv.Client()})
	body := sentBody(t, srv, p, Request{Model: "claude", Effort: EffortLow, MaxOutputTokens: 50000,
		Messages: []Message{{Role: RoleUser, Text: "hi"}}})
	jsonEqual(t, "max_tokens", body["max_tokens"], "50000")
	body = sentBody(t, srv, p, Request{Model: "claude", Effort: EffortHigh, MaxOutputTokens: 2000,
		Messages: []Message{{Role: RoleUser, Text: "hi"}}})
	jsonEqual(t, "max_tokens", body["max_tokens"], jsonNumber(16384+DefaultAnthropicMaxTokens))
}

func TestOpenAIChatEffortOnlyForReasoningModels(t *testing.T) {
	cases := []struct {
		model  string
		effort Effort
		want   string // "" = no reasoning_effort
	}{
		{"o4-mini", EffortHigh, `"high"`},
		{"o3", EffortLow, `"low"`},
		{"gpt-5", EffortMedium, `"medium"`},
		{"o4-mini", EffortOff, ""},
		{"o4-mini", EffortDefault, ""},
		{"gpt-4o", EffortHigh, ""},
		{"qwen3", EffortHigh, ""},
	}
	for _, c := range cases {
		t.Run(c.model+"_"+string(c.effort), func(t *testing.T) {
			srv := newWireServer(t, sse(openAITextStream, false))
			p, err := New(Config{ProviderType: "openai-compatible", BaseURL: srv.URL, Model: c.model, HTTPClient: srv.Client()})
			if err != nil {
				t.Fatal(err)
			}
			body := sentBody(t, srv, p, Request{Model: c.model, Effort: c.effort, Messages: []Message{{Role: RoleUser, Text: "hi"}}})
			got, ok := body["reasoning_effort"]
			switch {
			case c.want == "" && ok:
				t.Fatalf("reasoning_effort = %s, want none", got)
			case c.want != "":
				jsonEqual(t, "reasoning_effort", got, c.want)
			}
		})
	}
}

func TestOpenAIChatEffortForADeclaredReasoningModel(t *testing.T) {
	srv := newWireServer(t, sse(openAITextStream, false))
	p, err := New(Config{ProviderType: "ollama", BaseURL: srv.URL, Model: "qwen3", Reasoning: true, HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	body := sentBody(t, srv, p, Request{Model: "qwen3", Effort: EffortHigh, Messages: []Message{{Role: RoleUser, Text: "hi"}}})
	jsonEqual(t, "reasoning_effort", body["reasoning_effort"], `"high"`)
}

func TestResponsesEffortIsReasoningEffort(t *testing.T) {
	srv := newWireServer(t, sse(responsesText(responsesCompleted), false))
	p := NewOpenAIResponses(OpenAIConfig{BaseURL: srv.URL, HTTPClient: srv.Client()}, true)
	body := sentBody(t, srv, p, Request{Model: "gpt-5", Effort: EffortMedium, Messages: []Message{{Role: RoleUser, Text: "hi"}}})
	jsonEqual(t, "reasoning", body["reasoning"], `{"effort":"medium","summary":"auto"}`)

	srv = newWireServer(t, sse(responsesText(responsesCompleted), false))
	p = NewOpenAIResponses(OpenAIConfig{BaseURL: srv.URL, HTTPClient: srv.Client()}, false)
	body = sentBody(t, srv, p, Request{Model: "gpt-4.1", Effort: EffortHigh, Messages: []Message{{Role: RoleUser, Text: "hi"}}})
	if r, ok := body["reasoning"]; ok {
		t.Fatalf("reasoning sent to a model that does not reason: %s", r)
	}
}

func jsonNumber(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}
