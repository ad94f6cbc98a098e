package turns

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/maka-agent/maka/internal/failpoint"
	"github.com/maka-agent/maka/internal/model"

	"github.com/maka-agent/maka/internal/agent"
	"github.com/maka-agent/maka/internal/lane"
	"github.com/maka-agent/maka/internal/runs"
	"github.com/maka-agent/maka/internal/sandbox"
	"github.com/maka-agent/maka/internal/sessions"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/internal/tools"
	"github.com/maka-agent/maka/protocol"
)

// errStartFailed reports a turn whose run could not start.
var errStartFailed = errors.New("turns: the run could not start")

// ErrDraining refuses a new execution during shutdown.
var ErrDraining = errors.New("turns: host is draining")

// launch installs the active root of admission a and starts its execution:
// the session's queue opens for it with its steering owner, the host
// residency and the continuity terminal-publication fence are taken, then
// the execution goroutine starts. The caller is inside the session's
// lane. begun is the session summary when the run was already started in
// the admission's write (nil: the execution starts it). prev is the
// terminal root a successor (the turn built from its follow-ups) replaces;
// a successor is launched even while draining, so that shutdown stops it
// like any other active root.
func (c *Owner) launch(ctx context.Context, a admission, begun *protocol.SessionSummary, prev *activeRoot) (*activeRoot, error) {
	c.mu.Lock()
	if c.draining && prev == nil {
		c.mu.Unlock()
		return nil, ErrDraining
	}
	s := c.sessionLocked(a.SessionID)
	if s.compacting && prev == nil {
		c.mu.Unlock()
		return nil, ErrSessionBusy
	}
	if s.root != prev {
		c.mu.Unlock()
		return nil, fmt.Errorf("turns: launch of turn %s in session %s, whose active root is another turn", a.TurnID, a.SessionID)
	}
	runCtx, stop := context.WithCancelCause(c.baseCtx)
	ar := &activeRoot{
		sessionID: a.SessionID, turnID: a.TurnID, runID: a.RunID,
		started: make(chan struct{}), done: make(chan struct{}), stop: stop,
	}
	s.root = ar
	s.queue.open = true
	ar.steering = &steering{c: c, s: s, root: ar, generation: s.queue.generation}
	c.mu.Unlock()
	ar.inter = c.inter.BindRun(a.SessionID, a.TurnID, a.RunID)
	if c.opts.Residency != nil {
		ar.resid = c.opts.Residency()
	}
	fence, err := c.cont.InstallFence(ctx, a.SessionID, a.TurnID, a.RunID)
	if err != nil {
		stop(nil)
		err = errors.Join(err, c.endOwnership(ar))
		// The root was visible: whoever took it meanwhile (a stop, Close)
		// learns that it ended.
		ar.startErr = fmt.Errorf("%w: %w", errStartFailed, err)
		close(ar.started)
		ar.doneErr = ar.startErr
		close(ar.done)
		return nil, err
	}
	ar.fence = fence
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.execute(runCtx, ar, a, begun)
	}()
	return ar, nil
}

// release ends what the root holds once its ownership ended: its run's
// interaction owner and its host residency.
func (ar *activeRoot) release() {
	ar.inter.Release()
	if ar.resid != nil {
		ar.resid.Release()
	}
}

// endOwnership ends an active root that will not reach a terminal
// transition: its steering owner is released, its fence lifted, and it is
// removed with its residency. When that would lose accepted messages the
// root stays, stuck, with its residency, and the host drains.
func (c *Owner) endOwnership(ar *activeRoot) error {
	ar.steering.release()
	c.mu.Lock()
	s := c.sessions[ar.sessionID]
	if s != nil && s.root == ar {
		if n := s.queue.live(); n > 0 || s.queue.batch != nil {
			c.mu.Unlock()
			err := fmt.Errorf("turns: turn %s of session %s ended without a transition while %d accepted messages wait", ar.turnID, ar.sessionID, n)
			c.markStuck(ar)
			return err
		}
		s.root = nil
		s.queue.open, s.queue.fence = false, nil
		c.reclaimLocked(s)
	}
	c.mu.Unlock()
	ar.fence.Release()
	if err := ar.inter.Close(context.Background(), ClosureTurnTerminal); err != nil {
		c.log.Error("interactions of an ended turn could not be closed", "session", ar.sessionID, "turn", ar.turnID, "err", err)
	}
	ar.release()
	return nil
}

// markStuck keeps ar as its session's active root for good: the owner
// fails stop (every later message operation is refused) and the host
// drains.
func (c *Owner) markStuck(ar *activeRoot) {
	c.mu.Lock()
	ar.stuck = true
	c.failed = true
	c.mu.Unlock()
	c.log.Error("root turn keeps accepted messages it cannot hand on; draining", "session", ar.sessionID, "turn", ar.turnID)
	c.opts.RequestDrain()
}

// execute runs one turn from its run start to its terminal transition.
func (c *Owner) execute(ctx context.Context, ar *activeRoot, a admission, begun *protocol.SessionSummary) {
	defer ar.stop(nil)
	rec := newRecorder(c, a)
	rec.seq = 1 // the user message
	var sum protocol.SessionSummary
	var err error
	if begun != nil {
		sum = *begun
	} else {
		sum, err = c.begin(ctx, a)
	}
	if err != nil {
		c.log.Error("turn could not start", "session", a.SessionID, "turn", a.TurnID, "err", err)
		ar.startErr = fmt.Errorf("%w: %w", errStartFailed, err)
		close(ar.started)
		// Ownership ends in the session's lane, like every change of the
		// active root (a stop may be deciding on it right now).
		err := c.opts.Gate.Run(context.Background(), a.SessionID, func(context.Context, *lane.Lease) error {
			return c.endOwnership(ar)
		})
		if errors.Is(err, lane.ErrClosed) {
			err = c.endOwnership(ar)
		}
		if err != nil {
			c.log.Error("turn ownership kept after a failed start", "session", a.SessionID, "turn", a.TurnID, "err", err)
		}
		ar.doneErr = ar.startErr
		close(ar.done)
		c.opts.RequestDrain()
		return
	}
	close(ar.started)

	rec.interactions = ar.inter
	out := c.runAgent(ctx, rec, a, sum, ar.steering)
	ar.steering.release()
	if err := c.commitTerminal(rec, a, out); err != nil {
		// The terminal fact is not durable: the next host's recovery ends
		// the run failed / app_restarted.
		c.log.Error("turn terminal fact could not be written; draining", "session", a.SessionID, "turn", a.TurnID, "err", err)
		c.opts.RequestDrain()
		c.finishTransition(ar, err)
		return
	}
	failpoint.Hit(failpoint.TurnTerminal)
	// The turn's usage and how it ended reach the subscribers that asked
	// for notices before its terminal snapshot.
	rec.publishUsage(turnStopReason(out), true, nil, out.Usage)
	// The terminal transition publishes the new projection, the session's
	// status included.
	c.finishTransition(ar, nil)
}

// begin starts the run of an admission written earlier (recovery), then
// publishes the change.
func (c *Owner) begin(ctx context.Context, a admission) (protocol.SessionSummary, error) {
	var sum protocol.SessionSummary
	err := c.opts.Store.Write(context.WithoutCancel(ctx), func(tx *store.Tx) error {
		var err error
		sum, err = beginTx(tx, a)
		return err
	})
	if err != nil {
		return sum, err
	}
	c.changed(a.SessionID)
	return sum, nil
}

// beginTx starts a's run inside tx: the run header, the user message (the
// run's event 1) and the session's running status.
func beginTx(tx *store.Tx, a admission) (protocol.SessionSummary, error) {
	sum, err := sessions.LoadSummary(tx, a.SessionID)
	if err != nil {
		return sum, err
	}
	return sum, beginRun(tx, a)
}

// beginRun writes the run header (running), the user message (the run's
// event 1) and the session's running status inside tx.
func beginRun(tx *store.Tx, a admission) error {
	user, err := sessions.NewRunEvent(1, a.AdmittedAt, sessions.EventUserMessage,
		sessions.MessagePayload{TurnID: a.TurnID, MessageID: a.UserMessageID, Text: a.Content.Text})
	if err != nil {
		return err
	}
	if err := runs.Begin(tx, a.RunID, a.SessionID, a.TurnID, a.AdmittedAt); err != nil {
		return err
	}
	if _, err := sessions.AppendRunEventsTx(tx, a.SessionID, a.RunID, []sessions.RunEvent{user}); err != nil {
		return err
	}
	_, err = sessions.SetSessionStatus(tx, a.SessionID, protocol.SessionRunning)
	return err
}

// changed republishes the session after a durable change.
func (c *Owner) changed(sessionID string) {
	if err := c.cont.Refresh(context.Background(), sessionID); err != nil {
		c.log.Warn("session refresh failed", "session", sessionID, "err", err)
	}
}

// runAgent resolves the model and the history and runs the agent loop.
func (c *Owner) runAgent(ctx context.Context, rec *recorder, a admission, sum protocol.SessionSummary, steering *steering) agent.Outcome {
	resolved, err := c.opts.Resolve(ctx, sum.ModelTarget)
	if out, stopped := agent.Stopped(ctx); stopped {
		return out // stopped before the model was reached
	}
	if err != nil {
		return agent.Outcome{Status: agent.StatusFailed, StopReason: agent.StopError, FailureClass: "model_unavailable", Message: err.Error()}
	}
	rec.model, rec.connection = resolved.Model, resolved.ConnectionSlug
	rec.window = resolved.ContextWindow
	if rec.window <= 0 {
		rec.window = DefaultContextWindow
	}
	conv, err := c.replayConversation(ctx, a)
	if out, stopped := agent.Stopped(ctx); stopped {
		return out
	}
	if err != nil {
		c.log.Error("turn history unreadable", "session", a.SessionID, "err", err)
		return agent.Outcome{Status: agent.StatusFailed, StopReason: agent.StopError, FailureClass: agent.FailureRuntimeError,
			Message: "Cannot build model context: the session history could not be read"}
	}
	workspace := sum.Workspace.Path
	if abs, err := filepath.Abs(workspace); err == nil {
		workspace = abs
	}
	policy, effort, err := c.permissionPolicy(ctx, a.SessionID, workspace)
	if out, stopped := agent.Stopped(ctx); stopped {
		return out
	}
	if err != nil {
		c.log.Error("turn permission policy unreadable", "session", a.SessionID, "err", err)
		return agent.Outcome{Status: agent.StatusFailed, StopReason: agent.StopError, FailureClass: agent.FailureRuntimeError,
			Message: "Cannot decide tool calls: the session's permission policy could not be read"}
	}
	turnTools := c.turnTools(ctx)
	system := c.systemPrompt(ctx, a, workspace, policy, turnTools)
	// The note at the tail of each request is read once per step, by the
	// loop; the estimates use the last one read.
	tailLen := len(c.tail(ctx, a.SessionID))
	history := c.fitTurnContext(ctx, a, resolved, conv, fixedBytes(system, turnTools, "")+tailLen) // compaction.go
	if out, stopped := agent.Stopped(ctx); stopped {
		return out
	}
	turn := agent.Turn{
		SessionID: a.SessionID, TurnID: a.TurnID, RunID: a.RunID,
		Prompt: a.Content.Text, History: history, Workspace: workspace, Protected: c.opts.Protected,
		Provider: resolved.Provider, Model: resolved.Model, System: system,
		Effort: effort,
		Tools:  turnTools, Permissions: tools.NewEngine(policy),
		MaxSteps: c.opts.MaxSteps, Step: c.opts.Step, Now: c.opts.Now, NewID: c.opts.NewID,
		Abandoned: &c.abandoned,
	}
	if rec.interactions != nil {
		turn.Approver = rec.interactions
	}
	turn.Steering = steering
	base := fixedBytes(system, turnTools, "")
	turn.Fit = c.midTurnFit(a, resolved, len(history), func(context.Context) int { return base + tailLen })
	if tail := c.opts.Tail; tail != nil {
		// Fit and Tail run on the loop's goroutine, one after the other.
		turn.Tail = func(ctx context.Context) string {
			t := tail(ctx, a.SessionID)
			tailLen = len(t)
			return t
		}
	}
	out := agent.Run(ctx, turn, rec)
	return out
}

// permissionPolicy reads the session's durable permission policy (mode,
// sandbox, the root's and the session's rules) for one turn's engine, and
// in the same read its reasoning effort (an unknown one leaves the
// provider's default).
func (c *Owner) permissionPolicy(ctx context.Context, sessionID, workspace string) (tools.Policy, model.Effort, error) {
	var perms sessions.Permissions
	err := c.opts.Store.Read(ctx, func(q store.Querier) error {
		var err error
		perms, err = sessions.LoadPermissions(q, sessionID)
		return err
	})
	if err != nil {
		return tools.Policy{}, model.EffortDefault, err
	}
	effort, err := model.ParseEffort(perms.Thinking)
	if err != nil {
		c.log.Warn("unknown reasoning effort ignored", "session", sessionID, "thinking", perms.Thinking)
		effort = model.EffortDefault
	}
	mode, err := tools.ParseMode(string(perms.Mode))
	if err != nil {
		mode = tools.ModeAsk
	}
	rules, skipped := perms.ToolRules()
	if len(skipped) > 0 {
		c.log.Warn("permission rules that no longer parse are ignored", "session", sessionID, "rules", skipped)
	}
	box, _ := sandbox.ParseMode(perms.Sandbox)
	available := c.opts.SandboxAvailable != nil && c.opts.SandboxAvailable()
	return tools.Policy{Mode: mode, Rules: rules, Workspace: workspace, Sandbox: box, SandboxAvailable: available,
		Protected: c.opts.Protected}, effort, nil
}

// sessionStatusAfter is the session status a turn's outcome leaves.
func sessionStatusAfter(out agent.Outcome) protocol.SessionStatus {
	switch out.Status {
	case agent.StatusCancelled:
		return protocol.SessionAborted
	case agent.StatusFailed:
		return protocol.SessionBlocked
	}
	return protocol.SessionActive
}

// commitTerminal writes the terminal fact: the terminal run event, the run
// header and the session status in one durable write.
func (c *Owner) commitTerminal(rec *recorder, a admission, out agent.Outcome) error {
	eventID := c.opts.NewID()
	batch, err := rec.takeTerminal(c.now(), terminalPayload{
		TurnID: a.TurnID, EventID: eventID, Status: out.Status, StopReason: out.StopReason,
		FailureClass: out.FailureClass, AbortSource: out.AbortSource, Message: out.Message,
	})
	if err != nil {
		return err
	}
	return c.opts.Store.Write(context.Background(), func(tx *store.Tx) error {
		return terminate(tx, a, batch, eventID, out, rec.model, rec.connection, sessionStatusAfter(out))
	})
}

// terminate records the terminal fact of a's run inside tx: the events of
// batch, the last of which is the terminal event, the run header and the
// session status.
func terminate(tx *store.Tx, a admission, batch []sessions.RunEvent, eventID string, out agent.Outcome, modelID, connection string, status protocol.SessionStatus) error {
	if _, err := sessions.AppendRunEventsTx(tx, a.SessionID, a.RunID, batch); err != nil {
		return err
	}
	ev := batch[len(batch)-1]
	err := runs.Terminate(tx, a.RunID, runs.Terminal{Status: out.Status, EventID: eventID, StopReason: out.StopReason,
		FailureClass: out.FailureClass, AbortSource: out.AbortSource, Message: out.Message,
		Model: modelID, ConnectionSlug: connection, At: ev.TS})
	if err != nil {
		return err
	}
	_, err = sessions.SetSessionStatus(tx, a.SessionID, status)
	return err
}

// finishTransition ends an execution with the terminal transition
// (docs/architecture.md, "The path of a turn") in the session's lane, then reports the execution done.
// cause is set when the terminal fact could not be written: ownership then
// ends without a transition.
func (c *Owner) finishTransition(ar *activeRoot, cause error) {
	ran := false
	err := c.opts.Gate.Run(context.Background(), ar.sessionID, func(ctx context.Context, _ *lane.Lease) error {
		ran = true
		return c.transition(ctx, ar, cause)
	})
	if err != nil {
		if !errors.Is(err, lane.ErrClosed) {
			c.log.Error("terminal transition failed", "session", ar.sessionID, "turn", ar.turnID, "err", err)
		}
		if !ran {
			if err := c.endOwnership(ar); err != nil {
				c.log.Error("turn ownership kept after shutdown", "session", ar.sessionID, "turn", ar.turnID, "err", err)
			}
		}
		if cause == nil {
			cause = err
		}
	}
	ar.doneErr = cause
	close(ar.done)
}

// transition is the single atomic cut after a turn's terminal fact: the
// run's pending interactions are closed; the message queue closes and
// folds its unpulled steering ahead of its follow-ups; subscribers get the
// terminal snapshot (exactly once); then either the session goes idle, or
// exactly one successor turn is admitted from the follow-ups and launched
// in this turn's place, so that subscribers always see the predecessor's
// terminal snapshot before the successor.
func (c *Owner) transition(ctx context.Context, ar *activeRoot, cause error) error {
	if err := ar.inter.Close(ctx, ClosureTurnTerminal); err != nil {
		return errors.Join(err, c.endOwnership(ar))
	}
	if cause != nil {
		return c.endOwnership(ar)
	}
	batch, err := c.beginTransition(ar)
	if err != nil {
		return errors.Join(err, c.endOwnership(ar))
	}
	if err := ar.fence.PublishTerminal(ctx); err != nil {
		// Subscribers miss the terminal cut; the host drains rather than
		// risk publishing out of order again.
		c.log.Error("terminal snapshot not published; draining", "session", ar.sessionID, "turn", ar.turnID, "err", err)
		ar.fence.Release()
		c.opts.RequestDrain()
	}
	if batch.Empty() {
		c.goIdle(ar)
		return nil
	}
	committed, err := c.admitSuccessor(ctx, ar, batch)
	if err != nil && !committed {
		// The follow-ups stay with this turn's transition.
		c.markStuck(ar)
		return err
	}
	c.removeActive(ar)
	ar.release()
	if err != nil {
		c.opts.RequestDrain()
	}
	return err
}

// goIdle ends the transition of ar without follow-ups: the session has no
// active root and its queue goes idle (and is dropped).
func (c *Owner) goIdle(ar *activeRoot) {
	c.mu.Lock()
	if s := c.sessions[ar.sessionID]; s != nil && s.root == ar {
		s.queue.handOn()
		s.root = nil
		s.queue.open = false
		c.mutatedLocked(s)
		c.reclaimLocked(s)
	}
	c.mu.Unlock()
	ar.release()
}

// beginTransition closes the queue of ar, whose run was released, folds
// its unpulled steering ahead of its follow-ups and returns them as the
// batch of the next turn (empty: the session goes idle). While draining
// the stop fence is committed first, so no follow-up turn starts.
func (c *Owner) beginTransition(ar *activeRoot) (FollowupBatch, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sessions[ar.sessionID]
	switch {
	case s == nil || s.root != ar:
		return FollowupBatch{}, fmt.Errorf("turns: transition of turn %s of session %s, which is not its active root", ar.turnID, ar.sessionID)
	case len(s.queue.inFlight) > 0:
		return FollowupBatch{}, fmt.Errorf("turns: transition of turn %s of session %s with steering in flight", ar.turnID, ar.sessionID)
	}
	if c.draining {
		if _, err := c.stopFenceLocked(s); err != nil {
			return FollowupBatch{}, err
		}
	}
	if s.queue.foldSteering() {
		c.mutatedLocked(s)
	}
	var batch FollowupBatch
	if len(s.queue.batch) > 0 {
		batch.Sources = make([]SourceMessage, len(s.queue.batch))
		for i, e := range s.queue.batch {
			batch.Sources[i] = e.source()
		}
		batch.Content = AggregateContent(batch.Sources)
	}
	return batch, nil
}

// admitSuccessor durably admits (and begins, in the same write) the turn
// built from batch after prev, hands the batch to it in the message queue,
// and launches it as the session's active root. committed reports whether
// the batch was handed on.
func (c *Owner) admitSuccessor(ctx context.Context, prev *activeRoot, batch FollowupBatch) (committed bool, err error) {
	sources, err := encodeSources(batch.Sources)
	if err != nil {
		return false, err
	}
	a := admission{
		SessionID: prev.sessionID, TurnID: c.opts.NewID(), RunID: c.opts.NewID(), UserMessageID: c.opts.NewID(),
		Kind: KindExternalMessage, Content: batch.Content, Sources: sources, AdmittedAt: c.now(),
	}
	var sum protocol.SessionSummary
	err = c.opts.Store.Write(context.WithoutCancel(ctx), func(tx *store.Tx) error {
		if err := insertAdmission(tx, &a); err != nil {
			return err
		}
		if a.PreviousTurnID != prev.turnID {
			return fmt.Errorf("turns: session %s chain tip is %q, not the terminal turn %s", a.SessionID, a.PreviousTurnID, prev.turnID)
		}
		var err error
		sum, err = beginTx(tx, a)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("turns: admit the follow-up turn of %s: %w", prev.turnID, err)
	}
	// The batch's messages are now the next turn's input; the queue opens
	// for it in a new generation.
	c.mu.Lock()
	s := c.sessions[a.SessionID]
	s.queue.handOn()
	c.mutatedLocked(s)
	c.mu.Unlock()
	if _, err := c.launch(ctx, a, &sum, prev); err != nil {
		return true, fmt.Errorf("turns: launch the follow-up turn %s: %w", a.TurnID, err)
	}
	return true, nil
}

// removeActive removes ar when it is still its session's active root.
func (c *Owner) removeActive(ar *activeRoot) {
	c.mu.Lock()
	if s := c.sessions[ar.sessionID]; s != nil && s.root == ar {
		s.root = nil
		c.reclaimLocked(s)
	}
	c.mu.Unlock()
}
