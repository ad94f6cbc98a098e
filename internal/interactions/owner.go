package interactions

import (
	"context"
	"errors"
	"fmt"
	"github.com/maka-agent/maka/internal/continuity"
	"sync"
	"time"

	"github.com/maka-agent/maka/internal/agent"
	"github.com/maka-agent/maka/internal/lane"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/internal/tools"
	"github.com/maka-agent/maka/protocol"
)

// Run is the interaction owner of one run: the agent's approver, the
// question tool's asker, and the run's closure. The session owner
// (internal/turns) binds it when the run's root turn is launched and holds
// it until the run's terminal transition.
type Run struct {
	c           *Authority
	rs          *runState
	releaseOnce sync.Once
}

var _ tools.QuestionAsker = (*Run)(nil)

// BindRun returns the interaction owner of a run that starts.
func (c *Authority) BindRun(sessionID, turnID, runID string) *Run {
	rs := &runState{sessionID: sessionID, turnID: turnID, runID: runID,
		remembered: make(map[string]protocol.InteractionCanonicalOutcome)}
	c.mu.Lock()
	c.bound++
	c.mu.Unlock()
	return &Run{c: c, rs: rs}
}

// RequestPermission asks a person whether a tool call may run and waits
// for the answer, the run's closure, the permission timeout or ctx's end.
// An allow remembered for the turn with the same scope settles the request
// at once, without showing it.
func (o *Run) RequestPermission(ctx context.Context, req agent.PermissionRequest) (agent.PermissionAnswer, error) {
	if err := o.c.Err(); err != nil {
		return agent.PermissionAnswer{}, err
	}
	wire, err := permissionRequest(req)
	if err != nil {
		return agent.PermissionAnswer{}, err
	}
	scope := ""
	if req.RememberAllowed {
		scope = req.ScopeKey
	}
	out, err := o.c.ask(ctx, o.rs, wire, scope, o.c.opts.PermissionTimeout)
	if err != nil {
		return agent.PermissionAnswer{}, err
	}
	if out.Kind != protocol.InteractionOutcomePermissionAnswer {
		return agent.PermissionAnswer{}, fmt.Errorf("interactions: a permission request settled with a %s outcome", out.Kind)
	}
	allow := out.Decision == protocol.InteractionDecisionAllow
	return agent.PermissionAnswer{Allow: allow, RememberForTurn: allow && out.RememberForTurn}, nil
}

// AskQuestions asks a person the questions and waits for the answers (one
// per question, nil when unanswered), the run's closure or ctx's end.
// Questions never time out.
func (o *Run) AskQuestions(ctx context.Context, toolUseID string, questions []tools.Question) ([]*string, error) {
	if err := o.c.Err(); err != nil {
		return nil, err
	}
	wire, err := questionRequest(toolUseID, questions)
	if err != nil {
		return nil, err
	}
	out, err := o.c.ask(ctx, o.rs, wire, "", 0)
	if err != nil {
		return nil, err
	}
	if out.Kind != protocol.InteractionOutcomeQuestionAnswer || len(out.Answers) != len(questions) {
		return nil, fmt.Errorf("interactions: a question request settled with a %s outcome", out.Kind)
	}
	return out.Answers, nil
}

// Release ends the owner after the run's terminal fact. The run must have
// been closed (Close) with no call still waiting; otherwise the
// coordinator is poisoned. Releasing again is a no-op.
func (o *Run) Release() {
	o.releaseOnce.Do(func() {
		c, rs := o.c, o.rs
		c.mu.Lock()
		closure := rs.closure
		if closure == "" {
			rs.closure = protocol.InteractionClosureTurnTerminal
		}
		c.bound--
		var live []*waiter
		for id, w := range c.waiters {
			if w.runID == rs.runID {
				live = append(live, w)
				delete(c.waiters, id)
			}
		}
		c.mu.Unlock()
		for _, w := range live {
			w.fail(&ClosureError{Reason: protocol.InteractionClosureTurnTerminal})
		}
		switch {
		case closure == "":
			c.poison(fmt.Errorf("interactions: run %s of session %s was released without a closure", rs.runID, rs.sessionID))
		case len(live) > 0:
			c.poison(fmt.Errorf("interactions: run %s of session %s was released with %d waiting calls", rs.runID, rs.sessionID, len(live)))
		}
	})
}

// ask admits one request of rs in its session's lane and waits for its
// outcome; timeout 0 waits without a timeout.
func (c *Authority) ask(ctx context.Context, rs *runState, wire protocol.InteractionRequest, scope string, timeout time.Duration) (protocol.InteractionCanonicalOutcome, error) {
	var (
		w       *waiter
		settled *protocol.InteractionCanonicalOutcome
	)
	err := c.opts.Gate.Run(ctx, rs.sessionID, func(ctx context.Context, _ *lane.Lease) error {
		var err error
		w, settled, err = c.admit(ctx, rs, wire, scope)
		return err
	})
	switch {
	case err != nil:
		return protocol.InteractionCanonicalOutcome{}, err
	case settled != nil:
		return *settled, nil
	}
	return c.await(ctx, rs, w, timeout)
}

// admit establishes a request inside the session's lane: refused when the
// run is closed or the session is full, settled at once by a remembered
// allow, else written durably as pending (run and session waiting for the
// user) and then published. It returns the waiter of a pending request or
// the outcome of a settled one.
func (c *Authority) admit(ctx context.Context, rs *runState, wire protocol.InteractionRequest, scope string) (*waiter, *protocol.InteractionCanonicalOutcome, error) {
	c.mu.Lock()
	poisoned, closure := c.poisoned, rs.closure
	remembered, isRemembered := rs.remembered[scope]
	c.mu.Unlock()
	switch {
	case poisoned != nil:
		return nil, nil, poisoned
	case closure != "":
		return nil, nil, &ClosureError{Reason: closure}
	}
	now := c.now()
	rec := record{
		ID: c.opts.NewID(), SessionID: rs.sessionID, TurnID: rs.turnID, RunID: rs.runID,
		Request: wire, ScopeKey: scope, Status: protocol.InteractionStatusPending, CreatedAt: now,
	}
	if !protocol.IsEntityID(rec.ID) {
		return nil, nil, fmt.Errorf("interactions: new interaction id %q is not an entity id", rec.ID)
	}
	writeCtx := context.WithoutCancel(ctx)
	if scope != "" && isRemembered {
		out := remembered
		out.CommittedAt = now
		rec.Status, rec.Outcome = protocol.InteractionStatusAnswered, &out
		if err := c.opts.Store.Write(writeCtx, func(tx *store.Tx) error { return insertRecord(tx, rec) }); err != nil {
			return nil, nil, c.writeFailed("settle a remembered request", err)
		}
		return nil, &out, nil
	}
	var pending []record
	if err := c.opts.Store.Read(ctx, func(q store.Querier) error {
		var err error
		pending, err = pendingOfSession(q, rs.sessionID)
		return err
	}); err != nil {
		return nil, nil, err
	}
	switch n := len(pending); {
	case n > protocol.InteractionMaxPendingPerSession:
		return nil, nil, c.poison(fmt.Errorf("interactions: session %s has %d pending interactions", rs.sessionID, n))
	case n == protocol.InteractionMaxPendingPerSession:
		return nil, nil, ErrCapacityExceeded
	}
	candidate := projection(append(pending, rec))
	if size, err := protocol.EncodedSize(candidate); err != nil || size > PendingProjectionMaxBytes {
		return nil, nil, errors.Join(ErrCapacityExceeded, err)
	}
	// The whole session snapshot must still fit with it, or no client
	// could ever see it pending.
	if c.opts.ReadProjection != nil {
		p, found, err := c.opts.ReadProjection(ctx, rs.sessionID)
		if err != nil {
			return nil, nil, err
		}
		if found {
			p.Interactions = candidate
			if fits, err := continuity.SnapshotFits(p); !fits || err != nil {
				return nil, nil, errors.Join(ErrCapacityExceeded, err)
			}
		}
	}
	c.mu.Lock()
	rs.asked = true
	c.mu.Unlock()
	err := c.opts.Store.Write(writeCtx, func(tx *store.Tx) error {
		if err := insertRecord(tx, rec); err != nil {
			return err
		}
		return markWaiting(tx, rs.sessionID, rs.runID, now)
	})
	if err != nil {
		return nil, nil, c.writeFailed("establish a request", err)
	}
	w := &waiter{id: rec.ID, runID: rs.runID, rs: rs, done: make(chan struct{})}
	c.mu.Lock()
	if c.poisoned != nil {
		err = c.poisoned
	} else {
		c.waiters[rec.ID] = w
	}
	c.mu.Unlock()
	if err != nil {
		return nil, nil, err
	}
	c.refresh(ctx, rs.sessionID)
	return w, nil, nil
}

// writeFailed handles a failed durable write: an unknown commit outcome
// poisons the coordinator; a write that certainly did not commit is
// returned as is.
func (c *Authority) writeFailed(what string, err error) error {
	if errors.Is(err, store.ErrCommitOutcomeUnknown) || errors.Is(err, errNotPending) || errors.Is(err, errCorrupt) {
		return c.poison(fmt.Errorf("interactions: %s: %w", what, err))
	}
	return fmt.Errorf("interactions: %s: %w", what, err)
}

// await waits outside the lane for the outcome of w. When the permission
// timeout fires first, the timeout is committed unless another outcome
// won the race, which is then returned.
func (c *Authority) await(ctx context.Context, rs *runState, w *waiter, timeout time.Duration) (protocol.InteractionCanonicalOutcome, error) {
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-w.done:
	case <-expired:
		if hook := c.beforeTimeout; hook != nil {
			hook()
		}
		if err := c.commitTimeout(ctx, rs, w.id); err != nil {
			return protocol.InteractionCanonicalOutcome{}, err
		}
		select {
		case <-w.done:
		case <-ctx.Done():
			return protocol.InteractionCanonicalOutcome{}, context.Cause(ctx)
		}
	case <-ctx.Done():
		return protocol.InteractionCanonicalOutcome{}, context.Cause(ctx)
	}
	if w.err != nil {
		return protocol.InteractionCanonicalOutcome{}, w.err
	}
	if w.outcome.Kind == protocol.InteractionOutcomeClosure {
		return w.outcome, &ClosureError{Reason: w.outcome.Reason}
	}
	return w.outcome, nil
}

// commitTimeout closes the interaction id timed_out in its session's lane
// unless it already has an outcome (first durable outcome wins). The
// waiter is woken either way: by this commit or by the one that won.
func (c *Authority) commitTimeout(ctx context.Context, rs *runState, id string) error {
	return c.opts.Gate.Run(ctx, rs.sessionID, func(ctx context.Context, _ *lane.Lease) error {
		var rec record
		var found bool
		err := c.opts.Store.Read(ctx, func(q store.Querier) error {
			var err error
			rec, found, err = loadRecord(q, id)
			return err
		})
		switch {
		case err != nil:
			return err
		case !found:
			return c.poison(fmt.Errorf("interactions: pending interaction %s disappeared", id))
		case rec.Status != protocol.InteractionStatusPending:
			// The winner's commit woke (or will wake) the waiter; make
			// sure of it for an outcome committed by a previous owner.
			c.wake([]resolution{{rec: rec, outcome: *rec.Outcome}})
			return nil
		}
		out := protocol.InteractionCanonicalOutcome{
			Kind: protocol.InteractionOutcomeClosure, Reason: protocol.InteractionClosureTimedOut, CommittedAt: c.now(),
		}
		return c.commit(ctx, rs.sessionID, []resolution{{rec: rec, outcome: out}})
	})
}
