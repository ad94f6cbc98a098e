package turns

import (
	"container/list"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/maka-agent/maka/internal/agent"
	"github.com/maka-agent/maka/internal/model"
	"github.com/maka-agent/maka/internal/sessions"
	"github.com/maka-agent/maka/internal/store"
)

// replay rebuilds the conversation before admission a from the durable
// record of the session's earlier turns: user messages;
// one assistant message per model step (its thinking, text and tool calls
// regrouped by step id); one tool message per settled call. A call without
// a recorded result (the host stopped while it ran) is dropped, and so is
// a result without its call.
//
// Earlier turns are terminal and their record no longer changes, so the
// session's history is kept (histories) and only the turns admitted since
// are read: a turn's start costs what its predecessors added, not the
// whole record.
func (c *Owner) replay(ctx context.Context, a admission) ([]model.Message, error) {
	conv, err := c.replayConversation(ctx, a)
	return conv.msgs, err
}

// replayConversation is replay with what compaction needs: the position
// of each message in the record, the latest compaction record before a
// (honoured: its summary stands for everything before its keep point), and
// the last token usage the provider reported.
func (c *Owner) replayConversation(ctx context.Context, a admission) (conversation, error) {
	h := c.histories.take(a.SessionID)
	var events []recordEvent
	var comp compactionRecord
	err := c.opts.Store.Read(ctx, func(q store.Querier) error {
		events = events[:0]
		var err error
		if comp, err = latestCompaction(q, a.SessionID, a.ChainSeq); err != nil {
			return err
		}
		if h != nil && h.upto < a.ChainSeq {
			// The record it was built from must still be the session's.
			var runID string
			err := q.QueryRow(`SELECT run_id FROM turn_admissions WHERE session_id = ? AND chain_seq = ?`, a.SessionID, h.upto).Scan(&runID)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return err
			}
			if runID != h.uptoRun {
				h = nil
			}
		} else {
			h = nil
		}
		if h == nil {
			h = newHistory()
		}
		// Deltas are the bulk of a record and replay has no use for them:
		// a step's text and thinking are in their complete events.
		rows, err := q.Query(`SELECT a.chain_seq, a.run_id, e.seq, e.type, e.payload FROM turn_admissions a
			JOIN run_events e ON e.run_id = a.run_id
			WHERE a.session_id = ? AND a.chain_seq > ? AND a.chain_seq < ?
				AND e.type IN (?, ?, ?, ?, ?, ?, ?)
			ORDER BY a.chain_seq, e.seq`, a.SessionID, h.upto, a.ChainSeq,
			sessions.EventUserMessage, sessions.EventSteeringMessage, sessions.EventTextComplete,
			sessions.EventThinkingComplete, sessions.EventToolCallStarted, sessions.EventToolCallFinished, EventTokenUsage)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var ev recordEvent
			if err := rows.Scan(&ev.chainSeq, &ev.runID, &ev.seq, &ev.typ, &ev.payload); err != nil {
				return err
			}
			events = append(events, ev)
		}
		return rows.Err()
	})
	if err != nil {
		return conversation{}, err
	}
	for _, ev := range events {
		if err := h.add(ev); err != nil {
			return conversation{}, err
		}
	}
	// The history covers up to the last turn that had events; a turn
	// without any is simply read again next time.
	if n := len(events); n > 0 {
		h.upto, h.uptoRun = events[n-1].chainSeq, events[n-1].runID
	}
	conv := h.conversation(comp)
	c.histories.put(a.SessionID, h)
	return conv, nil
}

type recordEvent struct {
	chainSeq int64  // of the event's turn
	runID    string // of the event's turn
	seq      int64  // of the event in its run
	typ      string
	payload  []byte
}

// recordPos is the place of an event in a session's record: its turn's
// chain sequence, then its sequence in the turn's run.
type recordPos struct{ chain, seq int64 }

func (p recordPos) before(q recordPos) bool {
	return p.chain < q.chain || p.chain == q.chain && p.seq < q.seq
}

// history is a conversation rebuilt from record events, which can be
// extended by later events. A result answers the latest unanswered call
// with its tool use id (ids may repeat across steps and turns).
type history struct {
	msgs  []*model.Message
	pos   []recordPos                   // of each of msgs: the event that made it
	steps map[string]*model.Message     // step id → assistant message
	open  map[string][]*callRef         // tool use id → unanswered calls, oldest first
	refs  map[*model.Message][]*callRef // assistant message → its calls, in order
	// upto is the chain sequence of the last turn added (0: none), and
	// uptoRun that turn's run.
	upto    int64
	uptoRun string
	// size approximates the memory the history holds.
	size int
	// usage is the input and output tokens of the last step the provider
	// reported usage for, made in turn usageChain when the history had
	// usageAt messages.
	usage, usageChain int64
	usageAt           int
	// at is the position of the event being added.
	at recordPos
}

type callRef struct {
	msg      *model.Message
	index    int // in msg.ToolCalls
	answered bool
}

func newHistory() *history {
	return &history{steps: map[string]*model.Message{}, open: map[string][]*callRef{}, refs: map[*model.Message][]*callRef{}}
}

// stepOf returns the assistant message of a step.
func (h *history) stepOf(id string) *model.Message {
	if m := h.steps[id]; m != nil {
		return m
	}
	m := &model.Message{Role: model.RoleAssistant}
	if id != "" {
		h.steps[id] = m
	}
	h.push(m)
	return m
}

// push appends a message made by the event being added.
func (h *history) push(m *model.Message) {
	h.msgs = append(h.msgs, m)
	h.pos = append(h.pos, h.at)
}

// add applies the next record event.
func (h *history) add(ev recordEvent) error {
	h.size += len(ev.payload) + 160 // the decoded text, its message and map entries
	h.at = recordPos{ev.chainSeq, ev.seq}
	switch ev.typ {
	case EventTokenUsage:
		var u model.Usage
		if err := json.Unmarshal(ev.payload, &u); err != nil {
			return fmt.Errorf("turns: replay %s: %w", ev.typ, err)
		}
		if u.InputTokens > 0 {
			h.usage, h.usageChain, h.usageAt = u.InputTokens+max(u.OutputTokens, 0), ev.chainSeq, len(h.msgs)
		}
	case sessions.EventUserMessage, sessions.EventSteeringMessage:
		var p sessions.MessagePayload
		if err := json.Unmarshal(ev.payload, &p); err != nil {
			return fmt.Errorf("turns: replay %s: %w", ev.typ, err)
		}
		text := p.Text
		if ev.typ == sessions.EventSteeringMessage {
			text = agent.SteeringText(text)
		}
		h.push(&model.Message{Role: model.RoleUser, Text: text})
	case sessions.EventTextComplete, sessions.EventThinkingComplete:
		var p sessions.MessagePayload
		if err := json.Unmarshal(ev.payload, &p); err != nil {
			return fmt.Errorf("turns: replay %s: %w", ev.typ, err)
		}
		m := h.stepOf(p.MessageID)
		if ev.typ == sessions.EventTextComplete {
			m.Text = p.Text
		} else {
			m.Thinking, m.ThinkingSignature = p.Text, p.Signature
		}
	case sessions.EventToolCallStarted:
		var p sessions.ToolCallStartedPayload
		if err := json.Unmarshal(ev.payload, &p); err != nil {
			return fmt.Errorf("turns: replay %s: %w", ev.typ, err)
		}
		m := h.stepOf(p.StepID)
		args := p.Args
		if len(args) == 0 {
			args = json.RawMessage(`{}`)
		}
		m.ToolCalls = append(m.ToolCalls, model.ToolCall{ID: p.ToolUseID, Name: p.ToolName, Input: args})
		ref := &callRef{msg: m, index: len(m.ToolCalls) - 1}
		h.open[p.ToolUseID] = append(h.open[p.ToolUseID], ref)
		h.refs[m] = append(h.refs[m], ref)
	case sessions.EventToolCallFinished:
		var p sessions.ToolCallFinishedPayload
		if err := json.Unmarshal(ev.payload, &p); err != nil {
			return fmt.Errorf("turns: replay %s: %w", ev.typ, err)
		}
		pending := h.open[p.ToolUseID]
		if len(pending) == 0 {
			return nil // orphan result
		}
		ref := pending[len(pending)-1]
		if len(pending) == 1 {
			delete(h.open, p.ToolUseID)
		} else {
			h.open[p.ToolUseID] = pending[:len(pending)-1]
		}
		ref.answered = true
		name := p.ToolName
		if name == "" {
			name = ref.msg.ToolCalls[ref.index].Name
		}
		h.push(&model.Message{Role: model.RoleTool, ToolCallID: p.ToolUseID, ToolName: name, Text: p.Output, IsError: p.IsError})
	}
	return nil
}

// messages returns the conversation: the calls that never got a result
// are dropped, then the assistant messages left empty. The history itself
// is left as it is (a later event may still answer a call).
func (h *history) messages() []model.Message {
	out, _, _ := h.positioned()
	return out
}

// positioned is messages with the position of each, and the index in
// them from which the provider's last reported usage does not count.
func (h *history) positioned() ([]model.Message, []recordPos, int) {
	out := make([]model.Message, 0, len(h.msgs))
	pos := make([]recordPos, 0, len(h.msgs))
	usageAt := 0
	for i, m := range h.msgs {
		if i == h.usageAt {
			usageAt = len(out)
		}
		msg := *m
		if m.Role == model.RoleAssistant {
			n := len(m.ToolCalls)
			msg.ToolCalls = m.ToolCalls[:n:n] // an append by the caller copies
			for i, ref := range h.refs[m] {
				if !ref.answered {
					msg.ToolCalls = answeredCalls(m.ToolCalls, h.refs[m][i:], i)
					break
				}
			}
			if msg.Text == "" && msg.Thinking == "" && len(msg.ToolCalls) == 0 {
				continue
			}
		}
		out = append(out, msg)
		pos = append(pos, h.pos[i])
	}
	if h.usageAt >= len(h.msgs) {
		usageAt = len(out)
	}
	return out, pos, usageAt
}

// answeredCalls returns the calls that got a result: all before first,
// then those of refs (which start at index first) that are answered.
func answeredCalls(calls []model.ToolCall, refs []*callRef, first int) []model.ToolCall {
	kept := append([]model.ToolCall(nil), calls[:first]...)
	for _, ref := range refs {
		if ref.answered {
			kept = append(kept, calls[ref.index])
		}
	}
	return kept
}

// DefaultHistoryCacheBytes bounds the histories kept for replay: the
// largest cache of the host's heap (docs/benchmarks.md, "Memory": 16
// sessions of 62 turns with a 4 KiB tool result each keep about 7 MiB).
// An evicted history costs its session's next turn a full replay of the
// record (about 3 ms for 50 turns, 30 ms for 500); an archived session's
// is dropped at once.
const DefaultHistoryCacheBytes = 16 << 20

// ForgetHistory drops the kept history of sessionID (an archived session
// runs no turn; if it is unarchived, its next turn replays its record).
func (c *Owner) ForgetHistory(sessionID string) {
	c.histories.take(sessionID)
}

// historyCache keeps the rebuilt histories of the sessions that started
// turns lately, at most max bytes in all (least recently used first out).
// A history is taken out while a replay extends it, so that a failed
// replay never leaves a half-extended one behind.
type historyCache struct {
	mu      sync.Mutex
	max     int
	size    int
	order   list.List                // of cachedHistory, most recently used first
	entries map[string]*list.Element // by session
}

type cachedHistory struct {
	sessionID string
	h         *history
}

// take removes and returns the history of sessionID, or nil.
func (c *historyCache) take(sessionID string) *history {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[sessionID]
	if e == nil {
		return nil
	}
	ch := c.order.Remove(e).(cachedHistory)
	delete(c.entries, sessionID)
	c.size -= ch.h.size
	return ch.h
}

// put keeps h as the history of sessionID, evicting the least recently
// used ones beyond the bound; a history larger than the bound is dropped.
func (c *historyCache) put(sessionID string, h *history) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = make(map[string]*list.Element)
	}
	if e := c.entries[sessionID]; e != nil {
		c.size -= c.order.Remove(e).(cachedHistory).h.size
		delete(c.entries, sessionID)
	}
	if h.size > c.max {
		return
	}
	c.entries[sessionID] = c.order.PushFront(cachedHistory{sessionID, h})
	c.size += h.size
	for c.size > c.max {
		last := c.order.Back()
		ch := c.order.Remove(last).(cachedHistory)
		delete(c.entries, ch.sessionID)
		c.size -= ch.h.size
	}
}
