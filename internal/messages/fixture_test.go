package messages_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.uber.org/goleak"

	"github.com/maka-agent/maka/internal/domain"
	"github.com/maka-agent/maka/internal/domaintest"
	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/hosttest"
	"github.com/maka-agent/maka/internal/model"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/internal/turns"
	"github.com/maka-agent/maka/protocol"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// failAfter bounds every wait so that a broken coordinator fails the test
// instead of hanging it; it never orders events.
const failAfter = 20 * time.Second

func testCtx(tb testing.TB) context.Context {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	tb.Cleanup(cancel)
	return ctx
}

// step is one model step the test scripts.
type step func(ctx context.Context, req model.Request, emit func(model.Event) error) (model.Finish, error)

// provider is a model the test drives: each step runs the next scripted
// step (or say("ok") once the script is used up).
type provider struct {
	mu       sync.Mutex
	requests []model.Request
	script   []step
}

func (p *provider) Stream(ctx context.Context, req model.Request, emit func(model.Event) error) (model.Finish, error) {
	p.mu.Lock()
	p.requests = append(p.requests, req)
	next := say("ok")
	if len(p.script) > 0 {
		next, p.script = p.script[0], p.script[1:]
	}
	p.mu.Unlock()
	return next(ctx, req, emit)
}

// then appends steps to the script.
func (p *provider) then(steps ...step) {
	p.mu.Lock()
	p.script = append(p.script, steps...)
	p.mu.Unlock()
}

func (p *provider) seen() []model.Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]model.Request(nil), p.requests...)
}

// say answers a step with text.
func say(text string) step {
	return func(_ context.Context, _ model.Request, emit func(model.Event) error) (model.Finish, error) {
		if err := emit(model.Event{Kind: model.EventText, Text: text}); err != nil {
			return model.Finish{}, err
		}
		return model.Finish{Reason: model.FinishStop}, nil
	}
}

// gate holds a step: the step signals entered, then waits for release
// (or the turn's stop).
type gate struct {
	entered chan struct{}
	release chan struct{}
}

func newGate() *gate { return &gate{entered: make(chan struct{}, 1), release: make(chan struct{})} }

func (g *gate) wait(t *testing.T) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(failAfter):
		t.Fatal("the model step was not reached")
	}
}

func (g *gate) open() { close(g.release) }

// hold streams text, then waits for the gate; the step ends without a
// tool call, so the turn ends with it.
func hold(text string, g *gate) step {
	return func(ctx context.Context, _ model.Request, emit func(model.Event) error) (model.Finish, error) {
		if err := emit(model.Event{Kind: model.EventText, Text: text}); err != nil {
			return model.Finish{}, err
		}
		g.entered <- struct{}{}
		select {
		case <-g.release:
			return model.Finish{Reason: model.FinishStop}, nil
		case <-ctx.Done():
			return model.Finish{}, context.Cause(ctx)
		}
	}
}

// holdTool calls a tool, then waits for the gate; the turn goes on with a
// next step.
func holdTool(g *gate) step {
	return func(ctx context.Context, _ model.Request, emit func(model.Event) error) (model.Finish, error) {
		call := model.ToolCall{ID: "call-" + uuid.NewString()[:8], Name: "noop", Input: json.RawMessage(`{}`)}
		if err := emit(model.Event{Kind: model.EventToolCall, ToolCall: call}); err != nil {
			return model.Finish{}, err
		}
		g.entered <- struct{}{}
		select {
		case <-g.release:
			return model.Finish{Reason: model.FinishToolCalls}, nil
		case <-ctx.Done():
			return model.Finish{}, context.Cause(ctx)
		}
	}
}

// stubborn signals entered, signals stopped once the turn's stop reaches
// it, and only ends when the gate opens.
func stubborn(g *gate, stopped chan<- struct{}) step {
	return func(ctx context.Context, _ model.Request, _ func(model.Event) error) (model.Finish, error) {
		g.entered <- struct{}{}
		select {
		case <-ctx.Done():
			stopped <- struct{}{}
			<-g.release
			return model.Finish{}, context.Cause(ctx)
		case <-g.release:
			return model.Finish{Reason: model.FinishStop}, nil
		}
	}
}

type residencies struct{ n atomic.Int64 }

type residency struct {
	r    *residencies
	once sync.Once
}

func (r *residency) Release() { r.once.Do(func() { r.r.n.Add(-1) }) }

func (r *residencies) acquire() host.Residency { r.n.Add(1); return &residency{r: r} }

type fixture struct {
	t      *testing.T
	dir    string
	epoch  string
	epochs int
	dom    *domaintest.Domain
	st     *store.Store
	turns  *turns.Owner
	model  *provider
	resid  *residencies
	drains atomic.Int64
	// drainExpected allows the coordinators to ask the host to drain;
	// otherwise a drain request fails the test at close.
	drainExpected bool
	closed        bool
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{t: t, dir: t.TempDir(), model: &provider{}, resid: &residencies{}}
	f.open()
	t.Cleanup(f.close)
	return f
}

// open builds the domain on the fixture's directory in a new host epoch
// (and recovers it).
func (f *fixture) open() {
	f.t.Helper()
	f.epochs++
	f.epoch = fmt.Sprintf("epoch-%d", f.epochs)
	f.dom = domaintest.Open(f.t, f.dir, domain.Host{Epoch: f.epoch, Residency: f.resid.acquire, RequestDrain: func() { f.drains.Add(1) }},
		domain.Options{
			Resolve: func(context.Context, protocol.ModelTarget) (turns.Resolved, error) {
				return turns.Resolved{Provider: f.model, Model: "test-model", ConnectionSlug: "test"}, nil
			},
			Step: model.StepOptions{MaxAttempts: 1},
		})
	f.st, f.turns, f.closed = f.dom.Store(), f.dom.Turns(), false
}

// close shuts the domain down.
func (f *fixture) close() {
	if f.closed {
		return
	}
	f.closed = true
	if n := f.drains.Load(); n > 0 && !f.drainExpected {
		f.t.Errorf("the host was asked to drain %d times", n)
	}
	if err := f.dom.Close(); err != nil {
		f.t.Errorf("close: %v", err)
	}
}

// restart closes everything and opens a new host epoch on the same
// database.
func (f *fixture) restart() {
	f.t.Helper()
	f.close()
	f.open()
}

// call runs op as the kernel would: the input goes through the
// operation's input codec (so content is normalized), and a success must
// pass the output codec and the declared error codes.
func (f *fixture) call(op protocol.Operation, in any) host.Outcome {
	f.t.Helper()
	conn := host.NewConnInfo(host.ConnInfo{HostEpoch: f.epoch, ConnectionID: uuid.NewString(), Surface: protocol.SurfaceTUI, Principal: "local_os_user"}, nil)
	return f.dom.Call(testCtx(f.t), f.t, op, in, conn)
}

func (f *fixture) createSession(id string) {
	f.t.Helper()
	out := f.call(protocol.OpSessionCreate, protocol.SessionCreateInput{
		SessionID: id, Workspace: protocol.HostPathWorkspace(f.t.TempDir()), PermissionMode: protocol.PermissionModeExecute,
	})
	if out.Err != nil {
		f.t.Fatalf("create session: %v", out.Err)
	}
}

func text(s string) protocol.MessageContent { return protocol.MessageContent{Text: s} }

// submitIn builds a submit of this epoch.
func (f *fixture) submitIn(sessionID, messageID string, content protocol.MessageContent, placement protocol.MessagePlacement) protocol.TurnMessageSubmitInput {
	return protocol.TurnMessageSubmitInput{OriginHostEpoch: f.epoch, SessionID: sessionID, MessageID: messageID, Content: content, Placement: placement}
}

func (f *fixture) submit(in protocol.TurnMessageSubmitInput) (protocol.TurnMessageSubmitResult, *protocol.OpError) {
	f.t.Helper()
	out := f.call(protocol.OpTurnMessageSubmit, in)
	if out.Err != nil {
		return protocol.TurnMessageSubmitResult{}, out.Err
	}
	return out.Result.(protocol.TurnMessageSubmitResult), nil
}

func (f *fixture) mustSubmit(in protocol.TurnMessageSubmitInput) protocol.TurnMessageSubmitResult {
	f.t.Helper()
	r, err := f.submit(in)
	if err != nil {
		f.t.Fatalf("submit %s: %s %s", in.MessageID, err.Code, err.Message)
	}
	return r
}

func (f *fixture) retract(sessionID, retractID string) (protocol.QueueRetractResult, *protocol.OpError) {
	f.t.Helper()
	out := f.call(protocol.OpQueueRetract, protocol.QueueRetractInput{OriginHostEpoch: f.epoch, SessionID: sessionID, RetractID: retractID})
	if out.Err != nil {
		return protocol.QueueRetractResult{}, out.Err
	}
	return out.Result.(protocol.QueueRetractResult), nil
}

func (f *fixture) interrupt(in protocol.TurnInterruptInput) (protocol.TurnInterruptResult, *protocol.OpError) {
	f.t.Helper()
	out := f.call(protocol.OpTurnInterrupt, in)
	if out.Err != nil {
		return protocol.TurnInterruptResult{}, out.Err
	}
	return out.Result.(protocol.TurnInterruptResult), nil
}

func (f *fixture) start(sessionID, turnID, prompt string) protocol.TurnSnapshot {
	f.t.Helper()
	out := f.call(protocol.OpTurnStart, protocol.TurnStartInput{SessionID: sessionID, TurnID: turnID, Content: text(prompt)})
	if out.Err != nil {
		f.t.Fatalf("turn.start %s: %v", turnID, out.Err)
	}
	return out.Result.(protocol.TurnSnapshot)
}

func (f *fixture) stop(sessionID, turnID, runID string) (protocol.TurnSnapshot, *protocol.OpError) {
	f.t.Helper()
	out := f.call(protocol.OpTurnStop, protocol.TurnStopInput{SessionID: sessionID, TurnID: turnID, RunID: runID})
	if out.Err != nil {
		return protocol.TurnSnapshot{}, out.Err
	}
	return out.Result.(protocol.TurnSnapshot), nil
}

func (f *fixture) query(sessionID, turnID string) protocol.TurnSnapshot {
	f.t.Helper()
	out := f.call(protocol.OpTurnQuery, protocol.TurnQueryInput{SessionID: sessionID, TurnID: turnID})
	if out.Err != nil {
		f.t.Fatalf("turn.query %s: %v", turnID, out.Err)
	}
	return out.Result.(protocol.TurnSnapshot)
}

// waitIdle waits until the session has no active root turn (successors
// included).
func (f *fixture) waitIdle(sessionID string) {
	f.t.Helper()
	if err := f.turns.WaitIdle(testCtx(f.t), sessionID); err != nil {
		f.t.Fatalf("session %s did not go idle: %v", sessionID, err)
	}
}

// failInserts makes every later insert into table fail, as a full or
// failing disk would.
func (f *fixture) failInserts(table string) {
	f.t.Helper()
	if err := f.st.Write(testCtx(f.t), func(tx *store.Tx) error {
		_, err := tx.Exec(`CREATE TRIGGER fail_` + table + ` BEFORE INSERT ON ` + table + ` BEGIN SELECT RAISE(ABORT, '` + table + ` unavailable'); END`)
		return err
	}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) count(query string, args ...any) int {
	f.t.Helper()
	var n int
	if err := f.st.Read(testCtx(f.t), func(q store.Querier) error { return q.QueryRow(query, args...).Scan(&n) }); err != nil {
		f.t.Fatal(err)
	}
	return n
}

func (f *fixture) str(query string, args ...any) string {
	f.t.Helper()
	var s string
	if err := f.st.Read(testCtx(f.t), func(q store.Querier) error { return q.QueryRow(query, args...).Scan(&s) }); err != nil {
		f.t.Fatal(err)
	}
	return s
}

// expectErr fails unless err has code and, when message is set, message.
func expectErr(t *testing.T, what string, err *protocol.OpError, code protocol.ErrorCode, message string) {
	t.Helper()
	if err == nil || err.Code != code || (message != "" && err.Message != message) {
		t.Fatalf("%s: got %v, want %s %q", what, err, code, message)
	}
}

// subscription collects the projection frames of one subscriber.
type subscription struct {
	mu     sync.Mutex
	frames []protocol.SessionContinuitySnapshot
	bad    error
}

func (s *subscription) send(frame []byte, onDone func(error)) error {
	v, err := protocol.DecodeFrameText(frame)
	var decoded any
	if err == nil {
		decoded, err = protocol.DecodeHostFrame(v)
	}
	s.mu.Lock()
	if err != nil {
		s.bad = err
	} else if pf, ok := decoded.(protocol.ProjectionFrame); ok {
		s.frames = append(s.frames, pf.Snapshot)
	}
	s.mu.Unlock()
	onDone(nil)
	return nil
}

func (s *subscription) snapshots(t *testing.T) []protocol.SessionContinuitySnapshot {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bad != nil {
		t.Fatalf("undecodable frame: %v", s.bad)
	}
	return append([]protocol.SessionContinuitySnapshot(nil), s.frames...)
}

// subscribe opens an active subscription to the session.
func (f *fixture) subscribe(sessionID string) *subscription {
	f.t.Helper()
	sub := &subscription{}
	conn := host.NewConnInfo(host.ConnInfo{HostEpoch: f.epoch, ConnectionID: uuid.NewString(), Surface: protocol.SurfaceTUI, Principal: "local_os_user"}, sub.send)
	s := hosttest.Spec(f.t, protocol.OpSubscriptionOpen)
	out := f.dom.Handlers()[protocol.OpSubscriptionOpen](testCtx(f.t), &host.Call{
		RequestID: uuid.NewString(), Operation: s, Input: protocol.SubscriptionOpenInput{SessionID: sessionID}, Conn: conn,
	})
	if out.Err != nil {
		f.t.Fatalf("subscription.open: %v", out.Err)
	}
	if out.AfterQueued != nil {
		out.AfterQueued(nil)
	}
	return sub
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

func itoa(i int) string { return strconv.Itoa(i) }
