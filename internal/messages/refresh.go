package messages

import (
	"context"
	"errors"

	"github.com/maka-agent/maka/internal/continuity"
	"github.com/maka-agent/maka/internal/lane"
)

// refresher is the background continuity refresh of one session: at most
// one goroutine per session runs refreshes; a request that arrives while
// it runs makes it refresh once more, and it exits when no request is
// left.
type refresher struct {
	dirty bool
}

// scheduleRefreshLocked requests a refresh of sessionID without waiting
// for it. c.mu must be held.
func (c *Coordinator) scheduleRefreshLocked(sessionID string) {
	if c.closed || c.opts.Refresh == nil {
		return
	}
	if r := c.refreshing[sessionID]; r != nil {
		r.dirty = true
		return
	}
	c.refreshing[sessionID] = &refresher{}
	c.wg.Add(1)
	go c.runRefresh(sessionID)
}

// runRefresh refreshes sessionID until no request is pending or the
// coordinator closes.
func (c *Coordinator) runRefresh(sessionID string) {
	defer c.wg.Done()
	for {
		err := c.opts.Refresh(c.baseCtx, sessionID)
		if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, lane.ErrClosed) && !errors.Is(err, continuity.ErrClosed) {
			c.log.Warn("queue refresh failed", "session", sessionID, "err", err)
		}
		c.mu.Lock()
		r := c.refreshing[sessionID]
		if r.dirty && !c.closed {
			r.dirty = false
			c.mu.Unlock()
			continue
		}
		delete(c.refreshing, sessionID)
		c.mu.Unlock()
		return
	}
}
