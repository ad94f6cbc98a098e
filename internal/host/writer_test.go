package host_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/maka-agent/maka/internal/host"
)

// partialWriter writes the first frame of a write and fails with err,
// after gate opens, whichever of its methods the writer uses (the reader's
// non-blocking flush or the writer goroutine).
type partialWriter struct {
	once    sync.Once
	entered chan struct{}
	gate    chan struct{}
	err     error
}

func (p *partialWriter) Write(frames ...[]byte) error {
	_, err := p.TryWrite(frames...)
	if err == nil {
		err = errors.New("short write")
	}
	return err
}

func (p *partialWriter) TryWrite(frames ...[]byte) (int, error) {
	p.once.Do(func() { close(p.entered) })
	<-p.gate
	return len(frames[0]), p.err
}

// A writer that fails while a non-blocking write is in progress still
// settles every frame of that write: the ones written, and the rest, which
// no later failure would reject.
func TestFramesOfAWriteInProgressAreSettledWhenTheWriterFails(t *testing.T) {
	for _, writeErr := range []error{nil, errors.New("broken pipe")} {
		pw := &partialWriter{entered: make(chan struct{}), gate: make(chan struct{}), err: writeErr}
		ow := host.NewOutboundWriter(pw, nil)
		var mu sync.Mutex
		settled := map[int]error{}
		for i := range 3 {
			if err := ow.EnqueueDeferred([]byte("frame\n"), host.SettleFunc(func(err error) {
				mu.Lock()
				settled[i] = err
				mu.Unlock()
			})); err != nil {
				t.Fatal(err)
			}
		}
		flushed := make(chan struct{})
		go func() { ow.Flush(nil); close(flushed) }()
		<-pw.entered
		ow.Fail(errors.New("overflow")) // fails while the write is in progress
		close(pw.gate)
		<-flushed
		select {
		case <-ow.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the writer loop did not end")
		}
		mu.Lock()
		if len(settled) != 3 {
			t.Fatalf("write error %v: %d of 3 frames settled", writeErr, len(settled))
		}
		for i := 1; i < 3; i++ {
			if settled[i] == nil {
				t.Fatalf("write error %v: unwritten frame %d settled as written", writeErr, i)
			}
		}
		mu.Unlock()
	}
}

// acceptingWriter writes everything.
type acceptingWriter struct{}

func (acceptingWriter) Write(...[]byte) error { return nil }

// A frame callback that panics fails the writer, which reports the panic;
// every other frame is still settled, and the writer loop ends.
func TestAFrameCallbackThatPanicsFailsTheWriterAndSettlesTheOthers(t *testing.T) {
	failures := make(chan error, 4)
	ow := host.NewOutboundWriter(acceptingWriter{}, func(err error) { failures <- err })
	var mu sync.Mutex
	settled := map[int]error{}
	for i := range 3 {
		if err := ow.EnqueueDeferred([]byte("frame\n"), host.SettleFunc(func(err error) {
			if i == 1 {
				panic("frame callback panicked")
			}
			mu.Lock()
			settled[i] = err
			mu.Unlock()
		})); err != nil {
			t.Fatal(err)
		}
	}
	ow.Wake()
	select {
	case <-ow.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the writer loop did not end")
	}
	mu.Lock()
	if len(settled) != 2 || settled[0] != nil || settled[2] != nil {
		t.Fatalf("settled %v, want frames 0 and 2 written", settled)
	}
	mu.Unlock()
	select {
	case err := <-failures:
		if err == nil || !strings.Contains(err.Error(), "frame callback panicked") {
			t.Fatalf("failure %v, want the panic", err)
		}
	default:
		t.Fatal("the panic was not reported")
	}
	if err := ow.Enqueue([]byte("late\n"), nil); !errors.Is(err, host.ErrWriterClosed) {
		t.Fatalf("enqueue after the panic: %v, want ErrWriterClosed", err)
	}
}
