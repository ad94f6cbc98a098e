package host

import (
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
)

// Outbound queue bounds per connection (protocol.md §1.3).
const (
	OutboundMaxFrames = 64
	OutboundMaxBytes  = 2 * 1024 * 1024
)

// FrameWriter writes already-encoded frames; *transport.Conn implements it.
type FrameWriter interface {
	Write(frames ...[]byte) error
}

// OutboundQueueError reports an overflow of the outbound queue.
type OutboundQueueError struct {
	Code string // "byte_limit" or "frame_limit"
}

func (e *OutboundQueueError) Error() string { return "outbound queue overflow: " + e.Code }

// ErrWriterClosed is returned by Enqueue after Close or after a failure.
var ErrWriterClosed = errors.New("writer is closed")

type outFrame struct {
	data  []byte
	done  Settler        // told the outcome, or nil
	lease OperationLease // a response's lease, finished once written or lost, or nil
	// buf is the pooled buffer a response frame was built in (data is its
	// contents), or nil: from the moment the frame is queued the buffer is
	// the writer's alone, and the writer returns it once it is written or
	// rejected.
	buf *frameBuf
	// hold, when set and not yet released, keeps this frame and every
	// frame queued after it from being taken by the loop (see hold).
	hold *frameHold
}

// frameHold keeps a queued frame from being written until it is released.
// A response whose outcome has an AfterQueued is queued held, and released
// once AfterQueued has returned: the client cannot see the response, and so
// cannot act on it, before what AfterQueued sets up (a subscription made
// active) is in place. Frames queued meanwhile, by AfterQueued or anyone
// else, wait behind it and keep their order.
//
// released is read and written under OutboundWriter.mu only. The writer's
// lock is the only lock involved and no callback runs under it, so a hold
// adds no lock order: AfterQueued runs with no writer lock held, may
// enqueue (taking mu briefly), and release takes mu after it returned.
type frameHold struct{ released bool }

// framePool holds response frame buffers. It is the host's one pool, kept
// because the committed round-trip benchmark shows it pays (internal/bench,
// 2 vCPU Intel Xeon, shared; against a fresh 512-byte buffer per response,
// 3 alternating runs, ratio to the echo server of the same run): pipelined
// 4×32 0.279–0.304× against 0.164–0.189× (+60 %); sequential unchanged.
// See docs/benchmarks.md, "Host round trips".
//
// Its contract holds by construction: only Conn.respond and
// Conn.serveInline take buffers (newFrame; the reader's burst is one
// until queueBurst queues it), and neither touches a frame after queueing
// it; only the
// writer puts them back (releaseFrame), after the frame's write has
// returned or it was rejected, and after its settle ran. A frame the queue
// refused is dropped, not returned.
//
// The pool holds *frameBuf, and a queued frame carries its *frameBuf, so
// that returning a buffer allocates nothing.
var framePool = sync.Pool{New: func() any { return &frameBuf{b: make([]byte, 0, 512)} }}

// frameBuf is one pooled response frame buffer: one response, or the
// answers of a burst of inline requests (Conn.burst), one after the other.
type frameBuf struct {
	b []byte
	// answers is how many responses b holds when it is a burst (0 for one
	// response); leases are their leases, finished once b is written or
	// lost.
	answers int
	leases  []OperationLease
}

// frames is how many frames f counts as against OutboundMaxFrames.
func (f *outFrame) frames() int {
	if f.buf != nil && f.buf.answers > 1 {
		return f.buf.answers
	}
	return 1
}

// newFrame returns an empty pooled buffer for a response frame.
func newFrame() *frameBuf {
	fb := framePool.Get().(*frameBuf)
	fb.b = fb.b[:0]
	return fb
}

// releaseFrame returns f's buffer to framePool if f is a pooled frame of
// ordinary size.
func releaseFrame(f outFrame) {
	if f.buf != nil && cap(f.data) <= 4096 {
		f.buf.b = f.data[:0]
		f.buf.answers = 0
		clear(f.buf.leases)
		f.buf.leases = f.buf.leases[:0]
		framePool.Put(f.buf)
	}
}

// Settler is told once whether a queued frame was written (nil) or not.
type Settler interface {
	Settle(err error)
}

// panicError is a panic recovered on a connection's goroutine, with the
// stack it was recovered on.
type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string { return fmt.Sprintf("panic: %v", e.value) }

// settle tells f's settler (if any) the outcome of its write, and finishes
// its lease (if any). A settler that panics does not keep the frames after
// it from being settled: its panic is recovered and returned, the first
// one kept in first.
func settle(f outFrame, err error, first **panicError) {
	if f.done == nil && f.lease == nil && (f.buf == nil || len(f.buf.leases) == 0) {
		return
	}
	defer func() {
		if r := recover(); r != nil && *first == nil {
			*first = &panicError{value: r, stack: debug.Stack()}
		}
	}()
	if f.lease != nil {
		f.lease.Finish()
	}
	if f.buf != nil {
		for _, l := range f.buf.leases {
			l.Finish()
		}
	}
	if f.done != nil {
		f.done.Settle(err)
	}
}

// SettleFunc adapts a function to Settler; a nil SettleFunc does nothing.
type SettleFunc func(err error)

// Settle calls f.
func (f SettleFunc) Settle(err error) {
	if f != nil {
		f(err)
	}
}

// OutboundWriter is a connection's single serial writer: one goroutine, its
// loop, writes the frames in FIFO order, as many as are queued when it
// starts a write in one vectored write. The queue holds at most 64 frames
// and 2 MiB (counting frames until they are written); overflowing either,
// or a write error, fails the writer exactly once: every unwritten frame's
// callback gets the same error and onFailure runs once. A frame callback
// that panics fails the writer too; every other frame is still settled,
// and onFailure is told of the panic even if the writer had failed
// already.
type OutboundWriter struct {
	w         FrameWriter
	onFailure func(error)

	mu      sync.Mutex
	queue   []outFrame // frames not yet taken by the loop
	frames  int        // queued + being written
	bytes   int
	closing bool
	err     error
	wake    chan struct{} // one slot: the loop has something to do
	done    chan struct{}
}

// NewOutboundWriter starts the writer loop. onFailure may be nil.
func NewOutboundWriter(w FrameWriter, onFailure func(error)) *OutboundWriter {
	ow := &OutboundWriter{
		w:         w,
		onFailure: onFailure,
		wake:      make(chan struct{}, 1),
		done:      make(chan struct{}),
	}
	go ow.loop()
	return ow
}

// Enqueue queues one encoded frame. done (may be nil) is settled exactly
// once, from the writer goroutine or from a failing call, with nil once the
// frame is written or with the writer's terminal error. If Enqueue returns
// an error, done is not settled.
func (ow *OutboundWriter) Enqueue(frame []byte, done Settler) error {
	return ow.enqueue(outFrame{data: frame, done: done})
}

// enqueue queues f and wakes the loop.
func (ow *OutboundWriter) enqueue(f outFrame) error {
	if err := ow.enqueueHeld(f); err != nil {
		return err
	}
	ow.signal()
	return nil
}

// enqueueHeld queues f without waking the loop: the reader queues the
// answers of a burst this way and wakes the loop once (Flush), when it has
// no complete request left to read.
func (ow *OutboundWriter) enqueueHeld(f outFrame) error {
	frame := f.data
	ow.mu.Lock()
	if ow.closing || ow.err != nil {
		ow.mu.Unlock()
		return ErrWriterClosed
	}
	var overflow error
	switch {
	case ow.bytes+len(frame) > OutboundMaxBytes:
		overflow = &OutboundQueueError{Code: "byte_limit"}
	case ow.frames+f.frames() > OutboundMaxFrames:
		overflow = &OutboundQueueError{Code: "frame_limit"}
	}
	if overflow != nil {
		ow.failLocked(overflow) // unlocks
		return overflow
	}
	ow.queue = append(ow.queue, f)
	ow.frames += f.frames()
	ow.bytes += len(frame)
	ow.mu.Unlock()
	return nil
}

// release lets the loop write the frame queued with h, and what was queued
// after it. Releasing a hold whose frame was refused or rejected does
// nothing harmful.
func (ow *OutboundWriter) release(h *frameHold) {
	ow.mu.Lock()
	h.released = true
	ow.mu.Unlock()
	ow.signal()
}

// takeableLocked returns how many frames at the head of the queue the loop
// may take: those before the first frame still held.
func (ow *OutboundWriter) takeableLocked() int {
	for i, f := range ow.queue {
		if f.hold != nil && !f.hold.released {
			return i
		}
	}
	return len(ow.queue)
}

// Flush wakes the loop to write what enqueueHeld queued.
func (ow *OutboundWriter) Flush() { ow.signal() }

// signal wakes the loop; a wake already pending is enough.
func (ow *OutboundWriter) signal() {
	select {
	case ow.wake <- struct{}{}:
	default:
	}
}

// Fail fails the writer with err (first error wins) without writing what is
// queued.
func (ow *OutboundWriter) Fail(err error) {
	ow.mu.Lock()
	ow.failLocked(err)
}

// failLocked records the terminal error, rejects every queued frame and
// wakes the loop. Called with mu held; returns with it released. Frames
// the loop is writing are the loop's to settle.
func (ow *OutboundWriter) failLocked(err error) {
	if ow.err != nil {
		ow.mu.Unlock()
		return
	}
	ow.err = err
	pending := ow.queue
	ow.queue = nil
	ow.mu.Unlock()
	var p *panicError
	for _, f := range pending {
		settle(f, err, &p)
		releaseFrame(f)
	}
	if ow.onFailure != nil {
		ow.onFailure(err)
	}
	ow.signal()
	if p != nil {
		ow.failPanic(p)
	}
}

// failPanic fails the writer after a frame callback panicked, and tells
// onFailure of the panic even if the writer had failed already.
func (ow *OutboundWriter) failPanic(p *panicError) {
	ow.mu.Lock()
	if ow.err == nil {
		ow.failLocked(p) // unlocks; tells onFailure
		return
	}
	ow.mu.Unlock()
	if ow.onFailure != nil {
		ow.onFailure(p)
	}
}

// Close stops accepting frames; what is queued is still written, then the
// loop exits (see Done).
func (ow *OutboundWriter) Close() {
	ow.mu.Lock()
	ow.closing = true
	ow.mu.Unlock()
	ow.signal()
}

// Done is closed when the writer loop has exited: after Close once the queue
// is written, or after a failure.
func (ow *OutboundWriter) Done() <-chan struct{} { return ow.done }

// Err returns the terminal error, if any.
func (ow *OutboundWriter) Err() error {
	ow.mu.Lock()
	defer ow.mu.Unlock()
	return ow.err
}

// Pending returns the number of frames queued or being written.
func (ow *OutboundWriter) Pending() int {
	ow.mu.Lock()
	defer ow.mu.Unlock()
	return ow.frames
}

// loop is the writer goroutine. It takes everything queued, writes it in
// one call, settles each frame, and repeats; it waits only while the queue
// is empty, and exits once the writer has failed, or is closed with nothing
// left to write.
func (ow *OutboundWriter) loop() {
	defer close(ow.done)
	var (
		spare []outFrame // the batch before last, reused as the next queue
		bufs  [][]byte
	)
	for {
		ow.mu.Lock()
		n := ow.takeableLocked()
		// A held frame is waited for even when closing: its release
		// follows its queueing at once (Conn.serve).
		for ow.err == nil && n == 0 && !(ow.closing && len(ow.queue) == 0) {
			ow.mu.Unlock()
			<-ow.wake
			ow.mu.Lock()
			n = ow.takeableLocked()
		}
		if ow.err != nil || len(ow.queue) == 0 {
			ow.mu.Unlock()
			return
		}
		batch := ow.queue
		if n == len(batch) {
			ow.queue = spare[:0]
		} else {
			// The frames from the first held one on stay queued, in order.
			ow.queue = append(spare[:0], batch[n:]...)
			clear(batch[n:])
			batch = batch[:n]
		}
		ow.mu.Unlock()

		bufs = bufs[:0]
		total, frames := 0, 0
		for i := range batch {
			bufs = append(bufs, batch[i].data)
			total += len(batch[i].data)
			frames += batch[i].frames()
		}
		err := ow.w.Write(bufs...)
		clear(bufs)

		ow.mu.Lock()
		ow.frames -= frames
		ow.bytes -= total
		if err != nil {
			ow.failLocked(err) // unlocks; the first error wins and rejects the queue
			ow.mu.Lock()
		}
		// A frame counts as written only if the writer had not failed by
		// the time its write returned: a teardown during the write has
		// told the client nothing.
		failed := ow.err
		ow.mu.Unlock()
		var p *panicError
		for _, f := range batch {
			settle(f, failed, &p)
			releaseFrame(f)
		}
		clear(batch)
		spare = batch
		if p != nil {
			ow.failPanic(p)
		}
	}
}
