// Package client connects to the Runtime Host of a storage root and calls
// its operations.
//
//	res, err := client.Connect(ctx, client.Options{RootPath: root, Surface: protocol.SurfaceRun})
//	if err != nil { ... }          // invalid options or an unusable root
//	if res.Kind != client.Connected { ... } // see res.Reason
//	defer res.Conn.Close()
//	st, err := res.Conn.Status(ctx)
package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/maka-agent/maka/internal/control"
	"github.com/maka-agent/maka/internal/peercred"
	"github.com/maka-agent/maka/internal/storageroot"
	"github.com/maka-agent/maka/internal/transport"
	"github.com/maka-agent/maka/protocol"
)

// Registration is the host's published registration.json.
type Registration = control.Registration

// ResultKind is the outcome of Connect.
type ResultKind string

// Connect outcomes.
const (
	Connected    ResultKind = "connected"
	Incompatible ResultKind = "incompatible"
	Draining     ResultKind = "draining"
	Unavailable  ResultKind = "unavailable"
)

// UnavailableReason says why no host could be reached.
type UnavailableReason string

// Reasons of an Unavailable result.
const (
	NotRegistered       UnavailableReason = "not_registered"
	InvalidRegistration UnavailableReason = "invalid_registration"
	RootMismatch        UnavailableReason = "root_mismatch"
	ConnectFailed       UnavailableReason = "connect_failed"
	HandshakeFailed     UnavailableReason = "handshake_failed"
	EpochMismatch       UnavailableReason = "epoch_mismatch"
)

// Default timeouts.
const (
	DefaultConnectTimeout   = 500 * time.Millisecond
	DefaultHandshakeTimeout = 2 * time.Second
	DefaultRequestTimeout   = 2 * time.Second
)

// Options configure Connect.
type Options struct {
	RootPath string
	Surface  protocol.Surface
	// Protocol is the range this client speaks; zero means the host's range.
	Protocol         protocol.ProtocolRange
	ClientInstanceID string        // default: a random UUID
	ConnectTimeout   time.Duration // default 500 ms
	HandshakeTimeout time.Duration // default 2 s
	// RequestTimeout bounds every call whose ctx has no deadline; default 2 s.
	RequestTimeout time.Duration
}

// Result is the outcome of Connect.
type Result struct {
	Kind         ResultKind
	Conn         *Conn                  // Connected
	Registration *Registration          // when one was read
	Handshake    *protocol.Incompatible // Incompatible
	Reason       UnavailableReason      // Unavailable
	Err          error                  // the underlying failure, when Unavailable
}

func (o *Options) normalize() error {
	if o.Protocol == (protocol.ProtocolRange{}) {
		o.Protocol = protocol.HostProtocol
	}
	if !o.Protocol.Valid() {
		return &protocol.ProtocolError{Code: protocol.CodeInvalidFrame, Message: "invalid protocol range"}
	}
	if o.ClientInstanceID == "" {
		o.ClientInstanceID = uuid.NewString()
	}
	if n := protocol.UTF16Len(o.ClientInstanceID); n < 1 || n > 128 {
		return &protocol.ProtocolError{Code: protocol.CodeInvalidFrame, Message: "clientInstanceId must be 1..128 characters"}
	}
	for _, d := range []*time.Duration{&o.ConnectTimeout, &o.HandshakeTimeout, &o.RequestTimeout} {
		if *d < 0 || *d > 120*time.Second {
			return fmt.Errorf("client: timeout %v outside (0, 120s]", *d)
		}
	}
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.HandshakeTimeout == 0 {
		o.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	return nil
}

// Connect discovers the host of opts.RootPath through its registration and
// performs the handshake. It creates the root (and its marker and control
// directory) if missing. An error means the options or the root are
// unusable; every other outcome is a Result.
func Connect(ctx context.Context, opts Options) (Result, error) {
	if err := opts.normalize(); err != nil {
		return Result{}, err
	}
	capability, err := storageroot.Resolve(opts.RootPath, storageroot.KindInteractive)
	if err != nil {
		return Result{}, err
	}
	controlDir, err := storageroot.PrepareControlDirectory(capability)
	if err != nil {
		return Result{}, err
	}
	return attempt(ctx, opts, capability.RootID(), controlDir, time.Time{}), nil
}

// attempt runs one discovery and handshake; deadline (if set) caps every
// phase.
func attempt(ctx context.Context, opts Options, rootID, controlDir string, deadline time.Time) Result {
	reg, found, err := control.ReadRegistration(controlDir)
	if err != nil {
		var re *control.RegistrationError
		if errors.As(err, &re) && re.Code == control.CodeInvalidRegistration {
			return Result{Kind: Unavailable, Reason: InvalidRegistration, Err: err}
		}
		return Result{Kind: Unavailable, Reason: ConnectFailed, Err: err}
	}
	if !found {
		return Result{Kind: Unavailable, Reason: NotRegistered}
	}
	if reg.RootID != rootID {
		return Result{Kind: Unavailable, Reason: RootMismatch, Registration: &reg}
	}
	capAt := func(d time.Duration) time.Time {
		t := time.Now().Add(d)
		if !deadline.IsZero() && deadline.Before(t) {
			return deadline
		}
		return t
	}
	dialer := net.Dialer{Deadline: capAt(opts.ConnectTimeout)}
	nc, err := dialer.DialContext(ctx, "unix", reg.Endpoint)
	if err != nil {
		return Result{Kind: Unavailable, Reason: ConnectFailed, Registration: &reg, Err: err}
	}
	// The host must be this account's: a socket served by another user
	// is refused before a byte is sent (its peer credentials cannot be
	// forged).
	if uc, ok := nc.(*net.UnixConn); ok {
		cred, err := peercred.Of(uc)
		if err == nil && int(cred.Uid) != os.Geteuid() {
			err = fmt.Errorf("the socket %s is served by uid %d, not this user", reg.Endpoint, cred.Uid)
		}
		if err != nil {
			_ = nc.Close()
			return Result{Kind: Unavailable, Reason: ConnectFailed, Registration: &reg, Err: err}
		}
	}
	t := transport.New(nc)
	// Cancelling ctx ends the handshake by destroying the socket.
	stop := context.AfterFunc(ctx, func() { _ = t.Close() })
	defer stop()
	hsDeadline := capAt(opts.HandshakeTimeout)
	_ = nc.SetWriteDeadline(hsDeadline)
	hello := protocol.Hello{
		Kind: protocol.KindHello, ClientInstanceID: opts.ClientInstanceID, Surface: opts.Surface,
		ProtocolMin: opts.Protocol.Min, ProtocolMax: opts.Protocol.Max,
	}
	fail := func(reason UnavailableReason, err error) Result {
		_ = t.Close()
		if reason == HandshakeFailed && ctx.Err() != nil {
			err = ctx.Err()
		}
		return Result{Kind: Unavailable, Reason: reason, Registration: &reg, Err: err}
	}
	if err := t.WriteValue(hello); err != nil {
		return fail(HandshakeFailed, err)
	}
	_ = nc.SetWriteDeadline(time.Time{})
	v, err := t.ReadFrame(time.Until(hsDeadline))
	if err != nil {
		return fail(HandshakeFailed, err)
	}
	frame, err := protocol.DecodeHostFrame(v)
	if err != nil {
		return fail(HandshakeFailed, err)
	}
	switch h := frame.(type) {
	case *protocol.Accepted:
		if h.HostEpoch != reg.HostEpoch {
			return fail(EpochMismatch, nil)
		}
		if h.SelectedProtocol < opts.Protocol.Min || h.SelectedProtocol > opts.Protocol.Max ||
			h.SelectedProtocol < reg.ProtocolMin || h.SelectedProtocol > reg.ProtocolMax {
			return fail(HandshakeFailed, errors.New("selected protocol outside the offered range"))
		}
		if !stop() {
			return fail(HandshakeFailed, ctx.Err())
		}
		c := newConn(t, h, opts.RequestTimeout)
		return Result{Kind: Connected, Conn: c, Registration: &reg}
	case *protocol.Incompatible:
		if h.HostEpoch != reg.HostEpoch {
			return fail(EpochMismatch, nil)
		}
		_ = t.Close()
		return Result{Kind: Incompatible, Handshake: h, Registration: &reg}
	case *protocol.Draining:
		if h.HostEpoch != reg.HostEpoch {
			return fail(EpochMismatch, nil)
		}
		_ = t.Close()
		return Result{Kind: Draining, Registration: &reg}
	default:
		return fail(HandshakeFailed, errors.New("unexpected first frame"))
	}
}

// OperationError is an operation's declared error response; the connection
// stays usable.
type OperationError struct {
	Operation protocol.Operation
	Code      protocol.ErrorCode
	Message   string
}

func (e *OperationError) Error() string {
	return fmt.Sprintf("%s: %s: %s", e.Operation, e.Code, e.Message)
}

// IsCode reports whether err is an *OperationError with the given code.
func IsCode(err error, code protocol.ErrorCode) bool {
	var oe *OperationError
	return errors.As(err, &oe) && oe.Code == code
}

// ErrConnectionClosed is returned for calls on a closed connection.
var ErrConnectionClosed = errors.New("runtime host connection closed")

// Conn is an accepted connection. It is safe for concurrent use: calls are
// correlated by requestId and may complete in any order.
type Conn struct {
	t              *transport.Conn
	hostEpoch      string
	connectionID   string
	selected       int64
	requestTimeout time.Duration

	mu      sync.Mutex
	pending map[string]*pendingCall
	// late holds requests whose caller gave up (ctx done): their answers
	// are dropped, after the entry's function (if any) has seen a
	// successful result.
	late map[string]*pendingCall
	// retired holds subscriptions failed or abandoned locally: their frames
	// are dropped until the host has closed them.
	retired  map[string]struct{}
	subs     map[string]*Subscription
	err      error
	done     chan struct{}
	readDone chan struct{}
}

type pendingCall struct {
	op   protocol.Operation
	done chan *protocol.Response
	// accept validates a successful result; a failure fails the connection.
	accept func(any) error
	// late, if set, receives a successful result that arrives after the
	// caller gave up, on the reader goroutine before any later frame.
	late func(any)
}

func newConn(t *transport.Conn, a *protocol.Accepted, timeout time.Duration) *Conn {
	c := &Conn{
		t:              t,
		hostEpoch:      a.HostEpoch,
		connectionID:   a.ConnectionID,
		selected:       a.SelectedProtocol,
		requestTimeout: timeout,
		pending:        make(map[string]*pendingCall),
		late:           make(map[string]*pendingCall),
		retired:        make(map[string]struct{}),
		subs:           make(map[string]*Subscription),
		done:           make(chan struct{}),
		readDone:       make(chan struct{}),
	}
	go c.readLoop()
	return c
}

// HostEpoch returns the epoch of the host process this connection reached.
func (c *Conn) HostEpoch() string { return c.hostEpoch }

// ConnectionID returns the host-assigned connection id.
func (c *Conn) ConnectionID() string { return c.connectionID }

// SelectedProtocol returns the negotiated protocol version.
func (c *Conn) SelectedProtocol() int64 { return c.selected }

// Done is closed when the connection has failed or been closed.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err returns why the connection ended, or nil while it is open.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close closes the connection locally; it never waits for the host.
func (c *Conn) Close() error {
	c.fail(ErrConnectionClosed)
	<-c.readDone
	return nil
}

// fail ends the connection (first error wins): every pending call and
// subscription fails.
func (c *Conn) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	pending := c.pending
	c.pending = map[string]*pendingCall{}
	subs := c.subs
	c.subs = map[string]*Subscription{}
	close(c.done)
	c.mu.Unlock()
	_ = c.t.Close()
	for _, p := range pending {
		close(p.done)
	}
	for _, s := range subs {
		s.failLocal(SubscriptionConnectionClosed)
	}
}

func (c *Conn) readLoop() {
	defer close(c.readDone)
	for {
		v, err := c.t.ReadFrame(0)
		if err != nil {
			c.fail(fmt.Errorf("runtime host connection ended: %w", err))
			return
		}
		frame, err := protocol.DecodeHostFrame(v)
		if err != nil {
			c.fail(fmt.Errorf("invalid frame from runtime host: %w", err))
			return
		}
		if err := c.route(frame, v); err != nil {
			c.fail(err)
			return
		}
	}
}

func (c *Conn) route(frame any, raw protocol.Value) error {
	switch f := frame.(type) {
	case *protocol.Response:
		c.mu.Lock()
		p, ok := c.pending[f.RequestID]
		if ok {
			delete(c.pending, f.RequestID)
		} else if lp, late := c.late[f.RequestID]; late {
			delete(c.late, f.RequestID)
			c.mu.Unlock()
			if lp.late != nil && f.OK && f.Operation == lp.op {
				lp.late(f.Result)
			}
			return nil
		}
		c.mu.Unlock()
		if !ok {
			return fmt.Errorf("response for unknown request %q", f.RequestID)
		}
		var err error
		if f.Operation != p.op {
			err = fmt.Errorf("response for %q names operation %s, want %s", f.RequestID, f.Operation, p.op)
		} else if f.OK && p.accept != nil {
			err = p.accept(f.Result)
		}
		if err != nil {
			// The call is no longer pending, so fail does not release it:
			// record the connection's error first, then wake the caller.
			c.fail(err)
			close(p.done)
			return err
		}
		p.done <- f
		return nil
	case *protocol.Accepted, *protocol.Incompatible, *protocol.Draining:
		return errors.New("handshake frame after acceptance")
	default:
		return c.routePush(frame, raw)
	}
}

// call sends one request and waits for its response. A ctx without a
// deadline is bounded by the connection's request timeout. accept (may be
// nil) checks a successful result before it is returned.
func (c *Conn) call(ctx context.Context, op protocol.Operation, input any, accept func(any) error) (any, error) {
	return c.callLate(ctx, op, input, accept, nil)
}

// callLate is call with late (may be nil) receiving a successful result
// that arrives after ctx ended the call.
func (c *Conn) callLate(ctx context.Context, op protocol.Operation, input any, accept func(any) error, late func(any)) (any, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.requestTimeout)
		defer cancel()
	}
	id := uuid.NewString()
	frame, err := protocol.AppendRequest(nil, id, op, input)
	if err != nil {
		return nil, err
	}
	p := &pendingCall{op: op, done: make(chan *protocol.Response, 1), accept: accept, late: late}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	c.pending[id] = p
	c.mu.Unlock()
	deadline, _ := ctx.Deadline()
	if err := c.t.WriteBefore(deadline, frame); err != nil {
		// A frame may be half written: the connection cannot be used.
		c.fail(fmt.Errorf("write to runtime host failed: %w", err))
		return nil, c.Err()
	}
	var r *protocol.Response
	var ok bool
	select {
	case r, ok = <-p.done:
	case <-ctx.Done():
		c.mu.Lock()
		_, still := c.pending[id]
		if still {
			delete(c.pending, id)
			c.late[id] = p
		}
		c.mu.Unlock()
		if still {
			return nil, ctx.Err()
		}
		// The answer is already being delivered, or the connection failed
		// and is releasing the call: either settles at once.
		r, ok = <-p.done
	}
	if !ok {
		return nil, c.Err()
	}
	if !r.OK {
		return nil, &OperationError{Operation: op, Code: r.Error.Code, Message: r.Error.Message}
	}
	return r.Result, nil
}

// Call invokes any operation with an already-built input and returns its
// decoded result (the operation's Go result type).
func (c *Conn) Call(ctx context.Context, op protocol.Operation, input any) (any, error) {
	return c.call(ctx, op, input, nil)
}

func typed[T any](c *Conn, ctx context.Context, op protocol.Operation, input any) (T, error) {
	var zero T
	res, err := c.call(ctx, op, input, nil)
	if err != nil {
		return zero, err
	}
	out, ok := res.(T)
	if !ok {
		return zero, fmt.Errorf("%s: unexpected result type %T", op, res)
	}
	return out, nil
}

// Status calls host.status; the result must name this connection's epoch.
func (c *Conn) Status(ctx context.Context) (protocol.HostStatus, error) {
	res, err := c.call(ctx, protocol.OpHostStatus, protocol.HostStatusInput{}, func(r any) error {
		if st, ok := r.(protocol.HostStatus); !ok || st.HostEpoch != c.hostEpoch {
			return errors.New("host.status names another host epoch")
		}
		return nil
	})
	if err != nil {
		return protocol.HostStatus{}, err
	}
	return res.(protocol.HostStatus), nil
}

// ConnectExisting is Connect for a root that must already exist: it never
// creates the root, its marker or anything else.
func ConnectExisting(ctx context.Context, opts Options) (Result, error) {
	if err := opts.normalize(); err != nil {
		return Result{}, err
	}
	capability, err := storageroot.Discover(opts.RootPath)
	if err != nil {
		return Result{}, err
	}
	ns, err := storageroot.ControlNamespace()
	if err != nil {
		return Result{}, err
	}
	return attempt(ctx, opts, capability.RootID(), filepath.Join(ns, capability.RootID()), time.Time{}), nil
}

// PeerPID returns the pid of the process serving the socket, from the
// kernel's peer credentials.
func (c *Conn) PeerPID() (int, error) {
	uc, ok := c.t.NetConn().(*net.UnixConn)
	if !ok {
		return 0, errors.New("not a unix socket")
	}
	cred, err := peercred.Of(uc)
	if err != nil {
		return 0, err
	}
	return int(cred.Pid), nil
}
