package turns

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/maka-agent/maka/internal/failpoint"
	"sync"
	"time"

	"github.com/maka-agent/maka/internal/agent"
	"github.com/maka-agent/maka/internal/continuity"
	"github.com/maka-agent/maka/internal/interactions"
	"github.com/maka-agent/maka/internal/model"
	"github.com/maka-agent/maka/internal/sessions"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/protocol"
)

// recorder is the agent.Sink of one run: every event is written to the
// run's record (when it has a durable meaning) before it is published to
// session continuity.
//
// Writes are batched by what they guard. A tool call's start and result
// are written (fsynced) before they are published and before the call
// runs or the loop goes on. Streamed text is published at once and queued;
// final texts, token usage and permission decisions are queued too. The
// queue is written with the next guarded write, at least every
// Options.DeltaFlush while the turn streams, and with the terminal fact,
// in order; so a crash keeps what was streamed up to the last batch, and a
// turn that calls no tool costs two durable writes: its start and its
// terminal fact.
type recorder struct {
	c            *Owner
	a            admission
	model        string
	connection   string
	interactions *interactions.Run
	// window is the model's context window in tokens (0: unresolved),
	// for the turn_usage notices.
	window int64

	mu        sync.Mutex // orders seq assignment with writes
	seq       int64
	pending   []sessions.RunEvent // streamed text not yet written
	lastFlush time.Time
	// context is the conversation's size after the last step that
	// reported usage (its input and output tokens).
	context int64
}

func newRecorder(c *Owner, a admission) *recorder {
	return &recorder{c: c, a: a, lastFlush: c.opts.Now()}
}

// Emit implements agent.Sink.
func (r *recorder) Emit(ctx context.Context, ev agent.Event) error {
	switch ev.Type {
	case agent.TextDelta, agent.ThinkingDelta:
		typ := sessions.EventTextDelta
		if ev.Type == agent.ThinkingDelta {
			typ = sessions.EventThinkingDelta
		}
		r.publish(continuity.Event{Type: ev.Type, TurnID: r.a.TurnID, MessageID: ev.MessageID, Text: ev.Text})
		failpoint.Hit(failpoint.TurnStreaming)
		return r.buffer(ctx, ev.TS, typ, sessions.MessagePayload{TurnID: r.a.TurnID, MessageID: ev.MessageID, Text: ev.Text})
	case agent.TextComplete:
		return r.buffer(ctx, ev.TS, sessions.EventTextComplete, sessions.MessagePayload{TurnID: r.a.TurnID, MessageID: ev.MessageID, Text: ev.Text})
	case agent.ThinkingComplete:
		return r.buffer(ctx, ev.TS, sessions.EventThinkingComplete, sessions.MessagePayload{
			TurnID: r.a.TurnID, MessageID: ev.MessageID, Text: ev.Text, Signature: ev.Signature})
	case agent.SteeringMessageEvent:
		// Durable before the model sees it, and the proof of its delivery.
		p := struct {
			sessions.MessagePayload
			Content *protocol.MessageContent `json:"content,omitempty"`
		}{sessions.MessagePayload{TurnID: r.a.TurnID, MessageID: ev.MessageID, Text: ev.Text}, ev.Content}
		return r.write(ctx, ev.TS, sessions.EventSteeringMessage, p)
	case agent.ToolStart:
		if err := r.write(ctx, ev.TS, sessions.EventToolCallStarted, sessions.ToolCallStartedPayload{
			TurnID: r.a.TurnID, ToolUseID: ev.ToolUseID, ToolName: ev.ToolName, Args: validArgs(ev.Args), StepID: ev.StepID,
		}); err != nil {
			return err
		}
		failpoint.Hit(failpoint.ToolStarted)
		r.publishTool(ev, protocol.SessionToolEvent{ToolName: ev.ToolName, ActivityKind: ev.ActivityKind, StepID: ev.StepID, DisplayName: ev.Summary})
	case agent.ToolOutputDelta:
		r.publishTool(ev, protocol.SessionToolEvent{Seq: ev.Seq, Stream: ev.Stream, Chunk: ev.Chunk, CreatedAt: ev.TS})
	case agent.ToolResult:
		d := ev.DurationMs
		p := sessions.ToolCallFinishedPayload{TurnID: r.a.TurnID, ToolUseID: ev.ToolUseID, ToolName: ev.ToolName, DurationMs: &d}
		status := "completed"
		if ev.Result != nil {
			p.IsError, p.Output = ev.Result.IsError, ev.Result.ModelText
			if p.Output == "" {
				p.Output = string(ev.Result.Content)
			}
			p.Content = validArgs(ev.Result.Content)
			if ev.Result.IsError {
				status = "errored"
			}
		}
		if err := r.write(ctx, ev.TS, sessions.EventToolCallFinished, p); err != nil {
			return err
		}
		failpoint.Hit(failpoint.ToolFinished)
		r.publishTool(ev, protocol.SessionToolEvent{Status: status, DurationMs: &d})
	case agent.TokenUsage:
		if ev.Usage != nil {
			return r.buffer(ctx, ev.TS, EventTokenUsage, ev.Usage)
		}
	case agent.StepEnd:
		if ev.Finish != nil {
			r.publishUsage(stepStopReason(*ev.Finish, ev.Calls), false, ev.Finish.Usage, ev.Usage)
		}
	case agent.PermissionDenied:
		if ev.Decision != nil {
			return r.buffer(ctx, ev.TS, EventPermissionDecision, struct {
				TurnID    string `json:"turnId"`
				ToolUseID string `json:"toolUseId"`
				ToolName  string `json:"toolName"`
				*agent.Decision
			}{r.a.TurnID, ev.ToolUseID, ev.ToolName, ev.Decision})
		}
	case agent.ProviderRetry:
		if ev.Retry != nil {
			r.c.log.Info("provider retry", "session", r.a.SessionID, "turn", r.a.TurnID,
				"phase", ev.Retry.Phase, "attempt", ev.Retry.Attempt, "delay", ev.Retry.Delay, "reason", ev.Retry.Reason,
				"error", ev.Retry.Message)
			if ev.Retry.Phase == model.RetryScheduled {
				r.c.cont.PublishNotice(r.a.SessionID, retryNotice(r.a.TurnID, *ev.Retry))
			}
		}
	case agent.ProviderFailure:
		r.c.log.Info("model request failed", "session", r.a.SessionID, "turn", r.a.TurnID, "error", ev.Text)
		r.c.cont.PublishNotice(r.a.SessionID, protocol.SessionNotice{Kind: protocol.NoticeModelFailed, TurnID: r.a.TurnID,
			Message: noticeText(ev.Text)})
	}
	return nil
}

// publishUsage sends the turn_usage notice of a step's end (final false,
// step is that step's usage) or of the turn's (final true): the turn's
// usage so far (total; nil when unknown) and the stop reason.
func (r *recorder) publishUsage(reason string, final bool, step, total *model.Usage) {
	r.mu.Lock()
	if step != nil {
		r.context = wireCount(wireCount(step.InputTokens) + wireCount(step.OutputTokens))
	}
	ctxTokens := r.context
	r.mu.Unlock()
	n := protocol.SessionNotice{Kind: protocol.NoticeTurnUsage, TurnID: r.a.TurnID, StopReason: reason, Final: final,
		ContextTokens: wireCount(ctxTokens), ContextWindow: wireCount(r.window)}
	if total != nil {
		n.HasUsage = true
		n.Usage = wireUsage(*total)
	}
	n.Message = noticeText(usageText(n))
	r.c.cont.PublishNotice(r.a.SessionID, n)
}

// wireUsage is u within the notice's bounds: no negative count, cache
// reads within the input and reasoning within the output.
func wireUsage(u model.Usage) protocol.TokenUsage {
	w := protocol.TokenUsage{InputTokens: wireCount(u.InputTokens), OutputTokens: wireCount(u.OutputTokens)}
	w.CacheReadTokens = min(wireCount(u.CacheReadTokens), w.InputTokens)
	w.ReasoningTokens = min(wireCount(u.ReasoningTokens), w.OutputTokens)
	return w
}

// wireCount is a provider-reported count within the wire's Count range
// (0..2^53-1): a larger one would make every notice subscriber's client
// refuse the frame and drop its connection.
func wireCount(n int64) int64 { return min(max(n, 0), protocol.MaxSafeInteger) }

// usageText is the one-line summary of a turn_usage notice:
// "12300 in (12000 cached) · 845 out · end_turn".
func usageText(n protocol.SessionNotice) string {
	if !n.HasUsage {
		return "usage unknown · " + n.StopReason
	}
	s := fmt.Sprintf("%d in", n.Usage.InputTokens)
	if n.Usage.CacheReadTokens > 0 {
		s += fmt.Sprintf(" (%d cached)", n.Usage.CacheReadTokens)
	}
	s += fmt.Sprintf(" · %d out", n.Usage.OutputTokens)
	if n.Usage.ReasoningTokens > 0 {
		s += fmt.Sprintf(" (%d reasoning)", n.Usage.ReasoningTokens)
	}
	return s + " · " + n.StopReason
}

// stepStopReason is the stop reason of a step that ended with fin and
// asked for calls tool calls.
func stepStopReason(fin model.Finish, calls int) string {
	if calls > 0 {
		return protocol.StopReasonToolUse
	}
	switch fin.Reason {
	case model.FinishStop:
		return protocol.StopReasonEndTurn
	case model.FinishLength:
		return protocol.StopReasonMaxTokens
	case model.FinishContentFilter:
		return protocol.StopReasonContentFilter
	}
	return protocol.StopReasonOther
}

// turnStopReason is the stop reason of a turn that ended with out.
func turnStopReason(out agent.Outcome) string {
	switch {
	case out.Status == agent.StatusCancelled:
		return protocol.StopReasonCancelled
	case out.Status == agent.StatusFailed && out.FailureClass == agent.FailureContentFilter:
		return protocol.StopReasonContentFilter
	case out.Status == agent.StatusFailed:
		return protocol.StopReasonFailed
	case out.StopReason == agent.StopEndTurn:
		return protocol.StopReasonEndTurn
	case out.StopReason == agent.StopMaxTokens:
		return protocol.StopReasonMaxTokens
	}
	return protocol.StopReasonOther
}

// retryNotice is the model_retry notice of a scheduled retry.
func retryNotice(turnID string, info model.RetryInfo) protocol.SessionNotice {
	return protocol.SessionNotice{Kind: protocol.NoticeModelRetry, TurnID: turnID, Message: noticeText(info.String()),
		Attempt: clampAttempt(info.Attempt), MaxAttempts: clampAttempt(max(info.MaxAttempts, info.Attempt)), DelayMs: info.Delay.Milliseconds()}
}

// clampAttempt keeps an attempt number within the notice's bounds.
func clampAttempt(n int) int64 {
	return int64(min(max(n, 2), protocol.MaxNoticeAttempts))
}

// noticeText bounds a notice's message.
func noticeText(s string) string {
	if len(s) > protocol.SessionNoticeMessageMaxBytes {
		s = protocol.TruncateUTF8(s, protocol.SessionNoticeMessageMaxBytes-len("…")) + "…"
	}
	return s
}

// validArgs returns raw if it is valid JSON, else nil (a model may write
// broken arguments; the record keeps only JSON).
func validArgs(raw []byte) []byte {
	if len(raw) == 0 {
		return nil
	}
	if !json.Valid(raw) {
		return nil
	}
	return raw
}

// buffer queues an event and writes the queue once Options.DeltaFlush
// has passed since the last write.
func (r *recorder) buffer(ctx context.Context, ts int64, typ string, payload any) error {
	r.mu.Lock()
	r.seq++
	ev, err := sessions.NewRunEvent(r.seq, ts, typ, payload)
	if err != nil {
		r.mu.Unlock()
		return err
	}
	r.pending = append(r.pending, ev)
	due := r.c.opts.Now().Sub(r.lastFlush) >= r.c.opts.DeltaFlush
	r.mu.Unlock()
	if !due {
		return nil
	}
	return r.flush(ctx)
}

// flush writes the queued events.
func (r *recorder) flush(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.appendLocked(ctx, nil)
}

// write appends one event (after the queued ones) durably.
func (r *recorder) write(ctx context.Context, ts int64, typ string, payload any) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	ev, err := sessions.NewRunEvent(r.seq, ts, typ, payload)
	if err != nil {
		return err
	}
	return r.appendLocked(ctx, &ev)
}

// takeTerminal returns the queued events followed by the run's terminal
// event, numbered after them, for the terminal write.
func (r *recorder) takeTerminal(ts int64, payload terminalPayload) ([]sessions.RunEvent, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	ev, err := sessions.NewRunEvent(r.seq, ts, EventTurnTerminal, payload)
	if err != nil {
		return nil, err
	}
	batch := append(r.pending, ev)
	r.pending = nil
	return batch, nil
}

func (r *recorder) appendLocked(ctx context.Context, ev *sessions.RunEvent) error {
	batch := r.pending
	if ev != nil {
		batch = append(batch, *ev)
	}
	if len(batch) == 0 {
		return nil
	}
	// A stopped turn still records what it produced.
	err := r.c.opts.Store.Write(context.WithoutCancel(ctx), func(tx *store.Tx) error {
		_, err := sessions.AppendRunEventsTx(tx, r.a.SessionID, r.a.RunID, batch)
		return err
	})
	if err != nil {
		return err
	}
	r.pending = r.pending[:0]
	r.lastFlush = r.c.opts.Now()
	return nil
}

func (r *recorder) publish(ev continuity.Event) {
	if err := r.c.cont.AcceptRuntimeEvent(r.a.SessionID, r.a.RunID, ev); err != nil && !errors.Is(err, continuity.ErrClosed) {
		r.c.log.Error("live event rejected", "session", r.a.SessionID, "turn", r.a.TurnID, "type", ev.Type, "err", err)
	}
}

func (r *recorder) publishTool(ev agent.Event, tool protocol.SessionToolEvent) {
	tool.Type, tool.ID, tool.TurnID, tool.TS, tool.ToolUseID = ev.Type, ev.ID, r.a.TurnID, ev.TS, ev.ToolUseID
	r.publish(continuity.Event{Type: ev.Type, TurnID: r.a.TurnID, Tool: tool})
}
