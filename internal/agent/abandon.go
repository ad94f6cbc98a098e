package agent

import (
	"context"
	"sync"
	"time"

	"github.com/maka-agent/maka/internal/tools"
)

// StopGrace is how long a tool call has to return once its turn is
// stopped. A call still running then is abandoned: its result is recorded
// as an error result that says so, and the turn ends without it.
const StopGrace = time.Second

// Abandoned tracks the tool calls abandoned at a stop whose Run has not
// returned yet. Its owner (the owner of the turns that use it) waits for
// them with Wait when it closes. The zero value is ready to use.
type Abandoned struct {
	mu      sync.Mutex
	n       int
	waiters []chan struct{} // closed when n drops to 0
}

// defaultAbandoned tracks the abandoned calls of turns without a tracker
// of their own.
var defaultAbandoned Abandoned

// Running reports how many abandoned calls have not returned yet.
func (a *Abandoned) Running() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n
}

// Wait waits until every abandoned call has returned, or ctx ends.
func (a *Abandoned) Wait(ctx context.Context) error {
	a.mu.Lock()
	if a.n == 0 {
		a.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	a.waiters = append(a.waiters, ch)
	a.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func (a *Abandoned) add() {
	a.mu.Lock()
	a.n++
	a.mu.Unlock()
}

func (a *Abandoned) done() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.n--; a.n > 0 {
		return
	}
	for _, ch := range a.waiters {
		close(ch)
	}
	a.waiters = nil
}

// callRun is one tool call's Run, running in a goroutine of its own so
// that a stop ends the turn's wait for it. The goroutine is owned by the
// call until Run returns or the call is abandoned, and by the tracker from
// then on; it exits when Run returns.
type callRun struct {
	tracker *Abandoned
	done    chan runOutcome // buffered: receives the outcome once

	mu sync.Mutex
	// ended is set once Run returned or the call was abandoned; output
	// emits nothing afterwards.
	ended bool
	// returned is set (with the outcome sent) once Run returned.
	returned bool
	// abandoned is set once the call was given up; the goroutine then
	// reports to tracker when Run returns.
	abandoned bool
}

type runOutcome struct {
	res tools.Result
	err error
}

func newCallRun(tracker *Abandoned) *callRun {
	return &callRun{tracker: tracker, done: make(chan runOutcome, 1)}
}

// start runs run in the call's goroutine.
func (c *callRun) start(run func() (tools.Result, error)) {
	go func() {
		res, err := run()
		c.mu.Lock()
		c.returned, c.ended = true, true
		c.done <- runOutcome{res, err}
		abandoned := c.abandoned
		c.mu.Unlock()
		if abandoned {
			c.tracker.done()
		}
	}()
}

// wait returns Run's outcome. Once ctx ends Run has StopGrace more to
// return; after that the call is abandoned and ok is false.
func (c *callRun) wait(ctx context.Context) (out runOutcome, ok bool) {
	select {
	case out := <-c.done:
		return out, true
	case <-ctx.Done():
	}
	grace := time.NewTimer(StopGrace)
	defer grace.Stop()
	select {
	case out := <-c.done:
		return out, true
	case <-grace.C:
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.returned {
		return <-c.done, true
	}
	c.abandoned, c.ended = true, true
	c.tracker.add()
	return runOutcome{}, false
}

// output runs emit (a live output event of the call) unless the call
// ended, so that nothing of a call is emitted after its result. emit runs
// with the call's context, which a Sink honours, so it cannot hold off
// the end of the call.
func (c *callRun) output(emit func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ended {
		emit()
	}
}
