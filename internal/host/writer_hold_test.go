package host

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
)

// recordingWriter records what each write wrote.
type recordingWriter struct {
	mu     sync.Mutex
	writes [][]string
}

func (r *recordingWriter) Write(frames ...[]byte) error {
	var w []string
	for _, f := range frames {
		w = append(w, string(f))
	}
	r.mu.Lock()
	r.writes = append(r.writes, w)
	r.mu.Unlock()
	return nil
}

func (r *recordingWriter) written() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Concat(r.writes...)
}

// A held frame is not written, nor anything queued after it, until it is
// released, even once the writer is closing; what was queued before it is
// written at once, and the order is kept.
func TestAHeldFrameWaitsForItsReleaseAndKeepsTheOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recordingWriter{}
		ow := NewOutboundWriter(rec, nil)
		hold := new(frameHold)
		if err := ow.Enqueue([]byte("before\n"), nil); err != nil {
			t.Fatal(err)
		}
		if err := ow.enqueue(outFrame{data: []byte("held\n"), hold: hold}); err != nil {
			t.Fatal(err)
		}
		if err := ow.Enqueue([]byte("after\n"), nil); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got := rec.written(); !slices.Equal(got, []string{"before\n"}) {
			t.Fatalf("written while held: %q", got)
		}
		ow.Close()
		synctest.Wait()
		select {
		case <-ow.Done():
			t.Fatal("the writer ended with a held frame unwritten")
		default:
		}
		ow.release(hold)
		<-ow.Done()
		if got := rec.written(); !slices.Equal(got, []string{"before\n", "held\n", "after\n"}) {
			t.Fatalf("written %q", got)
		}
	})
}

// A writer that fails with a held frame queued settles it with the error;
// releasing it afterwards does nothing.
func TestAHeldFrameIsSettledWhenTheWriterFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recordingWriter{}
		ow := NewOutboundWriter(rec, nil)
		hold := new(frameHold)
		settled := make(chan error, 1)
		if err := ow.enqueue(outFrame{data: []byte("held\n"), hold: hold, done: SettleFunc(func(err error) { settled <- err })}); err != nil {
			t.Fatal(err)
		}
		failure := errors.New("torn down")
		ow.Fail(failure)
		if err := <-settled; !errors.Is(err, failure) {
			t.Fatalf("held frame settled with %v, want %v", err, failure)
		}
		ow.release(hold)
		<-ow.Done()
		if got := rec.written(); len(got) != 0 {
			t.Fatalf("written %q", got)
		}
	})
}
