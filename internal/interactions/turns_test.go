package interactions_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/maka-agent/maka/internal/interactions"
	"github.com/maka-agent/maka/internal/model"
	"github.com/maka-agent/maka/protocol"
)

// toolModel calls tools in its first step and, once it read their
// results, reports them on results and ends the turn.
type toolModel struct {
	calls   []model.ToolCall
	results chan []model.Message
}

func (m *toolModel) Stream(_ context.Context, req model.Request, emit func(model.Event) error) (model.Finish, error) {
	msgs := req.Messages
	if n := len(msgs); n > 0 && msgs[n-1].Role == model.RoleTool {
		var tools []model.Message
		for i := n - 1; i >= 0 && msgs[i].Role == model.RoleTool; i-- {
			tools = append(tools, msgs[i])
		}
		m.results <- tools
		if err := emit(model.Event{Kind: model.EventText, Text: "done"}); err != nil {
			return model.Finish{}, err
		}
		return model.Finish{Reason: model.FinishStop}, nil
	}
	for _, c := range m.calls {
		if err := emit(model.Event{Kind: model.EventToolCall, ToolCall: c}); err != nil {
			return model.Finish{}, err
		}
	}
	return model.Finish{Reason: model.FinishToolCalls}, nil
}

func call(id, name string, args any) model.ToolCall {
	b, _ := json.Marshal(args)
	return model.ToolCall{ID: id, Name: name, Input: b}
}

func (f *fixture) createSession(id string) {
	f.t.Helper()
	out := f.call(protocol.OpSessionCreate, protocol.SessionCreateInput{
		SessionID: id, Workspace: protocol.HostPathWorkspace(f.t.TempDir()), PermissionMode: protocol.PermissionModeAsk,
	})
	if out.Err != nil {
		f.t.Fatalf("create session: %v", out.Err)
	}
	f.subscribe(id)
}

func (f *fixture) turnStatus(sessionID, turnID string) protocol.TurnStatus {
	f.t.Helper()
	return wantOK[protocol.TurnSnapshot](f.t, f.call(protocol.OpTurnQuery, protocol.TurnQueryInput{SessionID: sessionID, TurnID: turnID})).Status
}

func TestTurnApprovalAndQuestionThroughTheAgent(t *testing.T) {
	m := &toolModel{results: make(chan []model.Message, 1), calls: []model.ToolCall{
		call("tu-bash", "Bash", map[string]string{"command": "echo approved | tee /dev/null"}),
		call("tu-ask", "AskUserQuestion", map[string]any{"questions": []any{
			map[string]any{"question": "Color?", "options": []any{map[string]any{"label": "red"}, map[string]any{"label": "blue"}}},
		}}),
	}}
	f := newFixtureWith(t, interactions.DefaultPermissionTimeout, m)
	f.createSession("s1")
	start := wantOK[protocol.TurnSnapshot](t, f.call(protocol.OpTurnStart, protocol.TurnStartInput{SessionID: "s1", TurnID: "t1", Content: protocol.MessageContent{Text: "go"}}))

	snap := f.waitFrame("s1", "two pending", func(s protocol.SessionContinuitySnapshot) bool { return len(s.Interactions.Pending) == 2 })
	if snap.RootTurn == nil || snap.RootTurn.Status != protocol.TurnWaitingForUser || f.turnStatus("s1", "t1") != protocol.TurnWaitingForUser {
		t.Fatalf("root turn while waiting = %+v", snap.RootTurn)
	}
	byKind := map[string]protocol.InteractionSnapshot{}
	for _, p := range snap.Interactions.Pending {
		byKind[p.Request.Kind] = p
		if p.RunID != start.RunID || p.TurnID != "t1" {
			t.Fatalf("pending %+v does not belong to run %s", p, start.RunID)
		}
	}
	wantOK[protocol.InteractionAnsweredSnapshot](t, f.answer(byKind["permission"].InteractionID, allow(false)))
	wantOK[protocol.InteractionAnsweredSnapshot](t, f.answer(byKind["question"].InteractionID, answers(str("blue"))))

	results := recv(t, m.results)
	var bashOut, askOut string
	for _, r := range results {
		switch r.ToolName {
		case "Bash":
			bashOut = r.Text
		case "AskUserQuestion":
			askOut = r.Text
		}
	}
	if !strings.Contains(bashOut, "approved") || !strings.Contains(askOut, "Answer: blue") {
		t.Fatalf("tool results: bash %q, question %q", bashOut, askOut)
	}
	if err := f.turns.WaitIdle(testCtx(t), "s1"); err != nil {
		t.Fatal(err)
	}
	if st := f.turnStatus("s1", "t1"); st != protocol.TurnCompleted {
		t.Fatalf("turn status = %s", st)
	}
	if f.c.Err() != nil {
		t.Fatalf("poisoned: %v", f.c.Err())
	}
}

func TestTurnStopClosesPendingInteractions(t *testing.T) {
	m := &toolModel{results: make(chan []model.Message, 1), calls: []model.ToolCall{
		call("tu-rm", "Bash", map[string]string{"command": "rm -rf build"}),
	}}
	f := newFixtureWith(t, interactions.DefaultPermissionTimeout, m)
	f.createSession("s1")
	start := wantOK[protocol.TurnSnapshot](t, f.call(protocol.OpTurnStart, protocol.TurnStartInput{SessionID: "s1", TurnID: "t1", Content: protocol.MessageContent{Text: "go"}}))
	snap := f.waitFrame("s1", "one pending", func(s protocol.SessionContinuitySnapshot) bool { return len(s.Interactions.Pending) == 1 })
	id := snap.Interactions.Pending[0].InteractionID
	if c := snap.Interactions.Pending[0].Request.Prompt.(protocol.ToolPermissionPrompt).Category; c != protocol.ToolCategoryFSDestructive {
		t.Fatalf("category = %s", c)
	}

	stopped := wantOK[protocol.TurnSnapshot](t, f.call(protocol.OpTurnStop, protocol.TurnStopInput{SessionID: "s1", TurnID: "t1", RunID: start.RunID}))
	if stopped.Status != protocol.TurnCancelled {
		t.Fatalf("stopped turn = %+v", stopped)
	}
	s := wantOK[protocol.InteractionSnapshot](t, f.query("s1", id))
	if s.Status != protocol.InteractionStatusClosed || s.Outcome.Reason != protocol.InteractionClosureTurnStopped {
		t.Fatalf("interaction after stop = %+v", s)
	}
	wantErr(t, f.answer(id, allow(false)), protocol.ErrAlreadyResolved, interactions.MessageAlreadyClosed)
	f.waitFrame("s1", "cancelled root, nothing pending", func(s protocol.SessionContinuitySnapshot) bool {
		return len(s.Interactions.Pending) == 0 && s.RootTurn != nil && s.RootTurn.Status == protocol.TurnCancelled
	})
	if f.c.Err() != nil || f.poisons.Load() != 0 {
		t.Fatalf("poisoned: %v", f.c.Err())
	}
}
