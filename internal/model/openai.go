package model

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"

	openai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
)

// OpenAIConfig configures an OpenAI-style Chat Completions provider.
type OpenAIConfig struct {
	// BaseURL is the API root that "chat/completions" is appended to, for
	// example https://api.openai.com/v1 or http://localhost:11434/v1.
	BaseURL string
	// APIKey is sent as a bearer token; an empty key sends no
	// Authorization header (Ollama, LM Studio).
	APIKey string
	// HTTPClient defaults to http.DefaultClient.
	HTTPClient *http.Client
	// Headers are added to every request (and override the defaults).
	Headers map[string]string
	// Reasoning reports that the model reasons: only then is a request's
	// Effort sent (reasoning_effort; Chat Completions).
	Reasoning bool
}

type openAIChat struct {
	svc       openai.ChatCompletionService
	reasoning bool
}

// NewOpenAIChat returns a Provider speaking the Chat Completions streaming
// protocol (OpenAI and the many compatible servers). It never retries on
// its own and reads nothing from the environment.
func NewOpenAIChat(cfg OpenAIConfig) Provider {
	return &openAIChat{svc: openai.NewChatCompletionService(cfg.options()...), reasoning: cfg.Reasoning}
}

// options are the SDK's request options for cfg: its endpoint, key,
// headers and HTTP client, and no retries of the SDK's own.
func (cfg OpenAIConfig) options() []option.RequestOption {
	client := cfg.HTTPClient
	if client == nil {
		client = http.DefaultClient
	}
	opts := []option.RequestOption{
		option.WithHTTPClient(client),
		option.WithBaseURL(cfg.BaseURL),
		option.WithMaxRetries(0),
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	for _, k := range sortedKeys(cfg.Headers) {
		opts = append(opts, option.WithHeader(k, cfg.Headers[k]))
	}
	return opts
}

// Stream implements Provider.
func (p *openAIChat) Stream(ctx context.Context, req Request, emit func(Event) error) (Finish, error) {
	params, err := openAIParams(req)
	if err != nil {
		return Finish{}, err
	}
	if e := openAIEffort(req.Effort); p.reasoning && e != "" {
		params.ReasoningEffort = e
	}
	stream := p.svc.NewStreaming(ctx, params)
	defer stream.Close()

	var (
		calls      = map[int64]*openAICall{}
		lastKey    = int64(-1)
		finishRaw  string
		sawFinish  bool
		usage      *Usage
		emitText   = func(k EventKind, s string) error { return emit(Event{Kind: k, Text: s}) }
		unindexKey = int64(1 << 40) // keys for calls that arrive without an index
	)
	for stream.Next() {
		// Every stream event shows the model is working, output or not.
		if err := emit(Event{Kind: EventAlive}); err != nil {
			return Finish{}, err
		}
		chunk := stream.Current()
		if chunk.JSON.Usage.Valid() {
			usage = openAIUsage(chunk.Usage)
		}
		for _, choice := range chunk.Choices {
			d := choice.Delta
			if r := openAIReasoning(d); r != "" {
				if err := emitText(EventThinking, r); err != nil {
					return Finish{}, err
				}
			}
			if d.Content != "" {
				if err := emitText(EventText, d.Content); err != nil {
					return Finish{}, err
				}
			}
			if d.Refusal != "" {
				if err := emitText(EventText, d.Refusal); err != nil {
					return Finish{}, err
				}
			}
			for _, tc := range d.ToolCalls {
				key := tc.Index
				if !tc.JSON.Index.Valid() {
					// Some servers omit the index: a known id continues its
					// call, a new id starts one, no id continues the last.
					if k, ok := findCallByID(calls, tc.ID); ok {
						key = k
					} else if tc.ID != "" || lastKey < 0 {
						key = unindexKey
						unindexKey++
					} else {
						key = lastKey
					}
				}
				c := calls[key]
				if c == nil {
					c = &openAICall{}
					calls[key] = c
				}
				lastKey = key
				if tc.ID != "" {
					c.id = tc.ID
				}
				if tc.Function.Name != "" {
					c.name += tc.Function.Name
				}
				c.args = append(c.args, tc.Function.Arguments...)
			}
			if choice.FinishReason != "" {
				finishRaw, sawFinish = choice.FinishReason, true
			}
		}
	}
	if err := streamEnd(ctx, stream.Err(), sawFinish, "the model stream ended without a finish reason"); err != nil {
		return Finish{}, err
	}
	if err := emitCalls(emit, calls); err != nil {
		return Finish{}, err
	}
	reason := openAIFinish(finishRaw)
	if reason == FinishStop && len(calls) > 0 {
		// Some servers report "stop" for a step that called tools.
		reason = FinishToolCalls
	}
	return Finish{Reason: reason, RawReason: finishRaw, Usage: usage}, nil
}

// openAICall is a tool call being streamed (Chat Completions and
// Responses).
type openAICall struct {
	id, name string
	args     []byte
	done     bool // arguments complete (Responses: arguments.done or output_item.done)
}

// emitCalls emits the streamed calls in the order of their stream index;
// a call without an id is named call_N, one without arguments gets {}.
func emitCalls(emit func(Event) error, calls map[int64]*openAICall) error {
	keys := make([]int64, 0, len(calls))
	for k := range calls {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	for i, k := range keys {
		c := calls[k]
		id := c.id
		if id == "" {
			id = "call_" + strconv.Itoa(i)
		}
		input := json.RawMessage(c.args)
		if len(input) == 0 {
			input = json.RawMessage("{}")
		}
		if err := emit(Event{Kind: EventToolCall, ToolCall: ToolCall{ID: id, Name: c.name, Input: input}}); err != nil {
			return err
		}
	}
	return nil
}

func findCallByID(calls map[int64]*openAICall, id string) (int64, bool) {
	if id == "" {
		return 0, false
	}
	for k, c := range calls {
		if c.id == id {
			return k, true
		}
	}
	return 0, false
}

// openAIReasoning returns the reasoning text of a delta: DeepSeek and vLLM
// send reasoning_content, Ollama and OpenRouter send reasoning.
func openAIReasoning(d openai.ChatCompletionChunkChoiceDelta) string {
	for _, name := range []string{"reasoning_content", "reasoning"} {
		// The SDK marks unknown fields as not Valid; read their raw JSON.
		raw := d.JSON.ExtraFields[name].Raw()
		if raw == "" || raw == "null" {
			continue
		}
		var s string
		if json.Unmarshal([]byte(raw), &s) == nil && s != "" {
			return s
		}
	}
	return ""
}

func openAIUsage(u openai.CompletionUsage) *Usage {
	return &Usage{
		InputTokens:     u.PromptTokens,
		OutputTokens:    u.CompletionTokens,
		CacheReadTokens: u.PromptTokensDetails.CachedTokens,
		ReasoningTokens: u.CompletionTokensDetails.ReasoningTokens,
	}
}

func openAIFinish(raw string) FinishReason {
	switch raw {
	case "stop":
		return FinishStop
	case "length":
		return FinishLength
	case "tool_calls", "function_call":
		return FinishToolCalls
	case "content_filter":
		return FinishContentFilter
	}
	return FinishOther
}

// openAIEffort is the reasoning_effort of an effort ("": send none; off
// leaves the model's default, as o-series models cannot stop reasoning).
func openAIEffort(e Effort) shared.ReasoningEffort {
	switch e {
	case EffortLow:
		return shared.ReasoningEffortLow
	case EffortMedium:
		return shared.ReasoningEffortMedium
	case EffortHigh:
		return shared.ReasoningEffortHigh
	}
	return ""
}

func openAIParams(req Request) (openai.ChatCompletionNewParams, error) {
	params := openai.ChatCompletionNewParams{
		Model: shared.ChatModel(req.Model),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{
			IncludeUsage: openai.Bool(true),
		},
	}
	if req.MaxOutputTokens > 0 {
		params.MaxTokens = openai.Int(req.MaxOutputTokens)
	}
	if req.System != "" {
		params.Messages = append(params.Messages, openai.SystemMessage(req.System))
	}
	for _, m := range req.Messages {
		switch m.Role {
		case RoleUser:
			params.Messages = append(params.Messages, openai.UserMessage(m.Text))
		case RoleAssistant:
			var a openai.ChatCompletionAssistantMessageParam
			if m.Text != "" || len(m.ToolCalls) == 0 {
				a.Content.OfString = openai.String(m.Text)
			}
			for _, tc := range m.ToolCalls {
				args := string(tc.Input)
				if args == "" {
					args = "{}"
				}
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID: tc.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{
							Name:      tc.Name,
							Arguments: args,
						},
					},
				})
			}
			params.Messages = append(params.Messages, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		case RoleTool:
			params.Messages = append(params.Messages, openai.ToolMessage(m.Text, m.ToolCallID))
		default:
			return params, &Failure{Kind: FailureUnknown, Message: fmt.Sprintf("message role %q is not supported", m.Role)}
		}
	}
	for _, t := range req.Tools {
		schema, err := schemaObject(t.Parameters)
		if err != nil {
			return params, &Failure{Kind: FailureUnknown, Message: fmt.Sprintf("tool %q: %v", t.Name, err)}
		}
		fn := shared.FunctionDefinitionParam{Name: t.Name, Parameters: schema}
		if t.Description != "" {
			fn.Description = openai.String(t.Description)
		}
		params.Tools = append(params.Tools, openai.ChatCompletionFunctionTool(fn))
	}
	return params, nil
}

// schemaObject decodes a tool's JSON Schema; an empty schema is an object
// without properties.
func schemaObject(raw json.RawMessage) (map[string]any, error) {
	if len(raw) == 0 {
		return map[string]any{"type": "object", "properties": map[string]any{}}, nil
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, fmt.Errorf("parameters must be a JSON object")
	}
	return m, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// streamEnd is the outcome of a provider stream that stopped: ctx's cause
// when the step was cancelled, the classified stream error, a network
// failure (what) when the stream ended before its final event, else nil.
func streamEnd(ctx context.Context, err error, complete bool, what string) error {
	switch {
	case ctx.Err() != nil:
		return context.Cause(ctx)
	case err != nil:
		return Classify(err)
	case !complete:
		return &Failure{Kind: FailureNetwork, Message: what}
	}
	return nil
}
