package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/maka-agent/maka/internal/agent"
	"github.com/maka-agent/maka/internal/model"
	"github.com/maka-agent/maka/internal/tools"
)

func TestTextOnlyTurn(t *testing.T) {
	p := newProvider(t, play(model.Finish{Reason: model.FinishStop, Usage: usage(10, 3)},
		textEv("Hel"), textEv("lo"), textEv(" world")))
	probe := &fakeTool{name: "Probe"}
	history := []model.Message{
		{Role: model.RoleUser, Text: "earlier question"},
		{Role: model.RoleAssistant, Text: "earlier answer"},
	}
	sink := &recSink{}
	out := runTurn(t, testCtx(t), agent.Turn{
		Provider: p, Model: "m1", System: "be brief", Prompt: "hi", History: history,
		Tools: tools.NewRegistry(probe),
	}, sink)

	wantOutcome(t, out, agent.StatusCompleted, agent.StopEndTurn)
	if got, want := sink.types(), []string{agent.TextDelta, agent.TextDelta, agent.TextDelta, agent.TextComplete, agent.StepEnd, agent.TokenUsage}; !slices.Equal(got, want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
	evs := sink.events()
	stepID := evs[0].MessageID
	if stepID == "" {
		t.Fatal("text_delta without a message id")
	}
	var deltas []string
	for _, ev := range evs[:3] {
		deltas = append(deltas, ev.Text)
		if ev.MessageID != stepID {
			t.Errorf("delta message id %q, want %q", ev.MessageID, stepID)
		}
	}
	if !slices.Equal(deltas, []string{"Hel", "lo", " world"}) {
		t.Errorf("deltas = %q", deltas)
	}
	if c := evs[3]; c.Text != "Hello world" || c.MessageID != stepID {
		t.Errorf("text_complete = %q (message %q), want %q (message %q)", c.Text, c.MessageID, "Hello world", stepID)
	}
	if u := evs[4].Usage; u == nil || *u != *usage(10, 3) {
		t.Errorf("token_usage = %+v, want 10/3", u)
	}
	if out.Usage == nil || *out.Usage != *usage(10, 3) {
		t.Errorf("outcome usage = %+v", out.Usage)
	}
	ids := map[string]bool{}
	for _, ev := range evs {
		if ids[ev.ID] {
			t.Errorf("event id %q repeats", ev.ID)
		}
		ids[ev.ID] = true
	}

	reqs := p.requests()
	if len(reqs) != 1 {
		t.Fatalf("model called %d times, want 1", len(reqs))
	}
	r := reqs[0]
	if r.Model != "m1" || r.System != "be brief" {
		t.Errorf("request model/system = %q/%q", r.Model, r.System)
	}
	want := append(slices.Clone(history), model.Message{Role: model.RoleUser, Text: "hi"})
	if !messagesEqual(r.Messages, want) {
		t.Errorf("request messages = %+v, want %+v", r.Messages, want)
	}
	if len(r.Tools) != 1 || r.Tools[0].Name != "Probe" || r.Tools[0].Description != probe.Description() || string(r.Tools[0].Parameters) != `{"type":"object"}` {
		t.Errorf("request tools = %+v", r.Tools)
	}
}

func TestThinkingIsFlushedBeforeText(t *testing.T) {
	p := newProvider(t, play(model.Finish{Reason: model.FinishStop},
		thinkingEv("let me "), thinkingEv("think"), model.Event{Kind: model.EventThinkingSignature, Text: "sig-1"}))
	sink := &recSink{}
	out := runTurn(t, testCtx(t), agent.Turn{Provider: p, Prompt: "hi"}, sink)
	wantOutcome(t, out, agent.StatusCompleted, agent.StopEndTurn)
	if got, want := sink.types(), []string{agent.ThinkingDelta, agent.ThinkingDelta, agent.ThinkingComplete, agent.TextComplete, agent.StepEnd}; !slices.Equal(got, want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
	evs := sink.events()
	if c := evs[2]; c.Text != "let me think" || c.Signature != "sig-1" || c.MessageID != evs[0].MessageID {
		t.Errorf("thinking_complete = %+v", c)
	}
	// A step with thinking only still records its (empty) text.
	if c := evs[3]; c.Text != "" || c.MessageID != evs[0].MessageID {
		t.Errorf("text_complete = %+v", c)
	}
}

// Reasoning without readable text (a signature alone) is still recorded,
// so that a later turn can give it back; the step records no text.
func TestSignatureWithoutThinkingIsRecorded(t *testing.T) {
	p := newProvider(t, play(model.Finish{Reason: model.FinishStop},
		model.Event{Kind: model.EventThinkingSignature, Text: "sig-only"}, textEv("answer")))
	sink := &recSink{}
	out := runTurn(t, testCtx(t), agent.Turn{Provider: p, Prompt: "hi"}, sink)
	wantOutcome(t, out, agent.StatusCompleted, agent.StopEndTurn)
	done := sink.ofType(agent.ThinkingComplete)
	if len(done) != 1 || done[0].Text != "" || done[0].Signature != "sig-only" {
		t.Fatalf("thinking_complete events %+v", done)
	}
}

func TestUsageIsSummedAndOmittedWhenAStepLacksIt(t *testing.T) {
	full := &model.Usage{InputTokens: 1, OutputTokens: 2, CacheReadTokens: 3, ReasoningTokens: 4}
	tests := []struct {
		name   string
		first  *model.Usage
		second *model.Usage
		want   *model.Usage
	}{
		{"both steps report", full, &model.Usage{InputTokens: 10, OutputTokens: 20, CacheReadTokens: 30, ReasoningTokens: 40},
			&model.Usage{InputTokens: 11, OutputTokens: 22, CacheReadTokens: 33, ReasoningTokens: 44}},
		{"first step lacks usage", nil, full, nil},
		{"last step lacks usage", full, nil, nil},
		{"no step reports", nil, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newProvider(t,
				play(model.Finish{Reason: model.FinishToolCalls, Usage: tc.first}, callEv("c1", "Probe", `{}`)),
				play(model.Finish{Reason: model.FinishStop, Usage: tc.second}, textEv("done")))
			sink := &recSink{}
			out := runTurn(t, testCtx(t), agent.Turn{Provider: p, Prompt: "go", Tools: tools.NewRegistry(&fakeTool{name: "Probe"})}, sink)
			wantOutcome(t, out, agent.StatusCompleted, agent.StopEndTurn)
			got := sink.ofType(agent.TokenUsage)
			if tc.want == nil {
				if len(got) != 0 || out.Usage != nil {
					t.Fatalf("token_usage = %+v, outcome usage %+v; want none", got, out.Usage)
				}
				return
			}
			if len(got) != 1 || *got[0].Usage != *tc.want {
				t.Fatalf("token_usage = %+v, want one of %+v", got, *tc.want)
			}
			// Each step's end carries the turn's usage so far, the
			// step's own usage and finish, and its calls.
			ends := sink.ofType(agent.StepEnd)
			if len(ends) != 2 || *ends[0].Usage != *tc.first || *ends[1].Usage != *tc.want ||
				ends[0].Calls != 1 || ends[1].Calls != 0 || ends[0].Finish.Reason != model.FinishToolCalls ||
				ends[1].Finish.Reason != model.FinishStop || *ends[1].Finish.Usage != *tc.second {
				t.Fatalf("step_end events %+v", ends)
			}
		})
	}
}

func TestFinishReasons(t *testing.T) {
	tests := []struct {
		reason       model.FinishReason
		status, stop string
		class        string
	}{
		{model.FinishStop, agent.StatusCompleted, agent.StopEndTurn, ""},
		{model.FinishOther, agent.StatusCompleted, agent.StopEndTurn, ""},
		{model.FinishLength, agent.StatusCompleted, agent.StopMaxTokens, ""},
		{model.FinishContentFilter, agent.StatusFailed, agent.StopError, agent.FailureContentFilter},
		{model.FinishError, agent.StatusFailed, agent.StopError, string(model.FailureUnknown)},
	}
	for _, tc := range tests {
		t.Run(string(tc.reason), func(t *testing.T) {
			p := newProvider(t, play(model.Finish{Reason: tc.reason}, textEv("x")))
			sink := &recSink{}
			out := runTurn(t, testCtx(t), agent.Turn{Provider: p, Prompt: "go"}, sink)
			wantOutcome(t, out, tc.status, tc.stop)
			if out.FailureClass != tc.class {
				t.Errorf("failure class = %q, want %q", out.FailureClass, tc.class)
			}
			if len(sink.ofType(agent.TextComplete)) != 1 {
				t.Errorf("events = %v, want the text recorded", sink.types())
			}
		})
	}
}

func TestStopWhileTheModelStreams(t *testing.T) {
	tests := []struct {
		name   string
		cancel func(context.CancelCauseFunc)
		source string
	}{
		{"turn stop", func(c context.CancelCauseFunc) { c(&agent.StopCause{Source: "turn.stop"}) }, "turn.stop"},
		{"wrapped stop cause", func(c context.CancelCauseFunc) {
			c(errors.Join(errors.New("shutting down"), &agent.StopCause{Source: "session.interrupt"}))
		}, "session.interrupt"},
		{"plain cancel", func(c context.CancelCauseFunc) { c(nil) }, "host_shutdown"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancelCause(testCtx(t))
			defer cancel(nil)
			streamed := make(chan struct{})
			sawCancel := make(chan struct{})
			p := newProvider(t, func(ctx context.Context, _ model.Request, emit func(model.Event) error) (model.Finish, error) {
				for _, s := range []string{"par", "tial"} {
					if err := emit(textEv(s)); err != nil {
						return model.Finish{}, err
					}
				}
				close(streamed)
				<-ctx.Done()
				close(sawCancel)
				return model.Finish{}, ctx.Err()
			})
			var wg sync.WaitGroup
			defer wg.Wait()
			wg.Go(func() {
				if waitFor(ctx, streamed) == nil {
					tc.cancel(cancel)
				}
			})
			sink := &recSink{}
			out := runTurn(t, ctx, agent.Turn{Provider: p, Prompt: "go", Step: fastSteps(3)}, sink)

			wantOutcome(t, out, agent.StatusCancelled, agent.StopUserStop)
			if out.AbortSource != tc.source {
				t.Errorf("abort source = %q, want %q", out.AbortSource, tc.source)
			}
			select {
			case <-sawCancel:
			default:
				t.Error("the provider never saw the cancellation")
			}
			if n := len(p.requests()); n != 1 {
				t.Errorf("model called %d times, want 1 (a stop is not retried)", n)
			}
			got := sink.ofType(agent.TextComplete)
			if len(got) != 1 || got[0].Text != "partial" {
				t.Fatalf("text_complete = %+v, want the partial text", got)
			}
			if sink.emittedWithDoneCtx(agent.TextComplete) {
				t.Error("the partial text was emitted with the stopped context")
			}
		})
	}
}

func TestStopBeforeTheFirstStep(t *testing.T) {
	ctx, cancel := context.WithCancelCause(testCtx(t))
	cancel(&agent.StopCause{Source: "turn.stop"})
	p := newProvider(t)
	sink := &recSink{}
	out := runTurn(t, ctx, agent.Turn{Provider: p, Prompt: "go"}, sink)
	wantOutcome(t, out, agent.StatusCancelled, agent.StopUserStop)
	if out.AbortSource != "turn.stop" || len(p.requests()) != 0 || len(sink.events()) != 0 {
		t.Fatalf("outcome %+v, %d model calls, events %v; want a silent stop", out, len(p.requests()), sink.types())
	}
}

func TestStopWhileAToolRuns(t *testing.T) {
	ctx, cancel := context.WithCancelCause(testCtx(t))
	defer cancel(nil)
	running := make(chan struct{})
	var toolCause error
	tool := &fakeTool{name: "Slow", run: func(tctx context.Context, _ tools.Env, _ json.RawMessage) (tools.Result, error) {
		close(running)
		<-tctx.Done()
		toolCause = context.Cause(tctx)
		return tools.ErrorResult("interrupted"), nil
	}}
	p := newProvider(t, calls(textEv("working"), callEv("c1", "Slow", `{}`)), say("never asked"))
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		if waitFor(ctx, running) == nil {
			cancel(&agent.StopCause{Source: "turn.stop"})
		}
	})
	sink := &recSink{}
	out := runTurn(t, ctx, agent.Turn{Provider: p, Prompt: "go", Tools: tools.NewRegistry(tool)}, sink)

	wantOutcome(t, out, agent.StatusCancelled, agent.StopUserStop)
	if out.AbortSource != "turn.stop" {
		t.Errorf("abort source = %q", out.AbortSource)
	}
	var sc *agent.StopCause
	if !errors.As(toolCause, &sc) || sc.Source != "turn.stop" {
		t.Errorf("the tool's context cause = %v, want the stop cause", toolCause)
	}
	results := sink.ofType(agent.ToolResult)
	if len(results) != 1 || results[0].ToolUseID != "c1" || !results[0].Result.IsError || resultText(t, results[0].Result) != "interrupted" {
		t.Fatalf("tool_result = %+v, want the interrupted result of c1", results)
	}
	if sink.emittedWithDoneCtx(agent.ToolResult) {
		t.Error("tool_result was emitted with the stopped context")
	}
	if n := len(p.requests()); n != 1 {
		t.Errorf("model called %d times after the stop, want 1 in all", n)
	}
}

func TestStopWhileWaitingForApproval(t *testing.T) {
	ctx, cancel := context.WithCancelCause(testCtx(t))
	defer cancel(nil)
	asked := make(chan struct{})
	approver := approverFunc(func(actx context.Context, req agent.PermissionRequest) (agent.PermissionAnswer, error) {
		close(asked)
		<-actx.Done()
		return agent.PermissionAnswer{}, context.Cause(actx)
	})
	w := &fakeTool{name: tools.NameWrite, perm: true}
	p := newProvider(t, calls(callEv("c1", tools.NameWrite, `{"path":"a"}`)))
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		if waitFor(ctx, asked) == nil {
			cancel(&agent.StopCause{Source: "turn.stop"})
		}
	})
	sink := &recSink{}
	out := runTurn(t, ctx, agent.Turn{Provider: p, Prompt: "go", Tools: tools.NewRegistry(w),
		Permissions: tools.NewEngine(tools.Policy{Mode: tools.ModeAsk}), Approver: approver}, sink)
	wantOutcome(t, out, agent.StatusCancelled, agent.StopUserStop)
	if len(w.runs()) != 0 {
		t.Error("the tool ran although its approval was abandoned")
	}
	if res := sink.ofType(agent.ToolResult); len(res) != 1 || !res[0].Result.IsError {
		t.Errorf("tool_result = %+v, want one error result", res)
	}
}

func TestMaxStepsEndsALoopingTurn(t *testing.T) {
	probe := &fakeTool{name: "Probe"}
	p := newProvider(t,
		calls(callEv("c1", "Probe", `{"n":1}`)),
		calls(callEv("c2", "Probe", `{"n":2}`)),
		calls(callEv("c3", "Probe", `{"n":3}`)),
		say("never asked"))
	sink := &recSink{}
	out := runTurn(t, testCtx(t), agent.Turn{Provider: p, Prompt: "go", MaxSteps: 3, Tools: tools.NewRegistry(probe)}, sink)
	wantOutcome(t, out, agent.StatusFailed, agent.StopStepLimit)
	if !strings.Contains(out.Message, "3") {
		t.Errorf("message %q does not name the limit", out.Message)
	}
	if n := len(p.requests()); n != 3 {
		t.Errorf("model called %d times, want 3", n)
	}
	// The calls of the last allowed step still settle.
	if got := probe.runs(); len(got) != 3 {
		t.Errorf("tool ran %d times, want 3", len(got))
	}
	if n := len(sink.ofType(agent.ToolResult)); n != 3 {
		t.Errorf("%d tool results, want 3", n)
	}
}

func TestModelFailures(t *testing.T) {
	rateLimited := &model.Failure{Kind: model.FailureRateLimit, Status: 429, Message: "slow down", RetryAfterSet: true}
	tests := []struct {
		name     string
		step     stepFunc
		attempts int // of the provider
		class    string
		message  string
		partial  string // text flushed before the failure
	}{
		{"rate limit, retries exhausted", fail(rateLimited), 3, "rate_limit", "HTTP 429 Too Many Requests: slow down", ""},
		{"auth is not retried", fail(&model.Failure{Kind: model.FailureAuth, Status: 401, Message: "bad key", Body: `{"error":"bad key"}`}), 1, "auth",
			`HTTP 401 Unauthorized: {"error":"bad key"}`, ""},
		{"failure after output is not retried",
			fail(&model.Failure{Kind: model.FailureNetwork, Message: "reset"}, textEv("half an ans")), 1, "network", "reset", "half an ans"},
		{"unclassified error", fail(errors.New("something odd")), 1, "unknown", "something odd", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var steps []stepFunc
			for range 3 {
				steps = append(steps, tc.step)
			}
			p := newProvider(t, steps...)
			sink := &recSink{}
			out := runTurn(t, testCtx(t), agent.Turn{Provider: p, Prompt: "go", Step: fastSteps(3)}, sink)
			wantOutcome(t, out, agent.StatusFailed, agent.StopError)
			if out.FailureClass != tc.class || !strings.Contains(out.Message, tc.message) {
				t.Errorf("failure = %q %q, want %q containing %q", out.FailureClass, out.Message, tc.class, tc.message)
			}
			if n := len(p.requests()); n != tc.attempts {
				t.Errorf("model called %d times, want %d", n, tc.attempts)
			}
			if n := len(sink.ofType(agent.ProviderRetry)); n != 2*(tc.attempts-1) {
				t.Errorf("%d provider_retry events, want %d", n, 2*(tc.attempts-1))
			}
			if f := sink.ofType(agent.ProviderFailure); len(f) != 1 || f[0].Text != out.Message {
				t.Errorf("provider_failure events %+v, want one saying %q", f, out.Message)
			}
			got := sink.ofType(agent.TextComplete)
			if tc.partial == "" {
				if len(got) != 0 {
					t.Errorf("text_complete = %+v, want none", got)
				}
			} else if len(got) != 1 || got[0].Text != tc.partial {
				t.Errorf("text_complete = %+v, want %q", got, tc.partial)
			}
		})
	}
}

func TestProviderRetryEvents(t *testing.T) {
	var onRetry []model.RetryInfo
	opts := fastSteps(0) // default attempts
	opts.OnRetry = func(info model.RetryInfo) { onRetry = append(onRetry, info) }
	opts.Jitter = func() float64 { return 0 }
	p := newProvider(t,
		fail(&model.Failure{Kind: model.FailureNetwork, Message: "connection reset"}),
		say("ok"))
	sink := &recSink{}
	out := runTurn(t, testCtx(t), agent.Turn{Provider: p, Prompt: "go", Step: opts}, sink)
	wantOutcome(t, out, agent.StatusCompleted, agent.StopEndTurn)
	if got, want := sink.types(), []string{agent.ProviderRetry, agent.ProviderRetry, agent.TextDelta, agent.TextComplete, agent.StepEnd}; !slices.Equal(got, want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
	evs := sink.events()
	for i, phase := range []string{model.RetryScheduled, model.RetryStarted} {
		r := evs[i].Retry
		if r == nil || r.Phase != phase || r.Attempt != 2 || r.MaxAttempts != model.DefaultMaxAttempts ||
			r.Reason != model.FailureNetwork || r.Delay != time.Second {
			t.Errorf("provider_retry %d = %+v, want %s of attempt 2 after 1s (network)", i, r, phase)
		}
	}
	if len(onRetry) != 2 || onRetry[0] != *evs[0].Retry || onRetry[1] != *evs[1].Retry {
		t.Errorf("the turn's own OnRetry saw %+v", onRetry)
	}
	if n := len(p.requests()); n != 2 {
		t.Errorf("model called %d times, want 2", n)
	}
}

func TestSinkFailureFailsTheTurn(t *testing.T) {
	errDisk := errors.New("disk full")
	tests := []struct {
		name   string
		failOn string
		steps  []stepFunc
	}{
		{"text_delta", agent.TextDelta, []stepFunc{say("hello")}},
		{"text_complete", agent.TextComplete, []stepFunc{say("hello")}},
		{"thinking_complete", agent.ThinkingComplete,
			[]stepFunc{play(model.Finish{Reason: model.FinishStop}, thinkingEv("hm"), textEv("hello"))}},
		{"text_complete of a tool step", agent.TextComplete,
			[]stepFunc{calls(textEv("let me look"), callEv("c1", "Probe", `{}`)), say("never asked")}},
		{"tool_start", agent.ToolStart, []stepFunc{calls(callEv("c1", "Probe", `{}`)), say("never asked")}},
		{"tool_result", agent.ToolResult, []stepFunc{calls(callEv("c1", "Probe", `{}`)), say("never asked")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			probe := &fakeTool{name: "Probe"}
			p := newProvider(t, tc.steps...)
			sink := &recSink{fail: func(ev agent.Event) error {
				if ev.Type == tc.failOn {
					return errDisk
				}
				return nil
			}}
			out := runTurn(t, testCtx(t), agent.Turn{Provider: p, Prompt: "go", Tools: tools.NewRegistry(probe), Step: fastSteps(3)}, sink)
			wantOutcome(t, out, agent.StatusFailed, agent.StopError)
			if out.FailureClass != agent.FailureRuntimeError {
				t.Errorf("failure class = %q, want %q", out.FailureClass, agent.FailureRuntimeError)
			}
			if n := len(p.requests()); n != 1 {
				t.Errorf("model called %d times, want 1 (a sink error is never retried nor continued)", n)
			}
			if tc.failOn == agent.ToolStart && len(probe.runs()) != 0 {
				t.Error("the tool ran although its start could not be recorded")
			}
		})
	}
}

// messagesEqual compares messages, treating nil and empty tool call lists
// alike.
func messagesEqual(a, b []model.Message) bool {
	return slices.EqualFunc(a, b, func(x, y model.Message) bool {
		if !slices.EqualFunc(x.ToolCalls, y.ToolCalls, func(c, d model.ToolCall) bool {
			return c.ID == d.ID && c.Name == d.Name && string(c.Input) == string(d.Input)
		}) {
			return false
		}
		return x.Role == y.Role && x.Text == y.Text && x.Thinking == y.Thinking &&
			x.ThinkingSignature == y.ThinkingSignature && x.ToolCallID == y.ToolCallID &&
			x.ToolName == y.ToolName && x.IsError == y.IsError
	})
}

// TestTailEndsEveryRequest: the turn's tail is asked for before every step
// and sent as the last message of that request only; the conversation the
// next step sends does not keep an earlier note.
func TestTailEndsEveryRequest(t *testing.T) {
	p := newProvider(t, calls(callEv("c1", "Probe", `{}`)), say("done"))
	var n int
	out := runTurn(t, testCtx(t), agent.Turn{
		Provider: p, Prompt: "hi", Tools: tools.NewRegistry(&fakeTool{name: "Probe"}),
		Tail: func(context.Context) string {
			n++
			return "note " + strings.Repeat("!", n)
		},
	}, &recSink{})
	wantOutcome(t, out, agent.StatusCompleted, agent.StopEndTurn)
	reqs := p.requests()
	if len(reqs) != 2 || n != 2 {
		t.Fatalf("%d requests, %d tails", len(reqs), n)
	}
	for i, want := range []string{"note !", "note !!"} {
		msgs := reqs[i].Messages
		last := msgs[len(msgs)-1]
		if last.Role != model.RoleUser || last.Text != want || !last.Note {
			t.Fatalf("request %d ends with %+v, want the user note %q", i, last, want)
		}
		for _, m := range msgs[:len(msgs)-1] {
			if strings.HasPrefix(m.Text, "note") {
				t.Fatalf("request %d keeps an earlier note: %+v", i, msgs)
			}
		}
	}
	if got := reqs[1].Messages; len(got) != 4 || got[0].Text != "hi" || got[1].Role != model.RoleAssistant || got[2].Role != model.RoleTool {
		t.Fatalf("second request: %+v", got)
	}
}

// TestEmptyTailSendsNoNote: a tail with nothing to say adds no message.
func TestEmptyTailSendsNoNote(t *testing.T) {
	p := newProvider(t, say("done"))
	runTurn(t, testCtx(t), agent.Turn{Provider: p, Prompt: "hi", Tail: func(context.Context) string { return "" }}, &recSink{})
	if reqs := p.requests(); len(reqs) != 1 || len(reqs[0].Messages) != 1 || reqs[0].Messages[0].Text != "hi" {
		t.Fatalf("requests: %+v", reqs)
	}
}
