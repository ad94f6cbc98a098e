package protocol

import (
	"fmt"
	"unicode/utf8"
)

// This file owns session continuity (the subscription stream of protocol
// v0, docs/architecture.md, The path of live session output): the codecs of
// subscription.open and subscription.close, the SessionContinuitySnapshot
// and the four subscription push frames.

// Session continuity bounds and constants.
const (
	SessionContinuitySchemaVersion    = 1
	SessionContinuitySnapshotMaxBytes = 56 * 1024
	SessionLiveDeltaMaxBytes          = 16 * 1024 // delta text and tool_progress chunk
	SessionToolNameMaxBytes           = 256       // toolName and displayName
	ToolOutputDeltaChunkMaxBytes      = 3 * 8192

	// deltaChunkMaxEscapedBytes bounds the JSON-escaped size of one delta
	// chunk so that a delta frame with every other field at its largest
	// still fits SubscriptionFrameMaxBytes.
	deltaChunkMaxEscapedBytes = 60 * 1024
)

// SessionStatus is a session lifecycle status.
type SessionStatus string

// Session lifecycle statuses.
const (
	SessionActive         SessionStatus = "active"
	SessionRunning        SessionStatus = "running"
	SessionWaitingForUser SessionStatus = "waiting_for_user"
	SessionBlocked        SessionStatus = "blocked"
	SessionReview         SessionStatus = "review"
	SessionDone           SessionStatus = "done"
	SessionArchived       SessionStatus = "archived"
	SessionAborted        SessionStatus = "aborted"
)

var sessionStatuses = []string{
	string(SessionActive), string(SessionRunning), string(SessionWaitingForUser), string(SessionBlocked),
	string(SessionReview), string(SessionDone), string(SessionArchived), string(SessionAborted),
}

// SessionContinuityIdentity identifies the session of a snapshot.
type SessionContinuityIdentity struct {
	SessionID  string        `json:"sessionId"`
	Status     SessionStatus `json:"status"`
	CreatedAt  int64         `json:"createdAt"`
	LastUsedAt int64         `json:"lastUsedAt"`
	IsArchived bool          `json:"isArchived"`
	ArchivedAt *int64        `json:"archivedAt,omitempty"`
}

// SessionContinuitySnapshot is the canonical projection of one session.
// SchemaVersion is SessionContinuitySchemaVersion; RootTurn nil encodes as
// null.
type SessionContinuitySnapshot struct {
	SchemaVersion      int64                         `json:"schemaVersion"`
	Session            SessionContinuityIdentity     `json:"session"`
	ProjectionRevision int64                         `json:"projectionRevision"`
	RootTurn           *TurnSnapshot                 `json:"rootTurn"`
	Queue              SessionMessageQueueProjection `json:"queue"`
	Interactions       InteractionProjection         `json:"interactions"`
}

// SubscriptionOpenInput is the input of subscription.open.
type SubscriptionOpenInput struct {
	SessionID string `json:"sessionId"`
}

// SubscriptionOpenResult is the result of subscription.open.
type SubscriptionOpenResult struct {
	HostEpoch      string                    `json:"hostEpoch"`
	SubscriptionID string                    `json:"subscriptionId"`
	NextSequence   int64                     `json:"nextSequence"`
	Snapshot       SessionContinuitySnapshot `json:"snapshot"`
}

// SubscriptionCloseInput is the input of subscription.close.
type SubscriptionCloseInput struct {
	SubscriptionID string `json:"subscriptionId"`
}

// SubscriptionCloseResult is the result of subscription.close (an echo).
type SubscriptionCloseResult struct {
	SubscriptionID string `json:"subscriptionId"`
}

// ProjectionFrame is a subscription.session_projection push frame; its
// encoding carries the kind.
type ProjectionFrame struct {
	HostEpoch      string                    `json:"hostEpoch"`
	SubscriptionID string                    `json:"subscriptionId"`
	Sequence       int64                     `json:"sequence"`
	Snapshot       SessionContinuitySnapshot `json:"snapshot"`
}

// Assistant delta kinds.
const (
	DeltaText     = "text"
	DeltaThinking = "thinking"
)

// SessionAssistantDelta is one chunk of streamed assistant text.
type SessionAssistantDelta struct {
	Kind      string `json:"kind"`
	TurnID    string `json:"turnId"`
	RunID     string `json:"runId"`
	MessageID string `json:"messageId"`
	Text      string `json:"text"`
}

// DeltaFrame is a subscription.session_delta push frame.
type DeltaFrame struct {
	HostEpoch      string                `json:"hostEpoch"`
	SubscriptionID string                `json:"subscriptionId"`
	Sequence       int64                 `json:"sequence"`
	SessionID      string                `json:"sessionId"`
	Delta          SessionAssistantDelta `json:"delta"`
}

// EventFrame is a subscription.session_event push frame.
type EventFrame struct {
	HostEpoch      string           `json:"hostEpoch"`
	SubscriptionID string           `json:"subscriptionId"`
	Sequence       int64            `json:"sequence"`
	SessionID      string           `json:"sessionId"`
	RunID          string           `json:"runId"`
	Event          SessionToolEvent `json:"event"`
}

// Subscription close reasons.
const (
	CloseSlowConsumer   = "slow_consumer"
	CloseSessionRemoved = "session_removed"
)

// ClosedFrame is a subscription.closed push frame, the last of its
// subscription.
type ClosedFrame struct {
	HostEpoch      string `json:"hostEpoch"`
	SubscriptionID string `json:"subscriptionId"`
	Sequence       int64  `json:"sequence"`
	Reason         string `json:"reason"`
}

// MarshalJSON encodes the frame with its kind first.
func (f ProjectionFrame) MarshalJSON() ([]byte, error) {
	type plain ProjectionFrame
	return Marshal(struct {
		Kind string `json:"kind"`
		plain
	}{KindSubscriptionProjection, plain(f)})
}

// MarshalJSON encodes the frame with its kind first.
func (f DeltaFrame) MarshalJSON() ([]byte, error) {
	type plain DeltaFrame
	return Marshal(struct {
		Kind string `json:"kind"`
		plain
	}{KindSubscriptionDelta, plain(f)})
}

// MarshalJSON encodes the frame with its kind first.
func (f EventFrame) MarshalJSON() ([]byte, error) {
	type plain EventFrame
	return Marshal(struct {
		Kind string `json:"kind"`
		plain
	}{KindSubscriptionEvent, plain(f)})
}

// MarshalJSON encodes the frame with its kind first.
func (f ClosedFrame) MarshalJSON() ([]byte, error) {
	type plain ClosedFrame
	return Marshal(struct {
		Kind string `json:"kind"`
		plain
	}{KindSubscriptionClosed, plain(f)})
}

// Session tool event types.
const (
	ToolStart       = "tool_start"
	ToolOutputDelta = "tool_output_delta"
	ToolProgress    = "tool_progress"
	ToolResult      = "tool_result"
)

var toolActivityKinds = []string{"read", "search", "websearch", "webfetch", "edit", "command", "explore", "browser", "tool"}

// SessionToolEvent is a live tool event (union on Type). ID, TurnID, TS and
// ToolUseID are common; the other fields belong to the variants noted on
// them and stay zero elsewhere. Optional strings are empty when absent.
type SessionToolEvent struct {
	Type      string
	ID        string
	TurnID    string
	TS        int64
	ToolUseID string

	ToolName     string // tool_start
	ActivityKind string // tool_start, optional
	DisplayName  string // tool_start, optional
	StepID       string // tool_start, optional
	OperationID  string // tool_start and tool_result, optional

	Seq       int64  // tool_output_delta
	Stream    string // tool_output_delta: "stdout" or "stderr"
	Redacted  bool   // tool_output_delta
	CreatedAt int64  // tool_output_delta
	Chunk     string // tool_output_delta and tool_progress

	Status     string // tool_result: "completed" or "errored"
	DurationMs *int64 // tool_result, optional
}

type toolEventIdentity struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	TurnID    string `json:"turnId"`
	TS        int64  `json:"ts"`
	ToolUseID string `json:"toolUseId"`
}

// MarshalJSON encodes the variant named by Type.
func (e SessionToolEvent) MarshalJSON() ([]byte, error) {
	id := toolEventIdentity{e.Type, e.ID, e.TurnID, e.TS, e.ToolUseID}
	switch e.Type {
	case ToolStart:
		return Marshal(struct {
			toolEventIdentity
			ToolName     string `json:"toolName"`
			OperationID  string `json:"operationId,omitempty"`
			ActivityKind string `json:"activityKind,omitempty"`
			DisplayName  string `json:"displayName,omitempty"`
			StepID       string `json:"stepId,omitempty"`
		}{id, e.ToolName, e.OperationID, e.ActivityKind, e.DisplayName, e.StepID})
	case ToolOutputDelta:
		return Marshal(struct {
			toolEventIdentity
			Seq       int64  `json:"seq"`
			Stream    string `json:"stream"`
			Chunk     string `json:"chunk"`
			Redacted  bool   `json:"redacted"`
			CreatedAt int64  `json:"createdAt"`
		}{id, e.Seq, e.Stream, e.Chunk, e.Redacted, e.CreatedAt})
	case ToolProgress:
		return Marshal(struct {
			toolEventIdentity
			Chunk string `json:"chunk"`
		}{id, e.Chunk})
	case ToolResult:
		return Marshal(struct {
			toolEventIdentity
			OperationID string `json:"operationId,omitempty"`
			Status      string `json:"status"`
			DurationMs  *int64 `json:"durationMs,omitempty"`
		}{id, e.OperationID, e.Status, e.DurationMs})
	}
	return nil, fmt.Errorf("protocol: unknown tool event type %q", e.Type)
}

func init() {
	registerCodec(OpSubscriptionOpen,
		func(d *D, v Value) any {
			return SubscriptionOpenInput{SessionID: d.Exact(v, "input", "sessionId").EntityID("sessionId")}
		},
		func(d *D, v Value) any {
			o := d.Exact(v, "result", "hostEpoch", "subscriptionId", "nextSequence", "snapshot")
			r := SubscriptionOpenResult{
				HostEpoch:      o.ID("hostEpoch"),
				SubscriptionID: o.ID("subscriptionId"),
				NextSequence:   o.PosCount("nextSequence"),
			}
			r.Snapshot = decodeEpochSnapshot(d, o, r.HostEpoch)
			return r
		})
	registerCodec(OpSubscriptionClose,
		func(d *D, v Value) any {
			return SubscriptionCloseInput{SubscriptionID: d.Exact(v, "input", "subscriptionId").ID("subscriptionId")}
		},
		func(d *D, v Value) any {
			return SubscriptionCloseResult{SubscriptionID: d.Exact(v, "result", "subscriptionId").ID("subscriptionId")}
		})

	pushDecoders[KindSubscriptionProjection] = func(d *D, v Value) any {
		o := d.Exact(v, KindSubscriptionProjection, "kind", "hostEpoch", "subscriptionId", "sequence", "snapshot")
		f := ProjectionFrame{}
		f.HostEpoch, f.SubscriptionID, f.Sequence = decodeEnvelope(o, KindSubscriptionProjection)
		f.Snapshot = decodeEpochSnapshot(d, o, f.HostEpoch)
		d.EncodedWithin(f, KindSubscriptionProjection, SubscriptionFrameMaxBytes)
		return f
	}
	pushDecoders[KindSubscriptionDelta] = func(d *D, v Value) any {
		o := d.Exact(v, KindSubscriptionDelta, "kind", "hostEpoch", "subscriptionId", "sequence", "sessionId", "delta")
		f := DeltaFrame{}
		f.HostEpoch, f.SubscriptionID, f.Sequence = decodeEnvelope(o, KindSubscriptionDelta)
		f.SessionID = o.EntityID("sessionId")
		do := o.Object("delta", []string{"kind", "turnId", "runId", "messageId", "text"}, nil)
		f.Delta = SessionAssistantDelta{
			Kind:      do.Enum("kind", DeltaText, DeltaThinking),
			TurnID:    do.EntityID("turnId"),
			RunID:     do.EntityID("runId"),
			MessageID: do.EntityID("messageId"),
			Text:      do.StringBytes("text", 1, SessionLiveDeltaMaxBytes),
		}
		d.EncodedWithin(f, KindSubscriptionDelta, SubscriptionFrameMaxBytes)
		return f
	}
	pushDecoders[KindSubscriptionEvent] = func(d *D, v Value) any {
		o := d.Exact(v, KindSubscriptionEvent, "kind", "hostEpoch", "subscriptionId", "sequence", "sessionId", "runId", "event")
		f := EventFrame{}
		f.HostEpoch, f.SubscriptionID, f.Sequence = decodeEnvelope(o, KindSubscriptionEvent)
		f.SessionID = o.EntityID("sessionId")
		f.RunID = o.EntityID("runId")
		ev, ep := o.Get("event")
		f.Event = decodeToolEvent(d, ev, ep)
		d.EncodedWithin(f, KindSubscriptionEvent, SubscriptionFrameMaxBytes)
		return f
	}
	pushDecoders[KindSubscriptionClosed] = func(d *D, v Value) any {
		o := d.Exact(v, KindSubscriptionClosed, "kind", "hostEpoch", "subscriptionId", "sequence", "reason")
		f := ClosedFrame{}
		f.HostEpoch, f.SubscriptionID, f.Sequence = decodeEnvelope(o, KindSubscriptionClosed)
		f.Reason = o.Enum("reason", CloseSlowConsumer, CloseSessionRemoved)
		d.EncodedWithin(f, KindSubscriptionClosed, SubscriptionFrameMaxBytes)
		return f
	}
}

// DecodeSessionContinuitySnapshot strictly decodes a continuity snapshot.
func DecodeSessionContinuitySnapshot(v Value) (SessionContinuitySnapshot, error) {
	d := &D{}
	s := decodeContinuitySnapshot(d, v, "snapshot")
	return s, d.Err()
}

func decodeEnvelope(o Obj, kind string) (hostEpoch, subscriptionID string, sequence int64) {
	o.Literal("kind", kind)
	return o.ID("hostEpoch"), o.ID("subscriptionId"), o.PosCount("sequence")
}

// decodeEpochSnapshot decodes the snapshot member of o, whose queue must
// belong to hostEpoch.
func decodeEpochSnapshot(d *D, o Obj, hostEpoch string) SessionContinuitySnapshot {
	sv, sp := o.Get("snapshot")
	s := decodeContinuitySnapshot(d, sv, sp)
	if !d.Failed() && s.Queue.HostEpoch != hostEpoch {
		d.Fail(sp+".queue.hostEpoch", "does not match hostEpoch %q", hostEpoch)
	}
	return s
}

func decodeContinuitySnapshot(d *D, v Value, path string) SessionContinuitySnapshot {
	// Like the original, the bound applies to the snapshot as received.
	d.EncodedWithin(v, path, SessionContinuitySnapshotMaxBytes)
	o := d.Exact(v, path, "schemaVersion", "session", "projectionRevision", "rootTurn", "queue", "interactions")
	s := SessionContinuitySnapshot{SchemaVersion: o.SafeInt("schemaVersion", SessionContinuitySchemaVersion, SessionContinuitySchemaVersion)}

	so := o.Object("session", []string{"sessionId", "status", "createdAt", "lastUsedAt", "isArchived"}, []string{"archivedAt"})
	s.Session = SessionContinuityIdentity{
		SessionID:  so.EntityID("sessionId"),
		Status:     SessionStatus(so.Enum("status", sessionStatuses...)),
		CreatedAt:  so.Count("createdAt"),
		LastUsedAt: so.Count("lastUsedAt"),
		IsArchived: so.Bool("isArchived"),
	}
	if so.Has("archivedAt") {
		at := so.Count("archivedAt")
		s.Session.ArchivedAt = &at
	}

	s.ProjectionRevision = o.PosCount("projectionRevision")
	if rv, rp := o.Get("rootTurn"); rv.Kind() != KindNull {
		t := decodeTurnSnapshot(d, rv, rp)
		if !d.Failed() && t.SessionID != s.Session.SessionID {
			d.Fail(rp+".sessionId", "belongs to another session")
		}
		s.RootTurn = &t
	}
	qv, qp := o.Get("queue")
	s.Queue = decodeQueueProjection(d, qv, qp)
	iv, ip := o.Get("interactions")
	s.Interactions = decodeInteractionProjection(d, iv, ip, s.Session.SessionID)
	return s
}

func toolEventKeys(extra ...string) []string {
	return append([]string{"type", "id", "turnId", "ts", "toolUseId"}, extra...)
}

func decodeToolEvent(d *D, v Value, path string) SessionToolEvent {
	e := SessionToolEvent{Type: discriminator(d, v, path, "type", ToolStart, ToolOutputDelta, ToolProgress, ToolResult)}
	var o Obj
	switch e.Type {
	case ToolStart:
		o = d.Closed(v, path, toolEventKeys("toolName"), []string{"operationId", "activityKind", "displayName", "stepId"})
	case ToolOutputDelta:
		o = d.Exact(v, path, toolEventKeys("seq", "stream", "chunk", "redacted", "createdAt")...)
	case ToolProgress:
		o = d.Exact(v, path, toolEventKeys("chunk")...)
	default:
		o = d.Closed(v, path, toolEventKeys("status"), []string{"operationId", "durationMs"})
	}
	e.ID = o.ID("id")
	e.TurnID = o.EntityID("turnId")
	e.TS = o.Count("ts")
	e.ToolUseID = o.ID("toolUseId")
	switch e.Type {
	case ToolStart:
		e.ToolName = o.StringBytes("toolName", 1, SessionToolNameMaxBytes)
		if o.Has("operationId") {
			e.OperationID = o.EntityID("operationId")
		}
		if o.Has("activityKind") {
			e.ActivityKind = o.Enum("activityKind", toolActivityKinds...)
		}
		if o.Has("displayName") {
			e.DisplayName = o.StringBytes("displayName", 1, SessionToolNameMaxBytes)
		}
		if o.Has("stepId") {
			e.StepID = o.EntityID("stepId")
		}
	case ToolOutputDelta:
		e.Seq = o.Count("seq")
		e.Stream = o.Enum("stream", "stdout", "stderr")
		e.Chunk = o.StringBytes("chunk", 1, ToolOutputDeltaChunkMaxBytes)
		e.Redacted = o.Bool("redacted")
		e.CreatedAt = o.Count("createdAt")
	case ToolProgress:
		e.Chunk = o.StringBytes("chunk", 1, SessionLiveDeltaMaxBytes)
	case ToolResult:
		if o.Has("operationId") {
			e.OperationID = o.EntityID("operationId")
		}
		e.Status = o.Enum("status", "completed", "errored")
		if o.Has("durationMs") {
			ms := o.Count("durationMs")
			e.DurationMs = &ms
		}
	}
	return e
}

// SplitDelta cuts assistant text into the chunks of consecutive delta frames
// of a subscription: each chunk is at most SessionLiveDeltaMaxBytes of
// UTF-8, ends on a code-point boundary, and is small enough once JSON-escaped
// (a control character takes six bytes) that a delta frame carrying it fits
// SubscriptionFrameMaxBytes. An invalid UTF-8 byte counts as the U+FFFD it
// is encoded as. Empty text yields no chunks.
func SplitDelta(text string) []string {
	return splitText(text, SessionLiveDeltaMaxBytes, deltaChunkMaxEscapedBytes)
}

// splitText cuts text on code-point boundaries into chunks of at most
// maxRaw UTF-8 bytes whose JSON-escaped form is at most maxEscaped bytes.
func splitText(text string, maxRaw, maxEscaped int) []string {
	var chunks []string
	start, raw, escaped := 0, 0, 0
	for i := 0; i < len(text); {
		r, size := utf8.DecodeRuneInString(text[i:])
		rawCost, escCost := encodedRuneLen(r, size)
		if raw+rawCost > maxRaw || escaped+escCost > maxEscaped {
			chunks = append(chunks, text[start:i])
			start, raw, escaped = i, 0, 0
		}
		raw += rawCost
		escaped += escCost
		i += size
	}
	if start < len(text) {
		chunks = append(chunks, text[start:])
	}
	return chunks
}

// encodedRuneLen returns the UTF-8 length of one decoded rune of a string as
// a receiver sees it, and the number of bytes Marshal writes for it (an
// invalid byte becomes the escape \ufffd).
func encodedRuneLen(r rune, size int) (raw, escaped int) {
	switch {
	case r == utf8.RuneError && size == 1:
		return 3, 6
	case r == '"' || r == '\\' || r == '\b' || r == '\f' || r == '\n' || r == '\r' || r == '\t':
		return size, 2
	case r < 0x20:
		return size, 6
	}
	return size, size
}
