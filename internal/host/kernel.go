package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/maka-agent/maka/internal/control"
	"github.com/maka-agent/maka/internal/storageroot"
	"github.com/maka-agent/maka/internal/transport"
	"github.com/maka-agent/maka/protocol"
)

// Kernel timing defaults (host-client-storage.md §D.1).
const (
	DefaultIdleGrace        = 30 * time.Second
	DefaultHandshakeTimeout = 5 * time.Second
	DefaultShutdownGrace    = 10 * time.Second
	ShutdownHandshakeGrace  = time.Second
	ShutdownOperationGrace  = time.Second
	MaxTimerDuration        = 120 * time.Second
)

// ErrProcessTerminationRequired is the close error when shutdown did not
// finish within ShutdownGrace: the process must exit (code 1) and let the
// operating system release the owner lock.
var ErrProcessTerminationRequired = errors.New("process_termination_required: shutdown exceeded its grace period")

// ErrClosed is returned by Start when the host was closed during startup.
var ErrClosed = errors.New("runtime host closed")

// Composition is the domain behind the kernel: its operation handlers, the
// subscription owner, and the hooks of the kernel lifecycle.
type Composition interface {
	Handlers() Handlers
	// Continuity returns the subscription owner, or nil.
	Continuity() ConnectionObserver
	// Recover runs before the host becomes ready.
	Recover(ctx context.Context) error
	// BeginDrain is called once when shutdown is requested.
	BeginDrain()
	// Close releases the composition during shutdown.
	Close(ctx context.Context) error
}

// CompositionFactory builds the composition once the host is listening.
type CompositionFactory func(ctx context.Context, k *Kernel) (Composition, error)

// Options configure a Kernel.
type Options struct {
	Owner *storageroot.Owner
	// IdleGrace is how long a truly idle ready host waits before it exits;
	// 0 means DefaultIdleGrace (use a tiny duration to exit promptly).
	// DisableIdleExit turns idle exit off; incompatible clients are then
	// told blocked_by_residency, since waiting would never end.
	IdleGrace        time.Duration
	DisableIdleExit  bool
	HandshakeTimeout time.Duration // 0 means DefaultHandshakeTimeout
	ShutdownGrace    time.Duration // 0 means DefaultShutdownGrace
	// CompositionFactory is optional; without it every domain operation
	// answers operation_unavailable.
	CompositionFactory CompositionFactory
	// RefusePeer, if set, is asked about every accepted connection whose
	// peer passed the uid check, before a byte of it is read; a non-nil
	// error closes the connection at once (and is logged). It runs on the
	// connection's goroutine.
	RefusePeer func(Peer) error
	// OnQuiet, if set, is called once each time the ready host has had no
	// operation in flight and no residency (no running work; connections
	// may stay open) for QuietAfter (it comes within a fifth of QuietAfter
	// more), on a goroutine of its own. The host uses it to return the
	// memory its work left free. It is not called once shutdown begins,
	// and the shutdown waits for a call that runs.
	OnQuiet    func()
	QuietAfter time.Duration // 0 means DefaultQuietAfter
	Logger     *slog.Logger
}

// DefaultQuietAfter is the QuietAfter of a zero Options.
const DefaultQuietAfter = 5 * time.Second

// Kernel is a running Runtime Host.
//
// Its mutable state is guarded by one mutex, mu: the registries of
// connections (handshaking and accepted), the in-flight counters, the
// lifecycle state, the timers and the handler table. The one atomic is
// inShutdown, so that a handshake can refuse a draining host without the
// lock; it is only ever set with mu held. Everything else that can be
// derived (the connection count, whether the idle timer is armed) is read
// from the state it derives from, under mu.
type Kernel struct {
	opts      Options
	epochJSON []byte // the host epoch as a JSON string
	// statusInline is serveStatus as an inlineHandler, made once.
	statusInline inlineHandler
	log          *slog.Logger
	owner        *storageroot.Owner
	epoch        string
	createdAt    string
	endpoint     *control.Endpoint
	listener     *net.UnixListener
	baseCtx      context.Context
	cancel       context.CancelFunc

	// inShutdown is set once a drain is requested (under mu); it never
	// goes back.
	inShutdown atomic.Bool

	pubMu sync.Mutex // serialises registration rewrites (file I/O, outside mu)

	mu             sync.Mutex
	handlers       Handlers
	comp           Composition
	state          protocol.HostState
	committed      bool
	compDrainBegun bool
	activeConn     map[*Conn]struct{}
	handshaking    map[*transport.Conn]struct{}
	inFlight       inFlight // changed only through updateInFlight
	ownerChecked   time.Time
	idleTimer      *time.Timer // armed exactly while non-nil
	deadlineTimer  *time.Timer
	deadlineFired  bool
	changed        chan struct{} // closed and replaced on a change while watched
	watched        bool          // someone waits on changed
	startupDone    chan struct{}

	// The quiet timer (OnQuiet): armed when the host becomes quiet and
	// left running while work comes and goes; it expires once per slice
	// (QuietAfter/quietSlices). activity counts the in-flight changes, so
	// that at each expiry it can tell whether the host stayed quiet
	// through the slice (activity == activityArmed); quietRun counts the
	// quiet slices in a row, and OnQuiet is called at quietSlices of them.
	// quietCalls tracks a running OnQuiet, which the shutdown waits for.
	quietTimer    *time.Timer
	quietArmed    bool
	activity      uint64
	activityArmed uint64
	quietRun      int
	quietCalls    sync.WaitGroup

	acceptDone chan struct{}
	conns      sync.WaitGroup

	closed   chan struct{}
	closeErr error
}

// inFlight is what the host has in flight besides its connections.
type inFlight struct {
	ops         int64 // admitted operations whose response is not yet written or lost
	commands    int64 // admitted command-mode operations whose handler has not returned
	residencies int64 // unreleased residencies, the process-exit pin included
	retained    bool  // RetainUntilProcessExit pinned its residency
}

func durationOrDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// Start acquires the endpoint, publishes the registration and brings the
// host to ready. It returns once the host is ready, or with the startup
// error after the host has shut down again (releasing the owner).
func Start(ctx context.Context, opts Options) (*Kernel, error) {
	if opts.Owner == nil {
		return nil, errors.New("runtime host: owner is required")
	}
	opts.IdleGrace = durationOrDefault(opts.IdleGrace, DefaultIdleGrace)
	opts.HandshakeTimeout = durationOrDefault(opts.HandshakeTimeout, DefaultHandshakeTimeout)
	opts.ShutdownGrace = durationOrDefault(opts.ShutdownGrace, DefaultShutdownGrace)
	for _, d := range []time.Duration{opts.IdleGrace, opts.HandshakeTimeout, opts.ShutdownGrace} {
		if d < 0 || d > MaxTimerDuration {
			_ = opts.Owner.Close()
			return nil, fmt.Errorf("runtime host: duration %v outside [0, %v]", d, MaxTimerDuration)
		}
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	k := &Kernel{
		opts:        opts,
		owner:       opts.Owner,
		epoch:       uuid.NewString(),
		createdAt:   time.Now().UTC().Format("2006-01-02T15:04:05.000Z"),
		state:       protocol.StateStarting,
		activeConn:  make(map[*Conn]struct{}),
		handshaking: make(map[*transport.Conn]struct{}),
		changed:     make(chan struct{}),
		startupDone: make(chan struct{}),
		acceptDone:  make(chan struct{}),
		closed:      make(chan struct{}),
	}
	k.epochJSON = newEpochJSON(k.epoch)
	k.statusInline = k.serveStatus
	k.log = log.With("hostEpoch", k.epoch)
	k.baseCtx, k.cancel = context.WithCancel(context.Background())
	k.handlers = Handlers{protocol.OpHostStatus: k.statusHandler}

	if err := k.owner.Assert(); err != nil {
		k.abortStartup()
		return nil, err
	}
	ep, err := control.PrepareEndpoint(k.owner.Capability().RootID())
	if err != nil {
		k.abortStartup()
		return nil, err
	}
	k.endpoint = ep
	ln, err := ep.Listen()
	if err != nil {
		k.abortStartup()
		return nil, err
	}
	k.listener = ln
	if err := k.publish(); err != nil {
		k.abortStartup()
		return nil, err
	}
	go k.acceptLoop()
	k.log.Info("runtime host listening", "endpoint", ep.Path(), "pid", os.Getpid())

	if err := k.compose(ctx); err != nil {
		k.RequestDrain()
		<-k.closed
		if k.closeErr != nil {
			return nil, k.closeErr
		}
		return nil, err
	}

	if k.inShutdown.Load() {
		k.maybeCommit()
		return k, ErrClosed
	}
	if err := k.setState(protocol.StateReady); err != nil {
		k.RequestDrain()
		<-k.closed
		return nil, err
	}
	k.log.Info("runtime host ready")
	return k, nil
}

// compose builds the composition and runs its recovery, unless the host is
// closed first.
func (k *Kernel) compose(ctx context.Context) error {
	if k.opts.CompositionFactory == nil {
		all := UnavailableHandlers()
		all[protocol.OpHostStatus] = k.statusHandler
		k.mu.Lock()
		k.handlers = all
		k.mu.Unlock()
		close(k.startupDone)
		return nil
	}
	if err := k.setState(protocol.StateRecovering); err != nil {
		close(k.startupDone)
		return err
	}
	done := make(chan error, 1)
	go func() {
		defer close(k.startupDone)
		c, err := k.opts.CompositionFactory(k.baseCtx, k)
		if err == nil {
			k.mu.Lock()
			k.comp = c
			drain := k.inShutdown.Load() && !k.compDrainBegun
			if drain {
				k.compDrainBegun = true
			}
			k.mu.Unlock()
			if drain {
				c.BeginDrain()
			}
			err = c.Recover(k.baseCtx)
			if err == nil {
				h := UnavailableHandlers()
				for op, fn := range c.Handlers() {
					h[op] = fn
				}
				h[protocol.OpHostStatus] = k.statusHandler
				k.mu.Lock()
				k.handlers = h
				k.mu.Unlock()
			}
		}
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-k.closed:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (k *Kernel) composition() Composition {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.comp
}

// HostEpoch returns this process's host epoch.
func (k *Kernel) HostEpoch() string { return k.epoch }

// Endpoint returns the socket path.
func (k *Kernel) Endpoint() string { return k.endpoint.Path() }

// ControlDirectory returns the per-root control directory.
func (k *Kernel) ControlDirectory() string { return k.owner.ControlDirectory() }

// State returns the lifecycle state.
func (k *Kernel) State() protocol.HostState {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.state
}

// Done is closed when the host has shut down.
func (k *Kernel) Done() <-chan struct{} { return k.closed }

// Err returns the shutdown result once Done is closed: nil for a clean
// shutdown, ErrProcessTerminationRequired, or the joined close errors.
func (k *Kernel) Err() error {
	<-k.closed
	return k.closeErr
}

// Close requests a graceful drain and waits for the shutdown to finish or
// ctx to end.
func (k *Kernel) Close(ctx context.Context) error {
	k.RequestDrain()
	select {
	case <-k.closed:
		return k.closeErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Status returns the host.status result as seen now.
func (k *Kernel) Status() protocol.HostStatus {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.statusLocked()
}

func (k *Kernel) statusLocked() protocol.HostStatus {
	return protocol.HostStatus{
		HostEpoch:         k.epoch,
		State:             k.state,
		Connections:       int64(len(k.activeConn)),
		ActiveOperations:  k.inFlight.ops,
		ActiveResidencies: k.inFlight.residencies,
	}
}

// publish rewrites registration.json with the current state. Publications
// are serialised so the file never goes back from draining.
func (k *Kernel) publish() error {
	k.pubMu.Lock()
	defer k.pubMu.Unlock()
	k.mu.Lock()
	state := k.state
	k.mu.Unlock()
	return control.WriteRegistration(k.owner.ControlDirectory(), control.Registration{
		Kind:          control.RegistrationKind,
		SchemaVersion: protocol.RegistrationSchemaVersion,
		RootID:        k.owner.Capability().RootID(),
		HostEpoch:     k.epoch,
		Endpoint:      k.endpoint.Path(),
		ProtocolMin:   protocol.HostProtocol.Min,
		ProtocolMax:   protocol.HostProtocol.Max,
		State:         state,
		PID:           int64(os.Getpid()),
		CreatedAt:     k.createdAt,
	})
}

func (k *Kernel) setState(state protocol.HostState) error {
	k.mu.Lock()
	if k.committed {
		k.mu.Unlock()
		return ErrClosed
	}
	k.state = state
	k.mu.Unlock()
	if err := k.publish(); err != nil {
		return err
	}
	k.mu.Lock()
	k.evaluateIdleLocked()
	k.evaluateQuietLocked()
	k.mu.Unlock()
	return nil
}

// notifyLocked wakes everything waiting for a counter change. Nothing is
// allocated unless someone waits (only shutdown does).
func (k *Kernel) notifyLocked() {
	if k.watched {
		close(k.changed)
		k.changed = make(chan struct{})
		k.watched = false
	}
}

// watchLocked returns the channel closed by the next change.
func (k *Kernel) watchLocked() <-chan struct{} {
	k.watched = true
	return k.changed
}

// waitFor waits until cond (evaluated under mu) holds, the deadline passes
// or the shutdown deadline fires. It reports whether cond held.
func (k *Kernel) waitFor(cond func() bool, deadline <-chan time.Time) bool {
	for {
		k.mu.Lock()
		if cond() {
			k.mu.Unlock()
			return true
		}
		if k.deadlineFired {
			k.mu.Unlock()
			return false
		}
		ch := k.watchLocked()
		k.mu.Unlock()
		select {
		case <-ch:
		case <-deadline:
			return false
		}
	}
}

// ---- connections ----

func (k *Kernel) acceptLoop() {
	defer close(k.acceptDone)
	var backoff time.Duration
	for {
		nc, err := k.listener.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Temporary failures (EMFILE, ...): back off, capped.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			k.log.Warn("accept failed", "err", err, "retry", backoff)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-k.closed:
				t.Stop()
				return
			}
			continue
		}
		backoff = 0
		t := transport.New(nc)
		k.mu.Lock()
		if k.committed {
			k.mu.Unlock()
			_ = t.Close()
			continue
		}
		k.handshaking[t] = struct{}{}
		k.conns.Add(1)
		k.mu.Unlock()
		go k.serveConn(t)
	}
}

// serveConn serves one accepted socket: the peer check, the handshake,
// then the Conn. Its deferred block is the connection's one cleanup,
// whatever ends it: a panic is logged with its stack and the peer and tears
// the connection down through the Conn's teardown (so it is released,
// its writer exits and its subscriptions close); the reason the connection
// ended is logged; the goroutine is uncounted.
func (k *Kernel) serveConn(t *transport.Conn) {
	var (
		peer        Peer
		conn        *Conn
		reason      = reasonHandshakeFailed
		endErr      error
		handshaking = true
	)
	defer func() {
		if r := recover(); r != nil {
			reason, endErr = reasonPanic, fmt.Errorf("panic: %v", r)
			if conn != nil {
				conn.recovered(r, "")
				conn.wait()
			} else {
				k.log.Error("connection panicked", "peer", peer, "panic", r, "stack", string(debug.Stack()))
				_ = t.Close()
			}
		}
		if handshaking {
			k.endHandshake(t)
		}
		log := k.log.With("peer", peer)
		if conn != nil {
			log = conn.log
		}
		level := slog.LevelInfo
		switch reason {
		case reasonProtocolError, reasonReadError, reasonWriteError, reasonOutboundOverflow, reasonPanic:
			level = slog.LevelWarn
		}
		attrs := []any{"reason", reason}
		var e *endError
		if errors.As(endErr, &e) {
			endErr = e.err // the reason is logged already
		}
		if endErr != nil {
			attrs = append(attrs, "err", endErr)
		}
		log.Log(context.Background(), level, "connection closed", attrs...)
		k.conns.Done()
	}()
	var err error
	if peer, err = peerOf(t.NetConn()); err != nil {
		reason, endErr = reasonRefused, err
		k.log.Warn("connection refused", "err", err)
		_ = t.Close()
		return
	}
	if err := k.admitPeer(&peer); err != nil {
		reason, endErr = reasonRefused, err
		k.log.Warn("connection refused", "peer", peer, "err", err)
		_ = t.Close()
		return
	}
	conn, reason = k.handshake(t, peer)
	handshaking = false
	k.endHandshake(t)
	if conn == nil {
		return
	}
	endErr = conn.Run()
	reason = endReason(endErr)
}

// admitPeer applies the uid check, then the RefusePeer hook; it closes
// the peer's pidfd.
func (k *Kernel) admitPeer(p *Peer) error {
	defer func() {
		if p.PIDFD != nil {
			p.PIDFD.Close()
			p.PIDFD = nil
		}
	}()
	if err := checkPeer(*p, hostUID); err != nil {
		return err
	}
	if k.opts.RefusePeer != nil {
		return k.opts.RefusePeer(*p)
	}
	return nil
}

// endHandshake stops tracking t as handshaking.
func (k *Kernel) endHandshake(t *transport.Conn) {
	k.mu.Lock()
	delete(k.handshaking, t)
	k.notifyLocked()
	k.mu.Unlock()
}

// handshake reads the hello and answers it. It returns the accepted
// Conn, or nil after answering or dropping the socket, with why.
func (k *Kernel) handshake(t *transport.Conn, peer Peer) (*Conn, string) {
	v, err := t.ReadFrame(k.opts.HandshakeTimeout)
	if err != nil {
		_ = t.Close()
		return nil, reasonHandshakeFailed
	}
	f, err := protocol.DecodeClientFrame(v)
	hello, ok := f.(*protocol.Hello)
	if err != nil || !ok {
		_ = t.Close()
		return nil, reasonHandshakeFailed
	}
	if k.inShutdown.Load() || k.ownerLost() {
		k.replyAndEnd(t, protocol.Draining{Kind: protocol.KindDraining, HostEpoch: k.epoch})
		return nil, reasonDraining
	}
	selected, compatible := protocol.Negotiate(protocol.ProtocolRange{Min: hello.ProtocolMin, Max: hello.ProtocolMax}, protocol.HostProtocol)

	k.mu.Lock()
	if k.inShutdown.Load() {
		k.mu.Unlock()
		k.replyAndEnd(t, protocol.Draining{Kind: protocol.KindDraining, HostEpoch: k.epoch})
		return nil, reasonDraining
	}
	if !compatible {
		// Only a host that will exit when idle may tell the client to wait.
		replacement := protocol.ReplacementBlockedByResidency
		if k.trulyIdleLocked() && !k.opts.DisableIdleExit {
			replacement = protocol.ReplacementWaitForIdleExit
		}
		reply := protocol.Incompatible{
			Kind: protocol.KindIncompatible, HostEpoch: k.epoch,
			ProtocolMin: protocol.HostProtocol.Min, ProtocolMax: protocol.HostProtocol.Max,
			State: k.state, Replacement: replacement,
		}
		k.mu.Unlock()
		k.replyAndEnd(t, reply)
		return nil, reasonIncompatible
	}
	connID := uuid.NewString()
	var conn *Conn
	conn = NewConn(ConnConfig{
		Transport: t,
		Conn: ConnInfo{
			HostEpoch:    k.epoch,
			ConnectionID: connID,
			Surface:      hello.Surface,
			Principal:    "local_os_user",
			Peer:         peer,
		},
		// Commands and controls outlive their client; queries get the
		// connection's own context, derived from this one.
		Context:           WithPeer(k.baseCtx, peer),
		ResolveContinuity: k.resolveContinuity,
		admit:             k.admit,
		OnTeardown:        func(error) { k.releaseConnection(conn) },
		inline:            k.inlineHandler,
		Logger:            k.log.With("peer", peer),
	})
	k.activeConn[conn] = struct{}{}
	k.cancelIdleLocked()
	reply := protocol.Accepted{
		Kind: protocol.KindAccepted, HostEpoch: k.epoch, ConnectionID: connID,
		SelectedProtocol: selected, State: k.state,
	}
	k.notifyLocked()
	k.mu.Unlock()
	if err := t.WriteValue(reply); err != nil {
		conn.teardown(reasonWriteError, err) // closes the socket, stops the writer, releases the connection
		conn.wait()
		return nil, reasonWriteError
	}
	return conn, ""
}

// replyAndEnd writes a final handshake reply, then ends the socket.
func (k *Kernel) replyAndEnd(t *transport.Conn, reply any) {
	_ = t.WriteValue(reply)
	_ = t.CloseWrite()
	_ = t.Close()
}

func (k *Kernel) releaseConnection(c *Conn) {
	k.mu.Lock()
	if _, ok := k.activeConn[c]; ok {
		delete(k.activeConn, c)
		k.notifyLocked()
		k.evaluateIdleLocked()
	}
	k.mu.Unlock()
}

func (k *Kernel) resolveContinuity() ConnectionObserver {
	if c := k.composition(); c != nil {
		return c.Continuity()
	}
	return nil
}

// ---- operations ----

var (
	errDraining = protocol.NewOpError(protocol.ErrHostDraining, protocol.MessageHostDraining)
	errNotReady = protocol.NewOpError(protocol.ErrHostNotReady, protocol.MessageHostNotReady)
)

// OwnerCheckInterval bounds how long a successful root ownership check is
// trusted. The first admission after it re-validates (lock artifact, root
// identity, marker, 8 system calls) under mu, so concurrent admissions
// wait for that single check.
const OwnerCheckInterval = 100 * time.Millisecond

// ownerLost re-validates root ownership (at most once per
// OwnerCheckInterval); on failure it commits shutdown at once.
func (k *Kernel) ownerLost() bool {
	k.mu.Lock()
	lost := k.ownerLostLocked()
	k.mu.Unlock()
	if lost {
		k.commitNow()
	}
	return lost
}

// ownerLostLocked is ownerLost's check; the caller commits the shutdown
// when it reports the ownership lost.
func (k *Kernel) ownerLostLocked() bool {
	if !k.ownerChecked.IsZero() && time.Since(k.ownerChecked) < OwnerCheckInterval {
		return false
	}
	if err := k.owner.Assert(); err != nil {
		k.ownerChecked = time.Time{}
		k.log.Error("root ownership lost", "err", err)
		return true
	}
	k.ownerChecked = time.Now()
	return false
}

// admit admits one operation into l, its lease: refused while draining
// (or once root ownership is lost) and, unless it is a bootstrap
// operation, before the host is ready. The decision, the count and the
// handler the operation runs with are one change of the in-flight state
// (one critical section), so a drain either refuses the operation or
// waits for it, and an operation admitted as ready runs a handler of the
// ready host.
func (k *Kernel) admit(_ context.Context, spec *protocol.OperationSpec, l *opLease) (Handler, *protocol.OpError) {
	var (
		h       Handler
		refused *protocol.OpError
		lost    bool
	)
	k.updateInFlight(func(s *inFlight) {
		if refused, lost = k.admitLocked(spec, l, s); refused == nil {
			h = k.handlers[spec.Key]
		}
	})
	if lost {
		k.commitNow()
	}
	return h, refused
}

// admitLocked is admission inside updateInFlight's change; lost reports
// that root ownership was found lost (the caller then commits the
// shutdown, outside the lock).
func (k *Kernel) admitLocked(spec *protocol.OperationSpec, l *opLease, s *inFlight) (refused *protocol.OpError, lost bool) {
	switch {
	case k.inShutdown.Load():
		return errDraining, false
	case k.ownerLostLocked():
		return errDraining, true
	case spec.Availability != protocol.AvailabilityBootstrap && k.state != protocol.StateReady:
		return errNotReady, false
	}
	*l = opLease{k: k, command: spec.Mode == protocol.ModeCommand}
	s.ops++
	if l.command {
		s.commands++
	}
	return nil, false
}

// opLease is the kernel's admission of one operation. A lease is made for
// one operation and never reused (it lives in the Conn's record of the
// request), and its state is guarded by the kernel's mu: a Seal or Finish
// after the lease is finished finds it finished and does nothing, so it
// can never act on another operation.
type opLease struct {
	k        *Kernel
	command  bool
	sealed   bool // guarded by k.mu
	finished bool // guarded by k.mu
}

func (l *opLease) AcquireResidency() Residency { return l.k.AcquireResidency() }

// Seal marks the handler as returned: a command no longer blocks shutdown.
// Only a command's seal changes anything.
func (l *opLease) Seal() {
	if !l.command {
		return
	}
	l.k.updateInFlight(func(s *inFlight) { l.sealLocked(s) })
}

func (l *opLease) sealLocked(s *inFlight) {
	if l.sealed {
		return
	}
	l.sealed = true
	if l.command {
		s.commands--
	}
}

// Finish marks the response as written or lost (sealing the lease if it
// was not sealed yet).
func (l *opLease) Finish() {
	l.k.updateInFlight(l.finishLocked)
}

func (l *opLease) finishLocked(s *inFlight) {
	if l.finished {
		return
	}
	l.sealLocked(s)
	l.finished = true
	s.ops--
}

// updateInFlight applies change to the in-flight state under mu, then does
// what the new state calls for: it wakes whoever waits for a change (the
// close sequence), re-evaluates idle exit, and commits a requested
// shutdown once no command is unsealed. It is the only place the in-flight
// state changes.
func (k *Kernel) updateInFlight(change func(*inFlight)) {
	k.mu.Lock()
	change(&k.inFlight)
	k.notifyLocked()
	k.evaluateIdleLocked()
	k.activity++
	k.evaluateQuietLocked()
	commit := k.inShutdown.Load() && !k.committed && k.inFlight.commands == 0
	k.mu.Unlock()
	if commit {
		k.commitNow()
	}
}

// inlineHandler returns the kernel's handler of the one operation served
// on a connection's reader, host.status, and nil for every other.
func (k *Kernel) inlineHandler(op protocol.Operation) inlineHandler {
	if op == protocol.OpHostStatus {
		return k.statusInline
	}
	return nil
}

// serveStatus is host.status served on a connection's reader: admission
// and the snapshot of the counters are one change of the in-flight state
// (the answer counts its own operation, as every host.status answer
// does), and the result is validated and encoded straight into the
// response frame.
func (k *Kernel) serveStatus(_ context.Context, spec *protocol.OperationSpec, l *opLease, dst []byte) ([]byte, *protocol.OpError) {
	var (
		st      protocol.HostStatus
		refused *protocol.OpError
		lost    bool
	)
	k.updateInFlight(func(s *inFlight) {
		if refused, lost = k.admitLocked(spec, l, s); refused == nil {
			st = k.statusLocked()
		}
	})
	if lost {
		k.commitNow()
	}
	if refused != nil {
		return dst, refused
	}
	r := statusResult{HostStatus: st, epochJSON: k.epochJSON}
	if err := r.Validate(); err != nil {
		k.log.Error("operation result rejected", "operation", spec.Key, "err", err)
		return dst, protocol.NewOpError(protocol.ErrInternalFailure, protocol.MessageOperationFailed)
	}
	return r.AppendJSON(dst), nil
}

// statusHandler serves host.status from the kernel's own counters.
func (k *Kernel) statusHandler(context.Context, *Call) Outcome {
	return OK(&statusResult{HostStatus: k.Status(), epochJSON: k.epochJSON})
}

// statusResult is host.status with the host epoch encoded once per kernel
// (it never changes); it validates and encodes without rescanning it, and
// is written straight into the response frame instead of being encoded,
// parsed and decoded again by the output codec. This fast path is kept
// because the committed round-trip benchmarks show it pays (internal/bench,
// 2 vCPU Intel Xeon, shared and busy; against returning a plain
// protocol.HostStatus, 3 interleaved runs, medians): sequential 154,000
// against 128,000 req/s (+20 %); pipelined 4×32 645,000 against 650,000
// (no difference). See docs/benchmarks.md.
type statusResult struct {
	protocol.HostStatus
	epochJSON []byte // the JSON string of HostStatus.HostEpoch, validated
}

// Validate applies the host.status output rules; the epoch was checked
// when epochJSON was built.
func (r *statusResult) Validate() error {
	st := r.HostStatus
	st.HostEpoch = "e" // checked once, in newEpochJSON
	return st.Validate()
}

// AppendJSON appends the wire encoding, equal to HostStatus.AppendJSON.
func (r *statusResult) AppendJSON(b []byte) []byte {
	b = append(b, `{"hostEpoch":`...)
	b = append(b, r.epochJSON...)
	return r.HostStatus.AppendJSONAfterEpoch(b)
}

// newEpochJSON encodes and validates a host epoch for statusResult.
func newEpochJSON(epoch string) []byte {
	if err := (protocol.HostStatus{HostEpoch: epoch, State: protocol.StateReady}).Validate(); err != nil {
		panic("runtime host: invalid host epoch " + epoch)
	}
	b, _ := protocol.Marshal(epoch)
	return b
}

// ---- residency ----

// residency is one acquired residency; like a lease it is never reused,
// and released is guarded by the kernel's mu.
type residency struct {
	k        *Kernel
	released bool
}

func (r *residency) Release() {
	r.k.updateInFlight(func(s *inFlight) {
		if !r.released {
			r.released = true
			s.residencies--
		}
	})
}

// AcquireResidency keeps the host from idling out and makes shutdown wait
// until the residency is released.
func (k *Kernel) AcquireResidency() Residency {
	r := &residency{k: k}
	k.updateInFlight(func(s *inFlight) { s.residencies++ })
	return r
}

// RetainUntilProcessExit pins one residency forever: shutdown can then only
// end with ErrProcessTerminationRequired.
func (k *Kernel) RetainUntilProcessExit() {
	k.updateInFlight(func(s *inFlight) {
		if !s.retained {
			s.retained = true
			s.residencies++
		}
	})
}

// ---- idle ----

func (k *Kernel) trulyIdleLocked() bool {
	return k.state == protocol.StateReady && len(k.activeConn) == 0 && k.inFlight.ops == 0 && k.inFlight.residencies == 0
}

func (k *Kernel) cancelIdleLocked() {
	if k.idleTimer != nil {
		k.idleTimer.Stop()
		k.idleTimer = nil
	}
}

func (k *Kernel) evaluateIdleLocked() {
	if k.opts.DisableIdleExit || k.inShutdown.Load() || !k.trulyIdleLocked() {
		k.cancelIdleLocked()
		return
	}
	if k.idleTimer != nil {
		return
	}
	var t *time.Timer
	t = time.AfterFunc(k.opts.IdleGrace, func() {
		k.mu.Lock()
		fire := k.idleTimer == t && k.trulyIdleLocked() && !k.inShutdown.Load()
		if k.idleTimer == t {
			k.idleTimer = nil
		}
		if fire {
			// Decided under the lock that admits handshakes: a client
			// arriving from now on is answered draining, never accepted
			// and then dropped.
			k.requestDrainLocked()
		}
		k.mu.Unlock()
		if fire {
			k.log.Info("idle grace elapsed; shutting down", "idleGrace", k.opts.IdleGrace)
			k.RequestDrain() // begins the composition drain and commits
		}
	})
	k.idleTimer = t
}

// ---- quiet ----

func (k *Kernel) quietLocked() bool {
	pinned := int64(0)
	if k.inFlight.retained {
		pinned = 1
	}
	return k.state == protocol.StateReady && !k.inShutdown.Load() && k.inFlight.ops == 0 && k.inFlight.residencies == pinned
}

// quietSlices is how many slices a quiet period is cut into: OnQuiet
// comes between QuietAfter and QuietAfter·(1+1/quietSlices) after the last
// activity, at the cost of one timer wake-up per slice while the host is
// quiet or busy with short requests, instead of a timer change per request.
const quietSlices = 5

// evaluateQuietLocked arms the quiet timer when the host has just become
// quiet. It is never stopped by activity (that would cost a timer change
// per request): quietExpired looks at what happened meanwhile.
func (k *Kernel) evaluateQuietLocked() {
	if k.opts.OnQuiet == nil || k.quietArmed || !k.quietLocked() {
		return
	}
	k.quietRun = 0
	k.armQuietLocked()
}

func (k *Kernel) armQuietLocked() {
	k.quietArmed, k.activityArmed = true, k.activity
	slice := durationOrDefault(k.opts.QuietAfter, DefaultQuietAfter) / quietSlices
	if k.quietTimer == nil {
		k.quietTimer = time.AfterFunc(slice, k.quietExpired)
	} else {
		k.quietTimer.Reset(slice)
	}
}

func (k *Kernel) quietExpired() {
	k.mu.Lock()
	if !k.quietArmed {
		k.mu.Unlock()
		return
	}
	k.quietArmed = false
	if !k.quietLocked() {
		// Work is in flight: evaluateQuietLocked arms again once it ends.
		k.mu.Unlock()
		return
	}
	if k.activity == k.activityArmed {
		k.quietRun++
	} else {
		k.quietRun = 0 // work came and went during the slice
	}
	fire := k.quietRun >= quietSlices
	if fire {
		k.quietCalls.Add(1) // under the lock, with shutdown not begun
	} else {
		k.armQuietLocked()
	}
	k.mu.Unlock()
	if fire {
		defer k.quietCalls.Done()
		k.opts.OnQuiet()
	}
}

// ---- drain and shutdown ----

// RequestDrain begins a graceful shutdown: new handshakes get draining and
// new requests host_draining; the shutdown commits once no command-mode
// operation is unsealed.
func (k *Kernel) RequestDrain() {
	k.mu.Lock()
	k.requestDrainLocked()
	c := k.comp
	begin := c != nil && !k.compDrainBegun
	if begin {
		k.compDrainBegun = true
	}
	k.mu.Unlock()
	if begin {
		c.BeginDrain()
	}
	k.maybeCommit()
}

func (k *Kernel) requestDrainLocked() {
	if k.inShutdown.Load() {
		return
	}
	k.inShutdown.Store(true)
	k.cancelIdleLocked()
	if k.quietTimer != nil {
		k.quietTimer.Stop()
		k.quietArmed = false
	}
	k.deadlineTimer = time.AfterFunc(k.opts.ShutdownGrace, k.deadlineExpired)
	k.notifyLocked()
}

func (k *Kernel) deadlineExpired() {
	k.mu.Lock()
	if k.deadlineFired || k.isClosedLocked() {
		k.mu.Unlock()
		return
	}
	k.deadlineFired = true
	k.notifyLocked()
	k.closedLocked(ErrProcessTerminationRequired)
	k.mu.Unlock()
	k.log.Error("shutdown exceeded its grace period", "shutdownGrace", k.opts.ShutdownGrace)
}

// closedLocked resolves Done with err, once (the close sequence and the
// shutdown deadline race for it).
func (k *Kernel) closedLocked(err error) {
	if k.isClosedLocked() {
		return
	}
	k.closeErr = err
	k.cancel()
	close(k.closed)
}

func (k *Kernel) isClosedLocked() bool {
	select {
	case <-k.closed:
		return true
	default:
		return false
	}
}

// maybeCommit commits the shutdown once requested and no command is unsealed.
func (k *Kernel) maybeCommit() {
	k.mu.Lock()
	ok := k.inShutdown.Load() && !k.committed && k.inFlight.commands == 0
	k.mu.Unlock()
	if ok {
		k.commitNow()
	}
}

// commitNow commits the shutdown at once (also used on owner loss).
func (k *Kernel) commitNow() {
	k.mu.Lock()
	if k.committed {
		k.mu.Unlock()
		return
	}
	k.requestDrainLocked()
	k.committed = true
	k.state = protocol.StateDraining
	c := k.comp
	begin := c != nil && !k.compDrainBegun
	if begin {
		k.compDrainBegun = true
	}
	k.notifyLocked()
	k.mu.Unlock()
	if begin {
		c.BeginDrain()
	}
	go k.closeSequence()
}

// closeSequence releases resources in the order of host-client-storage.md
// §D.8.2. Each step runs even if an earlier one failed; the sequence stops
// at the next checkpoint once the shutdown deadline has fired, leaving the
// lock to the operating system.
func (k *Kernel) closeSequence() {
	var errs []error
	aborted := func() bool {
		k.mu.Lock()
		defer k.mu.Unlock()
		return k.deadlineFired
	}
	step := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	// 1. registration says draining
	if k.endpoint != nil {
		step(k.publish())
	}
	// 2. stop accepting
	if k.listener != nil {
		step(ignoreClosed(k.listener.Close()))
	}
	if aborted() {
		return
	}
	// 3. snapshot sockets; wait (bounded) for operations and handshakes
	k.mu.Lock()
	accepted := make([]*Conn, 0, len(k.activeConn))
	for c := range k.activeConn {
		accepted = append(accepted, c)
	}
	handshaking := make([]*transport.Conn, 0, len(k.handshaking))
	for t := range k.handshaking {
		handshaking = append(handshaking, t)
	}
	k.mu.Unlock()
	var opsDrained, handshakesDrained bool
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		opsDrained = k.waitFor(func() bool { return k.inFlight.ops == 0 }, time.After(ShutdownOperationGrace))
	}()
	go func() {
		defer wg.Done()
		handshakesDrained = k.waitFor(func() bool { return len(k.handshaking) == 0 }, time.After(ShutdownHandshakeGrace))
	}()
	wg.Wait()
	_ = handshakesDrained
	if aborted() {
		return
	}
	// 4. destroy what did not drain
	if !opsDrained {
		for _, c := range accepted {
			c.teardown(reasonHostShutdown, errors.New("runtime host shutting down"))
		}
	}
	for _, t := range handshaking {
		_ = t.Close()
	}
	// 5. operations reach zero
	if !k.waitFor(func() bool { return k.inFlight.ops == 0 }, nil) {
		return
	}
	// 6. composition startup settled
	if !k.startupSettled() {
		return
	}
	// 7. composition close
	if c := k.composition(); c != nil {
		step(c.Close(k.baseCtx))
	}
	if aborted() {
		return
	}
	// 8. residencies reach zero
	if !k.waitFor(func() bool { return k.inFlight.residencies == 0 }, nil) {
		return
	}
	// 9. destroy every accepted socket
	k.mu.Lock()
	for s := range k.activeConn {
		accepted = append(accepted, s)
	}
	k.mu.Unlock()
	for _, s := range accepted {
		s.teardown(reasonHostShutdown, errors.New("runtime host shut down"))
	}
	// 10. server closed: the accept loop and every connection goroutine exit
	if k.listener != nil {
		<-k.acceptDone
	}
	k.conns.Wait()
	k.quietCalls.Wait() // the timer is stopped: no new call starts
	if aborted() {
		return
	}
	// 11. endpoint cleanup
	if k.endpoint != nil {
		step(k.endpoint.Cleanup())
	}
	// 12. registration removed if still ours
	step(control.RemoveRegistration(k.owner.ControlDirectory(), k.epoch))
	// 13. release the owner lock
	step(k.owner.Close())
	k.finishClose(errors.Join(errs...))
}

func (k *Kernel) startupSettled() bool {
	if k.opts.CompositionFactory == nil {
		return true
	}
	for {
		k.mu.Lock()
		ch, fired := k.watchLocked(), k.deadlineFired
		k.mu.Unlock()
		if fired {
			return false
		}
		select {
		case <-k.startupDone:
			return true
		case <-ch:
		}
	}
}

func (k *Kernel) finishClose(err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.deadlineTimer != nil {
		k.deadlineTimer.Stop()
	}
	k.closedLocked(err)
}

// abortStartup releases everything when startup fails before the host is
// reachable (§D.8.3).
func (k *Kernel) abortStartup() {
	k.mu.Lock()
	k.committed = true
	k.inShutdown.Store(true)
	k.state = protocol.StateDraining
	k.mu.Unlock()
	if k.listener != nil {
		_ = k.listener.Close()
	}
	if k.endpoint != nil {
		_ = k.endpoint.Cleanup()
		_ = control.RemoveRegistration(k.owner.ControlDirectory(), k.epoch)
	}
	err := k.owner.Close()
	k.finishClose(err)
}

func ignoreClosed(err error) error {
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
