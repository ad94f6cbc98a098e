package tui

import (
	"strings"

	"github.com/maka-agent/maka/protocol"
)

// entryKind is what a transcript entry shows.
type entryKind int

const (
	entryUser entryKind = iota
	entryAssistant
	entryThinking
	entryTool
	// entryNote is an error or notice of this interface, kept in the
	// transcript (not part of the session's record).
	entryNote
)

// Bounds of what the transcript keeps in memory.
const (
	// maxTranscriptPages bounds the pages one load reads.
	maxTranscriptPages = 4096
	// maxToolOutputBytes bounds the live output kept per tool card (its
	// tail is kept).
	maxToolOutputBytes = 16 * 1024
)

// entry is one block of the transcript: a user, assistant or thinking
// message (all parts joined) or a tool call card.
type entry struct {
	kind   entryKind
	id     string // messageId, or toolUseId for a tool card
	turnID string
	text   string

	// live marks an entry built from subscription frames (or sent by this
	// client) that the last transcript load did not contain.
	live bool
	// local marks the user message this client sent before the host
	// recorded it.
	local bool

	tool *toolCard

	// A note's hint (what to do next), whether it is an error, and the
	// key of the entry it follows ("": the start).
	hint  string
	isErr bool
	after string

	// render cache
	rendered      string
	renderedWidth int
	dirty         bool
}

// toolCard is the state of one tool call.
type toolCard struct {
	name      string
	args      string // a short summary (the display name of the call)
	status    string // running, completed, errored or unknown
	output    string // output preview (tail)
	truncated bool
	progress  string
	waiting   bool // a pending interaction asks about this call
}

const toolRunning = "running"

func (e *entry) touch() { e.dirty = true }

// key identifies an entry across transcript loads and live frames.
func (e *entry) key() string {
	switch e.kind {
	case entryTool:
		return "tool:" + e.id
	case entryThinking:
		return "thinking:" + e.id
	case entryUser:
		return "user:" + e.id
	case entryNote:
		return "note:" + e.id
	}
	return "assistant:" + e.id
}

// entriesFromTranscript joins the parts of split messages and turns tool
// messages into cards.
func entriesFromTranscript(msgs []protocol.TranscriptMessage) []*entry {
	var out []*entry
	for _, m := range msgs {
		if m.Role == protocol.TranscriptRoleTool {
			out = append(out, &entry{kind: entryTool, id: m.ToolUseID, turnID: m.TurnID, dirty: true, tool: &toolCard{
				name: m.ToolName, status: m.Status, output: m.Output, truncated: m.Truncated,
			}})
			continue
		}
		kind := roleKind(m.Role)
		if n := len(out); n > 0 && m.Part > 1 {
			last := out[n-1]
			if last.kind == kind && last.id == m.MessageID {
				last.text += m.Text
				continue
			}
		}
		out = append(out, &entry{kind: kind, id: m.MessageID, turnID: m.TurnID, text: m.Text, dirty: true})
	}
	return out
}

func roleKind(r protocol.TranscriptRole) entryKind {
	switch r {
	case protocol.TranscriptRoleUser:
		return entryUser
	case protocol.TranscriptRoleThinking:
		return entryThinking
	}
	return entryAssistant
}

// mergeLive returns the loaded transcript completed with the live entries
// of the turns in active (the running turn, and one being started) that the
// load did not (fully) contain. Live entries of any other turn are dropped:
// the loaded transcript is the record of finished turns.
func mergeLive(loaded, current []*entry, active map[string]bool) []*entry {
	byKey := make(map[string]*entry, len(loaded))
	userTurns := map[string]bool{}
	for _, e := range loaded {
		byKey[e.key()] = e
		if e.kind == entryUser {
			userTurns[e.turnID] = true
		}
	}
	out := loaded
	// A card keeps the command or path shown while it ran.
	for _, e := range current {
		if e.kind == entryTool && e.tool.args != "" {
			if got, ok := byKey[e.key()]; ok && got.tool.args == "" {
				got.tool.args = e.tool.args
			}
		}
	}
	for _, e := range current {
		if !e.live || !active[e.turnID] {
			continue
		}
		if e.local {
			if !userTurns[e.turnID] {
				out = append(out, e)
			}
			continue
		}
		got, ok := byKey[e.key()]
		if !ok {
			out = append(out, e)
			continue
		}
		switch {
		case e.kind == entryTool:
			if got.tool.status == protocol.TranscriptToolUnknown {
				got.tool = e.tool
				got.touch()
			}
		case len(e.text) > len(got.text):
			got.text = e.text
			got.live = true
			got.touch()
		default:
			// The recorded text is at least as long: follow it, so later
			// deltas extend what is shown.
			got.live = true
		}
	}
	return placeNotes(out, current)
}

// placeNotes puts the notes of current back into entries, each after the
// entry it followed (at the end when that entry is gone).
func placeNotes(entries, current []*entry) []*entry {
	for _, n := range current {
		if n.kind != entryNote {
			continue
		}
		at := len(entries)
		if n.after == "" {
			at = 0
			for at < len(entries) && entries[at].kind == entryNote {
				at++
			}
		}
		for i, e := range entries {
			if e.key() == n.after {
				at = i + 1
				for at < len(entries) && entries[at].kind == entryNote {
					at++
				}
				break
			}
		}
		entries = append(entries[:at], append([]*entry{n}, entries[at:]...)...)
	}
	return entries
}

// applyDelta appends streamed assistant or thinking text.
func applyDelta(entries []*entry, d protocol.SessionAssistantDelta) []*entry {
	kind := entryAssistant
	if d.Kind == protocol.DeltaThinking {
		kind = entryThinking
	}
	for i := len(entries) - 1; i >= 0; i-- {
		e := entries[i]
		if e.kind == kind && e.id == d.MessageID {
			e.text += d.Text
			e.live = true
			e.touch()
			return entries
		}
	}
	return append(entries, &entry{kind: kind, id: d.MessageID, turnID: d.TurnID, text: d.Text, live: true, dirty: true})
}

// applyToolEvent updates the card of a tool event, creating it on
// tool_start (or on any event of a call whose start was missed).
func applyToolEvent(entries []*entry, ev protocol.SessionToolEvent) []*entry {
	var card *entry
	for i := len(entries) - 1; i >= 0; i-- {
		if e := entries[i]; e.kind == entryTool && e.id == ev.ToolUseID {
			card = e
			break
		}
	}
	if card == nil {
		card = &entry{kind: entryTool, id: ev.ToolUseID, turnID: ev.TurnID, tool: &toolCard{status: toolRunning}}
		entries = append(entries, card)
	}
	card.live = true
	card.touch()
	t := card.tool
	switch ev.Type {
	case protocol.ToolStart:
		t.name = ev.ToolName
		if ev.DisplayName != "" && ev.DisplayName != ev.ToolName {
			t.args = ev.DisplayName
		}
		t.status = toolRunning
	case protocol.ToolOutputDelta:
		t.output, t.truncated = appendTail(t.output, ev.Chunk, maxToolOutputBytes, t.truncated)
	case protocol.ToolProgress:
		t.progress = ev.Chunk
	case protocol.ToolResult:
		t.status = ev.Status
		t.progress = ""
	}
	return entries
}

// appendTail appends chunk to s and keeps at most limit bytes of the end,
// cut at a line start when possible.
func appendTail(s, chunk string, limit int, truncated bool) (string, bool) {
	s += chunk
	if len(s) <= limit {
		return s, truncated
	}
	s = s[len(s)-limit:]
	if i := strings.IndexByte(s, '\n'); i >= 0 && i < len(s)-1 {
		s = s[i+1:]
	}
	return strings.ToValidUTF8(s, ""), true
}
