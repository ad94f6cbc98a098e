package model

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	anthropic "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"
)

// DefaultAnthropicMaxTokens is max_tokens when neither the request nor the
// configuration sets one (the Messages API requires it).
const DefaultAnthropicMaxTokens = 8192

// anthropicBeta is the anthropic-beta header of every request.
const anthropicBeta = "interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14"

// AnthropicConfig configures an Anthropic Messages provider.
type AnthropicConfig struct {
	// BaseURL is the API root without the version: "v1/messages" is
	// appended to it (https://api.anthropic.com). A trailing "/v1" is
	// accepted and removed.
	BaseURL string
	// APIKey is sent in the x-api-key header; empty sends none.
	APIKey string
	// HTTPClient defaults to http.DefaultClient.
	HTTPClient *http.Client
	// Headers are added to every request (and override the defaults,
	// including anthropic-beta).
	Headers map[string]string
	// MaxTokens is max_tokens when the request sets none (0 = 8192).
	MaxTokens int64
}

type anthropicProvider struct {
	svc       anthropic.MessageService
	maxTokens int64
}

// NewAnthropic returns a Provider speaking the Anthropic Messages streaming
// protocol. It never retries on its own and reads nothing from the
// environment.
func NewAnthropic(cfg AnthropicConfig) Provider {
	client := cfg.HTTPClient
	if client == nil {
		client = http.DefaultClient
	}
	opts := []option.RequestOption{
		option.WithoutEnvironmentDefaults(),
		option.WithHTTPClient(client),
		option.WithBaseURL(AnthropicBaseURL(cfg.BaseURL)),
		option.WithMaxRetries(0),
		option.WithHeader("anthropic-beta", anthropicBeta),
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithHeader("x-api-key", cfg.APIKey))
	}
	for _, k := range sortedKeys(cfg.Headers) {
		opts = append(opts, option.WithHeader(k, cfg.Headers[k]))
	}
	maxTokens := cfg.MaxTokens
	if maxTokens <= 0 {
		maxTokens = DefaultAnthropicMaxTokens
	}
	c := anthropic.NewClient(opts...)
	return &anthropicProvider{svc: c.Messages, maxTokens: maxTokens}
}

// AnthropicBaseURL normalizes a configured base URL to the form the SDK
// expects: the root that "v1/messages" is appended to, so a trailing "/v1"
// (or "/v1/") is removed.
func AnthropicBaseURL(base string) string {
	base = strings.TrimRight(strings.TrimSpace(base), "/")
	base = strings.TrimSuffix(base, "/v1")
	return base + "/"
}

// anthropicBlock is the state of one streamed content block.
type anthropicBlock struct {
	kind     string // "text", "thinking", "tool_use", ...
	id, name string
	input    []byte // accumulated input_json_delta
	start    string // input of content_block_start (raw JSON)
}

// Stream implements Provider.
func (p *anthropicProvider) Stream(ctx context.Context, req Request, emit func(Event) error) (Finish, error) {
	params, err := p.params(req)
	if err != nil {
		return Finish{}, err
	}
	stream := p.svc.NewStreaming(ctx, params)
	defer stream.Close()

	var (
		blocks    = map[int64]*anthropicBlock{}
		usage     *Usage
		stopRaw   string
		sawStop   bool
		cacheRead int64
		cacheNew  int64
		rawInput  int64
	)
	emitText := func(k EventKind, s string) error {
		if s == "" {
			return nil
		}
		return emit(Event{Kind: k, Text: s})
	}
	for stream.Next() {
		// Every stream event shows the model is working, output or not.
		if err := emit(Event{Kind: EventAlive}); err != nil {
			return Finish{}, err
		}
		ev := stream.Current()
		switch ev.Type {
		case "message_start":
			u := ev.Message.Usage
			rawInput, cacheRead, cacheNew = u.InputTokens, u.CacheReadInputTokens, u.CacheCreationInputTokens
			usage = &Usage{
				InputTokens:     rawInput + cacheRead + cacheNew,
				OutputTokens:    u.OutputTokens,
				CacheReadTokens: cacheRead,
			}
		case "content_block_start":
			cb := ev.ContentBlock
			b := &anthropicBlock{kind: cb.Type, id: cb.ID, name: cb.Name, start: cb.JSON.Input.Raw()}
			blocks[ev.Index] = b
			switch cb.Type {
			case "text":
				err = emitText(EventText, cb.Text)
			case "thinking":
				if err = emitText(EventThinking, cb.Thinking); err == nil {
					err = emitText(EventThinkingSignature, cb.Signature)
				}
			}
		case "content_block_delta":
			d := ev.Delta
			switch d.Type {
			case "text_delta":
				err = emitText(EventText, d.Text)
			case "thinking_delta":
				err = emitText(EventThinking, d.Thinking)
			case "signature_delta":
				err = emitText(EventThinkingSignature, d.Signature)
			case "input_json_delta":
				if b := blocks[ev.Index]; b != nil {
					b.input = append(b.input, d.PartialJSON...)
				}
			}
		case "content_block_stop":
			b := blocks[ev.Index]
			delete(blocks, ev.Index)
			if b != nil && b.kind == "tool_use" {
				err = emit(Event{Kind: EventToolCall, ToolCall: ToolCall{ID: b.id, Name: b.name, Input: b.toolInput()}})
			}
		case "message_delta":
			if d := ev.Delta; d.StopReason != "" {
				stopRaw = string(d.StopReason)
			}
			u := ev.Usage
			if usage == nil {
				usage = &Usage{}
			}
			if u.JSON.OutputTokens.Valid() {
				usage.OutputTokens = u.OutputTokens
			}
			if u.JSON.InputTokens.Valid() && u.InputTokens > 0 {
				rawInput = u.InputTokens
			}
			if u.JSON.CacheReadInputTokens.Valid() && u.CacheReadInputTokens > 0 {
				cacheRead = u.CacheReadInputTokens
			}
			if u.JSON.CacheCreationInputTokens.Valid() && u.CacheCreationInputTokens > 0 {
				cacheNew = u.CacheCreationInputTokens
			}
			usage.InputTokens, usage.CacheReadTokens = rawInput+cacheRead+cacheNew, cacheRead
		case "message_stop":
			sawStop = true
		}
		if err != nil {
			return Finish{}, err
		}
	}
	if err := streamEnd(ctx, stream.Err(), sawStop, "the model stream ended before message_stop"); err != nil {
		return Finish{}, err
	}
	return Finish{Reason: anthropicFinish(stopRaw), RawReason: stopRaw, Usage: usage}, nil
}

// toolInput is the streamed input, else the block's initial input, else {}.
func (b *anthropicBlock) toolInput() json.RawMessage {
	if in := bytes.TrimSpace(b.input); len(in) > 0 {
		return json.RawMessage(in)
	}
	if b.start != "" && b.start != "null" {
		return json.RawMessage(b.start)
	}
	return json.RawMessage("{}")
}

func anthropicFinish(raw string) FinishReason {
	switch raw {
	case "end_turn", "stop_sequence":
		return FinishStop
	case "max_tokens", "model_context_window_exceeded":
		return FinishLength
	case "tool_use":
		return FinishToolCalls
	case "refusal":
		return FinishContentFilter
	}
	return FinishOther
}

func (p *anthropicProvider) params(req Request) (anthropic.MessageNewParams, error) {
	params := anthropic.MessageNewParams{
		Model:     anthropic.Model(req.Model),
		MaxTokens: p.maxTokens,
	}
	if req.MaxOutputTokens > 0 {
		params.MaxTokens = req.MaxOutputTokens
	}
	if budget := AnthropicThinkingBudget(req.Effort); budget > 0 {
		// max_tokens must exceed the budget: the answer keeps the
		// configured room on top of it.
		params.Thinking = anthropic.ThinkingConfigParamOfEnabled(budget)
		if params.MaxTokens <= budget || req.MaxOutputTokens <= 0 {
			params.MaxTokens = budget + p.maxTokens
		}
	}
	if req.System != "" {
		params.System = []anthropic.TextBlockParam{{Text: req.System}}
	}
	msgs, err := anthropicMessages(req.Messages)
	if err != nil {
		return params, err
	}
	params.Messages = msgs
	for _, t := range req.Tools {
		schema := t.Parameters
		if len(bytes.TrimSpace(schema)) == 0 {
			schema = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		if _, err := schemaObject(schema); err != nil {
			return params, &Failure{Kind: FailureUnknown, Message: fmt.Sprintf("tool %q: %v", t.Name, err)}
		}
		tool := anthropic.ToolParam{
			Name:        t.Name,
			InputSchema: param.Override[anthropic.ToolInputSchemaParam](schema),
		}
		if t.Description != "" {
			tool.Description = anthropic.String(t.Description)
		}
		params.Tools = append(params.Tools, anthropic.ToolUnionParam{OfTool: &tool})
	}
	return params, nil
}

// anthropicMessages maps the conversation: tool results become tool_result
// blocks of a user message, consecutive messages of the same side are
// merged into one, and an assistant message replays its signed thinking,
// then its text, then its tool calls.
func anthropicMessages(in []Message) ([]anthropic.MessageParam, error) {
	var (
		out    []anthropic.MessageParam
		role   Role // RoleUser or RoleAssistant of blocks
		blocks []anthropic.ContentBlockParamUnion
	)
	flush := func() {
		if len(blocks) == 0 {
			return
		}
		if role == RoleAssistant {
			out = append(out, anthropic.NewAssistantMessage(blocks...))
		} else {
			out = append(out, anthropic.NewUserMessage(blocks...))
		}
		blocks = nil
	}
	add := func(r Role, b ...anthropic.ContentBlockParamUnion) {
		if r != role {
			flush()
			role = r
		}
		blocks = append(blocks, b...)
	}
	for _, m := range in {
		switch m.Role {
		case RoleUser:
			if m.Text != "" {
				add(RoleUser, anthropic.NewTextBlock(m.Text))
			}
		case RoleTool:
			res := anthropic.ToolResultBlockParam{ToolUseID: m.ToolCallID}
			if m.Text != "" {
				res.Content = []anthropic.ToolResultBlockParamContentUnion{{OfText: &anthropic.TextBlockParam{Text: m.Text}}}
			}
			if m.IsError {
				res.IsError = anthropic.Bool(true)
			}
			add(RoleUser, anthropic.ContentBlockParamUnion{OfToolResult: &res})
		case RoleAssistant:
			var bs []anthropic.ContentBlockParamUnion
			if m.Thinking != "" && m.ThinkingSignature != "" && !strings.HasPrefix(m.ThinkingSignature, responsesReasoningPrefix) {
				bs = append(bs, anthropic.NewThinkingBlock(m.ThinkingSignature, m.Thinking))
			}
			if m.Text != "" {
				bs = append(bs, anthropic.NewTextBlock(m.Text))
			}
			for _, tc := range m.ToolCalls {
				bs = append(bs, anthropic.NewToolUseBlock(tc.ID, replayInput(tc.Input), tc.Name))
			}
			if len(bs) > 0 {
				add(RoleAssistant, bs...)
			}
		default:
			return nil, &Failure{Kind: FailureUnknown, Message: fmt.Sprintf("message role %q is not supported", m.Role)}
		}
	}
	flush()
	return out, nil
}

// replayInput returns a tool call's input as a JSON object; input the model
// wrote that is not an object is replayed as {}.
func replayInput(in json.RawMessage) json.RawMessage {
	t := bytes.TrimSpace(in)
	if len(t) > 0 && t[0] == '{' && json.Valid(t) {
		return json.RawMessage(t)
	}
	return json.RawMessage("{}")
}
