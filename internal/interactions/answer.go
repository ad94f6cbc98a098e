package interactions

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/maka-agent/maka/internal/host"
	"github.com/maka-agent/maka/internal/lane"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/protocol"
)

func internalFailure() host.Outcome {
	return host.Fail(protocol.ErrInternalFailure, MessageOperationFailed)
}

// handleQuery serves interaction.query: in the named
// session's lane, the snapshot of an interaction of that session, in any
// state.
func (c *Authority) handleQuery(ctx context.Context, call *host.Call) host.Outcome {
	in := call.Input.(protocol.InteractionQueryInput)
	if c.Err() != nil {
		return internalFailure()
	}
	var rec record
	var found bool
	err := c.opts.Gate.Run(ctx, in.SessionID, func(ctx context.Context, _ *lane.Lease) error {
		return c.opts.Store.Read(ctx, func(q store.Querier) error {
			var err error
			rec, found, err = loadRecord(q, in.InteractionID)
			return err
		})
	})
	switch {
	case err != nil:
		c.log.Error("interaction query failed", "session", in.SessionID, "interaction", in.InteractionID, "err", err)
		return internalFailure()
	case !found || rec.SessionID != in.SessionID:
		return host.Fail(protocol.ErrNotFound, MessageNotFound)
	}
	return host.OK(rec.snapshot())
}

// handleAnswer serves interaction.answer: routed by id to
// the interaction's session lane, it commits the user's answer as the
// canonical outcome unless one exists, answering against what is stored.
// An allow remembered for the turn also resolves the run's other pending
// permissions with the same scope and settles its later ones.
func (c *Authority) handleAnswer(ctx context.Context, call *host.Call) host.Outcome {
	in := call.Input.(protocol.InteractionAnswerInput)
	if c.Err() != nil {
		return internalFailure()
	}
	var sessionID string
	err := c.opts.Store.Read(ctx, func(q store.Querier) error {
		return q.QueryRow(`SELECT session_id FROM interactions WHERE interaction_id = ?`, in.InteractionID).Scan(&sessionID)
	})
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return host.Fail(protocol.ErrNotFound, MessageNotFound)
	case err != nil:
		c.log.Error("interaction answer failed", "interaction", in.InteractionID, "err", err)
		return internalFailure()
	}
	var out host.Outcome
	err = c.opts.Gate.Run(ctx, sessionID, func(ctx context.Context, _ *lane.Lease) error {
		var err error
		out, err = c.answerInLane(ctx, sessionID, in)
		return err
	})
	if err != nil {
		c.log.Error("interaction answer failed", "session", sessionID, "interaction", in.InteractionID, "err", err)
		return internalFailure()
	}
	return out
}

func (c *Authority) answerInLane(ctx context.Context, sessionID string, in protocol.InteractionAnswerInput) (host.Outcome, error) {
	if err := c.Err(); err != nil {
		return host.Outcome{}, err
	}
	var rec record
	var found bool
	err := c.opts.Store.Read(ctx, func(q store.Querier) error {
		var err error
		rec, found, err = loadRecord(q, in.InteractionID)
		return err
	})
	switch {
	case errors.Is(err, errCorrupt):
		return host.Outcome{}, c.poison(err)
	case err != nil:
		return host.Outcome{}, err
	case !found || rec.SessionID != sessionID:
		return host.Outcome{}, c.poison(fmt.Errorf("interactions: interaction %s of session %s disappeared", in.InteractionID, sessionID))
	}
	switch rec.Status {
	case protocol.InteractionStatusClosed:
		return host.Fail(protocol.ErrAlreadyResolved, MessageAlreadyClosed), nil
	case protocol.InteractionStatusAnswered:
		if protocol.EquivalentAnswer(*rec.Outcome, in.Answer) {
			return host.OK(protocol.InteractionAnsweredSnapshot(rec.snapshot())), nil
		}
		return host.Fail(protocol.ErrAlreadyResolved, MessageDifferentAnswer), nil
	}
	if !protocol.AnswerAcceptable(rec.Request, in.Answer) {
		return host.Fail(protocol.ErrOperationConflict, MessageAnswerMismatch), nil
	}
	outcome := protocol.UserOutcome(in.Answer, c.now())
	items := []resolution{{rec: rec, outcome: outcome}}
	remember := rec.ScopeKey != "" && outcome.Kind == protocol.InteractionOutcomePermissionAnswer &&
		outcome.Decision == protocol.InteractionDecisionAllow && outcome.RememberForTurn
	if remember {
		var siblings []record
		err := c.opts.Store.Read(ctx, func(q store.Querier) error {
			var err error
			siblings, err = pendingOfRun(q, rec.RunID)
			return err
		})
		if err != nil {
			return host.Outcome{}, err
		}
		for _, s := range siblings {
			if s.ID != rec.ID && s.ScopeKey == rec.ScopeKey && protocol.AnswerAcceptable(s.Request, in.Answer) {
				items = append(items, resolution{rec: s, outcome: outcome})
			}
		}
	}
	// The run that asked, while its call waits in this process.
	var rs *runState
	c.mu.Lock()
	if w := c.waiters[rec.ID]; w != nil {
		rs = w.rs
	}
	c.mu.Unlock()
	if err := c.commit(ctx, sessionID, items); err != nil {
		return host.Outcome{}, err
	}
	if remember && rs != nil {
		c.mu.Lock()
		if rs.closure == "" {
			rs.remembered[rec.ScopeKey] = outcome
		}
		c.mu.Unlock()
	}
	rec.Status, rec.Outcome = protocol.InteractionStatusAnswered, &outcome
	return host.OK(protocol.InteractionAnsweredSnapshot(rec.snapshot())), nil
}
