package tui

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/maka-agent/maka/protocol"
)

// fakeBackend is an in-memory Backend: sessions, transcripts and streams
// are set by the test, and every command call is recorded.
type fakeBackend struct {
	epoch string
	done  chan struct{}

	mu          sync.Mutex
	sessions    []protocol.SessionSummary // newest first
	catalogPage int                       // sessions per catalog page (0: all)
	transcripts map[string][]protocol.TranscriptMessage
	pageSize    int // transcript messages per page (0: all)
	snapshots   map[string]protocol.SessionContinuitySnapshot
	streams     []*fakeStream
	pageCalls   int
	created     []protocol.SessionCreateInput
	started     []protocol.TurnStartInput
	submitted   []protocol.TurnMessageSubmitInput
	stopped     []protocol.TurnStopInput
	answers     []protocol.InteractionAnswerInput
	startErr    error
	// sandboxAvailable is what QueryPermissions reports.
	sandboxAvailable bool
	// ledgers are the sessions' task ledgers, served in pages of
	// ledgerPage tasks (0: all); ledgerReads counts the list_start calls.
	ledgers     map[string][]protocol.Task
	ledgerPage  int
	ledgerReads int
	// permSets and compacts record those calls; compactResult is what
	// session.compact answers; models is the connection catalog.
	permSets      []protocol.SessionPermissionsSetInput
	thinking      map[string]string
	compacts      []string
	compactResult protocol.SessionCompactResult
	models        Models
}

func newFakeBackend() *fakeBackend {
	return &fakeBackend{
		epoch:       "epoch-0123456789",
		done:        make(chan struct{}),
		transcripts: map[string][]protocol.TranscriptMessage{},
		snapshots:   map[string]protocol.SessionContinuitySnapshot{},
	}
}

func (f *fakeBackend) HostEpoch() string     { return f.epoch }
func (f *fakeBackend) Done() <-chan struct{} { return f.done }
func (f *fakeBackend) Err() error            { return nil }

func (f *fakeBackend) addSession(s protocol.SessionSummary, snap protocol.SessionContinuitySnapshot) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sessions = append(f.sessions, s)
	f.snapshots[s.SessionID] = snap
}

func (f *fakeBackend) setTranscript(id string, msgs []protocol.TranscriptMessage) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.transcripts[id] = msgs
}

func (f *fakeBackend) QuerySessions(_ context.Context, in protocol.SessionCatalogQueryInput) (protocol.SessionCatalogQueryResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch in.Kind {
	case protocol.SessionCatalogGet:
		for _, s := range f.sessions {
			if s.SessionID == in.SessionID {
				return protocol.SessionCatalogQueryResult{Kind: protocol.SessionCatalogKindSession, Session: &s}, nil
			}
		}
		return protocol.SessionCatalogQueryResult{Kind: protocol.SessionCatalogKindSession}, nil
	case protocol.SessionCatalogListStart, protocol.SessionCatalogListContinue:
		start := 0
		if in.Kind == protocol.SessionCatalogListContinue {
			fmt.Sscan(in.Cursor, &start)
		}
		end := len(f.sessions)
		if f.catalogPage > 0 {
			end = min(start+f.catalogPage, end)
		}
		res := protocol.SessionCatalogQueryResult{Kind: protocol.SessionCatalogKindPage, Revision: 1, Sessions: slices.Clone(f.sessions[start:end])}
		if end < len(f.sessions) {
			c := fmt.Sprint(end)
			res.NextCursor = &c
		}
		return res, nil
	}
	return protocol.SessionCatalogQueryResult{}, fmt.Errorf("bad kind %q", in.Kind)
}

func (f *fakeBackend) CreateSession(_ context.Context, in protocol.SessionCreateInput) (protocol.SessionSummary, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.created = append(f.created, in)
	s := protocol.SessionSummary{
		SessionID: in.SessionID, Workspace: in.Workspace, ModelTarget: protocol.ModelTarget{Kind: protocol.ModelTargetDefault},
		PermissionMode: in.PermissionMode, Status: protocol.SessionActive,
	}
	f.sessions = append([]protocol.SessionSummary{s}, f.sessions...)
	f.snapshots[s.SessionID] = snapshot(s.SessionID, 1, nil)
	return s, nil
}

func (f *fakeBackend) TranscriptPage(_ context.Context, in protocol.SessionTranscriptPageInput) (protocol.SessionTranscriptPage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pageCalls++
	msgs := f.transcripts[in.SessionID]
	start := 0
	if in.Cursor != "" {
		fmt.Sscan(in.Cursor, &start)
	}
	end := len(msgs)
	if f.pageSize > 0 {
		end = min(start+f.pageSize, end)
	}
	p := protocol.SessionTranscriptPage{SessionID: in.SessionID, Messages: slices.Clone(msgs[start:end])}
	if end < len(msgs) {
		c := fmt.Sprint(end)
		p.NextCursor = &c
	}
	return p, nil
}

func (f *fakeBackend) QueryPermissions(_ context.Context, sessionID string) (protocol.SessionPermissions, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.sessions {
		if s.SessionID == sessionID {
			return protocol.SessionPermissions{SessionID: sessionID, PermissionMode: s.PermissionMode,
				Sandbox: protocol.SandboxWorkspaceWrite, SandboxAvailable: f.sandboxAvailable}, nil
		}
	}
	return protocol.SessionPermissions{}, fmt.Errorf("no session %s", sessionID)
}

func (f *fakeBackend) SetPermissions(_ context.Context, in protocol.SessionPermissionsSetInput) (protocol.SessionPermissions, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.permSets = append(f.permSets, in)
	if f.thinking == nil {
		f.thinking = map[string]string{}
	}
	for i := range f.sessions {
		s := &f.sessions[i]
		if s.SessionID != in.SessionID {
			continue
		}
		if in.PermissionMode != "" {
			s.PermissionMode = in.PermissionMode
		}
		if in.Thinking != "" {
			f.thinking[s.SessionID] = in.Thinking
		}
		return protocol.SessionPermissions{SessionID: s.SessionID, PermissionMode: s.PermissionMode,
			Sandbox: protocol.SandboxWorkspaceWrite, SandboxAvailable: f.sandboxAvailable, Thinking: f.thinking[s.SessionID]}, nil
	}
	return protocol.SessionPermissions{}, fmt.Errorf("no session %s", in.SessionID)
}

func (f *fakeBackend) Compact(_ context.Context, sessionID string) (protocol.SessionCompactResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.compacts = append(f.compacts, sessionID)
	return f.compactResult, nil
}

func (f *fakeBackend) Models(context.Context) (Models, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.models, nil
}

func (f *fakeBackend) StartTurn(_ context.Context, in protocol.TurnStartInput) (protocol.TurnSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.started = append(f.started, in)
	if f.startErr != nil {
		return protocol.TurnSnapshot{}, f.startErr
	}
	return protocol.TurnSnapshot{SessionID: in.SessionID, TurnID: in.TurnID, RunID: "run-" + in.TurnID, Status: protocol.TurnRunning}, nil
}

func (f *fakeBackend) StopTurn(_ context.Context, in protocol.TurnStopInput) (protocol.TurnSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = append(f.stopped, in)
	return protocol.TurnSnapshot{SessionID: in.SessionID, TurnID: in.TurnID, RunID: in.RunID, Status: protocol.TurnCancelled,
		TerminalEventID: "t", AbortSource: "turn.stop"}, nil
}

func (f *fakeBackend) SubmitMessage(_ context.Context, in protocol.TurnMessageSubmitInput) (protocol.TurnMessageSubmitResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.submitted = append(f.submitted, in)
	d := protocol.DispositionSteering
	if in.Placement == protocol.PlacementNextTurn {
		d = protocol.DispositionFollowup
	}
	return protocol.TurnMessageSubmitResult{Disposition: d, QueueRevision: int64(len(f.submitted))}, nil
}

func (f *fakeBackend) AnswerInteraction(_ context.Context, in protocol.InteractionAnswerInput) (protocol.InteractionAnsweredSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answers = append(f.answers, in)
	return protocol.InteractionAnsweredSnapshot{InteractionID: in.InteractionID, Status: protocol.InteractionStatusAnswered}, nil
}

func (f *fakeBackend) setLedger(id string, tasks ...protocol.Task) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ledgers == nil {
		f.ledgers = map[string][]protocol.Task{}
	}
	f.ledgers[id] = tasks
}

func (f *fakeBackend) QueryTaskLedger(_ context.Context, in protocol.TaskLedgerQueryInput) (protocol.TaskLedgerQueryResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	tasks := f.ledgers[in.SessionID]
	revision := fmt.Sprintf("rev-%d", len(tasks))
	for _, t := range tasks {
		revision += "-" + string(t.Status)
	}
	start := 0
	switch in.Kind {
	case protocol.TaskQueryListStart:
		f.ledgerReads++
	case protocol.TaskQueryListContinue:
		if in.Revision != revision {
			return protocol.TaskLedgerQueryResult{Kind: protocol.TaskResultRevisionChanged, Expected: in.Revision, Actual: revision}, nil
		}
		fmt.Sscan(in.Cursor, &start)
	default:
		return protocol.TaskLedgerQueryResult{}, fmt.Errorf("query kind %s", in.Kind)
	}
	end := len(tasks)
	if f.ledgerPage > 0 {
		end = min(start+f.ledgerPage, len(tasks))
	}
	page := protocol.TaskLedgerQueryResult{Kind: protocol.TaskResultPage, SessionID: in.SessionID, Revision: revision,
		Tasks: slices.Clone(tasks[start:end])}
	if end < len(tasks) {
		c := fmt.Sprint(end)
		page.NextCursor = &c
	}
	return page, nil
}

func (f *fakeBackend) Subscribe(_ context.Context, sessionID string) (Stream, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	snap, ok := f.snapshots[sessionID]
	if !ok {
		return nil, fmt.Errorf("no session %s", sessionID)
	}
	s := &fakeStream{sessionID: sessionID, snap: snap, frames: make(chan any, 64), closed: make(chan struct{})}
	f.streams = append(f.streams, s)
	return s, nil
}

// stream returns the last stream opened.
func (f *fakeBackend) stream() *fakeStream {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.streams) == 0 {
		return nil
	}
	return f.streams[len(f.streams)-1]
}

// snapshotOf returns what the fake records, under its lock.
func get[T any](f *fakeBackend, read func() T) T {
	f.mu.Lock()
	defer f.mu.Unlock()
	return read()
}

type fakeStream struct {
	sessionID string
	snap      protocol.SessionContinuitySnapshot
	frames    chan any
	once      sync.Once
	closed    chan struct{}
}

func (s *fakeStream) Snapshot() protocol.SessionContinuitySnapshot { return s.snap }

func (s *fakeStream) Next(ctx context.Context) (any, error) {
	select {
	case f := <-s.frames:
		return f, nil
	case <-s.closed:
		return nil, io.EOF
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (s *fakeStream) Close(context.Context) error {
	s.once.Do(func() { close(s.closed) })
	return nil
}

func (s *fakeStream) isClosed() bool {
	select {
	case <-s.closed:
		return true
	default:
		return false
	}
}

// snapshot builds a projection of a session with an optional root turn.
func snapshot(sessionID string, rev int64, turn *protocol.TurnSnapshot) protocol.SessionContinuitySnapshot {
	status := protocol.SessionActive
	if turn != nil && !turn.Status.Terminal() {
		status = protocol.SessionRunning
	}
	return protocol.SessionContinuitySnapshot{
		SchemaVersion:      1,
		Session:            protocol.SessionContinuityIdentity{SessionID: sessionID, Status: status},
		ProjectionRevision: rev,
		RootTurn:           turn,
		Queue:              protocol.SessionMessageQueueProjection{HostEpoch: "epoch-0123456789"},
	}
}

func turn(sessionID, turnID string, status protocol.TurnStatus) *protocol.TurnSnapshot {
	t := &protocol.TurnSnapshot{SessionID: sessionID, TurnID: turnID, RunID: "run-" + turnID, Status: status}
	if status.Terminal() {
		t.TerminalEventID = "end-" + turnID
	}
	return t
}

func summary(id, name string) protocol.SessionSummary {
	return protocol.SessionSummary{
		SessionID: id, Name: name, Workspace: protocol.HostPathWorkspace("/work/" + id),
		ModelTarget: protocol.ModelTarget{Kind: protocol.ModelTargetExplicit, ConnectionSlug: "acme", Model: "m1"},
		Status:      protocol.SessionActive, PermissionMode: protocol.PermissionModeAsk,
	}
}
