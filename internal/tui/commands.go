package tui

import (
	"context"
	"errors"
	"sync"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/google/uuid"

	"github.com/maka-agent/maka/protocol"
)

// Timeouts of the host calls the interface makes.
const (
	callTimeout  = 10 * time.Second // queries, creates, submits, answers
	stopTimeout  = 60 * time.Second // turn.stop waits for the terminal state
	closeTimeout = 2 * time.Second  // subscription.close
	// compactTimeout bounds session.compact, which calls the model.
	compactTimeout = 5 * time.Minute
	// maxSessionPages bounds the catalog pages one listing reads.
	maxSessionPages = 64
	// maxResubscribes bounds consecutive subscription re-opens without a
	// frame in between.
	maxResubscribes = 5
)

// tracker owns the goroutines that run the model's commands: Run waits for
// them after the program has stopped. A command that starts after
// closeAndWait does nothing.
type tracker struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

func (t *tracker) enter() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.wg.Add(1)
	return true
}

func (t *tracker) exit() { t.wg.Done() }

func (t *tracker) closeAndWait() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.wg.Wait()
}

// task wraps a host call as a command run under the tracker with the
// model's context.
func (m *model) task(f func(ctx context.Context) tea.Msg) tea.Cmd {
	ctx, tr := m.ctx, m.tr
	return func() tea.Msg {
		if !tr.enter() {
			return nil
		}
		defer tr.exit()
		if ctx.Err() != nil {
			return nil
		}
		return f(ctx)
	}
}

// Result messages of the commands. gen is the attach generation the
// command belongs to; results of an older generation are dropped.
type (
	connLostMsg struct{ err error }

	sessionFoundMsg struct {
		id      string
		session *protocol.SessionSummary
		err     error
	}
	sessionsMsg struct {
		sessions []protocol.SessionSummary
		err      error
	}
	sessionCreatedMsg struct {
		session protocol.SessionSummary
		text    string
		err     error
	}
	streamClosedMsg struct{ stream Stream }
	permissionsMsg  struct {
		gen   int
		perms protocol.SessionPermissions
		err   error
	}
	subOpenedMsg struct {
		gen    int
		stream Stream
		err    error
	}
	frameMsg struct {
		gen    int
		stream Stream
		frame  any
		err    error
	}
	transcriptMsg struct {
		gen, seq int
		messages []protocol.TranscriptMessage
		err      error
	}
	turnStartedMsg struct {
		gen    int
		turnID string
		text   string
		turn   protocol.TurnSnapshot
		err    error
	}
	submittedMsg struct {
		gen       int
		placement protocol.MessagePlacement
		text      string
		result    protocol.TurnMessageSubmitResult
		err       error
	}
	stoppedMsg struct {
		gen  int
		turn protocol.TurnSnapshot
		err  error
	}
	answeredMsg struct {
		gen           int
		interactionID string
		err           error
	}
	modelsMsg struct {
		models Models
		err    error
	}
	permsSetMsg struct {
		gen   int
		in    protocol.SessionPermissionsSetInput
		perms protocol.SessionPermissions
		err   error
	}
	compactedMsg struct {
		result protocol.SessionCompactResult
		err    error
	}
)

// loadModels reads the connection catalog (for the status line and
// /model).
func (m *model) loadModels() tea.Cmd {
	be := m.be
	return m.task(func(ctx context.Context) tea.Msg {
		ms, err := withTimeout(ctx, callTimeout, func(ctx context.Context) (Models, error) { return be.Models(ctx) })
		return modelsMsg{models: ms, err: err}
	})
}

// setPermissions changes the current session's mode or effort.
func (m *model) setPermissions(in protocol.SessionPermissionsSetInput) tea.Cmd {
	be, gen := m.be, m.gen
	return m.task(func(ctx context.Context) tea.Msg {
		p, err := withTimeout(ctx, callTimeout, func(ctx context.Context) (protocol.SessionPermissions, error) {
			return be.SetPermissions(ctx, in)
		})
		return permsSetMsg{gen: gen, in: in, perms: p, err: err}
	})
}

// compact compacts the current session's context; it can take as long as
// a model call.
func (m *model) compact(sessionID string) tea.Cmd {
	be := m.be
	return m.task(func(ctx context.Context) tea.Msg {
		r, err := withTimeout(ctx, compactTimeout, func(ctx context.Context) (protocol.SessionCompactResult, error) {
			return be.Compact(ctx, sessionID)
		})
		return compactedMsg{result: r, err: err}
	})
}

func withTimeout[T any](ctx context.Context, d time.Duration, f func(context.Context) (T, error)) (T, error) {
	cctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return f(cctx)
}

// watchConn reports the end of the host connection.
func (m *model) watchConn() tea.Cmd {
	be := m.be
	return m.task(func(ctx context.Context) tea.Msg {
		select {
		case <-be.Done():
			err := be.Err()
			if err == nil {
				err = errors.New("runtime host connection closed")
			}
			return connLostMsg{err}
		case <-ctx.Done():
			return nil
		}
	})
}

// findSession looks a session up by id.
func (m *model) findSession(id string) tea.Cmd {
	be := m.be
	return m.task(func(ctx context.Context) tea.Msg {
		res, err := withTimeout(ctx, callTimeout, func(ctx context.Context) (protocol.SessionCatalogQueryResult, error) {
			return be.QuerySessions(ctx, protocol.SessionCatalogQueryInput{Kind: protocol.SessionCatalogGet, SessionID: id})
		})
		return sessionFoundMsg{id: id, session: res.Session, err: err}
	})
}

// listSessions reads the whole catalog (without archived sessions),
// restarting when it changes while being read.
func (m *model) listSessions() tea.Cmd {
	be := m.be
	return m.task(func(ctx context.Context) tea.Msg {
		var all []protocol.SessionSummary
		in := protocol.SessionCatalogQueryInput{Kind: protocol.SessionCatalogListStart}
		for range maxSessionPages {
			res, err := withTimeout(ctx, callTimeout, func(ctx context.Context) (protocol.SessionCatalogQueryResult, error) {
				return be.QuerySessions(ctx, in)
			})
			if err != nil {
				return sessionsMsg{err: err}
			}
			switch res.Kind {
			case protocol.SessionCatalogKindRevisionChanged:
				all = nil
				in = protocol.SessionCatalogQueryInput{Kind: protocol.SessionCatalogListStart}
				continue
			case protocol.SessionCatalogKindPage:
			default:
				return sessionsMsg{err: errors.New("unexpected session catalog result " + string(res.Kind))}
			}
			all = append(all, res.Sessions...)
			if res.NextCursor == nil {
				return sessionsMsg{sessions: all}
			}
			in = protocol.SessionCatalogQueryInput{Kind: protocol.SessionCatalogListContinue, Revision: res.Revision, Cursor: *res.NextCursor}
		}
		return sessionsMsg{sessions: all, err: errors.New("the session list is too long; showing the first part")}
	})
}

// createSession creates a session in the configured workspace; text is
// the message to start it with.
func (m *model) createSession(text string) tea.Cmd {
	be := m.be
	in := protocol.SessionCreateInput{
		SessionID:      uuid.NewString(),
		Workspace:      protocol.HostPathWorkspace(m.opts.Workspace),
		Name:           sessionName(text),
		PermissionMode: protocol.PermissionMode(m.opts.PermissionMode),
		Thinking:       m.nextThinking,
	}
	if t := m.nextTarget; t != nil {
		in.ModelTarget = &protocol.ModelTarget{Kind: protocol.ModelTargetExplicit, ConnectionSlug: t.Slug, Model: t.Model}
	}
	return m.task(func(ctx context.Context) tea.Msg {
		s, err := withTimeout(ctx, callTimeout, func(ctx context.Context) (protocol.SessionSummary, error) {
			return be.CreateSession(ctx, in)
		})
		return sessionCreatedMsg{session: s, text: text, err: err}
	})
}

// openStream opens the subscription of a session.
func (m *model) openStream(gen int, sessionID string) tea.Cmd {
	be := m.be
	return m.task(func(ctx context.Context) tea.Msg {
		s, err := withTimeout(ctx, callTimeout, func(ctx context.Context) (Stream, error) {
			return be.Subscribe(ctx, sessionID)
		})
		return subOpenedMsg{gen: gen, stream: s, err: err}
	})
}

// queryPermissions reads the permission mode and sandbox of a session for
// the status line.
func (m *model) queryPermissions(gen int, sessionID string) tea.Cmd {
	be := m.be
	return m.task(func(ctx context.Context) tea.Msg {
		p, err := withTimeout(ctx, callTimeout, func(ctx context.Context) (protocol.SessionPermissions, error) {
			return be.QueryPermissions(ctx, sessionID)
		})
		return permissionsMsg{gen: gen, perms: p, err: err}
	})
}

// nextFrame waits for the next frame of the current subscription.
func (m *model) nextFrame() tea.Cmd {
	gen, s := m.gen, m.stream
	if s == nil {
		return nil
	}
	return m.task(func(ctx context.Context) tea.Msg {
		f, err := s.Next(ctx)
		if ctx.Err() != nil {
			return nil
		}
		return frameMsg{gen: gen, stream: s, frame: f, err: err}
	})
}

// closeStream closes a subscription in the background; it runs even when
// the program is stopping (bounded by closeTimeout). The model forgets the
// stream once it is closed.
func (m *model) closeStream(s Stream) tea.Cmd {
	if s == nil {
		return nil
	}
	ctx, tr := m.ctx, m.tr
	return func() tea.Msg {
		if !tr.enter() {
			return nil
		}
		defer tr.exit()
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		defer cancel()
		_ = s.Close(cctx)
		return streamClosedMsg{s}
	}
}

// closeAllStreams closes every subscription not known to be closed; for
// after the program has stopped.
func (m *model) closeAllStreams() {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(m.ctx), closeTimeout)
	defer cancel()
	for s := range m.open {
		_ = s.Close(ctx)
		delete(m.open, s)
	}
	m.stream = nil
}

// loadTranscript reads every transcript page of the current session.
func (m *model) loadTranscript() tea.Cmd {
	if m.session == nil {
		return nil
	}
	m.loadSeq++
	m.loading = true
	be, gen, seq, id := m.be, m.gen, m.loadSeq, m.session.SessionID
	return m.task(func(ctx context.Context) tea.Msg {
		var all []protocol.TranscriptMessage
		in := protocol.SessionTranscriptPageInput{SessionID: id}
		for range maxTranscriptPages {
			p, err := withTimeout(ctx, callTimeout, func(ctx context.Context) (protocol.SessionTranscriptPage, error) {
				return be.TranscriptPage(ctx, in)
			})
			if err != nil {
				return transcriptMsg{gen: gen, seq: seq, err: err}
			}
			all = append(all, p.Messages...)
			if p.NextCursor == nil {
				return transcriptMsg{gen: gen, seq: seq, messages: all}
			}
			in.Cursor = *p.NextCursor
		}
		return transcriptMsg{gen: gen, seq: seq, messages: all, err: errors.New("the transcript is too long; showing its beginning")}
	})
}

func (m *model) startTurn(turnID, text string) tea.Cmd {
	be, gen := m.be, m.gen
	in := protocol.TurnStartInput{SessionID: m.session.SessionID, TurnID: turnID, Content: protocol.MessageContent{Text: text}}
	return m.task(func(ctx context.Context) tea.Msg {
		t, err := withTimeout(ctx, callTimeout, func(ctx context.Context) (protocol.TurnSnapshot, error) {
			return be.StartTurn(ctx, in)
		})
		return turnStartedMsg{gen: gen, turnID: turnID, text: text, turn: t, err: err}
	})
}

func (m *model) submitMessage(text string, placement protocol.MessagePlacement) tea.Cmd {
	be, gen := m.be, m.gen
	in := protocol.TurnMessageSubmitInput{
		OriginHostEpoch: be.HostEpoch(), SessionID: m.session.SessionID, MessageID: uuid.NewString(),
		Content: protocol.MessageContent{Text: text}, Placement: placement,
	}
	return m.task(func(ctx context.Context) tea.Msg {
		r, err := withTimeout(ctx, callTimeout, func(ctx context.Context) (protocol.TurnMessageSubmitResult, error) {
			return be.SubmitMessage(ctx, in)
		})
		return submittedMsg{gen: gen, placement: placement, text: text, result: r, err: err}
	})
}

func (m *model) stopTurn(t protocol.TurnSnapshot) tea.Cmd {
	be, gen := m.be, m.gen
	in := protocol.TurnStopInput{SessionID: t.SessionID, TurnID: t.TurnID, RunID: t.RunID}
	return m.task(func(ctx context.Context) tea.Msg {
		s, err := withTimeout(ctx, stopTimeout, func(ctx context.Context) (protocol.TurnSnapshot, error) {
			return be.StopTurn(ctx, in)
		})
		return stoppedMsg{gen: gen, turn: s, err: err}
	})
}

func (m *model) answerInteraction(id string, a protocol.InteractionAnswer) tea.Cmd {
	be, gen := m.be, m.gen
	in := protocol.InteractionAnswerInput{InteractionID: id, Answer: a}
	return m.task(func(ctx context.Context) tea.Msg {
		_, err := withTimeout(ctx, callTimeout, func(ctx context.Context) (protocol.InteractionAnsweredSnapshot, error) {
			return be.AnswerInteraction(ctx, in)
		})
		return answeredMsg{gen: gen, interactionID: id, err: err}
	})
}
