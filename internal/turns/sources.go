package turns

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/maka-agent/maka/protocol"
)

// Source dispositions of an admission: how each source message reached
// the turn.
const (
	SourceTurnStarted = protocol.DispositionTurnStarted // the message started the turn
	SourceSteering    = protocol.DispositionSteering    // queued for a running turn, folded into this one
	SourceFollowup    = protocol.DispositionFollowup    // queued for the turn after a running one
)

// Limits of a durable admission built from queued messages.
const (
	MaxAdmissionSources      = protocol.MessageQueueMaxEntries
	MaxAdmissionContentBytes = 64 * 1024
	MaxAdmissionAttachments  = protocol.MessageQueueMaxEntries * protocol.MaxAttachmentCount
	MaxAdmissionRecordBytes  = 1024 * 1024
	maxIdentityChars         = 128
)

// SourceMessage is one client message an admission was built from.
type SourceMessage struct {
	MessageID   string                    `json:"messageId"`
	Content     protocol.MessageContent   `json:"content"`
	Placement   protocol.MessagePlacement `json:"placement"`
	Disposition string                    `json:"disposition"`
}

// FollowupBatch is the input of the turn after a terminal one: the queued
// messages, in order, and their aggregated content.
type FollowupBatch struct {
	Sources []SourceMessage
	Content protocol.MessageContent
}

// Empty reports whether the batch has no source (the session goes idle).
func (b FollowupBatch) Empty() bool { return len(b.Sources) == 0 }

// AggregateContent is the input of a turn built from sources: the texts
// joined by a blank line; the display texts (each source's displayText,
// else its text) joined the same way and dropped when equal to the text;
// attachments and quotes concatenated in order.
func AggregateContent(sources []SourceMessage) protocol.MessageContent {
	texts := make([]string, len(sources))
	displays := make([]string, len(sources))
	var out protocol.MessageContent
	for i, s := range sources {
		texts[i] = s.Content.Text
		displays[i] = s.Content.Text
		if s.Content.DisplayText != nil {
			displays[i] = *s.Content.DisplayText
		}
		out.Attachments = append(out.Attachments, s.Content.Attachments...)
		out.Quotes = append(out.Quotes, s.Content.Quotes...)
	}
	out.Text = strings.Join(texts, "\n\n")
	if d := strings.Join(displays, "\n\n"); d != out.Text {
		out.DisplayText = &d
	}
	return out
}

// errSuccessorTooLarge reports sources that cannot form a durable
// admission.
var errSuccessorTooLarge = errors.New("turns: the messages cannot form a durable turn")

// CheckSources reports whether sources, in order, can form the durable
// admission of one turn: at most MaxAdmissionSources of them, aggregated
// content with non-empty text within MaxAdmissionContentBytes and
// MaxAdmissionAttachments, and a whole record (with identities of maximal
// length) within MaxAdmissionRecordBytes.
func CheckSources(sources []SourceMessage) error {
	if len(sources) == 0 || len(sources) > MaxAdmissionSources {
		return fmt.Errorf("%w: %d sources", errSuccessorTooLarge, len(sources))
	}
	content := AggregateContent(sources)
	if content.Text == "" {
		return fmt.Errorf("%w: empty text", errSuccessorTooLarge)
	}
	if len(content.Attachments) > MaxAdmissionAttachments {
		return fmt.Errorf("%w: %d attachments", errSuccessorTooLarge, len(content.Attachments))
	}
	n, err := protocol.EncodedSize(content)
	if err != nil {
		return err
	}
	if n > MaxAdmissionContentBytes {
		return fmt.Errorf("%w: content of %d bytes", errSuccessorTooLarge, n)
	}
	id := strings.Repeat("x", maxIdentityChars)
	n, err = protocol.EncodedSize(admissionRecord{
		SchemaVersion: 1, SessionID: id, TurnID: id, RunID: id, UserMessageID: id,
		Execution: admissionExecution{Kind: KindExternalMessage}, PreviousRootTurnID: id,
		NormalizedInput: content, SourceMessages: sources, AdmittedAt: protocol.MaxSafeInteger,
	})
	if err != nil {
		return err
	}
	if n > MaxAdmissionRecordBytes {
		return fmt.Errorf("%w: record of %d bytes", errSuccessorTooLarge, n)
	}
	return nil
}

// admissionRecord is the full admission record, for its size bound.
type admissionRecord struct {
	SchemaVersion      int                     `json:"schemaVersion"`
	SessionID          string                  `json:"sessionId"`
	TurnID             string                  `json:"turnId"`
	RunID              string                  `json:"runId"`
	UserMessageID      string                  `json:"userMessageId"`
	Execution          admissionExecution      `json:"execution"`
	PreviousRootTurnID string                  `json:"previousRootTurnId"`
	NormalizedInput    protocol.MessageContent `json:"normalizedInput"`
	SourceMessages     []SourceMessage         `json:"sourceMessages"`
	AdmittedAt         int64                   `json:"admittedAt"`
}

type admissionExecution struct {
	Kind string `json:"kind"`
}

// encodeSources is the JSON of an admission's sources column.
func encodeSources(sources []SourceMessage) (string, error) {
	if len(sources) == 0 {
		return "[]", nil
	}
	b, err := protocol.Marshal(sources)
	return string(b), err
}

// decodeSource decodes one stored source message (stored normalized).
func decodeSource(raw []byte) (SourceMessage, error) {
	var s SourceMessage
	if err := json.Unmarshal(raw, &s); err != nil {
		return SourceMessage{}, fmt.Errorf("turns: source message: %w", err)
	}
	return s, nil
}

// SameContent reports whether two normalized contents are equal
// (attachment and quote order included).
func SameContent(a, b protocol.MessageContent) bool { return sameContent(a, b) }
