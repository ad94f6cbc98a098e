// Package host is the Runtime Host kernel: it owns the listening socket,
// handshakes, operation admission and counters, residencies, idle exit and
// the drain/close order, and runs one Conn per accepted connection.
package host

import (
	"context"

	"github.com/maka-agent/maka/protocol"
)

// Handler serves one operation. Keep call.Conn to send subscription frames
// later; the call itself is the handler's to keep or drop.
//
// ctx carries the connection's peer (PeerFromContext). A query's ctx is
// cancelled when its connection ends: nobody is left to read its answer. A
// command or control keeps running to completion even if its connection
// goes away (its ctx ends only with the host); only the response is lost.
// A handler that panics ends its connection, and only its connection.
type Handler func(ctx context.Context, call *Call) Outcome

// Handlers maps operation keys to handlers.
type Handlers map[protocol.Operation]Handler

// Call is one admitted request.
type Call struct {
	RequestID string
	Operation *protocol.OperationSpec
	Input     any
	Conn      *ConnInfo
	lease     OperationLease
}

// AcquireResidency keeps the host alive until the returned residency is
// released, independent of this call's connection.
func (c *Call) AcquireResidency() Residency { return c.lease.AcquireResidency() }

// Outcome is a handler's answer.
type Outcome struct {
	Result any
	Err    *protocol.OpError
	// AfterQueued, if set, runs once: with nil right after the response has
	// been queued on the connection (so anything the connection sends later
	// follows it), or with the error that prevented that. The response is
	// not written before AfterQueued has returned, so a client that acts
	// on it finds what AfterQueued set up in place; the connection writes
	// nothing meanwhile, so AfterQueued must not block.
	AfterQueued func(err error)
}

// OK returns a successful outcome.
func OK(result any) Outcome { return Outcome{Result: result} }

// Fail returns a failed outcome.
func Fail(code protocol.ErrorCode, message string) Outcome {
	return Outcome{Err: protocol.NewOpError(code, message)}
}

// Residency is a countable lease on the host's life. Release is idempotent.
type Residency interface {
	Release()
}

// OperationLease is the kernel's admission of one operation.
type OperationLease interface {
	AcquireResidency() Residency
	// Seal marks the handler as returned (a command no longer blocks shutdown).
	Seal()
	// Finish marks the response as written or lost.
	Finish()
}

// ConnInfo identifies an accepted connection to handlers and lets
// subscription owners send push frames on it.
type ConnInfo struct {
	HostEpoch    string
	ConnectionID string
	Surface      protocol.Surface
	Principal    string
	Peer         Peer // the connection's peer, read at accept

	send func(frame []byte, onDone func(error)) error
}

// Send queues one encoded push frame on the connection's serial writer.
// onDone is called once with nil after the frame is written, or with the
// failure. It returns an error (and does not call onDone) if the connection
// no longer accepts frames.
func (c *ConnInfo) Send(frame []byte, onDone func(error)) error {
	if c.send == nil {
		return ErrWriterClosed
	}
	return c.send(frame, onDone)
}

// ConnectionObserver is told when a connection ends so that it can drop the
// connection's subscriptions.
type ConnectionObserver interface {
	DetachConnection(connectionID string)
}

// UnavailableHandlers answers every domain operation (all but host.status)
// with operation_unavailable.
func UnavailableHandlers() Handlers {
	h := Handlers{}
	for _, spec := range protocol.Operations() {
		if spec.Key == protocol.OpHostStatus {
			continue
		}
		h[spec.Key] = unavailable
	}
	return h
}

func unavailable(context.Context, *Call) Outcome {
	return Fail(protocol.ErrOperationUnavailable, protocol.MessageOperationUnavailable)
}

// NewConnInfo returns a copy of info whose Send uses send; a Conn builds
// its own, this is for owners driven without a socket (tests, benchmarks).
func NewConnInfo(info ConnInfo, send func(frame []byte, onDone func(error)) error) *ConnInfo {
	info.send = send
	return &info
}
