package protocol

// This file owns the interaction shapes of protocol.md §6.4 and the codecs of
// interaction.query and interaction.answer.

// InteractionSnapshot is an interaction in any state (pending, answered, closed).
type InteractionSnapshot struct {
	SchemaVersion int64  `json:"schemaVersion"`
	InteractionID string `json:"interactionId"`
	SessionID     string `json:"sessionId"`
	TurnID        string `json:"turnId"`
	RunID         string `json:"runId"`
	Revision      int64  `json:"revision"`
	Request       Value  `json:"request"`
	Status        string `json:"status"`
	Outcome       Value  `json:"outcome"`
}

// InteractionProjection is SessionInteractionProjection: {"pending": [...]}.
type InteractionProjection struct {
	Pending []InteractionSnapshot `json:"pending"`
}

// decodeInteractionProjection decodes a SessionInteractionProjection whose
// entries must all be pending interactions of sessionID.
func decodeInteractionProjection(d *D, v Value, path, sessionID string) InteractionProjection {
	o := d.Exact(v, path, "pending")
	items, p := o.Array("pending", 0, 16)
	out := InteractionProjection{Pending: []InteractionSnapshot{}}
	for i := range items {
		_ = Index(p, i)
		d.Fail(Index(p, i), "pending interactions are not decoded yet")
	}
	_ = sessionID
	return out
}
