package modeltest

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/maka-agent/maka/internal/model"
)

// The host's Anthropic provider reads the fake's Messages stream: thinking
// with its signature, text, and tool_use blocks whose input arrives in
// fragments; the fake reads the request back into the Chat Completions
// form, tool_use and tool_result blocks included.
func TestAnthropicProviderReadsTheFake(t *testing.T) {
	srv := New(t, reply)
	t.Cleanup(srv.Client().CloseIdleConnections)
	var logged []Logged
	srv.SetLog(func(l Logged) { logged = append(logged, l) })
	p := model.NewAnthropic(model.AnthropicConfig{BaseURL: srv.URL, APIKey: "k", HTTPClient: srv.Client()})
	var got []model.Event
	fin, err := p.Stream(context.Background(), model.Request{
		Model: "m1", System: "be brief",
		Messages: []model.Message{
			{Role: model.RoleUser, Text: "go"},
			{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: "toolu_1", Name: "Bash", Input: json.RawMessage(`{"command":"ls"}`)}}},
			{Role: model.RoleTool, ToolCallID: "toolu_1", ToolName: "Bash", Text: "a.txt"},
		},
		Tools: []model.ToolSpec{{Name: "Bash", Description: "run", Parameters: json.RawMessage(`{"type":"object"}`)}},
	}, func(e model.Event) error {
		if e.Kind != model.EventAlive {
			got = append(got, e)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []model.Event{
		{Kind: model.EventThinking, Text: "plan"},
		{Kind: model.EventThinkingSignature, Text: "fake-signature"},
		{Kind: model.EventText, Text: "Reading "},
		{Kind: model.EventText, Text: "both."},
		{Kind: model.EventToolCall, ToolCall: model.ToolCall{ID: "call_a", Name: "Read", Input: json.RawMessage(`{"path":"a"}`)}},
		{Kind: model.EventToolCall, ToolCall: model.ToolCall{ID: "call_b", Name: "Bash", Input: json.RawMessage(`{"c":"€€€€€€"}`)}},
	}
	if !reflect.DeepEqual(got, want) || fin.Reason != model.FinishToolCalls || fin.Usage == nil || fin.Usage.InputTokens != 7 {
		t.Fatalf("events %+v, finish %+v", got, fin)
	}
	seen := srv.Seen()
	if len(seen) != 1 {
		t.Fatalf("requests seen: %+v", seen)
	}
	r := seen[0]
	if r.API != "anthropic" || r.LastUser() != "go" || r.Messages[0].Role != "system" || r.Messages[0].Text() != "be brief" {
		t.Fatalf("request %+v", r)
	}
	if n := len(r.Messages); n != 4 || len(r.Messages[2].ToolCalls) != 1 || r.Messages[2].ToolCalls[0].Function.Arguments != `{"command":"ls"}` {
		t.Fatalf("messages %+v", r.Messages)
	}
	if res := r.ToolResultsSinceUser(); len(res) != 1 || res[0].ToolCallID != "toolu_1" || !strings.Contains(res[0].Text(), "a.txt") {
		t.Fatalf("tool results %+v", res)
	}
	if len(r.Tools) != 1 || r.Tools[0].Function.Name != "Bash" {
		t.Fatalf("tools %+v", r.Tools)
	}
	if len(logged) != 1 || logged[0].Path != "/v1/messages" || logged[0].Bytes != len(r.Body) {
		t.Fatalf("log %+v, body %d bytes", logged, len(r.Body))
	}
}

// The Messages stream is in the documented event order, each event
// named as its data's type.
func TestAnthropicEventOrder(t *testing.T) {
	srv := New(t, func(*Request) Reply {
		return Reply{Chunks: []Chunk{{Text: "hi"}, {Call: &Call{ID: "toolu_x", Name: "bash", Arguments: `{"command":"echo"}`}}}}
	})
	t.Cleanup(srv.Client().CloseIdleConnections)
	resp, err := srv.Client().Post(srv.URL+"/v1/messages", "application/json",
		strings.NewReader(`{"model":"m1","stream":true,"max_tokens":10,"messages":[{"role":"user","content":"x"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var events []string
	sc := bufio.NewScanner(resp.Body)
	name := ""
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			name = v
			continue
		}
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Type  string `json:"type"`
			Delta struct {
				Type       string `json:"type"`
				StopReason string `json:"stop_reason"`
			} `json:"delta"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil || ev.Type != name {
			t.Fatalf("event %q data %s: %v", name, data, err)
		}
		e := ev.Type
		if ev.Delta.Type != "" {
			e += ":" + ev.Delta.Type
		}
		if ev.Delta.StopReason != "" {
			e += ":" + ev.Delta.StopReason
		}
		events = append(events, e)
	}
	want := []string{"message_start", "content_block_start", "content_block_delta:text_delta", "content_block_stop",
		"content_block_start", "content_block_delta:input_json_delta", "content_block_delta:input_json_delta", "content_block_stop",
		"message_delta:tool_use", "message_stop"}
	if !reflect.DeepEqual(events, want) {
		t.Fatalf("events %v\nwant   %v", events, want)
	}
}

// A request without stream gets the whole message; an error reply has
// the Messages error form.
func TestAnthropicWholeMessageAndError(t *testing.T) {
	status := 0
	srv := New(t, func(*Request) Reply {
		if status != 0 {
			return Reply{Status: status}
		}
		return Reply{Chunks: []Chunk{{Text: "o"}, {Text: "k"}}}
	})
	t.Cleanup(srv.Client().CloseIdleConnections)
	post := func() (int, string) {
		resp, err := srv.Client().Post(srv.URL+"/v1/messages", "application/json",
			strings.NewReader(`{"model":"m1","max_tokens":10,"messages":[{"role":"user","content":"x"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := post()
	var msg struct {
		Content []struct{ Type, Text string } `json:"content"`
		Stop    string                        `json:"stop_reason"`
	}
	if err := json.Unmarshal([]byte(body), &msg); err != nil || code != http.StatusOK || len(msg.Content) != 1 || msg.Content[0].Text != "ok" || msg.Stop != "end_turn" {
		t.Fatalf("%d %s", code, body)
	}
	status = http.StatusTooManyRequests
	if code, body := post(); code != http.StatusTooManyRequests || !strings.Contains(body, `"type":"rate_limit_error"`) {
		t.Fatalf("%d %s", code, body)
	}
}
