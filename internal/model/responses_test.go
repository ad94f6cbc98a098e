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
)

// responsesToolStream is a recorded Responses API stream: a reasoning item
// with two summary parts, a message, and two function calls whose
// argument deltas interleave, then response.completed with usage.
var responsesToolStream = namedEvents(
	"response.created", `{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","created_at":1700000000,"status":"in_progress","model":"gpt-5-mini","output":[],"usage":null,"error":null,"incomplete_details":null}}`,
	"response.in_progress", `{"type":"response.in_progress","sequence_number":1,"response":{"id":"resp_1","object":"response","created_at":1700000000,"status":"in_progress","model":"gpt-5-mini","output":[]}}`,
	"response.output_item.added", `{"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[]}}`,
	"response.reasoning_summary_part.added", `{"type":"response.reasoning_summary_part.added","sequence_number":3,"item_id":"rs_1","output_index":0,"summary_index":0,"part":{"type":"summary_text","text":""}}`,
	"response.reasoning_summary_text.delta", `{"type":"response.reasoning_summary_text.delta","sequence_number":4,"item_id":"rs_1","output_index":0,"summary_index":0,"delta":"**Listing** files."}`,
	"response.reasoning_summary_part.added", `{"type":"response.reasoning_summary_part.added","sequence_number":5,"item_id":"rs_1","output_index":0,"summary_index":1,"part":{"type":"summary_text","text":""}}`,
	"response.reasoning_summary_text.delta", `{"type":"response.reasoning_summary_text.delta","sequence_number":6,"item_id":"rs_1","output_index":0,"summary_index":1,"delta":"Then reading."}`,
	"response.output_item.done", `{"type":"response.output_item.done","sequence_number":7,"output_index":0,"item":{"id":"rs_1","type":"reasoning","encrypted_content":"gAAAAB-opaque","summary":[{"type":"summary_text","text":"**Listing** files."},{"type":"summary_text","text":"Then reading."}]}}`,
	"response.output_item.added", `{"type":"response.output_item.added","sequence_number":8,"output_index":1,"item":{"id":"msg_1","type":"message","status":"in_progress","content":[],"role":"assistant"}}`,
	"response.content_part.added", `{"type":"response.content_part.added","sequence_number":9,"item_id":"msg_1","output_index":1,"content_index":0,"part":{"type":"output_text","annotations":[],"text":""}}`,
	"response.output_text.delta", `{"type":"response.output_text.delta","sequence_number":10,"item_id":"msg_1","output_index":1,"content_index":0,"delta":"Reading","logprobs":[]}`,
	"response.output_text.delta", `{"type":"response.output_text.delta","sequence_number":11,"item_id":"msg_1","output_index":1,"content_index":0,"delta":" both.","logprobs":[]}`,
	"response.output_text.done", `{"type":"response.output_text.done","sequence_number":12,"item_id":"msg_1","output_index":1,"content_index":0,"text":"Reading both.","logprobs":[]}`,
	"response.output_item.done", `{"type":"response.output_item.done","sequence_number":13,"output_index":1,"item":{"id":"msg_1","type":"message","status":"completed","content":[{"type":"output_text","annotations":[],"text":"Reading both."}],"role":"assistant"}}`,
	"response.output_item.added", `{"type":"response.output_item.added","sequence_number":14,"output_index":2,"item":{"id":"fc_1","type":"function_call","status":"in_progress","arguments":"","call_id":"call_a","name":"Read"}}`,
	"response.function_call_arguments.delta", `{"type":"response.function_call_arguments.delta","sequence_number":15,"item_id":"fc_1","output_index":2,"delta":"{\"path\":"}`,
	"response.output_item.added", `{"type":"response.output_item.added","sequence_number":16,"output_index":3,"item":{"id":"fc_2","type":"function_call","status":"in_progress","arguments":"","call_id":"call_b","name":"Bash"}}`,
	"response.function_call_arguments.delta", `{"type":"response.function_call_arguments.delta","sequence_number":17,"item_id":"fc_2","output_index":3,"delta":"{\"command\":\"ls -la\"}"}`,
	"response.function_call_arguments.delta", `{"type":"response.function_call_arguments.delta","sequence_number":18,"item_id":"fc_1","output_index":2,"delta":"\"a.go\"}"}`,
	"response.function_call_arguments.done", `{"type":"response.function_call_arguments.done","sequence_number":19,"item_id":"fc_1","output_index":2,"arguments":"{\"path\":\"a.go\"}"}`,
	"response.output_item.done", `{"type":"response.output_item.done","sequence_number":20,"output_index":2,"item":{"id":"fc_1","type":"function_call","status":"completed","arguments":"{\"path\":\"a.go\"}","call_id":"call_a","name":"Read"}}`,
	"response.function_call_arguments.done", `{"type":"response.function_call_arguments.done","sequence_number":21,"item_id":"fc_2","output_index":3,"arguments":"{\"command\":\"ls -la\"}"}`,
	"response.output_item.done", `{"type":"response.output_item.done","sequence_number":22,"output_index":3,"item":{"id":"fc_2","type":"function_call","status":"completed","arguments":"{\"command\":\"ls -la\"}","call_id":"call_b","name":"Bash"}}`,
	"response.completed", `{"type":"response.completed","sequence_number":23,"response":{"id":"resp_1","object":"response","created_at":1700000000,"status":"completed","model":"gpt-5-mini","output":[],"error":null,"incomplete_details":null,"usage":{"input_tokens":120,"input_tokens_details":{"cached_tokens":64},"output_tokens":33,"output_tokens_details":{"reasoning_tokens":7},"total_tokens":153}}}`,
)

// responsesText is a plain answer from a Responses relay.
func responsesText(final string) []string {
	return namedEvents(
		"response.created", `{"type":"response.created","sequence_number":0,"response":{"id":"resp_2","object":"response","status":"in_progress","model":"m","output":[]}}`,
		"response.output_text.delta", `{"type":"response.output_text.delta","sequence_number":1,"item_id":"msg_2","output_index":0,"content_index":0,"delta":"Hi"}`,
		"response.output_text.delta", `{"type":"response.output_text.delta","sequence_number":2,"item_id":"msg_2","output_index":0,"content_index":0,"delta":"!"}`,
		final[:strings.IndexByte(final, ' ')], final[strings.IndexByte(final, ' ')+1:],
	)
}

const (
	responsesCompleted  = `response.completed {"type":"response.completed","sequence_number":3,"response":{"id":"resp_2","object":"response","status":"completed","model":"m","output":[],"usage":{"input_tokens":10,"output_tokens":2,"total_tokens":12,"input_tokens_details":{"cached_tokens":0},"output_tokens_details":{"reasoning_tokens":0}}}}`
	responsesIncomplete = `response.incomplete {"type":"response.incomplete","sequence_number":3,"response":{"id":"resp_2","object":"response","status":"incomplete","model":"m","output":[],"incomplete_details":{"reason":"max_output_tokens"}}}`
	responsesFailed     = `response.failed {"type":"response.failed","sequence_number":3,"response":{"id":"resp_2","object":"response","status":"failed","model":"m","output":[],"error":{"code":"server_error","message":"The server had an error processing your request."}}}`
	responsesErrorEvent = `error {"type":"error","sequence_number":3,"code":"rate_limit_exceeded","message":"Rate limit reached for gpt-5 on tokens per min. Please try again in 2s.","param":null}`
)

func TestResponsesStreamToolCalls(t *testing.T) {
	srv := newWireServer(t, sse(responsesToolStream, false))
	p := NewOpenAIResponses(OpenAIConfig{BaseURL: srv.URL + "/v1", APIKey: "sk-test", HTTPClient: srv.Client()}, true)
	var events []Event
	fin, err := p.Stream(context.Background(), sampleConversation, collect(&events))
	if err != nil {
		t.Fatal(err)
	}
	want := []Event{
		{Kind: EventThinking, Text: "**Listing** files."},
		{Kind: EventThinking, Text: "\n\n"},
		{Kind: EventThinking, Text: "Then reading."},
		{Kind: EventText, Text: "Reading"},
		{Kind: EventText, Text: " both."},
		{Kind: EventThinkingSignature, Text: `openai-responses:{"endpoint":"` + srv.URL + `/v1","model":"deepseek-reasoner","items":[{"id":"rs_1","encrypted_content":"gAAAAB-opaque"}]}`},
		{Kind: EventToolCall, ToolCall: ToolCall{ID: "call_a", Name: "Read", Input: json.RawMessage(`{"path":"a.go"}`)}},
		{Kind: EventToolCall, ToolCall: ToolCall{ID: "call_b", Name: "Bash", Input: json.RawMessage(`{"command":"ls -la"}`)}},
	}
	wantFin := Finish{Reason: FinishToolCalls, RawReason: "completed", Usage: &Usage{InputTokens: 120, OutputTokens: 33, CacheReadTokens: 64, ReasoningTokens: 7}}
	req := wantStep(t, srv, events, want, fin, wantFin)
	if req.Path != "/v1/responses" || req.Header.Get("Authorization") != "Bearer sk-test" {
		t.Errorf("path %s, Authorization %q", req.Path, req.Header.Get("Authorization"))
	}
	b := req.Body
	jsonEqual(t, "model", field(t, b, "model"), `"deepseek-reasoner"`)
	jsonEqual(t, "stream", field(t, b, "stream"), `true`)
	jsonEqual(t, "store", field(t, b, "store"), `false`)
	jsonEqual(t, "instructions", field(t, b, "instructions"), `"You are terse."`)
	jsonEqual(t, "max_output_tokens", field(t, b, "max_output_tokens"), `1000`)
	jsonEqual(t, "reasoning", field(t, b, "reasoning"), `{"summary":"auto"}`)
	jsonEqual(t, "include", field(t, b, "include"), `["reasoning.encrypted_content"]`)
	jsonEqual(t, "input", field(t, b, "input"), `[
		{"role":"user","content":"list files"},
		{"role":"assistant","content":"Running ls."},
		{"type":"function_call","call_id":"call_1","name":"Bash","arguments":"{\"command\":\"ls\"}"},
		{"type":"function_call","call_id":"call_2","name":"Read","arguments":"{\"path\":\"go.mod\"}"},
		{"type":"function_call_output","call_id":"call_1","output":"a.go\nb.go"},
		{"type":"function_call_output","call_id":"call_2","output":"no such file"},
		{"role":"user","content":"now read a.go"}]`)
	jsonEqual(t, "tools", field(t, b, "tools"), `[{"type":"function","name":"Bash","description":"Run a command","strict":false,
		"parameters":{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}}]`)
}

func TestResponsesStreamEndings(t *testing.T) {
	tests := []struct {
		name     string
		final    string
		wantFin  Finish
		wantKind FailureKind
		status   int
	}{
		{name: "completed", final: responsesCompleted,
			wantFin: Finish{Reason: FinishStop, RawReason: "completed", Usage: &Usage{InputTokens: 10, OutputTokens: 2}}},
		{name: "incomplete", final: responsesIncomplete, wantFin: Finish{Reason: FinishLength, RawReason: "max_output_tokens"}},
		{name: "failed", final: responsesFailed, wantKind: FailureProviderUnavailable, status: 500},
		{name: "error event", final: responsesErrorEvent, wantKind: FailureRateLimit, status: 429},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newWireServer(t, sse(responsesText(tt.final), false))
			p := NewOpenAIResponses(OpenAIConfig{BaseURL: srv.URL, HTTPClient: srv.Client()}, false)
			var events []Event
			fin, err := p.Stream(context.Background(), Request{Model: "m", Messages: []Message{{Role: RoleUser, Text: "hi"}}}, collect(&events))
			if want := []Event{{Kind: EventText, Text: "Hi"}, {Kind: EventText, Text: "!"}}; !reflect.DeepEqual(events, want) {
				t.Fatalf("events = %+v", events)
			}
			body := string(srv.calls()[0].Body)
			if strings.Contains(body, `"reasoning"`) || strings.Contains(body, `"include"`) || strings.Contains(body, `"tools"`) || strings.Contains(body, `"instructions"`) {
				t.Fatalf("request sent what it was not given: %s", body)
			}
			if tt.wantKind == "" {
				if err != nil || !reflect.DeepEqual(fin, tt.wantFin) {
					t.Fatalf("Stream = %+v (usage %+v), %v; want %+v", fin, fin.Usage, err, tt.wantFin)
				}
				return
			}
			var f *Failure
			if !errors.As(err, &f) || f.Kind != tt.wantKind || f.Status != tt.status || f.Message == "" {
				t.Fatalf("err = %#v, want kind %s status %d", err, tt.wantKind, tt.status)
			}
		})
	}
}

func TestResponsesStreamTruncated(t *testing.T) {
	srv := newWireServer(t, sse(responsesToolStream[:12], false))
	p := NewOpenAIResponses(OpenAIConfig{BaseURL: srv.URL, HTTPClient: srv.Client()}, false)
	var events []Event
	_, err := p.Stream(context.Background(), Request{Model: "m"}, collect(&events))
	var f *Failure
	if !errors.As(err, &f) || f.Kind != FailureNetwork {
		t.Fatalf("err = %v, want a network failure", err)
	}
	for _, e := range events {
		if e.Kind == EventToolCall {
			t.Fatalf("a truncated stream emitted a tool call: %+v", e)
		}
	}
}

// An error event before any output is retried by StreamStep after the
// rate limit's backoff; an HTTP 401 is not.
func TestResponsesFailuresThroughStreamStep(t *testing.T) {
	srv := newWireServer(t,
		sse(namedEvents("error", `{"type":"error","sequence_number":0,"code":"rate_limit_exceeded","message":"Rate limit reached","param":null}`), false),
		sse(responsesText(responsesCompleted), false))
	clock := newFakeClock()
	p := NewOpenAIResponses(OpenAIConfig{BaseURL: srv.URL, HTTPClient: srv.Client()}, false)
	var events []Event
	var rec retryRecorder
	res := make(chan stepResult, 1)
	go func() {
		fin, err := StreamStep(context.Background(), p, Request{Model: "m"},
			StepOptions{Clock: clock, OnRetry: rec.record, Jitter: func() float64 { return 0 }}, collect(&events))
		res <- stepResult{fin, err}
	}()
	clock.waitTimer(t, time.Second)
	clock.Advance(time.Second)
	r := waitResult(t, res)
	if r.err != nil || r.fin.Reason != FinishStop || len(events) != 2 || len(srv.calls()) != 2 {
		t.Fatalf("StreamStep = %+v, %v; events %+v; %d requests", r.fin, r.err, events, len(srv.calls()))
	}
	if infos := rec.get(); len(infos) == 0 || infos[0].Reason != FailureRateLimit {
		t.Fatalf("retry notices %+v", infos)
	}

	srv401 := newWireServer(t, httpError(http.StatusUnauthorized, nil, `{"error":{"message":"Incorrect API key provided: sk-abc123456789xyz.","type":"invalid_request_error","code":"invalid_api_key"}}`))
	p = NewOpenAIResponses(OpenAIConfig{BaseURL: srv401.URL, APIKey: "sk-abc123456789xyz", HTTPClient: srv401.Client()}, false)
	_, err := StreamStep(context.Background(), p, Request{Model: "m"}, StepOptions{Clock: newFakeClock()}, discard)
	var f *Failure
	if !errors.As(err, &f) || f.Kind != FailureAuth || len(srv401.calls()) != 1 || strings.Contains(f.Message, "abc123456789xyz") {
		t.Fatalf("401: %v after %d requests", err, len(srv401.calls()))
	}
}

// An organization that may not get reasoning summaries is refused 400 for
// asking: the step is sent again at once without them, and the next step
// to that endpoint and model does not ask.
func TestResponsesSummaryRefusalFallsBack(t *testing.T) {
	refusal := httpError(http.StatusBadRequest, nil, `{"error":{"message":"Your organization must be verified to generate reasoning summaries. Please go to: https://platform.openai.com/settings/organization/general and click on Verify Organization.","type":"invalid_request_error","param":"reasoning.summary","code":"unsupported_value"}}`)
	srv := newWireServer(t, refusal, sse(responsesText(responsesCompleted), false))
	p := NewOpenAIResponses(OpenAIConfig{BaseURL: srv.URL, HTTPClient: srv.Client()}, true)
	req := Request{Model: "o3-refusal-test", Messages: []Message{{Role: RoleUser, Text: "hi"}}}
	for step := range 2 {
		var events []Event
		fin, err := p.Stream(context.Background(), req, collect(&events))
		if err != nil || fin.Reason != FinishStop || len(events) != 2 {
			t.Fatalf("step %d: %+v, %v, events %+v", step, fin, err, events)
		}
	}
	calls := srv.calls()
	if len(calls) != 3 {
		t.Fatalf("%d requests, want 3 (refused, resent, next step)", len(calls))
	}
	for i, want := range []bool{true, false, false} {
		if got := strings.Contains(string(calls[i].Body), `"summary"`); got != want {
			t.Fatalf("request %d asks for summaries: %v, want %v", i, got, want)
		}
	}

	// Any other 400 is the step's failure.
	other := newWireServer(t, httpError(http.StatusBadRequest, nil, `{"error":{"message":"Invalid value for 'input'.","type":"invalid_request_error"}}`))
	p = NewOpenAIResponses(OpenAIConfig{BaseURL: other.URL, HTTPClient: other.Client()}, true)
	if _, err := p.Stream(context.Background(), req, discard); err == nil || len(other.calls()) != 1 {
		t.Fatalf("other 400: %v after %d requests", err, len(other.calls()))
	}
}

// A reasoning model gets its earlier reasoning back: the encrypted
// reasoning items of a step's signature go before that step's message,
// with its thinking as the summary, when they came from the same endpoint
// and model. A model that does not reason, and the Anthropic provider,
// leave such a signature out.
func TestResponsesReasoningIsGivenBack(t *testing.T) {
	signature := func(endpoint, model string) string {
		return `openai-responses:{"endpoint":"` + endpoint + `","model":"` + model +
			`","items":[{"id":"rs_1","encrypted_content":"enc-1"},{"id":"rs_2","encrypted_content":""},{"id":"rs_3","encrypted_content":"enc-3"}]}`
	}
	conversation := func(endpoint string) Request {
		return Request{Model: "gpt-5", Messages: []Message{
			{Role: RoleUser, Text: "go"},
			{Role: RoleAssistant, Thinking: "Plan the read.", ThinkingSignature: signature(endpoint, "gpt-5"),
				ToolCalls: []ToolCall{{ID: "call_1", Name: "Read", Input: json.RawMessage(`{"path":"a"}`)}}},
			{Role: RoleTool, ToolCallID: "call_1", ToolName: "Read", Text: "A"},
			{Role: RoleAssistant, Text: "Another model's.", Thinking: "x", ThinkingSignature: signature(endpoint, "o3")},
			{Role: RoleAssistant, Text: "Signed elsewhere.", Thinking: "hmm", ThinkingSignature: "anthropic-sig"},
		}}
	}
	const without = `[
		{"role":"user","content":"go"},
		{"type":"function_call","call_id":"call_1","name":"Read","arguments":"{\"path\":\"a\"}"},
		{"type":"function_call_output","call_id":"call_1","output":"A"},
		{"role":"assistant","content":"Another model's."},
		{"role":"assistant","content":"Signed elsewhere."}]`
	for _, tc := range []struct {
		name      string
		reasoning bool
		endpoint  func(srv string) string
		want      string
	}{
		{"reasoning model", true, func(srv string) string { return srv }, `[
			{"role":"user","content":"go"},
			{"type":"reasoning","id":"rs_1","encrypted_content":"enc-1","summary":[{"type":"summary_text","text":"Plan the read."}]},
			{"type":"reasoning","id":"rs_3","encrypted_content":"enc-3","summary":[]},
			{"type":"function_call","call_id":"call_1","name":"Read","arguments":"{\"path\":\"a\"}"},
			{"type":"function_call_output","call_id":"call_1","output":"A"},
			{"role":"assistant","content":"Another model's."},
			{"role":"assistant","content":"Signed elsewhere."}]`},
		{"another endpoint's reasoning", true, func(string) string { return "https://elsewhere.example/v1" }, without},
		{"a model that does not reason", false, func(srv string) string { return srv }, without},
	} {
		srv := newWireServer(t, sse(responsesText(responsesCompleted), false))
		p := NewOpenAIResponses(OpenAIConfig{BaseURL: srv.URL, HTTPClient: srv.Client()}, tc.reasoning)
		if _, err := p.Stream(context.Background(), conversation(tc.endpoint(srv.URL)), discard); err != nil {
			t.Fatal(err)
		}
		jsonEqual(t, tc.name, field(t, srv.calls()[0].Body, "input"), tc.want)
	}

	srv := newWireServer(t, sse(anthropicTextStream, false))
	p := NewAnthropic(AnthropicConfig{BaseURL: srv.URL, APIKey: "k", HTTPClient: srv.Client()})
	if _, err := p.Stream(context.Background(), conversation(srv.URL), discard); err != nil {
		t.Fatal(err)
	}
	if body := string(srv.calls()[0].Body); strings.Contains(body, "rs_1") || strings.Contains(body, "Plan the read.") || !strings.Contains(body, "anthropic-sig") {
		t.Fatalf("Anthropic request: %s", body)
	}
}

// Reasoning given back that the server refuses (encrypted for another
// organization, or without the call it preceded) is left out of the same
// step's second request; a refusal of a request that gave none back is the
// step's failure.
func TestResponsesRefusedReasoningIsLeftOut(t *testing.T) {
	refusal := httpError(http.StatusBadRequest, nil, `{"error":{"message":"The encrypted content for item rs_1 could not be verified.","type":"invalid_request_error","code":"invalid_encrypted_content"}}`)
	srv := newWireServer(t, refusal, sse(responsesText(responsesCompleted), false))
	p := NewOpenAIResponses(OpenAIConfig{BaseURL: srv.URL, HTTPClient: srv.Client()}, true)
	req := Request{Model: "gpt-5", Messages: []Message{
		{Role: RoleUser, Text: "go"},
		{Role: RoleAssistant, Text: "done", ThinkingSignature: `openai-responses:{"endpoint":"` + srv.URL + `","model":"gpt-5","items":[{"id":"rs_1","encrypted_content":"enc"}]}`},
		{Role: RoleUser, Text: "again"},
	}}
	var events []Event
	if fin, err := p.Stream(context.Background(), req, collect(&events)); err != nil || fin.Reason != FinishStop || len(events) != 2 {
		t.Fatalf("Stream = %+v, %v, %+v", fin, err, events)
	}
	calls := srv.calls()
	if len(calls) != 2 || !strings.Contains(string(calls[0].Body), `"rs_1"`) || strings.Contains(string(calls[1].Body), `"rs_1"`) {
		t.Fatalf("%d requests; the second must leave the reasoning out", len(calls))
	}

	bare := newWireServer(t, refusal)
	p = NewOpenAIResponses(OpenAIConfig{BaseURL: bare.URL, HTTPClient: bare.Client()}, true)
	if _, err := p.Stream(context.Background(), Request{Model: "gpt-5", Messages: []Message{{Role: RoleUser, Text: "go"}}}, discard); err == nil || len(bare.calls()) != 1 {
		t.Fatalf("a refusal with nothing given back: %v after %d requests", err, len(bare.calls()))
	}
}

// Summaries of several reasoning items are separated like paragraphs, and
// a response cut short keeps no call whose arguments were cut off.
func TestResponsesStreamDetails(t *testing.T) {
	stream := namedEvents(
		"response.reasoning_summary_part.added", `{"type":"response.reasoning_summary_part.added","sequence_number":0,"item_id":"rs_1","output_index":0,"summary_index":0}`,
		"response.reasoning_summary_text.delta", `{"type":"response.reasoning_summary_text.delta","sequence_number":1,"item_id":"rs_1","output_index":0,"summary_index":0,"delta":"One."}`,
		"response.reasoning_summary_part.added", `{"type":"response.reasoning_summary_part.added","sequence_number":2,"item_id":"rs_2","output_index":1,"summary_index":0}`,
		"response.reasoning_summary_text.delta", `{"type":"response.reasoning_summary_text.delta","sequence_number":3,"item_id":"rs_2","output_index":1,"summary_index":0,"delta":"Two."}`,
		"response.output_item.added", `{"type":"response.output_item.added","sequence_number":4,"output_index":2,"item":{"id":"fc_1","type":"function_call","arguments":"","call_id":"call_a","name":"Read"}}`,
		"response.function_call_arguments.done", `{"type":"response.function_call_arguments.done","sequence_number":5,"item_id":"fc_1","output_index":2,"arguments":"{}"}`,
		"response.output_item.added", `{"type":"response.output_item.added","sequence_number":6,"output_index":3,"item":{"id":"fc_2","type":"function_call","arguments":"","call_id":"call_b","name":"Write"}}`,
		"response.function_call_arguments.delta", `{"type":"response.function_call_arguments.delta","sequence_number":7,"item_id":"fc_2","output_index":3,"delta":"{\"path\":\"a\",\"content\":\"cut"}`,
		"response.incomplete", `{"type":"response.incomplete","sequence_number":8,"response":{"id":"r","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"}}}`,
	)
	srv := newWireServer(t, sse(stream, false))
	p := NewOpenAIResponses(OpenAIConfig{BaseURL: srv.URL, HTTPClient: srv.Client()}, true)
	var events []Event
	fin, err := p.Stream(context.Background(), Request{Model: "o3"}, collect(&events))
	want := []Event{
		{Kind: EventThinking, Text: "One."}, {Kind: EventThinking, Text: "\n\n"}, {Kind: EventThinking, Text: "Two."},
		{Kind: EventToolCall, ToolCall: ToolCall{ID: "call_a", Name: "Read", Input: json.RawMessage(`{}`)}},
	}
	if err != nil || fin.Reason != FinishLength || !reflect.DeepEqual(events, want) {
		t.Fatalf("Stream = %+v, %v\nevents %+v\nwant   %+v", fin, err, events, want)
	}
}
