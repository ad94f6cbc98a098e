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
	data []byte
	done Settler
	buf  *[]byte // the pooled buffer holding data, returned once written
}

// Response frames are built in pooled buffers and recycled once written.
var framePool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// getFrame returns an empty pooled buffer; build the frame in it and store
// the result back through the pointer.
func getFrame() *[]byte {
	b := framePool.Get().(*[]byte)
	*b = (*b)[:0]
	return b
}

func putFrame(b *[]byte) {
	if b != nil && cap(*b) <= 4096 {
		framePool.Put(b)
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

// settle tells done (if any) the outcome of its frame. A settler that
// panics does not keep the frames after it from being settled: its panic
// is recovered and returned, the first one kept in first.
func settle(done Settler, err error, first **panicError) {
	if done == nil {
		return
	}
	defer func() {
		if r := recover(); r != nil && *first == nil {
			*first = &panicError{value: r, stack: debug.Stack()}
		}
	}()
	done.Settle(err)
}

// SettleFunc adapts a function to Settler; a nil SettleFunc does nothing.
type SettleFunc func(err error)

// Settle calls f.
func (f SettleFunc) Settle(err error) {
	if f != nil {
		f(err)
	}
}

// OutboundWriter is a connection's single serial writer: frames are written
// in FIFO order by one goroutine, coalesced into vectored writes. The queue
// holds at most 64 frames and 2 MiB (counting frames until they are
// written); overflowing either, or a write error, fails the writer exactly
// once: every unwritten frame's callback gets the same error and onFailure
// runs once. A frame callback that panics fails the writer too; every
// other frame is still settled, and onFailure is told of the panic even
// if the writer had failed already.
type OutboundWriter struct {
	w         FrameWriter
	onFailure func(error)

	mu      sync.Mutex
	queue   []outFrame
	spare   []outFrame
	frames  int // queued + being written
	bytes   int
	closing bool
	busy    bool // a write is in progress (loop or Flush)
	err     error
	wake    chan struct{}
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
	return ow.enqueue(frame, done, true)
}

// deferredWakeFrames is how many deferred frames (those of a producer that
// will call Wake soon: the reader, once its buffered requests are answered)
// may accumulate before the writer is woken anyway.
const deferredWakeFrames = 16

// enqueueResponse queues a response frame built in a getFrame buffer; the
// writer recycles the buffer. A refused frame is recycled at once.
func (ow *OutboundWriter) enqueueResponse(buf *[]byte, done Settler, deferred bool) error {
	err := ow.enqueueFrame(outFrame{data: *buf, done: done, buf: buf}, !deferred)
	if err != nil {
		putFrame(buf)
	}
	return err
}

// Wake makes the writer write what is queued.
func (ow *OutboundWriter) Wake() {
	select {
	case ow.wake <- struct{}{}:
	default:
	}
}

func (ow *OutboundWriter) enqueue(frame []byte, done Settler, wake bool) error {
	return ow.enqueueFrame(outFrame{data: frame, done: done}, wake)
}

func (ow *OutboundWriter) enqueueFrame(f outFrame, wake bool) error {
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
	case ow.frames+1 > OutboundMaxFrames:
		overflow = &OutboundQueueError{Code: "frame_limit"}
	}
	if overflow != nil {
		ow.failLocked(overflow) // unlocks
		return overflow
	}
	ow.queue = append(ow.queue, f)
	ow.frames++
	ow.bytes += len(frame)
	wake = wake || len(ow.queue) >= deferredWakeFrames
	ow.mu.Unlock()
	if wake {
		ow.Wake()
	}
	return nil
}

// Fail fails the writer with err (first error wins) without writing what is
// queued.
func (ow *OutboundWriter) Fail(err error) {
	ow.mu.Lock()
	ow.failLocked(err)
}

// failLocked records the terminal error, rejects every queued frame and
// wakes the loop. Called with mu held; returns with it released.
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
		putFrame(f.buf)
		settle(f.done, err, &p)
	}
	if ow.onFailure != nil {
		ow.onFailure(err)
	}
	select {
	case ow.wake <- struct{}{}:
	default:
	}
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
	select {
	case ow.wake <- struct{}{}:
	default:
	}
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

func (ow *OutboundWriter) loop() {
	defer close(ow.done)
	var bufs [][]byte
	for {
		ow.mu.Lock()
		for ow.err == nil && (ow.busy || len(ow.queue) == 0) {
			if ow.closing && !ow.busy && len(ow.queue) == 0 {
				break
			}
			ow.mu.Unlock()
			<-ow.wake
			ow.mu.Lock()
		}
		if ow.err != nil || len(ow.queue) == 0 {
			ow.mu.Unlock()
			return
		}
		ow.mu.Unlock()
		bufs = ow.writeOnce(bufs, nil)
	}
}

// NonBlockingWriter is implemented by transports that can write without
// waiting (*transport.Conn does): TryWrite writes what the socket accepts
// now and reports how many bytes that was.
type NonBlockingWriter interface {
	TryWrite(frames ...[]byte) (int, error)
}

// Flush writes what is queued on the calling goroutine without ever
// blocking: what the socket does not accept at once is left, in order, to
// the writer goroutine. The reader calls it once its buffered requests are
// answered, saving a hand-off to the writer goroutine; a client that stops
// reading can therefore never stall the reader. bufs is scratch space,
// returned for reuse.
func (ow *OutboundWriter) Flush(bufs [][]byte) [][]byte {
	tw, ok := ow.w.(NonBlockingWriter)
	if !ok {
		ow.Wake()
		return bufs
	}
	return ow.writeOnce(bufs, tw)
}

// writeOnce writes the queued frames as one vectored write, unless another
// write is in progress. With tw it writes only what the socket accepts at
// once and puts the rest (the first frame possibly cut) back at the front of
// the queue; without, it blocks until everything is written. Frames written
// whole are settled: with nil, or with the terminal error if the writer has
// failed by then (a frame counts as written only if the writer had not
// failed).
func (ow *OutboundWriter) writeOnce(bufs [][]byte, tw NonBlockingWriter) [][]byte {
	ow.mu.Lock()
	if ow.busy || ow.err != nil || len(ow.queue) == 0 {
		ow.mu.Unlock()
		return bufs
	}
	ow.busy = true
	batch := ow.queue
	ow.queue, ow.spare = ow.spare[:0], nil
	ow.mu.Unlock()

	bufs = bufs[:0]
	total := 0
	for _, f := range batch {
		bufs = append(bufs, f.data)
		total += len(f.data)
	}
	var n int
	var err error
	if tw != nil {
		n, err = tw.TryWrite(bufs...)
	} else if err = ow.w.Write(bufs...); err == nil {
		n = total
	}
	clear(bufs)

	k, rest := 0, n
	for k < len(batch) && rest >= len(batch[k].data) {
		rest -= len(batch[k].data)
		k++
	}
	ow.mu.Lock()
	ow.frames -= k
	ow.bytes -= n
	var unwritten []outFrame // frames of a writer that failed meanwhile
	if k < len(batch) {
		if ow.err != nil {
			// The writer failed while this write was in progress (an
			// overflow, a teardown): its queue was rejected already and
			// a second failure rejects nothing, so the unwritten rest is
			// rejected here, or its frames are never settled.
			unwritten = batch[k:]
		} else {
			batch[k].data = batch[k].data[rest:]
			ow.queue = append(append(make([]outFrame, 0, len(batch)-k+len(ow.queue)), batch[k:]...), ow.queue...)
		}
	}
	if err != nil {
		ow.failLocked(err) // unlocks; the first error wins and rejects the queue
		ow.mu.Lock()
	}
	failed := ow.err
	ow.mu.Unlock()
	var p *panicError
	for _, f := range batch[:k] {
		putFrame(f.buf)
		settle(f.done, failed, &p)
	}
	for _, f := range unwritten {
		putFrame(f.buf)
		settle(f.done, failed, &p)
	}
	clear(batch) // an unwritten rest was copied back into the queue
	ow.mu.Lock()
	ow.spare = batch[:0]
	ow.busy = false
	wake := len(ow.queue) > 0 || ow.closing || ow.err != nil
	ow.mu.Unlock()
	if p != nil {
		ow.failPanic(p) // wakes the loop
	} else if wake {
		ow.Wake()
	}
	return bufs
}
