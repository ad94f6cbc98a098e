package model

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"
)

// anthropicToolStream is a recorded Messages stream: a signed thinking
// block, a text block and a tool_use block with fragmented input.
var anthropicToolStream = namedEvents(
	"message_start", `{"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":50,"cache_creation_input_tokens":20,"cache_read_input_tokens":30,"output_tokens":1}}}`,
	"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`,
	"ping", `{"type":"ping"}`,
	"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"The user wants "}}`,
	"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"a listing."}}`,
	"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCgIYAhIM"}}`,
	"content_block_stop", `{"type":"content_block_stop","index":0}`,
	"content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`,
	"content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Listing"}}`,
	"content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":" now."}}`,
	"content_block_stop", `{"type":"content_block_stop","index":1}`,
	"content_block_start", `{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_01","name":"Bash","input":{}}}`,
	"content_block_delta", `{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":""}}`,
	"content_block_delta", `{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"command\": \"l"}}`,
	"content_block_delta", `{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"s -la\"}"}}`,
	"content_block_stop", `{"type":"content_block_stop","index":2}`,
	"message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}`,
	"message_stop", `{"type":"message_stop"}`,
)

var anthropicTextStream = namedEvents(
	"message_start", `{"type":"message_start","message":{"id":"msg_02","type":"message","role":"assistant","model":"claude","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":7,"output_tokens":1}}}`,
	"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
	"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}`,
	"content_block_stop", `{"type":"content_block_stop","index":0}`,
	"message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":3}}`,
	"message_stop", `{"type":"message_stop"}`,
)

const anthropicOverloaded = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"

func TestAnthropicStream(t *testing.T) {
	srv := newWireServer(t, sse(anthropicToolStream, false))
	p := NewAnthropic(AnthropicConfig{BaseURL: srv.URL + "/v1", APIKey: "sk-ant-test", HTTPClient: srv.Client()})
	var events []Event
	fin, err := p.Stream(context.Background(), sampleConversation, collect(&events))
	if err != nil {
		t.Fatal(err)
	}
	want := []Event{
		{Kind: EventThinking, Text: "The user wants "},
		{Kind: EventThinking, Text: "a listing."},
		{Kind: EventThinkingSignature, Text: "EqQBCgIYAhIM"},
		{Kind: EventText, Text: "Listing"},
		{Kind: EventText, Text: " now."},
		{Kind: EventToolCall, ToolCall: ToolCall{ID: "toolu_01", Name: "Bash", Input: json.RawMessage(`{"command": "ls -la"}`)}},
	}
	wantFin := Finish{Reason: FinishToolCalls, RawReason: "tool_use", Usage: &Usage{InputTokens: 100, OutputTokens: 89, CacheReadTokens: 30}}
	req := wantStep(t, srv, events, want, fin, wantFin)
	if req.Path != "/v1/messages" {
		t.Errorf("path = %s, want /v1/messages (the configured /v1 is not doubled)", req.Path)
	}
	if got := req.Header.Get("x-api-key"); got != "sk-ant-test" {
		t.Errorf("x-api-key = %q", got)
	}
	if got := req.Header.Get("anthropic-beta"); got != anthropicBeta {
		t.Errorf("anthropic-beta = %q", got)
	}
	b := req.Body
	jsonEqual(t, "model", field(t, b, "model"), `"deepseek-reasoner"`)
	jsonEqual(t, "stream", field(t, b, "stream"), `true`)
	jsonEqual(t, "max_tokens", field(t, b, "max_tokens"), `1000`)
	jsonEqual(t, "system", field(t, b, "system"), `[{"type":"text","text":"You are terse."}]`)
	jsonEqual(t, "messages", field(t, b, "messages"), `[
		{"role":"user","content":[{"type":"text","text":"list files"}]},
		{"role":"assistant","content":[
			{"type":"thinking","thinking":"ls is best","signature":"sig-1"},
			{"type":"text","text":"Running ls."},
			{"type":"tool_use","id":"call_1","name":"Bash","input":{"command":"ls"}},
			{"type":"tool_use","id":"call_2","name":"Read","input":{"path":"go.mod"}}]},
		{"role":"user","content":[
			{"type":"tool_result","tool_use_id":"call_1","content":[{"type":"text","text":"a.go\nb.go"}]},
			{"type":"tool_result","tool_use_id":"call_2","content":[{"type":"text","text":"no such file"}],"is_error":true},
			{"type":"text","text":"now read a.go"}]}]`)
	jsonEqual(t, "tools", field(t, b, "tools"), `[{"name":"Bash","description":"Run a command",
		"input_schema":{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}}]`)
}

func TestAnthropicDefaults(t *testing.T) {
	srv := newWireServer(t, sse(anthropicTextStream, false))
	p := NewAnthropic(AnthropicConfig{BaseURL: srv.URL, HTTPClient: srv.Client(), Headers: map[string]string{"anthropic-beta": "custom"}})
	var events []Event
	fin, err := p.Stream(context.Background(), Request{Model: "claude", Messages: []Message{{Role: RoleUser, Text: "hi"}}}, collect(&events))
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 1 || events[0].Text != "Hi" || fin.Reason != FinishStop || fin.RawReason != "end_turn" ||
		fin.Usage == nil || *fin.Usage != (Usage{InputTokens: 7, OutputTokens: 3}) {
		t.Fatalf("events %+v finish %+v usage %+v", events, fin, fin.Usage)
	}
	req := srv.calls()[0]
	if req.Path != "/v1/messages" {
		t.Errorf("path = %s", req.Path)
	}
	if req.Header.Get("x-api-key") != "" || req.Header.Get("Authorization") != "" {
		t.Errorf("credentials sent without a key: %v", req.Header)
	}
	if got := req.Header.Get("anthropic-beta"); got != "custom" {
		t.Errorf("configured header did not override: %q", got)
	}
	jsonEqual(t, "max_tokens", field(t, req.Body, "max_tokens"), `8192`)
}

func TestAnthropicBaseURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://api.anthropic.com":           "https://api.anthropic.com/",
		"https://api.anthropic.com/":          "https://api.anthropic.com/",
		"https://api.anthropic.com/v1":        "https://api.anthropic.com/",
		"https://relay.example/anthropic/v1/": "https://relay.example/anthropic/",
		"https://relay.example/v1beta":        "https://relay.example/v1beta/",
	} {
		if got := AnthropicBaseURL(in); got != want {
			t.Errorf("AnthropicBaseURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestAnthropicErrorEventAfterOutput(t *testing.T) {
	events := append(append([]string(nil), anthropicTextStream[:3]...), anthropicOverloaded)
	srv := newWireServer(t, sse(events, false), sse(anthropicTextStream, false))
	p := NewAnthropic(AnthropicConfig{BaseURL: srv.URL, HTTPClient: srv.Client()})
	var got []Event
	_, err := StreamStep(context.Background(), p, Request{Model: "claude"}, StepOptions{Clock: newFakeClock()}, collect(&got))
	var f *Failure
	if !errors.As(err, &f) || f.Kind != FailureProviderUnavailable || f.Code != "overloaded_error" || !f.Retryable() {
		t.Fatalf("err = %#v, want a retryable provider_unavailable failure", err)
	}
	if n := len(srv.calls()); n != 1 || len(got) != 1 {
		t.Fatalf("%d requests, events %+v: a failure after output must not be retried", n, got)
	}
}

func TestAnthropicErrorEventBeforeOutputIsRetried(t *testing.T) {
	events := append(append([]string(nil), anthropicTextStream[:1]...), anthropicOverloaded)
	srv := newWireServer(t, sse(events, false), sse(anthropicTextStream, false))
	p := NewAnthropic(AnthropicConfig{BaseURL: srv.URL, HTTPClient: srv.Client()})
	clock := newFakeClock()
	var got []Event
	res := make(chan stepResult, 1)
	go func() {
		fin, err := StreamStep(context.Background(), p, Request{Model: "claude"}, StepOptions{Clock: clock, Jitter: func() float64 { return 0 }}, collect(&got))
		res <- stepResult{fin, err}
	}()
	clock.waitTimer(t, time.Second)
	clock.Advance(time.Second)
	r := waitResult(t, res)
	if r.err != nil || len(srv.calls()) != 2 || len(got) != 1 {
		t.Fatalf("err = %v, %d requests, events %+v", r.err, len(srv.calls()), got)
	}
}

func TestAnthropicHTTPError(t *testing.T) {
	srv := newWireServer(t, httpError(529, nil, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`))
	p := NewAnthropic(AnthropicConfig{BaseURL: srv.URL, HTTPClient: srv.Client()})
	_, err := p.Stream(context.Background(), Request{Model: "claude"}, discard)
	var f *Failure
	if !errors.As(err, &f) || f.Kind != FailureProviderUnavailable || f.Status != 529 || f.Message != "Overloaded" {
		t.Fatalf("err = %#v", err)
	}
}

func TestAnthropicWatchdogStall(t *testing.T) {
	srv := newWireServer(t, sse(anthropicTextStream[:3], true))
	clock := newFakeClock()
	p := NewAnthropic(AnthropicConfig{BaseURL: srv.URL, HTTPClient: srv.Client()})
	res := make(chan stepResult, 1)
	streamed := outputs(1, discard)
	go func() {
		fin, err := StreamStep(context.Background(), p, Request{Model: "claude"}, StepOptions{Clock: clock, IdleTimeout: 5 * time.Second}, streamed.emit)
		res <- stepResult{fin, err}
	}()
	streamed.wait(t)
	r := stallOut(t, clock, 5*time.Second, res)
	var f *Failure
	if !errors.As(r.err, &f) || f.Kind != FailureTimeout {
		t.Fatalf("err = %v, want a timeout failure", r.err)
	}
	if len(srv.calls()) != 1 {
		t.Fatalf("%d requests, want 1", len(srv.calls()))
	}
}
