package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/maka-agent/maka/internal/agent"
	"github.com/maka-agent/maka/internal/tools"
)

// TestStopAbandonsAToolThatIgnoresIt stops a turn while its tool call
// blocks until released, whatever its context: the turn ends cancelled
// once the stop grace has passed (in the bubble's fake time), with the
// call recorded as an error result that says its result was discarded.
// The abandoned call stays tracked until it is released, then its
// goroutine ends, and nothing it does afterwards reaches the record.
func TestStopAbandonsAToolThatIgnoresIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancelCause(t.Context())
		defer cancel(nil)
		running, release, returned := make(chan struct{}), make(chan struct{}), make(chan struct{})
		stuck := &fakeTool{name: "Stuck", run: func(_ context.Context, env tools.Env, _ json.RawMessage) (tools.Result, error) {
			close(running)
			<-release // ignores the stop, like a read blocked in the kernel
			env.Output("stdout", "late output\n")
			defer close(returned)
			return tools.TextResult("late result"), nil
		}}
		p := newProvider(t, calls(textEv("working"), callEv("c1", "Stuck", `{}`)), say("never asked"))
		var tracker agent.Abandoned
		var stoppedAt time.Time
		var wg sync.WaitGroup
		defer wg.Wait()
		wg.Go(func() {
			<-running
			stoppedAt = time.Now()
			cancel(&agent.StopCause{Source: "turn.stop"})
		})
		sink := &recSink{}
		out := runTurn(t, ctx, agent.Turn{Provider: p, Prompt: "go", Tools: tools.NewRegistry(stuck), Abandoned: &tracker}, sink)

		wantOutcome(t, out, agent.StatusCancelled, agent.StopUserStop)
		if out.AbortSource != "turn.stop" {
			t.Errorf("abort source = %q", out.AbortSource)
		}
		if took := time.Since(stoppedAt); took != agent.StopGrace {
			t.Errorf("the turn ended %v after the stop, want the grace of %v", took, agent.StopGrace)
		}
		results := sink.ofType(agent.ToolResult)
		if len(results) != 1 || results[0].ToolUseID != "c1" || !results[0].Result.IsError {
			t.Fatalf("tool_result = %+v, want one error result for c1", results)
		}
		if got, want := resultText(t, results[0].Result), "Stuck did not stop within 1 s of the turn being stopped; its result was discarded"; got != want {
			t.Errorf("result = %q, want %q", got, want)
		}
		if n := len(p.requests()); n != 1 {
			t.Errorf("model called %d times, want 1", n)
		}

		// The call is tracked until it returns.
		if n := tracker.Running(); n != 1 {
			t.Errorf("%d abandoned calls tracked, want 1", n)
		}
		waited := make(chan error, 1)
		go func() { waited <- tracker.Wait(context.Background()) }()
		synctest.Wait()
		select {
		case err := <-waited:
			t.Fatalf("Wait returned %v while the abandoned call still runs", err)
		default:
		}
		short, stop := context.WithTimeout(context.Background(), time.Minute)
		defer stop()
		if err := tracker.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Wait with a deadline = %v, want the deadline", err)
		}
		close(release)
		if err := <-waited; err != nil {
			t.Errorf("Wait = %v after the call returned", err)
		}
		<-returned
		synctest.Wait() // the call's goroutine has ended
		if n := tracker.Running(); n != 0 {
			t.Errorf("%d abandoned calls tracked after they returned", n)
		}
		if evs := sink.ofType(agent.ToolOutputDelta); len(evs) != 0 {
			t.Errorf("output of the abandoned call was recorded: %+v", evs)
		}
	})
}

// TestStopWaitsForAToolWithinTheGrace checks that a tool that takes part
// of the grace to return after the stop still gets its own result
// recorded.
func TestStopWaitsForAToolWithinTheGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancelCause(t.Context())
		defer cancel(nil)
		running := make(chan struct{})
		slow := &fakeTool{name: "Slow", run: func(tctx context.Context, _ tools.Env, _ json.RawMessage) (tools.Result, error) {
			close(running)
			<-tctx.Done()
			time.Sleep(agent.StopGrace / 2) // cleaning up
			return tools.ErrorResult("interrupted"), nil
		}}
		p := newProvider(t, calls(callEv("c1", "Slow", `{}`)))
		var tracker agent.Abandoned
		var wg sync.WaitGroup
		defer wg.Wait()
		wg.Go(func() {
			<-running
			cancel(&agent.StopCause{Source: "turn.stop"})
		})
		sink := &recSink{}
		out := runTurn(t, ctx, agent.Turn{Provider: p, Prompt: "go", Tools: tools.NewRegistry(slow), Abandoned: &tracker}, sink)
		wantOutcome(t, out, agent.StatusCancelled, agent.StopUserStop)
		results := sink.ofType(agent.ToolResult)
		if len(results) != 1 || resultText(t, results[0].Result) != "interrupted" {
			t.Fatalf("tool_result = %+v, want the tool's own result", results)
		}
		if n := tracker.Running(); n != 0 {
			t.Errorf("%d calls abandoned, want none", n)
		}
	})
}
