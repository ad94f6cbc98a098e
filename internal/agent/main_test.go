package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/maka-agent/maka/internal/agent"
	"github.com/maka-agent/maka/internal/model"
	"github.com/maka-agent/maka/internal/tools"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testTimeout bounds every wait of a test; reaching it cancels the turn,
// which the test then reports as a wrong outcome.
const testTimeout = 10 * time.Second

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// stepFunc plays one model attempt.
type stepFunc func(ctx context.Context, req model.Request, emit func(model.Event) error) (model.Finish, error)

// fakeProvider plays one stepFunc per Stream call, in order, and keeps a
// copy of every request.
type fakeProvider struct {
	t     *testing.T
	mu    sync.Mutex
	steps []stepFunc
	reqs  []model.Request
}

func newProvider(t *testing.T, steps ...stepFunc) *fakeProvider {
	return &fakeProvider{t: t, steps: steps}
}

func (p *fakeProvider) Stream(ctx context.Context, req model.Request, emit func(model.Event) error) (model.Finish, error) {
	p.mu.Lock()
	n := len(p.reqs)
	req.Messages = slices.Clone(req.Messages)
	p.reqs = append(p.reqs, req)
	var f stepFunc
	if n < len(p.steps) {
		f = p.steps[n]
	}
	p.mu.Unlock()
	if f == nil {
		p.t.Errorf("unexpected model call #%d", n+1)
		return model.Finish{}, &model.Failure{Kind: model.FailureUnknown, Message: "unexpected model call"}
	}
	return f(ctx, req, emit)
}

func (p *fakeProvider) requests() []model.Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.reqs)
}

// play returns a step that emits evs and finishes with fin.
func play(fin model.Finish, evs ...model.Event) stepFunc {
	return func(ctx context.Context, _ model.Request, emit func(model.Event) error) (model.Finish, error) {
		for _, ev := range evs {
			if err := emit(ev); err != nil {
				return model.Finish{}, err
			}
		}
		return fin, nil
	}
}

// fail returns a step that emits evs and then fails with err.
func fail(err error, evs ...model.Event) stepFunc {
	return func(ctx context.Context, _ model.Request, emit func(model.Event) error) (model.Finish, error) {
		for _, ev := range evs {
			if e := emit(ev); e != nil {
				return model.Finish{}, e
			}
		}
		return model.Finish{}, err
	}
}

// say is a step that answers text and ends the turn.
func say(text string) stepFunc {
	return play(model.Finish{Reason: model.FinishStop}, textEv(text))
}

// calls is a step that makes tool calls.
func calls(cs ...model.Event) stepFunc {
	return play(model.Finish{Reason: model.FinishToolCalls}, cs...)
}

func textEv(s string) model.Event { return model.Event{Kind: model.EventText, Text: s} }

func thinkingEv(s string) model.Event { return model.Event{Kind: model.EventThinking, Text: s} }

func callEv(id, name, args string) model.Event {
	var in json.RawMessage
	if args != "" {
		in = json.RawMessage(args)
	}
	return model.Event{Kind: model.EventToolCall, ToolCall: model.ToolCall{ID: id, Name: name, Input: in}}
}

func usage(in, out int64) *model.Usage { return &model.Usage{InputTokens: in, OutputTokens: out} }

// fakeTool is a tool whose Run the test controls.
type fakeTool struct {
	name string
	perm bool
	run  func(ctx context.Context, env tools.Env, args json.RawMessage) (tools.Result, error)

	mu   sync.Mutex
	args []string // arguments of every Run, in call order
}

func (f *fakeTool) Name() string                { return f.name }
func (f *fakeTool) Description() string         { return "test tool " + f.name }
func (f *fakeTool) Parameters() json.RawMessage { return json.RawMessage(`{"type":"object"}`) }
func (f *fakeTool) PermissionRequired() bool    { return f.perm }
func (f *fakeTool) ActivityKind() string        { return tools.ActivityTool }

func (f *fakeTool) Run(ctx context.Context, env tools.Env, args json.RawMessage) (tools.Result, error) {
	f.mu.Lock()
	f.args = append(f.args, string(args))
	f.mu.Unlock()
	if f.run == nil {
		return tools.TextResult("ok " + string(args)), nil
	}
	return f.run(ctx, env, args)
}

func (f *fakeTool) runs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.args)
}

// recSink records every event with whether its context was already done.
// fail, if set, decides the error of an Emit; hook, if set, runs after an
// event was recorded. Emits after the turn ended are counted as late.
type recSink struct {
	fail func(agent.Event) error
	hook func(agent.Event)

	mu      sync.Mutex
	evs     []agent.Event
	ctxDone []bool
	closed  bool
	late    []agent.Event
}

func (s *recSink) Emit(ctx context.Context, ev agent.Event) error {
	if s.fail != nil {
		if err := s.fail(ev); err != nil {
			return err
		}
	}
	s.mu.Lock()
	if s.closed {
		s.late = append(s.late, ev)
	}
	s.evs = append(s.evs, ev)
	s.ctxDone = append(s.ctxDone, ctx.Err() != nil)
	s.mu.Unlock()
	if s.hook != nil {
		s.hook(ev)
	}
	return nil
}

func (s *recSink) events() []agent.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.evs)
}

// ofType returns the recorded events of the given types, in order.
func (s *recSink) ofType(types ...string) []agent.Event {
	var out []agent.Event
	for _, ev := range s.events() {
		if slices.Contains(types, ev.Type) {
			out = append(out, ev)
		}
	}
	return out
}

// types lists the types of the recorded events, in order.
func (s *recSink) types() []string {
	var out []string
	for _, ev := range s.events() {
		out = append(out, ev.Type)
	}
	return out
}

// emittedWithDoneCtx reports whether an event of typ was emitted with a
// context that was already done.
func (s *recSink) emittedWithDoneCtx(typ string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, ev := range s.evs {
		if ev.Type == typ && s.ctxDone[i] {
			return true
		}
	}
	return false
}

// seqIDs returns a concurrency-safe NewID yielding id-1, id-2, ...
func seqIDs() func() string {
	var n atomic.Int64
	return func() string { return fmt.Sprintf("id-%d", n.Add(1)) }
}

// runTurn runs a turn to its outcome and checks what holds for every turn:
// the outcome is well formed, nothing is emitted after Run returned,
// token_usage is emitted at most once, last, and matches the outcome.
func runTurn(t *testing.T, ctx context.Context, turn agent.Turn, sink *recSink) agent.Outcome {
	t.Helper()
	if turn.Model == "" {
		turn.Model = "test-model"
	}
	out := agent.Run(ctx, turn, sink)
	sink.mu.Lock()
	sink.closed = true
	sink.mu.Unlock()
	checkOutcome(t, out)

	evs := sink.events()
	for i, ev := range evs {
		if ev.ID == "" || ev.TS == 0 {
			t.Errorf("event %d (%s) has no id or timestamp: %+v", i, ev.Type, ev)
		}
	}
	usageEvs := sink.ofType(agent.TokenUsage)
	switch {
	case len(usageEvs) > 1:
		t.Errorf("token_usage emitted %d times, want at most once", len(usageEvs))
	case len(usageEvs) == 1:
		if evs[len(evs)-1].Type != agent.TokenUsage {
			t.Errorf("token_usage is not the last event: %v", sink.types())
		}
		if out.Usage == nil || *usageEvs[0].Usage != *out.Usage {
			t.Errorf("token_usage %+v does not match outcome usage %+v", usageEvs[0].Usage, out.Usage)
		}
	case out.Usage != nil:
		t.Errorf("outcome has usage %+v but no token_usage was emitted", *out.Usage)
	}
	t.Cleanup(func() {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		if len(sink.late) > 0 {
			t.Errorf("events emitted after Run returned: %+v", sink.late)
		}
	})
	return out
}

// checkOutcome checks that the fields of an outcome fit its status.
func checkOutcome(t *testing.T, out agent.Outcome) {
	t.Helper()
	switch out.Status {
	case agent.StatusCompleted:
		if out.FailureClass != "" || out.AbortSource != "" || out.Message != "" {
			t.Errorf("completed outcome with failure or abort fields: %+v", out)
		}
	case agent.StatusFailed:
		if out.FailureClass == "" || out.Message == "" || out.AbortSource != "" {
			t.Errorf("failed outcome without class or message, or with an abort source: %+v", out)
		}
	case agent.StatusCancelled:
		if out.AbortSource == "" || out.FailureClass != "" || out.StopReason != agent.StopUserStop {
			t.Errorf("malformed cancelled outcome: %+v", out)
		}
	default:
		t.Errorf("unknown outcome status %q: %+v", out.Status, out)
	}
}

func wantOutcome(t *testing.T, out agent.Outcome, status, stopReason string) {
	t.Helper()
	if out.Status != status || out.StopReason != stopReason {
		t.Fatalf("outcome = %s/%s (%+v), want %s/%s", out.Status, out.StopReason, out, status, stopReason)
	}
}

// resultText is the text of a text result.
func resultText(t *testing.T, r *tools.Result) string {
	t.Helper()
	if r == nil {
		t.Fatal("tool_result without a result")
	}
	var c struct {
		Kind string `json:"kind"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(r.Content, &c); err != nil || c.Kind != "text" {
		t.Fatalf("result content %s is not a text result (%v)", r.Content, err)
	}
	return c.Text
}

// waitFor waits for ch to close, or fails the test when ctx ends first.
func waitFor(ctx context.Context, ch <-chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// fastClock makes retry delays (anything under a minute) elapse at once
// and never fires the watchdog's timers, which the tests set to an hour.
type fastClock struct{}

func (fastClock) Now() time.Time { return time.Now() }

func (fastClock) After(d time.Duration) <-chan time.Time {
	if d >= time.Minute {
		return nil
	}
	ch := make(chan time.Time, 1)
	ch <- time.Now()
	return ch
}

// fastSteps are step options whose retries are immediate.
func fastSteps(maxAttempts int) model.StepOptions {
	return model.StepOptions{MaxAttempts: maxAttempts, Clock: fastClock{}, FirstEventTimeout: time.Hour, IdleTimeout: time.Hour}
}
