package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	openai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
)

type openAIResponses struct {
	svc       responses.ResponseService
	base      string
	reasoning bool
}

// NewOpenAIResponses returns a Provider speaking the OpenAI Responses
// streaming protocol (POST {BaseURL}/responses), for models that only the
// Responses API serves (codex and reasoning models) and for relays of it.
// Requests are stateless: store is false and the whole conversation is
// sent each step. With reasoning set (a reasoning model), the model is
// asked for summaries of its reasoning, which stream as thinking, and for
// its encrypted reasoning, which rides in the step's thinking signature
// and is given back with later requests. It never retries on its own and
// reads nothing from the environment.
func NewOpenAIResponses(cfg OpenAIConfig, reasoning bool) Provider {
	return &openAIResponses{svc: responses.NewResponseService(cfg.options()...), base: cfg.BaseURL, reasoning: reasoning}
}

// Stream implements Provider.
//
// Reasoning summaries need a verified organization on OpenAI: a request
// refused for asking one is sent again at once without it, and later
// requests of the same endpoint and model no longer ask.
func (p *openAIResponses) Stream(ctx context.Context, req Request, emit func(Event) error) (Finish, error) {
	key := p.base + "\x00" + req.Model
	_, refused := summariesRefused.Load(key)
	summary := p.reasoning && !refused
	fin, err := p.stream(ctx, req, summary, emit)
	var f *Failure
	if summary && errors.As(err, &f) && f.Status == http.StatusBadRequest && strings.Contains(strings.ToLower(f.Message), "summar") {
		summariesRefused.Store(key, struct{}{})
		return p.stream(ctx, req, false, emit)
	}
	return fin, err
}

// summariesRefused holds the endpoint and model pairs (base URL NUL model
// id) that refused reasoning summaries; it is bounded by the configured
// connections.
var summariesRefused sync.Map

// stream runs one request; nothing is emitted before the response is
// accepted, so a refused request can be sent again.
func (p *openAIResponses) stream(ctx context.Context, req Request, summary bool, emit func(Event) error) (Finish, error) {
	params, err := responsesParams(req, p.reasoning, summary)
	if err != nil {
		return Finish{}, err
	}
	stream := p.svc.NewStreaming(ctx, params)
	defer stream.Close()

	var (
		calls     = map[int64]*openAICall{}
		reasoning []responsesReasoningItem
		finished  *Finish
		emitText  = func(k EventKind, s string) error {
			if s == "" {
				return nil
			}
			return emit(Event{Kind: k, Text: s})
		}
	)
	callAt := func(index int64) *openAICall {
		c := calls[index]
		if c == nil {
			c = &openAICall{}
			calls[index] = c
		}
		return c
	}
	for finished == nil && stream.Next() {
		ev := stream.Current()
		switch ev.Type {
		case "response.output_text.delta", "response.refusal.delta":
			err = emitText(EventText, ev.Delta)
		case "response.reasoning_summary_text.delta", "response.reasoning_text.delta":
			err = emitText(EventThinking, ev.Delta)
		case "response.reasoning_summary_part.added":
			// Summary parts are paragraphs: separate them as the
			// model's own text would be.
			if ev.SummaryIndex > 0 {
				err = emitText(EventThinking, "\n\n")
			}
		case "response.output_item.added", "response.output_item.done":
			if p.reasoning && ev.Item.Type == "reasoning" && ev.Type == "response.output_item.done" && ev.Item.ID != "" {
				reasoning = append(reasoning, responsesReasoningItem{ID: ev.Item.ID, EncryptedContent: ev.Item.EncryptedContent})
			}
			if ev.Item.Type != "function_call" {
				break
			}
			c := callAt(ev.OutputIndex)
			c.id = firstNonEmpty(ev.Item.CallID, c.id)
			c.name = firstNonEmpty(ev.Item.Name, c.name)
			if args := ev.Item.Arguments.OfString; ev.Type == "response.output_item.done" && !c.done && args != "" {
				c.args, c.done = []byte(args), true
			}
		case "response.function_call_arguments.delta":
			if c := callAt(ev.OutputIndex); !c.done {
				c.args = append(c.args, ev.Delta...)
			}
		case "response.function_call_arguments.done":
			c := callAt(ev.OutputIndex)
			c.args, c.done = []byte(ev.Arguments), true
		case "response.completed", "response.incomplete":
			fin := responsesFinish(ev.Response, len(calls) > 0)
			finished = &fin
		case "response.failed":
			e := ev.Response.Error
			return Finish{}, responsesFailure(string(e.Code), e.Message)
		case "error":
			return Finish{}, responsesFailure(ev.Code, ev.Message)
		}
		if err != nil {
			return Finish{}, err
		}
	}
	if err := streamEnd(ctx, stream.Err(), finished != nil, "the model stream ended before response.completed"); err != nil {
		return Finish{}, err
	}
	if len(reasoning) > 0 {
		b, err := json.Marshal(reasoning)
		if err != nil {
			return Finish{}, err
		}
		if err := emit(Event{Kind: EventThinkingSignature, Text: responsesReasoningPrefix + string(b)}); err != nil {
			return Finish{}, err
		}
	}
	if err := emitCalls(emit, calls); err != nil {
		return Finish{}, err
	}
	return *finished, nil
}

// responsesFinish is the finish of a completed or incomplete response.
func responsesFinish(r responses.Response, called bool) Finish {
	fin := Finish{Reason: FinishStop, RawReason: string(r.Status)}
	switch {
	case r.Status == responses.ResponseStatusIncomplete:
		fin.RawReason = firstNonEmpty(r.IncompleteDetails.Reason, fin.RawReason)
		fin.Reason = FinishOther
		switch r.IncompleteDetails.Reason {
		case "max_output_tokens":
			fin.Reason = FinishLength
		case "content_filter":
			fin.Reason = FinishContentFilter
		}
	case called:
		fin.Reason = FinishToolCalls
	}
	if r.JSON.Usage.Valid() {
		u := r.Usage
		fin.Usage = &Usage{
			InputTokens:     u.InputTokens,
			OutputTokens:    u.OutputTokens,
			CacheReadTokens: u.InputTokensDetails.CachedTokens,
			ReasoningTokens: u.OutputTokensDetails.ReasoningTokens,
		}
	}
	return fin
}

// responsesFailure classifies an error reported inside a Responses stream
// (an error event or a failed response) by its code and message.
func responsesFailure(code, message string) *Failure {
	if message == "" {
		message = "the model response failed"
	}
	d := errorDetail{code: code, message: message, status: openAITypeStatus[strings.ToLower(code)]}
	f := &Failure{Status: d.status, Code: code, Message: scrubMessage(message)}
	f.Kind = decideKind(errors.New(message), d)
	return f
}

// responsesParams is the request of one step: instructions, the
// conversation as input items (messages, function calls and their
// outputs) and the function tools.
func responsesParams(req Request, reasoning, summary bool) (responses.ResponseNewParams, error) {
	params := responses.ResponseNewParams{
		Model: shared.ResponsesModel(req.Model),
		Store: openai.Bool(false),
	}
	if req.System != "" {
		params.Instructions = openai.String(req.System)
	}
	if req.MaxOutputTokens > 0 {
		params.MaxOutputTokens = openai.Int(req.MaxOutputTokens)
	}
	if summary {
		params.Reasoning = shared.ReasoningParam{Summary: shared.ReasoningSummaryAuto}
	}
	if reasoning {
		params.Include = []responses.ResponseIncludable{responses.ResponseIncludableReasoningEncryptedContent}
	}
	var input responses.ResponseInputParam
	for _, m := range req.Messages {
		switch m.Role {
		case RoleUser:
			input = append(input, responses.ResponseInputItemParamOfMessage(m.Text, responses.EasyInputMessageRoleUser))
		case RoleAssistant:
			if reasoning {
				input = append(input, responsesReasoningInput(m)...)
			}
			if m.Text != "" {
				input = append(input, responses.ResponseInputItemParamOfMessage(m.Text, responses.EasyInputMessageRoleAssistant))
			}
			for _, tc := range m.ToolCalls {
				args := string(tc.Input)
				if args == "" {
					args = "{}"
				}
				input = append(input, responses.ResponseInputItemParamOfFunctionCall(args, tc.ID, tc.Name))
			}
		case RoleTool:
			out := responses.ResponseInputItemParamOfFunctionCallOutput(m.Text)
			out.OfFunctionCallOutput.CallID = openai.String(m.ToolCallID)
			input = append(input, out)
		default:
			return params, &Failure{Kind: FailureUnknown, Message: fmt.Sprintf("message role %q is not supported", m.Role)}
		}
	}
	params.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: input}
	for _, t := range req.Tools {
		schema, err := schemaObject(t.Parameters)
		if err != nil {
			return params, &Failure{Kind: FailureUnknown, Message: fmt.Sprintf("tool %q: %v", t.Name, err)}
		}
		fn := responses.FunctionToolParam{Name: t.Name, Parameters: schema, Strict: openai.Bool(false)}
		if t.Description != "" {
			fn.Description = openai.String(t.Description)
		}
		params.Tools = append(params.Tools, responses.ToolUnionParam{OfFunction: &fn})
	}
	return params, nil
}

// responsesReasoningPrefix marks a thinking signature that carries
// Responses reasoning items: a reasoning model's encrypted reasoning,
// given back with the next request (nothing is stored at the provider)
// so that the model keeps its reasoning across the steps of a turn and
// across turns. Other providers ignore such signatures.
const responsesReasoningPrefix = "openai-responses:"

// responsesReasoningItem is one reasoning item of a response.
type responsesReasoningItem struct {
	ID               string `json:"id"`
	EncryptedContent string `json:"encrypted_content,omitempty"`
}

// responsesReasoningInput returns the reasoning items an assistant message
// carries in its thinking signature, as input items (the first with the
// message's thinking as its summary); none for another signature.
func responsesReasoningInput(m Message) []responses.ResponseInputItemUnionParam {
	raw, ok := strings.CutPrefix(m.ThinkingSignature, responsesReasoningPrefix)
	if !ok {
		return nil
	}
	var items []responsesReasoningItem
	if json.Unmarshal([]byte(raw), &items) != nil {
		return nil
	}
	var out []responses.ResponseInputItemUnionParam
	for i, it := range items {
		summary := []responses.ResponseReasoningItemSummaryParam{}
		if i == 0 && m.Thinking != "" {
			summary = append(summary, responses.ResponseReasoningItemSummaryParam{Text: m.Thinking})
		}
		item := responses.ResponseInputItemParamOfReasoning(it.ID, summary)
		if it.EncryptedContent != "" {
			item.OfReasoning.EncryptedContent = openai.String(it.EncryptedContent)
		}
		out = append(out, item)
	}
	return out
}
