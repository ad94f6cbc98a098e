package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/maka-agent/maka/internal/transport"
	"github.com/maka-agent/maka/protocol"
)

// MaxInFlight is the number of requests one connection may have in flight;
// one more tears the connection down.
const MaxInFlight = 64

// Transport is the framed socket a Conn reads from and writes to.
type Transport interface {
	// ReadClientFrame returns the next *protocol.Hello or *protocol.Request.
	ReadClientFrame(timeout time.Duration) (any, error)
	Write(frames ...[]byte) error
	CloseWrite() error
	Close() error
	Closed() <-chan struct{}
	// HasBufferedFrame reports whether the next read will not block.
	HasBufferedFrame() bool
	// TryFill reads, without blocking, what the peer has already sent.
	TryFill() bool
}

var _ Transport = (*transport.Conn)(nil)

// ConnConfig configures a Conn.
type ConnConfig struct {
	Transport Transport
	Conn      ConnInfo
	// Context carries the connection's values (its peer) and outlives the
	// connection: commands and controls run with it, so that what they
	// change does not depend on the client staying. Queries run with the
	// connection's context, derived from it and cancelled when the
	// connection ends.
	Context context.Context
	// ResolveHandlers returns the handler table for a request.
	ResolveHandlers func() Handlers
	// ResolveContinuity returns the subscription owner, or nil.
	ResolveContinuity func() ConnectionObserver
	// BeginOperation admits one operation or refuses it with an error
	// (host_draining, host_not_ready).
	BeginOperation func(ctx context.Context, op *protocol.OperationSpec) (OperationLease, *protocol.OpError)
	// OnTeardown runs exactly once when the connection ends, cleanly or not.
	OnTeardown func(err error)
	// Inline reports operations whose admission and handler never block;
	// they run on the reader goroutine instead of their own.
	Inline func(op protocol.Operation) bool
	Logger *slog.Logger
}

// Conn serves one accepted connection: it reads requests, dispatches them
// concurrently, and sends responses and push frames through one bounded
// serial writer.
type Conn struct {
	cfg  ConnConfig
	out  *OutboundWriter
	conn *ConnInfo
	log  *slog.Logger

	mu       sync.Mutex
	inflight map[string]struct{}

	flushBufs [][]byte // reader-owned scratch for Flush
	ended     bool     // torn down or finished: no more handlers start
	ops       sync.WaitGroup

	// ctx is the connection's context, cancelled with the reason the
	// connection ended (an *endError) by end.
	ctx    context.Context
	cancel context.CancelCauseFunc

	teardownOnce sync.Once
	ending       atomic.Bool
	fatal        chan struct{} // closed by a fatal teardown
	endErr       *endError     // why the connection ended; set once, by end, under mu
}

// Reasons a connection ends, logged with "connection closed".
const (
	reasonClientEOF        = "client_eof"    // the client ended its stream; what it had asked was answered
	reasonClientClosed     = "client_closed" // the client closed its socket entirely
	reasonProtocolError    = "protocol_error"
	reasonReadError        = "read_error"
	reasonWriteError       = "write_error"
	reasonOutboundOverflow = "outbound_overflow"
	reasonTransportClosed  = "transport_closed"
	reasonPanic            = "panic"
	reasonHostShutdown     = "host_shutdown"
	// Before a Conn exists (the kernel's handshake).
	reasonRefused         = "refused"
	reasonHandshakeFailed = "handshake_failed"
	reasonDraining        = "draining"
	reasonIncompatible    = "incompatible"
)

// endError is why a connection ended: the cause of its context, and what
// Run returns (nil for a clean end).
type endError struct {
	reason string
	err    error
}

func (e *endError) Error() string {
	if e.err == nil {
		return "connection closed: " + e.reason
	}
	return "connection closed: " + e.reason + ": " + e.err.Error()
}

func (e *endError) Unwrap() error { return e.err }

// endReason returns the reason of an error Run returned.
func endReason(err error) string {
	var e *endError
	if errors.As(err, &e) {
		return e.reason
	}
	if err == nil {
		return reasonClientEOF
	}
	return reasonReadError
}

// NewConn prepares a connection; Run serves it.
func NewConn(cfg ConnConfig) *Conn {
	if cfg.Context == nil {
		cfg.Context = context.Background()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Conn{
		cfg:      cfg,
		inflight: make(map[string]struct{}),
		fatal:    make(chan struct{}),
		log:      cfg.Logger.With("connection", cfg.Conn.ConnectionID),
	}
	c.ctx, c.cancel = context.WithCancelCause(cfg.Context)
	c.out = NewOutboundWriter(cfg.Transport, func(err error) {
		var p *panicError
		if errors.As(err, &p) {
			// A frame's callback panicked (on whichever goroutine settled
			// it): logged even when the connection is ending already.
			c.log.Error("connection panicked", "panic", p.value, "stack", string(p.stack))
			c.teardown(reasonPanic, p)
			return
		}
		if !c.ending.Load() { // the connection itself is closing the writer
			reason := reasonWriteError
			var overflow *OutboundQueueError
			if errors.As(err, &overflow) {
				reason = reasonOutboundOverflow
			}
			c.teardown(reason, fmt.Errorf("outbound: %w", err))
		}
	})
	conn := cfg.Conn
	conn.send = func(frame []byte, onDone func(error)) error {
		return c.out.Enqueue(frame, SettleFunc(onDone))
	}
	c.conn = &conn
	return c
}

// Run serves the connection until it ends and every dispatched operation has
// settled. It returns why the connection ended (nil for a clean end).
//
// Its deferred block is the reader's one cleanup: a panic on the reader
// is logged and tears this connection down like any other fatal error, so
// the connection is released, its writer exits and its subscriptions
// close; other connections are not touched.
func (c *Conn) Run() (err error) {
	defer func() {
		if r := recover(); r != nil {
			c.recovered(r, "")
		}
		c.wait()
		c.mu.Lock()
		if e := c.endErr; e != nil && e.reason != reasonClientEOF {
			err = e
		}
		c.mu.Unlock()
	}()
	for {
		f, err := c.cfg.Transport.ReadClientFrame(0)
		if err != nil {
			switch {
			case transport.IsCode(err, transport.CodeReadEOF):
				c.drainAfterEOF()
			case isProtocolError(err):
				c.teardown(reasonProtocolError, err)
			default:
				c.teardown(reasonReadError, err)
			}
			return nil
		}
		if err := c.accept(f); err != nil {
			c.teardown(reasonProtocolError, err)
			return nil
		}
	}
}

// wait returns once every dispatched operation has settled and the writer
// has exited.
func (c *Conn) wait() {
	c.ops.Wait()
	<-c.out.Done()
}

func isProtocolError(err error) bool {
	var pe *protocol.ProtocolError
	return errors.As(err, &pe)
}

// recovered logs a panic of this connection (with its stack; the logger
// carries the connection and its peer) and tears the connection down.
func (c *Conn) recovered(r any, op protocol.Operation) {
	attrs := []any{"panic", r, "stack", string(debug.Stack())}
	if op != "" {
		attrs = append(attrs, "operation", op)
	}
	c.log.Error("connection panicked", attrs...)
	c.teardown(reasonPanic, fmt.Errorf("panic: %v", r))
}

// accept decodes one request and dispatches it; an error is fatal to the
// connection.
func (c *Conn) accept(f any) error {
	req, ok := f.(*protocol.Request)
	if !ok {
		return &protocol.ProtocolError{Code: protocol.CodeInvalidFrame, Message: "hello after acceptance"}
	}
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return errors.New("connection ended")
	}
	if _, dup := c.inflight[req.RequestID]; dup {
		c.mu.Unlock()
		return &protocol.ProtocolError{Code: protocol.CodeInvalidFrame, Message: "duplicate in-flight requestId"}
	}
	if len(c.inflight) >= MaxInFlight {
		c.mu.Unlock()
		return &protocol.ProtocolError{Code: protocol.CodeInvalidFrame, Message: "more than 64 requests in flight"}
	}
	inline := c.cfg.Inline != nil && c.cfg.Inline(req.Operation.Key)
	if !inline {
		// An inline request is answered before the next frame is read, so
		// it never needs tracking.
		c.inflight[req.RequestID] = struct{}{}
	}
	c.ops.Add(1)
	c.mu.Unlock()
	if inline {
		c.dispatchInline(req) // answered on this goroutine, written below
	} else {
		go c.dispatch(req)
	}
	// Inline answers wait in the writer's queue until no further request is
	// buffered or already sent; then they are written here, a pipelined
	// burst in one write. This runs after every request, so an inline
	// answer is never left queued while the reader blocks.
	t := c.cfg.Transport
	if !t.HasBufferedFrame() && !(t.TryFill() && t.HasBufferedFrame()) {
		c.flushBufs = c.out.Flush(c.flushBufs)
	}
	return nil
}

// dispatch admits, runs and answers one request.
func (c *Conn) dispatch(req *protocol.Request) { c.serve(req, false) }

func (c *Conn) dispatchInline(req *protocol.Request) { c.serve(req, true) }

// serve runs on the request's own goroutine (or on the reader, inline).
// Its deferred block is the request's one cleanup: a panic in admission,
// the handler, or the encoding of its outcome is logged and tears this
// connection down, and the operation's lease is finished unless the
// response already owns it.
func (c *Conn) serve(req *protocol.Request, inline bool) {
	defer c.ops.Done()
	defer protocol.ReleaseRequest(req) // nothing keeps req past its answer
	// owned is the lease while this goroutine must finish it on a panic.
	var owned OperationLease
	defer func() {
		if r := recover(); r != nil {
			if owned != nil {
				owned.Finish() // before the teardown: a client that sees the close sees it released
			}
			c.recovered(r, req.Operation.Key)
		}
	}()
	spec := req.Operation
	ctx := c.cfg.Context
	if spec.Mode == protocol.ModeQuery {
		// A query's only product is its answer: its work ends with the
		// connection.
		ctx = c.ctx
	}
	lease, admitErr := c.cfg.BeginOperation(ctx, spec)
	if admitErr != nil {
		c.respond(req, Outcome{Err: admitErr}, nil, inline)
		return
	}
	owned = lease
	if c.ending.Load() {
		// The connection went away while admission was pending: never run.
		owned = nil
		lease.Finish()
		c.forget(req.RequestID, inline)
		return
	}
	var h Handler
	if hs := c.cfg.ResolveHandlers(); hs != nil {
		h = hs[spec.Key]
	}
	if h == nil {
		h = unavailable
	}
	call := callPool.Get().(*Call)
	*call = Call{RequestID: req.RequestID, Operation: spec, Input: req.Input, Conn: c.conn, lease: lease}
	out := h(ctx, call)
	lease.Seal()
	err := c.respond(req, out, call, inline)
	owned = nil // the response settles the lease now
	if out.AfterQueued != nil {
		out.AfterQueued(err)
	}
}

func (c *Conn) forget(requestID string, inline bool) {
	if inline {
		return // never tracked
	}
	c.mu.Lock()
	delete(c.inflight, requestID)
	c.mu.Unlock()
}

// respond encodes, validates and queues the response. The lease of call
// (nil for a refused admission) is finished once the response is written or
// lost. It returns what the outcome's AfterQueued is to be told: nil once
// the client will see this outcome, else why not.
func (c *Conn) respond(req *protocol.Request, out Outcome, call *Call, inline bool) error {
	buf := getFrame()
	rejected := c.encode(buf, req, out)
	c.forget(req.RequestID, inline)
	var done Settler
	if call != nil {
		done = call
	}
	err := c.out.enqueueResponse(buf, done, inline)
	if err != nil && call != nil {
		call.Settle(err)
	}
	if err == nil && rejected {
		err = errResultRejected // the client never saw this outcome
	}
	return err
}

var errResultRejected = errors.New("operation result rejected by its output codec")

// encode writes the response frame of an outcome into buf. A result that
// fails the operation's output codec (checked when checkResults is on), or
// an error code the operation does not declare, becomes internal_failure
// (rejected reports that).
func (c *Conn) encode(buf *[]byte, req *protocol.Request, out Outcome) (rejected bool) {
	var frame []byte
	defer func() { *buf = frame }()
	spec := req.Operation
	if out.Err == nil {
		var err error
		if v, ok := out.Result.(selfValidating); ok {
			// A result with its own encoder and validator is written
			// straight into the frame, skipping encode-parse-decode.
			if err = v.Validate(); err == nil {
				frame = protocol.AppendSuccessHeader((*buf)[:0], req.RequestID, spec.Key)
				frame, err = protocol.FinishFrame(v.AppendJSON(frame), 0)
			}
		} else {
			var res []byte
			if res, err = protocol.Marshal(out.Result); err == nil {
				if checkResults {
					err = validateOutput(spec, res)
				}
				if err == nil {
					frame, err = protocol.AppendSuccess((*buf)[:0], req.RequestID, spec.Key, res)
				}
			}
		}
		if err == nil {
			return false
		}
		c.log.Error("operation result rejected", "operation", spec.Key, "err", err)
		out.Err = protocol.NewOpError(protocol.ErrInternalFailure, protocol.MessageOperationFailed)
		rejected = true
	} else if !spec.Declares(out.Err.Code) || out.Err.Message == "" || protocol.UTF16Len(out.Err.Message) > 1024 {
		c.log.Error("operation error rejected", "operation", spec.Key, "code", out.Err.Code)
		out.Err = protocol.NewOpError(protocol.ErrInternalFailure, protocol.MessageOperationFailed)
	}
	frame, _ = protocol.AppendFailure((*buf)[:0], req.RequestID, spec.Key, out.Err)
	return rejected
}

type selfValidating interface {
	protocol.JSONAppender
	Validate() error
}

// checkResults turns on validateOutput: in a makadebug build, and in this
// package's tests.
var checkResults = protocol.CheckResults

func validateOutput(spec *protocol.OperationSpec, encoded []byte) error {
	v, err := protocol.Parse(encoded)
	if err != nil {
		return err
	}
	_, err = spec.DecodeOutput(v)
	return err
}

// drainAfterEOF handles a clean read EOF: stop reading, drop subscriptions,
// let dispatched operations answer, flush, then end the socket. A fatal
// transport failure meanwhile tears down at once. A client that closed its
// socket entirely (rather than only its sending half) reads nothing more:
// the connection ends at once, cancelling its queries.
func (c *Conn) drainAfterEOF() {
	if pc, ok := c.cfg.Transport.(interface{ PeerClosed() bool }); ok && pc.PeerClosed() {
		c.teardown(reasonClientClosed, nil)
		return
	}
	c.detachContinuity()
	settled := make(chan struct{})
	go func() {
		c.ops.Wait()
		close(settled)
	}()
	select {
	case <-settled:
	case <-c.fatal:
		return
	case <-c.cfg.Transport.Closed():
		c.teardown(reasonTransportClosed, errors.New("transport closed during drain"))
		return
	}
	c.out.Close()
	select {
	case <-c.out.Done():
	case <-c.fatal:
		return
	case <-c.cfg.Transport.Closed():
		c.teardown(reasonTransportClosed, errors.New("transport closed during drain"))
		return
	}
	_ = c.cfg.Transport.CloseWrite()
	c.finish()
}

func (c *Conn) detachContinuity() {
	if c.cfg.ResolveContinuity == nil {
		return
	}
	if obs := c.cfg.ResolveContinuity(); obs != nil {
		obs.DetachConnection(c.conn.ConnectionID)
	}
}

// teardown ends the connection after a fatal error, exactly once; the
// first reason wins.
func (c *Conn) teardown(reason string, err error) {
	c.teardownOnce.Do(func() {
		close(c.fatal)
		c.log.Debug("connection torn down", "reason", reason, "err", err)
		c.end(&endError{reason: reason, err: err})
	})
}

// finish ends the connection after a clean drain.
func (c *Conn) finish() {
	c.teardownOnce.Do(func() { c.end(&endError{reason: reasonClientEOF}) })
}

// end is the connection's teardown, run once whatever ends it. The host
// forgets the connection (its subscriptions, its place in the count)
// before the socket closes, so a client that sees the close sees a host
// that no longer counts it.
func (c *Conn) end(e *endError) {
	c.ending.Store(true)
	c.mu.Lock()
	c.ended = true
	c.endErr = e
	c.mu.Unlock()
	c.cancel(e)
	c.out.Fail(ErrWriterClosed)
	c.detachContinuity()
	if c.cfg.OnTeardown != nil {
		var err error
		if e.reason != reasonClientEOF {
			err = e
		}
		c.cfg.OnTeardown(err)
	}
	_ = c.cfg.Transport.Close()
}
