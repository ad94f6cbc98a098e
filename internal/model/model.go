// Package model is the host's view of a language model: one streaming
// interface (Provider) over every wire format the host speaks (OpenAI-style
// chat completions, Anthropic Messages, and the scripted replay used for
// offline demos and tests), the classification of provider failures, and
// the retry and watchdog rules of one step (StreamStep).
//
// A Provider streams exactly one step: the agent loop (internal/agent) owns
// the loop over steps and the tools.
package model

import (
	"context"
	"encoding/json"
	"time"

	"github.com/maka-agent/maka/internal/providerinfo"
)

// Role of a Message.
type Role string

// Message roles.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one entry of the conversation sent to the model.
//
// A user message has Text. An assistant message has Text, optional
// Thinking (with its provider signature) and ToolCalls, in that order. A
// tool message answers one tool call: ToolCallID, ToolName, Text (the
// result as the model should read it) and IsError.
type Message struct {
	Role              Role
	Text              string
	Thinking          string
	ThinkingSignature string
	ToolCalls         []ToolCall
	ToolCallID        string
	ToolName          string
	IsError           bool
	// Note marks a user message the host adds at the tail of one request
	// (the task ledger note): providers send it as user text, but it is
	// not a turn of the conversation (the scripted provider does not count
	// it as the user speaking).
	Note bool
}

// ToolCall is one tool call of the model. Input is the JSON object of
// arguments (as the model wrote it; it may be invalid JSON).
type ToolCall struct {
	ID    string
	Name  string
	Input json.RawMessage
}

// ToolSpec describes one tool to the model. Parameters is a JSON Schema
// object.
type ToolSpec struct {
	Name        string
	Description string
	Parameters  json.RawMessage
}

// Request is one step's request.
type Request struct {
	Model           string
	System          string
	Messages        []Message
	Tools           []ToolSpec
	MaxOutputTokens int64 // 0 = provider default
	// Effort is the reasoning effort the session asked for (EffortDefault:
	// the provider's default). Anthropic maps it to extended thinking,
	// OpenAI to reasoning_effort for reasoning models; other providers
	// ignore it.
	Effort Effort
}

// Effort is how hard a model reasons before it answers.
type Effort string

// Reasoning efforts.
const (
	EffortDefault Effort = ""
	EffortOff     Effort = "off"
	EffortLow     Effort = "low"
	EffortMedium  Effort = "medium"
	EffortHigh    Effort = "high"
)

// ParseEffort parses off, low, medium or high ("" is EffortDefault).
func ParseEffort(s string) (Effort, error) {
	if err := providerinfo.CheckEffort(s); err != nil {
		return "", err
	}
	return Effort(s), nil
}

// AnthropicThinkingBudget is the extended-thinking budget_tokens of an
// effort (0: thinking stays off).
func AnthropicThinkingBudget(e Effort) int64 {
	switch e {
	case EffortLow:
		return 1024
	case EffortMedium:
		return 4096
	case EffortHigh:
		return 16384
	}
	return 0
}

// EventKind discriminates an Event.
type EventKind int

// Event kinds, in the order a step may produce them (text, thinking and
// tool calls may interleave).
const (
	// EventText carries a chunk of assistant text in Text.
	EventText EventKind = iota + 1
	// EventThinking carries a chunk of reasoning text in Text.
	EventThinking
	// EventThinkingSignature carries the provider's signature of the
	// reasoning so far in Text (Anthropic).
	EventThinkingSignature
	// EventToolCall carries one complete tool call in ToolCall. Calls are
	// collected, never executed mid-stream.
	EventToolCall
	// EventAlive says that the stream delivered something that is not
	// output yet (a response started, a reasoning item opened, a tool
	// call's arguments grew, a keep-alive ping): it feeds StreamStep's
	// watchdog and is not passed on, and an attempt that emitted only
	// EventAlive still counts as having produced no output.
	EventAlive
)

// Event is one streamed piece of a step.
type Event struct {
	Kind     EventKind
	Text     string
	ToolCall ToolCall
}

// FinishReason is why a step ended, normalized.
type FinishReason string

// Finish reasons.
const (
	FinishStop          FinishReason = "stop"
	FinishLength        FinishReason = "length"
	FinishToolCalls     FinishReason = "tool-calls"
	FinishContentFilter FinishReason = "content-filter"
	FinishError         FinishReason = "error"
	FinishOther         FinishReason = "other"
)

// Usage is the token usage of one step (a step without usage has a nil
// *Usage). InputTokens counts every prompt token, cache reads and cache
// writes included; CacheReadTokens is the part served from the prompt
// cache; ReasoningTokens is the part of OutputTokens spent reasoning, when
// the provider reports it.
type Usage struct {
	InputTokens     int64
	OutputTokens    int64
	CacheReadTokens int64
	ReasoningTokens int64
}

// Finish is the end of a successful step.
type Finish struct {
	Reason FinishReason
	// RawReason is the provider's own finish reason string.
	RawReason string
	// Usage is nil when the provider did not report usage.
	Usage *Usage
}

// Provider streams one step of a model.
//
// Stream calls emit for every event in order, from the calling goroutine,
// and returns the step's Finish, or an error. A failure of the provider is
// a *Failure (see Classify); an error returned by emit is returned as is;
// ctx's cancellation aborts the stream and returns ctx's error. Stream must
// not retry: StreamStep owns retries.
type Provider interface {
	Stream(ctx context.Context, req Request, emit func(Event) error) (Finish, error)
}

// Clock abstracts time for retries and the watchdog (tests pass a fake).
type Clock interface {
	Now() time.Time
	// After behaves like time.After.
	After(d time.Duration) <-chan time.Time
}
