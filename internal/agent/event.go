// Package agent runs one turn of an agent: it streams model steps, settles
// the tool calls of each step concurrently, and continues until a step has
// no tool calls, the step cap, a stop, or a failure. Every
// event goes through a Sink, which persists it before anyone sees it; the
// turn ends with exactly one Outcome.
//
// The loop owns no storage and no connection: the host's turn coordinator
// (internal/turns) supplies the history, the Sink and the stop signal.
package agent

import (
	"context"
	"encoding/json"

	"github.com/maka-agent/maka/internal/model"
	"github.com/maka-agent/maka/internal/tools"
	"github.com/maka-agent/maka/protocol"
)

// Event types.
const (
	TextDelta        = "text_delta"
	ThinkingDelta    = "thinking_delta"
	TextComplete     = "text_complete"
	ThinkingComplete = "thinking_complete"
	ToolStart        = "tool_start"
	ToolOutputDelta  = "tool_output_delta"
	ToolResult       = "tool_result"
	ProviderRetry    = "provider_retry"
	// ProviderFailure says, before the turn's outcome, that the model
	// request failed for good; Text is what happened
	// (model.Failure.Describe). Live only.
	ProviderFailure = "provider_failure"
	TokenUsage      = "token_usage"
	// StepEnd says that a model step ended: Finish is the step's (its
	// Usage the step's own), Calls the number of tool calls it asked
	// for, Usage the turn's usage so far (nil when a step reported none).
	// Live only.
	StepEnd          = "step_end"
	PermissionDenied = "permission_decision"
	// SteeringMessageEvent records a steering message delivered to the
	// turn; the Sink must make it durable before Emit returns.
	SteeringMessageEvent = "steering_message"
)

// Event is one event of a running turn. Type selects the fields that are
// set; ID and TS are set on every event.
type Event struct {
	Type string
	ID   string
	TS   int64 // Unix milliseconds

	// Text events: MessageID is the step id; Text the delta or final text.
	MessageID string
	Text      string
	Signature string // thinking_complete

	// Tool events.
	StepID       string
	ToolUseID    string
	ToolName     string
	ActivityKind string
	// Summary is tool_start's one-line, secret-free description of the
	// call (tools.Summary), shown as the event's display name.
	Summary    string
	Args       json.RawMessage // tool_start
	Seq        int64           // tool_output_delta, from 1 per call
	Stream     string          // tool_output_delta
	Chunk      string          // tool_output_delta
	Result     *tools.Result   // tool_result
	DurationMs int64           // tool_result

	// Decision is set on permission_decision: how a permission check
	// ended (allow, deny) and why.
	Decision *Decision

	// Content is the full content of a steering_message.
	Content *protocol.MessageContent

	Retry *model.RetryInfo // provider_retry
	Usage *model.Usage     // token_usage, step_end

	Finish *model.Finish // step_end
	Calls  int           // step_end
}

// Decision records the permission decision of one tool call.
type Decision struct {
	Decision string // "allow" or "deny"
	Category string
	Reason   string
	By       string // "rule", "mode", "user", "remembered", "no_approver"
}

// Sink receives a turn's events. Emit persists what must be durable and
// then publishes the event; an error ends the turn as failed (nothing is
// published for an event that could not be persisted). Emit is called
// concurrently by the tool calls of one step, and in order for the events
// of one message or one call.
type Sink interface {
	Emit(ctx context.Context, ev Event) error
}

// Turn outcome statuses.
const (
	StatusCompleted = "completed"
	StatusFailed    = "failed"
	StatusCancelled = "cancelled"
)

// Stop reasons.
const (
	StopEndTurn   = "end_turn"
	StopUserStop  = "user_stop"
	StopError     = "error"
	StopStepLimit = "step_limit"
	StopMaxTokens = "max_tokens"
)

// Outcome is how a turn ended; a turn has exactly one.
type Outcome struct {
	Status       string
	StopReason   string
	FailureClass string // failed only
	AbortSource  string // cancelled only
	Message      string // failed only: what went wrong, safe to show
	Usage        *model.Usage
}

// StopCause is the cancellation cause that stops a turn (as opposed to a
// failure): pass it to the cancel function of the turn's context.
type StopCause struct{ Source string }

func (s *StopCause) Error() string { return "turn stopped by " + s.Source }
