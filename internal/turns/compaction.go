package turns

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/lane"
	"github.com/maka-agent/maka/internal/model"
	"github.com/maka-agent/maka/internal/sessions"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/internal/tools"
	"github.com/maka-agent/maka/protocol"
)

// Compaction (docs/architecture.md, "The path of a turn"): when a turn's
// request would exceed compactTrigger of the model's context window, the
// same model is asked, in a request of its own without tools, to summarise
// the oldest part of the conversation; the recent messages that fit in
// compactKeep of the window stay as they are (cut at a user message, so
// that tool calls and their results stay together). The summary is
// recorded in context_compactions (this package's table); the transcript
// and the run record keep every original message, and replay sends the
// latest summary in place of everything before its keep point.

// Shares of the context window, in percent.
const (
	compactTrigger = 80
	compactKeep    = 40
	// summaryInput bounds the transcript a summary request carries, and
	// summaryOutput the summary.
	summaryInput  = 60
	summaryOutput = 15
)

// summaryMaxOutputTokens caps the summary's output tokens below what
// common models accept as a request's maximum.
const summaryMaxOutputTokens = 4096

// bytesPerToken estimates tokens where the provider reported none.
const bytesPerToken = 3

// SummaryInstruction ends the request that asks for a summary.
const SummaryInstruction = "Write a summary of the conversation above so that it can be continued from the summary alone: " +
	"the user's goals and requests, decisions made, files and commands involved with their important results, " +
	"and what remains to be done. Answer with the summary only."

// summarySystem is the system prompt of a summary request.
const summarySystem = "You summarise a conversation between a user and a coding assistant for the assistant's later use."

// SummaryNote opens the message that carries a compaction's summary.
const SummaryNote = "[Summary of the earlier conversation, which was compacted to fit the model's context window:]\n\n"

// summaryEnd separates the summary from the first kept message.
const summaryEnd = "\n\n[End of the summary. The conversation continues:]\n\n"

// summaryTimeout bounds one summary request, retries included.
const summaryTimeout = 3 * time.Minute

// MessageCompactFailed answers a session.compact whose summary could not
// be made.
const MessageCompactFailed = "The model could not summarise the conversation"

// errRecordCompaction reports a summary that was made but not recorded.
var errRecordCompaction = errors.New("turns: the compaction could not be recorded")

// CompactionMigration is schema version 7: the compaction records of
// sessions. keep_chain_seq / keep_event_seq is the keep point: the record
// position of the first message kept as it is (a user message, or the
// start of a turn when everything before it was summarised);
// usage_from_chain_seq is the first turn whose reported token usage
// measured the compacted conversation.
var CompactionMigration = store.Migration{Version: 7, Up: func(tx *sql.Tx) error {
	_, err := tx.Exec(`CREATE TABLE context_compactions (
		session_id           TEXT NOT NULL,
		seq                  INTEGER NOT NULL,
		created_at           INTEGER NOT NULL,
		turn_id              TEXT NULL,
		keep_chain_seq       INTEGER NOT NULL,
		keep_event_seq       INTEGER NOT NULL,
		usage_from_chain_seq INTEGER NOT NULL,
		summary              TEXT NOT NULL,
		before_tokens        INTEGER NOT NULL,
		after_tokens         INTEGER NOT NULL,
		PRIMARY KEY (session_id, seq)
	)`)
	return err
}}

// compactionRecord is one row of context_compactions (found: there is one).
type compactionRecord struct {
	found         bool
	keep          recordPos
	usageFrom     int64
	summary       string
	before, after int64
}

// latestCompaction reads the latest compaction of sessionID whose keep
// point is not after turn chainSeq.
func latestCompaction(q store.Querier, sessionID string, chainSeq int64) (compactionRecord, error) {
	r := compactionRecord{found: true}
	err := q.QueryRow(`SELECT keep_chain_seq, keep_event_seq, usage_from_chain_seq, summary, before_tokens, after_tokens
		FROM context_compactions WHERE session_id = ? AND keep_chain_seq <= ? ORDER BY seq DESC LIMIT 1`, sessionID, chainSeq).
		Scan(&r.keep.chain, &r.keep.seq, &r.usageFrom, &r.summary, &r.before, &r.after)
	if errors.Is(err, sql.ErrNoRows) {
		return compactionRecord{}, nil
	}
	return r, err
}

// insertCompaction records r as the latest compaction of sessionID.
func insertCompaction(tx *store.Tx, sessionID, turnID string, at int64, r compactionRecord) error {
	var turn any
	if turnID != "" {
		turn = turnID
	}
	_, err := tx.Exec(`INSERT INTO context_compactions (session_id, seq, created_at, turn_id, keep_chain_seq, keep_event_seq,
			usage_from_chain_seq, summary, before_tokens, after_tokens)
		VALUES (?, COALESCE((SELECT MAX(seq) FROM context_compactions WHERE session_id = ?), 0) + 1, ?, ?, ?, ?, ?, ?, ?, ?)`,
		sessionID, sessionID, at, turn, r.keep.chain, r.keep.seq, r.usageFrom, r.summary, r.before, r.after)
	return err
}

// conversation is a replayed history as the model is sent it.
type conversation struct {
	msgs []model.Message
	pos  []recordPos // of each of msgs (the summary's own message: the keep point)
	// summarized: msgs[0] carries a compaction's summary.
	summarized bool
	// usage is the tokens the provider reported for a request that held
	// msgs[:usageAt] (0: none that measured this conversation).
	usage   int64
	usageAt int
}

// conversation builds what the model is sent from the history and the
// latest compaction: the summary, then the messages from its keep point.
func (h *history) conversation(comp compactionRecord) conversation {
	msgs, pos, usageAt := h.positioned()
	usage := h.usage
	if !comp.found {
		return conversation{msgs: msgs, pos: pos, usage: usage, usageAt: usageAt}
	}
	if h.usageChain < comp.usageFrom {
		usage = 0
	}
	start := 0
	for start < len(msgs) && pos[start].before(comp.keep) {
		start++
	}
	if usageAt < start {
		usage = 0
	}
	// A result whose call was summarised has nothing to answer.
	calls := map[string]bool{}
	out := conversation{msgs: make([]model.Message, 0, len(msgs)-start+1), pos: make([]recordPos, 0, len(msgs)-start+1), summarized: true}
	for i := start; i < len(msgs); i++ {
		if i == usageAt {
			out.usageAt = len(out.msgs)
		}
		m := msgs[i]
		for _, tc := range m.ToolCalls {
			calls[tc.ID] = true
		}
		if m.Role == model.RoleTool && !calls[m.ToolCallID] {
			continue
		}
		out.msgs = append(out.msgs, m)
		out.pos = append(out.pos, pos[i])
	}
	if usageAt >= len(msgs) {
		out.usageAt = len(out.msgs)
	}
	if len(out.msgs) > 0 && out.msgs[0].Role == model.RoleUser {
		out.msgs[0].Text = SummaryNote + comp.summary + summaryEnd + out.msgs[0].Text
	} else {
		out.msgs = append([]model.Message{{Role: model.RoleUser, Text: SummaryNote + comp.summary}}, out.msgs...)
		out.pos = append([]recordPos{comp.keep}, out.pos...)
		out.usageAt++
	}
	if usage > 0 {
		out.usage = usage
	}
	return out
}

// tail is the note at the tail of the session's requests ("" without one).
func (c *Owner) tail(ctx context.Context, sessionID string) string {
	if c.opts.Tail == nil {
		return ""
	}
	return c.opts.Tail(ctx, sessionID)
}

// fixedBytes estimates what every request of a turn carries besides its
// messages: the system prompt, the declarations of the turn's tools (the
// MCP servers' included) and the note at its tail.
func fixedBytes(system string, reg *tools.Registry, tail string) int {
	n := len(system) + len(tail)
	if reg != nil {
		for _, s := range reg.Specs() {
			n += len(s.Name) + len(s.Description) + len(s.Parameters) + 32
		}
	}
	return n
}

func messagesBytes(msgs []model.Message) int {
	n := 0
	for _, m := range msgs {
		n += messageBytes(m)
	}
	return n
}

// requestTokens estimates the tokens of a request with system that sends
// conv and then prompt: the provider's reported usage for what it
// measured (bytes/3 for what came after), or bytes/3 of the whole, the
// larger of the two: a provider's usage refines the estimate where its
// tokens are denser, but a provider that reports too little (a model's
// answer is hostile input) never lets a request past the window.
func (c *Owner) requestTokens(conv conversation, fixed int, prompt string) int64 {
	return c.requestTokensBytes(conv, fixed, promptLen(prompt))
}

// promptLen is what a prompt adds to a request.
func promptLen(prompt string) int {
	if prompt == "" {
		return 0
	}
	return len(prompt) + 16
}

// requestTokensBytes is requestTokens for promptBytes bytes after conv
// (a prompt, or a running turn's own messages).
func (c *Owner) requestTokensBytes(conv conversation, fixed, promptBytes int) int64 {
	estimate := int64(fixed+messagesBytes(conv.msgs)+promptBytes) / bytesPerToken
	if conv.usage > 0 {
		return max(estimate, conv.usage+int64(messagesBytes(conv.msgs[conv.usageAt:])+promptBytes)/bytesPerToken)
	}
	return estimate
}

// compaction is the outcome of compact.
type compaction struct {
	compacted     bool
	msgs          []model.Message // the conversation to send from now on
	before, after int64
}

// compact summarises the older part of conv (everything before the
// earliest user message from which the rest, with prompt, fits in
// compactKeep of window) and records the compaction. end is the keep point
// when nothing can be kept; usageFrom the first turn whose reported usage
// will measure the compacted conversation. Nothing is recorded when there
// is nothing older to summarise.
//
// latest (on demand) keeps only the newest exchange that fits, from the
// last user message, rather than as much as fits.
func (c *Owner) compact(ctx context.Context, sessionID, turnID string, resolved Resolved, conv conversation, fixed, promptBytes int,
	window, usageFrom int64, end recordPos, latest bool) (compaction, error) {
	before := c.requestTokensBytes(conv, fixed, promptBytes)
	res := compaction{msgs: conv.msgs, before: before, after: before}
	msgs := conv.msgs
	keepBudget := window * compactKeep / 100
	cut := len(msgs)
	tail := int64(promptBytes) / bytesPerToken
	for i := len(msgs) - 1; i >= 1; i-- {
		tail += int64(messageBytes(msgs[i])) / bytesPerToken
		if tail > keepBudget {
			break
		}
		if msgs[i].Role == model.RoleUser {
			cut = i
			if latest {
				break
			}
		}
	}
	if len(msgs) == 0 || conv.summarized && cut == 1 {
		return res, nil // nothing older than what is kept but the last summary
	}
	keep := end
	if cut < len(msgs) {
		keep = conv.pos[cut]
	}
	summary, err := c.summarise(ctx, resolved, msgs[:cut], window)
	if err != nil {
		return res, err
	}
	kept := conversation{msgs: append([]model.Message(nil), msgs[cut:]...), pos: conv.pos[cut:]}
	after := withSummary(kept, summary, keep)
	rec := compactionRecord{keep: keep, usageFrom: usageFrom, summary: summary, before: before}
	rec.after = c.requestTokensBytes(conversation{msgs: after}, fixed, promptBytes)
	err = c.opts.Store.Write(context.WithoutCancel(ctx), func(tx *store.Tx) error {
		return insertCompaction(tx, sessionID, turnID, c.now(), rec)
	})
	if err != nil {
		return res, fmt.Errorf("%w: %w", errRecordCompaction, err)
	}
	return compaction{compacted: true, msgs: after, before: before, after: rec.after}, nil
}

// withSummary is kept with the summary in front, as replay builds it.
func withSummary(kept conversation, summary string, keep recordPos) []model.Message {
	h := newHistory()
	for i := range kept.msgs {
		m := kept.msgs[i]
		h.msgs = append(h.msgs, &m)
		h.pos = append(h.pos, kept.pos[i])
	}
	h.usageAt = len(h.msgs)
	return h.conversation(compactionRecord{found: true, keep: keep, summary: summary}).msgs
}

// summarise asks the model for a summary of old, in one request without
// tools (at most two attempts, summaryTimeout).
func (c *Owner) summarise(ctx context.Context, resolved Resolved, old []model.Message, window int64) (string, error) {
	limit := int(min(window*summaryOutput/100, summaryMaxOutputTokens) * bytesPerToken)
	req := model.Request{
		Model: resolved.Model, System: summarySystem,
		Messages: []model.Message{{Role: model.RoleUser,
			Text: renderForSummary(old, int(window*summaryInput/100*bytesPerToken)) + "\n\n" + SummaryInstruction}},
		MaxOutputTokens: min(max(window*summaryOutput/100, 64), summaryMaxOutputTokens),
	}
	ctx, cancel := context.WithTimeout(ctx, summaryTimeout)
	defer cancel()
	opts := c.opts.Step
	opts.MaxAttempts, opts.OnRetry = 2, nil
	var b strings.Builder
	_, err := model.StreamStep(ctx, resolved.Provider, req, opts, func(e model.Event) error {
		if e.Kind == model.EventText && b.Len() < limit {
			b.WriteString(e.Text)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	summary := strings.TrimSpace(clipText(b.String(), limit))
	if summary == "" {
		return "", errors.New("turns: the model answered the summary request with no text")
	}
	return summary, nil
}

// Bounds of one message in a summary request.
const (
	summaryToolBytes = 2000
	summaryTextBytes = 8000
)

// renderForSummary writes old as a plain transcript of at most budget
// bytes: each message clipped, and the oldest ones (but a previous
// summary) left out when the whole does not fit.
func renderForSummary(old []model.Message, budget int) string {
	parts := make([]string, 0, len(old))
	for _, m := range old {
		var b strings.Builder
		switch m.Role {
		case model.RoleUser:
			b.WriteString("User: " + clipText(m.Text, summaryTextBytes))
		case model.RoleAssistant:
			b.WriteString("Assistant: " + clipText(m.Text, summaryTextBytes))
			for _, tc := range m.ToolCalls {
				b.WriteString("\nAssistant called " + tc.Name + " " + clipText(string(tc.Input), summaryToolBytes))
			}
		case model.RoleTool:
			status := ""
			if m.IsError {
				status = ", an error"
			}
			b.WriteString("Result of " + m.ToolName + status + ": " + clipText(m.Text, summaryToolBytes))
		}
		parts = append(parts, b.String())
	}
	total := 0
	for _, p := range parts {
		total += len(p) + 2
	}
	first := 0
	if len(parts) > 0 && strings.Contains(parts[0], SummaryNote) {
		parts[0] = clipText(parts[0], budget/2)
		first = 1
	}
	omitted := 0
	for i := first; i < len(parts) && total > budget; i++ {
		total -= len(parts[i]) + 2
		parts[i] = ""
		omitted++
	}
	var out strings.Builder
	out.WriteString("The conversation so far:\n\n")
	for i, p := range parts {
		if p == "" {
			if i == first {
				fmt.Fprintf(&out, "[%d earlier messages left out]\n\n", omitted)
			}
			continue
		}
		out.WriteString(p)
		out.WriteString("\n\n")
	}
	return clipText(out.String(), budget)
}

// clipText cuts s to at most n bytes at a rune boundary, marking the cut.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = " […]"
	n = max(n-len(mark), 0)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + mark
}

// compactionNotice is the live notice of a compaction, or of its failure.
func compactionNotice(turnID string, res compaction, failure error, cutBefore, cutAfter int64) protocol.SessionNotice {
	if failure != nil {
		return protocol.SessionNotice{Kind: protocol.NoticeContextCompactionFailed, TurnID: turnID, BeforeTokens: cutBefore, AfterTokens: cutAfter,
			Message: clipText(fmt.Sprintf("context compaction failed (%v); the oldest messages were left out instead (%d → %d tokens)",
				failure, cutBefore, cutAfter), protocol.SessionNoticeMessageMaxBytes)}
	}
	return protocol.SessionNotice{Kind: protocol.NoticeContextCompacted, TurnID: turnID, BeforeTokens: res.before, AfterTokens: res.after,
		Message: fmt.Sprintf("context compacted (%d → %d tokens)", res.before, res.after)}
}

// fitTurnContext returns the history a turn sends: conv as it is when the
// request fits compactTrigger of the window, else compacted; when the
// summary cannot be made the oldest exchanges are left out (fitContext)
// and the turn goes on. Subscribers get a notice either way. A compacted
// history still over the trigger (a large system prompt, a huge newest
// exchange) is cut by fitContext as well.
func (c *Owner) fitTurnContext(ctx context.Context, a admission, resolved Resolved, conv conversation, fixed int) []model.Message {
	window := resolved.ContextWindow
	if window <= 0 {
		window = DefaultContextWindow
	}
	before := c.requestTokens(conv, fixed, a.Content.Text)
	if before*100 <= window*compactTrigger {
		return conv.msgs
	}
	history := conv.msgs
	res, err := c.compact(ctx, a.SessionID, a.TurnID, resolved, conv, fixed, promptLen(a.Content.Text), window, a.ChainSeq, recordPos{a.ChainSeq, 0}, false)
	switch {
	case err != nil && ctx.Err() != nil:
		return history // stopped: the caller ends the turn
	case err != nil:
		c.log.Warn("context compaction failed; leaving the oldest messages out", "session", a.SessionID, "turn", a.TurnID, "err", err)
		cut, omitted := fitContext(history, window)
		after := c.requestTokens(conversation{msgs: cut}, fixed, a.Content.Text)
		c.cont.PublishNotice(a.SessionID, compactionNotice(a.TurnID, res, err, before, after))
		c.log.Info("earlier messages left out to fit the context window", "session", a.SessionID, "turn", a.TurnID,
			"omitted", omitted, "kept", len(cut))
		return cut
	case res.compacted:
		c.log.Info("context compacted", "session", a.SessionID, "turn", a.TurnID, "before", res.before, "after", res.after)
		c.cont.PublishNotice(a.SessionID, compactionNotice(a.TurnID, res, nil, 0, 0))
		history = res.msgs
		if res.after*100 <= window*compactTrigger {
			return history
		}
	}
	cut, omitted := fitContext(history, window)
	if omitted > 0 {
		c.log.Info("earlier messages left out to fit the context window", "session", a.SessionID, "turn", a.TurnID,
			"omitted", omitted, "kept", len(cut))
	}
	return cut
}

// midTurnFit is the agent.Turn.Fit of a turn: once a step's request would
// exceed compactTrigger of the window, the conversation before the turn
// is summarised (at most once a turn; the record's keep point is the turn
// itself, as at a turn's start) and sent as its summary with the turn's
// own messages after it. When that cannot be done (no earlier
// conversation, the summary failed) the messages are left as they are.
func (c *Owner) midTurnFit(a admission, resolved Resolved, historyLen int, fixed func(ctx context.Context) int) func(context.Context, []model.Message) []model.Message {
	done := false
	return func(ctx context.Context, msgs []model.Message) []model.Message {
		window := resolved.ContextWindow
		if window <= 0 {
			window = DefaultContextWindow
		}
		if done || historyLen <= 0 || historyLen > len(msgs) {
			return msgs
		}
		f := fixed(ctx)
		before := c.requestTokens(conversation{msgs: msgs}, f, "")
		if before*100 <= window*compactTrigger {
			return msgs
		}
		done = true
		conv, err := c.replayConversation(ctx, a)
		if err != nil {
			c.log.Warn("mid-turn compaction: the history could not be read", "session", a.SessionID, "turn", a.TurnID, "err", err)
			return msgs
		}
		// The turn's own messages count as what is kept after the summary.
		turnPart := messagesBytes(msgs[historyLen:])
		res, err := c.compact(ctx, a.SessionID, a.TurnID, resolved, conv, f, turnPart, window, a.ChainSeq, recordPos{a.ChainSeq, 0}, false)
		switch {
		case err != nil:
			if ctx.Err() == nil {
				c.log.Warn("mid-turn compaction failed", "session", a.SessionID, "turn", a.TurnID, "err", err)
				c.cont.PublishNotice(a.SessionID, compactionNotice(a.TurnID, res, err, before, before))
			}
			return msgs
		case !res.compacted:
			return msgs
		}
		out := append(append([]model.Message(nil), res.msgs...), msgs[historyLen:]...)
		after := c.requestTokens(conversation{msgs: out}, f, "")
		c.log.Info("context compacted during the turn", "session", a.SessionID, "turn", a.TurnID, "before", before, "after", after)
		c.cont.PublishNotice(a.SessionID, compactionNotice(a.TurnID, compaction{compacted: true, before: before, after: after}, nil, 0, 0))
		historyLen = len(res.msgs)
		return out
	}
}

// handleCompact serves session.compact: an idle session's conversation is
// compacted now, whatever its size, keeping its newest exchange (nothing
// is recorded when there is nothing older than that).
func (c *Owner) handleCompact(ctx context.Context, call *host.Call) host.Outcome {
	in := call.Input.(protocol.SessionCompactInput)
	var sum protocol.SessionSummary
	var tip int64
	var fail *host.Outcome
	err := c.opts.Gate.Run(ctx, in.SessionID, func(ctx context.Context, _ *lane.Lease) error {
		// The session is compacting from here until the answer: no turn
		// starts meanwhile (launch refuses it session_busy), and a second
		// compaction is refused likewise.
		if !c.beginCompacting(in.SessionID) {
			f := host.Fail(protocol.ErrSessionBusy, MessageSessionBusy)
			fail = &f
			return nil
		}
		return c.opts.Store.Read(ctx, func(q store.Querier) error {
			var err error
			if sum, err = sessions.LoadSummary(q, in.SessionID); err != nil {
				return err
			}
			return q.QueryRow(`SELECT COALESCE(MAX(chain_seq), 0) FROM turn_admissions WHERE session_id = ?`, in.SessionID).Scan(&tip)
		})
	})
	if fail == nil {
		defer c.endCompacting(in.SessionID)
	}
	switch {
	case errors.Is(err, sessions.ErrSessionNotFound):
		return host.Fail(protocol.ErrNotFound, MessageSessionNotFound)
	case err != nil:
		return c.opFailure(string(protocol.OpSessionCompact), in.SessionID, err)
	case fail != nil:
		return *fail
	}
	resolved, err := c.opts.Resolve(ctx, sum.ModelTarget)
	if err != nil {
		return host.Fail(protocol.ErrOperationConflict, clipText(err.Error(), 1024))
	}
	window := resolved.ContextWindow
	if window <= 0 {
		window = DefaultContextWindow
	}
	next := tip + 1
	a := admission{SessionID: in.SessionID, ChainSeq: next}
	conv, err := c.replayConversation(ctx, a)
	if err != nil {
		return c.opFailure(string(protocol.OpSessionCompact), in.SessionID, err)
	}
	// The counts are of the request the next turn would make.
	workspace := sum.Workspace.Path
	if abs, err := filepath.Abs(workspace); err == nil {
		workspace = abs
	}
	policy, _, err := c.permissionPolicy(ctx, in.SessionID, workspace)
	if err != nil {
		return c.opFailure(string(protocol.OpSessionCompact), in.SessionID, err)
	}
	// The built-in tools only: an MCP server is not started to size a
	// request that is not sent.
	system := c.systemPrompt(ctx, a, workspace, policy, c.opts.Tools)
	res, err := c.compact(ctx, in.SessionID, "", resolved, conv, fixedBytes(system, c.opts.Tools, c.tail(ctx, in.SessionID)), 0, window, next, recordPos{next, 0}, true)
	if err != nil {
		if errors.Is(err, store.ErrCommitOutcomeUnknown) {
			return host.Fail(protocol.ErrCommitOutcomeUnknown, protocol.MessageOperationFailed)
		}
		if errors.Is(err, errRecordCompaction) {
			return host.Fail(protocol.ErrPersistenceFailed, protocol.MessageOperationFailed)
		}
		c.log.Warn("session.compact: the summary failed", "session", in.SessionID, "err", err)
		return host.Fail(protocol.ErrOperationConflict, MessageCompactFailed)
	}
	if res.compacted {
		c.cont.PublishNotice(in.SessionID, compactionNotice("", res, nil, 0, 0))
	}
	return host.Outcome{Result: protocol.SessionCompactResult{Compacted: res.compacted, BeforeTokens: res.before, AfterTokens: res.after}}
}
