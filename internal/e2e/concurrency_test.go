package e2e_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/maka-agent/maka/client"
	"github.com/maka-agent/maka/internal/modeltest"
	"github.com/maka-agent/maka/protocol"
)

// TestConcurrentTurnsStayApart starts turns in 16 sessions at once, each
// watched by its own client. The model holds every stream after a first
// chunk; the streams are released one at a time in reverse order, and each
// turn must complete while the ones still held do not. Every subscriber
// sees only its own session's text, in order, and one terminal projection.
func TestConcurrentTurnsStayApart(t *testing.T) {
	const sessions = 16
	type lane struct {
		id      string
		prompt  string
		release chan struct{}
		conn    *client.Conn
		w       *watcher
	}
	lanes := make([]*lane, sessions)
	byPrompt := map[string]*lane{}
	for i := range lanes {
		id := fmt.Sprintf("par-%02d", i)
		lanes[i] = &lane{id: id, prompt: "hello from " + id, release: make(chan struct{})}
		byPrompt[lanes[i].prompt] = lanes[i]
	}
	t.Cleanup(func() { // a failed test still lets every stream end
		for _, l := range lanes {
			select {
			case <-l.release:
			default:
				close(l.release)
			}
		}
	})
	h := newHost(t, func(req *modeltest.Request) modeltest.Reply {
		l := byPrompt[req.LastUser()]
		if l == nil {
			return modeltest.Reply{Status: 400, Body: `{"error":{"message":"unknown prompt"}}`}
		}
		return modeltest.Reply{Chunks: []modeltest.Chunk{
			{Text: l.id + " one "}, {Wait: l.release}, {Text: l.id + " two"},
		}}
	})
	for _, l := range lanes {
		l.conn = h.dial()
		createSession(t, l.conn, l.id, protocol.PermissionModeBypass)
		l.w = watch(t, l.conn, l.id)
	}

	ctx := opCtx(t)
	go1 := make(chan struct{})
	errs := make(chan error, sessions)
	var wg sync.WaitGroup
	for _, l := range lanes {
		wg.Go(func() {
			<-go1
			snap, err := l.conn.StartTurn(ctx, startInput(l.id, "turn-1", l.prompt))
			if err == nil && (snap.SessionID != l.id || snap.Status.Terminal()) {
				err = fmt.Errorf("turn.start answered %+v", snap)
			}
			if err != nil {
				errs <- fmt.Errorf("session %s: %w", l.id, err)
			}
		})
	}
	close(go1)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	// Every stream is held after its first chunk.
	for _, l := range lanes {
		l.w.until(t, "first chunk", hasText("turn-1", l.id+" one "))
	}
	for i := sessions - 1; i >= 0; i-- {
		close(lanes[i].release)
		lanes[i].w.untilTerminal(t, "turn-1")
		for _, held := range lanes[:i] {
			if n := len(terminals(held.w.snapshot(), "turn-1")); n != 0 {
				t.Fatalf("session %s ended while its model stream was held", held.id)
			}
		}
	}

	for _, l := range lanes {
		frames := l.w.barrier(t, l.conn)
		if got, want := deltaText(frames, "turn-1"), l.id+" one "+l.id+" two"; got != want {
			t.Errorf("session %s streamed %q, want %q", l.id, got, want)
		}
		for _, f := range frames {
			switch f := f.(type) {
			case protocol.DeltaFrame:
				if f.SessionID != l.id {
					t.Errorf("session %s's subscriber got a delta of %s", l.id, f.SessionID)
				}
			case protocol.ProjectionFrame:
				if f.Snapshot.Session.SessionID != l.id {
					t.Errorf("session %s's subscriber got a projection of %s", l.id, f.Snapshot.Session.SessionID)
				}
			}
		}
		ends := terminals(frames, "turn-1")
		if len(ends) != 1 || ends[0].Snapshot.RootTurn.Status != protocol.TurnCompleted {
			t.Errorf("session %s: terminal projections %+v", l.id, ends)
		}
		if got := queryTurn(t, l.conn, l.id, "turn-1"); got.Status != protocol.TurnCompleted {
			t.Errorf("session %s: turn.query %+v", l.id, got)
		}
	}
}
