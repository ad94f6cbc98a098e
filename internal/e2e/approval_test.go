package e2e_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/internal/modeltest"
	"github.com/maka-agent/maka/protocol"
)

// touchModel asks to run `touch ran.txt` with Bash, then reports the tool
// result it received.
func touchModel(req *modeltest.Request) modeltest.Reply {
	results := req.ToolResultsSinceUser()
	if len(results) == 0 {
		return modeltest.Reply{Chunks: []modeltest.Chunk{{Call: &modeltest.Call{
			ID: "call_touch", Name: "Bash", Arguments: `{"command":"touch ran.txt"}`}}}}
	}
	return modeltest.Reply{Chunks: []modeltest.Chunk{{Text: "result: " + results[0].Text()}}}
}

// pendingOf returns the pending interactions of the last projection.
func pendingOf(frames []any) []protocol.InteractionSnapshot {
	for i := len(frames) - 1; i >= 0; i-- {
		if p, ok := frames[i].(protocol.ProjectionFrame); ok {
			return p.Snapshot.Interactions.Pending
		}
	}
	return nil
}

func answer(decision string) protocol.InteractionAnswer {
	return protocol.InteractionAnswer{Kind: protocol.InteractionKindPermission, Decision: decision}
}

// A client that connects after the turn started sees the pending approval
// in its snapshot and answers it; the tool runs (or not) and the client
// that started the turn sees the result.
func TestApprovalAnsweredByALaterClient(t *testing.T) {
	h := newHost(t, touchModel)
	for _, decision := range []string{protocol.InteractionDecisionAllow, protocol.InteractionDecisionDeny} {
		t.Run(decision, func(t *testing.T) {
			a := h.dial()
			sid := "approve-" + decision
			ws := createSession(t, a, sid, protocol.PermissionModeAsk)
			wa := watch(t, a, sid)
			startTurn(t, a, sid, "turn-1", "touch a file")
			wa.until(t, "pending approval", func(frames []any) bool { return len(pendingOf(frames)) == 1 })
			if got := queryTurn(t, a, sid, "turn-1"); got.Status != protocol.TurnWaitingForUser {
				t.Fatalf("turn while the approval is pending: %s", got.Status)
			}

			b := h.dial()
			sub, err := b.OpenSubscription(opCtx(t), sid)
			if err != nil {
				t.Fatal(err)
			}
			pending := sub.Open.Snapshot.Interactions.Pending
			if len(pending) != 1 || pending[0].Request.Kind != protocol.InteractionKindPermission || pending[0].TurnID != "turn-1" {
				t.Fatalf("late client's snapshot: %+v", pending)
			}
			if p, ok := pending[0].Request.Prompt.(protocol.ToolPermissionPrompt); !ok || p.ToolName != "Bash" {
				t.Fatalf("prompt %+v", pending[0].Request.Prompt)
			}
			res, err := b.AnswerInteraction(opCtx(t), protocol.InteractionAnswerInput{InteractionID: pending[0].InteractionID, Answer: answer(decision)})
			if err != nil {
				t.Fatalf("answer: %v", err)
			}
			if res.Status != protocol.InteractionStatusAnswered || res.Outcome.Decision != decision {
				t.Fatalf("answer result %+v", res)
			}
			frames := wa.untilTerminal(t, "turn-1")
			if got := terminals(frames, "turn-1")[0].Snapshot.RootTurn.Status; got != protocol.TurnCompleted {
				t.Fatalf("turn ended %s", got)
			}
			_, statErr := os.Stat(filepath.Join(ws, "ran.txt"))
			ran := statErr == nil
			if ran != (decision == protocol.InteractionDecisionAllow) {
				t.Fatalf("decision %s: command ran = %v (%v)", decision, ran, statErr)
			}
			if !ran && !errors.Is(statErr, fs.ErrNotExist) {
				t.Fatal(statErr)
			}
			// The starting client saw the tool's result event.
			var result *protocol.EventFrame
			for _, f := range frames {
				if e, ok := f.(protocol.EventFrame); ok && e.Event.Type == protocol.ToolResult {
					result = &e
				}
			}
			want := "completed"
			if decision == protocol.InteractionDecisionDeny {
				want = "errored"
			}
			if result == nil || result.Event.Status != want {
				t.Fatalf("tool result event %+v, want status %s", result, want)
			}
			// The answered interaction stays queryable, and an equivalent
			// retry returns the stored winner.
			again, err := a.AnswerInteraction(opCtx(t), protocol.InteractionAnswerInput{InteractionID: pending[0].InteractionID, Answer: answer(decision)})
			if err != nil || again.Outcome.CommittedAt != res.Outcome.CommittedAt {
				t.Fatalf("equivalent retry: %+v %v", again, err)
			}
			other := protocol.InteractionDecisionDeny
			if decision == other {
				other = protocol.InteractionDecisionAllow
			}
			if _, err := a.AnswerInteraction(opCtx(t), protocol.InteractionAnswerInput{InteractionID: pending[0].InteractionID, Answer: answer(other)}); !client.IsCode(err, protocol.ErrAlreadyResolved) {
				t.Fatalf("a different later answer: %v", err)
			}
			if !strings.Contains(transcriptText(t, a, sid), "result:") {
				t.Fatal("the model's answer is missing from the transcript")
			}
		})
	}
}

func transcriptText(t *testing.T, c *client.Conn, sid string) string {
	var sb strings.Builder
	for _, m := range transcript(t, c, sid) {
		sb.WriteString(m.Text)
		sb.WriteString(m.Output)
	}
	return sb.String()
}

// Two clients answer one prompt at once with different decisions: exactly
// one wins, the other gets already_resolved.
func TestConcurrentAnswersHaveOneWinner(t *testing.T) {
	h := newHost(t, touchModel)
	a, b := h.dial(), h.dial()
	createSession(t, a, "race", protocol.PermissionModeAsk)
	w := watch(t, a, "race")
	startTurn(t, a, "race", "turn-1", "touch a file")
	frames := w.until(t, "pending approval", func(frames []any) bool { return len(pendingOf(frames)) == 1 })
	id := pendingOf(frames)[0].InteractionID
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, c := range []*client.Conn{a, b} {
		d := []string{protocol.InteractionDecisionAllow, protocol.InteractionDecisionDeny}[i]
		wg.Go(func() {
			_, errs[i] = c.AnswerInteraction(opCtx(t), protocol.InteractionAnswerInput{InteractionID: id, Answer: answer(d)})
		})
	}
	wg.Wait()
	wins, resolved := 0, 0
	for _, err := range errs {
		switch {
		case err == nil:
			wins++
		case client.IsCode(err, protocol.ErrAlreadyResolved):
			resolved++
		default:
			t.Fatalf("answer: %v", err)
		}
	}
	if wins != 1 || resolved != 1 {
		t.Fatalf("%d winners and %d already_resolved, want 1 and 1", wins, resolved)
	}
	w.untilTerminal(t, "turn-1")
}

// turn.stop closes the pending approval (turn_stopped); answering it
// afterwards is already_resolved.
func TestStopClosesThePendingApproval(t *testing.T) {
	h := newHost(t, touchModel)
	c := h.dial()
	createSession(t, c, "stop", protocol.PermissionModeAsk)
	w := watch(t, c, "stop")
	s := startTurn(t, c, "stop", "turn-1", "touch a file")
	frames := w.until(t, "pending approval", func(frames []any) bool { return len(pendingOf(frames)) == 1 })
	id := pendingOf(frames)[0].InteractionID
	stopped, err := c.StopTurn(opCtx(t), protocol.TurnStopInput{SessionID: "stop", TurnID: "turn-1", RunID: s.RunID})
	if err != nil || stopped.Status != protocol.TurnCancelled {
		t.Fatalf("stop: %+v %v", stopped, err)
	}
	q, err := c.QueryInteraction(opCtx(t), protocol.InteractionQueryInput{SessionID: "stop", InteractionID: id})
	if err != nil || q.Status != protocol.InteractionStatusClosed || q.Outcome.Reason != "turn_stopped" {
		t.Fatalf("interaction after stop: %+v %v", q, err)
	}
	if _, err := c.AnswerInteraction(opCtx(t), protocol.InteractionAnswerInput{InteractionID: id, Answer: answer(protocol.InteractionDecisionAllow)}); !client.IsCode(err, protocol.ErrAlreadyResolved) {
		t.Fatalf("answer after stop: %v", err)
	}
}
