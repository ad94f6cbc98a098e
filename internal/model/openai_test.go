package model

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// openAIToolStream is a recorded Chat Completions stream: reasoning, text,
// two parallel tool calls whose arguments arrive in interleaved fragments,
// the finish chunk, the usage chunk and [DONE].
var openAIToolStream = dataLines(
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"deepseek-reasoner","choices":[{"index":0,"delta":{"role":"assistant","content":null,"reasoning_content":"Let me "},"logprobs":null,"finish_reason":null}],"usage":null}`,
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"deepseek-reasoner","choices":[{"index":0,"delta":{"reasoning_content":"look."},"logprobs":null,"finish_reason":null}],"usage":null}`,
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"deepseek-reasoner","choices":[{"index":0,"delta":{"content":"Reading","reasoning_content":null},"logprobs":null,"finish_reason":null}],"usage":null}`,
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"deepseek-reasoner","choices":[{"index":0,"delta":{"content":" both."},"logprobs":null,"finish_reason":null}],"usage":null}`,
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"deepseek-reasoner","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"Read","arguments":""}}]},"logprobs":null,"finish_reason":null}],"usage":null}`,
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"deepseek-reasoner","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"Bash","arguments":"{\"comm"}}]},"logprobs":null,"finish_reason":null}],"usage":null}`,
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"deepseek-reasoner","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\":"}}]},"logprobs":null,"finish_reason":null}],"usage":null}`,
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"deepseek-reasoner","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"and\":\"ls -la\"}"}}]},"logprobs":null,"finish_reason":null}],"usage":null}`,
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"deepseek-reasoner","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"a.go\"}"}}]},"logprobs":null,"finish_reason":null}],"usage":null}`,
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"deepseek-reasoner","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}],"usage":null}`,
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"deepseek-reasoner","choices":[],"usage":{"prompt_tokens":120,"completion_tokens":33,"total_tokens":153,"prompt_tokens_details":{"cached_tokens":64},"completion_tokens_details":{"reasoning_tokens":7}}}`,
	`[DONE]`,
)

// openAITextStream is a plain answer in Ollama's style ("reasoning").
var openAITextStream = dataLines(
	`{"id":"chatcmpl-2","object":"chat.completion.chunk","created":1700000000,"model":"qwen3","choices":[{"index":0,"delta":{"role":"assistant","content":"","reasoning":"hmm"},"finish_reason":null}]}`,
	`{"id":"chatcmpl-2","object":"chat.completion.chunk","created":1700000000,"model":"qwen3","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi!"},"finish_reason":null}]}`,
	`{"id":"chatcmpl-2","object":"chat.completion.chunk","created":1700000000,"model":"qwen3","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":"stop"}]}`,
	`{"id":"chatcmpl-2","object":"chat.completion.chunk","created":1700000000,"model":"qwen3","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12}}`,
	`[DONE]`,
)

var sampleConversation = Request{
	Model:           "deepseek-reasoner",
	System:          "You are terse.",
	MaxOutputTokens: 1000,
	Messages: []Message{
		{Role: RoleUser, Text: "list files"},
		{Role: RoleAssistant, Text: "Running ls.", Thinking: "ls is best", ThinkingSignature: "sig-1",
			ToolCalls: []ToolCall{{ID: "call_1", Name: "Bash", Input: json.RawMessage(`{"command":"ls"}`)}, {ID: "call_2", Name: "Read", Input: json.RawMessage(`{"path":"go.mod"}`)}}},
		{Role: RoleTool, ToolCallID: "call_1", ToolName: "Bash", Text: "a.go\nb.go"},
		{Role: RoleTool, ToolCallID: "call_2", ToolName: "Read", Text: "no such file", IsError: true},
		{Role: RoleUser, Text: "now read a.go"},
	},
	Tools: []ToolSpec{{Name: "Bash", Description: "Run a command", Parameters: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}`)}},
}

func TestOpenAIStreamToolCalls(t *testing.T) {
	srv := newWireServer(t, sse(openAIToolStream, false))
	p := NewOpenAIChat(OpenAIConfig{BaseURL: srv.URL + "/v1", HTTPClient: srv.Client(), Headers: map[string]string{"X-Trace": "t1"}})
	var events []Event
	fin, err := p.Stream(context.Background(), sampleConversation, collect(&events))
	if err != nil {
		t.Fatal(err)
	}
	want := []Event{
		{Kind: EventThinking, Text: "Let me "},
		{Kind: EventThinking, Text: "look."},
		{Kind: EventText, Text: "Reading"},
		{Kind: EventText, Text: " both."},
		{Kind: EventToolCall, ToolCall: ToolCall{ID: "call_a", Name: "Read", Input: json.RawMessage(`{"path":"a.go"}`)}},
		{Kind: EventToolCall, ToolCall: ToolCall{ID: "call_b", Name: "Bash", Input: json.RawMessage(`{"command":"ls -la"}`)}},
	}
	wantFin := Finish{Reason: FinishToolCalls, RawReason: "tool_calls", Usage: &Usage{InputTokens: 120, OutputTokens: 33, CacheReadTokens: 64, ReasoningTokens: 7}}
	req := wantStep(t, srv, events, want, fin, wantFin)
	if req.Path != "/v1/chat/completions" {
		t.Errorf("path = %s", req.Path)
	}
	if h := req.Header.Get("Authorization"); h != "" {
		t.Errorf("Authorization = %q, want none for an empty key", h)
	}
	if h := req.Header.Get("X-Trace"); h != "t1" {
		t.Errorf("custom header = %q", h)
	}
	b := req.Body
	jsonEqual(t, "model", field(t, b, "model"), `"deepseek-reasoner"`)
	jsonEqual(t, "stream", field(t, b, "stream"), `true`)
	jsonEqual(t, "stream_options", field(t, b, "stream_options"), `{"include_usage":true}`)
	jsonEqual(t, "max_tokens", field(t, b, "max_tokens"), `1000`)
	jsonEqual(t, "messages", field(t, b, "messages"), `[
		{"role":"system","content":"You are terse."},
		{"role":"user","content":"list files"},
		{"role":"assistant","content":"Running ls.","tool_calls":[
			{"id":"call_1","type":"function","function":{"name":"Bash","arguments":"{\"command\":\"ls\"}"}},
			{"id":"call_2","type":"function","function":{"name":"Read","arguments":"{\"path\":\"go.mod\"}"}}]},
		{"role":"tool","tool_call_id":"call_1","content":"a.go\nb.go"},
		{"role":"tool","tool_call_id":"call_2","content":"no such file"},
		{"role":"user","content":"now read a.go"}]`)
	jsonEqual(t, "tools", field(t, b, "tools"), `[{"type":"function","function":{"name":"Bash","description":"Run a command",
		"parameters":{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}}}]`)
}

func TestOpenAIStreamTextWithKey(t *testing.T) {
	srv := newWireServer(t, sse(openAITextStream, false))
	p := NewOpenAIChat(OpenAIConfig{BaseURL: srv.URL + "/v1/", APIKey: "sk-test", HTTPClient: srv.Client()})
	var events []Event
	fin, err := p.Stream(context.Background(), Request{Model: "qwen3", Messages: []Message{{Role: RoleUser, Text: "hi"}}}, collect(&events))
	if err != nil {
		t.Fatal(err)
	}
	want := []Event{{Kind: EventThinking, Text: "hmm"}, {Kind: EventText, Text: "Hi!"}}
	if !reflect.DeepEqual(events, want) {
		t.Fatalf("events = %+v, want %+v", events, want)
	}
	if fin.Reason != FinishStop || fin.Usage == nil || fin.Usage.InputTokens != 10 || fin.Usage.OutputTokens != 2 {
		t.Fatalf("finish = %+v usage %+v", fin, fin.Usage)
	}
	req := srv.calls()[0]
	if got := req.Header.Get("Authorization"); got != "Bearer sk-test" {
		t.Errorf("Authorization = %q", got)
	}
	if req.Path != "/v1/chat/completions" {
		t.Errorf("path = %s", req.Path)
	}
	if strings.Contains(string(req.Body), `"tools"`) {
		t.Errorf("request without tools sent tools: %s", req.Body)
	}
}

func TestOpenAIStreamTruncated(t *testing.T) {
	// The connection ends without a finish reason: a network failure.
	srv := newWireServer(t, sse(openAITextStream[:2], false))
	p := NewOpenAIChat(OpenAIConfig{BaseURL: srv.URL, HTTPClient: srv.Client()})
	var events []Event
	_, err := p.Stream(context.Background(), Request{Model: "m"}, collect(&events))
	var f *Failure
	if !errors.As(err, &f) || f.Kind != FailureNetwork {
		t.Fatalf("err = %v, want a network failure", err)
	}
}

func TestOpenAIHTTPErrors(t *testing.T) {
	tests := []struct {
		name     string
		handlers []wireHandler
		jitter   float64
		waits    []time.Duration // retry delays to step through on the fake clock
		wantKind FailureKind     // "" = success
		retryWhy FailureKind     // the reason of the retry, on success
		wantReqs int
	}{
		{
			name:     "401",
			handlers: []wireHandler{httpError(401, nil, `{"error":{"message":"Incorrect API key provided: sk-abc123456789xyz.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`)},
			wantKind: FailureAuth, wantReqs: 1,
		},
		{
			name:     "402",
			handlers: []wireHandler{httpError(402, nil, `{"error":{"message":"Insufficient credits","code":402}}`)},
			wantKind: FailureProviderBilling, wantReqs: 1,
		},
		{
			name: "429 with Retry-After then success",
			handlers: []wireHandler{
				httpError(429, http.Header{"Retry-After": {"2"}}, `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`),
				sse(openAITextStream, false),
			},
			jitter: 0.9, waits: []time.Duration{2 * time.Second}, retryWhy: FailureRateLimit, wantReqs: 2,
		},
		{
			name: "500 then success",
			handlers: []wireHandler{
				httpError(500, nil, `{"error":{"message":"The server had an error while processing your request.","type":"server_error"}}`),
				sse(openAITextStream, false),
			},
			waits: []time.Duration{time.Second}, retryWhy: FailureProviderUnavailable, wantReqs: 2,
		},
		{
			name: "502 html then success",
			handlers: []wireHandler{
				func(w http.ResponseWriter, _ *http.Request, _ <-chan struct{}) {
					w.Header().Set("Content-Type", "text/html")
					w.WriteHeader(502)
					_, _ = w.Write([]byte("<html>Bad Gateway</html>"))
				},
				sse(openAITextStream, false),
			},
			waits: []time.Duration{time.Second}, retryWhy: FailureProviderUnavailable, wantReqs: 2,
		},
		{
			name:     "400 context length",
			handlers: []wireHandler{httpError(400, nil, `{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`)},
			wantKind: FailureContextOverflow, wantReqs: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newWireServer(t, tt.handlers...)
			clock := newFakeClock()
			p := NewOpenAIChat(OpenAIConfig{BaseURL: srv.URL + "/v1", APIKey: "sk-abc123456789xyz", HTTPClient: srv.Client()})
			var events []Event
			var rec retryRecorder
			res := make(chan stepResult, 1)
			go func() {
				fin, err := StreamStep(context.Background(), p, Request{Model: "m"},
					StepOptions{Clock: clock, OnRetry: rec.record, Jitter: func() float64 { return tt.jitter }}, collect(&events))
				res <- stepResult{fin, err}
			}()
			for _, d := range tt.waits {
				clock.waitTimer(t, d)
				clock.Advance(d - time.Millisecond)
				if n := len(srv.calls()); n != 1 {
					t.Fatalf("retried before the delay: %d requests", n)
				}
				clock.Advance(time.Millisecond)
			}
			r := waitResult(t, res)
			if n := len(srv.calls()); n != tt.wantReqs {
				t.Fatalf("%d requests, want %d", n, tt.wantReqs)
			}
			if tt.wantKind == "" {
				if r.err != nil || r.fin.Reason != FinishStop || len(events) != 2 {
					t.Fatalf("StreamStep = %+v, %v, events %+v; want success", r.fin, r.err, events)
				}
				if infos := rec.get(); len(infos) != 2 || infos[0].Delay != tt.waits[0] || infos[0].Reason != tt.retryWhy {
					t.Fatalf("retry notices %+v", infos)
				}
				return
			}
			var f *Failure
			if !errors.As(r.err, &f) || f.Kind != tt.wantKind {
				t.Fatalf("err = %v, want kind %s", r.err, tt.wantKind)
			}
			if strings.Contains(f.Message, "abc123456789xyz") {
				t.Fatalf("failure message leaks the key: %q", f.Message)
			}
		})
	}
}

func TestOpenAIWatchdogStall(t *testing.T) {
	srv := newWireServer(t, sse(openAITextStream[:2], true))
	clock := newFakeClock()
	p := NewOpenAIChat(OpenAIConfig{BaseURL: srv.URL, HTTPClient: srv.Client()})
	var events []Event
	res := make(chan stepResult, 1)
	streamed := outputs(2, collect(&events))
	go func() {
		fin, err := StreamStep(context.Background(), p, Request{Model: "m"}, StepOptions{Clock: clock}, streamed.emit)
		res <- stepResult{fin, err}
	}()
	streamed.wait(t)
	r := stallOut(t, clock, DefaultIdleTimeout, res)
	var f *Failure
	if !errors.As(r.err, &f) || f.Kind != FailureTimeout {
		t.Fatalf("err = %v, want a timeout failure", r.err)
	}
	if len(srv.calls()) != 1 || len(events) != 2 {
		t.Fatalf("%d requests, events %+v; want one request (output was emitted)", len(srv.calls()), events)
	}
}

func TestOpenAICancelMidStream(t *testing.T) {
	srv := newWireServer(t, sse(openAITextStream[:2], true))
	p := NewOpenAIChat(OpenAIConfig{BaseURL: srv.URL, HTTPClient: srv.Client()})
	ignore := goleak.IgnoreCurrent()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res := make(chan stepResult, 1)
	go func() {
		fin, err := StreamStep(ctx, p, Request{Model: "m"}, StepOptions{}, func(e Event) error {
			if e.Kind == EventText {
				cancel()
			}
			return nil
		})
		res <- stepResult{fin, err}
	}()
	r := waitResult(t, res)
	if !errors.Is(r.err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", r.err)
	}
	srv.CloseClientConnections()
	srv.Client().CloseIdleConnections()
	goleak.VerifyNone(t, ignore)
}
