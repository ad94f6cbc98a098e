package tui

import (
	"context"
	"sync"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitLimit bounds every wait of a test for a state.
const waitLimit = 10 * time.Second

// harness drives a model the way a program does, without a terminal:
// messages go through Update, returned commands run in goroutines and
// their results queue up until the test waits for a state.
type harness struct {
	t      *testing.T
	m      *model
	be     *fakeBackend
	ctx    context.Context
	cancel context.CancelFunc
	tr     *tracker
	msgs   chan tea.Msg
	wg     sync.WaitGroup
}

func newHarness(t *testing.T, be *fakeBackend, opts Options) *harness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{t: t, be: be, ctx: ctx, cancel: cancel, tr: &tracker{}, msgs: make(chan tea.Msg, 256)}
	if opts.Width == 0 {
		opts.Width, opts.Height = 100, 40
	}
	h.m = newModel(ctx, be, opts, h.tr)
	t.Cleanup(func() {
		h.cancel()
		h.tr.closeAndWait()
		h.wg.Wait()
	})
	h.run(h.m.Init())
	return h
}

// run executes cmd in the background; its messages are queued.
func (h *harness) run(cmd tea.Cmd) {
	if cmd == nil {
		return
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		msg := cmd()
		if batch, ok := msg.(tea.BatchMsg); ok {
			for _, c := range batch {
				h.run(c)
			}
			return
		}
		if msg == nil {
			return
		}
		select {
		case h.msgs <- msg:
		case <-h.ctx.Done():
		}
	}()
}

// send applies msg now.
func (h *harness) send(msg tea.Msg) {
	if _, ok := msg.(tea.QuitMsg); ok {
		return
	}
	_, cmd := h.m.Update(msg)
	h.run(cmd)
}

// until applies queued messages until cond holds.
func (h *harness) until(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.NewTimer(waitLimit)
	defer deadline.Stop()
	for !cond() {
		select {
		case msg := <-h.msgs:
			h.send(msg)
		case <-deadline.C:
			h.t.Fatalf("timed out waiting for %s; view:\n%s", what, h.m.View())
		}
	}
}

func (h *harness) key(k tea.KeyType) { h.send(tea.KeyMsg{Type: k}) }

func (h *harness) typ(s string) { h.send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(s)}) }

// attached waits until the session's subscription is open and its
// transcript loaded.
func (h *harness) attached() *fakeStream {
	h.t.Helper()
	h.until("the session to be attached", func() bool { return h.m.stream != nil && !h.m.loading })
	return h.m.stream.(*fakeStream)
}

// push delivers frames through the current stream and waits until the
// model has applied them and any transcript load they caused.
func (h *harness) push(frames ...any) {
	h.t.Helper()
	s := h.m.stream.(*fakeStream)
	want := h.m.framesSeen + len(frames)
	for _, f := range frames {
		s.frames <- f
	}
	h.until("the frames to be applied", func() bool { return h.m.framesSeen >= want && !h.m.loading })
}
