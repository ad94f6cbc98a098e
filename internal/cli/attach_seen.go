package cli

import (
	"maps"

	"github.com/maka-agent/maka/protocol"
)

// A subscription opened during a turn first receives what the turn
// produced so far (docs/protocol.md, "Replay of the running turn"). When
// `maka attach` has to open its subscription again (it fell behind, or the
// host closed it), that replay repeats what it already printed; seenTurn
// remembers what was printed of the current root turn so that the repeat
// is dropped and only what is new is shown.

// Bounds of what is remembered of one turn: its messages and tool events
// (the host's replay of a turn holds at most about 4096 tool events).
const (
	maxSeenMessages   = 1024
	maxSeenToolEvents = 4096
)

type seenTurn struct {
	turnID string
	text   map[string]int  // bytes printed per kind/messageId
	tools  map[string]bool // tool event ids printed
	// skip is the text of each message a resumed subscription's replay
	// repeats, in bytes, not yet dropped.
	skip map[string]int
}

// resumed is called when a subscription is opened again: its replay of
// the turn repeats what was printed.
func (s *seenTurn) resumed() { s.skip = maps.Clone(s.text) }

func (s *seenTurn) of(turnID string) {
	if s.turnID != turnID {
		*s = seenTurn{turnID: turnID, text: map[string]int{}, tools: map[string]bool{}}
	}
}

// delta returns the part of d not printed yet ("" for none).
func (s *seenTurn) delta(d protocol.SessionAssistantDelta) string {
	s.of(d.TurnID)
	key := d.Kind + "/" + d.MessageID
	drop := min(s.skip[key], len(d.Text))
	if drop > 0 {
		s.skip[key] -= drop
	}
	if _, ok := s.text[key]; ok || len(s.text) < maxSeenMessages {
		s.text[key] += len(d.Text) - drop
	}
	return d.Text[drop:]
}

// tool reports whether ev is new.
func (s *seenTurn) tool(ev protocol.SessionToolEvent) bool {
	s.of(ev.TurnID)
	if ev.ID == "" {
		return true // nothing to know it by
	}
	if s.tools[ev.ID] {
		return false
	}
	if len(s.tools) < maxSeenToolEvents {
		s.tools[ev.ID] = true
	}
	return true
}
