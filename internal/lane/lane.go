// Package lane implements the session lane: a per-Session FIFO admission
// gate. Almost every domain mutation of a Session runs inside its lane.
//
// Guarantees:
//
//   - Ops of one Session run strictly one at a time, in arrival order.
//     Ops of different Sessions never block each other.
//   - An op runs with a [Lease], which is also carried by the context passed
//     to it. Calling [Gate.Run] with a context that carries an active lease of
//     the same Gate (for any Session) fails immediately with [ErrReentrant]
//     instead of deadlocking; nested work for the same Session reuses the
//     lease through [Gate.RunAdmitted].
//   - A lane op stays open (the next queued op does not start and its Run
//     does not return) until every child admitted through its lease has
//     finished. Errors of the op and its children are reported together.
//   - [Gate.EnqueueDetached] queues background work after everything
//     currently queued, and may be called from inside a lane op.
//
// Per-Session state exists only while the Session has a running or queued
// op; it is removed as soon as the lane becomes idle. The lane is handed from
// one op to the next directly by the op that releases it; no goroutine waits
// on an idle Session.
//
// Panics: a panic (or runtime.Goexit) in an op is not recovered; it
// propagates like any other Go panic. If the panic is recovered further up
// the caller's stack, the gate stays consistent: the lane is released once
// the op's admitted children have finished (by a goroutine owned by the
// Gate if children are still running). A panic in an op started by
// EnqueueDetached happens on a Gate-owned goroutine and therefore terminates
// the process. A panic in a child op of RunAdmitted propagates to the
// caller of RunAdmitted; the child then counts as finished without error.
package lane

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
)

var (
	// ErrReentrant is returned by Run when its context already carries an
	// active lease of the same Gate.
	ErrReentrant = errors.New("lane: cannot run a Session lane op from inside an active lane op; reuse the lease with RunAdmitted")
	// ErrInvalidLease is returned by RunAdmitted when the lease cannot admit
	// the op: it is nil, was not issued by this Gate, belongs to another
	// Session, or its owning op has already returned.
	ErrInvalidLease = errors.New("lane: invalid Session lease")
	// ErrClosed is returned for ops submitted after Close, and for queued ops
	// that had not started when Close was called.
	ErrClosed = errors.New("lane: gate closed")
)

// Gate is a set of per-Session FIFO lanes. The zero value is not usable; use
// New.
type Gate struct {
	mu       sync.Mutex
	sessions map[string]*session
	running  int // ops holding a lane, plus detached runners not yet finished
	closed   bool
	drained  chan struct{} // created by Close; closed when running reaches 0

	// detachedCtx is the context of ops started by EnqueueDetached; Close
	// cancels it.
	detachedCtx    context.Context
	cancelDetached context.CancelFunc

	// testHookQueued, if set, is called (without locks held) each time an
	// op is put in a Session's queue to wait for its turn.
	testHookQueued func(sessionID string)
}

// New returns an open Gate.
func New() *Gate {
	ctx, cancel := context.WithCancel(context.Background())
	return &Gate{
		sessions:       make(map[string]*session),
		detachedCtx:    ctx,
		cancelDetached: cancel,
	}
}

// session is the state of one Session's lane. It is present in
// Gate.sessions exactly while an op holds the lane; waiting ops form an
// intrusive FIFO list.
type session struct {
	id         string
	head, tail *waiter
}

type waiterState uint8

const (
	waiting  waiterState = iota
	granted              // the waiter now holds the lane
	rejected             // the gate was closed before the waiter's turn
)

// waiter is an op waiting for its turn in a Session's lane.
type waiter struct {
	prev, next *waiter
	state      waiterState // guarded by Gate.mu

	// Run waiters: ready is closed when state leaves waiting.
	ready chan struct{}

	// Detached waiters: op is started on a new goroutine when granted, and
	// its result is delivered on result.
	op     func(context.Context, *Lease) error
	result chan error
}

func (s *session) push(w *waiter) {
	w.prev = s.tail
	if s.tail != nil {
		s.tail.next = w
	} else {
		s.head = w
	}
	s.tail = w
}

func (s *session) remove(w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		s.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		s.tail = w.prev
	}
	w.prev, w.next = nil, nil
}

// Lease proves that its holder is inside one Session's lane op. It is valid
// for RunAdmitted until the owning op returns.
type Lease struct {
	g         *Gate
	sessionID string

	mu        sync.Mutex
	accepting bool          // RunAdmitted may still register children
	active    bool          // the lane op (including children) has not finished
	pending   int           // children still running
	idle      chan struct{} // created with the first child; closed when !accepting && pending == 0
	childErrs []error       // child results in registration order
}

// SessionID returns the Session whose lane the lease belongs to.
func (l *Lease) SessionID() string {
	if l == nil {
		return ""
	}
	return l.sessionID
}

func (l *Lease) isActive() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.active
}

// stopAccepting refuses further children and returns a channel that is
// closed once all registered children have finished, or nil if none is
// running.
func (l *Lease) stopAccepting() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.accepting = false
	if l.pending == 0 {
		return nil
	}
	return l.idle
}

// deactivate marks the lane op as finished and returns the children's errors.
func (l *Lease) deactivate() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.active = false
	return l.childErrs
}

// leaseKey is the context key of a Gate's lease; keys are per Gate so that
// leases of distinct Gates do not interfere.
type leaseKey struct{ g *Gate }

func (g *Gate) leaseFrom(ctx context.Context) *Lease {
	l, _ := ctx.Value(leaseKey{g}).(*Lease)
	return l
}

// Run runs op in sessionID's lane and returns once op and all children it
// admitted through its lease have finished.
//
// Ops of one Session run strictly one at a time in arrival order; different
// Sessions never block each other. The ctx passed to op carries the lease.
// If ctx already carries an active lease of this Gate, Run returns
// ErrReentrant immediately. If ctx is done before op's turn comes, Run
// returns ctx.Err() and op never runs. After Close, or if Close is called
// while op waits, Run returns ErrClosed.
//
// The result is op's error; if op and its children failed with several
// distinct errors, they are combined with errors.Join (op's error first,
// then the children's in the order they were admitted).
func (g *Gate) Run(ctx context.Context, sessionID string, op func(ctx context.Context, lease *Lease) error) error {
	if l := g.leaseFrom(ctx); l != nil && l.isActive() {
		return ErrReentrant
	}
	if err := ctx.Err(); err != nil {
		return err
	}

	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return ErrClosed
	}
	s, busy := g.sessions[sessionID]
	if !busy {
		s = &session{id: sessionID}
		g.sessions[sessionID] = s
		g.running++
		g.mu.Unlock()
		return g.execute(ctx, s, op, nil)
	}
	w := &waiter{ready: make(chan struct{})}
	s.push(w)
	g.mu.Unlock()
	if hook := g.testHookQueued; hook != nil {
		hook(sessionID)
	}

	select {
	case <-w.ready:
	case <-ctx.Done():
		g.mu.Lock()
		switch w.state {
		case waiting:
			s.remove(w)
			g.mu.Unlock()
			return ctx.Err()
		case granted:
			// The lane was handed over while ctx was being cancelled: pass
			// it on without running op.
			g.releaseLocked(s)
			g.finishLocked()
			g.mu.Unlock()
			return ctx.Err()
		}
		g.mu.Unlock()
		return ErrClosed
	}
	// w.state was last written before ready was closed.
	if w.state == rejected {
		return ErrClosed
	}
	return g.execute(ctx, s, op, nil)
}

// RunAdmitted runs op, on the calling goroutine, as a child of the lane op
// that owns lease. It does not wait for the lane: it runs concurrently with
// the owner. The owning op is not finished (the next queued op does not
// start and the owner's Run does not return) until op has returned; op's
// error is also reported by the owner's Run.
//
// The ctx passed to op carries the lease. RunAdmitted fails with an error
// matching ErrInvalidLease, without running op, if lease is nil or was not
// issued by this Gate, belongs to a Session other than sessionID, or its
// owner op has already returned; and if ctx carries an active lease of this
// Gate for another Session.
func (g *Gate) RunAdmitted(ctx context.Context, sessionID string, lease *Lease, op func(ctx context.Context) error) error {
	switch {
	case lease == nil:
		return fmt.Errorf("%w: no lease", ErrInvalidLease)
	case lease.g != g:
		return fmt.Errorf("%w: lease was not issued by this gate", ErrInvalidLease)
	case lease.sessionID != sessionID:
		return fmt.Errorf("%w: lease does not match the Session", ErrInvalidLease)
	}
	if inherited := g.leaseFrom(ctx); inherited != nil && inherited.sessionID != sessionID && inherited.isActive() {
		return fmt.Errorf("%w: cannot nest Session admission across Sessions", ErrInvalidLease)
	}

	lease.mu.Lock()
	if !lease.accepting {
		lease.mu.Unlock()
		return fmt.Errorf("%w: lease no longer accepts children", ErrInvalidLease)
	}
	if lease.idle == nil {
		lease.idle = make(chan struct{})
	}
	lease.pending++
	slot := len(lease.childErrs)
	lease.childErrs = append(lease.childErrs, nil)
	lease.mu.Unlock()

	var err error
	defer func() {
		lease.mu.Lock()
		defer lease.mu.Unlock()
		lease.childErrs[slot] = err
		lease.pending--
		if lease.pending == 0 && !lease.accepting {
			close(lease.idle)
		}
	}()
	err = op(context.WithValue(ctx, leaseKey{g}, lease))
	return err
}

// EnqueueDetached queues op in sessionID's lane after everything currently
// queued and returns without waiting; it may be called from inside a lane
// op. op runs on a goroutine owned by the Gate with a context that carries
// its lease and is cancelled by Close. The returned channel receives op's
// result (as Run would report it) once and is then closed; it receives
// ErrClosed if the Gate is closed before op starts.
func (g *Gate) EnqueueDetached(sessionID string, op func(ctx context.Context, lease *Lease) error) <-chan error {
	result := make(chan error, 1)
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		result <- ErrClosed
		close(result)
		return result
	}
	w := &waiter{op: op, result: result}
	s, busy := g.sessions[sessionID]
	if !busy {
		s = &session{id: sessionID}
		g.sessions[sessionID] = s
		g.grantLocked(s, w)
		g.mu.Unlock()
		return result
	}
	s.push(w)
	g.mu.Unlock()
	if hook := g.testHookQueued; hook != nil {
		hook(sessionID)
	}
	return result
}

// Close makes every later Run and EnqueueDetached fail with ErrClosed,
// rejects queued ops that have not started (their Run returns ErrClosed,
// detached ones report ErrClosed), cancels the context of detached ops, and
// waits until all running ops and their children have returned or ctx is
// done, in which case it returns ctx.Err(). Close may be called more than
// once.
func (g *Gate) Close(ctx context.Context) error {
	g.mu.Lock()
	if !g.closed {
		g.closed = true
		g.drained = make(chan struct{})
		for _, s := range g.sessions {
			for w := s.head; w != nil; {
				next := w.next
				w.prev, w.next = nil, nil
				w.state = rejected
				if w.result != nil {
					w.result <- ErrClosed
					close(w.result)
				} else {
					close(w.ready)
				}
				w = next
			}
			s.head, s.tail = nil, nil
		}
		if g.running == 0 {
			close(g.drained)
		}
		g.cancelDetached()
	}
	drained := g.drained
	g.mu.Unlock()

	select {
	case <-drained:
		return nil
	default:
	}
	select {
	case <-drained:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// grantLocked hands s's lane to w. g.mu must be held.
func (g *Gate) grantLocked(s *session, w *waiter) {
	w.state = granted
	g.running++
	if w.result != nil {
		go g.runDetached(s, w)
		return
	}
	close(w.ready)
}

// releaseLocked hands s's lane to the next queued op, or removes s if its
// queue is empty. g.mu must be held.
func (g *Gate) releaseLocked(s *session) {
	w := s.head
	if w == nil {
		delete(g.sessions, s.id)
		return
	}
	s.remove(w)
	g.grantLocked(s, w)
}

// finishLocked records that an op accounted in g.running has finished.
// g.mu must be held.
func (g *Gate) finishLocked() {
	g.running--
	if g.running == 0 && g.closed {
		close(g.drained)
	}
}

func (g *Gate) runDetached(s *session, w *waiter) {
	g.execute(g.detachedCtx, s, w.op, w.result)
}

// execute runs op while holding s's lane, waits for its children, releases
// the lane and returns the combined error. If result is not nil the error is
// also delivered on it before the op is accounted as finished.
func (g *Gate) execute(ctx context.Context, s *session, op func(context.Context, *Lease) error, result chan<- error) error {
	l := &Lease{g: g, sessionID: s.id, accepting: true, active: true}
	returned := false
	defer func() {
		if !returned {
			g.abandon(s, l)
		}
	}()
	opErr := op(context.WithValue(ctx, leaseKey{g}, l), l)
	returned = true

	if idle := l.stopAccepting(); idle != nil {
		<-idle
	}
	err := combine(opErr, l.deactivate())

	g.mu.Lock()
	g.releaseLocked(s)
	g.mu.Unlock()
	if result != nil {
		result <- err
		close(result)
	}
	g.mu.Lock()
	g.finishLocked()
	g.mu.Unlock()
	return err
}

// abandon finishes a lane op whose op panicked or called runtime.Goexit:
// the lane is released once the op's children have finished, without
// blocking the panicking goroutine on them.
func (g *Gate) abandon(s *session, l *Lease) {
	finish := func() {
		l.deactivate()
		g.mu.Lock()
		g.releaseLocked(s)
		g.finishLocked()
		g.mu.Unlock()
	}
	idle := l.stopAccepting()
	if idle == nil {
		finish()
		return
	}
	go func() {
		<-idle
		finish()
	}()
}

// combine returns nil, the single distinct error, or errors.Join of all
// distinct errors among opErr and childErrs (in that order).
func combine(opErr error, childErrs []error) error {
	var errs []error
	add := func(err error) {
		if err == nil {
			return
		}
		for _, e := range errs {
			if sameError(e, err) {
				return
			}
		}
		errs = append(errs, err)
	}
	add(opErr)
	for _, err := range childErrs {
		add(err)
	}
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	default:
		return errors.Join(errs...)
	}
}

// sameError reports whether a and b are the same error value, without
// panicking on errors whose dynamic type is not comparable.
func sameError(a, b error) bool {
	if reflect.TypeOf(a) != reflect.TypeOf(b) {
		return false
	}
	if !reflect.ValueOf(a).Comparable() {
		return false
	}
	return a == b
}
