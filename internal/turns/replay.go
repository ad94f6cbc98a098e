package turns

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/maka-agent/maka/internal/agent"
	"github.com/maka-agent/maka/internal/model"
	"github.com/maka-agent/maka/internal/sessions"
	"github.com/maka-agent/maka/internal/store"
)

// replay rebuilds the conversation before admission a from the durable
// record of the session's earlier turns (runtime.md §1.8): user messages;
// one assistant message per model step (its thinking, text and tool calls
// regrouped by step id); one tool message per settled call. A call without
// a recorded result (the host stopped while it ran) is dropped, and so is
// a result without its call.
func (c *Coordinator) replay(ctx context.Context, a admission) ([]model.Message, error) {
	var events []recordEvent
	err := c.opts.Store.Read(ctx, func(q store.Querier) error {
		rows, err := q.Query(`SELECT e.type, e.payload FROM turn_admissions a
			JOIN run_events e ON e.run_id = a.run_id
			WHERE a.session_id = ? AND a.chain_seq < ?
			ORDER BY a.chain_seq, e.seq`, a.SessionID, a.ChainSeq)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var ev recordEvent
			if err := rows.Scan(&ev.typ, &ev.payload); err != nil {
				return err
			}
			events = append(events, ev)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return buildHistory(events)
}

type recordEvent struct {
	typ     string
	payload []byte
}

// buildHistory turns record events, in order, into model messages. A
// result answers the latest unanswered call with its tool use id (ids may
// repeat across steps and turns).
func buildHistory(events []recordEvent) ([]model.Message, error) {
	type callRef struct {
		msg      *model.Message
		index    int // in msg.ToolCalls
		answered bool
	}
	var msgs []*model.Message
	steps := map[string]*model.Message{}       // step id → assistant message
	open := map[string][]*callRef{}            // tool use id → unanswered calls, oldest first
	var calls []*callRef                       // every call, in order
	stepOf := func(id string) *model.Message { // the assistant message of a step
		if m := steps[id]; m != nil {
			return m
		}
		m := &model.Message{Role: model.RoleAssistant}
		if id != "" {
			steps[id] = m
		}
		msgs = append(msgs, m)
		return m
	}
	for _, ev := range events {
		switch ev.typ {
		case sessions.EventUserMessage, sessions.EventSteeringMessage:
			var p sessions.MessagePayload
			if err := json.Unmarshal(ev.payload, &p); err != nil {
				return nil, fmt.Errorf("turns: replay %s: %w", ev.typ, err)
			}
			text := p.Text
			if ev.typ == sessions.EventSteeringMessage {
				text = agent.SteeringText(text)
			}
			msgs = append(msgs, &model.Message{Role: model.RoleUser, Text: text})
		case sessions.EventTextComplete, sessions.EventThinkingComplete:
			var p sessions.MessagePayload
			if err := json.Unmarshal(ev.payload, &p); err != nil {
				return nil, fmt.Errorf("turns: replay %s: %w", ev.typ, err)
			}
			m := stepOf(p.MessageID)
			if ev.typ == sessions.EventTextComplete {
				m.Text = p.Text
			} else {
				m.Thinking, m.ThinkingSignature = p.Text, p.Signature
			}
		case sessions.EventToolCallStarted:
			var p sessions.ToolCallStartedPayload
			if err := json.Unmarshal(ev.payload, &p); err != nil {
				return nil, fmt.Errorf("turns: replay %s: %w", ev.typ, err)
			}
			m := stepOf(p.StepID)
			args := p.Args
			if len(args) == 0 {
				args = json.RawMessage(`{}`)
			}
			m.ToolCalls = append(m.ToolCalls, model.ToolCall{ID: p.ToolUseID, Name: p.ToolName, Input: args})
			ref := &callRef{msg: m, index: len(m.ToolCalls) - 1}
			open[p.ToolUseID] = append(open[p.ToolUseID], ref)
			calls = append(calls, ref)
		case sessions.EventToolCallFinished:
			var p sessions.ToolCallFinishedPayload
			if err := json.Unmarshal(ev.payload, &p); err != nil {
				return nil, fmt.Errorf("turns: replay %s: %w", ev.typ, err)
			}
			pending := open[p.ToolUseID]
			if len(pending) == 0 {
				continue // orphan result
			}
			ref := pending[len(pending)-1]
			open[p.ToolUseID] = pending[:len(pending)-1]
			ref.answered = true
			name := p.ToolName
			if name == "" {
				name = ref.msg.ToolCalls[ref.index].Name
			}
			msgs = append(msgs, &model.Message{Role: model.RoleTool, ToolCallID: p.ToolUseID, ToolName: name, Text: p.Output, IsError: p.IsError})
		}
	}
	// Drop the calls that never got a result (the host stopped while they
	// ran), then the assistant messages left empty.
	keep := map[*model.Message][]bool{}
	for _, ref := range calls {
		k := keep[ref.msg]
		if k == nil {
			k = make([]bool, len(ref.msg.ToolCalls))
			keep[ref.msg] = k
		}
		k[ref.index] = ref.answered
	}
	out := make([]model.Message, 0, len(msgs))
	for _, m := range msgs {
		if m.Role == model.RoleAssistant {
			kept := m.ToolCalls[:0:0]
			for i, c := range m.ToolCalls {
				if keep[m][i] {
					kept = append(kept, c)
				}
			}
			m.ToolCalls = kept
			if m.Text == "" && m.Thinking == "" && len(m.ToolCalls) == 0 {
				continue
			}
		}
		out = append(out, *m)
	}
	return out, nil
}
