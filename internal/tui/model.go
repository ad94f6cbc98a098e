package tui

import (
	"context"
	"errors"
	"fmt"
	"io"

	"time"

	"github.com/charmbracelet/bubbles/list"
	"github.com/charmbracelet/bubbles/spinner"
	"github.com/charmbracelet/bubbles/viewport"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/google/uuid"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/protocol"
)

// Default size when the output reports none.
const (
	defaultWidth  = 80
	defaultHeight = 24
)

// model is the state of the interface. Update applies key presses, window
// sizes, subscription frames and host call results; View renders it. Host
// calls are returned as commands.
type model struct {
	ctx  context.Context
	be   Backend
	tr   *tracker
	opts Options

	width, height int
	look          *look

	// The current session; nil until one is opened or created.
	session *protocol.SessionSummary
	// perms is the current session's permission state, once read.
	perms *protocol.SessionPermissions
	// gen counts attaches: results of an older one are dropped.
	gen       int
	stream    Stream
	open      map[Stream]struct{} // subscriptions opened and not yet closed
	attaching bool
	snap      *protocol.SessionContinuitySnapshot
	// The root turn last seen in a projection, and whether it was terminal.
	seenTurn     string
	seenTerminal bool
	resubscribes int
	framesSeen   int // frames applied, over all subscriptions

	entries []*entry
	loadSeq int
	loading bool

	vp     viewport.Model
	follow bool // keep the transcript scrolled to the bottom
	// queueText and cardText are the queue and prompt views of the last
	// refresh.
	queueText, cardText, suggestText string
	// The transcript as last rendered: its text, the entries it shows and
	// the width it was rendered for.
	joined      string
	joinedOf    []*entry
	joinedWidth int

	input    editor
	followUp bool // while a turn runs, Enter queues a follow-up instead of steering
	creating bool
	sending  bool
	stopping bool
	// startingTurn is the turn this client started and has not yet seen in
	// a projection; pendingText is the message to start once a created
	// session is attached.
	startingTurn string
	pendingText  string

	// tasks is the current session's task ledger as last read;
	// taskCalls the task tool calls seen starting, until their result.
	tasks     []protocol.Task
	tasksSeq  int
	taskCalls map[string]bool
	tasksText string

	prompt   *promptState
	answered map[string]bool // interactions answered here, until they leave the projection

	list sessionList

	notice    string
	noticeErr bool
	fatal     error
	quitting  bool

	// hist is the input history of each session.
	hist histories
	// help shows the help overlay; expanded shows tool outputs whole.
	help     bool
	expanded bool
	// quitAsked: Ctrl-C asked whether to quit; a second one quits.
	quitAsked bool

	// The spinner runs while a turn does; runSince is when this interface
	// first saw the running turn runTurn.
	spin     spinner.Model
	spinning bool
	runTurn  string
	runSince time.Time
	now      func() time.Time

	// hostNotice is the last session notice of the host (compaction,
	// retries, …), shown in the status line.
	hostNotice string
	// usage is the last turn_usage notice of the session's latest turn
	// (Kind empty: none yet), shown in the status line.
	usage protocol.SessionNotice
	// models is the connection catalog, once read; nextTarget and
	// nextThinking are what /model and /thinking chose for new sessions.
	models       *Models
	nextTarget   *ModelChoice
	nextThinking string
	compacting   bool
	// offer is a found local model server offered as a connection;
	// offerAsked is set once the probe ran (it runs once).
	offer      *offer
	offerAsked bool
}

// newModel returns the model of a program over be; its commands run with
// ctx and under tr (nil: untracked).
func newModel(ctx context.Context, be Backend, opts Options, tr *tracker) *model {
	if tr == nil {
		tr = &tracker{}
	}
	out := opts.Out
	if out == nil {
		out = io.Discard
	}
	m := &model{
		ctx: ctx, be: be, tr: tr, opts: opts,
		width: defaultWidth, height: defaultHeight,
		look:      newLook(out, opts.MarkdownStyle),
		vp:        viewport.New(defaultWidth, defaultHeight),
		follow:    true,
		answered:  map[string]bool{},
		open:      map[Stream]struct{}{},
		taskCalls: map[string]bool{},
	}
	m.vp.KeyMap = viewport.KeyMap{}
	m.input = m.look.newInput()
	m.input.hist = m.hist.of("")
	m.spin = spinner.New(spinner.WithSpinner(spinner.MiniDot), spinner.WithStyle(m.look.toolRun))
	m.now = time.Now
	m.layout()
	return m
}

// Init starts watching the connection and opens the session to resume.
func (m *model) Init() tea.Cmd {
	cmds := []tea.Cmd{m.watchConn(), m.loadModels()}
	if m.opts.Width > 0 && m.opts.Height > 0 {
		size := tea.WindowSizeMsg{Width: m.opts.Width, Height: m.opts.Height}
		cmds = append(cmds, func() tea.Msg { return size })
	}
	if id := m.opts.ResumeSessionID; id != "" {
		m.attaching = true
		m.setNotice(false, "opening session %s…", id)
		cmds = append(cmds, m.findSession(id))
	}
	m.refresh()
	return tea.Batch(cmds...)
}

// Update applies one message.
func (m *model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	cmd := m.update(msg)
	cmd = tea.Batch(cmd, m.startSpinner())
	m.refresh()
	if m.opts.observe != nil {
		m.opts.observe(m.state())
	}
	return m, cmd
}

func (m *model) update(msg tea.Msg) tea.Cmd {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = max(msg.Width, 20), max(msg.Height, 8)
		for _, e := range m.entries {
			e.touch()
		}
		return nil
	case tea.KeyMsg:
		return m.handleKey(msg)
	case connLostMsg:
		m.fatal = fmt.Errorf("runtime host connection lost: %w", msg.err)
		m.quitting = true
		return tea.Quit
	case sessionFoundMsg:
		return m.onSessionFound(msg)
	case sessionsMsg:
		return m.onSessions(msg)
	case sessionCreatedMsg:
		return m.onSessionCreated(msg)
	case subOpenedMsg:
		return m.onSubOpened(msg)
	case permissionsMsg:
		if msg.gen == m.gen && msg.err == nil {
			m.perms = &msg.perms
		}
		return nil
	case tasksMsg:
		return m.onTasks(msg)
	case streamClosedMsg:
		delete(m.open, msg.stream)
		return nil
	case frameMsg:
		return m.onFrame(msg)
	case transcriptMsg:
		return m.onTranscript(msg)
	case turnStartedMsg:
		return m.onTurnStarted(msg)
	case submittedMsg:
		return m.onSubmitted(msg)
	case stoppedMsg:
		return m.onStopped(msg)
	case answeredMsg:
		return m.onAnswered(msg)
	case modelsMsg:
		if msg.err == nil {
			m.models = &msg.models
			if m.offer != nil && len(msg.models.Connections) > 0 {
				m.offer = nil // a connection exists now
			}
			return m.findServers(msg.models)
		}
		return nil
	case serversFoundMsg:
		return m.onServersFound(msg)
	case serverAddedMsg:
		return m.onServerAdded(msg)
	case permsSetMsg:
		return m.onPermsSet(msg)
	case compactedMsg:
		return m.onCompacted(msg)
	case list.FilterMatchesMsg:
		var cmd tea.Cmd
		m.list.l, cmd = m.list.l.Update(msg)
		return cmd
	case spinner.TickMsg:
		if !m.turnActive() {
			m.spinning = false
			return nil
		}
		var cmd tea.Cmd
		m.spin, cmd = m.spin.Update(msg)
		return cmd
	}
	return nil
}

// startSpinner starts the spinner when a turn runs and it is not running.
func (m *model) startSpinner() tea.Cmd {
	if !m.turnActive() {
		return nil
	}
	id := m.startingTurn
	if rt := m.rootTurn(); rt != nil && !rt.Status.Terminal() {
		id = rt.TurnID
	}
	if id != m.runTurn {
		m.runTurn, m.runSince = id, m.now()
	}
	if m.spinning {
		return nil
	}
	m.spinning = true
	return m.spin.Tick
}

func (m *model) setNotice(isErr bool, format string, args ...any) {
	m.notice, m.noticeErr = fmt.Sprintf(format, args...), isErr
}

// fail reports a failed call: in the footer until the next key, and in
// the transcript for good.
func (m *model) fail(what string, err error) {
	m.setNotice(true, "%s: %v", what, err)
	m.note(true, fmt.Sprintf("%s: %v", what, err), callHint(err))
}

// rootTurn is the session's root turn in the last projection.
func (m *model) rootTurn() *protocol.TurnSnapshot {
	if m.snap == nil {
		return nil
	}
	return m.snap.RootTurn
}

// turnActive reports whether the session's root turn is running (or is
// being started by this client).
func (m *model) turnActive() bool {
	if m.startingTurn != "" {
		return true
	}
	rt := m.rootTurn()
	return rt != nil && !rt.Status.Terminal()
}

// attach makes s the current session: the previous subscription is closed
// and s's is opened (its transcript is loaded once it is open). keep keeps
// the entries shown (re-attaching the same session).
func (m *model) attach(s protocol.SessionSummary, keep bool) tea.Cmd {
	closeOld := m.closeStream(m.stream)
	m.gen++
	m.session, m.perms = &s, nil
	m.stream, m.snap = nil, nil
	m.input.hist = m.hist.of(s.SessionID)
	if !keep {
		m.tasks, m.taskCalls = nil, map[string]bool{}
	}
	m.attaching = true
	if !keep {
		m.entries = nil
		m.hostNotice = ""
		m.usage = protocol.SessionNotice{}
		m.seenTurn, m.seenTerminal = "", false
		m.prompt = nil
		m.answered = map[string]bool{}
		m.startingTurn = ""
		m.follow = true
		m.resubscribes = 0
	}
	m.loading = false
	return tea.Batch(closeOld, m.openStream(m.gen, s.SessionID), m.queryPermissions(m.gen, s.SessionID), m.loadModels())
}

// detach leaves the current session: the next message creates a new one.
func (m *model) detach() tea.Cmd {
	closeOld := m.closeStream(m.stream)
	m.gen++
	m.session, m.perms, m.stream, m.snap = nil, nil, nil, nil
	m.input.hist = m.hist.of("")
	m.hostNotice = ""
	m.usage = protocol.SessionNotice{}
	m.tasks, m.taskCalls = nil, map[string]bool{}
	m.attaching, m.loading = false, false
	m.entries = nil
	m.seenTurn, m.seenTerminal = "", false
	m.prompt = nil
	m.answered = map[string]bool{}
	m.startingTurn, m.pendingText = "", ""
	m.sending, m.stopping = false, false
	m.follow = true
	return closeOld
}

func (m *model) onSessionFound(msg sessionFoundMsg) tea.Cmd {
	switch {
	case msg.err != nil:
		m.attaching = false
		m.fail("open session "+msg.id, msg.err)
		return nil
	case msg.session == nil:
		m.attaching = false
		m.setNotice(true, "session %s does not exist", msg.id)
		return m.openList()
	}
	m.notice = ""
	return m.attach(*msg.session, false)
}

func (m *model) onSessionCreated(msg sessionCreatedMsg) tea.Cmd {
	m.creating = false
	if msg.err != nil {
		m.restoreInput(msg.text)
		m.fail("create session", msg.err)
		return nil
	}
	m.notice = ""
	m.pendingText = msg.text
	m.hist.rename("", msg.session.SessionID)
	return m.attach(msg.session, false)
}

func (m *model) onSubOpened(msg subOpenedMsg) tea.Cmd {
	if msg.stream != nil {
		m.open[msg.stream] = struct{}{}
	}
	if msg.gen != m.gen {
		return m.closeStream(msg.stream)
	}
	m.attaching = false
	if msg.err != nil {
		if text := m.pendingText; text != "" {
			m.pendingText = ""
			m.restoreInput(text)
		}
		m.fail("subscribe", msg.err)
		return nil
	}
	m.stream = msg.stream
	snap := msg.stream.Snapshot()
	m.snap = &snap
	m.syncSession()
	if rt := snap.RootTurn; rt != nil {
		m.seenTurn, m.seenTerminal = rt.TurnID, rt.Status.Terminal()
		if rt.TurnID == m.startingTurn {
			m.startingTurn = ""
		}
	}
	m.syncPrompt()
	cmds := []tea.Cmd{m.loadTranscript(), m.nextFrame(), m.loadTasks()}
	if text := m.pendingText; text != "" {
		m.pendingText = ""
		cmds = append(cmds, m.send(text))
	}
	return tea.Batch(cmds...)
}

func (m *model) onFrame(msg frameMsg) tea.Cmd {
	if msg.gen != m.gen || msg.stream != m.stream {
		return nil
	}
	if msg.err != nil {
		return m.resubscribe(msg.err)
	}
	m.resubscribes = 0
	m.framesSeen++
	var cmd tea.Cmd
	switch f := msg.frame.(type) {
	case protocol.ProjectionFrame:
		cmd = m.applySnapshot(f.Snapshot)
	case protocol.DeltaFrame:
		m.entries = applyDelta(m.entries, f.Delta)
	case protocol.EventFrame:
		m.entries = applyToolEvent(m.entries, f.Event)
		m.syncPrompt()
		cmd = m.onTaskToolEvent(f.Event)
	case protocol.NoticeFrame:
		n := f.Notice
		if n.Kind == protocol.NoticeTurnUsage {
			// Not a notice of its own: the status line shows it.
			m.usage = n
			break
		}
		m.hostNotice = firstLine(sanitize(n.Message))
		if n.Kind == protocol.NoticeContextCompacted && n.BeforeTokens > 0 {
			m.note(false, fmt.Sprintf("context compacted (%d → %d tokens)", n.BeforeTokens, n.AfterTokens), "")
		} else if n.Message != "" {
			m.note(n.Kind == protocol.NoticeContextCompactionFailed, n.Message, "")
		}
	case protocol.ClosedFrame:
		// The host ended the subscription (it fell behind): the next read
		// reports the end and the session is re-attached.
	}
	return tea.Batch(cmd, m.nextFrame())
}

// resubscribe re-opens the subscription after it ended, keeping what is
// shown; the transcript is reloaded once it is open.
func (m *model) resubscribe(err error) tea.Cmd {
	m.stream = nil
	if m.session == nil {
		return nil
	}
	var se *client.SubscriptionError
	if errors.As(err, &se) && se.Reason == client.SubscriptionConnectionClosed {
		return nil // the connection watcher reports it
	}
	m.resubscribes++
	if m.resubscribes > maxResubscribes {
		m.fail("live updates stopped", err)
		return nil
	}
	return m.attach(*m.session, true)
}

// applySnapshot takes a new projection: a new root turn or one that became
// terminal reloads the transcript.
func (m *model) applySnapshot(s protocol.SessionContinuitySnapshot) tea.Cmd {
	m.snap = &s
	m.syncSession()
	var cmd tea.Cmd
	if rt := s.RootTurn; rt != nil {
		newTurn := rt.TurnID != m.seenTurn
		terminal := rt.Status.Terminal()
		if newTurn || terminal && !m.seenTerminal {
			cmd = m.loadTranscript()
		}
		if rt.TurnID == m.startingTurn {
			m.startingTurn = ""
		}
		if terminal && (newTurn || !m.seenTerminal) {
			m.stopping = false
			switch rt.Status {
			case protocol.TurnFailed:
				m.setNotice(true, "turn failed: %s", rt.FailureClass)
				m.note(true, "the turn failed ("+rt.FailureClass+")", m.failureHint(rt.FailureClass))
			case protocol.TurnCancelled:
				m.setNotice(false, "turn cancelled (%s)", rt.AbortSource)
				m.note(false, "turn cancelled ("+rt.AbortSource+")", "")
			}
		}
		m.seenTurn, m.seenTerminal = rt.TurnID, terminal
	}
	m.syncPrompt()
	return cmd
}

// syncSession copies the projection's session status into the summary.
func (m *model) syncSession() {
	if m.session != nil && m.snap != nil {
		m.session.Status = m.snap.Session.Status
	}
}

func (m *model) onTranscript(msg transcriptMsg) tea.Cmd {
	if msg.gen != m.gen || msg.seq != m.loadSeq {
		return nil
	}
	m.loading = false
	if msg.err != nil {
		m.fail("transcript", msg.err)
		if msg.messages == nil {
			return nil
		}
	}
	keep := map[string]bool{}
	if rt := m.rootTurn(); rt != nil && !rt.Status.Terminal() {
		keep[rt.TurnID] = true
	}
	if m.startingTurn != "" {
		keep[m.startingTurn] = true
	}
	m.entries = mergeLive(entriesFromTranscript(msg.messages), m.entries, keep)
	m.syncPrompt()
	return nil
}

// send sends a message: it starts a turn when the session is idle,
// steers the running turn, or queues a follow-up (Tab).
func (m *model) send(text string) tea.Cmd {
	switch {
	case m.session == nil:
		if m.opts.Workspace == "" {
			m.restoreInput(text)
			m.setNotice(true, "no workspace for a new session")
			return nil
		}
		m.creating = true
		m.setNotice(false, "creating a session…")
		return m.createSession(text)
	case m.turnActive():
		placement := protocol.PlacementCurrentTurn
		if m.followUp {
			placement = protocol.PlacementNextTurn
		}
		m.sending = true
		return m.submitMessage(text, placement)
	}
	turnID := uuid.NewString()
	m.startingTurn = turnID
	m.sending = true
	m.follow = true
	m.entries = append(m.entries, &entry{kind: entryUser, id: "local-" + turnID, turnID: turnID, text: text, live: true, local: true, dirty: true})
	return m.startTurn(turnID, text)
}

func (m *model) onTurnStarted(msg turnStartedMsg) tea.Cmd {
	if msg.gen != m.gen {
		return nil
	}
	m.sending = false
	if msg.err == nil {
		return nil
	}
	if m.startingTurn == msg.turnID {
		m.startingTurn = ""
	}
	for i, e := range m.entries {
		if e.local && e.turnID == msg.turnID {
			m.entries = append(m.entries[:i], m.entries[i+1:]...)
			break
		}
	}
	m.restoreInput(msg.text)
	m.fail("start turn", msg.err)
	return nil
}

func (m *model) onSubmitted(msg submittedMsg) tea.Cmd {
	if msg.gen != m.gen {
		return nil
	}
	m.sending = false
	if msg.err != nil {
		m.restoreInput(msg.text)
		m.fail("send", msg.err)
		return nil
	}
	switch msg.result.Disposition {
	case protocol.DispositionSteering:
		m.setNotice(false, "steering message queued for the running turn")
	case protocol.DispositionFollowup:
		m.setNotice(false, "follow-up queued for the next turn")
	case protocol.DispositionTurnStarted:
		m.setNotice(false, "the turn had ended: started a new one")
	}
	return nil
}

func (m *model) onStopped(msg stoppedMsg) tea.Cmd {
	if msg.gen != m.gen {
		return nil
	}
	m.stopping = false
	if msg.err != nil {
		m.fail("stop", msg.err)
	}
	return nil
}

func (m *model) onAnswered(msg answeredMsg) tea.Cmd {
	if msg.gen != m.gen {
		return nil
	}
	if msg.err == nil {
		return nil
	}
	if !client.IsCode(msg.err, protocol.ErrAlreadyResolved) && !client.IsCode(msg.err, protocol.ErrNotFound) {
		delete(m.answered, msg.interactionID)
	}
	m.fail("answer", msg.err)
	m.syncPrompt()
	return nil
}

// restoreInput puts an unsent message back into an empty input box.
func (m *model) restoreInput(text string) {
	if m.input.Value() == "" {
		m.input.SetValue(text)
	}
}

// stop stops the running root turn.
func (m *model) stop() tea.Cmd {
	rt := m.rootTurn()
	if rt == nil || rt.Status.Terminal() || m.stopping {
		return nil
	}
	m.stopping = true
	m.setNotice(false, "stopping the turn…")
	return m.stopTurn(*rt)
}

func (m *model) onPermsSet(msg permsSetMsg) tea.Cmd {
	if msg.err != nil {
		m.fail("change the session", msg.err)
		return nil
	}
	if msg.gen != m.gen || m.session == nil {
		return nil
	}
	m.perms = &msg.perms
	m.session.PermissionMode = msg.perms.PermissionMode
	switch {
	case msg.in.Thinking != "":
		m.note(false, "thinking: "+msg.perms.Thinking+" (from the next turn)", "")
	case msg.in.PermissionMode != "":
		m.note(false, "permission mode: "+string(msg.perms.PermissionMode)+" (from the next turn)", "")
	}
	return nil
}

func (m *model) onCompacted(msg compactedMsg) tea.Cmd {
	m.compacting = false
	m.notice, m.noticeErr = "", false
	if msg.err != nil {
		m.fail("compact", msg.err)
		return nil
	}
	r := msg.result
	if !r.Compacted {
		m.note(false, fmt.Sprintf("nothing to compact (%d tokens)", r.BeforeTokens), "")
		return nil
	}
	text := fmt.Sprintf("context compacted (%d → %d tokens)", r.BeforeTokens, r.AfterTokens)
	m.hostNotice = text
	m.note(false, text, "")
	return nil
}

func (m *model) quit() tea.Cmd {
	m.quitting = true
	return tea.Quit
}
