package turns

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/maka-agent/maka/internal/sessions"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/protocol"
)

// MessageProof is the durable trace a client message left in a session:
// the admission that names it as a source, and the steering record of its
// delivery to a running turn. Both are nil for a message with no trace.
type MessageProof struct {
	// Source is the message as the admission of TurnID recorded it.
	Source *SourceMessage
	TurnID string
	// Steering is the content the steering record of the message holds.
	Steering *protocol.MessageContent
}

// FindMessageProof reads the durable trace of messageID in sessionID
// inside a store read.
func FindMessageProof(q store.Querier, sessionID, messageID string) (MessageProof, error) {
	var p MessageProof
	var turnID string
	var raw []byte
	err := q.QueryRow(`SELECT a.turn_id, s.value FROM turn_admissions a, json_each(a.sources) s
		WHERE a.session_id = ? AND json_extract(s.value, '$.messageId') = ?
		ORDER BY a.chain_seq LIMIT 1`, sessionID, messageID).Scan(&turnID, &raw)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return p, err
	default:
		src, err := decodeSource(raw)
		if err != nil {
			return p, err
		}
		p.Source, p.TurnID = &src, turnID
	}
	raw = nil
	err = q.QueryRow(`SELECT payload FROM run_events
		WHERE session_id = ? AND type = ? AND json_extract(payload, '$.messageId') = ?
		ORDER BY run_id, seq LIMIT 1`, sessionID, sessions.EventSteeringMessage, messageID).Scan(&raw)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return p, nil
	case err != nil:
		return p, err
	}
	var rec struct {
		Text    string                   `json:"text"`
		Content *protocol.MessageContent `json:"content"`
	}
	if err := json.Unmarshal(raw, &rec); err != nil {
		return p, fmt.Errorf("turns: steering record of message %s: %w", messageID, err)
	}
	if rec.Content == nil {
		rec.Content = &protocol.MessageContent{Text: rec.Text}
	}
	p.Steering = rec.Content
	return p, nil
}
