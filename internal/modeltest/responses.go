package modeltest

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
)

// responsesBody is the part of a Responses API request the fake reads.
type responsesBody struct {
	Model        string `json:"model"`
	Instructions string `json:"instructions"`
	Stream       bool   `json:"stream"`
	Reasoning    struct {
		Effort string `json:"effort"`
	} `json:"reasoning"`
	Input []struct {
		Type      string `json:"type"`
		Role      string `json:"role"`
		Content   any    `json:"content"`
		CallID    string `json:"call_id"`
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
		Output    any    `json:"output"`
		Input     string `json:"input"`
		// Action is a local_shell_call's command.
		Action json.RawMessage `json:"action"`
	} `json:"input"`
	Tools []struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"tools"`
}

// decodeResponses translates a Responses request into the Chat
// Completions form of Request.
func decodeResponses(body []byte) (*Request, error) {
	var b responsesBody
	if err := json.Unmarshal(body, &b); err != nil {
		return nil, err
	}
	req := &Request{API: "responses", Model: b.Model, Stream: b.Stream, ReasoningEffort: b.Reasoning.Effort}
	if b.Instructions != "" {
		req.Messages = append(req.Messages, Message{Role: "system", Content: b.Instructions})
	}
	for _, it := range b.Input {
		switch {
		case it.Type == "function_call" || it.Type == "custom_tool_call" || it.Type == "local_shell_call":
			tc := ToolCall{ID: it.CallID, Type: "function"}
			tc.Function.Name, tc.Function.Arguments = it.Name, it.Arguments
			switch it.Type {
			case "custom_tool_call":
				tc.Function.Arguments = it.Input
			case "local_shell_call":
				tc.Function.Name, tc.Function.Arguments = "local_shell", string(it.Action)
			}
			n := len(req.Messages)
			if n == 0 || req.Messages[n-1].Role != "assistant" {
				req.Messages = append(req.Messages, Message{Role: "assistant"})
				n++
			}
			req.Messages[n-1].ToolCalls = append(req.Messages[n-1].ToolCalls, tc)
		case it.Type == "reasoning":
			// the fake's own reasoning, sent back: nothing to read
		case it.Type == "function_call_output" || it.Type == "custom_tool_call_output" || it.Type == "local_shell_call_output":
			req.Messages = append(req.Messages, Message{Role: "tool", Content: it.Output, ToolCallID: it.CallID})
		case it.Type == "" || it.Type == "message":
			req.Messages = append(req.Messages, Message{Role: it.Role, Content: it.Content})
		default:
			return nil, fmt.Errorf("unknown input item type %q", it.Type)
		}
	}
	for _, t := range b.Tools {
		var tool RequestTool
		tool.Function.Name, tool.Function.Description, tool.Function.Parameters = t.Name, t.Description, t.Parameters
		req.Tools = append(req.Tools, tool)
	}
	return req, nil
}

// streamResponses answers a Responses request with rep: reasoning and
// message items for thinking and text, a function_call item per call
// (arguments in two deltas), then response.completed (or
// response.incomplete for the "length" finish).
func (s *Server) streamResponses(ctx context.Context, out *sseWriter, req *Request, rep Reply) {
	id := "resp_" + strconv.FormatInt(s.requests.Load(), 10)
	seq := 0
	send := func(typ string, fields map[string]any) bool {
		fields["type"], fields["sequence_number"] = typ, seq
		seq++
		return out.send(typ, fields)
	}
	response := func(status string) map[string]any {
		return map[string]any{"id": id, "object": "response", "created_at": 1, "status": status, "model": req.Model, "output": []any{}}
	}
	if !send("response.created", map[string]any{"response": response("in_progress")}) {
		return
	}
	index := -1
	open := "" // the type of the item at index still open ("" when none)
	text := "" // the text of the open message item
	closeItem := func() bool {
		if open == "" {
			return true
		}
		item := map[string]any{"id": fmt.Sprintf("item_%d", index), "type": open}
		if open == "message" {
			item["role"], item["status"] = "assistant", "completed"
			item["content"] = []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}
		}
		open, text = "", ""
		return send("response.output_item.done", map[string]any{"output_index": index, "item": item})
	}
	openItem := func(typ string) bool {
		if open == typ {
			return true
		}
		if !closeItem() {
			return false
		}
		index++
		open = typ
		item := map[string]any{"id": fmt.Sprintf("item_%d", index), "type": typ}
		if typ == "message" {
			item["role"], item["status"], item["content"] = "assistant", "in_progress", []any{}
		}
		return send("response.output_item.added", map[string]any{"output_index": index, "item": item})
	}
	itemID := func() string { return fmt.Sprintf("item_%d", index) }
	ok := play(ctx, rep.Chunks, chunkWriter{
		call: func(c *Call) bool {
			if !closeItem() {
				return false
			}
			index++
			item := map[string]any{"id": itemID(), "type": "function_call", "call_id": c.ID, "name": c.Name, "arguments": ""}
			half := splitAt(c.Arguments)
			ok := send("response.output_item.added", map[string]any{"output_index": index, "item": item}) &&
				send("response.function_call_arguments.delta", map[string]any{"item_id": itemID(), "output_index": index, "delta": c.Arguments[:half]}) &&
				send("response.function_call_arguments.delta", map[string]any{"item_id": itemID(), "output_index": index, "delta": c.Arguments[half:]}) &&
				send("response.function_call_arguments.done", map[string]any{"item_id": itemID(), "output_index": index, "arguments": c.Arguments})
			item["arguments"] = c.Arguments
			return ok && send("response.output_item.done", map[string]any{"output_index": index, "item": item})
		},
		thinking: func(s string) bool {
			return openItem("reasoning") && send("response.reasoning_summary_text.delta",
				map[string]any{"item_id": itemID(), "output_index": index, "summary_index": 0, "delta": s})
		},
		text: func(s string) bool {
			if !openItem("message") {
				return false
			}
			text += s
			return send("response.output_text.delta",
				map[string]any{"item_id": itemID(), "output_index": index, "content_index": 0, "delta": s})
		},
	})
	if !ok {
		return
	}
	if rep.Cut || !closeItem() {
		return
	}
	final, status := "response.completed", "completed"
	r := response(status)
	if rep.Finish == "length" {
		final, status = "response.incomplete", "incomplete"
		r = response(status)
		r["incomplete_details"] = map[string]any{"reason": "max_output_tokens"}
	}
	if rep.Usage != nil {
		r["usage"] = map[string]any{"input_tokens": rep.Usage.Prompt, "output_tokens": rep.Usage.Completion,
			"total_tokens":         rep.Usage.Prompt + rep.Usage.Completion,
			"input_tokens_details": map[string]any{"cached_tokens": 0}, "output_tokens_details": map[string]any{"reasoning_tokens": 0}}
	}
	send(final, map[string]any{"response": r})
}
