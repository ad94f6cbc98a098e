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
// after gate opens.
type partialWriter struct {
	once    sync.Once
	entered chan struct{}
	gate    chan struct{}
	err     error
}

func (p *partialWriter) Write(frames ...[]byte) error {
	p.once.Do(func() { close(p.entered) })
	<-p.gate
	if p.err != nil {
		return p.err
	}
	return errors.New("short write")
}

// A writer that fails while a write is in progress still settles every
// frame: the ones of that write, and the ones queued behind it, none as
// written.
func TestFramesOfAWriteInProgressAreSettledWhenTheWriterFails(t *testing.T) {
	for _, writeErr := range []error{nil, errors.New("broken pipe")} {
		pw := &partialWriter{entered: make(chan struct{}), gate: make(chan struct{}), err: writeErr}
		ow := host.NewOutboundWriter(pw, nil)
		var mu sync.Mutex
		settled := map[int]error{}
		for i := range 3 {
			if err := ow.Enqueue([]byte("frame\n"), host.SettleFunc(func(err error) {
				mu.Lock()
				settled[i] = err
				mu.Unlock()
			})); err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				<-pw.entered // the first frame is being written
			}
		}
		ow.Fail(errors.New("overflow")) // fails while the write is in progress
		close(pw.gate)
		select {
		case <-ow.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the writer loop did not end")
		}
		mu.Lock()
		if len(settled) != 3 {
			t.Fatalf("write error %v: %d of 3 frames settled", writeErr, len(settled))
		}
		for i := range 3 {
			if settled[i] == nil {
				t.Fatalf("write error %v: unwritten frame %d settled as written", writeErr, i)
			}
		}
		mu.Unlock()
	}
}

// heldWriter writes everything; its first write waits until gate opens.
type heldWriter struct {
	once sync.Once
	gate chan struct{}
}

func (h *heldWriter) Write(...[]byte) error {
	h.once.Do(func() { <-h.gate })
	return nil
}

// A frame callback that panics fails the writer, which reports the panic;
// every other frame is still settled, and the writer loop ends.
func TestAFrameCallbackThatPanicsFailsTheWriterAndSettlesTheOthers(t *testing.T) {
	failures := make(chan error, 4)
	hw := &heldWriter{gate: make(chan struct{})}
	ow := host.NewOutboundWriter(hw, func(err error) { failures <- err })
	var mu sync.Mutex
	settled := map[int]error{}
	for i := range 3 {
		if err := ow.Enqueue([]byte("frame\n"), host.SettleFunc(func(err error) {
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
	close(hw.gate) // every frame is queued before the panic
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
