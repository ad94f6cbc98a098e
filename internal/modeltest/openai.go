// Package modeltest serves a fake model that streams real SSE as Chat
// Completions (POST /v1/chat/completions), as the Responses API (POST
// /v1/responses) and as Anthropic Messages (POST /v1/messages), for
// end-to-end tests and
// benchmarks of the host against a model it controls: each request is
// decoded into one form and handed to a function that decides the reply
// (text chunks, tool calls, gates that hold the stream, HTTP errors).
package modeltest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// Message is one message of a received request.
type Message struct {
	Role       string     `json:"role"`
	Content    any        `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

// Text returns the message's text content (string or text parts).
func (m Message) Text() string {
	switch c := m.Content.(type) {
	case string:
		return c
	case []any:
		var s string
		for _, p := range c {
			if part, ok := p.(map[string]any); ok {
				if t, ok := part["text"].(string); ok {
					s += t
				}
			}
		}
		return s
	}
	return ""
}

// ToolCall is a tool call of an assistant message.
type ToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// Request is one received request, in the Chat Completions form (a
// Responses request is translated: instructions become the system message,
// function calls join the assistant message before them, and function call
// outputs become tool messages).
type Request struct {
	// API is "chat", "responses" or "anthropic": the endpoint that
	// received it.
	API      string        `json:"-"`
	Model    string        `json:"model"`
	Messages []Message     `json:"messages"`
	Tools    []RequestTool `json:"tools"`
	Stream   bool          `json:"stream"`
	// ReasoningEffort is reasoning_effort (Chat Completions) or
	// reasoning.effort (Responses); "" when absent.
	ReasoningEffort string `json:"reasoning_effort"`
	// Body is the request body as received.
	Body []byte `json:"-"`
	// Authorization is the request's Authorization header.
	Authorization string `json:"-"`
}

// RequestTool is one tool a request offers the model.
type RequestTool struct {
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// LastUser returns the text of the last user message.
func (r *Request) LastUser() string {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == "user" {
			return r.Messages[i].Text()
		}
	}
	return ""
}

// ToolResultsSinceUser returns the tool messages after the last user
// message, in order.
func (r *Request) ToolResultsSinceUser() []Message {
	var out []Message
	for i := len(r.Messages) - 1; i >= 0 && r.Messages[i].Role != "user"; i-- {
		if r.Messages[i].Role == "tool" {
			out = append([]Message{r.Messages[i]}, out...)
		}
	}
	return out
}

// Chunk is one piece of a streamed reply: exactly one field is set.
type Chunk struct {
	Text     string
	Thinking string
	// Call is a tool call (arguments as a JSON object text), streamed in
	// two fragments.
	Call *Call
	// Wait holds the stream until the channel is closed or the request
	// ends.
	Wait <-chan struct{}
	// Flushed, if set, is closed once every chunk before it is on the
	// wire.
	Flushed chan<- struct{}
}

// Call is a tool call to stream.
type Call struct {
	ID, Name, Arguments string
}

// Reply is the answer to one request: an HTTP error (Status ≥ 400 with
// Body and optional RetryAfter), or a stream of chunks ending with
// Finish ("stop" when empty, "tool_calls" when the reply has calls).
type Reply struct {
	Status     int
	Body       string
	RetryAfter string
	Chunks     []Chunk
	Finish     string
	// Usage, when set, is sent as the final usage chunk.
	Usage *Usage
	// Cut ends the stream abruptly after the chunks (no finish, no
	// [DONE]).
	Cut bool
}

// Usage is a usage chunk's token counts.
type Usage struct{ Prompt, Completion int }

// Server is a fake chat-completions endpoint.
type Server struct {
	*httptest.Server
	handle   func(*Request) Reply
	requests atomic.Int64
	mu       sync.Mutex
	seen     []*Request
	models   []string // GET /v1/models lists them (nil: 404)
	log      func(Logged)
}

// Logged is one HTTP request the server received, whatever its path.
type Logged struct {
	Method, Path string
	// Bytes is the size of the request body.
	Bytes int
}

// SetLog makes the server call log with every request it receives,
// before answering it (from the request's goroutine).
func (s *Server) SetLog(log func(Logged)) {
	s.mu.Lock()
	s.log = log
	s.mu.Unlock()
}

// SetModels makes GET /v1/models list ids (it is not counted as a
// request).
func (s *Server) SetModels(ids ...string) {
	s.mu.Lock()
	s.models = ids
	s.mu.Unlock()
}

// New starts a server whose replies handle decides; it is closed when the
// test ends.
func New(tb interface {
	Cleanup(func())
}, handle func(*Request) Reply) *Server {
	s := &Server{handle: handle}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	tb.Cleanup(s.Close)
	return s
}

// BaseURL is the URL to configure as the connection's base URL.
func (s *Server) BaseURL() string { return s.URL + "/v1" }

// Requests returns the number of requests served.
func (s *Server) Requests() int64 { return s.requests.Load() }

// Seen returns the requests received so far.
func (s *Server) Seen() []*Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Request(nil), s.seen...)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	log := s.log
	s.mu.Unlock()
	if log != nil {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		log(Logged{Method: r.Method, Path: r.URL.Path, Bytes: len(body)})
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	if r.Method == http.MethodGet && r.URL.Path == "/v1/models" {
		s.listModels(w)
		return
	}
	s.requests.Add(1)
	var decode func([]byte) (*Request, error)
	switch r.URL.Path {
	case "/v1/chat/completions":
		decode = decodeChat
	case "/v1/responses":
		decode = decodeResponses
	case "/v1/messages":
		decode = decodeAnthropic
	case "/v1/messages/count_tokens":
		countTokens(w, r)
		return
	default:
		http.Error(w, `{"error":{"message":"not found"}}`, http.StatusNotFound)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	req, err := decode(body)
	if err != nil {
		http.Error(w, `{"error":{"message":"bad json"}}`, http.StatusBadRequest)
		return
	}
	req.Authorization = r.Header.Get("Authorization")
	req.Body = body
	s.mu.Lock()
	s.seen = append(s.seen, req)
	s.mu.Unlock()
	rep := s.handle(req)
	if rep.Status >= 400 {
		if rep.RetryAfter != "" {
			w.Header().Set("Retry-After", rep.RetryAfter)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rep.Status)
		body := rep.Body
		switch {
		case body != "":
		case req.API == "anthropic":
			body = anthropicError(rep.Status)
		default:
			body = `{"error":{"message":"fake model error ` + strconv.Itoa(rep.Status) + `","type":"server_error"}}`
		}
		io.WriteString(w, body)
		return
	}
	if req.API == "anthropic" && !req.Stream {
		anthropicMessage(r.Context(), w, req, rep)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	out := &sseWriter{w: w, fl: fl}
	switch req.API {
	case "responses":
		s.streamResponses(r.Context(), out, req, rep)
		return
	case "anthropic":
		s.streamAnthropic(r.Context(), out, req, rep)
		return
	}
	s.streamChat(r.Context(), out, req, rep)
}

func decodeChat(body []byte) (*Request, error) {
	var req Request
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, err
	}
	req.API = "chat"
	return &req, nil
}

// sseWriter writes flushed SSE events.
type sseWriter struct {
	w  io.Writer
	fl http.Flusher
}

// send writes one event (named when name is not empty) with v as its
// JSON data; false when the client has gone.
func (o *sseWriter) send(name string, v any) bool {
	b, _ := json.Marshal(v)
	var err error
	if name != "" {
		_, err = fmt.Fprintf(o.w, "event: %s\ndata: %s\n\n", name, b)
	} else {
		_, err = fmt.Fprintf(o.w, "data: %s\n\n", b)
	}
	if err != nil {
		return false
	}
	if o.fl != nil {
		o.fl.Flush()
	}
	return true
}

// streamChat answers a Chat Completions request with rep.
func (s *Server) streamChat(ctx context.Context, out *sseWriter, req *Request, rep Reply) {
	send := func(v any) bool { return out.send("", v) }
	id := "chatcmpl-" + strconv.FormatInt(s.requests.Load(), 10)
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": 1, "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}},
		}
	}
	calls := 0
	if !send(chunk(map[string]any{"role": "assistant", "content": ""}, nil)) {
		return
	}
	ok := play(ctx, rep.Chunks, chunkWriter{
		call: func(c *Call) bool {
			index, half := calls, splitAt(c.Arguments)
			calls++
			tc := func(first bool, args string) map[string]any {
				t := map[string]any{"index": index, "function": map[string]any{"arguments": args}}
				if first {
					t["id"], t["type"] = c.ID, "function"
					t["function"].(map[string]any)["name"] = c.Name
				}
				return map[string]any{"tool_calls": []any{t}}
			}
			return send(chunk(tc(true, c.Arguments[:half]), nil)) && send(chunk(tc(false, c.Arguments[half:]), nil))
		},
		thinking: func(s string) bool { return send(chunk(map[string]any{"reasoning_content": s}, nil)) },
		text:     func(s string) bool { return send(chunk(map[string]any{"content": s}, nil)) },
	})
	if !ok {
		return
	}
	if rep.Cut {
		return
	}
	finish := rep.Finish
	if finish == "" {
		finish = "stop"
		if calls > 0 {
			finish = "tool_calls"
		}
	}
	if !send(chunk(map[string]any{}, finish)) {
		return
	}
	if rep.Usage != nil {
		send(map[string]any{"id": id, "object": "chat.completion.chunk", "created": 1, "model": req.Model, "choices": []any{},
			"usage": map[string]any{"prompt_tokens": rep.Usage.Prompt, "completion_tokens": rep.Usage.Completion,
				"total_tokens": rep.Usage.Prompt + rep.Usage.Completion}})
	}
	io.WriteString(out.w, "data: [DONE]\n\n")
	if out.fl != nil {
		out.fl.Flush()
	}
}

// splitAt is where a call's arguments are split into two deltas: about
// half way, never inside a character.
func splitAt(args string) int {
	half := len(args) / 2
	for half > 0 && !utf8.RuneStart(args[half]) {
		half--
	}
	return half
}

// chunkWriter writes the content chunks of a reply in one wire format;
// each returns false when the client has gone.
type chunkWriter struct {
	text, thinking func(string) bool
	call           func(*Call) bool
}

// play writes chunks in order with w, carrying out the pacing ones (Wait,
// Flushed) itself; false when the request ended.
func play(ctx context.Context, chunks []Chunk, w chunkWriter) bool {
	for _, c := range chunks {
		ok := true
		switch {
		case c.Wait != nil:
			select {
			case <-c.Wait:
			case <-ctx.Done():
				ok = false
			}
		case c.Flushed != nil:
			close(c.Flushed)
		case c.Call != nil:
			ok = w.call(c.Call)
		case c.Thinking != "":
			ok = w.thinking(c.Thinking)
		default:
			ok = w.text(c.Text)
		}
		if !ok {
			return false
		}
	}
	return true
}

func (s *Server) listModels(w http.ResponseWriter) {
	s.mu.Lock()
	ids := s.models
	s.mu.Unlock()
	if ids == nil {
		http.Error(w, `{"error":{"message":"not found"}}`, http.StatusNotFound)
		return
	}
	type model struct {
		ID string `json:"id"`
	}
	list := struct {
		Data []model `json:"data"`
	}{Data: []model{}}
	for _, id := range ids {
		list.Data = append(list.Data, model{ID: id})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(list)
}
