// Package transport frames a net.Conn into protocol v0 NDJSON frames.
//
// Reading is pull-based: bytes are read from the socket only while a caller
// waits in ReadFrame, so at most one read buffer (32 KiB) and one partial
// frame (64 KiB) are ever held per connection. A peer that floods the socket
// is back-pressured by the kernel's socket buffer instead of by host memory;
// this is strictly inside the original's bounds (2 MiB raw, 64 frames or
// 2 MiB decoded).
package transport

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/maka-agent/maka/protocol"
)

// Error codes of transport failures (local only, never on the wire).
const (
	CodeClosed           = "closed"
	CodeReadEOF          = "read_eof"
	CodeReadTimeout      = "read_timeout"
	CodeConcurrentRead   = "concurrent_read"
	CodeInboundQueueFull = "inbound_queue_full"
)

// Error is a transport failure.
type Error struct {
	Code string
	Err  error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return "transport " + e.Code + ": " + e.Err.Error()
	}
	return "transport " + e.Code
}

func (e *Error) Unwrap() error { return e.Err }

// IsCode reports whether err is a transport *Error with the given code.
func IsCode(err error, code string) bool {
	var te *Error
	return errors.As(err, &te) && te.Code == code
}

// Read buffer sizes: an idle or chatty connection reads into 4 KiB; one
// whose reads fill the buffer (bulk or pipelined traffic) switches to 32 KiB.
const (
	initialReadBuffer = 4 * 1024
	ReadBufferSize    = 32 * 1024
)

// Conn is a framed connection. ReadFrame may be called by one goroutine at a
// time; Write is safe for concurrent use and writes each call atomically.
type Conn struct {
	nc  net.Conn
	raw syscall.RawConn // for PeerClosed; nil when nc has no file descriptor

	// read side, owned by the single reader
	reading     atomic.Bool
	buf         []byte
	r, w        int
	split       protocol.Splitter
	hasDeadline bool
	readErr     error

	wmu   sync.Mutex
	wvec  [][]byte    // under wmu: the frames of the current write, kept for its capacity
	wbufs net.Buffers // under wmu: what is left of them to write

	closeOnce sync.Once
	closed    chan struct{}
	closeErr  error
}

// New wraps nc.
func New(nc net.Conn) *Conn {
	c := &Conn{nc: nc, closed: make(chan struct{})}
	if sc, ok := nc.(syscall.Conn); ok {
		c.raw, _ = sc.SyscallConn()
	}
	return c
}

// NetConn returns the underlying connection.
func (c *Conn) NetConn() net.Conn { return c.nc }

// ReadFrame returns the next frame as a JSON value. timeout <= 0 waits
// forever. At end of stream on a frame boundary it returns a read_eof
// error; after a partial frame, protocol.ErrPartialFrame. Framing errors are
// *protocol.ProtocolError values and are final.
func (c *Conn) ReadFrame(timeout time.Duration) (protocol.Value, error) {
	if !c.reading.CompareAndSwap(false, true) {
		return protocol.Value{}, &Error{Code: CodeConcurrentRead}
	}
	defer c.reading.Store(false)
	frame, err := c.next(timeout)
	if err != nil {
		return protocol.Value{}, err
	}
	return protocol.DecodeFrameText(frame)
}

// ReadClientFrame reads and decodes the next client→host frame (a
// *protocol.Hello or *protocol.Request), with the same errors as ReadFrame.
func (c *Conn) ReadClientFrame(timeout time.Duration) (any, error) {
	return c.ReadClientFrameTo(timeout, nil)
}

// ReadClientFrameTo is ReadClientFrame decoding a request into req (when
// not nil) instead of a new Request; it then returns req for a request.
func (c *Conn) ReadClientFrameTo(timeout time.Duration, req *protocol.Request) (any, error) {
	if !c.reading.CompareAndSwap(false, true) {
		return nil, &Error{Code: CodeConcurrentRead}
	}
	defer c.reading.Store(false)
	frame, err := c.next(timeout)
	if err != nil {
		return nil, err
	}
	return protocol.DecodeClientFrameTextTo(frame, req)
}

// FrameBuffered reports whether a complete frame has been read from the
// socket but not yet returned: the next ReadFrame or ReadClientFrame then
// returns without reading the socket. Only the reader may call it.
func (c *Conn) FrameBuffered() bool {
	return c.readErr == nil && bytes.IndexByte(c.buf[c.r:c.w], '\n') >= 0
}

func (c *Conn) next(timeout time.Duration) ([]byte, error) {
	if c.readErr != nil {
		return nil, c.readErr
	}
	if c.buf == nil {
		c.buf = make([]byte, initialReadBuffer)
	}
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	for {
		if c.r < c.w {
			frame, n, err := c.split.Next(c.buf[c.r:c.w])
			if err != nil {
				c.readErr = err
				return nil, err
			}
			c.r += n
			if frame != nil {
				return frame, nil
			}
			continue
		}
		if c.w == len(c.buf) && len(c.buf) < ReadBufferSize {
			c.buf = make([]byte, ReadBufferSize) // the last read filled the buffer
		}
		c.r, c.w = 0, 0
		if timeout > 0 {
			_ = c.nc.SetReadDeadline(deadline)
			c.hasDeadline = true
		} else if c.hasDeadline {
			_ = c.nc.SetReadDeadline(time.Time{})
			c.hasDeadline = false
		}
		n, err := c.nc.Read(c.buf)
		c.w = n
		if n > 0 {
			continue // process data first; a sticky error repeats on the next read
		}
		if err == nil {
			continue
		}
		return nil, c.classifyReadError(err)
	}
}

func (c *Conn) classifyReadError(err error) error {
	switch {
	case errors.Is(err, io.EOF):
		if c.split.Pending() {
			c.readErr = protocol.ErrPartialFrame
		} else {
			c.readErr = &Error{Code: CodeReadEOF}
		}
		return c.readErr
	case errors.Is(err, os.ErrDeadlineExceeded):
		return &Error{Code: CodeReadTimeout, Err: err} // not sticky: a later read may succeed
	case errors.Is(err, net.ErrClosed):
		c.readErr = &Error{Code: CodeClosed, Err: err}
		return c.readErr
	default:
		c.readErr = &Error{Code: CodeClosed, Err: err}
		return c.readErr
	}
}

// Write writes already-encoded frames (each ending in LF) in one vectored
// write. Concurrent calls do not interleave.
func (c *Conn) Write(frames ...[]byte) error { return c.WriteBefore(time.Time{}, frames...) }

// WriteBefore is Write bounded by deadline (none when zero). A write that
// times out may have written part of a frame; the caller must then close
// the connection.
func (c *Conn) WriteBefore(deadline time.Time, frames ...[]byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if !deadline.IsZero() {
		_ = c.nc.SetWriteDeadline(deadline)
		defer c.nc.SetWriteDeadline(time.Time{})
	}
	// The vector lives in the Conn, so that a write allocates nothing.
	c.wvec = append(c.wvec[:0], frames...)
	c.wbufs = c.wvec
	_, err := c.wbufs.WriteTo(c.nc)
	clear(c.wvec)
	c.wbufs = nil
	if err != nil {
		if errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
			return &Error{Code: CodeClosed, Err: err}
		}
		return err
	}
	return nil
}

// WriteValue encodes v as one frame and writes it.
func (c *Conn) WriteValue(v any) error {
	b, err := protocol.EncodeFrame(v)
	if err != nil {
		return err
	}
	return c.Write(b)
}

// CloseWrite half-closes the connection (the peer reads EOF); reading
// continues to work.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Close destroys the connection. It is idempotent; the first call's error is
// returned by every call.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		c.closeErr = c.nc.Close()
		close(c.closed)
	})
	return c.closeErr
}

// PeerClosed reports, without blocking, whether the peer has closed its end
// entirely rather than only its sending half: a read EOF alone cannot tell
// them apart, but a Unix socket whose peer has closed reports a hang-up.
// It is false where that cannot be told (no file descriptor; a TCP peer's
// FIN).
func (c *Conn) PeerClosed() bool {
	if c.raw == nil {
		return false
	}
	hup := false
	_ = c.raw.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
		n, err := unix.Poll(fds, 0)
		hup = err == nil && n > 0 && fds[0].Revents&unix.POLLHUP != 0
	})
	return hup
}

// Closed is closed once Close has been called.
func (c *Conn) Closed() <-chan struct{} { return c.closed }
