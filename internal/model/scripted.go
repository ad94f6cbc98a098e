package model

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
)

// Script is a canned conversation replayed by the scripted provider.
//
// Its JSON form:
//
//	{"steps": [
//	  {"events": [
//	     {"thinking": "Let me look.", "repeat": 1},
//	     {"text": "Listing files."},
//	     {"toolCall": {"id": "call_1", "name": "Bash", "input": {"command": "ls"}}},
//	     {"delayMs": 250},
//	     {"error": {"status": 429, "message": "slow down", "retryAfterMs": 1000, "times": 1}},
//	     {"echo": true}
//	   ],
//	   "finish": "tool-calls",
//	   "usage": {"input": 120, "output": 30}}
//	]}
//
// Unknown fields are rejected.
type Script struct {
	Steps []ScriptStep `json:"steps"`
}

// ScriptStep is one model step: its events in order, its finish reason
// (default: tool-calls when it has tool calls, else stop) and usage.
type ScriptStep struct {
	Events []ScriptEvent `json:"events"`
	Finish FinishReason  `json:"finish,omitempty"`
	Usage  *ScriptUsage  `json:"usage,omitempty"`
}

// ScriptUsage is the reported token usage of a step.
type ScriptUsage struct {
	Input     int64 `json:"input"`
	Output    int64 `json:"output"`
	CacheRead int64 `json:"cacheRead,omitempty"`
	Reasoning int64 `json:"reasoning,omitempty"`
}

// ScriptEvent is exactly one of: text, thinking (both may carry repeat),
// toolCall, delayMs, error (may carry times) or echo.
type ScriptEvent struct {
	Text     *string         `json:"text,omitempty"`
	Thinking *string         `json:"thinking,omitempty"`
	ToolCall *ScriptToolCall `json:"toolCall,omitempty"`
	DelayMs  *int64          `json:"delayMs,omitempty"`
	Error    *ScriptError    `json:"error,omitempty"`
	// Echo emits the text of the last user message as one text event.
	Echo *bool `json:"echo,omitempty"`
	// Repeat emits a text or thinking event that many times (default 1).
	Repeat int `json:"repeat,omitempty"`
	// Times is how many attempts of the step fail with an error event
	// (default 1); it may also be given inside the error object.
	Times int `json:"times,omitempty"`
}

// ScriptToolCall is a tool call; an empty ID gets a fresh unique one and a
// missing input is {}.
type ScriptToolCall struct {
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input,omitempty"`
}

// ScriptError fails the attempt with a *Failure. Kind defaults to what
// Classify derives from Status (unknown without a status).
type ScriptError struct {
	Status       int         `json:"status,omitempty"`
	Code         string      `json:"code,omitempty"`
	Message      string      `json:"message,omitempty"`
	RetryAfterMs *int64      `json:"retryAfterMs,omitempty"`
	Kind         FailureKind `json:"kind,omitempty"`
	Times        int         `json:"times,omitempty"`
}

// Bounds of a script.
const (
	maxScriptBytes  = 16 << 20
	maxScriptRepeat = 1_000_000
	maxScriptTimes  = 1_000_000
	maxScriptDelay  = int64(time.Hour / time.Millisecond)
)

// ParseScript decodes and validates a script. Unknown fields, trailing
// data and invalid events are errors naming the offending location.
func ParseScript(b []byte) (*Script, error) {
	if len(b) > maxScriptBytes {
		return nil, fmt.Errorf("script: larger than %d bytes", maxScriptBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var s Script
	if err := dec.Decode(&s); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("script: empty document")
		}
		return nil, fmt.Errorf("script: %s: %w", position(b, dec.InputOffset(), err), err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("script: %s: unexpected data after the script object", position(b, dec.InputOffset(), nil))
	}
	if err := s.validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// LoadScript reads and parses the script at path.
func LoadScript(path string) (*Script, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("script: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxScriptBytes+1))
	if err != nil {
		return nil, fmt.Errorf("script: %s: %w", path, err)
	}
	s, err := ParseScript(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// position renders a byte offset as "line L, column C", preferring the
// offset a syntax or type error carries.
func position(b []byte, off int64, err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		off = se.Offset
	case errors.As(err, &te):
		off = te.Offset
	}
	off = min(max(off, 0), int64(len(b)))
	line, col := 1, 1
	for _, c := range b[:off] {
		if c == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return fmt.Sprintf("line %d, column %d", line, col)
}

func (s *Script) validate() error {
	if len(s.Steps) == 0 {
		return errors.New(`script: "steps" is missing or empty`)
	}
	for i := range s.Steps {
		if err := s.Steps[i].validate(); err != nil {
			return fmt.Errorf("script: steps[%d].%w", i, err)
		}
	}
	return nil
}

func (st *ScriptStep) validate() error {
	for j := range st.Events {
		if err := st.Events[j].validate(); err != nil {
			return fmt.Errorf("events[%d]: %w", j, err)
		}
	}
	switch st.Finish {
	case "", FinishStop, FinishLength, FinishToolCalls, FinishContentFilter, FinishError, FinishOther:
	default:
		return fmt.Errorf(`finish: %q is not one of stop, length, tool-calls, content-filter, error, other`, st.Finish)
	}
	if u := st.Usage; u != nil && (u.Input < 0 || u.Output < 0 || u.CacheRead < 0 || u.Reasoning < 0) {
		return errors.New("usage: token counts must not be negative")
	}
	return nil
}

func (ev *ScriptEvent) validate() error {
	var kinds []string
	for _, k := range []struct {
		set  bool
		name string
	}{
		{ev.Text != nil, "text"}, {ev.Thinking != nil, "thinking"}, {ev.ToolCall != nil, "toolCall"},
		{ev.DelayMs != nil, "delayMs"}, {ev.Error != nil, "error"}, {ev.Echo != nil, "echo"},
	} {
		if k.set {
			kinds = append(kinds, k.name)
		}
	}
	switch len(kinds) {
	case 0:
		return errors.New("an event needs one of text, thinking, toolCall, delayMs, error, echo")
	case 1:
	default:
		return fmt.Errorf("an event has exactly one of text, thinking, toolCall, delayMs, error, echo; got %s", strings.Join(kinds, ", "))
	}
	if ev.Repeat != 0 {
		if ev.Text == nil && ev.Thinking == nil {
			return errors.New(`"repeat" applies only to text and thinking events`)
		}
		if ev.Repeat < 1 || ev.Repeat > maxScriptRepeat {
			return fmt.Errorf(`"repeat" must be between 1 and %d`, maxScriptRepeat)
		}
	}
	if ev.Times != 0 && ev.Error == nil {
		return errors.New(`"times" applies only to error events`)
	}
	switch {
	case ev.ToolCall != nil:
		tc := ev.ToolCall
		if strings.TrimSpace(tc.Name) == "" {
			return errors.New("toolCall: name is required")
		}
		in := bytes.TrimSpace(tc.Input)
		if len(in) > 0 && !bytes.Equal(in, []byte("null")) && in[0] != '{' {
			return errors.New("toolCall: input must be a JSON object")
		}
	case ev.DelayMs != nil:
		if *ev.DelayMs < 0 || *ev.DelayMs > maxScriptDelay {
			return fmt.Errorf("delayMs must be between 0 and %d", maxScriptDelay)
		}
	case ev.Echo != nil:
		if !*ev.Echo {
			return errors.New(`"echo" must be true`)
		}
	case ev.Error != nil:
		e := ev.Error
		if e.Status != 0 && (e.Status < 100 || e.Status > 599) {
			return fmt.Errorf("error: status %d is not an HTTP status", e.Status)
		}
		if e.Kind != "" && !e.Kind.Valid() {
			return fmt.Errorf("error: kind %q is not a failure kind", e.Kind)
		}
		if e.RetryAfterMs != nil && (*e.RetryAfterMs < 0 || *e.RetryAfterMs > maxScriptDelay) {
			return fmt.Errorf("error: retryAfterMs must be between 0 and %d", maxScriptDelay)
		}
		if e.Times != 0 && ev.Times != 0 {
			return errors.New(`"times" is given twice`)
		}
		if e.Times < 0 || ev.Times < 0 || max(e.Times, ev.Times) > maxScriptTimes {
			return fmt.Errorf(`"times" must be between 1 and %d`, maxScriptTimes)
		}
	}
	return nil
}

// failure is the *Failure an error event produces.
func (e *ScriptError) failure() *Failure {
	f := &Failure{Status: e.Status, Code: e.Code, Message: e.Message}
	if f.Message == "" {
		f.Message = "scripted error"
	}
	switch {
	case e.Kind != "":
		f.Kind = e.Kind
	case e.Status != 0:
		f.Kind = decideKind(errors.New(f.Message), errorDetail{status: e.Status, code: e.Code, message: f.Message})
	default:
		f.Kind = FailureUnknown
	}
	if e.RetryAfterMs != nil {
		f.RetryAfter, f.RetryAfterSet = time.Duration(*e.RetryAfterMs)*time.Millisecond, true
	}
	return f
}

// maxErrorCounters bounds the memory of error events already played.
const maxErrorCounters = 4096

type scriptErrorKey struct {
	firstUser   string
	userCount   int
	step, event int
}

type scripted struct {
	script *Script
	clock  Clock

	mu       sync.Mutex
	failures map[scriptErrorKey]int // error events played per step attempt
}

// NewScripted returns a Provider that replays s. It is stateless: the step
// played is the number of assistant messages after the last user message of
// the request (the first step of a turn plays Steps[0], the step after one
// tool round Steps[1], ...); past the end it fails with a *Failure of kind
// unknown. The only state is how often each error event has fired, so that
// an error applies to the first "times" attempts of its step (per turn,
// identified by the first user message and the number of user messages).
// Delays wait on clock (nil = SystemClock).
func NewScripted(s *Script, clock Clock) Provider {
	if clock == nil {
		clock = SystemClock
	}
	return &scripted{script: s, clock: clock, failures: map[scriptErrorKey]int{}}
}

// Stream implements Provider.
func (p *scripted) Stream(ctx context.Context, req Request, emit func(Event) error) (Finish, error) {
	idx, firstUser, lastUser, users := scriptPosition(req.Messages)
	if idx >= len(p.script.Steps) {
		return Finish{}, &Failure{Kind: FailureUnknown, Code: "script_exhausted",
			Message: fmt.Sprintf("the script has %d steps; step %d was requested", len(p.script.Steps), idx+1)}
	}
	step := &p.script.Steps[idx]
	emitText := func(k EventKind, s string, n int) error {
		if s == "" {
			return nil
		}
		for range max(n, 1) {
			if err := ctx.Err(); err != nil {
				return context.Cause(ctx)
			}
			if err := emit(Event{Kind: k, Text: s}); err != nil {
				return err
			}
		}
		return nil
	}
	hasTools := false
	for j := range step.Events {
		if err := ctx.Err(); err != nil {
			return Finish{}, context.Cause(ctx)
		}
		ev := &step.Events[j]
		var err error
		switch {
		case ev.Text != nil:
			err = emitText(EventText, *ev.Text, ev.Repeat)
		case ev.Thinking != nil:
			err = emitText(EventThinking, *ev.Thinking, ev.Repeat)
		case ev.Echo != nil:
			err = emitText(EventText, lastUser, 1)
		case ev.ToolCall != nil:
			hasTools = true
			err = emit(Event{Kind: EventToolCall, ToolCall: ev.ToolCall.call()})
		case ev.DelayMs != nil:
			select {
			case <-ctx.Done():
				err = context.Cause(ctx)
			case <-p.clock.After(time.Duration(*ev.DelayMs) * time.Millisecond):
			}
		case ev.Error != nil:
			times := max(ev.Times, ev.Error.Times, 1)
			if p.fire(scriptErrorKey{firstUser: firstUser, userCount: users, step: idx, event: j}, times) {
				return Finish{}, ev.Error.failure()
			}
		}
		if err != nil {
			return Finish{}, err
		}
	}
	fin := Finish{Reason: step.Finish}
	if fin.Reason == "" {
		fin.Reason = FinishStop
		if hasTools {
			fin.Reason = FinishToolCalls
		}
	}
	fin.RawReason = string(fin.Reason)
	if u := step.Usage; u != nil {
		fin.Usage = &Usage{InputTokens: u.Input, OutputTokens: u.Output, CacheReadTokens: u.CacheRead, ReasoningTokens: u.Reasoning}
	}
	return fin, nil
}

// fire counts one arrival at an error event and reports whether it fails
// the attempt (the first times arrivals do).
func (p *scripted) fire(k scriptErrorKey, times int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.failures[k]
	if n >= times {
		return false
	}
	if len(p.failures) >= maxErrorCounters {
		clear(p.failures)
	}
	p.failures[k] = n + 1
	return true
}

func (tc *ScriptToolCall) call() ToolCall {
	id := tc.ID
	if id == "" {
		id = "call_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	}
	in := bytes.TrimSpace(tc.Input)
	if len(in) == 0 || bytes.Equal(in, []byte("null")) {
		in = []byte("{}")
	}
	return ToolCall{ID: id, Name: tc.Name, Input: json.RawMessage(bytes.Clone(in))}
}

// scriptPosition returns the step to play (assistant messages after the
// last user message), the first and last user texts and the user count;
// notes are not user messages.
func scriptPosition(msgs []Message) (step int, firstUser, lastUser string, users int) {
	for _, m := range msgs {
		switch m.Role {
		case RoleUser:
			if m.Note {
				continue
			}
			if users == 0 {
				firstUser = m.Text
			}
			users++
			lastUser = m.Text
			step = 0
		case RoleAssistant:
			step++
		}
	}
	return step, firstUser, lastUser, users
}
