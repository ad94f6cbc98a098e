package e2e_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/protocol"
)

// watcher reads every frame of one session subscription as it arrives, so
// the host never sees a slow consumer, and lets the test wait for a
// condition over the frames received so far.
type watcher struct {
	sessionID string
	sub       *client.Subscription
	done      chan struct{} // closed when the reader exits
	wake      chan struct{} // signalled after each frame or the end

	mu     sync.Mutex
	frames []any
	err    error // why reading ended
}

// watch opens a subscription to sessionID on c and reads it until the
// subscription or the connection ends, or the test ends.
func watch(t *testing.T, c *client.Conn, sessionID string, opts ...client.SubscriptionOption) *watcher {
	t.Helper()
	sub, err := c.OpenSubscription(opCtx(t), sessionID, opts...)
	if err != nil {
		t.Fatalf("subscription.open %s: %v", sessionID, err)
	}
	w := &watcher{sessionID: sessionID, sub: sub, done: make(chan struct{}), wake: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	go w.read(ctx)
	t.Cleanup(func() {
		cancel()
		<-w.done
	})
	return w
}

func (w *watcher) read(ctx context.Context) {
	defer close(w.done)
	for {
		f, err := w.sub.Next(ctx)
		w.mu.Lock()
		if err != nil {
			w.err = err
		} else {
			w.frames = append(w.frames, f)
		}
		w.mu.Unlock()
		select {
		case w.wake <- struct{}{}:
		default:
		}
		if err != nil {
			return
		}
	}
}

// snapshot returns the frames received so far.
func (w *watcher) snapshot() []any {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.frames)
}

// until waits until cond holds over the frames received so far and returns
// them; it fails the test if the subscription ends first or after
// failAfter.
func (w *watcher) until(t *testing.T, what string, cond func(frames []any) bool) []any {
	t.Helper()
	timer := time.NewTimer(failAfter)
	defer timer.Stop()
	for {
		w.mu.Lock()
		frames, err := slices.Clone(w.frames), w.err
		w.mu.Unlock()
		if cond(frames) {
			return frames
		}
		if err != nil {
			t.Fatalf("session %s: waiting for %s: the subscription ended (%v); frames: %s", w.sessionID, what, err, describe(frames))
		}
		select {
		case <-w.wake:
		case <-timer.C:
			t.Fatalf("session %s: no %s within %v; frames: %s", w.sessionID, what, failAfter, describe(frames))
		}
	}
}

// untilTerminal waits for the terminal projection of turnID, or returns at
// once when the subscription opened on it.
func (w *watcher) untilTerminal(t *testing.T, turnID string) []any {
	t.Helper()
	if r := w.sub.Open.Snapshot.RootTurn; r != nil && r.TurnID == turnID && r.Status.Terminal() {
		return w.snapshot()
	}
	return w.until(t, "terminal projection of "+turnID, func(frames []any) bool { return len(terminals(frames, turnID)) > 0 })
}

// barrier archives the session and waits for that projection: every frame
// caused before it has then been received. It checks that the frames are
// gapless and returns those before the archived projection.
func (w *watcher) barrier(t *testing.T, c *client.Conn) []any {
	t.Helper()
	if _, err := c.Call(opCtx(t), protocol.OpSessionLifecycleSet,
		protocol.SessionLifecycleSetInput{SessionID: w.sessionID, Action: protocol.SessionActionArchive}); err != nil {
		t.Fatalf("archive %s: %v", w.sessionID, err)
	}
	frames := w.until(t, "archived projection", func(frames []any) bool {
		if len(frames) == 0 {
			return false
		}
		p, ok := frames[len(frames)-1].(protocol.ProjectionFrame)
		return ok && p.Snapshot.Session.IsArchived
	})
	w.checkGapless(t, frames)
	return frames[:len(frames)-1]
}

// checkGapless fails the test unless frames carry consecutive sequences
// from the subscription's first one.
func (w *watcher) checkGapless(t *testing.T, frames []any) {
	t.Helper()
	next := w.sub.Open.NextSequence
	for i, f := range frames {
		if seq := sequenceOf(f); seq != next {
			t.Fatalf("session %s: frame %d has sequence %d, want %d; frames: %s", w.sessionID, i, seq, next, describe(frames))
		}
		next++
	}
}

func sequenceOf(f any) int64 {
	switch f := f.(type) {
	case protocol.ProjectionFrame:
		return f.Sequence
	case protocol.DeltaFrame:
		return f.Sequence
	case protocol.EventFrame:
		return f.Sequence
	case protocol.ClosedFrame:
		return f.Sequence
	case protocol.NoticeFrame:
		return f.Sequence
	}
	return -1
}

// terminals returns the projections whose root turn is turnID and terminal.
func terminals(frames []any, turnID string) []protocol.ProjectionFrame {
	var out []protocol.ProjectionFrame
	for _, f := range frames {
		if p, ok := f.(protocol.ProjectionFrame); ok {
			if r := p.Snapshot.RootTurn; r != nil && r.TurnID == turnID && r.Status.Terminal() {
				out = append(out, p)
			}
		}
	}
	return out
}

// deltaText concatenates the text deltas of turnID.
func deltaText(frames []any, turnID string) string {
	var b strings.Builder
	for _, f := range frames {
		if d, ok := f.(protocol.DeltaFrame); ok && d.Delta.TurnID == turnID && d.Delta.Kind == protocol.DeltaText {
			b.WriteString(d.Delta.Text)
		}
	}
	return b.String()
}

// hasText is a condition: the text deltas of turnID contain s.
func hasText(turnID, s string) func([]any) bool {
	return func(frames []any) bool { return strings.Contains(deltaText(frames, turnID), s) }
}

// outline summarises frames as a list of steps, repeated steps collapsed:
// "projection:<root status>", "text", and "<tool event type>:<tool name>".
func outline(frames []any) []string {
	names := map[string]string{} // tool use id → tool name
	var out []string
	for _, f := range frames {
		var step string
		switch f := f.(type) {
		case protocol.ProjectionFrame:
			step = "projection:none"
			if r := f.Snapshot.RootTurn; r != nil {
				step = "projection:" + string(r.Status)
			}
		case protocol.DeltaFrame:
			step = f.Delta.Kind
		case protocol.EventFrame:
			if f.Event.Type == "tool_start" {
				names[f.Event.ToolUseID] = f.Event.ToolName
			}
			step = f.Event.Type + ":" + names[f.Event.ToolUseID]
		case protocol.ClosedFrame:
			step = "closed:" + f.Reason
		case protocol.NoticeFrame:
			step = "notice:" + f.Notice.Kind
		default:
			step = fmt.Sprintf("%T", f)
		}
		if len(out) == 0 || out[len(out)-1] != step {
			out = append(out, step)
		}
	}
	return out
}

func describe(frames []any) string { return strings.Join(outline(frames), " ") }
