package lane

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// failAfter bounds every wait so that a broken gate fails the test instead of
// hanging it. It is never used to order events.
const failAfter = 10 * time.Second

func noop(context.Context, *Lease) error { return nil }

// newTestGate returns a Gate that reports every op put in a queue.
func newTestGate() (*Gate, <-chan string) {
	queued := make(chan string, 1024)
	g := New()
	g.testHookQueued = func(sessionID string) { queued <- sessionID }
	return g, queued
}

func waitQueued(t *testing.T, queued <-chan string, sessionID string) {
	t.Helper()
	select {
	case got := <-queued:
		if got != sessionID {
			t.Fatalf("queued op for session %q, want %q", got, sessionID)
		}
	case <-time.After(failAfter):
		t.Fatalf("timed out waiting for an op to queue on session %q", sessionID)
	}
}

func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(failAfter):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func recvErr(t *testing.T, ch <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(failAfter):
		t.Fatalf("timed out waiting for %s", what)
		return nil
	}
}

// goRun starts g.Run on a new goroutine and returns its result channel.
func goRun(g *Gate, ctx context.Context, sessionID string, op func(context.Context, *Lease) error) <-chan error {
	res := make(chan error, 1)
	go func() { res <- g.Run(ctx, sessionID, op) }()
	return res
}

// holdLane starts an op on sessionID that keeps the lane until release is
// called, and returns once the op is running.
func holdLane(t *testing.T, g *Gate, sessionID string) (release func() error) {
	t.Helper()
	started, proceed := make(chan struct{}), make(chan struct{})
	res := goRun(g, context.Background(), sessionID, func(context.Context, *Lease) error {
		close(started)
		<-proceed
		return nil
	})
	wait(t, started, "holding op to start")
	return func() error {
		close(proceed)
		return recvErr(t, res, "holding op to return")
	}
}

func assertReclaimed(t *testing.T, g *Gate) {
	t.Helper()
	if n := g.sessionCount(); n != 0 {
		t.Fatalf("sessionCount = %d after all work completed, want 0", n)
	}
}

func TestFIFOOrderOneSession(t *testing.T) {
	const n = 100
	g, queued := newTestGate()
	ctx := context.Background()
	release := holdLane(t, g, "s")

	var order []int // written only inside lane ops
	var inside atomic.Int32
	var overlapped atomic.Bool
	results := make([]<-chan error, n)
	for i := range n {
		results[i] = goRun(g, ctx, "s", func(context.Context, *Lease) error {
			if inside.Add(1) != 1 {
				overlapped.Store(true)
			}
			order = append(order, i)
			inside.Add(-1)
			return nil
		})
		waitQueued(t, queued, "s")
	}
	if err := release(); err != nil {
		t.Fatalf("holding op: %v", err)
	}
	for i, res := range results {
		if err := recvErr(t, res, fmt.Sprintf("op %d", i)); err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
	}
	if overlapped.Load() {
		t.Fatal("ops of one session overlapped")
	}
	want := make([]int, n)
	for i := range want {
		want[i] = i
	}
	if !slices.Equal(order, want) {
		t.Fatalf("order = %v, want arrival order", order)
	}
	assertReclaimed(t, g)
}

func TestDifferentSessionsRunConcurrently(t *testing.T) {
	g, queued := newTestGate()
	ctx := context.Background()
	aStarted, bStarted := make(chan struct{}), make(chan struct{})
	resA := goRun(g, ctx, "s1", func(context.Context, *Lease) error {
		close(aStarted)
		select {
		case <-bStarted:
			return nil
		case <-time.After(failAfter):
			return errors.New("op of session s2 never started while s1 was busy")
		}
	})
	wait(t, aStarted, "op A to start")
	// A queued op on s1 must not hold back s2 either.
	resA2 := goRun(g, ctx, "s1", noop)
	waitQueued(t, queued, "s1")

	if err := g.Run(ctx, "s2", func(context.Context, *Lease) error {
		close(bStarted)
		return nil
	}); err != nil {
		t.Fatalf("op B: %v", err)
	}
	if err := recvErr(t, resA, "op A"); err != nil {
		t.Fatalf("op A: %v", err)
	}
	if err := recvErr(t, resA2, "second op of s1"); err != nil {
		t.Fatalf("second op of s1: %v", err)
	}
	assertReclaimed(t, g)
}

func TestReentryRejected(t *testing.T) {
	g := New()
	other := New()
	ctx := context.Background()
	var ran atomic.Int32
	counted := func(context.Context, *Lease) error { ran.Add(1); return nil }

	var captured context.Context
	err := g.Run(ctx, "s", func(ctx context.Context, lease *Lease) error {
		captured = ctx
		if got := g.sessionCount(); got != 1 {
			return fmt.Errorf("sessionCount inside op = %d, want 1", got)
		}
		// A broken gate would deadlock here; the deadline turns that into
		// a failure.
		ctx, cancel := context.WithTimeout(ctx, failAfter)
		defer cancel()
		for _, sid := range []string{"s", "other"} {
			err := g.Run(ctx, sid, counted)
			if !errors.Is(err, ErrReentrant) {
				return fmt.Errorf("Run(%q) from inside a lane op = %v, want ErrReentrant", sid, err)
			}
			if !strings.Contains(err.Error(), "lease") {
				return fmt.Errorf("re-entry error %q does not mention the lease", err)
			}
		}
		// A lease of another Gate does not make this context re-entrant
		// for it.
		if err := other.Run(ctx, "s", counted); err != nil {
			return fmt.Errorf("Run on another gate: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := ran.Load(); got != 1 {
		t.Fatalf("%d ops ran, want only the one on the other gate", got)
	}
	// Once the op has returned, its context no longer carries an active
	// lease.
	if err := g.Run(captured, "s", counted); err != nil {
		t.Fatalf("Run with the context of a finished op: %v", err)
	}
	assertReclaimed(t, g)
	assertReclaimed(t, other)
}

func TestRunAdmittedChildKeepsLaneOpen(t *testing.T) {
	g, queued := newTestGate()
	ctx := context.Background()
	errOwner, errChild := errors.New("owner"), errors.New("child")
	childStarted, releaseChild, ownerReturning := make(chan struct{}), make(chan struct{}), make(chan struct{})
	childRes := make(chan error, 1)

	var logMu sync.Mutex
	var log []string
	record := func(s string) {
		logMu.Lock()
		defer logMu.Unlock()
		log = append(log, s)
	}

	resOwner := goRun(g, ctx, "s", func(ctx context.Context, lease *Lease) error {
		go func() {
			childRes <- g.RunAdmitted(ctx, "s", lease, func(ctx context.Context) error {
				close(childStarted)
				if err := g.Run(ctx, "s", noop); !errors.Is(err, ErrReentrant) {
					return fmt.Errorf("Run from a child = %v, want ErrReentrant", err)
				}
				<-releaseChild
				record("child-end")
				return errChild
			})
		}()
		<-childStarted
		close(ownerReturning)
		return errOwner
	})
	wait(t, ownerReturning, "owner op to return")

	// The owner has returned but its child is running: the lane is still
	// held, so the next op has to queue.
	resNext := goRun(g, ctx, "s", func(context.Context, *Lease) error {
		record("next-start")
		return nil
	})
	waitQueued(t, queued, "s")
	select {
	case err := <-resOwner:
		t.Fatalf("owner's Run returned (%v) while its child was running", err)
	default:
	}

	close(releaseChild)
	if err := recvErr(t, childRes, "child"); err != errChild {
		t.Fatalf("RunAdmitted = %v, want the child's error", err)
	}
	err := recvErr(t, resOwner, "owner")
	if !errors.Is(err, errOwner) || !errors.Is(err, errChild) {
		t.Fatalf("owner's Run = %v, want both the owner's and the child's error", err)
	}
	if got, want := err.Error(), "owner\nchild"; got != want {
		t.Fatalf("owner's Run error text = %q, want %q", got, want)
	}
	if err := recvErr(t, resNext, "next op"); err != nil {
		t.Fatalf("next op: %v", err)
	}
	if want := []string{"child-end", "next-start"}; !slices.Equal(log, want) {
		t.Fatalf("event order = %v, want %v", log, want)
	}
	assertReclaimed(t, g)
}

type sliceError []string

func (e sliceError) Error() string { return strings.Join(e, ",") }

func TestRunErrorCombination(t *testing.T) {
	g := New()
	ctx := context.Background()
	errSame := errors.New("same")

	t.Run("same error reported once", func(t *testing.T) {
		err := g.Run(ctx, "s", func(ctx context.Context, lease *Lease) error {
			if err := g.RunAdmitted(ctx, "s", lease, func(context.Context) error { return errSame }); err != errSame {
				return fmt.Errorf("RunAdmitted = %v", err)
			}
			return errSame
		})
		if err != errSame {
			t.Fatalf("Run = %v, want exactly the shared error", err)
		}
	})
	t.Run("child error alone", func(t *testing.T) {
		err := g.Run(ctx, "s", func(ctx context.Context, lease *Lease) error {
			_ = g.RunAdmitted(ctx, "s", lease, func(context.Context) error { return errSame })
			return nil
		})
		if err != errSame {
			t.Fatalf("Run = %v, want exactly the child's error", err)
		}
	})
	t.Run("non-comparable errors", func(t *testing.T) {
		err := g.Run(ctx, "s", func(ctx context.Context, lease *Lease) error {
			_ = g.RunAdmitted(ctx, "s", lease, func(context.Context) error { return sliceError{"b"} })
			return sliceError{"a"}
		})
		if err == nil || err.Error() != "a\nb" {
			t.Fatalf("Run = %v, want both errors joined", err)
		}
	})
	t.Run("no error", func(t *testing.T) {
		err := g.Run(ctx, "s", func(ctx context.Context, lease *Lease) error {
			return g.RunAdmitted(ctx, "s", lease, func(context.Context) error { return nil })
		})
		if err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
	})
	assertReclaimed(t, g)
}

func TestRunAdmittedRejectsInvalidLeases(t *testing.T) {
	g := New()
	other := New()
	ctx := context.Background()
	var ran atomic.Int32
	child := func(context.Context) error { ran.Add(1); return nil }
	expectInvalid := func(what string, err error) error {
		if !errors.Is(err, ErrInvalidLease) {
			return fmt.Errorf("%s: RunAdmitted = %v, want ErrInvalidLease", what, err)
		}
		return nil
	}

	// A lease of session s2 that stays active while s1's op runs.
	s2Lease := make(chan *Lease, 1)
	releaseS2 := make(chan struct{})
	resS2 := goRun(g, ctx, "s2", func(_ context.Context, lease *Lease) error {
		s2Lease <- lease
		<-releaseS2
		return nil
	})
	var l2 *Lease
	select {
	case l2 = <-s2Lease:
	case <-time.After(failAfter):
		t.Fatal("timed out waiting for the s2 op")
	}
	if got := l2.SessionID(); got != "s2" {
		t.Fatalf("SessionID = %q, want s2", got)
	}

	var stale *Lease
	err := g.Run(ctx, "s1", func(ctx context.Context, lease *Lease) error {
		stale = lease
		return errors.Join(
			expectInvalid("other session", g.RunAdmitted(ctx, "s2", lease, child)),
			expectInvalid("nil lease", g.RunAdmitted(ctx, "s1", nil, child)),
			expectInvalid("zero lease", g.RunAdmitted(ctx, "s1", &Lease{}, child)),
			expectInvalid("nested across sessions", g.RunAdmitted(ctx, "s2", l2, child)),
		)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := expectInvalid("stale lease", g.RunAdmitted(ctx, "s1", stale, child)); err != nil {
		t.Fatal(err)
	}
	// A lease of another Gate is foreign even while its owner is active.
	err = other.Run(ctx, "s1", func(ctx context.Context, lease *Lease) error {
		return expectInvalid("foreign gate", g.RunAdmitted(context.Background(), "s1", lease, child))
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := ran.Load(); got != 0 {
		t.Fatalf("%d rejected children ran", got)
	}
	// Outside any lane op, the valid s2 lease admits a child.
	if err := g.RunAdmitted(ctx, "s2", l2, child); err != nil {
		t.Fatalf("RunAdmitted with the active s2 lease: %v", err)
	}
	close(releaseS2)
	if err := recvErr(t, resS2, "s2 op"); err != nil {
		t.Fatalf("s2 op: %v", err)
	}
	if got := ran.Load(); got != 1 {
		t.Fatalf("%d children ran, want 1", got)
	}
	assertReclaimed(t, g)
	assertReclaimed(t, other)
}

func TestEnqueueDetachedFromInsideLaneOp(t *testing.T) {
	g, queued := newTestGate()
	ctx := context.Background()
	errC := errors.New("detached")
	aStarted, proceed := make(chan struct{}), make(chan struct{})
	var order []string // written only inside lane ops
	var resC <-chan error

	resA := goRun(g, ctx, "s", func(context.Context, *Lease) error {
		order = append(order, "A")
		close(aStarted)
		<-proceed
		resC = g.EnqueueDetached("s", func(ctx context.Context, lease *Lease) error {
			order = append(order, "C")
			if got := lease.SessionID(); got != "s" {
				return fmt.Errorf("detached lease SessionID = %q", got)
			}
			if err := g.Run(ctx, "s", noop); !errors.Is(err, ErrReentrant) {
				return fmt.Errorf("Run from a detached op = %v, want ErrReentrant", err)
			}
			return errC
		})
		order = append(order, "A-end")
		return nil
	})
	wait(t, aStarted, "op A to start")
	resB := goRun(g, ctx, "s", func(context.Context, *Lease) error {
		order = append(order, "B")
		return nil
	})
	waitQueued(t, queued, "s")
	close(proceed)
	waitQueued(t, queued, "s")

	if err := recvErr(t, resA, "op A"); err != nil {
		t.Fatalf("op A: %v", err)
	}
	if err := recvErr(t, resB, "op B"); err != nil {
		t.Fatalf("op B: %v", err)
	}
	if err := recvErr(t, resC, "detached op"); err != errC {
		t.Fatalf("detached result = %v, want %v", err, errC)
	}
	if _, ok := <-resC; ok {
		t.Fatal("detached result channel delivered a second value")
	}
	if want := []string{"A", "A-end", "B", "C"}; !slices.Equal(order, want) {
		t.Fatalf("order = %v, want %v", order, want)
	}
	assertReclaimed(t, g)
}

func TestEnqueueDetachedOnIdleSession(t *testing.T) {
	g := New()
	res := g.EnqueueDetached("s", func(context.Context, *Lease) error { return nil })
	if err := recvErr(t, res, "detached op"); err != nil {
		t.Fatalf("detached op: %v", err)
	}
	assertReclaimed(t, g)
}

func TestCancelWhileQueued(t *testing.T) {
	const n = 5
	g, queued := newTestGate()
	release := holdLane(t, g, "s")

	var order []int // written only inside lane ops
	var cancelledRan atomic.Bool
	results := make([]<-chan error, n)
	cancels := make([]context.CancelFunc, n)
	for i := range n {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cancels[i] = cancel
		results[i] = goRun(g, ctx, "s", func(context.Context, *Lease) error {
			if i%2 == 0 {
				cancelledRan.Store(true)
			}
			order = append(order, i)
			return nil
		})
		waitQueued(t, queued, "s")
	}
	// Cancel the head, a middle and the tail of the queue.
	for i := 0; i < n; i += 2 {
		cancels[i]()
		if err := recvErr(t, results[i], fmt.Sprintf("cancelled op %d", i)); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled op %d: Run = %v, want context.Canceled", i, err)
		}
	}
	if err := release(); err != nil {
		t.Fatalf("holding op: %v", err)
	}
	for i := 1; i < n; i += 2 {
		if err := recvErr(t, results[i], fmt.Sprintf("op %d", i)); err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
	}
	if cancelledRan.Load() {
		t.Fatal("a cancelled op ran")
	}
	if want := []int{1, 3}; !slices.Equal(order, want) {
		t.Fatalf("order = %v, want %v", order, want)
	}
	assertReclaimed(t, g)
}

func TestCancelledBeforeRun(t *testing.T) {
	g := New()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ran := false
	err := g.Run(ctx, "s", func(context.Context, *Lease) error { ran = true; return nil })
	if !errors.Is(err, context.Canceled) || ran {
		t.Fatalf("Run with a cancelled context = %v (ran %v), want context.Canceled without running", err, ran)
	}
	assertReclaimed(t, g)
}

func TestClose(t *testing.T) {
	g, queued := newTestGate()
	ctx := context.Background()
	aStarted, releaseA := make(chan struct{}), make(chan struct{})
	var queuedRan atomic.Int32

	resA := goRun(g, ctx, "s", func(ctx context.Context, lease *Lease) error {
		close(aStarted)
		<-releaseA
		// The running op can still admit children after Close.
		return g.RunAdmitted(ctx, "s", lease, func(context.Context) error { return nil })
	})
	wait(t, aStarted, "op A to start")
	resB := goRun(g, ctx, "s", func(context.Context, *Lease) error { queuedRan.Add(1); return nil })
	waitQueued(t, queued, "s")
	resC := g.EnqueueDetached("s", func(context.Context, *Lease) error { queuedRan.Add(1); return nil })
	waitQueued(t, queued, "s")

	dStarted := make(chan struct{})
	resD := g.EnqueueDetached("d", func(ctx context.Context, _ *Lease) error {
		close(dStarted)
		<-ctx.Done()
		return ctx.Err()
	})
	wait(t, dStarted, "detached op D to start")

	closeRes := make(chan error, 1)
	go func() { closeRes <- g.Close(ctx) }()

	if err := recvErr(t, resB, "queued op B"); !errors.Is(err, ErrClosed) {
		t.Fatalf("queued Run = %v, want ErrClosed", err)
	}
	if err := recvErr(t, resC, "queued detached op C"); !errors.Is(err, ErrClosed) {
		t.Fatalf("queued detached op = %v, want ErrClosed", err)
	}
	if err := recvErr(t, resD, "running detached op D"); !errors.Is(err, context.Canceled) {
		t.Fatalf("running detached op = %v, want its context cancelled by Close", err)
	}

	// Op A is still running: a Close bounded by a done context gives up.
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.Close(done); !errors.Is(err, context.Canceled) {
		t.Fatalf("Close with a done context while an op runs = %v, want context.Canceled", err)
	}

	if err := g.Run(ctx, "s", noop); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run after Close = %v, want ErrClosed", err)
	}
	if err := g.Run(ctx, "new", noop); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run after Close = %v, want ErrClosed", err)
	}
	resE := g.EnqueueDetached("new", noop)
	if err := recvErr(t, resE, "detached op after Close"); !errors.Is(err, ErrClosed) {
		t.Fatalf("EnqueueDetached after Close = %v, want ErrClosed", err)
	}
	if _, ok := <-resE; ok {
		t.Fatal("detached result channel delivered a second value")
	}

	close(releaseA)
	if err := recvErr(t, resA, "op A"); err != nil {
		t.Fatalf("running op A: %v", err)
	}
	if err := recvErr(t, closeRes, "Close"); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got := queuedRan.Load(); got != 0 {
		t.Fatalf("%d ops queued before Close ran", got)
	}
	if err := g.Close(done); err != nil {
		t.Fatalf("second Close after everything finished = %v, want nil", err)
	}
	assertReclaimed(t, g)
}

func TestCloseIdleGate(t *testing.T) {
	g := New()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.Close(done); err != nil {
		t.Fatalf("Close of an idle gate = %v, want nil", err)
	}
	if err := g.Run(context.Background(), "s", noop); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run after Close = %v, want ErrClosed", err)
	}
}

// runRecovering runs g.Run and returns the value of a panic raised by it.
func runRecovering(g *Gate, sessionID string, op func(context.Context, *Lease) error) (recovered any) {
	defer func() { recovered = recover() }()
	_ = g.Run(context.Background(), sessionID, op)
	return nil
}

func TestPanicPropagatesAndReleasesLane(t *testing.T) {
	g := New()
	got := runRecovering(g, "s", func(context.Context, *Lease) error { panic("boom") })
	if got != "boom" {
		t.Fatalf("recovered %v, want the op's panic value", got)
	}
	assertReclaimed(t, g)
	if err := g.Run(context.Background(), "s", noop); err != nil {
		t.Fatalf("Run after a recovered panic: %v", err)
	}
	assertReclaimed(t, g)
}

func TestPanicWithRunningChildKeepsLaneUntilChildFinishes(t *testing.T) {
	g, queued := newTestGate()
	childStarted, releaseChild := make(chan struct{}), make(chan struct{})
	childRes := make(chan error, 1)

	got := runRecovering(g, "s", func(ctx context.Context, lease *Lease) error {
		go func() {
			childRes <- g.RunAdmitted(ctx, "s", lease, func(context.Context) error {
				close(childStarted)
				<-releaseChild
				return nil
			})
		}()
		<-childStarted
		panic("boom")
	})
	if got != "boom" {
		t.Fatalf("recovered %v, want the op's panic value", got)
	}
	resNext := goRun(g, context.Background(), "s", noop)
	waitQueued(t, queued, "s")
	close(releaseChild)
	if err := recvErr(t, childRes, "child"); err != nil {
		t.Fatalf("child: %v", err)
	}
	if err := recvErr(t, resNext, "next op"); err != nil {
		t.Fatalf("next op: %v", err)
	}
	assertReclaimed(t, g)
}

func TestPanicInChildIsNotRecorded(t *testing.T) {
	g := New()
	err := g.Run(context.Background(), "s", func(ctx context.Context, lease *Lease) error {
		got := func() (recovered any) {
			defer func() { recovered = recover() }()
			_ = g.RunAdmitted(ctx, "s", lease, func(context.Context) error { panic("child boom") })
			return nil
		}()
		if got != "child boom" {
			return fmt.Errorf("recovered %v, want the child's panic value", got)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	assertReclaimed(t, g)
}

func TestManySessionsReclaimed(t *testing.T) {
	g := New()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		wg.Go(func() {
			sid := fmt.Sprintf("s%d", i%16)
			errs <- g.Run(ctx, sid, func(context.Context, *Lease) error { return nil })
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	assertReclaimed(t, g)
}

func BenchmarkUncontendedRun(b *testing.B) {
	g := New()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := g.Run(ctx, "s", noop); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkContendedRun(b *testing.B) {
	const workers = 8
	g := New()
	ctx := context.Background()
	counter := 0 // guarded by the lane
	op := func(context.Context, *Lease) error {
		counter++
		return nil
	}
	errs := make(chan error, workers)
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for w := range workers {
		n := b.N / workers
		if w < b.N%workers {
			n++
		}
		wg.Go(func() {
			for range n {
				if err := g.Run(ctx, "s", op); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	if counter != b.N {
		b.Fatalf("counter = %d, want %d", counter, b.N)
	}
}

// sessionCount returns the number of Sessions with per-Session state; it is
// zero whenever no op is running or queued.
func (g *Gate) sessionCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.sessions)
}
