package model

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
	keyID     string // identifies the API key in memory (a hash, never the key)
	reasoning bool
}

// NewOpenAIResponses returns a Provider speaking the OpenAI Responses
// streaming protocol (POST {BaseURL}/responses), for models that only the
// Responses API serves (codex and reasoning models) and for relays of it.
// Requests are stateless: store is false and the whole conversation is
// sent each step. With reasoning set (a reasoning model), the model is
// asked for summaries of its reasoning, which stream as thinking, and for
// its encrypted reasoning, which rides in the step's thinking signature
// and is given back with later requests to the same endpoint and model.
// Apart from dropping an option the server refuses (see Stream) it never
// retries on its own, and it reads nothing from the environment.
func NewOpenAIResponses(cfg OpenAIConfig, reasoning bool) Provider {
	sum := sha256.Sum256([]byte(cfg.APIKey))
	return &openAIResponses{
		svc: responses.NewResponseService(cfg.options()...), base: cfg.BaseURL,
		keyID: hex.EncodeToString(sum[:8]), reasoning: reasoning,
	}
}

// responsesOptions are the optional parts of a request.
type responsesOptions struct {
	summary bool // ask for reasoning summaries
	replay  bool // give earlier reasoning back
}

// Stream implements Provider.
//
// A request the server refuses (HTTP 400, before any output) for an
// optional part is sent again at once without it:
//   - reasoning summaries, which need a verified organization on OpenAI;
//     later requests with the same endpoint, key and model no longer ask;
//   - earlier reasoning given back, which the server may not accept (it
//     was encrypted for another organization, or a call it preceded is no
//     longer in the conversation).
func (p *openAIResponses) Stream(ctx context.Context, req Request, emit func(Event) error) (Finish, error) {
	key := p.base + "\x00" + p.keyID + "\x00" + req.Model
	_, refused := summariesRefused.Load(key)
	o := responsesOptions{summary: p.reasoning && !refused, replay: p.reasoning}
	for {
		fin, replayed, err := p.stream(ctx, req, o, emit)
		var f *Failure
		if !errors.As(err, &f) || f.Status != http.StatusBadRequest {
			return fin, err
		}
		low := strings.ToLower(f.Message)
		switch {
		case o.summary && strings.Contains(low, "summar"):
			summariesRefused.Store(key, struct{}{})
			o.summary = false
		case replayed > 0 && (strings.Contains(low, "reasoning") || strings.Contains(low, "encrypted")):
			o.replay = false
		default:
			return fin, err
		}
	}
}

// summariesRefused holds the endpoint, key and model triples that refused
// reasoning summaries; it is bounded by the configured connections.
var summariesRefused sync.Map

// stream runs one request and reports how many reasoning items it gave
// back; nothing but EventAlive is emitted before the response is
// accepted, so a refused request can be sent again.
func (p *openAIResponses) stream(ctx context.Context, req Request, o responsesOptions, emit func(Event) error) (Finish, int, error) {
	params, replayed, err := p.params(req, o)
	if err != nil {
		return Finish{}, 0, err
	}
	stream := p.svc.NewStreaming(ctx, params)
	defer stream.Close()

	var (
		calls     = map[int64]*openAICall{}
		reasoning []responsesReasoningItem
		finished  *Finish
		thought   bool // thinking was emitted
		emitText  = func(k EventKind, s string) error {
			if s == "" {
				return nil
			}
			thought = thought || k == EventThinking
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
		// Every stream event shows the model is working, output or not.
		if err := emit(Event{Kind: EventAlive}); err != nil {
			return Finish{}, replayed, err
		}
		ev := stream.Current()
		switch ev.Type {
		case "response.output_text.delta", "response.refusal.delta":
			err = emitText(EventText, ev.Delta)
		case "response.reasoning_summary_text.delta", "response.reasoning_text.delta":
			err = emitText(EventThinking, ev.Delta)
		case "response.reasoning_summary_part.added":
			// Summary parts, of one reasoning item or several, are
			// paragraphs: separate them as the model's own text would be.
			if thought {
				err = emitText(EventThinking, "\n\n")
			}
		case "response.output_item.added", "response.output_item.done":
			// Only encrypted reasoning can be given back: with store
			// false the server keeps no item to find by its id.
			if p.reasoning && ev.Type == "response.output_item.done" && ev.Item.Type == "reasoning" &&
				ev.Item.ID != "" && ev.Item.EncryptedContent != "" {
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
			if ev.Type == "response.incomplete" {
				// A call cut off mid-arguments is not a call.
				for i, c := range calls {
					if !c.done {
						delete(calls, i)
					}
				}
			}
			fin := responsesFinish(ev.Response, len(calls) > 0)
			finished = &fin
		case "response.failed":
			e := ev.Response.Error
			return Finish{}, replayed, responsesFailure(string(e.Code), e.Message)
		case "error":
			return Finish{}, replayed, responsesFailure(ev.Code, ev.Message)
		}
		if err != nil {
			return Finish{}, replayed, err
		}
	}
	if err := streamEnd(ctx, stream.Err(), finished != nil, "the model stream ended before response.completed"); err != nil {
		return Finish{}, replayed, err
	}
	if len(reasoning) > 0 {
		b, err := json.Marshal(responsesReasoning{Endpoint: p.base, Model: req.Model, Items: reasoning})
		if err != nil {
			return Finish{}, replayed, err
		}
		if err := emit(Event{Kind: EventThinkingSignature, Text: responsesReasoningPrefix + string(b)}); err != nil {
			return Finish{}, replayed, err
		}
	}
	if err := emitCalls(emit, calls); err != nil {
		return Finish{}, replayed, err
	}
	return *finished, replayed, nil
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

// params is the request of one step: instructions, the conversation as
// input items (messages, function calls and their outputs, and with
// o.replay the reasoning this endpoint and model gave earlier) and the
// function tools. It reports how many reasoning items it gives back.
func (p *openAIResponses) params(req Request, o responsesOptions) (responses.ResponseNewParams, int, error) {
	replayed := 0
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
	if o.summary {
		params.Reasoning = shared.ReasoningParam{Summary: shared.ReasoningSummaryAuto}
	}
	if e := openAIEffort(req.Effort); p.reasoning && e != "" {
		params.Reasoning.Effort = e
	}
	if p.reasoning {
		params.Include = []responses.ResponseIncludable{responses.ResponseIncludableReasoningEncryptedContent}
	}
	var input responses.ResponseInputParam
	for _, m := range req.Messages {
		switch m.Role {
		case RoleUser:
			input = append(input, responses.ResponseInputItemParamOfMessage(m.Text, responses.EasyInputMessageRoleUser))
		case RoleAssistant:
			if o.replay {
				items := responsesReasoningInput(m, p.base, req.Model)
				input = append(input, items...)
				replayed += len(items)
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
			return params, 0, &Failure{Kind: FailureUnknown, Message: fmt.Sprintf("message role %q is not supported", m.Role)}
		}
	}
	params.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: input}
	for _, t := range req.Tools {
		schema, err := schemaObject(t.Parameters)
		if err != nil {
			return params, 0, &Failure{Kind: FailureUnknown, Message: fmt.Sprintf("tool %q: %v", t.Name, err)}
		}
		fn := responses.FunctionToolParam{Name: t.Name, Parameters: schema, Strict: openai.Bool(false)}
		if t.Description != "" {
			fn.Description = openai.String(t.Description)
		}
		params.Tools = append(params.Tools, responses.ToolUnionParam{OfFunction: &fn})
	}
	return params, replayed, nil
}

// responsesReasoningPrefix marks a thinking signature that carries
// Responses reasoning: a reasoning model's encrypted reasoning, given back
// with later requests (nothing is stored at the provider) so that the
// model keeps its reasoning across the steps of a turn and, through the
// record, across turns. Other providers ignore such signatures.
const responsesReasoningPrefix = "openai-responses:"

// responsesReasoning is the reasoning of one step and where it came from:
// it is only given back to the same endpoint and model.
type responsesReasoning struct {
	Endpoint string                   `json:"endpoint"`
	Model    string                   `json:"model"`
	Items    []responsesReasoningItem `json:"items"`
}

// responsesReasoningItem is one reasoning item of a response.
type responsesReasoningItem struct {
	ID               string `json:"id"`
	EncryptedContent string `json:"encrypted_content"`
}

// responsesReasoningInput returns the reasoning items an assistant message
// carries in its thinking signature, as input items (the first with the
// message's thinking as its summary); none for another signature or for
// reasoning of another endpoint or model.
func responsesReasoningInput(m Message, endpoint, model string) []responses.ResponseInputItemUnionParam {
	raw, ok := strings.CutPrefix(m.ThinkingSignature, responsesReasoningPrefix)
	if !ok {
		return nil
	}
	var r responsesReasoning
	if json.Unmarshal([]byte(raw), &r) != nil || r.Endpoint != endpoint || r.Model != model {
		return nil
	}
	var out []responses.ResponseInputItemUnionParam
	for _, it := range r.Items {
		if it.ID == "" || it.EncryptedContent == "" {
			continue
		}
		summary := []responses.ResponseReasoningItemSummaryParam{}
		if len(out) == 0 && m.Thinking != "" {
			summary = append(summary, responses.ResponseReasoningItemSummaryParam{Text: m.Thinking})
		}
		item := responses.ResponseInputItemParamOfReasoning(it.ID, summary)
		item.OfReasoning.EncryptedContent = openai.String(it.EncryptedContent)
		out = append(out, item)
	}
	return out
}
