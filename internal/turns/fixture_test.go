package turns_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/maka-agent/maka/internal/domain"
	"github.com/maka-agent/maka/internal/domaintest"
	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/model"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/internal/tools"
	"github.com/maka-agent/maka/internal/turns"
	"github.com/maka-agent/maka/protocol"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// failAfter bounds every wait so that a broken coordinator fails the test
// instead of hanging it; it never orders events.
const failAfter = 20 * time.Second

const testEpoch = "epoch-1"

func testCtx(tb testing.TB) context.Context {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	tb.Cleanup(cancel)
	return ctx
}

// provider is a model the test drives: each step calls next with the
// request and streams what it returns. A step may hold on a gate.
type provider struct {
	mu       sync.Mutex
	requests []model.Request
	next     func(ctx context.Context, req model.Request, emit func(model.Event) error) (model.Finish, error)
}

func (p *provider) Stream(ctx context.Context, req model.Request, emit func(model.Event) error) (model.Finish, error) {
	p.mu.Lock()
	p.requests = append(p.requests, req)
	next := p.next
	p.mu.Unlock()
	return next(ctx, req, emit)
}

func (p *provider) seen() []model.Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]model.Request(nil), p.requests...)
}

// say answers every step with text.
func say(text string) func(context.Context, model.Request, func(model.Event) error) (model.Finish, error) {
	return func(_ context.Context, _ model.Request, emit func(model.Event) error) (model.Finish, error) {
		if err := emit(model.Event{Kind: model.EventText, Text: text}); err != nil {
			return model.Finish{}, err
		}
		return model.Finish{Reason: model.FinishStop, Usage: &model.Usage{InputTokens: 3, OutputTokens: 2}}, nil
	}
}

// hold streams text, signals streamed, then waits for release (or the
// step's end).
func hold(text string, streamed chan<- struct{}, release <-chan struct{}) func(context.Context, model.Request, func(model.Event) error) (model.Finish, error) {
	return func(ctx context.Context, _ model.Request, emit func(model.Event) error) (model.Finish, error) {
		if err := emit(model.Event{Kind: model.EventText, Text: text}); err != nil {
			return model.Finish{}, err
		}
		if streamed != nil {
			streamed <- struct{}{}
		}
		select {
		case <-release:
			return model.Finish{Reason: model.FinishStop}, nil
		case <-ctx.Done():
			return model.Finish{}, context.Cause(ctx)
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
	dom    *domaintest.Domain
	st     *store.Store
	turns  *turns.Owner
	model  *provider
	resid  *residencies
	drains atomic.Int64
	closed bool
	// contextWindow is the resolved model's context window (0: unknown).
	contextWindow int64
	// tools are registered after the built-in tools.
	tools []tools.Tool
}

func newFixture(t *testing.T, extra ...tools.Tool) *fixture {
	t.Helper()
	f := &fixture{t: t, dir: t.TempDir(), model: &provider{next: say("hello")}, resid: &residencies{}, tools: extra}
	f.open()
	t.Cleanup(f.close)
	return f
}

// open builds the domain on the fixture's directory (and recovers it).
func (f *fixture) open() {
	f.t.Helper()
	f.dom = domaintest.Open(f.t, f.dir, domain.Host{Epoch: testEpoch, Residency: f.resid.acquire, RequestDrain: func() { f.drains.Add(1) }},
		domain.Options{
			Resolve: func(context.Context, protocol.ModelTarget) (turns.Resolved, error) {
				return turns.Resolved{Provider: f.model, Model: "test-model", ConnectionSlug: "test", ContextWindow: f.contextWindow}, nil
			},
			Tools: f.tools,
			Step:  model.StepOptions{MaxAttempts: 1},
		})
	f.st, f.turns, f.closed = f.dom.Store(), f.dom.Turns(), false
}

// close shuts the domain down.
func (f *fixture) close() {
	if f.closed {
		return
	}
	f.closed = true
	if err := f.dom.Close(); err != nil {
		f.t.Errorf("close: %v", err)
	}
}

// restart closes everything and opens a new epoch on the same database
// (opening recovers it).
func (f *fixture) restart() {
	f.t.Helper()
	f.close()
	f.open()
}

var conn = host.NewConnInfo(host.ConnInfo{HostEpoch: testEpoch, ConnectionID: "conn-1", Surface: protocol.SurfaceTUI, Principal: "local_os_user"}, nil)

func (f *fixture) call(op protocol.Operation, in any) host.Outcome {
	f.t.Helper()
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

func content(text string) protocol.MessageContent { return protocol.MessageContent{Text: text} }

func (f *fixture) start(sessionID, turnID, text string) (protocol.TurnSnapshot, *protocol.OpError) {
	f.t.Helper()
	out := f.call(protocol.OpTurnStart, protocol.TurnStartInput{SessionID: sessionID, TurnID: turnID, Content: content(text)})
	if out.Err != nil {
		return protocol.TurnSnapshot{}, out.Err
	}
	return out.Result.(protocol.TurnSnapshot), nil
}

func (f *fixture) mustStart(sessionID, turnID, text string) protocol.TurnSnapshot {
	f.t.Helper()
	s, err := f.start(sessionID, turnID, text)
	if err != nil {
		f.t.Fatalf("turn.start %s/%s: %s %s", sessionID, turnID, err.Code, err.Message)
	}
	return s
}

func (f *fixture) query(sessionID, turnID string) (protocol.TurnSnapshot, *protocol.OpError) {
	f.t.Helper()
	out := f.call(protocol.OpTurnQuery, protocol.TurnQueryInput{SessionID: sessionID, TurnID: turnID})
	if out.Err != nil {
		return protocol.TurnSnapshot{}, out.Err
	}
	return out.Result.(protocol.TurnSnapshot), nil
}

func (f *fixture) stop(sessionID, turnID, runID string) (protocol.TurnSnapshot, *protocol.OpError) {
	f.t.Helper()
	out := f.call(protocol.OpTurnStop, protocol.TurnStopInput{SessionID: sessionID, TurnID: turnID, RunID: runID})
	if out.Err != nil {
		return protocol.TurnSnapshot{}, out.Err
	}
	return out.Result.(protocol.TurnSnapshot), nil
}

// waitTerminal waits (without sleeping) until the turn is terminal and its
// execution has ended.
func (f *fixture) waitTerminal(sessionID, turnID string) protocol.TurnSnapshot {
	f.t.Helper()
	ctx := testCtx(f.t)
	for {
		s, err := f.query(sessionID, turnID)
		if err != nil {
			f.t.Fatalf("query: %v", err)
		}
		if s.Status.Terminal() && !f.turns.ActiveRoot(sessionID) {
			return s
		}
		if err := f.turns.WaitIdle(ctx, sessionID); err != nil {
			f.t.Fatalf("turn %s did not end: %v (last %+v)", turnID, err, s)
		}
	}
}

// transcript reads the session's transcript messages.
func (f *fixture) transcript(sessionID string) []protocol.TranscriptMessage {
	f.t.Helper()
	out := f.call(protocol.OpSessionTranscriptPage, protocol.SessionTranscriptPageInput{SessionID: sessionID})
	if out.Err != nil {
		f.t.Fatalf("transcript: %v", out.Err)
	}
	return out.Result.(protocol.SessionTranscriptPage).Messages
}

func (f *fixture) count(query string, args ...any) int {
	f.t.Helper()
	var n int
	if err := f.st.Read(testCtx(f.t), func(q store.Querier) error { return q.QueryRow(query, args...).Scan(&n) }); err != nil {
		f.t.Fatal(err)
	}
	return n
}
