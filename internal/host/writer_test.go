package host_test

import (
	"errors"
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
