package soak_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/protocol"
)

// follower reads one session subscription in the test goroutine and
// checks that its sequence is gapless.
type follower struct {
	sub  *client.Subscription
	next int64
}

func follow(t *testing.T, c *client.Conn, sessionID string) *follower {
	t.Helper()
	sub, err := c.OpenSubscription(opCtx(t), sessionID)
	if err != nil {
		t.Fatalf("subscription.open %s: %v", sessionID, err)
	}
	return &follower{sub: sub, next: sub.Open.NextSequence}
}

// untilTerminal reads until the terminal projection of turnID and returns
// the text streamed for it and its terminal snapshot.
func (f *follower) untilTerminal(ctx context.Context, turnID string) (string, protocol.TurnSnapshot, error) {
	var text strings.Builder
	for {
		frame, err := f.sub.Next(ctx)
		if err != nil {
			return text.String(), protocol.TurnSnapshot{}, fmt.Errorf("waiting for the end of %s: %w", turnID, err)
		}
		var seq int64
		switch fr := frame.(type) {
		case protocol.ProjectionFrame:
			seq = fr.Sequence
			if rt := fr.Snapshot.RootTurn; rt != nil && rt.TurnID == turnID && rt.Status.Terminal() {
				if seq != f.next {
					return "", protocol.TurnSnapshot{}, fmt.Errorf("sequence %d, want %d", seq, f.next)
				}
				f.next++
				return text.String(), *rt, nil
			}
		case protocol.DeltaFrame:
			seq = fr.Sequence
			if fr.Delta.TurnID == turnID && fr.Delta.Kind == protocol.DeltaText {
				text.WriteString(fr.Delta.Text)
			}
		case protocol.EventFrame:
			seq = fr.Sequence
		case protocol.ClosedFrame:
			return text.String(), protocol.TurnSnapshot{}, fmt.Errorf("subscription closed: %s", fr.Reason)
		}
		if seq != f.next {
			return "", protocol.TurnSnapshot{}, fmt.Errorf("sequence %d, want %d", seq, f.next)
		}
		f.next++
	}
}

// runTurn starts a turn on c and follows it to its end on f.
func runTurn(t *testing.T, c *client.Conn, f *follower, sessionID, turnID, text string) (string, protocol.TurnSnapshot) {
	t.Helper()
	started, err := c.StartTurn(opCtx(t), protocol.TurnStartInput{SessionID: sessionID, TurnID: turnID, Content: protocol.MessageContent{Text: text}})
	if err != nil {
		t.Fatalf("turn.start %s/%s: %v", sessionID, turnID, err)
	}
	streamed, end, err := f.untilTerminal(opCtx(t), turnID)
	if err != nil {
		t.Fatalf("session %s: %v", sessionID, err)
	}
	if end.RunID != started.RunID {
		t.Fatalf("turn %s/%s ended as run %s, started as %s", sessionID, turnID, end.RunID, started.RunID)
	}
	return streamed, end
}

// acked is what a client was told about a turn: its terminal snapshot and
// its durable transcript.
type acked struct {
	session, turn string
	end           protocol.TurnSnapshot
	transcript    string // assistant text
	user          []string
}

// record reads what the host says about a finished turn.
func record(t *testing.T, c *client.Conn, sessionID, turnID string) acked {
	t.Helper()
	snap, err := c.QueryTurn(opCtx(t), protocol.TurnQueryInput{SessionID: sessionID, TurnID: turnID})
	if err != nil {
		t.Fatalf("turn.query %s/%s: %v", sessionID, turnID, err)
	}
	msgs, err := transcript(opCtx(t), c, sessionID)
	if err != nil {
		t.Fatalf("transcript of %s: %v", sessionID, err)
	}
	return acked{session: sessionID, turn: turnID, end: snap, transcript: assistantText(msgs, turnID), user: userTexts(msgs, turnID)}
}

// checkIntact fails the test unless every turn reads back as recorded.
func checkIntact(t *testing.T, c *client.Conn, turns []acked) {
	t.Helper()
	for _, want := range turns {
		got := record(t, c, want.session, want.turn)
		if got.end != want.end || got.transcript != want.transcript || strings.Join(got.user, "\x00") != strings.Join(want.user, "\x00") {
			t.Errorf("turn %s/%s after the restart:\n got %+v\nwant %+v", want.session, want.turn, got, want)
		}
	}
}
