package model

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"
)

// Defaults of StepOptions.
const (
	DefaultMaxAttempts       = 10
	DefaultFirstEventTimeout = 30 * time.Second
	DefaultIdleTimeout       = 120 * time.Second

	// DefaultRetryBase is the first retry delay; the delay doubles with
	// each failed attempt up to RetryCapFactor times the base (32 s),
	// jitter included.
	DefaultRetryBase = time.Second
	RetryCapFactor   = 32
	retryJitter      = 0.25

	// A refused connection or a failed DNS lookup is retried at most
	// ConnectRetries times, within ConnectRetryWindow of the first such
	// failure of the step: nothing listens there, and waiting minutes
	// will rarely change that.
	ConnectRetries     = 2
	ConnectRetryWindow = 5 * time.Second
)

// Retry phases of RetryInfo.
const (
	RetryScheduled = "scheduled"
	RetryStarted   = "started"
)

// SystemClock is the real Clock.
var SystemClock Clock = systemClock{}

type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// StepOptions tunes StreamStep; the zero value uses the defaults.
type StepOptions struct {
	// MaxAttempts bounds the attempts of one step (0 = 10).
	MaxAttempts int
	// Clock drives retry delays and the watchdog (nil = SystemClock).
	Clock Clock
	// FirstEventTimeout bounds the wait for an attempt's first event
	// (0 = 30 s); IdleTimeout bounds the gap between two events
	// (0 = 120 s). Time spent inside emit does not count.
	FirstEventTimeout, IdleTimeout time.Duration
	// OnRetry, if set, is told when a retry is scheduled (before the
	// delay) and when it starts (after the delay). It is called from
	// StreamStep's goroutine.
	OnRetry func(RetryInfo)
	// Jitter returns a number in [0, 1) that scales the random part of a
	// backoff delay (nil = math/rand/v2).
	Jitter func() float64
	// RetryBase is the first backoff delay (0 = 1 s); the cap of every
	// delay is RetryCapFactor times it. Tests of the whole host shorten
	// it (maka host serve --retry-base).
	RetryBase time.Duration
}

// RetryInfo describes one retry of a step.
type RetryInfo struct {
	// Phase is RetryScheduled or RetryStarted.
	Phase string
	// Attempt is the number of the attempt being retried into (2 for the
	// first retry); MaxAttempts is the bound.
	Attempt, MaxAttempts int
	// Delay is the wait before Attempt.
	Delay time.Duration
	// Reason is the kind of the failure that caused the retry.
	Reason FailureKind
	// Message says what failed (Failure.Describe): "HTTP 500 Internal
	// Server Error: <body>", "connection refused at <base URL>", ...
	Message string
}

// String is the one line a person sees for a scheduled retry:
// "attempt 2/10 in 4 s: HTTP 500 Internal Server Error: <body>".
func (i RetryInfo) String() string {
	s := fmt.Sprintf("attempt %d/%d in %s", i.Attempt, i.MaxAttempts, FormatDelay(i.Delay))
	if i.Message != "" {
		s += ": " + i.Message
	}
	return s
}

// FormatDelay formats a retry delay for people: "250 ms", "1.2 s", "4 s",
// "32 s".
func FormatDelay(d time.Duration) string {
	if d < time.Second {
		return strconv.FormatInt(d.Milliseconds(), 10) + " ms"
	}
	tenths := (d + 50*time.Millisecond) / (100 * time.Millisecond)
	if tenths%10 == 0 || d >= 10*time.Second {
		return strconv.FormatInt(int64((d+500*time.Millisecond)/time.Second), 10) + " s"
	}
	return strconv.FormatInt(int64(tenths/10), 10) + "." + strconv.FormatInt(int64(tenths%10), 10) + " s"
}

// errStalled is the cancellation cause the watchdog gives an attempt.
var errStalled = errors.New("model stream stalled")

// StreamStep streams one step of p, retrying failed attempts.
//
// A failed attempt is retried when it emitted no output event (EventAlive
// does not count), its *Failure (see Classify) is Retryable and attempts
// remain. The delay is the failure's Retry-After when set, else
// min(base·2^(n-1)·(1+0.25·jitter), cap), where n is the number of the
// failed attempt, base RetryBase (1 s) and cap 32 times it: no delay,
// jitter included, exceeds the cap. A Retry-After above the cap is not
// waited for: the step fails with the provider's failure, which says so.
//
// A refused connection or a failed DNS lookup (Failure.Conn) is retried
// at most ConnectRetries times, and only while the retry starts within
// ConnectRetryWindow of the first such failure of the step.
//
// A watchdog cancels an attempt that produces no event (EventAlive
// included) within FirstEventTimeout of its start, or none for IdleTimeout
// after the previous one; the attempt then fails with a *Failure of kind
// timeout (retried like a network failure if it emitted no output).
// EventAlive only feeds the watchdog; it is never passed to emit.
//
// An error returned by emit is returned unchanged and never retried. When
// ctx is cancelled, StreamStep returns context.Cause(ctx). Any other error
// is a *Failure.
func StreamStep(ctx context.Context, p Provider, req Request, opts StepOptions, emit func(Event) error) (Finish, error) {
	opts = opts.withDefaults()
	var (
		connFails int       // refused connections and failed lookups so far
		connSince time.Time // the start of the first of them
	)
	for attempt := 1; ; attempt++ {
		started := opts.Clock.Now()
		fin, emitted, emitErr, err := runAttempt(ctx, p, req, opts, emit)
		switch {
		case emitErr != nil:
			return Finish{}, emitErr
		case err == nil:
			return fin, nil
		case ctx.Err() != nil:
			return Finish{}, context.Cause(ctx)
		}
		f := Classify(err)
		if emitted || !f.Retryable() || attempt >= opts.MaxAttempts {
			return Finish{}, f
		}
		maxAttempts := opts.MaxAttempts
		delay := f.RetryAfter
		if !f.RetryAfterSet {
			delay = backoff(attempt, opts.RetryBase, opts.Jitter)
		} else if limit := opts.RetryBase * RetryCapFactor; delay > limit {
			// Waiting longer than the cap would park the turn (and keep
			// the host up) silently: fail and say why.
			g := *f
			g.Hint = "the provider asked to retry after " + FormatDelay(delay) + ", more than the " + FormatDelay(limit) + " limit"
			return Finish{}, &g
		}
		if f.Conn == ConnRefused || f.Conn == ConnDNS {
			connFails++
			if connFails == 1 {
				connSince = started
			}
			if connFails > ConnectRetries || opts.Clock.Now().Add(delay).Sub(connSince) > ConnectRetryWindow {
				return Finish{}, f
			}
			maxAttempts = min(maxAttempts, attempt+ConnectRetries-connFails+1)
		}
		info := RetryInfo{Phase: RetryScheduled, Attempt: attempt + 1, MaxAttempts: maxAttempts, Delay: delay, Reason: f.Kind, Message: f.Describe()}
		if opts.OnRetry != nil {
			opts.OnRetry(info)
		}
		if delay > 0 {
			select {
			case <-ctx.Done():
				return Finish{}, context.Cause(ctx)
			case <-opts.Clock.After(delay):
			}
		} else if ctx.Err() != nil {
			return Finish{}, context.Cause(ctx)
		}
		if opts.OnRetry != nil {
			info.Phase = RetryStarted
			opts.OnRetry(info)
		}
	}
}

func (o StepOptions) withDefaults() StepOptions {
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.Clock == nil {
		o.Clock = SystemClock
	}
	if o.FirstEventTimeout <= 0 {
		o.FirstEventTimeout = DefaultFirstEventTimeout
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.Jitter == nil {
		o.Jitter = rand.Float64
	}
	if o.RetryBase <= 0 {
		o.RetryBase = DefaultRetryBase
	}
	return o
}

// backoff is min(base·2^(n-1)·(1+0.25·j), 32·base) for a jitter j in
// [0, 1): the cap holds with the jitter included.
func backoff(n int, base time.Duration, jitter func() float64) time.Duration {
	limit := base * RetryCapFactor
	d := limit
	if n < 7 {
		d = min(base<<(n-1), limit)
	}
	j := jitter()
	if !(j >= 0 && j < 1) { // also rejects NaN
		j = 0
	}
	return min(d+time.Duration(float64(d)*retryJitter*j), limit)
}

// runAttempt runs one attempt under a watchdog. emitErr is the error emit
// returned, if any; emitted reports whether any event reached emit.
func runAttempt(ctx context.Context, p Provider, req Request, opts StepOptions, emit func(Event) error) (fin Finish, emitted bool, emitErr error, err error) {
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	wd := newWatchdog(opts.Clock, opts.FirstEventTimeout, opts.IdleTimeout, cancel)
	defer wd.stop()

	alive := false // any event, EventAlive included
	fin, err = p.Stream(actx, req, func(ev Event) error {
		alive = true
		if ev.Kind == EventAlive {
			wd.alive()
			return nil
		}
		emitted = true
		wd.pause()
		e := emit(ev)
		wd.resume()
		if e != nil && emitErr == nil {
			emitErr = e
		}
		return e
	})
	if emitErr != nil {
		return Finish{}, emitted, emitErr, nil
	}
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(actx), errStalled) {
		what := "no event from the model within " + opts.FirstEventTimeout.String()
		if alive {
			what = "no event from the model for " + opts.IdleTimeout.String()
		}
		err = &Failure{Kind: FailureTimeout, Message: what}
	}
	if err == nil && ctx.Err() != nil {
		// The provider ignored the cancellation; the step still ends.
		err = context.Cause(ctx)
	}
	return fin, emitted, nil, err
}

// watchdog cancels an attempt when no event arrives in time. Time spent
// inside emit (between pause and resume) is not counted.
type watchdog struct {
	mu     sync.Mutex
	busy   bool   // inside emit
	gen    uint64 // bumped by every pause and resume
	signal chan struct{}
	done   chan struct{}
	exited chan struct{}
}

func newWatchdog(clock Clock, first, idle time.Duration, cancel context.CancelCauseFunc) *watchdog {
	w := &watchdog{signal: make(chan struct{}, 1), done: make(chan struct{}), exited: make(chan struct{})}
	go w.run(clock, first, idle, cancel)
	return w
}

func (w *watchdog) run(clock Clock, first, idle time.Duration, cancel context.CancelCauseFunc) {
	defer close(w.exited)
	timer := clock.After(first)
	var armed uint64 // the generation the running timer was armed at
	// rearm starts the idle timer unless emit is running.
	rearm := func() {
		w.mu.Lock()
		busy, gen := w.busy, w.gen
		w.mu.Unlock()
		armed = gen
		if busy {
			timer = nil // paused until resume
		} else {
			timer = clock.After(idle)
		}
	}
	for {
		select {
		case <-w.done:
			return
		case <-w.signal:
			rearm()
		case <-timer:
			w.mu.Lock()
			stale := w.busy || w.gen != armed
			w.mu.Unlock()
			if stale {
				// An event arrived since the timer was armed.
				rearm()
				continue
			}
			cancel(errStalled)
			return
		}
	}
}

func (w *watchdog) pause() { w.set(true) }

// alive restarts the idle timer: the stream is live.
func (w *watchdog) alive() { w.set(false) }

func (w *watchdog) resume() { w.set(false) }

func (w *watchdog) set(busy bool) {
	w.mu.Lock()
	w.busy = busy
	w.gen++
	w.mu.Unlock()
	select {
	case w.signal <- struct{}{}:
	default: // a pending signal makes the watchdog re-read the state
	}
}

// stop ends the watchdog goroutine and waits for it to exit.
func (w *watchdog) stop() {
	close(w.done)
	<-w.exited
}
