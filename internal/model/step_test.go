package model

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// providerFunc adapts a function to Provider.
type providerFunc func(ctx context.Context, req Request, emit func(Event) error) (Finish, error)

func (f providerFunc) Stream(ctx context.Context, req Request, emit func(Event) error) (Finish, error) {
	return f(ctx, req, emit)
}

// stepResult is the outcome of a StreamStep run in the background.
type stepResult struct {
	fin Finish
	err error
}

func runStep(ctx context.Context, p Provider, opts StepOptions, emit func(Event) error) <-chan stepResult {
	out := make(chan stepResult, 1)
	go func() {
		fin, err := StreamStep(ctx, p, Request{}, opts, emit)
		out <- stepResult{fin, err}
	}()
	return out
}

func waitResult(t *testing.T, ch <-chan stepResult) stepResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("StreamStep did not return")
		return stepResult{}
	}
}

// retryRecorder collects OnRetry calls.
type retryRecorder struct {
	mu    sync.Mutex
	infos []RetryInfo
}

func (r *retryRecorder) record(i RetryInfo) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.infos = append(r.infos, i)
}

func (r *retryRecorder) get() []RetryInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]RetryInfo(nil), r.infos...)
}

func discard(Event) error { return nil }

func TestBackoff(t *testing.T) {
	zero := func() float64 { return 0 }
	almost := func() float64 { return 0.999 }
	for n, want := range []time.Duration{0, 1 * time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, 32 * time.Second, 32 * time.Second} {
		if n == 0 {
			continue
		}
		if got := backoff(n, time.Second, zero); got != want {
			t.Errorf("backoff(%d) without jitter = %v, want %v", n, got, want)
		}
		got := backoff(n, time.Second, almost)
		switch {
		case want == 32*time.Second && got != want:
			t.Errorf("backoff(%d) with jitter 0.999 = %v, want the cap %v", n, got, want)
		case want < 32*time.Second && (got <= want || got >= want+want/4):
			t.Errorf("backoff(%d) with jitter 0.999 = %v, want in (%v, %v)", n, got, want, want+want/4)
		}
	}
	if got := backoff(1, time.Second, func() float64 { return 7 }); got != time.Second {
		t.Errorf("out-of-range jitter not ignored: %v", got)
	}
	if got := backoff(3, 10*time.Millisecond, zero); got != 40*time.Millisecond {
		t.Errorf("backoff(3) from a 10 ms base = %v, want 40ms", got)
	}
}

func TestStreamStepRetriesUntilSuccess(t *testing.T) {
	clock := newFakeClock()
	var calls atomic.Int32
	p := providerFunc(func(ctx context.Context, _ Request, emit func(Event) error) (Finish, error) {
		if calls.Add(1) <= 2 {
			return Finish{}, &Failure{Kind: FailureProviderUnavailable, Status: 503, Message: "busy"}
		}
		if err := emit(Event{Kind: EventText, Text: "ok"}); err != nil {
			return Finish{}, err
		}
		return Finish{Reason: FinishStop}, nil
	})
	var rec retryRecorder
	var got []Event
	res := runStep(context.Background(), p, StepOptions{Clock: clock, OnRetry: rec.record, Jitter: func() float64 { return 0.5 }},
		func(e Event) error { got = append(got, e); return nil })

	clock.waitTimer(t, 1125*time.Millisecond) // 1 s + 0.5·25 %
	clock.Advance(1125 * time.Millisecond)
	clock.waitTimer(t, 2250*time.Millisecond) // 2 s + 0.5·25 %
	clock.Advance(2250 * time.Millisecond)
	r := waitResult(t, res)
	if r.err != nil || r.fin.Reason != FinishStop {
		t.Fatalf("StreamStep = %+v, %v; want stop", r.fin, r.err)
	}
	if calls.Load() != 3 || len(got) != 1 || got[0].Text != "ok" {
		t.Fatalf("calls=%d events=%+v", calls.Load(), got)
	}
	want := []RetryInfo{
		{RetryScheduled, 2, 10, 1125 * time.Millisecond, FailureProviderUnavailable, "HTTP 503 Service Unavailable: busy"},
		{RetryStarted, 2, 10, 1125 * time.Millisecond, FailureProviderUnavailable, "HTTP 503 Service Unavailable: busy"},
		{RetryScheduled, 3, 10, 2250 * time.Millisecond, FailureProviderUnavailable, "HTTP 503 Service Unavailable: busy"},
		{RetryStarted, 3, 10, 2250 * time.Millisecond, FailureProviderUnavailable, "HTTP 503 Service Unavailable: busy"},
	}
	if infos := rec.get(); !reflect.DeepEqual(infos, want) {
		t.Fatalf("OnRetry calls:\n got %+v\nwant %+v", infos, want)
	}
}

func TestStreamStepDoesNotRetry(t *testing.T) {
	emitErr := errors.New("sink closed")
	tests := []struct {
		name     string
		failure  error
		emitted  bool
		emit     func(Event) error
		wantErr  error // compared with errors.Is when set
		wantKind FailureKind
	}{
		{name: "not retryable", failure: &Failure{Kind: FailureAuth, Status: 401}, wantKind: FailureAuth},
		{name: "after output", failure: &Failure{Kind: FailureNetwork}, emitted: true, wantKind: FailureNetwork},
		{name: "invalid retry-after", failure: &Failure{Kind: FailureRateLimit, Status: 429, RetryAfterInvalid: true}, wantKind: FailureRateLimit},
		{name: "emit error", emitted: true, emit: func(Event) error { return emitErr }, wantErr: emitErr},
		{name: "plain error is classified", failure: errors.New("something odd"), wantKind: FailureUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var calls atomic.Int32
			p := providerFunc(func(ctx context.Context, _ Request, emit func(Event) error) (Finish, error) {
				calls.Add(1)
				if tt.emitted {
					if err := emit(Event{Kind: EventText, Text: "x"}); err != nil {
						return Finish{}, err
					}
				}
				return Finish{}, tt.failure
			})
			emit := tt.emit
			if emit == nil {
				emit = discard
			}
			var rec retryRecorder
			_, err := StreamStep(context.Background(), p, Request{}, StepOptions{Clock: newFakeClock(), OnRetry: rec.record}, emit)
			if calls.Load() != 1 || len(rec.get()) != 0 {
				t.Fatalf("calls = %d, retries = %v; want one call and no retry", calls.Load(), rec.get())
			}
			if tt.wantErr != nil {
				if err != tt.wantErr {
					t.Fatalf("err = %v, want the emit error unchanged", err)
				}
				return
			}
			var f *Failure
			if !errors.As(err, &f) || f.Kind != tt.wantKind {
				t.Fatalf("err = %#v, want a *Failure of kind %s", err, tt.wantKind)
			}
		})
	}
}

func TestStreamStepMaxAttemptsAndRetryAfter(t *testing.T) {
	clock := newFakeClock()
	var calls atomic.Int32
	p := providerFunc(func(context.Context, Request, func(Event) error) (Finish, error) {
		calls.Add(1)
		return Finish{}, &Failure{Kind: FailureRateLimit, Status: 429, RetryAfter: 5 * time.Second, RetryAfterSet: true}
	})
	var rec retryRecorder
	res := runStep(context.Background(), p, StepOptions{Clock: clock, MaxAttempts: 3, OnRetry: rec.record, Jitter: func() float64 { return 0.9 }}, discard)
	for range 2 {
		// Retry-After is used as is, without jitter.
		clock.waitTimer(t, 5*time.Second)
		clock.Advance(4999 * time.Millisecond)
		if p := clock.pending(); len(p) == 0 || p[0] != time.Millisecond {
			t.Fatalf("retry fired early; pending timers %v", p)
		}
		clock.Advance(time.Millisecond)
	}
	r := waitResult(t, res)
	var f *Failure
	if !errors.As(r.err, &f) || f.Kind != FailureRateLimit {
		t.Fatalf("err = %v, want the last rate_limit failure", r.err)
	}
	if calls.Load() != 3 || len(rec.get()) != 4 {
		t.Fatalf("calls = %d, retry notices = %d; want 3 and 4", calls.Load(), len(rec.get()))
	}
}

func TestStreamStepCancelDuringRetryWait(t *testing.T) {
	clock := newFakeClock()
	ctx, cancel := context.WithCancelCause(context.Background())
	cause := errors.New("user pressed stop")
	p := providerFunc(func(context.Context, Request, func(Event) error) (Finish, error) {
		return Finish{}, &Failure{Kind: FailureNetwork}
	})
	res := runStep(ctx, p, StepOptions{Clock: clock, Jitter: func() float64 { return 0 }}, discard)
	clock.waitTimer(t, time.Second)
	cancel(cause)
	if r := waitResult(t, res); r.err != cause {
		t.Fatalf("err = %v, want the context's cause", r.err)
	}
}

func TestStreamStepCancelMidStream(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var calls atomic.Int32
	p := providerFunc(func(ctx context.Context, _ Request, emit func(Event) error) (Finish, error) {
		calls.Add(1)
		<-ctx.Done()
		return Finish{}, ctx.Err()
	})
	res := runStep(ctx, p, StepOptions{Clock: newFakeClock()}, discard)
	cancel()
	if r := waitResult(t, res); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", r.err)
	}
	if calls.Load() != 1 {
		t.Fatalf("calls = %d, want 1", calls.Load())
	}
}

// stallingProvider emits the given events, then blocks until its context
// ends; a later call succeeds at once when succeedAfter allows it.
func stallingProvider(events []Event, succeedFrom int32, calls *atomic.Int32) Provider {
	return providerFunc(func(ctx context.Context, _ Request, emit func(Event) error) (Finish, error) {
		if calls.Add(1) >= succeedFrom && succeedFrom > 0 {
			return Finish{Reason: FinishStop}, nil
		}
		for _, e := range events {
			if err := emit(e); err != nil {
				return Finish{}, err
			}
		}
		<-ctx.Done()
		return Finish{}, context.Cause(ctx)
	})
}

func TestStreamStepWatchdogFirstEvent(t *testing.T) {
	clock := newFakeClock()
	var calls atomic.Int32
	var rec retryRecorder
	p := stallingProvider(nil, 2, &calls)
	res := runStep(context.Background(), p, StepOptions{Clock: clock, OnRetry: rec.record, Jitter: func() float64 { return 0 }}, discard)
	clock.waitTimer(t, DefaultFirstEventTimeout)
	clock.Advance(DefaultFirstEventTimeout)
	clock.waitTimer(t, time.Second) // the retry of the timed-out attempt
	clock.Advance(time.Second)
	r := waitResult(t, res)
	if r.err != nil || calls.Load() != 2 {
		t.Fatalf("err = %v, calls = %d; want success on the second attempt", r.err, calls.Load())
	}
	if infos := rec.get(); len(infos) != 2 || infos[0].Reason != FailureTimeout {
		t.Fatalf("retry notices %+v, want a retry because of a timeout", infos)
	}
}

func TestStreamStepWatchdogIdleAfterOutput(t *testing.T) {
	clock := newFakeClock()
	var calls atomic.Int32
	p := stallingProvider([]Event{{Kind: EventText, Text: "partial"}}, 0, &calls)
	res := runStep(context.Background(), p, StepOptions{Clock: clock, IdleTimeout: 50 * time.Second}, discard)
	clock.waitTimer(t, 50*time.Second)
	clock.Advance(50 * time.Second)
	r := waitResult(t, res)
	var f *Failure
	if !errors.As(r.err, &f) || f.Kind != FailureTimeout {
		t.Fatalf("err = %v, want a timeout failure", r.err)
	}
	if calls.Load() != 1 {
		t.Fatalf("calls = %d: a timeout after output must not be retried", calls.Load())
	}
}

func TestStreamStepWatchdogPausedDuringEmit(t *testing.T) {
	clock := newFakeClock()
	entered, release := make(chan struct{}), make(chan struct{})
	p := providerFunc(func(ctx context.Context, _ Request, emit func(Event) error) (Finish, error) {
		if err := emit(Event{Kind: EventText, Text: "a"}); err != nil {
			return Finish{}, err
		}
		if err := ctx.Err(); err != nil {
			return Finish{}, context.Cause(ctx)
		}
		return Finish{Reason: FinishStop}, nil
	})
	res := runStep(context.Background(), p, StepOptions{Clock: clock}, func(Event) error {
		close(entered)
		<-release
		return nil
	})
	<-entered
	clock.waitTimer(t, DefaultFirstEventTimeout)
	clock.Advance(time.Hour) // far past both timeouts, but emit is running
	close(release)
	if r := waitResult(t, res); r.err != nil {
		t.Fatalf("err = %v: the watchdog fired while emit was running", r.err)
	}
}

// A Retry-After longer than the 32 s cap is not waited for: the step
// fails with the provider's failure at once.
func TestLongRetryAfterFailsTheStep(t *testing.T) {
	calls := 0
	p := providerFunc(func(context.Context, Request, func(Event) error) (Finish, error) {
		calls++
		return Finish{}, &Failure{Kind: FailureRateLimit, Status: 429, Message: "slow down", RetryAfter: 24 * time.Hour, RetryAfterSet: true}
	})
	_, err := StreamStep(context.Background(), p, Request{}, StepOptions{}, func(Event) error { return nil })
	var f *Failure
	if !errors.As(err, &f) || f.Kind != FailureRateLimit || calls != 1 {
		t.Fatalf("err %v after %d calls; want the rate-limit failure after 1", err, calls)
	}
}

// EventAlive keeps an attempt that has not produced output yet from timing
// out (a model reasoning before its first word), is never passed to emit,
// and an attempt that only sent it and then stalled is still retried.
func TestStreamStepAliveFeedsTheWatchdog(t *testing.T) {
	clock := newFakeClock()
	proceed := make(chan struct{})
	p := providerFunc(func(ctx context.Context, _ Request, emit func(Event) error) (Finish, error) {
		if err := emit(Event{Kind: EventAlive}); err != nil {
			return Finish{}, err
		}
		select {
		case <-proceed:
		case <-ctx.Done():
			return Finish{}, context.Cause(ctx)
		}
		if err := emit(Event{Kind: EventText, Text: "thought it through"}); err != nil {
			return Finish{}, err
		}
		return Finish{Reason: FinishStop}, nil
	})
	var events []Event
	res := runStep(context.Background(), p, StepOptions{Clock: clock, IdleTimeout: 50 * time.Second}, collectAll(&events))
	// The sign of life replaced the 30 s first-event bound with the idle
	// one: 45 s later the attempt is still alive.
	clock.waitTimer(t, 50*time.Second)
	clock.Advance(45 * time.Second)
	close(proceed)
	r := waitResult(t, res)
	if r.err != nil || len(events) != 1 || events[0].Kind != EventText {
		t.Fatalf("StreamStep = %v, events %+v; want the text alone", r.err, events)
	}

	// Alive, then silence: a timeout with no output, which is retried.
	clock = newFakeClock()
	var calls atomic.Int32
	stall := stallingProvider([]Event{{Kind: EventAlive}}, 2, &calls)
	var rec retryRecorder
	res = runStep(context.Background(), stall, StepOptions{Clock: clock, OnRetry: rec.record, IdleTimeout: 50 * time.Second, Jitter: func() float64 { return 0 }}, discard)
	clock.waitTimer(t, 50*time.Second)
	clock.Advance(50 * time.Second)
	clock.waitTimer(t, time.Second)
	clock.Advance(time.Second)
	if r := waitResult(t, res); r.err != nil || calls.Load() != 2 {
		t.Fatalf("err = %v after %d calls; want a retry and success", r.err, calls.Load())
	}
	if infos := rec.get(); len(infos) == 0 || infos[0].Reason != FailureTimeout {
		t.Fatalf("retry notices %+v", infos)
	}
}

// collectAll records every event emit receives.
func collectAll(events *[]Event) func(Event) error {
	return func(e Event) error {
		*events = append(*events, e)
		return nil
	}
}
