package protocol

// This file owns the message-queue shapes of protocol v0 and the codecs of
// turn.message.submit, queue.retract and turn.interrupt.

// Message-queue bounds.
const (
	MessageQueueMaxEntries         = 64
	MessageQueueProjectionMaxBytes = 52 * 1024
	MessageOperationResultMaxBytes = 56 * 1024
)

// MessagePlacement is where a submitted message goes.
type MessagePlacement string

// Message placements.
const (
	PlacementCurrentTurn MessagePlacement = "current_turn"
	PlacementNextTurn    MessagePlacement = "next_turn"
)

var placements = []string{string(PlacementCurrentTurn), string(PlacementNextTurn)}

// MessageState is the state of a queue entry on the wire.
type MessageState string

// Queue entry states.
const (
	MessageQueued    MessageState = "queued"
	MessageInFlight  MessageState = "in_flight" // only with PlacementCurrentTurn
	MessageRetracted MessageState = "retracted" // only in retract and interrupt results
)

// MessageQueueEntrySnapshot is one queued, in-flight or retracted message.
type MessageQueueEntrySnapshot struct {
	EntryID   string           `json:"entryId"`
	MessageID string           `json:"messageId"`
	Content   MessageContent   `json:"content"`
	Placement MessagePlacement `json:"placement"`
	State     MessageState     `json:"state"`
}

// RetractedMessageSnapshot is a queue entry whose State is MessageRetracted;
// either placement is allowed.
type RetractedMessageSnapshot = MessageQueueEntrySnapshot

// SessionMessageQueueProjection is the queue of one session. Steering holds
// current_turn entries (queued or in flight), Followup next_turn entries
// (queued). Nil lists encode as [].
type SessionMessageQueueProjection struct {
	HostEpoch     string                      `json:"hostEpoch"`
	QueueRevision int64                       `json:"queueRevision"`
	Steering      []MessageQueueEntrySnapshot `json:"steering"`
	Followup      []MessageQueueEntrySnapshot `json:"followup"`
}

// MarshalJSON encodes the projection with nil lists as [].
func (p SessionMessageQueueProjection) MarshalJSON() ([]byte, error) {
	type plain SessionMessageQueueProjection
	q := plain(p)
	q.Steering = nonNil(q.Steering)
	q.Followup = nonNil(q.Followup)
	return Marshal(q)
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// TurnMessageSubmitInput is the input of turn.message.submit.
type TurnMessageSubmitInput struct {
	OriginHostEpoch string           `json:"originHostEpoch"`
	SessionID       string           `json:"sessionId"`
	MessageID       string           `json:"messageId"`
	Content         MessageContent   `json:"content"`
	Placement       MessagePlacement `json:"placement"`
}

// Submit dispositions.
const (
	DispositionSteering    = "steering"
	DispositionFollowup    = "followup"
	DispositionTurnStarted = "turn_started"
)

// TurnMessageSubmitResult is the result of turn.message.submit (union on
// Disposition): steering and followup carry QueueRevision, turn_started
// carries TurnID.
type TurnMessageSubmitResult struct {
	Disposition   string
	QueueRevision int64
	TurnID        string
}

// MarshalJSON encodes the variant named by Disposition.
func (r TurnMessageSubmitResult) MarshalJSON() ([]byte, error) {
	if r.Disposition == DispositionTurnStarted {
		return Marshal(struct {
			Disposition string `json:"disposition"`
			TurnID      string `json:"turnId"`
		}{r.Disposition, r.TurnID})
	}
	return Marshal(struct {
		Disposition   string `json:"disposition"`
		QueueRevision int64  `json:"queueRevision"`
	}{r.Disposition, r.QueueRevision})
}

// QueueRetractInput is the input of queue.retract.
type QueueRetractInput struct {
	OriginHostEpoch string `json:"originHostEpoch"`
	SessionID       string `json:"sessionId"`
	RetractID       string `json:"retractId"`
}

// QueueRetractResult is the result of queue.retract. A nil Retracted
// encodes as [].
type QueueRetractResult struct {
	QueueRevision int64                      `json:"queueRevision"`
	Retracted     []RetractedMessageSnapshot `json:"retracted"`
}

// MarshalJSON encodes the result with a nil list as [].
func (r QueueRetractResult) MarshalJSON() ([]byte, error) {
	type plain QueueRetractResult
	q := plain(r)
	q.Retracted = nonNil(q.Retracted)
	return Marshal(q)
}

// TurnInterruptInput is the input of turn.interrupt.
type TurnInterruptInput struct {
	OriginHostEpoch string `json:"originHostEpoch"`
	SessionID       string `json:"sessionId"`
	InterruptID     string `json:"interruptId"`
	TurnID          string `json:"turnId"`
	RunID           string `json:"runId"`
}

// TurnInterruptResult is the result of turn.interrupt. A nil Retracted
// encodes as [].
type TurnInterruptResult struct {
	QueueRevision int64                      `json:"queueRevision"`
	Retracted     []RetractedMessageSnapshot `json:"retracted"`
	Turn          TurnSnapshot               `json:"turn"`
}

// MarshalJSON encodes the result with a nil list as [].
func (r TurnInterruptResult) MarshalJSON() ([]byte, error) {
	type plain TurnInterruptResult
	q := plain(r)
	q.Retracted = nonNil(q.Retracted)
	return Marshal(q)
}

func init() {
	registerCodec(OpTurnMessageSubmit,
		func(d *D, v Value) any {
			o := d.Exact(v, "input", "originHostEpoch", "sessionId", "messageId", "content", "placement")
			in := TurnMessageSubmitInput{
				OriginHostEpoch: o.ID("originHostEpoch"),
				SessionID:       o.EntityID("sessionId"),
				MessageID:       o.EntityID("messageId"),
			}
			cv, cp := o.Get("content")
			in.Content = decodeMessageContent(d, cv, cp)
			in.Placement = MessagePlacement(o.Enum("placement", placements...))
			return in
		},
		func(d *D, v Value) any {
			r := TurnMessageSubmitResult{Disposition: discriminator(d, v, "result", "disposition",
				DispositionSteering, DispositionFollowup, DispositionTurnStarted)}
			if r.Disposition == DispositionTurnStarted {
				r.TurnID = d.Exact(v, "result", "disposition", "turnId").EntityID("turnId")
			} else {
				r.QueueRevision = d.Exact(v, "result", "disposition", "queueRevision").Count("queueRevision")
			}
			return r
		})
	registerCodec(OpQueueRetract,
		func(d *D, v Value) any {
			o := d.Exact(v, "input", "originHostEpoch", "sessionId", "retractId")
			return QueueRetractInput{
				OriginHostEpoch: o.ID("originHostEpoch"),
				SessionID:       o.EntityID("sessionId"),
				RetractID:       o.EntityID("retractId"),
			}
		},
		func(d *D, v Value) any {
			o := d.Exact(v, "result", "queueRevision", "retracted")
			r := QueueRetractResult{QueueRevision: o.Count("queueRevision")}
			r.Retracted = decodeRetracted(d, o)
			d.EncodedWithin(r, "result", MessageOperationResultMaxBytes)
			return r
		})
	registerCodec(OpTurnInterrupt,
		func(d *D, v Value) any {
			o := d.Exact(v, "input", "originHostEpoch", "sessionId", "interruptId", "turnId", "runId")
			return TurnInterruptInput{
				OriginHostEpoch: o.ID("originHostEpoch"),
				SessionID:       o.EntityID("sessionId"),
				InterruptID:     o.EntityID("interruptId"),
				TurnID:          o.EntityID("turnId"),
				RunID:           o.EntityID("runId"),
			}
		},
		func(d *D, v Value) any {
			o := d.Exact(v, "result", "queueRevision", "retracted", "turn")
			r := TurnInterruptResult{QueueRevision: o.Count("queueRevision")}
			r.Retracted = decodeRetracted(d, o)
			tv, tp := o.Get("turn")
			r.Turn = decodeTurnSnapshot(d, tv, tp)
			d.EncodedWithin(r, "result", MessageOperationResultMaxBytes)
			return r
		})
}

// DecodeSessionMessageQueueProjection strictly decodes a queue projection.
func DecodeSessionMessageQueueProjection(v Value) (SessionMessageQueueProjection, error) {
	d := &D{}
	p := decodeQueueProjection(d, v, "queue")
	return p, d.Err()
}

func decodeQueueProjection(d *D, v Value, path string) SessionMessageQueueProjection {
	o := d.Exact(v, path, "hostEpoch", "queueRevision", "steering", "followup")
	p := SessionMessageQueueProjection{
		HostEpoch:     o.ID("hostEpoch"),
		QueueRevision: o.Count("queueRevision"),
	}
	p.Steering = decodeQueueEntries(d, o, "steering", func(e MessageQueueEntrySnapshot) bool {
		return e.Placement == PlacementCurrentTurn && (e.State == MessageQueued || e.State == MessageInFlight)
	})
	p.Followup = decodeQueueEntries(d, o, "followup", func(e MessageQueueEntrySnapshot) bool {
		return e.Placement == PlacementNextTurn && e.State == MessageQueued
	})
	if !d.Failed() && len(p.Steering)+len(p.Followup) > MessageQueueMaxEntries {
		d.Fail(path, "more than %d entries", MessageQueueMaxEntries)
	}
	requireUniqueEntries(d, path, p.Steering, p.Followup)
	d.EncodedWithin(p, path, MessageQueueProjectionMaxBytes)
	return p
}

func decodeRetracted(d *D, o Obj) []RetractedMessageSnapshot {
	out := decodeQueueEntries(d, o, "retracted", func(e MessageQueueEntrySnapshot) bool {
		return e.State == MessageRetracted
	})
	requireUniqueEntries(d, o.path+".retracted", out)
	return out
}

// decodeQueueEntries decodes the entry list at key (at most
// MessageQueueMaxEntries), each of which must satisfy allowed.
func decodeQueueEntries(d *D, o Obj, key string, allowed func(MessageQueueEntrySnapshot) bool) []MessageQueueEntrySnapshot {
	items, p := o.Array(key, 0, MessageQueueMaxEntries)
	out := make([]MessageQueueEntrySnapshot, 0, len(items))
	for i, item := range items {
		e := decodeQueueEntry(d, item, Index(p, i))
		if !d.Failed() && !allowed(e) {
			d.Fail(Index(p, i), "entry with placement %q and state %q is not allowed here", e.Placement, e.State)
		}
		out = append(out, e)
	}
	return out
}

func decodeQueueEntry(d *D, v Value, path string) MessageQueueEntrySnapshot {
	o := d.Exact(v, path, "entryId", "messageId", "content", "placement", "state")
	e := MessageQueueEntrySnapshot{EntryID: o.EntityID("entryId"), MessageID: o.EntityID("messageId")}
	cv, cp := o.Get("content")
	e.Content = decodeMessageContent(d, cv, cp)
	e.Placement = MessagePlacement(o.Enum("placement", placements...))
	e.State = MessageState(o.Enum("state", string(MessageQueued), string(MessageInFlight), string(MessageRetracted)))
	if !d.Failed() && e.State == MessageInFlight && e.Placement != PlacementCurrentTurn {
		d.Fail(path, "in_flight requires placement current_turn")
	}
	return e
}

// requireUniqueEntries fails unless entry ids and message ids are each unique
// across all lists.
func requireUniqueEntries(d *D, path string, lists ...[]MessageQueueEntrySnapshot) {
	if d.Failed() {
		return
	}
	entries := map[string]bool{}
	messages := map[string]bool{}
	for _, list := range lists {
		for _, e := range list {
			if entries[e.EntryID] || messages[e.MessageID] {
				d.Fail(path, "repeats entry %q or message %q", e.EntryID, e.MessageID)
				return
			}
			entries[e.EntryID] = true
			messages[e.MessageID] = true
		}
	}
}
