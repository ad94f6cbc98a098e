package model

import (
	"sort"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeClock is a manual Clock: After registers a timer that fires only when
// Advance moves the time past it.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	timers  []fakeTimer
	changed chan struct{} // closed and replaced whenever a timer is added
}

type fakeTimer struct {
	at time.Time
	d  time.Duration
	ch chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), changed: make(chan struct{})}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.timers = append(c.timers, fakeTimer{at: c.now.Add(d), d: d, ch: ch})
	close(c.changed)
	c.changed = make(chan struct{})
	return ch
}

// Advance moves the time forward and fires every timer that is due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.timers[:0]
	for _, t := range c.timers {
		if !t.at.After(c.now) {
			t.ch <- c.now
		} else {
			kept = append(kept, t)
		}
	}
	c.timers = kept
}

// pending returns the remaining durations of the unfired timers.
func (c *fakeClock) pending() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []time.Duration
	for _, t := range c.timers {
		out = append(out, t.at.Sub(c.now))
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// waitTimer blocks until a timer created with duration d is pending, and
// fails the test if none appears within 10 s of real time.
func (c *fakeClock) waitTimer(t *testing.T, d time.Duration) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		c.mu.Lock()
		changed := c.changed
		for _, tm := range c.timers {
			if tm.d == d && tm.at.Sub(c.now) == d {
				c.mu.Unlock()
				return
			}
		}
		c.mu.Unlock()
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("no timer of %v was started; pending: %v", d, c.pending())
		}
	}
}

// stallOut lets an attempt's watchdog fire: each time a timer of d is
// pending it advances the clock by d, until the step ends, and returns the
// step's result. A watchdog that rearmed for a late event (a sign of life
// that arrived just after the timer it replaced) gets its new timer fired
// too.
func stallOut(t *testing.T, clock *fakeClock, d time.Duration, res <-chan stepResult) stepResult {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		clock.mu.Lock()
		due := false
		for _, tm := range clock.timers {
			due = due || (tm.d == d && tm.at.Sub(clock.now) == d)
		}
		changed := clock.changed
		clock.mu.Unlock()
		if due {
			clock.Advance(d)
		}
		select {
		case r := <-res:
			return r
		case <-changed:
		case <-deadline:
			t.Fatalf("the step did not end; pending timers: %v", clock.pending())
		}
	}
}

// outputCounter passes output events on and says when n have arrived.
type outputCounter struct {
	n, seen int
	next    func(Event) error
	done    chan struct{}
}

// outputs returns an emit func (its emit method) that passes events on to
// next and whose wait returns once n output events have arrived.
func outputs(n int, next func(Event) error) *outputCounter {
	return &outputCounter{n: n, next: next, done: make(chan struct{})}
}

func (o *outputCounter) emit(e Event) error {
	err := o.next(e)
	if e.Kind != EventAlive {
		if o.seen++; o.seen == o.n {
			close(o.done)
		}
	}
	return err
}

func (o *outputCounter) wait(t *testing.T) {
	t.Helper()
	select {
	case <-o.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%d output events did not arrive", o.n)
	}
}
