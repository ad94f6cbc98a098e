package sessions

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/protocol"
)

// This file is the run record: what the execution layer writes while a run
// executes, and what it reads back for replay.
//
// # Design
//
// A run's record is a sequence of RunEvents in the built-in run_events table,
// keyed by (runID, Seq); the caller numbers its events 1, 2, … and appends
// them with AppendRunEvents (one durable store.Write; concurrent appends of
// many runs share one fsync through the store's group commit) or
// AppendRunEventsTx (inside a Write the caller already runs, e.g. together
// with a turn's terminal transition). Appending an event whose (runID, Seq)
// is already stored with the same content is a no-op, so a batch can be
// retried after ErrCommitOutcomeUnknown; different content is
// ErrSeqConflict.
//
// The event types below also maintain the session's transcript (the messages
// table read by session.transcript.page) in the same transaction:
//
//   - user_message (MessagePayload): a user transcript message; it also
//     moves the session's lastUsedAt forward (a catalog change).
//   - text_complete / thinking_complete (MessagePayload): the final text of
//     an assistant / thinking message.
//   - text_delta / thinking_delta (MessagePayload): streamed text. Deltas
//     are never stored as run_events rows. They are collapsed into the
//     transcript message they belong to: a run of consecutive deltas of one
//     message in a batch is concatenated and appended to that message's
//     text with one update, and the message is marked as streaming. The
//     *_complete event of the message then replaces the text with the final
//     one and is the only run_events row the message leaves. So the record
//     keeps exactly the final text of each message, while a crash
//     mid-stream leaves the text of the deltas appended so far in the
//     transcript. Deltas are idempotent by Seq (the message remembers the
//     last applied delta), and deltas after the completion are ignored.
//     Live subscribers get deltas from the continuity coordinator, not from
//     here; appending deltas is optional and best batched (say every few
//     hundred milliseconds), since each append rewrites the message.
//   - tool_call_started (ToolCallStartedPayload), appended before the tool
//     runs: a tool transcript message with status "unknown" (which it keeps
//     if the run ends before the tool did).
//   - tool_call_finished (ToolCallFinishedPayload), appended after it ran:
//     the tool message gets status "completed" or "errored" and a preview of
//     the output (at most TranscriptToolOutputMaxBytes, and short enough
//     once JSON-escaped that a transcript page always admits it).
//
// The transcript row of a message whose text is final does not copy the
// text: it points at the run event that carries it (user_message or
// *_complete), so each final text is stored once.
//
// Any other type is stored as is and does not touch the transcript. Payloads
// must be JSON; payloads of the types above may carry more fields than the
// Go structs name (they are stored unchanged).

// Run event types with a transcript meaning.
const (
	EventUserMessage = "user_message"
	// EventSteeringMessage is a user message delivered to a running turn
	// (MessagePayload); the transcript shows it as a user message.
	EventSteeringMessage  = "steering_message"
	EventTextDelta        = "text_delta"
	EventTextComplete     = "text_complete"
	EventThinkingDelta    = "thinking_delta"
	EventThinkingComplete = "thinking_complete"
	EventToolCallStarted  = "tool_call_started"
	EventToolCallFinished = "tool_call_finished"
)

// Bounds of the run record.
const (
	// RunEventTypeMaxBytes bounds RunEvent.Type.
	RunEventTypeMaxBytes = 64
	// ReadRunEventsMaxLimit bounds one ReadRunEvents page.
	ReadRunEventsMaxLimit = 1024
	// toolOutputMaxEscapedBytes bounds the JSON-escaped size of a tool
	// output preview: with every other field of a tool entry and of the
	// page at their largest it still fits SessionTranscriptPageMaxBytes.
	toolOutputMaxEscapedBytes = 40 * 1024
)

// Errors of the run record.
var (
	// ErrInvalidRunEvent reports an event or identifier that cannot be
	// recorded.
	ErrInvalidRunEvent = errors.New("sessions: invalid run event")
	// ErrSeqConflict reports an event whose (runID, Seq) is already stored
	// with other content.
	ErrSeqConflict = errors.New("sessions: run event sequence number already used")
)

// RunEvent is one event of a run's record. Seq is ≥ 1 and unique within the
// run, TS is Unix milliseconds, Payload a JSON value.
type RunEvent struct {
	Seq     int64
	TS      int64
	Type    string
	Payload json.RawMessage
}

// MessagePayload is the payload of user_message and the text events.
type MessagePayload struct {
	TurnID    string `json:"turnId"`
	MessageID string `json:"messageId"`
	Text      string `json:"text"`
	// Signature is the provider's signature of a thinking_complete text.
	Signature string `json:"signature,omitempty"`
}

// ToolCallStartedPayload is the payload of tool_call_started.
type ToolCallStartedPayload struct {
	TurnID    string          `json:"turnId"`
	ToolUseID string          `json:"toolUseId"`
	ToolName  string          `json:"toolName"`
	Args      json.RawMessage `json:"args,omitempty"`
	// StepID names the model step that made the call (the message id of
	// that step's text), so replay regroups a step's text and calls.
	StepID string `json:"stepId,omitempty"`
}

// ToolCallFinishedPayload is the payload of tool_call_finished. Output is
// the tool's output (or the part of it worth showing); the transcript keeps
// a preview of it.
type ToolCallFinishedPayload struct {
	TurnID     string `json:"turnId"`
	ToolUseID  string `json:"toolUseId"`
	IsError    bool   `json:"isError"`
	Output     string `json:"output,omitempty"`
	DurationMs *int64 `json:"durationMs,omitempty"`
	// ToolName and Content (the result's JSON content) are kept for
	// replay and clients; the transcript shows Output.
	ToolName string          `json:"toolName,omitempty"`
	Content  json.RawMessage `json:"content,omitempty"`
}

// NewRunEvent encodes payload into a RunEvent.
func NewRunEvent(seq, ts int64, typ string, payload any) (RunEvent, error) {
	b, err := protocol.Marshal(payload)
	if err != nil {
		return RunEvent{}, fmt.Errorf("%w: %s payload: %w", ErrInvalidRunEvent, typ, err)
	}
	return RunEvent{Seq: seq, TS: ts, Type: typ, Payload: b}, nil
}

// AppendRunEvents durably appends events to the record of runID, a run of
// sessionID, in one store write, and maintains the transcript. When the
// session header changed (lastUsedAt) OnChange is called after the write.
// Errors: ErrSessionNotFound, ErrInvalidRunEvent, ErrSeqConflict (nothing
// of the batch is stored) and the store's errors.
func (s *Service) AppendRunEvents(ctx context.Context, sessionID, runID string, events []RunEvent) error {
	touched := false
	err := s.st.Write(ctx, func(tx *store.Tx) error {
		var err error
		touched, err = AppendRunEventsTx(tx, sessionID, runID, events)
		return err
	})
	if touched {
		s.changed(ctx, sessionID, err)
	}
	return err
}

// AppendRunEventsTx is AppendRunEvents inside the caller's write
// transaction. It reports whether the session header changed; the caller
// then notifies the projection's readers once its write returned. After an
// error the caller's function must fail too, so that the store rolls back
// the part of the batch already applied.
func AppendRunEventsTx(tx *store.Tx, sessionID, runID string, events []RunEvent) (headerChanged bool, err error) {
	if !protocol.IsEntityID(sessionID) || !protocol.IsEntityID(runID) {
		return false, fmt.Errorf("%w: session id %q or run id %q is not an entity id", ErrInvalidRunEvent, sessionID, runID)
	}
	for _, ev := range events {
		if err := ev.validate(); err != nil {
			return false, err
		}
	}
	var one int
	if err := tx.QueryRow(`SELECT 1 FROM sessions WHERE session_id = ?`, sessionID).Scan(&one); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return false, ErrSessionNotFound
		}
		return false, err
	}
	r := recorder{tx: tx, sessionID: sessionID, runID: runID}
	for i := 0; i < len(events); {
		ev := events[i]
		if isDelta(ev.Type) {
			n, err := r.applyDeltas(events[i:])
			if err != nil {
				return false, err
			}
			i += n
			continue
		}
		i++
		fresh, err := r.insertEvent(ev)
		if err != nil {
			return false, err
		}
		if fresh {
			if err := r.derive(ev); err != nil {
				return false, err
			}
		}
	}
	return r.touched, nil
}

// ReadRunEvents returns up to limit events of runID with Seq > afterSeq, in
// Seq order (limit ≤ 0 or above ReadRunEventsMaxLimit means
// ReadRunEventsMaxLimit). Collapsed deltas are not among them.
func (s *Service) ReadRunEvents(ctx context.Context, runID string, afterSeq int64, limit int) ([]RunEvent, error) {
	if limit <= 0 || limit > ReadRunEventsMaxLimit {
		limit = ReadRunEventsMaxLimit
	}
	var out []RunEvent
	err := s.st.Read(ctx, func(q store.Querier) error {
		rows, err := q.Query(`SELECT seq, ts, type, payload FROM run_events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?`,
			runID, afterSeq, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var ev RunEvent
			var payload string
			if err := rows.Scan(&ev.Seq, &ev.TS, &ev.Type, &payload); err != nil {
				return err
			}
			ev.Payload = json.RawMessage(payload)
			out = append(out, ev)
		}
		return rows.Err()
	})
	return out, err
}

// SetSessionStatus sets the lifecycle status of sessionID (one of the
// SessionContinuityIdentity statuses) inside the caller's write and
// advances the catalog revision when it changed. It reports whether it
// changed; the caller notifies the projection's readers after its write.
func SetSessionStatus(tx *store.Tx, sessionID string, status protocol.SessionStatus) (bool, error) {
	switch status {
	case protocol.SessionActive, protocol.SessionRunning, protocol.SessionWaitingForUser, protocol.SessionBlocked,
		protocol.SessionReview, protocol.SessionDone, protocol.SessionArchived, protocol.SessionAborted:
	default:
		return false, fmt.Errorf("sessions: unknown session status %q", status)
	}
	res, err := tx.Exec(`UPDATE sessions SET status = ? WHERE session_id = ? AND status <> ?`, string(status), sessionID, string(status))
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, err
	}
	if n == 1 {
		return true, bumpCatalog(tx)
	}
	var one int
	if err := tx.QueryRow(`SELECT 1 FROM sessions WHERE session_id = ?`, sessionID).Scan(&one); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return false, ErrSessionNotFound
		}
		return false, err
	}
	return false, nil
}

func isDelta(typ string) bool { return typ == EventTextDelta || typ == EventThinkingDelta }

func (ev RunEvent) validate() error {
	switch {
	case ev.Seq < 1 || ev.Seq > protocol.MaxSafeInteger:
		return fmt.Errorf("%w: seq %d", ErrInvalidRunEvent, ev.Seq)
	case ev.TS < 0 || ev.TS > protocol.MaxSafeInteger:
		return fmt.Errorf("%w: ts %d", ErrInvalidRunEvent, ev.TS)
	case ev.Type == "" || len(ev.Type) > RunEventTypeMaxBytes || !utf8.ValidString(ev.Type):
		return fmt.Errorf("%w: type %q", ErrInvalidRunEvent, ev.Type)
	case !json.Valid(ev.Payload):
		return fmt.Errorf("%w: %s payload is not JSON", ErrInvalidRunEvent, ev.Type)
	}
	var err error
	switch ev.Type {
	case EventUserMessage, EventSteeringMessage, EventTextComplete, EventThinkingComplete, EventTextDelta, EventThinkingDelta:
		var p MessagePayload
		if err = json.Unmarshal(ev.Payload, &p); err == nil && (!protocol.IsEntityID(p.TurnID) || !protocol.IsEntityID(p.MessageID)) {
			err = errors.New("turnId and messageId must be entity ids")
		}
	case EventToolCallStarted:
		var p ToolCallStartedPayload
		if err = json.Unmarshal(ev.Payload, &p); err == nil {
			err = checkToolIDs(p.TurnID, p.ToolUseID)
		}
	case EventToolCallFinished:
		var p ToolCallFinishedPayload
		if err = json.Unmarshal(ev.Payload, &p); err == nil {
			err = checkToolIDs(p.TurnID, p.ToolUseID)
		}
	}
	if err != nil {
		return fmt.Errorf("%w: seq %d %s: %w", ErrInvalidRunEvent, ev.Seq, ev.Type, err)
	}
	return nil
}

func checkToolIDs(turnID, toolUseID string) error {
	if !protocol.IsEntityID(turnID) {
		return errors.New("turnId must be an entity id")
	}
	if n := protocol.UTF16Len(toolUseID); n < 1 || n > 128 {
		return errors.New("toolUseId must be 1..128 UTF-16 units")
	}
	return nil
}

// messageBody is the body column of a messages row.
type messageBody struct {
	// Text is the text assembled from deltas while Streaming: the final
	// text has not been recorded yet. DeltaSeq is the Seq of the last delta
	// applied.
	Text      string `json:"text,omitempty"`
	Streaming bool   `json:"streaming,omitempty"`
	DeltaSeq  int64  `json:"deltaSeq,omitempty"`

	ToolUseID string `json:"toolUseId,omitempty"`
	ToolName  string `json:"toolName,omitempty"`
	Status    string `json:"status,omitempty"`
	Output    string `json:"output,omitempty"`
	Truncated bool   `json:"truncated,omitempty"`
}

// recorder applies one batch of events inside a write.
type recorder struct {
	tx        *store.Tx
	sessionID string
	runID     string
	touched   bool
}

// insertEvent stores ev; fresh is false when the identical event was stored
// before.
func (r *recorder) insertEvent(ev RunEvent) (fresh bool, err error) {
	res, err := r.tx.Exec(`INSERT INTO run_events (session_id, run_id, seq, ts, type, payload) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (run_id, seq) DO NOTHING`, r.sessionID, r.runID, ev.Seq, ev.TS, ev.Type, string(ev.Payload))
	if err != nil {
		return false, err
	}
	if n, err := res.RowsAffected(); err != nil || n == 1 {
		return n == 1, err
	}
	var sid, typ, payload string
	var ts int64
	if err := r.tx.QueryRow(`SELECT session_id, ts, type, payload FROM run_events WHERE run_id = ? AND seq = ?`,
		r.runID, ev.Seq).Scan(&sid, &ts, &typ, &payload); err != nil {
		return false, err
	}
	if sid != r.sessionID || ts != ev.TS || typ != ev.Type || payload != string(ev.Payload) {
		return false, fmt.Errorf("%w: run %s seq %d", ErrSeqConflict, r.runID, ev.Seq)
	}
	return false, nil
}

// derive applies the transcript meaning of a freshly stored event.
func (r *recorder) derive(ev RunEvent) error {
	switch ev.Type {
	case EventUserMessage, EventSteeringMessage, EventTextComplete, EventThinkingComplete:
		var p MessagePayload
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			return err
		}
		if err := r.finishText(textRole(ev.Type), p, ev); err != nil {
			return err
		}
		if ev.Type == EventUserMessage || ev.Type == EventSteeringMessage {
			return r.touch(ev.TS)
		}
	case EventToolCallStarted:
		var p ToolCallStartedPayload
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			return err
		}
		return r.toolStarted(p, ev.TS)
	case EventToolCallFinished:
		var p ToolCallFinishedPayload
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			return err
		}
		return r.toolFinished(p, ev.TS)
	}
	return nil
}

func textRole(typ string) protocol.TranscriptRole {
	switch typ {
	case EventUserMessage, EventSteeringMessage:
		return protocol.TranscriptRoleUser
	case EventThinkingComplete, EventThinkingDelta:
		return protocol.TranscriptRoleThinking
	}
	return protocol.TranscriptRoleAssistant
}

// touch moves the session's lastUsedAt forward to at.
func (r *recorder) touch(at int64) error {
	res, err := r.tx.Exec(`UPDATE sessions SET last_used_at = ? WHERE session_id = ? AND last_used_at < ?`, at, r.sessionID, at)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return err
	}
	r.touched = true
	return bumpCatalog(r.tx)
}

// findMessage returns the row of a transcript message; seq is 0 when there
// is none.
func (r *recorder) findMessage(messageID string, role protocol.TranscriptRole) (seq int64, body messageBody, err error) {
	var text string
	err = r.tx.QueryRow(`SELECT seq, body FROM messages WHERE session_id = ? AND message_id = ? AND role = ?`,
		r.sessionID, messageID, string(role)).Scan(&seq, &text)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, body, nil
	case err != nil:
		return 0, body, err
	}
	if err := json.Unmarshal([]byte(text), &body); err != nil {
		return 0, body, fmt.Errorf("%w: message %s: %w", errCorrupt, messageID, err)
	}
	return seq, body, nil
}

func (r *recorder) insertMessage(messageID, turnID string, role protocol.TranscriptRole, createdAt int64, body messageBody) error {
	enc, err := marshalJSON(body)
	if err != nil {
		return err
	}
	_, err = r.tx.Exec(`INSERT INTO messages (session_id, seq, message_id, turn_id, run_id, role, created_at, body)
		VALUES (?1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM messages WHERE session_id = ?1), ?2, ?3, ?4, ?5, ?6, ?7)`,
		r.sessionID, messageID, turnID, r.runID, string(role), createdAt, enc)
	return err
}

func (r *recorder) updateMessage(seq int64, body messageBody) error {
	enc, err := marshalJSON(body)
	if err != nil {
		return err
	}
	_, err = r.tx.Exec(`UPDATE messages SET body = ? WHERE session_id = ? AND seq = ?`, enc, r.sessionID, seq)
	return err
}

// finishText records the final text of a text message, carried by the
// payload of ev: the message's row points at ev. A message without text has
// no transcript entry.
func (r *recorder) finishText(role protocol.TranscriptRole, p MessagePayload, ev RunEvent) error {
	seq, _, err := r.findMessage(p.MessageID, role)
	switch {
	case err != nil:
		return err
	case seq == 0 && p.Text == "":
		return nil
	case p.Text == "":
		_, err := r.tx.Exec(`DELETE FROM messages WHERE session_id = ? AND seq = ?`, r.sessionID, seq)
		return err
	case seq == 0:
		_, err := r.tx.Exec(`INSERT INTO messages (session_id, seq, message_id, turn_id, run_id, role, created_at, body, event_seq)
			VALUES (?1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM messages WHERE session_id = ?1), ?2, ?3, ?4, ?5, ?6, '{}', ?7)`,
			r.sessionID, p.MessageID, p.TurnID, r.runID, string(role), ev.TS, ev.Seq)
		return err
	}
	_, err = r.tx.Exec(`UPDATE messages SET body = '{}', run_id = ?, event_seq = ? WHERE session_id = ? AND seq = ?`,
		r.runID, ev.Seq, r.sessionID, seq)
	return err
}

// applyDeltas collapses the leading run of events that are deltas of the
// same message into one update of that message and returns the number of
// events consumed (≥ 1).
func (r *recorder) applyDeltas(events []RunEvent) (int, error) {
	var first MessagePayload
	if err := json.Unmarshal(events[0].Payload, &first); err != nil {
		return 0, err
	}
	typ := events[0].Type
	payloads := []MessagePayload{first}
	for _, ev := range events[1:] {
		if ev.Type != typ {
			break
		}
		var p MessagePayload
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			return 0, err
		}
		if p.MessageID != first.MessageID || p.TurnID != first.TurnID {
			break
		}
		payloads = append(payloads, p)
	}
	n := len(payloads)
	role := textRole(typ)
	seq, body, err := r.findMessage(first.MessageID, role)
	if err != nil {
		return 0, err
	}
	if seq != 0 && !body.Streaming {
		return n, nil // the final text is recorded already
	}
	// Rows inserted here are the only ones with a text body; their
	// event_seq is NULL until the final text arrives.
	var text strings.Builder
	text.WriteString(body.Text)
	last := body.DeltaSeq
	for i, p := range payloads {
		if ev := events[i]; ev.Seq > body.DeltaSeq {
			text.WriteString(strings.ToValidUTF8(p.Text, "\uFFFD"))
			last = max(last, ev.Seq)
		}
	}
	if last == body.DeltaSeq || text.Len() == 0 {
		return n, nil
	}
	next := messageBody{Text: text.String(), Streaming: true, DeltaSeq: last}
	if seq == 0 {
		return n, r.insertMessage(first.MessageID, first.TurnID, role, events[0].TS, next)
	}
	return n, r.updateMessage(seq, next)
}

// toolMessageID derives the transcript message id of a tool call: tool use
// ids are not entity ids, and they are unique only within their run.
func toolMessageID(runID, toolUseID string) string {
	sum := sha256.Sum256([]byte(runID + "\x00" + toolUseID))
	return "tool-" + hex.EncodeToString(sum[:16])
}

// toolName is the transcript form of a tool name: valid UTF-8 of 1..256
// bytes.
func toolName(name string) string {
	name, _ = preview(strings.ToValidUTF8(name, "\uFFFD"), protocol.TranscriptToolNameMaxBytes, protocol.TranscriptToolNameMaxBytes*6)
	if name == "" {
		return "tool"
	}
	return name
}

func (r *recorder) toolStarted(p ToolCallStartedPayload, ts int64) error {
	id := toolMessageID(r.runID, p.ToolUseID)
	seq, _, err := r.findMessage(id, protocol.TranscriptRoleTool)
	if err != nil || seq != 0 {
		return err
	}
	return r.insertMessage(id, p.TurnID, protocol.TranscriptRoleTool, ts, messageBody{
		ToolUseID: p.ToolUseID, ToolName: toolName(p.ToolName), Status: protocol.TranscriptToolUnknown,
	})
}

func (r *recorder) toolFinished(p ToolCallFinishedPayload, ts int64) error {
	id := toolMessageID(r.runID, p.ToolUseID)
	seq, body, err := r.findMessage(id, protocol.TranscriptRoleTool)
	if err != nil {
		return err
	}
	if seq == 0 {
		body = messageBody{ToolUseID: p.ToolUseID, ToolName: toolName("")}
	}
	body.Status = protocol.TranscriptToolCompleted
	if p.IsError {
		body.Status = protocol.TranscriptToolErrored
	}
	body.Output, body.Truncated = preview(strings.ToValidUTF8(p.Output, "\uFFFD"), protocol.TranscriptToolOutputMaxBytes, toolOutputMaxEscapedBytes)
	if seq == 0 {
		return r.insertMessage(id, p.TurnID, protocol.TranscriptRoleTool, ts, body)
	}
	return r.updateMessage(seq, body)
}

// preview shortens s to at most maxRaw bytes of UTF-8 whose JSON escaping
// takes at most maxEscaped bytes, cutting on a code-point boundary, and
// reports whether it cut. An invalid byte counts as the U+FFFD it is
// encoded as.
func preview(s string, maxRaw, maxEscaped int) (string, bool) {
	raw, escaped := 0, 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		rc, ec := runeCost(r, size)
		if raw+rc > maxRaw || escaped+ec > maxEscaped {
			return s[:i], true
		}
		raw += rc
		escaped += ec
		i += size
	}
	return s, false
}

// asciiCost[c] is the number of bytes protocol.Marshal writes for the
// ASCII character c inside a string, and invalidCost the number it writes
// for an invalid UTF-8 byte; both are measured from the encoder itself.
// Other characters are written raw.
var asciiCost, invalidCost = func() ([utf8.RuneSelf]int, int) {
	var costs [utf8.RuneSelf]int
	for c := range costs {
		costs[c] = marshaledLen(string(rune(c)))
	}
	return costs, marshaledLen("\xff")
}()

func marshaledLen(s string) int {
	b, err := protocol.Marshal(s)
	if err != nil {
		return 6 // the longest escape of one character
	}
	return len(b) - 2
}

// runeCost returns the UTF-8 length of one decoded rune of a string as a
// receiver sees it (an invalid byte arrives as U+FFFD) and the number of
// bytes protocol.Marshal writes for it.
func runeCost(r rune, size int) (raw, escaped int) {
	switch {
	case r == utf8.RuneError && size == 1:
		return 3, invalidCost
	case r < utf8.RuneSelf:
		return 1, asciiCost[r]
	}
	return size, size
}

// stringSize returns the length of s encoded as a JSON string by
// protocol.Marshal.
func stringSize(s string) int {
	n := 2
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			n += asciiCost[c]
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		_, ec := runeCost(r, size)
		n += ec
		i += size
	}
	return n
}
