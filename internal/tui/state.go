package tui

import "github.com/maka-agent/maka/protocol"

// state is a copy of what the model shows, for tests that watch a running
// program.
type state struct {
	sessionID     string
	sessionStatus protocol.SessionStatus
	turnID        string
	turnStatus    protocol.TurnStatus
	attached      bool
	busy          bool // creating, attaching, loading or sending
	entries       []entryState
	prompt        *protocol.InteractionSnapshot
	queue         int
	notice        string
	view          string
}

type entryState struct {
	kind       entryKind
	id         string
	text       string
	toolName   string
	toolStatus string
	output     string
	live       bool
}

func (m *model) state() state {
	s := state{
		attached: m.stream != nil,
		busy:     m.creating || m.attaching || m.loading || m.sending,
		queue:    m.queueLen(),
		notice:   m.notice,
		view:     m.View(),
	}
	if m.session != nil {
		s.sessionID, s.sessionStatus = m.session.SessionID, m.session.Status
	}
	if rt := m.rootTurn(); rt != nil {
		s.turnID, s.turnStatus = rt.TurnID, rt.Status
	}
	if m.prompt != nil {
		it := m.prompt.it
		s.prompt = &it
	}
	for _, e := range m.entries {
		es := entryState{kind: e.kind, id: e.id, text: e.text, live: e.live}
		if e.tool != nil {
			es.toolName, es.toolStatus, es.output = e.tool.name, e.tool.status, e.tool.output
		}
		s.entries = append(s.entries, es)
	}
	return s
}
