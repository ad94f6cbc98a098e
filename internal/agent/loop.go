package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/maka-agent/maka/internal/model"
	"github.com/maka-agent/maka/internal/tools"
)

// Failure classes of an Outcome that are not model failure kinds.
const (
	FailureRuntimeError  = "runtime_error"
	FailureStepCap       = "tool_step_cap_reached"
	FailureContentFilter = "content_filter"
)

// PermissionRequest asks a person whether one tool call may run.
type PermissionRequest struct {
	ToolUseID       string
	ToolName        string
	Category        string
	Reason          string
	Args            json.RawMessage
	RememberAllowed bool
	// ScopeKey is what an allow remembered for the turn covers: the
	// approver resolves other pending requests of the run with the same
	// key with the same answer.
	ScopeKey string
	// Escalation marks a Bash call that asks to run outside the sandbox:
	// the prompt is a sandbox_escalation prompt (allow once or deny) and
	// Cwd is the directory the command runs in.
	Escalation bool
	Cwd        string
	// ServerReadOnlyHint is what the tool's provider claims (an MCP
	// tool's readOnlyHint; nil: no claim), shown in the review only.
	ServerReadOnlyHint *bool
}

// PermissionAnswer is a person's answer to a PermissionRequest.
type PermissionAnswer struct {
	Allow           bool
	RememberForTurn bool
}

// Approver asks a person to approve tool calls. RequestPermission blocks
// until the answer, ctx's end (the turn stopped) or a timeout of its own.
type Approver interface {
	RequestPermission(ctx context.Context, req PermissionRequest) (PermissionAnswer, error)
}

// Turn is everything one turn needs.
type Turn struct {
	SessionID string
	TurnID    string
	RunID     string
	// Prompt is the user's message of this turn.
	Prompt string
	// History is the conversation before this turn, replayed from the
	// durable record (see Replay).
	History   []model.Message
	Workspace string
	// Protected are the paths the host owns (storage root, control
	// directory, credentials file): no tool may reach them.
	Protected []string
	Provider  model.Provider
	Model     string
	System    string
	// Effort is the session's reasoning effort, sent with every step.
	Effort model.Effort
	Tools  *tools.Registry
	// Permissions decides which calls run; one engine per turn.
	Permissions *tools.Engine
	// Approver answers prompts; nil denies every call that needs one. If
	// it also implements tools.QuestionAsker, the question tool uses it.
	Approver Approver
	// Steering delivers queued user messages at step boundaries (nil:
	// none).
	Steering Steering
	// MaxSteps caps the number of model steps (0 = unlimited).
	MaxSteps int
	Step     model.StepOptions
	// Now and NewID default to time.Now and random UUIDs.
	Now   func() time.Time
	NewID func() string
	// Abandoned tracks the tool calls the turn abandoned at a stop until
	// they return (nil: a tracker of the package's own).
	Abandoned *Abandoned
	// Tail, when set, is called before every model step; a non-empty
	// result is sent as a final user note (model.Message.Note) after the conversation of that
	// request only (it is neither recorded nor kept for the next step,
	// which calls Tail again).
	Tail func(ctx context.Context) string
	// Fit, when set, may shorten the conversation before each model step
	// after the first (a long turn whose own messages outgrow the
	// context window); it returns msgs when nothing needs to change.
	Fit func(ctx context.Context, msgs []model.Message) []model.Message
}

// Run runs one turn to its outcome. It returns when the turn ended: a step
// without tool calls, the step cap, a stop (ctx cancelled with a
// *StopCause), ctx's end, a model failure, or a Sink failure.
func Run(ctx context.Context, t Turn, sink Sink) Outcome {
	r := &runner{t: t, sink: sink, gate: &tools.LoopGate{}}
	if r.t.Now == nil {
		r.t.Now = time.Now
	}
	if r.t.NewID == nil {
		r.t.NewID = func() string { return uuid.NewString() }
	}
	if r.t.Permissions == nil {
		r.t.Permissions = tools.NewEngine(tools.Policy{Mode: tools.ModeAsk, Workspace: r.t.Workspace})
	}
	out := r.run(ctx)
	out.Usage = r.usage
	return out
}

type runner struct {
	t     Turn
	sink  Sink
	gate  *tools.LoopGate
	usage *model.Usage
	// usageMissing is set once a step reported no usage: the total is
	// then unknown and not reported.
	usageMissing bool
}

func (r *runner) event(typ string) Event {
	return Event{Type: typ, ID: r.t.NewID(), TS: r.t.Now().UnixMilli()}
}

func (r *runner) run(ctx context.Context) Outcome {
	msgs := make([]model.Message, 0, len(r.t.History)+1)
	msgs = append(msgs, r.t.History...)
	msgs = append(msgs, model.Message{Role: model.RoleUser, Text: r.t.Prompt})
	var specs []model.ToolSpec
	if r.t.Tools != nil {
		for _, s := range r.t.Tools.Specs() {
			specs = append(specs, model.ToolSpec{Name: s.Name, Description: s.Description, Parameters: s.Parameters})
		}
	}
	for step := 1; ; step++ {
		if out, stop := r.stopped(ctx); stop {
			return out
		}
		var err error
		if msgs, err = r.steer(ctx, msgs); err != nil {
			return r.failure(ctx, &sinkError{err})
		}
		if step > 1 && r.t.Fit != nil {
			msgs = r.t.Fit(ctx, msgs)
		}
		st, fin, err := r.stream(ctx, model.Request{Model: r.t.Model, System: r.t.System, Messages: r.withTail(ctx, msgs), Tools: specs, Effort: r.t.Effort})
		if ferr := r.flushStep(ctx, st); ferr != nil && err == nil {
			err = ferr
		}
		if err != nil {
			return r.failure(ctx, err)
		}
		// The step's stream ended, so it is billed: count it even when a
		// stop arrived meanwhile (the cancelled turn's usage includes it).
		r.addUsage(fin.Usage)
		if out, stop := r.stopped(ctx); stop {
			return out
		}
		r.stepEnd(ctx, fin, len(st.calls))
		if len(st.calls) == 0 {
			return r.finish(fin)
		}
		msgs = append(msgs, st.message())
		results, err := r.settleAll(ctx, st)
		if err != nil {
			return r.failure(ctx, err)
		}
		for i, c := range st.calls {
			msgs = append(msgs, model.Message{
				Role: model.RoleTool, ToolCallID: c.ID, ToolName: r.toolName(c.Name),
				Text: modelText(results[i]), IsError: results[i].IsError,
			})
		}
		if out, stop := r.stopped(ctx); stop {
			return out
		}
		if r.t.MaxSteps > 0 && step >= r.t.MaxSteps {
			return r.end(Outcome{Status: StatusFailed, StopReason: StopStepLimit, FailureClass: FailureStepCap,
				Message: fmt.Sprintf("The turn reached its limit of %d model steps", r.t.MaxSteps)})
		}
	}
}

// withTail returns the messages of one request: msgs, then the turn's tail
// note when it has one. msgs itself is never extended.
func (r *runner) withTail(ctx context.Context, msgs []model.Message) []model.Message {
	if r.t.Tail == nil {
		return msgs
	}
	tail := r.t.Tail(ctx)
	if tail == "" {
		return msgs
	}
	return append(msgs[:len(msgs):len(msgs)], model.Message{Role: model.RoleUser, Text: tail, Note: true})
}

// stepState accumulates one model step.
type stepState struct {
	id        string
	text      strings.Builder
	thinking  strings.Builder
	signature string
	calls     []model.ToolCall
}

func (s *stepState) message() model.Message {
	return model.Message{
		Role: model.RoleAssistant, Text: s.text.String(), Thinking: s.thinking.String(),
		ThinkingSignature: s.signature, ToolCalls: s.calls,
	}
}

// sinkError marks an error of the Sink, which is never retried or
// classified as a model failure.
type sinkError struct{ err error }

func (e *sinkError) Error() string { return e.err.Error() }
func (e *sinkError) Unwrap() error { return e.err }

func (r *runner) emit(ctx context.Context, ev Event) error {
	if err := r.sink.Emit(ctx, ev); err != nil {
		return &sinkError{err}
	}
	return nil
}

func (r *runner) stream(ctx context.Context, req model.Request) (*stepState, model.Finish, error) {
	st := &stepState{id: r.t.NewID()}
	opts := r.t.Step
	onRetry := opts.OnRetry
	opts.OnRetry = func(info model.RetryInfo) {
		if onRetry != nil {
			onRetry(info)
		}
		ev := r.event(ProviderRetry)
		ev.Retry = &info
		_ = r.emit(ctx, ev) // live only; a lost retry notice is harmless
	}
	fin, err := model.StreamStep(ctx, r.t.Provider, req, opts, func(e model.Event) error {
		switch e.Kind {
		case model.EventText:
			st.text.WriteString(e.Text)
			ev := r.event(TextDelta)
			ev.MessageID, ev.Text = st.id, e.Text
			return r.emit(ctx, ev)
		case model.EventThinking:
			st.thinking.WriteString(e.Text)
			ev := r.event(ThinkingDelta)
			ev.MessageID, ev.Text = st.id, e.Text
			return r.emit(ctx, ev)
		case model.EventThinkingSignature:
			st.signature = e.Text
		case model.EventToolCall:
			c := e.ToolCall
			if c.ID == "" {
				c.ID = r.t.NewID()
			}
			st.calls = append(st.calls, c)
		}
		return nil
	})
	return st, fin, err
}

// flushStep records the final text and thinking of a step that produced
// any; it also runs after a failed or stopped step, so streamed text is
// kept. Thinking is recorded when it has text or a signature (a provider's
// reasoning can come without readable text). It uses a context that
// outlives a stop.
func (r *runner) flushStep(ctx context.Context, st *stepState) error {
	ctx = context.WithoutCancel(ctx)
	if st.thinking.Len() > 0 || st.signature != "" {
		ev := r.event(ThinkingComplete)
		ev.MessageID, ev.Text, ev.Signature = st.id, st.thinking.String(), st.signature
		if err := r.emit(ctx, ev); err != nil {
			return err
		}
	}
	if st.text.Len() > 0 || st.thinking.Len() > 0 {
		ev := r.event(TextComplete)
		ev.MessageID, ev.Text = st.id, st.text.String()
		return r.emit(ctx, ev)
	}
	return nil
}

func (r *runner) addUsage(u *model.Usage) {
	if u == nil {
		r.usageMissing = true
		r.usage = nil
		return
	}
	if r.usageMissing {
		return
	}
	if r.usage == nil {
		r.usage = &model.Usage{}
	}
	r.usage.InputTokens = addCount(r.usage.InputTokens, u.InputTokens)
	r.usage.OutputTokens = addCount(r.usage.OutputTokens, u.OutputTokens)
	r.usage.CacheReadTokens = addCount(r.usage.CacheReadTokens, u.CacheReadTokens)
	r.usage.ReasoningTokens = addCount(r.usage.ReasoningTokens, u.ReasoningTokens)
}

// addCount adds a provider-reported count to a sum without overflowing:
// a negative count adds nothing, and the sum saturates at the largest
// int64 (a provider is untrusted input; the wire clamps further).
func addCount(sum, n int64) int64 {
	if n <= 0 {
		return sum
	}
	if sum > math.MaxInt64-n {
		return math.MaxInt64
	}
	return sum + n
}

// stepEnd emits the end of a step with the turn's usage so far.
func (r *runner) stepEnd(ctx context.Context, fin model.Finish, calls int) {
	ev := r.event(StepEnd)
	ev.Finish, ev.Calls = &fin, calls
	if r.usage != nil && !r.usageMissing {
		u := *r.usage
		ev.Usage = &u
	}
	_ = r.emit(ctx, ev) // live only, like a retry notice
}

// Stopped returns the cancelled outcome of a turn whose ctx ended: its
// abort source comes from a *StopCause, else "host_shutdown".
func Stopped(ctx context.Context) (Outcome, bool) {
	if ctx.Err() == nil {
		return Outcome{}, false
	}
	source := "host_shutdown"
	var sc *StopCause
	if errors.As(context.Cause(ctx), &sc) {
		source = sc.Source
	}
	return Outcome{Status: StatusCancelled, StopReason: StopUserStop, AbortSource: source}, true
}

// stopped reports the cancelled outcome once ctx ended.
func (r *runner) stopped(ctx context.Context) (Outcome, bool) {
	out, ok := Stopped(ctx)
	if !ok {
		return out, false
	}
	return r.end(out), true
}

func (r *runner) finish(fin model.Finish) Outcome {
	switch fin.Reason {
	case model.FinishLength:
		return r.end(Outcome{Status: StatusCompleted, StopReason: StopMaxTokens})
	case model.FinishContentFilter:
		return r.end(Outcome{Status: StatusFailed, StopReason: StopError, FailureClass: FailureContentFilter,
			Message: "The provider stopped the answer (content filter)"})
	case model.FinishError:
		return r.end(Outcome{Status: StatusFailed, StopReason: StopError, FailureClass: string(model.FailureUnknown),
			Message: "The provider ended the step with an error"})
	}
	return r.end(Outcome{Status: StatusCompleted, StopReason: StopEndTurn})
}

func (r *runner) failure(ctx context.Context, err error) Outcome {
	if out, stop := r.stopped(ctx); stop {
		return out
	}
	var se *sinkError
	if errors.As(err, &se) {
		return r.end(Outcome{Status: StatusFailed, StopReason: StopError, FailureClass: FailureRuntimeError,
			Message: "The turn's record could not be written"})
	}
	f := model.Classify(err)
	msg := f.Describe()
	if msg == "" {
		msg = "The model request failed"
	}
	ev := r.event(ProviderFailure)
	ev.Text = msg
	_ = r.emit(context.WithoutCancel(ctx), ev) // live only, like a retry notice
	return r.end(Outcome{Status: StatusFailed, StopReason: StopError, FailureClass: string(f.Kind), Message: msg})
}

// end emits the turn's token usage (when every step reported it) and
// returns out.
func (r *runner) end(out Outcome) Outcome {
	if r.usage != nil && !r.usageMissing {
		ev := r.event(TokenUsage)
		u := *r.usage
		ev.Usage = &u
		_ = r.emit(context.Background(), ev) // best effort; the terminal fact does not depend on it
	}
	return out
}

// settleAll settles every call of a step concurrently and returns their
// results in call order, and the Sink errors of the calls whose start or
// result could not be recorded.
func (r *runner) settleAll(ctx context.Context, st *stepState) ([]tools.Result, error) {
	results := make([]tools.Result, len(st.calls))
	errs := make([]error, len(st.calls))
	var wg sync.WaitGroup
	for i, c := range st.calls {
		wg.Go(func() { results[i], errs[i] = r.settle(ctx, st.id, c) })
	}
	wg.Wait()
	return results, errors.Join(errs...)
}

// toolName is the registered name of the tool a call names (the model may
// spell it in another case), or the call's name for an unknown tool: the
// same name the record keeps, so a replayed history reads the same.
func (r *runner) toolName(name string) string {
	if t, ok := r.lookup(name); ok {
		return t.Name()
	}
	return name
}
