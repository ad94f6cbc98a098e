package continuity

import (
	"strings"
	"unicode/utf8"

	"github.com/maka-agent/maka/protocol"
)

// The replay of the running root turn (docs/protocol.md, "Replay of the
// running turn"): from its fence to its terminal transition, the publisher
// keeps the live events of the fenced root turn in a bounded log, whether
// or not anyone subscribes. A subscription opened meanwhile receives, right
// after its snapshot and inside its gapless sequence, the log as ordinary
// delta and event frames (the turn's text coalesced into as few deltas as
// the frame bound allows), then the live stream. The log is taken under the
// publisher's lock together with the subscriber's registration, so every
// event is either in the replay or pushed live, never both, never neither.
//
// The replay frames are held outside the subscriber's bounded queue and
// handed to the connection one at a time, before any queued frame; they
// share the log's immutable text.

// TurnReplayMaxBytes bounds the log of one root turn: the bytes of its
// texts and tool chunks, plus replayEventOverhead per tool event. When a
// turn outgrows it, its oldest events (and then the oldest text of its
// oldest message) are dropped, so a replay always joins the live stream
// without a gap but may begin after the turn's beginning. The log lives
// only while its turn is fenced: at most 1 MiB of host memory per running
// turn, freed at its terminal publication.
const TurnReplayMaxBytes = 1 << 20

// replayEventOverhead is what a tool event counts in the bound besides its
// chunk: its identity fields and the frame around it.
const replayEventOverhead = 256

// turnLog is the replay log of one fenced root turn; guarded by the
// publisher's mutex.
type turnLog struct {
	runID   string
	entries []logEntry
	bytes   int
}

// logEntry is a run of coalesced deltas of one message and kind (text set)
// or one tool event.
type logEntry struct {
	kind      string // protocol.DeltaText or DeltaThinking; "" for a tool event
	messageID string
	// text only grows: a replay holds strings taken from it, which later
	// writes never change.
	text *strings.Builder
	tool protocol.SessionToolEvent
}

func (e *logEntry) size() int {
	if e.text != nil {
		return e.text.Len()
	}
	return len(e.tool.Chunk) + replayEventOverhead
}

// add appends an accepted event of the turn.
func (l *turnLog) add(ev Event) {
	switch ev.Type {
	case TextDelta, ThinkingDelta:
		kind := protocol.DeltaText
		if ev.Type == ThinkingDelta {
			kind = protocol.DeltaThinking
		}
		if n := len(l.entries); n > 0 && l.entries[n-1].text != nil &&
			l.entries[n-1].kind == kind && l.entries[n-1].messageID == ev.MessageID {
			l.entries[n-1].text.WriteString(ev.Text)
		} else {
			b := &strings.Builder{}
			b.WriteString(ev.Text)
			l.entries = append(l.entries, logEntry{kind: kind, messageID: ev.MessageID, text: b})
		}
		l.bytes += len(ev.Text)
	default:
		l.entries = append(l.entries, logEntry{tool: ev.Tool})
		l.bytes += len(ev.Tool.Chunk) + replayEventOverhead
	}
	if l.bytes > TurnReplayMaxBytes {
		l.trim(TurnReplayMaxBytes - TurnReplayMaxBytes/8)
	}
}

// trim drops the oldest events until the log holds at most target bytes;
// the last entry left, when still too long, keeps only its newest text.
func (l *turnLog) trim(target int) {
	drop := 0
	for drop < len(l.entries)-1 && l.bytes > target {
		l.bytes -= l.entries[drop].size()
		drop++
	}
	l.entries = append(l.entries[:0], l.entries[drop:]...)
	if l.bytes <= target || len(l.entries) == 0 {
		return
	}
	e := &l.entries[0]
	if e.text == nil {
		return // one tool event: its chunk is bounded by the protocol
	}
	s := e.text.String()
	cut := len(s) - target
	for cut < len(s) && !utf8.RuneStart(s[cut]) {
		cut++
	}
	b := &strings.Builder{}
	b.WriteString(s[cut:])
	e.text = b
	l.bytes -= cut
}

// replayItem is one frame of a replay, built for the subscriber and its
// sequence number when it is handed to the connection.
type replayItem struct {
	runID string
	delta *protocol.SessionAssistantDelta
	tool  *protocol.SessionToolEvent
}

// items returns the replay of the log so far, for turnID.
func (l *turnLog) items(turnID string) []replayItem {
	var out []replayItem
	for i := range l.entries {
		e := &l.entries[i]
		if e.text == nil {
			tool := e.tool
			out = append(out, replayItem{runID: l.runID, tool: &tool})
			continue
		}
		for _, chunk := range protocol.SplitDelta(e.text.String()) {
			out = append(out, replayItem{runID: l.runID, delta: &protocol.SessionAssistantDelta{
				Kind: e.kind, TurnID: turnID, RunID: l.runID, MessageID: e.messageID, Text: chunk,
			}})
		}
	}
	return out
}

// build returns the wire frame of the item for subscriber s at seq.
func (it replayItem) build(s *subscriber, seq int64) any {
	if it.delta != nil {
		return protocol.DeltaFrame{HostEpoch: s.c.epoch, SubscriptionID: s.id, Sequence: seq, SessionID: s.st.id, Delta: *it.delta}
	}
	return protocol.EventFrame{HostEpoch: s.c.epoch, SubscriptionID: s.id, Sequence: seq, SessionID: s.st.id, RunID: it.runID, Event: *it.tool}
}
