package sessions

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/protocol"
)

// transcriptCursor names the next transcript entry: part Part (1-based) of
// the message at Seq (or of the first message after it, from part 1, when
// that message is gone) of session SessionID.
type transcriptCursor struct {
	SessionID string
	Seq       int64
	Part      int64
}

const transcriptCursorTag = "t1"

// encode returns the opaque wire form: base64url of
// "t1:<seq>:<part>:<sessionId>".
func (c transcriptCursor) encode() string {
	return encodeCursor(transcriptCursorTag + ":" + strconv.FormatInt(c.Seq, 10) + ":" +
		strconv.FormatInt(c.Part, 10) + ":" + c.SessionID)
}

func parseTranscriptCursor(s string) (transcriptCursor, bool) {
	fields, ok := cursorFields(s, transcriptCursorTag, 4)
	if !ok {
		return transcriptCursor{}, false
	}
	seq, ok1 := parseCount(fields[1])
	part, ok2 := parseCount(fields[2])
	if !ok1 || !ok2 || seq < 1 || part < 1 || !protocol.IsEntityID(fields[3]) {
		return transcriptCursor{}, false
	}
	c := transcriptCursor{SessionID: fields[3], Seq: seq, Part: part}
	return c, c.encode() == s
}

func (s *Service) handleTranscriptPage(ctx context.Context, call *host.Call) host.Outcome {
	in, ok := call.Input.(protocol.SessionTranscriptPageInput)
	if !ok {
		return failure(errors.New("sessions: unexpected session.transcript.page input"))
	}
	limit := in.PageLimit()
	if limit < 1 || limit > protocol.SessionTranscriptMaxLimit {
		return host.Fail(protocol.ErrInvalidRequest, MessageInvalidTranscriptLimit)
	}
	start := transcriptCursor{SessionID: in.SessionID, Seq: 1, Part: 1}
	if in.Cursor != "" {
		c, ok := parseTranscriptCursor(in.Cursor)
		if !ok || c.SessionID != in.SessionID {
			return host.Fail(protocol.ErrInvalidRequest, MessageInvalidTranscriptCursor)
		}
		start = c
	}
	var page protocol.SessionTranscriptPage
	err := s.st.Read(ctx, func(q store.Querier) error {
		if _, err := loadHeader(q, in.SessionID); err != nil {
			return err
		}
		var err error
		page, err = readTranscriptPage(q, start, int(limit))
		return err
	})
	if err != nil {
		return failure(err)
	}
	return host.OK(page)
}

// transcriptRow is one messages row expanded into its wire entries.
type transcriptRow struct {
	seq     int64
	entries []protocol.TranscriptMessage
}

// rowReader yields the transcript rows of a query, skipping rows without
// entries, with one row of lookahead.
type rowReader struct {
	rows *sql.Rows
	next *transcriptRow
	err  error
}

func (r *rowReader) fill() {
	for r.next == nil && r.err == nil && r.rows.Next() {
		row, err := scanTranscriptRow(r.rows)
		if err != nil {
			r.err = err
			return
		}
		if len(row.entries) > 0 {
			r.next = &row
		}
	}
	if r.err == nil && r.next == nil {
		r.err = r.rows.Err()
	}
}

// peek returns the next row without consuming it, or nil at the end.
func (r *rowReader) peek() *transcriptRow {
	r.fill()
	return r.next
}

func (r *rowReader) pop() *transcriptRow {
	r.fill()
	row := r.next
	r.next = nil
	return row
}

// readTranscriptPage reads the page starting at start: at most limit
// entries and SessionTranscriptPageMaxBytes encoded, counted exactly like
// the catalog pages (the empty page, each entry and its comma, and the next
// cursor that replaces null when an entry is followed by another).
func readTranscriptPage(q store.Querier, start transcriptCursor, limit int) (protocol.SessionTranscriptPage, error) {
	page := protocol.SessionTranscriptPage{SessionID: start.SessionID}
	size, err := protocol.EncodedSize(page)
	if err != nil {
		return page, err
	}
	rows, err := q.Query(`SELECT m.seq, m.message_id, m.turn_id, m.role, m.created_at, m.body, m.event_seq, e.payload
		FROM messages m LEFT JOIN run_events e ON e.run_id = m.run_id AND e.seq = m.event_seq
		WHERE m.session_id = ? AND m.seq >= ? ORDER BY m.seq`, start.SessionID, start.Seq)
	if err != nil {
		return page, err
	}
	defer rows.Close()
	rr := &rowReader{rows: rows}
	const nullLen = len("null")
	var next string
	first := true
	for row := rr.pop(); row != nil; row = rr.pop() {
		from := 0
		if first && row.seq == start.Seq {
			from = int(min(start.Part-1, int64(len(row.entries))))
		}
		first = false
		for k := from; k < len(row.entries); k++ {
			here := transcriptCursor{SessionID: start.SessionID, Seq: row.seq, Part: int64(k + 1)}.encode()
			if len(page.Messages) == limit {
				page.NextCursor = &here
				return page, nil
			}
			n, err := protocol.EncodedSize(row.entries[k])
			if err != nil {
				return page, err
			}
			if len(page.Messages) > 0 {
				n++ // comma
			}
			cursor, cursorGrowth := "", 0
			switch {
			case k+1 < len(row.entries):
				cursor = transcriptCursor{SessionID: start.SessionID, Seq: row.seq, Part: int64(k + 2)}.encode()
			case rr.peek() != nil:
				cursor = transcriptCursor{SessionID: start.SessionID, Seq: rr.peek().seq, Part: 1}.encode()
			}
			if rr.err != nil {
				return page, rr.err
			}
			if cursor != "" {
				cursorGrowth = len(cursor) + 2 - nullLen
			}
			if size+n+cursorGrowth > protocol.SessionTranscriptPageMaxBytes {
				if len(page.Messages) == 0 {
					return page, errors.New("sessions: a transcript entry does not fit a transcript page")
				}
				page.NextCursor = &here
				return page, nil
			}
			size += n
			page.Messages = append(page.Messages, row.entries[k])
			next = cursor
		}
	}
	if rr.err != nil {
		return page, rr.err
	}
	if next != "" {
		// Only reachable when a row vanished between peek and pop, which a
		// read transaction rules out; keep the page consistent anyway.
		page.NextCursor = &next
	}
	return page, nil
}

// scanTranscriptRow scans one messages row (with the payload of the run
// event holding its final text, if any) and expands it: a text message into
// the parts of SplitTranscriptText, a tool message into one entry with its
// output preview.
func scanTranscriptRow(rows *sql.Rows) (transcriptRow, error) {
	var row transcriptRow
	var messageID, turnID, role, body string
	var createdAt int64
	var eventSeq sql.NullInt64
	var payload sql.NullString
	if err := rows.Scan(&row.seq, &messageID, &turnID, &role, &createdAt, &body, &eventSeq, &payload); err != nil {
		return row, err
	}
	var b messageBody
	if err := json.Unmarshal([]byte(body), &b); err != nil {
		return row, fmt.Errorf("%w: message %s: %w", errCorrupt, messageID, err)
	}
	if eventSeq.Valid {
		var p MessagePayload
		if !payload.Valid {
			return row, fmt.Errorf("%w: message %s: run event %d is missing", errCorrupt, messageID, eventSeq.Int64)
		}
		if err := json.Unmarshal([]byte(payload.String), &p); err != nil {
			return row, fmt.Errorf("%w: message %s: %w", errCorrupt, messageID, err)
		}
		b.Text = p.Text
	}
	head := protocol.TranscriptMessage{MessageID: messageID, TurnID: turnID, Role: protocol.TranscriptRole(role), CreatedAt: createdAt, Part: 1}
	switch head.Role {
	case protocol.TranscriptRoleUser, protocol.TranscriptRoleAssistant, protocol.TranscriptRoleThinking:
		for i, chunk := range protocol.SplitTranscriptText(b.Text) {
			m := head
			m.Part, m.Text = int64(i+1), chunk
			row.entries = append(row.entries, m)
		}
	case protocol.TranscriptRoleTool:
		m := head
		m.ToolUseID, m.ToolName, m.Status = b.ToolUseID, toolName(b.ToolName), b.Status
		if m.Status == "" {
			m.Status = protocol.TranscriptToolUnknown
		}
		if b.Output != "" {
			out, cut := preview(b.Output, protocol.TranscriptToolOutputMaxBytes, toolOutputMaxEscapedBytes)
			m.Output, m.Truncated = out, b.Truncated || cut
		}
		row.entries = append(row.entries, m)
	default:
		return row, fmt.Errorf("%w: message %s has role %q", errCorrupt, messageID, role)
	}
	return row, nil
}
