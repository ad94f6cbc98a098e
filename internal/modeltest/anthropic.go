package modeltest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
)

// anthropicBody is the part of an Anthropic Messages request the fake
// reads.
type anthropicBody struct {
	Model    string `json:"model"`
	System   any    `json:"system"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Role    string `json:"role"`
		Content any    `json:"content"`
	} `json:"messages"`
	Tools []struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"input_schema"`
	} `json:"tools"`
	Thinking struct {
		Type         string `json:"type"`
		BudgetTokens int    `json:"budget_tokens"`
	} `json:"thinking"`
}

// anthropicBlock is one content block of a request message.
type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   any             `json:"content"`
}

// decodeAnthropic translates a Messages request into the Chat Completions
// form of Request: system becomes the system message, an assistant's
// tool_use blocks its tool calls, and a user message carrying tool_result
// blocks becomes one tool message per result (text blocks beside the
// results are left out of the translation; they stay in Body).
func decodeAnthropic(body []byte) (*Request, error) {
	var b anthropicBody
	if err := json.Unmarshal(body, &b); err != nil {
		return nil, err
	}
	req := &Request{API: "anthropic", Model: b.Model, Stream: b.Stream}
	if b.Thinking.Type == "enabled" {
		req.ReasoningEffort = "budget:" + strconv.Itoa(b.Thinking.BudgetTokens)
	}
	if b.System != nil {
		req.Messages = append(req.Messages, Message{Role: "system", Content: b.System})
	}
	for _, m := range b.Messages {
		parts, ok := m.Content.([]any)
		if !ok {
			req.Messages = append(req.Messages, Message{Role: m.Role, Content: m.Content})
			continue
		}
		raw, _ := json.Marshal(parts)
		var blocks []anthropicBlock
		if err := json.Unmarshal(raw, &blocks); err != nil {
			return nil, err
		}
		msg := Message{Role: m.Role, Content: parts}
		var results []Message
		for _, bl := range blocks {
			switch bl.Type {
			case "tool_use":
				tc := ToolCall{ID: bl.ID, Type: "function"}
				tc.Function.Name, tc.Function.Arguments = bl.Name, string(bl.Input)
				msg.ToolCalls = append(msg.ToolCalls, tc)
			case "tool_result":
				results = append(results, Message{Role: "tool", Content: bl.Content, ToolCallID: bl.ToolUseID})
			}
		}
		if len(results) > 0 {
			req.Messages = append(req.Messages, results...)
			continue
		}
		req.Messages = append(req.Messages, msg)
	}
	for _, t := range b.Tools {
		var tool RequestTool
		tool.Function.Name, tool.Function.Description, tool.Function.Parameters = t.Name, t.Description, t.InputSchema
		req.Tools = append(req.Tools, tool)
	}
	return req, nil
}

// anthropicStop is the stop_reason of a reply.
func anthropicStop(rep Reply, calls int) string {
	switch {
	case rep.Finish == "length":
		return "max_tokens"
	case rep.Finish == "tool_calls" || (rep.Finish == "" && calls > 0):
		return "tool_use"
	}
	return "end_turn"
}

// anthropicUsage is a reply's usage in the Messages form.
func anthropicUsage(rep Reply, output bool) map[string]any {
	u := map[string]any{"output_tokens": 0}
	if !output {
		u["input_tokens"] = 0
	}
	if rep.Usage != nil {
		u["output_tokens"] = rep.Usage.Completion
		if !output {
			u["input_tokens"] = rep.Usage.Prompt
		}
	}
	return u
}

// streamAnthropic answers a Messages request with rep: message_start, one
// content block per run of text or thinking and per tool call (its input
// in two input_json_delta fragments), message_delta with the stop reason,
// message_stop.
func (s *Server) streamAnthropic(ctx context.Context, out *sseWriter, req *Request, rep Reply) {
	id := "msg_" + strconv.FormatInt(s.requests.Load(), 10)
	send := func(typ string, fields map[string]any) bool {
		fields["type"] = typ
		return out.send(typ, fields)
	}
	if !send("message_start", map[string]any{"message": map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": req.Model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": anthropicUsage(rep, false),
	}}) {
		return
	}
	index := -1
	open := "" // the type of the block at index still open ("" when none)
	closeBlock := func() bool {
		if open == "" {
			return true
		}
		if open == "thinking" && !send("content_block_delta", map[string]any{"index": index,
			"delta": map[string]any{"type": "signature_delta", "signature": "fake-signature"}}) {
			return false
		}
		open = ""
		return send("content_block_stop", map[string]any{"index": index})
	}
	openBlock := func(typ string) bool {
		if open == typ {
			return true
		}
		if !closeBlock() {
			return false
		}
		index++
		open = typ
		block := map[string]any{"type": typ, typ: ""}
		if typ == "thinking" {
			block["signature"] = ""
		}
		return send("content_block_start", map[string]any{"index": index, "content_block": block})
	}
	calls := 0
	ok := play(ctx, rep.Chunks, chunkWriter{
		call: func(c *Call) bool {
			if !closeBlock() {
				return false
			}
			index++
			calls++
			half := splitAt(c.Arguments)
			delta := func(s string) map[string]any {
				return map[string]any{"index": index, "delta": map[string]any{"type": "input_json_delta", "partial_json": s}}
			}
			return send("content_block_start", map[string]any{"index": index,
				"content_block": map[string]any{"type": "tool_use", "id": c.ID, "name": c.Name, "input": map[string]any{}}}) &&
				send("content_block_delta", delta(c.Arguments[:half])) &&
				send("content_block_delta", delta(c.Arguments[half:])) &&
				send("content_block_stop", map[string]any{"index": index})
		},
		thinking: func(s string) bool {
			return openBlock("thinking") && send("content_block_delta", map[string]any{"index": index,
				"delta": map[string]any{"type": "thinking_delta", "thinking": s}})
		},
		text: func(s string) bool {
			return openBlock("text") && send("content_block_delta", map[string]any{"index": index,
				"delta": map[string]any{"type": "text_delta", "text": s}})
		},
	})
	if !ok || rep.Cut || !closeBlock() {
		return
	}
	if !send("message_delta", map[string]any{
		"delta": map[string]any{"stop_reason": anthropicStop(rep, calls), "stop_sequence": nil},
		"usage": anthropicUsage(rep, true),
	}) {
		return
	}
	send("message_stop", map[string]any{})
}

// anthropicMessage answers a Messages request that did not ask for a
// stream with the whole message (pacing chunks are carried out, a cut
// reply sends nothing).
func anthropicMessage(ctx context.Context, w http.ResponseWriter, req *Request, rep Reply) {
	var content []any
	calls := 0
	ok := play(ctx, rep.Chunks, chunkWriter{
		call: func(c *Call) bool {
			calls++
			content = append(content, map[string]any{"type": "tool_use", "id": c.ID, "name": c.Name, "input": json.RawMessage(c.Arguments)})
			return true
		},
		thinking: func(s string) bool {
			content = append(content, map[string]any{"type": "thinking", "thinking": s, "signature": "fake-signature"})
			return true
		},
		text: func(s string) bool {
			if n := len(content); n > 0 {
				if last, ok := content[n-1].(map[string]any); ok && last["type"] == "text" {
					last["text"] = last["text"].(string) + s
					return true
				}
			}
			content = append(content, map[string]any{"type": "text", "text": s})
			return true
		},
	})
	if !ok || rep.Cut {
		return
	}
	if content == nil {
		content = []any{}
	}
	u := anthropicUsage(rep, false)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": "msg_fake", "type": "message", "role": "assistant", "model": req.Model, "content": content,
		"stop_reason": anthropicStop(rep, calls), "stop_sequence": nil, "usage": u,
	})
}

// anthropicError is the body of an error reply in the Messages form.
func anthropicError(status int) string {
	typ := "api_error"
	switch status {
	case http.StatusTooManyRequests:
		typ = "rate_limit_error"
	case http.StatusBadRequest:
		typ = "invalid_request_error"
	case 529:
		typ = "overloaded_error"
	}
	return fmt.Sprintf(`{"type":"error","error":{"type":%q,"message":"fake model error %d"}}`, typ, status)
}

// countTokens answers POST /v1/messages/count_tokens with a rough count
// (a token per 4 bytes of the request body).
func countTokens(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"input_tokens":%d}`, len(body)/4)
}
