package turns_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/maka-agent/maka/internal/model"
	"github.com/maka-agent/maka/internal/tools"
	"github.com/maka-agent/maka/protocol"
)

// stuckTool is a tool whose call blocks until release is closed, whatever
// its context, like a read blocked in the kernel.
type stuckTool struct {
	once              sync.Once
	running, returned chan struct{}
	release           chan struct{}
}

func (*stuckTool) Name() string                { return "Stuck" }
func (*stuckTool) Description() string         { return "blocks until released" }
func (*stuckTool) Parameters() json.RawMessage { return json.RawMessage(`{"type":"object"}`) }
func (*stuckTool) PermissionRequired() bool    { return false }
func (*stuckTool) ActivityKind() string        { return tools.ActivityTool }

func (s *stuckTool) Run(context.Context, tools.Env, json.RawMessage) (tools.Result, error) {
	s.once.Do(func() { close(s.running) })
	<-s.release
	defer close(s.returned)
	return tools.TextResult("late"), nil
}

// TestStopAnswersWhileAToolIgnoresIt checks that turn.stop answers with
// the cancelled turn while its tool call still blocks, and that closing
// the coordinator waits for the abandoned call to return.
func TestStopAnswersWhileAToolIgnoresIt(t *testing.T) {
	stuck := &stuckTool{running: make(chan struct{}), returned: make(chan struct{}), release: make(chan struct{})}
	f := newFixture(t, stuck)
	f.createSession("s1")
	f.model.next = func(_ context.Context, _ model.Request, emit func(model.Event) error) (model.Finish, error) {
		if err := emit(model.Event{Kind: model.EventToolCall, ToolCall: model.ToolCall{ID: "c1", Name: "Stuck", Input: json.RawMessage(`{}`)}}); err != nil {
			return model.Finish{}, err
		}
		return model.Finish{Reason: model.FinishToolCalls}, nil
	}
	s := f.mustStart("s1", "t1", "go")
	<-stuck.running
	stopped, err := f.stop("s1", "t1", s.RunID)
	if err != nil {
		t.Fatalf("stop: %s %s", err.Code, err.Message)
	}
	if stopped.Status != protocol.TurnCancelled || stopped.AbortSource != "turn.stop" {
		t.Fatalf("stopped snapshot %+v", stopped)
	}
	select {
	case <-stuck.returned:
		t.Fatal("the tool returned before it was released; the test proves nothing")
	default:
	}
	var found bool
	for _, m := range f.transcript("s1") {
		if m.ToolUseID == "c1" && m.Status == "errored" && strings.Contains(m.Output, "Stuck did not stop within 1 s of the turn being stopped; its result was discarded") {
			found = true
		}
	}
	if !found {
		t.Errorf("the transcript does not tell the call was abandoned: %+v", f.transcript("s1"))
	}
	close(stuck.release)
	f.close()
	select {
	case <-stuck.returned:
	default:
		t.Error("Close returned before the abandoned call did")
	}
}
