package interactions_test

import (
	"bytes"
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
	"github.com/maka-agent/maka/internal/bashcategory"
	"github.com/maka-agent/maka/internal/domain"
	"github.com/maka-agent/maka/internal/domaintest"
	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/interactions"
	"github.com/maka-agent/maka/internal/lane"
	"github.com/maka-agent/maka/internal/model"
	"github.com/maka-agent/maka/internal/runs"
	"github.com/maka-agent/maka/internal/sessions"
	"github.com/maka-agent/maka/internal/store"
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

// fixture is a real store, lane, session service and continuity with the
// coordinator's interactions.Pending in the session projection, plus one subscriber
// per session that records every projection frame.
type fixture struct {
	t       *testing.T
	dir     string
	dom     *domaintest.Domain
	st      *store.Store
	gate    *lane.Gate
	c       *interactions.Authority
	clock   atomic.Int64 // ms; every Now() call advances it
	ids     atomic.Int64
	poisons atomic.Int64
	timeout time.Duration
	closed  bool
	// provider, when set before open, answers the fixture's turns.
	provider model.Provider
	turns    *turns.Owner

	mu       sync.Mutex
	frames   map[string][]protocol.SessionContinuitySnapshot // by session
	problems []string
	changed  chan struct{}
}

func newFixture(t *testing.T) *fixture {
	return newFixtureTimeout(t, time.Hour)
}

func newFixtureTimeout(t *testing.T, timeout time.Duration) *fixture {
	return newFixtureWith(t, timeout, nil)
}

func newFixtureWith(t *testing.T, timeout time.Duration, provider model.Provider) *fixture {
	t.Helper()
	f := &fixture{t: t, dir: t.TempDir(), timeout: timeout, changed: make(chan struct{}, 1), provider: provider}
	f.clock.Store(1_700_000_000_000)
	f.open()
	t.Cleanup(func() {
		f.close()
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, p := range f.problems {
			t.Error(p)
		}
	})
	return f
}

func (f *fixture) open() {
	f.t.Helper()
	f.frames = map[string][]protocol.SessionContinuitySnapshot{}
	provider := f.provider
	if provider == nil {
		provider = model.NewScripted(&model.Script{}, nil)
	}
	f.dom = domaintest.Open(f.t, f.dir, domain.Host{Epoch: testEpoch}, domain.Options{
		Resolve: func(context.Context, protocol.ModelTarget) (turns.Resolved, error) {
			return turns.Resolved{Provider: provider, Model: "test-model", ConnectionSlug: "test"}, nil
		},
		Step: model.StepOptions{MaxAttempts: 1},
		Interactions: interactions.Options{
			Now:               func() time.Time { return time.UnixMilli(f.clock.Add(1)) },
			NewID:             func() string { return fmt.Sprintf("i-%04d", f.ids.Add(1)) },
			PermissionTimeout: f.timeout,
			OnPoison:          func(error) { f.poisons.Add(1) },
		},
	})
	f.st, f.turns, f.closed = f.dom.Store(), f.dom.Turns(), false
	f.gate, f.c = f.dom.Gate(), f.turns.Interactions()
}

// close shuts everything down.
func (f *fixture) close() {
	if f.closed {
		return
	}
	f.closed = true
	if err := f.dom.Close(); err != nil {
		f.t.Errorf("close: %v", err)
	}
}

// restart closes everything (nothing is closed or released: like a crash
// for the interactions) and opens a new epoch on the same database, which
// recovers it.
func (f *fixture) restart() {
	f.t.Helper()
	f.close()
	f.open()
}

// call runs a handler; a result must pass the operation's output codec and
// an error must be one the operation declares.
func (f *fixture) call(op protocol.Operation, in any) host.Outcome {
	f.t.Helper()
	conn := host.NewConnInfo(host.ConnInfo{HostEpoch: testEpoch, ConnectionID: "conn-1", Surface: protocol.SurfaceTUI, Principal: "local_os_user"}, f.send)
	return f.dom.Call(testCtx(f.t), f.t, op, in, conn)
}

// send is the subscriber connection: it records projection frames and
// checks that every interaction a frame shows pending is durably pending
// when the frame is sent.
func (f *fixture) send(frame []byte, onDone func(error)) error {
	v, err := protocol.DecodeFrameText(bytes.TrimSuffix(frame, []byte("\n")))
	if err == nil {
		var fr any
		if fr, err = protocol.DecodeHostFrame(v); err == nil {
			if pf, ok := fr.(protocol.ProjectionFrame); ok {
				f.recordFrame(pf.Snapshot)
			}
		}
	}
	if err != nil {
		f.problem("undecodable frame: %v\n%s", err, frame)
	}
	onDone(nil)
	return nil
}

func (f *fixture) recordFrame(snap protocol.SessionContinuitySnapshot) {
	for _, p := range snap.Interactions.Pending {
		var status string
		err := f.st.Read(context.Background(), func(q store.Querier) error {
			return q.QueryRow(`SELECT status FROM interactions WHERE interaction_id = ?`, p.InteractionID).Scan(&status)
		})
		if err != nil || status != protocol.InteractionStatusPending {
			f.problem("frame shows %s pending but the store has %q (%v)", p.InteractionID, status, err)
		}
	}
	f.mu.Lock()
	f.frames[snap.Session.SessionID] = append(f.frames[snap.Session.SessionID], snap)
	f.mu.Unlock()
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

func (f *fixture) problem(format string, args ...any) {
	f.mu.Lock()
	f.problems = append(f.problems, fmt.Sprintf(format, args...))
	f.mu.Unlock()
}

// snapshots returns the projection frames of a session so far.
func (f *fixture) snapshots(sessionID string) []protocol.SessionContinuitySnapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.frames[sessionID])
}

// waitFrame waits until a projection frame of sessionID satisfies ok and
// returns it.
func (f *fixture) waitFrame(sessionID string, what string, ok func(protocol.SessionContinuitySnapshot) bool) protocol.SessionContinuitySnapshot {
	f.t.Helper()
	ctx := testCtx(f.t)
	for {
		for _, s := range f.snapshots(sessionID) {
			if ok(s) {
				return s
			}
		}
		select {
		case <-f.changed:
		case <-ctx.Done():
			f.t.Fatalf("no projection frame of %s with %s; frames: %+v", sessionID, what, f.snapshots(sessionID))
		}
	}
}

// waitPending waits for a frame showing exactly ids pending, in order.
func (f *fixture) waitPending(sessionID string, ids ...string) protocol.SessionContinuitySnapshot {
	f.t.Helper()
	return f.waitFrame(sessionID, fmt.Sprintf("pending %v", ids), func(s protocol.SessionContinuitySnapshot) bool {
		return slices.Equal(pendingIDs(s), ids)
	})
}

func pendingIDs(s protocol.SessionContinuitySnapshot) []string {
	ids := []string{}
	for _, p := range s.Interactions.Pending {
		ids = append(ids, p.InteractionID)
	}
	return ids
}

// session creates a session with a running run and subscribes to it.
func (f *fixture) session(sessionID, turnID, runID string) {
	f.t.Helper()
	out := f.call(protocol.OpSessionCreate, protocol.SessionCreateInput{
		SessionID: sessionID, Workspace: protocol.HostPathWorkspace(f.t.TempDir()), PermissionMode: protocol.PermissionModeAsk,
	})
	if out.Err != nil {
		f.t.Fatalf("create session: %v", out.Err)
	}
	f.addRun(sessionID, turnID, runID)
	f.subscribe(sessionID)
}

// addRun writes a running run header, as a turn's start does.
func (f *fixture) addRun(sessionID, turnID, runID string) {
	f.t.Helper()
	err := f.st.Write(testCtx(f.t), func(tx *store.Tx) error {
		if err := runs.Begin(tx, runID, sessionID, turnID, 1); err != nil {
			return err
		}
		_, err := sessions.SetSessionStatus(tx, sessionID, protocol.SessionRunning)
		return err
	})
	if err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) subscribe(sessionID string) {
	f.t.Helper()
	out := f.call(protocol.OpSubscriptionOpen, protocol.SubscriptionOpenInput{SessionID: sessionID})
	if out.Err != nil {
		f.t.Fatalf("subscribe: %v", out.Err)
	}
	f.recordFrame(out.Result.(protocol.SubscriptionOpenResult).Snapshot)
	out.AfterQueued(nil)
}

// terminate writes a run's terminal fact, as a turn's terminal write does.
func (f *fixture) terminate(runID string) {
	f.t.Helper()
	err := f.st.Write(testCtx(f.t), func(tx *store.Tx) error {
		return runs.Terminate(tx, runID, runs.Terminal{Status: string(protocol.TurnCompleted), EventID: "ev-end", At: 2})
	})
	if err != nil {
		f.t.Fatal(err)
	}
}

// statuses reads a run's and its session's status.
func (f *fixture) statuses(sessionID, runID string) (run, session string) {
	f.t.Helper()
	err := f.st.Read(testCtx(f.t), func(q store.Querier) error {
		if err := q.QueryRow(`SELECT status FROM runs WHERE run_id = ?`, runID).Scan(&run); err != nil {
			return err
		}
		return q.QueryRow(`SELECT status FROM sessions WHERE session_id = ?`, sessionID).Scan(&session)
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return run, session
}

func (f *fixture) wantStatuses(sessionID, runID, want string) {
	f.t.Helper()
	if run, session := f.statuses(sessionID, runID); run != want || session != want {
		f.t.Fatalf("run %s / session %s status = %s / %s, want %s", runID, sessionID, run, session, want)
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

// closeRun closes o, a run of session s1, inside the session's lane, as the
// session owner does.
func (f *fixture) closeRun(o *interactions.Run, reason string) error {
	f.t.Helper()
	return f.gate.Run(testCtx(f.t), "s1", func(ctx context.Context, _ *lane.Lease) error {
		return o.Close(ctx, reason)
	})
}

func (f *fixture) query(sessionID, id string) host.Outcome {
	f.t.Helper()
	return f.call(protocol.OpInteractionQuery, protocol.InteractionQueryInput{SessionID: sessionID, InteractionID: id})
}

func (f *fixture) answer(id string, a protocol.InteractionAnswer) host.Outcome {
	f.t.Helper()
	return f.call(protocol.OpInteractionAnswer, protocol.InteractionAnswerInput{InteractionID: id, Answer: a})
}

func allow(remember bool) protocol.InteractionAnswer {
	return protocol.InteractionAnswer{Kind: protocol.InteractionKindPermission, Decision: protocol.InteractionDecisionAllow, RememberForTurn: remember}
}

func deny() protocol.InteractionAnswer {
	return protocol.InteractionAnswer{Kind: protocol.InteractionKindPermission, Decision: protocol.InteractionDecisionDeny}
}

func answers(a ...*string) protocol.InteractionAnswer {
	return protocol.InteractionAnswer{Kind: protocol.InteractionKindQuestion, Answers: a}
}

func str(s string) *string { return &s }

func wantErr(t *testing.T, out host.Outcome, code protocol.ErrorCode, message string) {
	t.Helper()
	if out.Err == nil || out.Err.Code != code || out.Err.Message != message {
		t.Fatalf("outcome = %+v / %+v, want %s %q", out.Result, out.Err, code, message)
	}
}

func wantOK[T any](t *testing.T, out host.Outcome) T {
	t.Helper()
	if out.Err != nil {
		t.Fatalf("unexpected error %s: %s", out.Err.Code, out.Err.Message)
	}
	return out.Result.(T)
}

// bash is a Bash permission request whose scope is its command.
func bash(toolUseID, command string) agent.PermissionRequest {
	args, _ := json.Marshal(map[string]string{"command": command})
	cat := bashcategory.Categorize(command)
	return agent.PermissionRequest{
		ToolUseID: toolUseID, ToolName: "Bash", Category: cat, Reason: protocol.PermissionReasonForCategory(cat),
		Args: args, RememberAllowed: true, ScopeKey: cat + ":Bash:" + command,
	}
}

// permResult is what a RequestPermission call returned.
type permResult struct {
	ans agent.PermissionAnswer
	err error
}

// request starts RequestPermission on its own goroutine; the result
// arrives on the returned channel. The goroutine ends with the call.
func request(ctx context.Context, o *interactions.Run, req agent.PermissionRequest) <-chan permResult {
	ch := make(chan permResult, 1)
	go func() {
		ans, err := o.RequestPermission(ctx, req)
		ch <- permResult{ans, err}
	}()
	return ch
}

func recv[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(failAfter):
		t.Fatal("no result in time")
		panic("unreachable")
	}
}
