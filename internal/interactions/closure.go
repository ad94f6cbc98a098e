package interactions

import (
	"context"
	"fmt"
	"slices"

	"github.com/maka-agent/maka/internal/lane"
	"github.com/maka-agent/maka/internal/store"
	"github.com/maka-agent/maka/protocol"
)

// resolution is an outcome to commit for a pending interaction.
type resolution struct {
	rec     record
	outcome protocol.InteractionCanonicalOutcome
}

// commit durably resolves pending interactions of one session in one
// write — each run left without a pending interaction goes back to
// running, and so does its session — then republishes the session once
// and wakes the waiting calls in (createdAt, interactionId) order. The
// caller is inside the session's lane.
func (c *Authority) commit(ctx context.Context, sessionID string, items []resolution) error {
	if len(items) == 0 {
		return nil
	}
	slices.SortFunc(items, func(a, b resolution) int {
		switch {
		case a.rec.before(b.rec):
			return -1
		case b.rec.before(a.rec):
			return 1
		}
		return 0
	})
	now := c.now()
	err := c.opts.Store.Write(context.WithoutCancel(ctx), func(tx *store.Tx) error {
		var runs []string
		for _, it := range items {
			if it.rec.SessionID != sessionID {
				return fmt.Errorf("interactions: %s of session %s resolved in the lane of %s", it.rec.ID, it.rec.SessionID, sessionID)
			}
			if err := resolveRecord(tx, it.rec.ID, it.outcome); err != nil {
				return err
			}
			if !slices.Contains(runs, it.rec.RunID) {
				runs = append(runs, it.rec.RunID)
			}
		}
		for _, runID := range runs {
			if err := markRunningIfSettled(tx, sessionID, runID, now); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return c.writeFailed("commit an outcome", err)
	}
	c.refresh(ctx, sessionID)
	c.wake(items)
	return nil
}

// wake hands each committed outcome to the call waiting for it, in order.
func (c *Authority) wake(items []resolution) {
	ws := make([]*waiter, len(items))
	c.mu.Lock()
	for i, it := range items {
		if w := c.waiters[it.rec.ID]; w != nil {
			ws[i] = w
			delete(c.waiters, it.rec.ID)
		}
	}
	c.mu.Unlock()
	for i, w := range ws {
		if w != nil {
			w.settle(items[i].outcome)
		}
	}
}

// Close durably closes every pending interaction of the run with reason
// (the first reason claimed for the run wins) and wakes their waiting
// calls with a ClosureError; later requests of the run are refused. The
// caller is inside the run's session lane.
func (o *Run) Close(ctx context.Context, reason string) error {
	c, rs := o.c, o.rs
	sessionID, runID := rs.sessionID, rs.runID
	c.mu.Lock()
	if c.poisoned != nil {
		err := c.poisoned
		c.mu.Unlock()
		return err
	}
	if rs.closure == "" {
		rs.closure = reason
	}
	reason = rs.closure
	asked := rs.asked
	c.mu.Unlock()
	if !asked {
		return nil
	}
	var pending []record
	if err := c.opts.Store.Read(context.WithoutCancel(ctx), func(q store.Querier) error {
		var err error
		pending, err = pendingOfRun(q, runID)
		return err
	}); err != nil {
		return c.poison(fmt.Errorf("interactions: read the pending interactions of run %s: %w", runID, err))
	}
	items := make([]resolution, 0, len(pending))
	now := c.now()
	for _, rec := range pending {
		items = append(items, resolution{rec: rec, outcome: protocol.InteractionCanonicalOutcome{
			Kind: protocol.InteractionOutcomeClosure, Reason: reason, CommittedAt: now,
		}})
	}
	if err := c.commit(ctx, sessionID, items); err != nil {
		// Pending interactions of a run that goes on closing cannot be
		// left behind.
		return c.poison(err)
	}
	return nil
}

// Recover closes every interaction a previous host left pending, in all
// sessions, with host_restarted: per session in its lane, in (createdAt,
// interactionId) order, with one refresh. It must run before any run
// binds (before turn recovery starts runs).
func (c *Authority) Recover(ctx context.Context) error {
	c.mu.Lock()
	bound := c.bound
	c.mu.Unlock()
	if bound > 0 {
		return c.poison(fmt.Errorf("interactions: %d runs bound before recovery", bound))
	}
	if err := c.Err(); err != nil {
		return err
	}
	var ids []string
	err := c.opts.Store.Read(ctx, func(q store.Querier) error {
		rows, err := q.Query(`SELECT DISTINCT session_id FROM interactions WHERE status = 'pending' ORDER BY session_id`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return rows.Err()
	})
	if err != nil {
		return fmt.Errorf("interactions: recovery: %w", err)
	}
	for _, sessionID := range ids {
		err := c.opts.Gate.Run(ctx, sessionID, func(ctx context.Context, _ *lane.Lease) error {
			var pending []record
			if err := c.opts.Store.Read(ctx, func(q store.Querier) error {
				var err error
				pending, err = pendingOfSession(q, sessionID)
				return err
			}); err != nil {
				return err
			}
			if len(pending) > protocol.InteractionMaxPendingPerSession {
				return c.poison(fmt.Errorf("interactions: session %s has %d pending interactions", sessionID, len(pending)))
			}
			now := c.now()
			items := make([]resolution, 0, len(pending))
			for _, rec := range pending {
				items = append(items, resolution{rec: rec, outcome: protocol.InteractionCanonicalOutcome{
					Kind: protocol.InteractionOutcomeClosure, Reason: protocol.InteractionClosureHostRestarted, CommittedAt: now,
				}})
			}
			return c.commit(ctx, sessionID, items)
		})
		if err != nil {
			return fmt.Errorf("interactions: recovery of session %s: %w", sessionID, err)
		}
	}
	return nil
}
