package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/maka-agent/maka/internal/transport"
	"github.com/maka-agent/maka/protocol"
)

// MaxInFlight is the number of requests one connection may have in flight;
// one more tears the connection down.
const MaxInFlight = 64

// Transport is the framed socket a Conn reads from and writes to.
type Transport interface {
	// ReadClientFrameTo returns the next *protocol.Hello or a request,
	// decoded into req (which it then returns).
	ReadClientFrameTo(timeout time.Duration, req *protocol.Request) (any, error)
	// FrameBuffered reports whether the next ReadClientFrame returns a
	// frame already read, without reading the socket.
	FrameBuffered() bool
	Write(frames ...[]byte) error
	CloseWrite() error
	Close() error
	Closed() <-chan struct{}
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
	// (host_draining, host_not_ready). The kernel sets admit instead.
	BeginOperation func(ctx context.Context, op *protocol.OperationSpec) (OperationLease, *protocol.OpError)
	// admit is the kernel's admission: it makes l the operation's lease
	// and returns its handler, both decided in one critical section, or
	// refuses it. When set, BeginOperation and ResolveHandlers are unused.
	admit func(ctx context.Context, op *protocol.OperationSpec, l *opLease) (Handler, *protocol.OpError)
	// inline, set by the kernel, returns the kernel's handler of an
	// operation served on the reader goroutine instead of its own, or nil.
	//
	// This is the connection's one fast path, kept because the committed
	// round-trip benchmarks show it pays (internal/bench, 2 vCPU Intel
	// Xeon, shared; against host.status on its own goroutine with a Call
	// and the generic encode, 3 alternating runs, ratio to the echo server
	// of the same run): pipelined 4×32 0.279–0.304× against 0.070–0.071×
	// (4×); sequential 0.585–0.60× against 0.45–0.49× (+25 %). See
	// docs/benchmarks.md, "Host round trips".
	inline func(op protocol.Operation) inlineHandler
	// OnTeardown runs exactly once when the connection ends, cleanly or not.
	OnTeardown func(err error)
	Logger     *slog.Logger
}

// Conn serves one accepted connection: one reader goroutine (Run) reads
// requests, each request runs on its own goroutine, and responses and push
// frames go out through the connection's one writer loop.
type Conn struct {
	cfg  ConnConfig
	out  *OutboundWriter
	conn *ConnInfo
	log  *slog.Logger

	rd protocol.Request // the reader's: each request is decoded into it
	// burst is the reader's: the answers of the inline requests it served
	// since it last queued them, in one pooled buffer, or nil. The reader
	// queues it as one frame once it has no complete request left to
	// read, or once it holds burstBytes, and before the connection ends.
	//
	// This is kept because the committed round-trip benchmark shows it
	// pays (internal/bench, 2 vCPU Intel Xeon, shared; against one pooled
	// buffer, one queue entry and one settle per answer, 2 alternating
	// sets, ratio to the echo server of the same run): pipelined 4×32
	// 0.299×, 0.315× against 0.236×, 0.260× (+21–27 %), CPU per request
	// −18 %; sequential unchanged. See docs/benchmarks.md, "Host round
	// trips".
	burst *frameBuf

	mu       sync.Mutex
	inflight map[string]struct{} // request ids dispatched and not yet answered (inline ones are answered before the next is read)
	endErr   *endError           // why the connection ended; set once, by end
	ops      sync.WaitGroup      // one per request dispatched to its own goroutine

	// ctx is the connection's context, cancelled with the reason the
	// connection ended (an *endError) by end.
	ctx    context.Context
	cancel context.CancelCauseFunc

	fatal chan struct{} // closed by a fatal teardown
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
		// When the connection itself closed the writer, it has ended
		// already and this does nothing.
		reason := reasonWriteError
		var overflow *OutboundQueueError
		if errors.As(err, &overflow) {
			reason = reasonOutboundOverflow
		}
		c.teardown(reason, fmt.Errorf("outbound: %w", err))
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
			c.queueBurst()
			c.recovered(r, "")
		}
		c.wait()
		c.mu.Lock()
		if e := c.endErr; e != nil && e.reason != reasonClientEOF {
			err = e
		}
		c.mu.Unlock()
	}()
	held := false // an inline answer is queued or in burst, and the writer not woken
	for {
		f, err := c.cfg.Transport.ReadClientFrameTo(0, &c.rd)
		if err != nil {
			c.queueBurst() // the answers already made are the writer's to settle
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
		inline, err := c.accept(f)
		held = held || inline
		if err != nil {
			c.queueBurst()
			c.teardown(reasonProtocolError, err)
			return nil
		}
		if held && !c.cfg.Transport.FrameBuffered() {
			// The answers of a burst's inline requests leave in one write,
			// once every request already read is served.
			held = false
			c.queueBurst()
			c.out.Flush()
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

// inlineHandler admits an operation into l and appends its result, already
// validated, to dst (a response frame up to its result), on the
// connection's reader: it never blocks. It returns why the operation was
// refused or failed; l is left zero unless it was admitted.
type inlineHandler func(ctx context.Context, spec *protocol.OperationSpec, l *opLease, dst []byte) ([]byte, *protocol.OpError)

// operation is one accepted request: the call its handler is given and,
// when the kernel admits it, the kernel's lease, in one allocation. It is
// made for one request and never reused.
type operation struct {
	call  Call
	lease opLease
}

// accept checks one request and dispatches it, on its own goroutine or,
// for an inline operation, on the reader; an error is fatal to the
// connection. It reports whether the request was served inline.
func (c *Conn) accept(f any) (inline bool, err error) {
	req, ok := f.(*protocol.Request)
	if !ok {
		return false, &protocol.ProtocolError{Code: protocol.CodeInvalidFrame, Message: "hello after acceptance"}
	}
	var ih inlineHandler
	if c.cfg.inline != nil {
		ih = c.cfg.inline(req.Operation.Key)
	}
	inline = ih != nil
	c.mu.Lock()
	if c.endErr != nil {
		c.mu.Unlock()
		return false, errors.New("connection ended")
	}
	if _, dup := c.inflight[req.RequestID]; dup {
		c.mu.Unlock()
		return false, &protocol.ProtocolError{Code: protocol.CodeInvalidFrame, Message: "duplicate in-flight requestId"}
	}
	if len(c.inflight) >= MaxInFlight {
		c.mu.Unlock()
		return false, &protocol.ProtocolError{Code: protocol.CodeInvalidFrame, Message: "more than 64 requests in flight"}
	}
	if !inline {
		// An inline request is answered before the next frame is read, so
		// no other request can meet it in the registry.
		c.inflight[req.RequestID] = struct{}{}
		c.ops.Add(1)
	}
	c.mu.Unlock()
	if inline {
		c.serveInline(req, ih) // answered before the next frame is read
		*req = protocol.Request{}
		return true, nil
	}
	op := &operation{call: Call{RequestID: req.RequestID, Operation: req.Operation, Input: req.Input, Conn: c.conn}}
	*req = protocol.Request{} // the reader's Request keeps nothing alive
	go c.serve(op)
	return false, nil
}

// serveInline admits and answers an inline operation on the reader. It
// has no Call: the handler appends its result straight into the response
// frame. Its deferred block is the request's one cleanup, as in serve.
func (c *Conn) serveInline(req *protocol.Request, h inlineHandler) {
	spec := req.Operation
	l := new(opLease)
	defer func() {
		if r := recover(); r != nil {
			if l != nil && l.k != nil {
				l.Finish()
			}
			c.recovered(r, spec.Key)
		}
	}()
	fb := c.burst
	if fb == nil {
		fb = newFrame()
		c.burst = fb
	}
	start := len(fb.b)
	frame, opErr := h(c.ctx, spec, l, protocol.AppendSuccessHeader(fb.b, req.RequestID, spec.Key))
	if opErr == nil {
		var err error
		if frame, err = protocol.FinishFrame(frame, start); err != nil {
			c.log.Error("operation result rejected", "operation", spec.Key, "err", err)
			opErr = protocol.NewOpError(protocol.ErrInternalFailure, protocol.MessageOperationFailed)
		}
	}
	if opErr != nil {
		frame, _ = protocol.AppendFailure(frame[:start], req.RequestID, spec.Key, opErr)
	}
	fb.b = frame
	fb.answers++
	if l.k != nil {
		l.Seal()
		fb.leases = append(fb.leases, l)
	}
	l = nil // the burst settles the lease now
	if len(fb.b) >= burstBytes {
		c.queueBurst() // without waking the writer: the reader wakes it (Run)
	}
}

// burstBytes is the size from which the reader queues its burst before
// the burst's last request: the pooled buffers stay at most 4 KiB.
const burstBytes = 3 * 1024

// queueBurst queues the reader's burst, if any, without waking the writer.
// A burst the writer refuses settles its leases here.
func (c *Conn) queueBurst() {
	fb := c.burst
	if fb == nil {
		return
	}
	c.burst = nil
	if err := c.out.enqueueHeld(outFrame{data: fb.b, buf: fb}); err != nil {
		for _, l := range fb.leases {
			l.Finish()
		}
	}
}

// ended reports whether the connection has ended.
func (c *Conn) ended() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.endErr != nil
}

// serve admits, runs and answers one request on the request's own
// goroutine. Its deferred
// block is the request's one cleanup: a panic in admission, the handler,
// or the encoding of its outcome is logged and tears this connection down,
// and the operation's lease is finished unless the response already owns
// it.
func (c *Conn) serve(op *operation) {
	defer c.ops.Done()
	call := &op.call
	spec := call.Operation
	// owned is the lease while this goroutine must finish it on a panic.
	var owned OperationLease
	defer func() {
		if r := recover(); r != nil {
			if owned != nil {
				owned.Finish() // before the teardown: a client that sees the close sees it released
			}
			c.recovered(r, spec.Key)
		}
	}()
	ctx := c.cfg.Context
	if spec.Mode == protocol.ModeQuery {
		// A query's only product is its answer: its work ends with the
		// connection.
		ctx = c.ctx
	}
	var (
		lease    OperationLease
		h        Handler
		admitErr *protocol.OpError
	)
	if c.cfg.admit != nil {
		if h, admitErr = c.cfg.admit(ctx, spec, &op.lease); admitErr == nil {
			lease = &op.lease
		}
	} else if lease, admitErr = c.cfg.BeginOperation(ctx, spec); admitErr == nil {
		if hs := c.cfg.ResolveHandlers(); hs != nil {
			h = hs[spec.Key]
		}
	}
	if admitErr != nil {
		c.respond(call, Outcome{Err: admitErr}, nil, nil)
		return
	}
	owned = lease
	if c.ended() {
		// The connection went away while admission was pending: never run.
		owned = nil
		lease.Finish()
		c.forget(call.RequestID)
		return
	}
	if h == nil {
		h = unavailable
	}
	call.lease = lease
	out := h(ctx, call)
	lease.Seal()
	if out.AfterQueued == nil {
		c.respond(call, out, lease, nil)
		owned = nil // the response settles the lease now
		return
	}
	// The response is queued held: the writer does not take it before
	// AfterQueued has returned, so that the client, which may act as soon
	// as it reads the response, finds what AfterQueued set up in place.
	// What AfterQueued sends goes after the response.
	hold := new(frameHold)
	err := c.respond(call, out, lease, hold)
	owned = nil               // the response settles the lease now
	defer c.out.release(hold) // even if AfterQueued panics
	out.AfterQueued(err)
}

func (c *Conn) forget(requestID string) {
	c.mu.Lock()
	delete(c.inflight, requestID)
	c.mu.Unlock()
}

// respond encodes, validates and queues the response, held by hold when
// not nil. The lease (nil for a
// refused admission) is finished once the response is written or lost. It
// returns what the outcome's AfterQueued is to be told: nil once the client
// will see this outcome, else why not.
func (c *Conn) respond(call *Call, out Outcome, lease OperationLease, hold *frameHold) error {
	fb := newFrame()
	frame, rejected := c.encode(fb.b, call, out)
	c.forget(call.RequestID)
	err := c.out.enqueue(outFrame{data: frame, lease: lease, buf: fb, hold: hold})
	if err != nil && lease != nil {
		lease.Finish()
	}
	if err == nil && rejected {
		err = errResultRejected // the client never saw this outcome
	}
	return err
}

var errResultRejected = errors.New("operation result rejected by its output codec")

// encode returns the response frame of an outcome. A result that fails the
// operation's output codec (checked when checkResults is on), or an error code the operation does not
// declare, becomes internal_failure (rejected reports that).
//
// The frame is appended to dst, which must be empty.
func (c *Conn) encode(dst []byte, call *Call, out Outcome) (frame []byte, rejected bool) {
	spec := call.Operation
	if out.Err == nil {
		var err error
		if v, ok := out.Result.(selfValidating); ok {
			// A result with its own encoder and validator is written
			// straight into the frame, skipping encode-parse-decode.
			if err = v.Validate(); err == nil {
				frame = protocol.AppendSuccessHeader(dst, call.RequestID, spec.Key)
				frame, err = protocol.FinishFrame(v.AppendJSON(frame), 0)
			}
		} else {
			var res []byte
			if res, err = protocol.Marshal(out.Result); err == nil {
				if checkResults {
					err = validateOutput(spec, res)
				}
				if err == nil {
					frame, err = protocol.AppendSuccess(dst, call.RequestID, spec.Key, res)
				}
			}
		}
		if err == nil {
			return frame, false
		}
		c.log.Error("operation result rejected", "operation", spec.Key, "err", err)
		out.Err = protocol.NewOpError(protocol.ErrInternalFailure, protocol.MessageOperationFailed)
		rejected = true
	} else if !spec.Declares(out.Err.Code) || out.Err.Message == "" || protocol.UTF16Len(out.Err.Message) > 1024 {
		c.log.Error("operation error rejected", "operation", spec.Key, "code", out.Err.Code)
		out.Err = protocol.NewOpError(protocol.ErrInternalFailure, protocol.MessageOperationFailed)
	}
	frame, _ = protocol.AppendFailure(dst[:0], call.RequestID, spec.Key, out.Err)
	return frame, rejected
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
	c.end(&endError{reason: reason, err: err}, true)
}

// finish ends the connection after a clean drain.
func (c *Conn) finish() {
	c.end(&endError{reason: reasonClientEOF}, false)
}

// end is the connection's teardown, run once whatever ends it: the first
// call records why and does the rest, later calls do nothing. The host
// forgets the connection (its subscriptions, its place in the count)
// before the connection's context is cancelled and the socket closes, so
// a query or a client that sees either sees a host that no longer counts
// it.
func (c *Conn) end(e *endError, fatal bool) {
	c.mu.Lock()
	if c.endErr != nil {
		c.mu.Unlock()
		return
	}
	c.endErr = e
	c.mu.Unlock()
	if fatal {
		close(c.fatal)
		c.log.Debug("connection torn down", "reason", e.reason, "err", e.err)
	}
	c.out.Fail(ErrWriterClosed)
	c.detachContinuity()
	if c.cfg.OnTeardown != nil {
		var err error
		if e.reason != reasonClientEOF {
			err = e
		}
		c.cfg.OnTeardown(err)
	}
	// Cancelled only now, so that a query that sees its context end sees a
	// host that no longer counts the connection.
	c.cancel(e)
	_ = c.cfg.Transport.Close()
}
