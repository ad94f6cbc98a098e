package modeltest

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/maka-agent/maka/internal/model"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// reply is a step with thinking, text and two tool calls.
func reply(*Request) Reply {
	return Reply{Chunks: []Chunk{
		{Thinking: "plan"}, {Text: "Reading "}, {Text: "both."},
		{Call: &Call{ID: "call_a", Name: "Read", Arguments: `{"path":"a"}`}},
		{Call: &Call{ID: "call_b", Name: "Bash", Arguments: `{"c":"€€€€€€"}`}},
	}, Usage: &Usage{Prompt: 7, Completion: 3}}
}

// The fake speaks both APIs well enough for the real providers: each reads
// the same step from it.
func TestProvidersReadTheFake(t *testing.T) {
	srv := New(t, reply)
	t.Cleanup(srv.Client().CloseIdleConnections)
	cfg := model.OpenAIConfig{BaseURL: srv.BaseURL(), APIKey: "k", HTTPClient: srv.Client()}
	want := []model.Event{
		{Kind: model.EventThinking, Text: "plan"},
		{Kind: model.EventText, Text: "Reading "},
		{Kind: model.EventText, Text: "both."},
		{Kind: model.EventToolCall, ToolCall: model.ToolCall{ID: "call_a", Name: "Read", Input: json.RawMessage(`{"path":"a"}`)}},
		{Kind: model.EventToolCall, ToolCall: model.ToolCall{ID: "call_b", Name: "Bash", Input: json.RawMessage(`{"c":"€€€€€€"}`)}},
	}
	for _, api := range []struct {
		name string
		p    model.Provider
	}{{"chat", model.NewOpenAIChat(cfg)}, {"responses", model.NewOpenAIResponses(cfg, false)}} {
		name, p := api.name, api.p
		var got []model.Event
		fin, err := p.Stream(context.Background(), model.Request{Model: "m1", Messages: []model.Message{{Role: model.RoleUser, Text: "go"}}},
			func(e model.Event) error {
				if e.Kind != model.EventAlive {
					got = append(got, e)
				}
				return nil
			})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(got, want) || fin.Reason != model.FinishToolCalls || fin.Usage == nil || fin.Usage.InputTokens != 7 {
			t.Fatalf("%s: events %+v, finish %+v", name, got, fin)
		}
	}
	seen := srv.Seen()
	if len(seen) != 2 || seen[0].API != "chat" || seen[1].API != "responses" || seen[1].LastUser() != "go" || seen[1].Authorization != "Bearer k" {
		t.Fatalf("requests seen: %+v", seen)
	}
}

// Chat Completions tool call deltas are indexed from 0 in call order.
func TestChatToolCallIndexes(t *testing.T) {
	srv := New(t, reply)
	t.Cleanup(srv.Client().CloseIdleConnections)
	resp, err := srv.Client().Post(srv.BaseURL()+"/chat/completions", "application/json", strings.NewReader(`{"model":"m1","stream":true,"messages":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	var indexes []int
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					ToolCalls []struct {
						Index int    `json:"index"`
						ID    string `json:"id"`
					} `json:"tool_calls"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			t.Fatal(err)
		}
		for _, c := range chunk.Choices {
			for _, tc := range c.Delta.ToolCalls {
				indexes = append(indexes, tc.Index)
			}
		}
	}
	if want := []int{0, 0, 1, 1}; !reflect.DeepEqual(indexes, want) {
		t.Fatalf("tool call delta indexes %v, want %v", indexes, want)
	}
}
